"""Tenants' remote A2A agents as tools (``a2a.<agent>``, rule T10), run by the mcp service with the ``a2a-sdk`` client.

``RemoteAgents.listed`` reads an agent's card (``{url}/.well-known/agent-card.json``) when its configuration is
new or changed, after ``mcp_list_ttl_s``, and a failing one again with the MCP servers' back-off (rule X2's
timing); an agent whose card was read is offered (``contracts.a2a.agent_tool``), a failing one is withheld and
its status says why. ``RemoteAgents.call`` sends the model's ``message`` to the agent (streaming when its card
says so), follows the remote task until it ends (polling ``GetTask`` when a stream ends early) within the
call's deadline, and returns the answer artifact with its sources as one evidence item (``agentreply``).

Rule T10's idempotency: the A2A ``messageId`` is derived from the call's idempotency key, so a run of the
same call again (a claim taken over after a crash, rule T8) sends the same message id; an agent that keys
on it (Conduit does: it is the ``Idempotency-Key`` of the task, rule G1) answers with the same task.
Rule T11: every request (card, JSON-RPC, polls) goes through the SSRF guard; ``a2a_allow_private`` lets
loopback and private addresses through (tests, local deployments). Redirects are not followed.

Failures (rule T4): a refused address -> ``forbidden``; an agent not registered -> ``forbidden``; unreachable,
timed out, HTTP 5xx/429 -> ``transient`` (retried, breaker); the remote task failed, was rejected or
cancelled, or waits for input or authorization -> ``business`` (the model reads why).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx
from pydantic import ValidationError

from conduit.runtime.settings import Settings
from conduit.runtime.ssrf import AddressPolicy, BlockedAddress, guarded_transport
from conduit.runtime.toolservice import ToolFailure, ToolOutput
from contracts.a2a import A2aAgentConfig, AskAgentArgs, agent_tool, from_settings
from contracts.events import ToolRequested
from contracts.mcp import McpServerStatus, McpTool

if TYPE_CHECKING:  # rule O13: the a2a-sdk loads with the first agent's card (docs/operations.md, "Memory")
    from a2a.types.a2a_pb2 import AgentCard

    from services.mcp.agentreply import Reply

log = logging.getLogger("conduit.mcp.agents")

POLL_S = 1.0
"""Seconds between two ``GetTask`` polls of a remote task whose stream ended before it did."""


@dataclass
class CardState:
    """The card of one agent configuration as last read: ``card`` or ``error``; epoch seconds."""

    card: AgentCard | None = None
    error: str | None = None
    read_at: float = 0.0
    tried_at: float = 0.0
    failures: int = 0


def message_id(idempotency_key: str) -> str:
    """The A2A ``messageId`` of a call (rule T10): ``conduit-`` + 32 hex digits of its idempotency key's SHA-256."""
    return "conduit-" + hashlib.sha256(idempotency_key.encode("utf-8")).hexdigest()[:32]


