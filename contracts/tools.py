"""Tool names, argument models and the JSON Schemas shown to the model.

Rule T1 (docs/rules.md): every tool takes a ``reason`` (one sentence, shown to the user);
rule T2: tools whose backing service is not configured are not offered at all.
The argument models are the single source of the JSON Schema passed to the
chat-completions ``tools`` parameter (``openai_tool_schema``).
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from contracts import topics
from contracts.a2a import A2aToolName, is_a2a
from contracts.mcp import McpToolName, is_mcp

ToolName = Literal["kb_search", "kb_follow", "web_search", "web_fetch", "code_exec", "delegate", "history_search"]
ALL_TOOLS: tuple[ToolName, ...] = ("kb_search", "kb_follow", "web_search", "web_fetch", "code_exec")
"""The tools a tool service runs; ``delegate`` (a child task on the bus, team mode) is offered
by the orchestrator itself to supervisors only (docs/agent-rules.md, rules D1-D9); ``history_search`` (the
retriever, over the user's own past questions and answers) only to a user who has some (rule M11)."""
AnyToolName = ToolName | McpToolName | A2aToolName
"""A built-in tool, a tenant's MCP server tool (``mcp.<server>.<tool>``, ``contracts.mcp``) or a tenant's
remote A2A agent (``a2a.<agent>``, ``contracts.a2a``, rule T10)."""

REASON_FIELD = Field(
    description="为什么需要调用这个工具，一句话，会展示给用户 (why this call is needed; shown to the user)",
    max_length=500,
)


class ToolArgs(BaseModel):
    """Base of all tool argument models: unknown keys are rejected."""

    model_config = ConfigDict(extra="forbid")


KB_QUERY_MAX_CHARS = 500
"""Longest ``kb_search`` query (characters)."""


class KbSearchArgs(ToolArgs):
    """Arguments of ``kb_search``: a short query over the knowledge base, plus up to two sub-queries the
    model splits a question into (rule K9: searched with the query and merged; blank or repeated ones are
    ignored, so a poor rewrite costs nothing)."""

    query: str = Field(min_length=1, max_length=KB_QUERY_MAX_CHARS, description="检索词：法律名称、事项、关键词，尽量短 (search terms, short)")
    sub_queries: list[str] = Field(default_factory=list, max_length=2, description=(
        "可选：问题涉及两三个方面时，每个方面一个简短子查询，最多 2 个，与主查询一起检索 "
        "(optional: up to 2 short sub-queries, one per aspect of the question, searched together with the query)"))
    reason: str = REASON_FIELD

    @field_validator("sub_queries", mode="before")
    @classmethod
    def _short_sub_queries(cls, value: object) -> object:
        """Rule K9, fail-open: strip, drop blanks, repeats and non-strings, keep the first 2, each cut to 200
        characters (a sloppy rewrite is trimmed, never refused)."""
        if not isinstance(value, list):
            return []
        kept = dict.fromkeys(q.strip()[:200] for q in value if isinstance(q, str) and q.strip())
        return list(kept)[:2]


FOLLOW_MAX_REFS = 5
"""Rule A30: at most this many articles per ``kb_follow`` call."""


class KbFollowArgs(ToolArgs):
    """Arguments of ``kb_follow`` (rules K17, A30): ids of articles that passages already in the evidence
    cite (each passage's ``refs``, shown to the model as 「引用：…」); the articles come back as evidence."""

    ref_ids: list[str] = Field(min_length=1, max_length=FOLLOW_MAX_REFS, description=(
        "要查看的被引用条文的编号（证据中「引用」后方括号里的 id，如 d744436b60a9:23），最多 5 个 "
        "(ids of cited articles, as listed after 引用 in the evidence; at most 5)"))
    reason: str = REASON_FIELD

    @field_validator("ref_ids")
    @classmethod
    def _distinct_ids(cls, value: list[str]) -> list[str]:
        """Strip and drop repeats and blanks (fail-open; an empty list is refused by ``min_length`` first)."""
        kept = list(dict.fromkeys(v.strip() for v in value if v.strip()))
        if not kept or any(len(v) > 64 for v in kept):
            raise ValueError("ref_ids must be non-empty ids of at most 64 characters")
        return kept


class WebSearchArgs(ToolArgs):
    """Arguments of ``web_search``: a web query plus up to two other phrasings searched at
    the same time (rule W1: up to 3 queries at once)."""

    query: str = Field(min_length=1, max_length=300, description="web search query")
    more_queries: list[str] = Field(default_factory=list, max_length=2,
                                    description="optional: up to 2 other phrasings searched in parallel")
    reason: str = REASON_FIELD


class WebFetchArgs(ToolArgs):
    """Arguments of ``web_fetch``: one http(s) URL to read."""

    url: str = Field(min_length=8, max_length=2000, description="http or https URL of the page to read")
    reason: str = REASON_FIELD


class CodeExecArgs(ToolArgs):
    """Arguments of ``code_exec``: Python source run in the sandbox."""

    code: str = Field(min_length=1, max_length=20000, description="Python 3 code; print() the results you need")
    reason: str = REASON_FIELD


class HistorySearchArgs(ToolArgs):
    """Arguments of ``history_search`` (rules M11, M12): what to look for in the user's own earlier
    questions and answers. Whose history is searched comes from the task, never from the arguments."""

    query: str = Field(min_length=1, max_length=300, description="要在该用户以前的提问和回答中查找的内容 (what to look for in the user's earlier questions and answers)")
    reason: str = REASON_FIELD


class DelegateArgs(ToolArgs):
    """Arguments of ``delegate`` (team mode): one self-contained sub-question for one worker kind."""

    worker: str = Field(min_length=1, max_length=64, description="worker kind, one of those listed in the system prompt")
    task: str = Field(min_length=1, max_length=2000,
                      description="the sub-question, self-contained (the worker sees nothing else)")
    reason: str = REASON_FIELD


Risk = Literal["read_only", "sandboxed", "reversible", "irreversible", "external"]
"""A tool's risk tier (rule T9): ``read_only`` (reads, changes nothing), ``sandboxed`` (runs code
in isolation: effects stay in the sandbox), ``reversible`` (changes something that can be undone),
``irreversible`` (changes something for good), ``external`` (acts on the world outside Conduit)."""

RISK_APPROVAL: dict[str, str] = {"read_only": "never", "sandboxed": "always", "reversible": "never",
                                 "irreversible": "always", "external": "always"}
"""Rule T9: the approval policy of a tier when no policy names the tool (a tenant's
``approval_by_risk`` overrides it tier by tier)."""


class ToolSpec(BaseModel):
    """Static description of one tool: its arguments model, description, request topic, risk tier
    (rule T9) and whether running it twice with the same arguments does no more than once."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    name: ToolName
    description: str
    args_model: type[ToolArgs]
    request_topic: str
    risk: Risk = "read_only"
    idempotent: bool = True


TOOL_SPECS: dict[str, ToolSpec] = {
    "kb_search": ToolSpec(
        name="kb_search",
        description=(
            "检索知识库（中国现行法律法规条文及已导入的文档），返回带编号的原文片段。"
            "回答法律、税务等问题前应优先调用；可以换关键词多次检索。"
            " Search the knowledge base (Chinese laws and ingested documents); returns numbered passages."
        ),
        args_model=KbSearchArgs,
        request_topic=topics.TOOL_REQUESTS_KB,
    ),
    "kb_follow": ToolSpec(
        name="kb_follow",
        description=(
            "查看知识库条文所引用的其他条文（如「依照本法第二十三条」「《民法典》第一千零六十五条」），"
            "返回带编号的原文。参数为证据中「引用」列出的 id；答案取决于被引用条文时调用。"
            " Fetch the articles that knowledge-base passages cite (ids listed after 引用 in the evidence); "
            "returns them as numbered passages."
        ),
        args_model=KbFollowArgs,
        request_topic=topics.TOOL_REQUESTS_KB,
    ),
    "web_search": ToolSpec(
        name="web_search",
        description="Search the web for recent or missing information; returns numbered page passages.",
        args_model=WebSearchArgs,
        request_topic=topics.TOOL_REQUESTS_WEB,
    ),
    "web_fetch": ToolSpec(
        name="web_fetch",
        description="Read one web page by URL; returns its main text as numbered passages.",
        args_model=WebFetchArgs,
        request_topic=topics.TOOL_REQUESTS_WEB,
    ),
    "code_exec": ToolSpec(
        name="code_exec",
        description=(
            "Run Python 3 code in an isolated sandbox without network for exact calculation. "
            "Output is computation, not evidence: say it was computed in the sandbox."
        ),
        args_model=CodeExecArgs,
        request_topic=topics.TOOL_REQUESTS_SANDBOX,
        risk="sandboxed",
        idempotent=False,  # the same code may read the clock or draw random numbers
    ),
    "history_search": ToolSpec(
        name="history_search",
        description=(
            "检索该用户自己以前会话中的提问和回答（仅限本人），返回带编号的记录，可作为证据引用；"
            "用户提到以前问过、上次、之前的结论时调用。"
            " Search this user's own earlier questions and answers (their past sessions only); returns numbered records."
        ),
        args_model=HistorySearchArgs,
        request_topic=topics.TOOL_REQUESTS_KB,
    ),
    "delegate": ToolSpec(
        name="delegate",
        description=(
            "Give one independent part of the question to a worker; it researches it as its own task and "
            "returns a short summary with numbered evidence. Several delegate calls in one reply run in parallel."
        ),
        args_model=DelegateArgs,
        request_topic=topics.QUESTIONS,
    ),
}


def request_topic(name: str) -> str:
    """The request topic of tool ``name``: its spec's, or ``TOOL_REQUESTS_MCP`` for an MCP tool or a remote
    A2A agent (the mcp service runs both: rule T10).

    Raises KeyError for a name that is neither.
    """
    if is_mcp(name) or is_a2a(name):
        return topics.TOOL_REQUESTS_MCP
    return TOOL_SPECS[name].request_topic


def openai_tool_schema(name: str) -> dict[str, Any]:
    """Return the chat-completions ``tools`` entry for tool ``name`` (a fresh copy).

    Shape: ``{"type": "function", "function": {"name", "description", "parameters"}}``
    where ``parameters`` is the JSON Schema of the tool's argument model. Built once
    per tool and cached (pydantic's schema generation cost ~7% of an orchestrator's
    CPU when it ran on every model call). Raises KeyError for an unknown tool.
    """
    return copy.deepcopy(_tool_schema(name))


@functools.cache
def _tool_schema(name: str) -> dict[str, Any]:
    spec = TOOL_SPECS[name]
    schema = spec.args_model.model_json_schema()
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
    return {
        "type": "function",
        "function": {"name": spec.name, "description": spec.description, "parameters": schema},
    }


def arguments_digest(arguments: dict[str, Any]) -> str:
    """SHA-256 hex digest of a tool call's exact arguments (canonical JSON).

    Rule T5: an approval names this digest, so what runs is exactly what was approved.
    """
    raw = json.dumps(arguments, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()
