"""MCP tools in: server configurations, the tools they offer, and how tools are named.

Rule X1 (docs/mcp.md): a tenant's MCP server tool is named ``mcp.<server>.<tool>`` everywhere
Conduit shows it (events, approvals, records, quotas, policies); the model is offered the same
tool under an OpenAI function name (``^[A-Za-z0-9_-]{1,64}$``, no dots): ``mcp__<server>__<tool>``,
or, when the tool name has other characters or the whole is too long, a cut name ending in
``_`` + 8 hex digits of the canonical name's SHA-256 (``function_name``), so two tools never share one.
Rule X2: a server's tool list is cached under the digest of its configuration (``McpServerConfig.digest``);
a changed configuration is listed again.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

SERVER_NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,31}$"
"""An MCP server's name in Conduit (lower case, digits, ``_``, ``-``; at most 32 characters)."""
MCP_TOOL_PATTERN = r"^mcp\.[a-z0-9][a-z0-9_-]{0,31}\.[A-Za-z0-9_./-]{1,128}$"
"""The canonical name of an MCP tool: ``mcp.<server>.<tool>`` (tool names of 1-128 characters
of the MCP specification's set)."""
McpToolName = Annotated[str, StringConstraints(pattern=MCP_TOOL_PATTERN)]
"""A tool name of the form ``mcp.<server>.<tool>`` (``MCP_TOOL_PATTERN``)."""

OPENAI_FUNCTION_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
"""What an OpenAI-compatible endpoint accepts as a function name."""
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")

REASON_PROPERTY = {"type": "string", "maxLength": 500,
                   "description": "为什么需要调用这个工具，一句话，会展示给用户 (why this call is needed; shown to the user)"}
"""The ``reason`` argument added to every MCP tool's schema (rule T1); removed before the call."""


def is_mcp(name: str) -> bool:
    """True for a canonical MCP tool name (``mcp.<server>.<tool>``)."""
    return re.fullmatch(MCP_TOOL_PATTERN, name) is not None


def canonical_name(server: str, tool: str) -> str:
    """``mcp.<server>.<tool>`` (rule X1)."""
    return f"mcp.{server}.{tool}"


def function_name(server: str, tool: str) -> str:
    """The OpenAI function name of ``mcp.<server>.<tool>`` (rule X1): ``mcp__<server>__<tool>``
    when that is at most 64 characters of ``[A-Za-z0-9_-]``, else the unsafe characters replaced
    by ``_``, cut to 55 characters, and ``_<8 hex digits of the canonical name's SHA-256>`` appended."""
    plain = f"mcp__{server}__{tool}"
    if OPENAI_FUNCTION_NAME.fullmatch(plain):
        return plain
    suffix = hashlib.sha256(canonical_name(server, tool).encode("utf-8")).hexdigest()[:8]
    return f"{_UNSAFE.sub('_', plain)[:55]}_{suffix}"


class McpServerConfig(BaseModel):
    """One MCP server a tenant uses: a stdio ``command`` (argv list) or a streamable HTTP ``url``.

    ``env`` is added to a command's environment; ``headers`` are sent with every HTTP request
    (e.g. an ``Authorization`` header); ``timeout_s`` bounds connecting and listing (seconds).
    Raises ``ValueError`` (pydantic ``ValidationError``) unless exactly one of ``command``/``url`` is set.
    """

    model_config = ConfigDict(extra="forbid", json_schema_extra={"oneOf": [{"required": ["command"]}, {"required": ["url"]}]})

    name: str = Field(pattern=SERVER_NAME_PATTERN, description="server name: the <server> of mcp.<server>.<tool>")
    command: list[str] | None = Field(default=None, min_length=1, description="stdio: the command and its arguments")
    url: str | None = Field(default=None, pattern=r"^https?://", max_length=2000, description="streamable HTTP endpoint")
    env: dict[str, str] = Field(default_factory=dict, description="stdio: extra environment variables")
    headers: dict[str, str] = Field(default_factory=dict, description="HTTP: headers sent with every request")
    timeout_s: float = Field(default=30.0, gt=0, le=300, description="seconds to connect and list the tools")

    @model_validator(mode="after")
    def _one_transport(self) -> "McpServerConfig":
        if (self.command is None) == (self.url is None):
            raise ValueError("give exactly one of command (stdio) or url (streamable HTTP)")
        return self

    @property
    def transport(self) -> Literal["stdio", "http"]:
        """``stdio`` for a command, ``http`` for a URL."""
        return "stdio" if self.command else "http"

    def digest(self) -> str:
        """SHA-256 hex of the canonical JSON of the whole configuration (rule X2)."""
        raw = json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(raw.encode("utf-8")).hexdigest()

    def public(self) -> dict[str, Any]:
        """The configuration as shown to admins: env and header values hidden."""
        data = self.model_dump(mode="json")
        data["env"] = {k: "***" for k in self.env}
        data["headers"] = {k: "***" for k in self.headers}
        return data


