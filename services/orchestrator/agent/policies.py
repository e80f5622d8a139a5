"""Tool-call policies: approval rules, loop signatures and argument digests (rules A6, A7:
docs/architecture.md).

- Approval policy per tool: ``never``, ``always`` or a rule ``if:<argument>~<regex>``
  (approval needed when that argument matches). Default by the tool's risk tier (rule T9,
  ``contracts.tools.RISK_APPROVAL``, a tenant's ``approval_by_risk`` first): sandboxed
  (``code_exec``), irreversible and external tools ask; rule X3 (docs/mcp.md): an MCP tool whose
  server does not mark it read-only (``readOnlyHint``) asks unless the tenant's policy names it.
- Loop detection signature (rule A6): tool name + normalised arguments (strings trimmed and
  case-folded, keys sorted, ``reason`` ignored): on the third identical call the model is
  told it already has that result; a fourth ends the task.
- Argument digests: ``contracts.tools.arguments_digest``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from contracts.mcp import McpTool
from contracts.tools import RISK_APPROVAL, TOOL_SPECS

LOOP_WARN_AT = 3
"""Identical calls at which the model is told it already has the result (rule A6)."""
LOOP_STOP_AT = 4
"""Identical calls at which the task ends with a report of what was tried (rule A6)."""

OSCILLATION_WINDOW = 4
"""Last call signatures kept for the A<->B check (rule E7)."""


def oscillating(recent: list[str]) -> bool:
    """Rule E7: the last ``OSCILLATION_WINDOW`` calls alternate between two different calls
    (A, B, A, B): the model is going back and forth without progress."""
    if len(recent) < OSCILLATION_WINDOW:
        return False
    a, b, c, d = recent[-4:]
    return a == c and b == d and a != b


def canonical(value: Any) -> Any:
    """Normalise for comparison: strings trimmed and case-folded, dict keys sorted (recursively)."""
    if isinstance(value, str):
        return value.strip().casefold()
    if isinstance(value, dict):
        return {k: canonical(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [canonical(v) for v in value]
    return value


def signature(tool: str, arguments: dict[str, Any]) -> str:
    """Loop-detection signature of a call (``reason`` is not part of what the call does)."""
    args = {k: v for k, v in arguments.items() if k != "reason"}
    return f"{tool}:{json.dumps(canonical(args), ensure_ascii=False, sort_keys=True)}"


def risk_of(name: str, mcp_tool: McpTool | None) -> str:
    """Rule T9: the risk tier of tool ``name`` (an MCP tool's from its annotations; an unknown name: ``external``)."""
    if mcp_tool is not None:
        return mcp_tool.risk
    spec = TOOL_SPECS.get(name)
    return spec.risk if spec is not None else "external"


def default_approval(risk: str, by_risk: dict[str, str] | None = None) -> str:
    """Rule T9: the policy of a tool no rule names: its tier's in ``by_risk`` (a tenant's), else
    ``RISK_APPROVAL``'s (``always`` for sandboxed, irreversible and external tools, so an MCP tool
    not marked read-only asks, rule X3)."""
    return (by_risk or {}).get(risk) or RISK_APPROVAL.get(risk, "always")


def needs_approval(policies: dict[str, str], tool: str, arguments: dict[str, Any], default: str = "never") -> bool:
    """True when ``tool`` called with ``arguments`` must wait for a human decision.

    ``policies`` names tools (``mcp.<server>.*`` names every tool of one MCP server); a tool it
    does not name gets ``default``. Raises ValueError for a malformed policy string.
    """
    server_wide = f"{tool.rsplit('.', 1)[0]}.*" if tool.startswith("mcp.") else None
    policy = policies.get(tool, policies.get(server_wide or "", default)).strip()
    if policy == "never":
        return False
    if policy == "always":
        return True
    match = re.fullmatch(r"if:(\w+)~(.+)", policy)
    if not match:
        raise ValueError(f"bad approval policy for {tool}: {policy!r} (never | always | if:<arg>~<regex>)")
    value = arguments.get(match.group(1))
    return value is not None and re.search(match.group(2), str(value)) is not None
