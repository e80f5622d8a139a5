"""``conduit evals add --from-task ID`` (rule E13, docs/evals.md): a real task becomes a case of the golden set.

The task's record (``GET /v1/tasks/{id}``: question, mode, status, the tool calls it ran with their arguments,
its citations with their evidence ids) is turned into a case whose scripted ``model`` replays the same tool
calls and cites the same passage, and whose ``expect`` is what the task did: the outcome, the mode, the tool
calls in order, a citation of the first cited passage (title and locator) and at least one of its cited evidence
ids (``evidence``). A task answered without a model (``retrieval_only``) becomes a ``run: retrieval_only`` case.
So a failure seen in production is pinned: once fixed, the case says whether it stays fixed. The case is appended
to the golden file (its ``cases:`` list must be the file's last key; comments and order above are kept).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import yaml

from contracts.api import TERMINAL_STATUSES
from ops.golden import GOLDEN, load


class TaskNotUsable(ValueError):
    """The task cannot become a case (unknown, not finished, or its question is already a case)."""


def case_from_view(view: dict[str, Any]) -> dict[str, Any]:
    """The golden case for a finished task's record ``view`` (a ``TaskView`` body). Raises ``TaskNotUsable``."""
    if view.get("status") not in TERMINAL_STATUSES:
        raise TaskNotUsable(f"task {view.get('task_id')} is {view.get('status')}: only a finished task becomes a case")
    steps = [s for s in view.get("steps") or [] if s.get("kind") == "tool" and s.get("tool")]
    citations = view.get("citations") or []
    expect: dict[str, Any] = {"outcome": f"task.{view['status']}", "mode": view.get("mode"),
                              "tools": [s["tool"] for s in steps]}
    case: dict[str, Any] = {"id": f"task-{view['task_id'][:12]}", "category": "from_task",
                            "source": {"task_id": view["task_id"], "created_at": str(view.get("created_at"))},
                            "question": view["question"]}
    first = citations[0] if citations else None
    cite = {k: v for k, v in (("title", (first or {}).get("title")), ("locator", (first or {}).get("locator"))) if v}
    if view.get("mode") == "retrieval_only":
        case["run"] = "retrieval_only"
    else:
        turns: list[dict[str, Any]] = [{"call": s["tool"], "args": {k: v for k, v in (s.get("arguments") or {}).items()
                                                                   if k != "reason"}} for s in steps]
        answer: dict[str, Any] = {"answer": str(view.get("answer") or "OK.")[:200].split("[")[0] or "OK."}
        if cite:
            answer["cite"] = dict(cite)
        case["model"] = [*turns, answer]
    if cite:
        expect["cite"] = cite
        expect["evidence"] = sorted({c["chunk_id"] for c in citations if c.get("chunk_id")})
    else:
        expect["citations"] = False
    case["expect"] = expect
    return case


def append(case: dict[str, Any], path: Path = GOLDEN) -> None:
    """Append ``case`` to the golden file's ``cases`` list. Raises ``TaskNotUsable`` when its question or id is
    already there."""
    cases = load(path)["cases"]
    if any(c["question"] == case["question"] or c["id"] == case["id"] for c in cases):
        raise TaskNotUsable(f"the golden set already asks {case['question'][:60]!r} ({case['id']})")
    text = path.read_text(encoding="utf-8")
    block = yaml.safe_dump([case], allow_unicode=True, sort_keys=False, width=120)
    path.write_text(text + ("" if text.endswith("\n") else "\n") + block, encoding="utf-8")


def add_from_task(base: str, key: str | None, task_id: str, path: Path = GOLDEN) -> dict[str, Any]:
    """Read task ``task_id`` through the API at ``base``, append its case to ``path`` and return the case.

    Raises ``httpx.HTTPStatusError`` (404: no such task for this key) and ``TaskNotUsable``.
    """
    from ops.client import bearer

    r = httpx.get(f"{base}/v1/tasks/{task_id}", headers=bearer(key), timeout=30)
    r.raise_for_status()
    case = case_from_view(r.json())
    append(case, path)
    return case