class McpTool(BaseModel):
    """One tool of a tenant's MCP server as offered to the model.

    ``name`` is canonical (``mcp.<server>.<tool>``), ``function`` the OpenAI function name
    (rule X1), ``tool`` the server's own name, ``input_schema`` its JSON Schema; ``read_only``,
    ``destructive``, ``open_world`` and ``idempotent`` the server's annotations (``readOnlyHint`` …,
    MCP's defaults when absent: not read-only, destructive, open world, not idempotent), from which
    ``risk`` follows (rule T9; the approval default asks unless it is read-only, rule X3).
    """

    name: str
    function: str
    server: str
    tool: str
    description: str = ""
    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    read_only: bool = False
    destructive: bool = True
    open_world: bool = True
    idempotent: bool = False

    @property
    def risk(self) -> str:
        """Rule T9: ``read_only``; else ``external`` (open world), ``irreversible`` (destructive) or ``reversible``."""
        if self.read_only:
            return "read_only"
        return "external" if self.open_world else "irreversible" if self.destructive else "reversible"

    def openai_schema(self) -> dict[str, Any]:
        """The chat-completions ``tools`` entry: the server's schema plus a required ``reason`` (rule T1)."""
        schema = json.loads(json.dumps(self.input_schema)) if self.input_schema else {}
        schema.setdefault("type", "object")
        schema.pop("title", None)
        props = schema.setdefault("properties", {})
        props.setdefault("reason", REASON_PROPERTY)
        schema["required"] = list(dict.fromkeys([*schema.get("required", []), "reason"]))
        source = f"A2A agent {self.server}" if self.name.startswith("a2a.") else f"MCP {self.server}"  # rule T10
        description = f"[{source}] {self.description}".strip()[:1000]
        return {"type": "function", "function": {"name": self.function, "description": description,
                                                 "parameters": schema}}

    def call_arguments(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """The arguments sent to the server: ``reason`` removed unless the server's schema has it."""
        if "reason" in (self.input_schema.get("properties") or {}):
            return dict(arguments)
        return {k: v for k, v in arguments.items() if k != "reason"}


class McpServerStatus(BaseModel):
    """A server's state as the mcp service last saw it: ``ok`` with its ``tools`` (canonical
    names), or ``error``; ``digest`` of the configuration it was listed under (rule X2);
    ``checked_at`` in epoch seconds; ``source`` where the configuration came from."""

    name: str
    source: Literal["settings", "api"]
    transport: Literal["stdio", "http", "a2a"]
    digest: str
    ok: bool
    error: str | None = None
    tools: list[str] = Field(default_factory=list)
    checked_at: float = 0.0


class McpCatalog(BaseModel):
    """A tenant's external tools offered to the model: the tools of its MCP servers that answered and its
    remote A2A agents whose card was read (rule T10, ``contracts.a2a``); every server's and agent's status
    (an agent's ``transport`` is ``a2a``). Written by the mcp service, read by the orchestrator at a task's start."""

    tenant_id: str
    tools: list[McpTool] = Field(default_factory=list)
    servers: list[McpServerStatus] = Field(default_factory=list)
    agents: list[McpServerStatus] = Field(default_factory=list)
