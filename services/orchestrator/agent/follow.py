"""Rule A30 (docs/agent-rules.md "Following the law's own references"): which ``kb_follow`` calls may run.

A ``kb_follow`` call names articles by the ids law passages list as their ``refs`` (rule K16). It runs
only when every id is cited by evidence already in the task's pool (the model cannot fetch arbitrary
ids: what it follows is what the law says), at most ``contracts.tools.FOLLOW_MAX_REFS`` (5) ids per
call (the argument schema), and no id lies more than ``MAX_HOPS`` (2) hops from a searched passage: an
article ``kb_search`` found is hop 0, an article it cites hop 1, an article that one cites hop 2.
A call breaking the rule is refused (``ref_not_in_evidence`` / ``follow_depth_exceeded``) and the model
is told why; nothing runs.
"""

from __future__ import annotations

from typing import Any

from contracts.events import ToolError
from contracts.evidence import NumberedEvidence
from services.orchestrator.agent.state import Refusal

MAX_HOPS = 2
"""Rule A30: a followed article is at most this many references away from a searched passage."""


def reach(pool: list[NumberedEvidence]) -> dict[str, int]:
    """The hop at which each article cited in ``pool`` would enter: 1 + the hop of the nearest passage
    citing it (a passage not fetched by ``kb_follow`` is hop 0; a followed one has the hop it was reached
    at). Pool order is the order items entered, so a citing passage precedes what was followed from it."""
    hops: dict[str, int] = {}
    for item in pool:
        own = item.metadata.get("ref_id")
        here = hops.get(own, MAX_HOPS) if item.metadata.get("followed") else 0
        for ref in item.refs:
            hops[ref.id] = min(hops.get(ref.id, here + 1), here + 1)
    return hops


def check(pool: list[NumberedEvidence], args: dict[str, Any]) -> Refusal | None:
    """Rule A30 for one ``kb_follow`` call with valid ``args``: None when it may run, else the ``Refusal``."""
    hops = reach(pool)
    ids = [str(i).strip() for i in args.get("ref_ids", [])]
    unknown = [i for i in ids if i not in hops]
    if unknown:
        return Refusal(error=ToolError(
            error_code="ref_not_in_evidence", kind="business",
            message=f"no passage in the evidence cites {', '.join(unknown)}",
            hint="follow only ids listed after 引用 in the evidence; search with kb_search for anything else"))
    deep = [i for i in ids if hops[i] > MAX_HOPS]
    if deep:
        return Refusal(error=ToolError(
            error_code="follow_depth_exceeded", kind="business",
            message=f"{', '.join(deep)} is more than {MAX_HOPS} references away from a searched passage",
            hint="answer with the evidence you have, or search with kb_search"))
    return None
