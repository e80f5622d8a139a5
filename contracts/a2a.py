"""Remote A2A agents as tools: a tenant's registered agents and how their tool is named and offered.

Rule T10 (docs/rules.md): a remote A2A agent registered for a tenant (``CONDUIT_A2A_AGENTS``) is one
tool, ``a2a.<agent>`` everywhere Conduit shows it (events, approvals, records, policies, breakers), offered
to the model as the OpenAI function ``a2a__<agent>`` with one argument, ``message`` (plus the ``reason`` of
rule T1). It rides the catalog of the tenant's external tools (``contracts.mcp.McpCatalog``, written by the
mcp service, which also runs the calls) as an ``McpTool`` whose risk (rule T9) is ``external`` unless the
registration says ``read_only``: a remote agent acts outside Conduit, so a person approves each call by default.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from contracts.mcp import SERVER_NAME_PATTERN, McpTool

A2A_TOOL_PATTERN = r"^a2a\.[a-z0-9][a-z0-9_-]{0,31}$"
"""The canonical name of a remote agent's tool: ``a2a.<agent>``."""
A2aToolName = Annotated[str, StringConstraints(pattern=A2A_TOOL_PATTERN)]
"""A tool name of the form ``a2a.<agent>`` (``A2A_TOOL_PATTERN``)."""

MESSAGE_MAX_CHARS = 4000
"""Longest message the model may send a remote agent (characters)."""


def is_a2a(name: str) -> bool:
    """True for a canonical remote-agent tool name (``a2a.<agent>``)."""
    return re.fullmatch(A2A_TOOL_PATTERN, name) is not None


def tool_name(agent: str) -> str:
    """``a2a.<agent>`` (rule T10)."""
    return f"a2a.{agent}"


class A2aAgentConfig(BaseModel):
    """One remote A2A agent a tenant may ask: its base ``url`` (its card is at
    ``{url}/.well-known/agent-card.json``), ``headers`` sent with every request (its credential, e.g.
    ``Authorization``), ``read_only`` (the tenant vouches that asking it changes nothing: no approval by
    default, rule T9), a ``description`` for the model (default: the card's), and ``timeout_s``, the
    longest a call waits for the agent's answer (seconds; the tool deadline ``tool_timeout_s`` bounds it too).
    """

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=SERVER_NAME_PATTERN, description="agent name: the <agent> of a2a.<agent>")
    url: str = Field(pattern=r"^https?://", max_length=2000, description="the agent's base URL (where its card is)")
    headers: dict[str, str] = Field(default_factory=dict, description="headers sent with every request")
    read_only: bool = Field(default=False, description="asking the agent changes nothing (no approval by default)")
    description: str = Field(default="", max_length=1000, description="what to ask it; default: its card's")
    timeout_s: float = Field(default=120.0, gt=0, le=600, description="seconds a call waits for the answer")

    def digest(self) -> str:
        """SHA-256 hex of the canonical JSON of the whole configuration (its card is cached under it)."""
        raw = json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(raw.encode("utf-8")).hexdigest()


class AskAgentArgs(BaseModel):
    """The arguments the model gives a remote agent's tool: one self-contained ``message``."""

    model_config = ConfigDict(extra="forbid")

    message: str = Field(min_length=1, max_length=MESSAGE_MAX_CHARS,
                         description="the question or request for the remote agent, self-contained (it sees nothing else)")
    reason: str = Field(default="", max_length=500)


def agent_tool(config: A2aAgentConfig, card_description: str = "") -> McpTool:
    """The ``McpTool`` offering agent ``config`` to the model (rule T10): named ``a2a.<agent>`` /
    ``a2a__<agent>``, one ``message`` argument, risk ``external`` unless ``read_only`` (rule T9)."""
    schema: dict[str, Any] = {"type": "object", "properties": {
        "message": AskAgentArgs.model_json_schema()["properties"]["message"]}, "required": ["message"]}
    schema["properties"]["message"].pop("title", None)
    description = config.description or card_description or f"the remote agent {config.name}"
    return McpTool(name=tool_name(config.name), function=f"a2a__{config.name}", server=config.name, tool="message",
                   description=description[:1000], input_schema=schema, read_only=config.read_only,
                   destructive=False, open_world=True, idempotent=False)


def from_settings(agents: dict[str, list[dict]], tenant_id: str) -> list[A2aAgentConfig]:
    """The agents ``CONDUIT_A2A_AGENTS`` gives ``tenant_id`` (its own, then those of ``*`` whose name it
    does not use). Raises ``pydantic.ValidationError`` for a malformed entry."""
    own = [A2aAgentConfig.model_validate(c) for c in agents.get(tenant_id, [])]
    names = {c.name for c in own}
    shared = [A2aAgentConfig.model_validate(c) for c in agents.get("*", []) if tenant_id != "*"]
    return own + [c for c in shared if c.name not in names]
