"""The channel table: every Kafka topic, the event types it carries and their partition key.

One row per topic of ``contracts.topics.ALL_TOPICS``, in that order. Three readers:

- ``conduit.runtime.bus.publish`` refuses an event whose ``type`` is not listed for the
  topic (``check``: ``UnknownChannel``), so a producer cannot write a topic's wrong event;
- each service's subscription takes its topics and message model from here
  (``subscription(group)``, ``events_on(topic)``);
- ``ops.asyncapi`` writes ``docs/asyncapi.yaml`` from the same rows.

Partition key rule: every event is keyed by its envelope's ``task_id`` (UTF-8), so one
task's events stay in order within one partition (``partition_key``). For the retriever's
search and document events ``task_id`` holds the search ``request_id`` or the document's
``index_document_id`` (one document's events stay in order). Why: docs/architecture.md
("Channels").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Union

from pydantic import Field

from contracts import topics
from contracts.documents import DocumentDeleteRequested, DocumentIngestRequested, SearchRequested
from contracts.envelope import Envelope
from contracts.memory import MemoryForgetRequested, MemoryIndexRequested, MemoryRecallRequested, MemoryVectorsIndexed
from contracts.events import (
    AgentEvent,
    ApprovalDecided,
    DeadLetter,
    QuestionAsked,
    TaskCancelled,
    ToolRequested,
    ToolResult,
)


class UnknownChannel(ValueError):
    """An event was sent to a topic that does not carry its type (or to a topic not in the table)."""


@dataclass(frozen=True)
class Channel:
    """One topic and how it is used.

    Attributes:
        topic: name from ``contracts.topics``.
        events: envelope classes it carries (distinct ``type`` literals).
        key: the envelope field whose UTF-8 bytes are the Kafka key (always ``task_id``).
        producers: services that write it (for the AsyncAPI document).
        consumers: Conduit consumer groups that read it (``contracts.topics.GROUP_*``).
        summary: one line for the AsyncAPI channel description.
    """

    topic: str
    events: tuple[type[Envelope], ...]
    producers: str
    consumers: tuple[str, ...]
    summary: str
    key: str = "task_id"

    @property
    def types(self) -> frozenset[str]:
        """The ``type`` strings of ``events``."""
        return frozenset(_type_of(e) for e in self.events)

    @property
    def model(self) -> Any:
        """The message model: the one envelope class, or their union discriminated by ``type``."""
        return message_model(self.events)


def _type_of(cls: type[Envelope]) -> str:
    """The fixed ``type`` literal of an envelope class."""
    return cls.model_fields["type"].default


def message_model(events: tuple[type[Envelope], ...]) -> Any:
    """``events[0]`` when there is one class, else ``Annotated[Union[...], Field(discriminator="type")]``."""
    if len(events) == 1:
        return events[0]
    return Annotated[Union[events], Field(discriminator="type")]  # noqa: UP007 - a runtime tuple of classes


CHANNELS: tuple[Channel, ...] = (
    Channel(topics.QUESTIONS, (QuestionAsked,), "gateway, orchestrator", (topics.GROUP_ORCHESTRATOR,),
            "A new question (QuestionAsked); starts a task. The orchestrator writes a worker's question "
            "(payload.child) for a supervisor's delegate call (team mode)."),
    Channel(topics.CONTROL, (TaskCancelled, ApprovalDecided), "gateway, orchestrator", (topics.GROUP_ORCHESTRATOR,),
            "Cancellation (TaskCancelled) and human approval decisions (ApprovalDecided) for a running task. "
            "The orchestrator cancels a supervisor's open workers (team mode)."),
    Channel(topics.TOOL_REQUESTS_KB, (ToolRequested,), "orchestrator", (topics.GROUP_RETRIEVER,),
            "kb_search tool calls for the retriever."),
    Channel(topics.TOOL_REQUESTS_WEB, (ToolRequested,), "orchestrator", (topics.GROUP_WEB,),
            "web_search / web_fetch tool calls for the web service."),
    Channel(topics.TOOL_REQUESTS_SANDBOX, (ToolRequested,), "orchestrator", (topics.GROUP_SANDBOX,),
            "code_exec tool calls for the sandbox."),
    Channel(topics.TOOL_REQUESTS_MCP, (ToolRequested,), "orchestrator", (topics.GROUP_MCP,),
            "Calls of tenants' external tools for the mcp service: MCP server tools (mcp.<server>.<tool>) and "
            "remote A2A agents (a2a.<agent>, rule T10)."),
    Channel(topics.TOOL_RESULTS, (ToolResult,), "retriever, web, sandbox, mcp, orchestrator", (topics.GROUP_ORCHESTRATOR,),
            "The outcome of one tool call (ToolResult), matched by call_id / idempotency_key; a worker's "
            "task reports to its supervisor's delegate call here (team mode)."),
    Channel(topics.AGENT_EVENTS, (AgentEvent,), "orchestrator", (),
            "PUBLIC. Coarse progress of every task (AgentEvent): task.started, tool.requested, "
            "tool.completed, task.completed, task.failed, task.cancelled. Subscribe with your own "
            "consumer group; see docs/events.md."),
    Channel(topics.DEAD_LETTER, (DeadLetter,), "any consumer", (),
            "Messages no consumer could parse or handle after retries (DeadLetter), for inspection and replay."),
    Channel(topics.RETRIEVER_REQUESTS, (SearchRequested, MemoryRecallRequested),
            "gateway, orchestrator", (topics.GROUP_RETRIEVER,),
            "The retriever's reads: search without the agent (SearchRequested; the reply goes to Redis "
            "conduit:reply:{request_id}) and the recall of long-term memory and the semantic cache "
            "(MemoryRecallRequested from the orchestrator; contracts/memory.py). Read by any one retriever "
            "replica (the shared group), by its one consumer with the kb_search requests."),
    Channel(topics.RETRIEVER_WRITES, (DocumentIngestRequested, DocumentDeleteRequested,
                                      MemoryIndexRequested, MemoryForgetRequested, MemoryVectorsIndexed),
            "gateway, orchestrator, retriever", (topics.GROUP_RETRIEVER,),
            "The retriever's writes (rule K10): document ingestion/deletion (DocumentIngestRequested, "
            "DocumentDeleteRequested from the gateway; key: the document's store id) and long-term memory and "
            "cache indexing (MemoryIndexRequested from the orchestrator, MemoryForgetRequested from the gateway). "
            "With one shared store (a Qdrant server) or one replica, read once in the shared group; with N "
            "replicas on the embedded store, every replica K reads all of it in a group of its own "
            "(conduit-retriever-writes-K); there one replica embeds each MemoryIndexRequested and publishes the "
            "vectors (MemoryVectorsIndexed) that every replica applies."),
)
"""Every topic of ``contracts.topics.ALL_TOPICS``, in the same order."""

BY_TOPIC: dict[str, Channel] = {c.topic: c for c in CHANNELS}
_TYPES: dict[str, frozenset[str]] = {c.topic: c.types for c in CHANNELS}


def check(topic: str, event_type: str) -> None:
    """Raise ``UnknownChannel`` unless ``topic`` carries events of ``event_type``.

    The message names the topic's listed types, or says the topic is not in the table.
    """
    allowed = _TYPES.get(topic)
    if allowed is None:
        raise UnknownChannel(f"topic {topic!r} is not in contracts/channels.py CHANNELS")
    if event_type not in allowed:
        raise UnknownChannel(
            f"topic {topic!r} does not carry {event_type!r} events (contracts/channels.py lists: "
            f"{', '.join(sorted(allowed))})")


def events_on(topic: str) -> tuple[type[Envelope], ...]:
    """Envelope classes ``topic`` carries; raises ``UnknownChannel`` for a topic not in the table."""
    try:
        return BY_TOPIC[topic].events
    except KeyError:
        raise UnknownChannel(f"topic {topic!r} is not in contracts/channels.py CHANNELS") from None


def subscription(group: str) -> tuple[tuple[str, ...], Any]:
    """What consumer group ``group`` reads: ``(topics, message model)``.

    The model is the union (discriminated by ``type``) of every event of those topics.
    Raises ``UnknownChannel`` when no channel lists ``group`` as a consumer.
    """
    read = tuple(c.topic for c in CHANNELS if group in c.consumers)
    if not read:
        raise UnknownChannel(f"no channel of contracts/channels.py is read by group {group!r}")
    events = tuple(dict.fromkeys(e for t in read for e in BY_TOPIC[t].events))
    return read, message_model(events)


def partition_key(event: Envelope) -> bytes:
    """Kafka key of ``event``: its ``task_id`` as UTF-8 bytes (the key rule above)."""
    return topics.partition_key(event.task_id)