class RemoteAgents:
    """The mcp service's remote agents: cards by configuration digest, the SSRF policy (rule T11)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.policy = AddressPolicy(allow_private=settings.mcp.a2a_allow_private)
        self.cards: dict[str, CardState] = {}
        if settings.mcp.a2a_allow_private:
            log.warning("a2a_allow_private is on: remote agents on loopback and private addresses are reached")

    def configs(self, tenant_id: str) -> list[A2aAgentConfig]:
        """The agents of ``tenant_id`` (``CONDUIT_A2A_AGENTS``); a malformed setting is logged and gives none."""
        try:
            return from_settings(self.settings.mcp.a2a_agents, tenant_id)
        except ValidationError as exc:
            log.error("CONDUIT_A2A_AGENTS is malformed: %s", exc)
            return []

    def tenants(self) -> set[str]:
        """Tenants named in ``CONDUIT_A2A_AGENTS`` with at least one agent (``*`` stands for itself)."""
        return {t for t, agents in self.settings.mcp.a2a_agents.items() if agents}

    def http(self, config: A2aAgentConfig, timeout_s: float) -> httpx.AsyncClient:
        """An httpx client for ``config``: its headers, the SSRF guard (rule T11), no redirects, no env proxies."""
        return httpx.AsyncClient(transport=guarded_transport(self.policy, max_connections=4), headers=config.headers,
                                 follow_redirects=False, trust_env=False,
                                 timeout=httpx.Timeout(timeout_s, connect=min(5.0, timeout_s)))

    async def card(self, config: A2aAgentConfig, timeout_s: float) -> AgentCard:
        """Read the agent's card and keep it; raises ``ToolFailure`` (module doc) when it cannot be read."""
        from a2a.client import A2ACardResolver  # noqa: PLC0415 - rule O13

        state = self.cards.setdefault(config.digest(), CardState())
        state.tried_at = time.time()
        try:
            async with self.http(config, timeout_s) as http:
                card = await A2ACardResolver(http, config.url).get_agent_card()
        except BaseException as exc:  # noqa: BLE001 - recorded, then raised as a ToolFailure (or re-raised)
            failure = _failure(config, exc)
            state.error, state.failures = failure.error.message, state.failures + 1
            raise failure from exc
        state.card, state.error, state.read_at, state.failures = card, None, time.time(), 0
        return card

    async def listed(self, config: A2aAgentConfig, source: str = "settings") -> tuple[McpServerStatus, list[McpTool]]:
        """The agent's status and offered tool, reading its card when due (rule X2's timing)."""
        s, now = self.settings.mcp, time.time()
        state = self.cards.setdefault(config.digest(), CardState())
        if state.error is None:
            due = state.card is None or now - state.read_at >= s.mcp_list_ttl_s
        else:
            due = now - state.tried_at >= min(s.mcp_list_ttl_s, s.mcp_refresh_s * 2 ** max(0, state.failures - 1))
        if due:
            try:
                await self.card(config, min(config.timeout_s, 30.0))
            except ToolFailure as exc:
                log.warning("a2a agent %s failed: %s", config.name, exc.error.message)
        tools = [agent_tool(config, state.card.description)] if state.card is not None and state.error is None else []
        status = McpServerStatus(name=config.name, source=source, transport="a2a",  # type: ignore[arg-type]
                                 digest=config.digest(), ok=state.error is None and state.card is not None,
                                 error=state.error, tools=[t.name for t in tools], checked_at=state.tried_at or now)
        return status, tools

    async def call(self, arguments: dict[str, Any], request: ToolRequested, deadline_s: float) -> ToolOutput:
        """Ask the agent of ``request.payload.tool`` the model's ``message``; the answer as evidence (module doc).
        ``deadline_s``: the tool service's deadline (seconds); the agent's ``timeout_s`` may shorten it."""
        name = request.payload.tool
        config = next((c for c in self.configs(request.tenant_id) if f"a2a.{c.name}" == name), None)
        if config is None:
            raise ToolFailure("a2a_agent_not_configured", f"no remote agent {name!r} for this tenant",
                              hint="use another tool", kind="forbidden")
        try:
            args = AskAgentArgs.model_validate(arguments)
        except ValidationError as exc:
            raise ToolFailure("bad_arguments", str(exc)[:500], hint="give one self-contained message",
                              kind="bad_arguments") from exc
        timeout_s = min(config.timeout_s, deadline_s)
        try:
            async with asyncio.timeout(timeout_s):
                reply = await self._ask(config, args.message, message_id(request.payload.idempotency_key), timeout_s)
        except TimeoutError as exc:
            raise ToolFailure("a2a_timeout", f"{name} did not answer within {timeout_s:g} s", kind="transient",
                              hint="try again later or answer without it") from exc
        except ToolFailure:
            raise
        except BaseException as exc:  # noqa: BLE001 - mapped to a ToolFailure kind (module doc)
            raise _failure(config, exc) from exc
        return _output(name, config, reply, self.settings.retrieval.chunk_max_chars)

    async def _ask(self, config: A2aAgentConfig, text: str, mid: str, timeout_s: float) -> Reply:
        from a2a.client import ClientConfig, ClientFactory  # noqa: PLC0415 - rule O13
        from a2a.types.a2a_pb2 import GetTaskRequest, Message, Part, Role, SendMessageRequest, StreamResponse  # noqa: PLC0415

        from services.mcp import agentreply  # noqa: PLC0415

        state = self.cards.get(config.digest())
        card = state.card if state is not None and state.card is not None else await self.card(config, timeout_s)
        reply = agentreply.Reply()
        async with self.http(config, timeout_s) as http:
            client = ClientFactory(ClientConfig(httpx_client=http, streaming=True)).create(card)
            sent = SendMessageRequest(message=Message(message_id=mid, role=Role.ROLE_USER, parts=[Part(text=text)]))
            item: StreamResponse
            async for item in client.send_message(sent):
                agentreply.fold(reply, item)
                if reply.done:
                    break
            while not reply.done and reply.task_id:  # the stream ended before the task did: poll it
                await asyncio.sleep(POLL_S)
                agentreply.fold(reply, StreamResponse(task=await client.get_task(GetTaskRequest(id=reply.task_id))))
        return reply


