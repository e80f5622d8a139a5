"""A task's event log as AG-UI events (``services.gateway.agents.agui_events``, docs/agui.md): in process, every
event validated against the ``ag-ui-protocol`` models and AG-UI's order (``testkit.agui_check``)."""

from __future__ import annotations

import json

from conduit.records.taskstream import LoggedEvent
from services.gateway.agents.agui_events import RunTranslator
from testkit.agui_check import StreamChecker


def log(*events: tuple[str, dict]) -> list[LoggedEvent]:
    return [LoggedEvent(i, kind, json.dumps(data, ensure_ascii=False)) for i, (kind, data) in enumerate(events, 1)]


ITEM = {"index": 1, "kind": "kb", "title": "中华人民共和国增值税法", "locator": "第十一条", "text": "征收率为百分之三"}
RUN = log(("task.accepted", {"task_id": "t", "session_id": "s", "question": "q"}),
          ("step.started", {"step": 1, "phase": "model"}),
          ("answer.delta", {"text": "我先查一下。"}),
          ("answer.reset", {"reason": "tool_calls"}),
          ("tool.requested", {"call_id": "k1", "tool": "kb_search", "arguments": {"query": "征收率"}}),
          ("step.started", {"step": 2, "phase": "tools"}),
          ("tool.completed", {"call_id": "k1", "tool": "kb_search", "outcome": "ok", "duration_ms": 3.0}),
          ("evidence", {"items": [ITEM]}),
          ("trace", {"phase": "llm", "data": {}}),
          ("step.started", {"step": 3, "phase": "model"}),
          ("answer.delta", {"text": "征收率为3%"}),
          ("answer.delta", {"text": "[1]。"}),
          ("task.completed", {"answer": "征收率为3%[1]。", "latency_ms": 5.0, "mode": "agent",
                              "citations": [{"index": 1, "chunk_id": "c", "title": "中华人民共和国增值税法"}]}))


def dumped(events) -> list[dict]:
    return [json.loads(e.model_dump_json(by_alias=True)) for e in events]


def test_a_tool_using_run_is_valid_event_by_event() -> None:
    tr = RunTranslator("s", "r1", "t")
    events = dumped(tr.opening(0)) + [e for ev in RUN for e in dumped(tr.apply(ev))]
    checker = StreamChecker()
    checker.check_all(events)
    kinds = checker.types
    assert kinds[:3] == ["RUN_STARTED", "STATE_SNAPSHOT", "STEP_STARTED"]
    assert kinds[kinds.index("TOOL_CALL_START"):kinds.index("TOOL_CALL_START") + 3] == [
        "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END"]
    assert kinds.index("TOOL_CALL_RESULT") > kinds.index("TOOL_CALL_END")
    assert "CUSTOM" in kinds, "the reset is said"
    assert kinds[-3:] == ["STATE_SNAPSHOT", "STEP_FINISHED", "RUN_FINISHED"]
    final = events[-1]
    assert final["outcome"] == {"type": "success"} and final["result"]["answer"] == "征收率为3%[1]。"
    evidence = [e for e in events if e["type"] == "STATE_SNAPSHOT"][1]["snapshot"]["evidence"]
    assert evidence[0]["locator"] == "第十一条"
    assert "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT") == "我先查一下。征收率为3%[1]。"


def test_a_resumed_run_opens_with_the_state_and_goes_on_with_the_open_message() -> None:
    whole = RunTranslator("s", "r1", "t")
    full = [e for ev in RUN for e in dumped(whole.apply(ev))]
    part = RunTranslator("s", "r1", "t")
    for ev in RUN[:11]:  # the client has everything up to the first piece of the final answer
        part.apply(ev)
    opening = dumped(part.opening(part.seq))
    assert [e["type"] for e in opening] == ["RUN_STARTED", "STATE_SNAPSHOT", "STEP_STARTED", "TEXT_MESSAGE_START"]
    rest = [e for ev in RUN for e in dumped(part.apply(ev))]
    StreamChecker().check_all(opening + rest)
    assert rest == full[-len(rest):]


