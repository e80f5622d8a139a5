"""OpenAI-compatible chat bodies: ``POST /v1/chat/completions`` and ``GET /v1/models``.

Requests follow OpenAI's Chat Completions API; fields Conduit does not use (``temperature``,
``tools``, ...) are accepted and ignored, so existing SDKs and chat front ends work unchanged.
One request extension field, ``conduit`` (``ConduitOptions``; the SDKs send it with
``extra_body={"conduit": {...}}``), limits the question to some documents or collections.
Answers follow OpenAI's shapes plus one extension field, ``conduit`` (``ConduitExtension``):
the task, the session, the checked citations and how the answer was made.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from contracts.evidence import Citation
from contracts.scope import COLLECTIONS_DOC, DOCUMENT_IDS_DOC, Collections, DocumentIds
from contracts.tools import ToolName

MODES: dict[str, tuple[str, list[ToolName] | None]] = {
    "conduit": ("the full agent: every tool the tenant allows", None),
    "conduit-kb": ("knowledge base only (kb_search)", ["kb_search"]),
    "conduit-research": ("knowledge base and the web, no code execution", ["kb_search", "web_search", "web_fetch"]),
}
"""The agent modes served as models: model id -> (description, the task's ``allowed_tools``)."""


class ChatMessage(BaseModel):
    """One message of the conversation. ``content`` is text or a list of parts (only
    ``{"type": "text", "text": ...}`` parts are read). ``system``/``developer`` messages are
    ignored (Conduit's agent has its own instructions)."""

    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None

    def text(self) -> str:
        """The message's text: the string, or its text parts joined by newlines."""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(str(p.get("text", "")) for p in self.content or [] if p.get("type") == "text")


class StreamOptions(BaseModel):
    """``stream_options``: ``include_usage`` sends a last chunk with ``usage`` and no choices."""

    model_config = ConfigDict(extra="allow")
    include_usage: bool = False


class ConduitOptions(BaseModel):
    """The request's ``conduit`` extension field: the question's scope, as ``POST /v1/tasks`` takes it
    (``document_ids``, ``collections``; ``contracts.scope``). Unknown keys are refused."""

    model_config = ConfigDict(extra="forbid")

    document_ids: DocumentIds | None = Field(default=None, description=DOCUMENT_IDS_DOC)
    collections: Collections | None = Field(default=None, description=COLLECTIONS_DOC)


class ChatCompletionRequest(BaseModel):
    """``POST /v1/chat/completions`` body: ``model`` is one of ``MODES``; the last ``user``
    message is the question; the user and assistant messages before it name the session;
    ``conduit`` (``ConduitOptions``) limits the question to some documents or collections."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(max_length=128)
    messages: list[ChatMessage] = Field(min_length=1, max_length=1000)
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    user: str | None = None
    conduit: ConduitOptions | None = None


class ConduitExtension(BaseModel):
    """The ``conduit`` field of a completion (and of a stream's last chunk).

    ``status`` is the task's end (``completed``, ``needs_input``: the answer is the agent's
    question back); ``answer`` the checked answer as ``GET /v1/tasks/{id}`` has it (``[n]``
    markers, no footnotes); ``citations`` what each ``[^n]`` footnote points at.
    """

    task_id: str
    session_id: str
    status: str
    answer: str = ""
    citations: list[Citation] = Field(default_factory=list)
    mode: str | None = None
    confidence: float | None = None


class ModelCard(BaseModel):
    """One ``GET /v1/models`` item: an agent mode."""

    id: str
    object: Literal["model"] = "model"
    created: int = 0
    owned_by: str = "conduit"
    description: str = ""
    model: str | None = None
    """A configured model's own name at its endpoint (rule A20; None: an agent mode)."""
    tools: bool | None = None
    """The configured model calls tools (None: an agent mode)."""


class ModelList(BaseModel):
    """``GET /v1/models``."""

    object: Literal["list"] = "list"
    data: list[ModelCard]