def _output(name: str, config: A2aAgentConfig, reply: Reply, limit: int) -> ToolOutput:
    """A finished reply as the call's output, or the ``ToolFailure`` its state means (module doc)."""
    from a2a.types.a2a_pb2 import TaskState  # noqa: PLC0415 - rule O13

    from services.mcp import agentreply  # noqa: PLC0415

    state = agentreply.state_name(reply.state)
    if not reply.answered and reply.state != TaskState.TASK_STATE_COMPLETED:
        detail = reply.status_text[:400] or "no reason given"
        if reply.state in agentreply.WAITING:
            raise ToolFailure("a2a_input_required", f"{name} asks back ({state}): {detail}", kind="business",
                              hint="ask it again with a self-contained message, or answer without it")
        raise ToolFailure("a2a_task_" + state.replace("-", "_"), f"{name} ended its task as {state}: {detail}",
                          kind="business", hint="answer without it or ask differently")
    return ToolOutput(evidence=[agentreply.evidence(name, config.url, reply, limit)])


def _failure(config: A2aAgentConfig, exc: BaseException) -> ToolFailure:
    """The ``ToolFailure`` of an exception while reaching agent ``config`` (module doc); re-raises cancellation."""
    if isinstance(exc, (asyncio.CancelledError, KeyboardInterrupt, SystemExit)):
        raise exc
    from a2a.client import A2AClientError  # noqa: PLC0415 - rule O13
    from a2a.utils.errors import A2AError  # noqa: PLC0415

    who = f"a2a.{config.name}"
    blocked = exc if isinstance(exc, BlockedAddress) else exc.__cause__ if isinstance(exc.__cause__, BlockedAddress) else None
    if isinstance(blocked, BlockedAddress):  # rule T11
        return ToolFailure("a2a_forbidden_address", f"refused to reach {who}: {blocked.ip} is {blocked.reason}",
                           hint="remote agents must be on public addresses", kind="forbidden")
    status = getattr(exc, "status_code", None) or _http_status(exc)
    if status in (401, 403):
        return ToolFailure("a2a_unauthorized", f"{who} refused the credential (HTTP {status})", kind="forbidden")
    if isinstance(exc, (httpx.TransportError, TimeoutError)) or status == 429 or (status or 0) >= 500 or (
            isinstance(exc, A2AClientError) and status is None):
        return ToolFailure("a2a_unavailable", f"{who} is unavailable: {type(exc).__name__}: {exc}"[:500],
                           hint="try again later or answer without it")
    if isinstance(exc, A2AError):
        return ToolFailure("a2a_error", f"{who} answered an error: {exc}"[:500], kind="business")
    return ToolFailure("a2a_error", f"{who} failed: {type(exc).__name__}: {exc}"[:500], kind="business")


def _http_status(exc: BaseException) -> int | None:
    """The HTTP status behind an SDK error (its ``__cause__`` an ``httpx.HTTPStatusError``), if any."""
    cause = exc.__cause__
    return cause.response.status_code if isinstance(cause, httpx.HTTPStatusError) else None