def test_an_approval_interrupts_the_run_and_a_resuming_run_goes_on() -> None:
    approval = {"call_id": "c9", "tool": "code_exec", "arguments": {"code": "print(1)"}, "reason": "算",
                "arguments_digest": "d", "expires_at": "2026-12-02T12:00:00Z"}
    requested = {k: approval[k] for k in ("call_id", "tool", "arguments", "reason")}
    events = log(("step.started", {"step": 1, "phase": "tools"}), ("tool.requested", requested),
                 ("tool.approval_required", approval),
                 ("tool.completed", {"call_id": "c9", "tool": "code_exec", "outcome": "ok", "duration_ms": 1.0,
                                     "approval": "rejected"}),
                 ("task.cancelled", {"reason": "cancelled"}))
    first = RunTranslator("s", "r1", "t")
    out = dumped(first.opening(0)) + [e for ev in events[:3] for e in dumped(first.apply(ev))]
    StreamChecker().check_all(out)
    interrupt = out[-1]["outcome"]["interrupts"][0]
    assert out[-1]["outcome"]["type"] == "interrupt" and interrupt["id"] == "t:c9"
    assert interrupt["toolCallId"] == "c9" and interrupt["metadata"]["arguments_digest"] == "d"
    second = RunTranslator("s", "r2", "t")
    for ev in events[:3]:
        second.apply(ev)
    assert second.interrupts == {"c9": 3} and not second.ended
    rest = dumped(second.opening(second.seq)) + [e for ev in events for e in dumped(second.apply(ev))]
    checker = StreamChecker()
    checker.check_all(rest)
    assert checker.types[-2:] == ["TOOL_CALL_RESULT", "RUN_FINISHED"] and rest[-1]["outcome"] == {"type": "cancelled"}


def test_a_failure_is_run_error() -> None:
    tr = RunTranslator("s", "r1", "t")
    events = log(("step.started", {"step": 1, "phase": "model"}), ("answer.delta", {"text": "半句"}),
                 ("task.failed", {"code": "model_timeout", "message": "the model did not answer"}))
    out = dumped(tr.opening(0)) + [e for ev in events for e in dumped(tr.apply(ev))]
    StreamChecker().check_all(out)
    assert out[-1] == {"type": "RUN_ERROR", "message": "the model did not answer", "code": "model_timeout"}


def test_progress_and_the_plan_are_state_deltas_that_apply_to_the_state() -> None:
    """Rule A28: a step's status and number and the plan (rule A25) change the state by JSON Patch."""
    steps = [{"goal": "查征收率", "tool": "kb_search", "status": "pending"}, {"goal": "计算", "tool": "code_exec",
                                                                              "status": "pending"}]
    revised = [{**steps[0], "status": "done"}, {"goal": "换个方法", "tool": "none", "status": "pending"}]
    run = [*RUN[:2], *log(("plan.created", {"steps": steps}))[0:1], *RUN[2:8],
           *log(("plan.step_done", {"index": 0, "status": "done"}), ("plan.step_done", {"index": 1, "status": "failed"}),
                ("plan.revised", {"steps": revised}), ("plan.step_done", {"index": 5, "status": "done"}))]
    run = [LoggedEvent(i, e.type, e.data) for i, e in enumerate([*run, *RUN[8:]], 1)]
    tr = RunTranslator("s", "r1", "t")
    events = dumped(tr.opening(0)) + [e for ev in run for e in dumped(tr.apply(ev))]
    checker = StreamChecker()
    checker.check_all(events)
    deltas = [e["delta"] for e in events if e["type"] == "STATE_DELTA"]
    assert deltas[0] == [{"op": "replace", "path": "/status", "value": "working"},
                         {"op": "replace", "path": "/step", "value": 1}]
    assert {"op": "add", "path": "/plan", "value": steps} in [op for d in deltas for op in d]
    assert [{"op": "replace", "path": "/plan/1/status", "value": "failed"}] in deltas
    assert [{"op": "replace", "path": "/plan", "value": revised}] in deltas
    assert checker.state["plan"] == revised and checker.state["status"] == "completed"
    assert events[-3]["snapshot"]["plan"] == revised, "the final snapshot agrees with the deltas"
