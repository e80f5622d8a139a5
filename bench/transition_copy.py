"""What rule A34 costs per transition: the fork (``TaskState.fork``) a transition changes instead of its input,
against the transition alone and against a deep copy, on a task after 1, 5 and 20 tool rounds.

    .venv/bin/python -m bench.transition_copy     # microseconds per call, best of 5 x 300

No broker, Redis or model is needed. "transition alone" runs the transition on prepared deep copies (the
in-place cost before rule A34); "fork + transition" runs it on one input, which it leaves as it was.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from conduit.runtime.settings import Settings
from contracts.events import QuestionAsked, QuestionPayload, ToolResultPayload
from contracts.evidence import EvidenceItem
from contracts.api import StepRecord
from services.orchestrator.agent import planning, recording, timers
from services.orchestrator.agent.deps import Deps
from services.orchestrator.agent.evidence import EvidencePool
from services.orchestrator.agent.state import PendingCall, Phase, TaskState

T0 = datetime(2026, 1, 1, 9, 0, tzinfo=UTC)
CALLS, REPEAT = 300, 5
TEXT = "第十一条 纳税人发生应税交易，应当按照一般计税方法计算缴纳增值税。" * 12  # ~400 characters


def _hit(n: int, k: int) -> EvidenceItem:
    return EvidenceItem(chunk_id=f"c{n}-{k}", document_id=f"d{n}-{k}", kind="original", title="《增值税法》",
                        locator=f"第{k}条", text=TEXT, score=0.8)


def task(rounds: int, deps: Deps) -> TaskState:
    """A task after ``rounds`` tool rounds of 4 hits each, waiting for one ``kb_search`` result."""
    q = QuestionAsked(task_id="t1", session_id="s", occurred_at=T0, payload=QuestionPayload(question="增值税怎么算？"))
    state = planning.start(deps, q, ["kb_search"], [], now=T0).state.fork()
    for n in range(rounds):
        call = {"id": f"c{n}", "type": "function", "function": {"name": "kb_search", "arguments": '{"query": "q"}'}}
        state.messages += [{"role": "assistant", "content": None, "tool_calls": [call]},
                           {"role": "tool", "tool_call_id": f"c{n}", "content": TEXT * 4}]
        EvidencePool(state.evidence).add([_hit(n, k) for k in range(4)])
        state.steps += [StepRecord(step=n + 1, kind="model", duration_ms=900.0),
                        StepRecord(step=n + 1, kind="tool", tool="kb_search", call_id=f"c{n}", outcome="ok")]
        state.trace += [{"phase": "llm", "step": n + 1, "total_s": 0.9}, {"phase": "tool", "call_id": f"c{n}"}]
    state.step = state.rounds = rounds + 1
    state.pending = [PendingCall(call_id="last", name="kb_search", tool="kb_search", arguments={"query": "q"},
                                 step=state.step, idempotency_key="t1:last", requested_at=T0, sent=True,
                                 deadline_at=T0 + timedelta(seconds=30))]
    state.phase, state.status = Phase.TOOLS, "waiting_tool"
    return state


def per_call_us(fn: Callable[[], Any], prepare: Callable[[], Any] | None = None) -> float:
    """Best of ``REPEAT`` runs of ``CALLS`` calls, microseconds per call (``prepare`` runs untimed first)."""
    best = float("inf")
    for _ in range(REPEAT):
        inputs = [prepare() for _ in range(CALLS)] if prepare else [None] * CALLS
        start = time.perf_counter()
        for item in inputs:
            fn(item) if prepare else fn()
        best = min(best, time.perf_counter() - start)
    return best / CALLS * 1e6


def main() -> None:
    """Print one table row per state size (microseconds per call)."""
    deps = Deps.from_settings(Settings(), model_configured=True)
    result = ToolResultPayload(call_id="last", tool="kb_search", idempotency_key="t1:last", outcome="ok",
                               evidence=[_hit(99, k) for k in range(4)], duration_ms=5.0)
    now = T0 + timedelta(seconds=3)
    print("| tool rounds | messages | fork | deep copy | record_results alone | fork + record_results "
          "| wake alone | fork + wake |")
    print("|---|---|---|---|---|---|---|---|")
    for rounds in (1, 5, 20):
        state = task(rounds, deps)
        record = lambda st: recording.record_results(deps, st, [result], now)  # noqa: E731
        wake = lambda st: timers.wake(deps, st, now)  # noqa: E731
        fresh = lambda: copy.deepcopy(state)  # noqa: E731
        row = [per_call_us(state.fork), per_call_us(lambda: state.model_copy(deep=True)),
               per_call_us(record, fresh), per_call_us(lambda: record(state.fork())),
               per_call_us(wake, fresh), per_call_us(lambda: wake(state.fork()))]
        print(f"| {rounds} | {len(state.messages)} | " + " | ".join(f"{v:.1f}" for v in row) + " |")


if __name__ == "__main__":
    main()
