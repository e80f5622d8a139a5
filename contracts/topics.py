"""Kafka topic names and partition keys: the one place they are defined.

Ordering rule: every message about a task is keyed by its ``task_id``
(``partition_key``), so a task's events stay in order within one partition.
Consumer groups are named per service so each service scales alone.
"""

from __future__ import annotations

PREFIX = "conduit"

QUESTIONS = f"{PREFIX}.questions"  # QuestionAsked: gateway -> orchestrator
CONTROL = f"{PREFIX}.control"  # TaskCancelled, ApprovalDecided: gateway -> orchestrator
TOOL_REQUESTS_KB = f"{PREFIX}.tools.kb.requests"  # ToolRequested(kb_search) -> retriever
TOOL_REQUESTS_WEB = f"{PREFIX}.tools.web.requests"  # ToolRequested(web_search|web_fetch) -> web
TOOL_REQUESTS_SANDBOX = f"{PREFIX}.tools.sandbox.requests"  # ToolRequested(code_exec) -> sandbox
TOOL_REQUESTS_MCP = f"{PREFIX}.tools.mcp.requests"  # ToolRequested(mcp.<server>.<tool> | a2a.<agent>) -> mcp
TOOL_RESULTS = f"{PREFIX}.tools.results"  # ToolResult: tool services -> orchestrator
AGENT_EVENTS = f"{PREFIX}.agent.events"  # public, coarse AgentEvent stream for other teams
DEAD_LETTER = f"{PREFIX}.dead-letter"  # DeadLetter: messages no consumer could handle
RETRIEVER_REQUESTS = f"{PREFIX}.retriever.requests"  # reads: SearchRequested, MemoryRecallRequested -> retriever
RETRIEVER_WRITES = f"{PREFIX}.retriever.writes"  # writes: DocumentIngest/DeleteRequested, MemoryIndex/ForgetRequested (rule K10)

ALL_TOPICS: tuple[str, ...] = (
    QUESTIONS,
    CONTROL,
    TOOL_REQUESTS_KB,
    TOOL_REQUESTS_WEB,
    TOOL_REQUESTS_SANDBOX,
    TOOL_REQUESTS_MCP,
    TOOL_RESULTS,
    AGENT_EVENTS,
    DEAD_LETTER,
    RETRIEVER_REQUESTS,
    RETRIEVER_WRITES,
)

# consumer group ids, one per service; each service has one consumer, so every
# member of a group has identical subscriptions (the orchestrator's group reads
# QUESTIONS, TOOL_RESULTS and CONTROL)
GROUP_ORCHESTRATOR = f"{PREFIX}-orchestrator"
GROUP_RETRIEVER = f"{PREFIX}-retriever"
GROUP_WEB = f"{PREFIX}-web"
GROUP_SANDBOX = f"{PREFIX}-sandbox"
GROUP_MCP = f"{PREFIX}-mcp"
GROUP_RETRIEVER_WRITES = f"{PREFIX}-retriever-writes"
"""Prefix of the per-replica write groups (``retriever_writes_group``)."""


def retriever_writes_group(replica: int) -> str:
    """Consumer group in which retriever replica ``replica`` (1-based) reads ``RETRIEVER_WRITES`` when
    each replica holds its own copy of the embedded store (rule K10): ``conduit-retriever-writes-K``,
    one group per replica, so every replica applies every write. Raises ValueError for ``replica`` < 1."""
    if replica < 1:
        raise ValueError(f"retriever replica index must be >= 1, got {replica}")
    return f"{GROUP_RETRIEVER_WRITES}-{replica}"


def partition_key(task_id: str) -> bytes:
    """Partition key of every message about a task: its ``task_id`` as UTF-8 bytes."""
    return task_id.encode("utf-8")
