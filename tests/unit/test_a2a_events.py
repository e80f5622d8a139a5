"""A task's event log as A2A objects (``services.gateway.agents.a2a_events``, docs/a2a.md): event by event, in process."""

from __future__ import annotations

import json

from a2a.types.a2a_pb2 import TaskArtifactUpdateEvent, TaskState, TaskStatusUpdateEvent
from google.protobuf.json_format import MessageToDict

from conduit.records.taskstream import LoggedEvent
from services.gateway.agents.a2a_events import ANSWER, SEQ_KEY, TaskProjection, pauses


def log(*events: tuple[str, dict]) -> list[LoggedEvent]:
    return [LoggedEvent(i, kind, json.dumps(data, ensure_ascii=False)) for i, (kind, data) in enumerate(events, 1)]


CITATION = {"index": 1, "chunk_id": "c1", "title": "中华人民共和国增值税法", "locator": "第十一条"}
RUN = log(("task.accepted", {"task_id": "t", "session_id": "s", "question": "征收率？"}),
          ("step.started", {"step": 1, "phase": "model"}),
          ("tool.requested", {"call_id": "k1", "tool": "kb_search", "arguments": {"query": "征收率"}}),
          ("trace", {"phase": "tool", "data": {}}),
          ("tool.completed", {"call_id": "k1", "tool": "kb_search", "outcome": "ok", "duration_ms": 5.0}),
          ("answer.delta", {"text": "征收率"}),
          ("answer.delta", {"text": "为3%[1]。"}),
          ("task.completed", {"answer": "征收率为3%[1]。", "citations": [CITATION], "latency_ms": 9.0, "mode": "agent"}))


def test_a_cited_answer_becomes_status_and_artifact_updates_in_order() -> None:
    proj = TaskProjection("t", "s", "征收率？")
    out = [u for ev in RUN for u in proj.apply(ev)]
    kinds = [type(u).__name__ for u in out]
    assert kinds == ["TaskStatusUpdateEvent"] * 3 + ["TaskArtifactUpdateEvent"] * 3 + ["TaskStatusUpdateEvent"]
    assert [u.metadata[SEQ_KEY] for u in out] == [2, 3, 5, 6, 7, 8, 8], "every update says which log event it is"
    first, more = out[3], out[4]
    assert (first.append, more.append) == (False, True) and more.artifact.parts[0].text == "为3%[1]。"
    final = out[5]
    assert isinstance(final, TaskArtifactUpdateEvent) and final.last_chunk and not final.append
    parts = MessageToDict(final.artifact)["parts"]
    assert parts[0] == {"text": "征收率为3%[1]。"}
    assert parts[1]["data"]["source"] == {"index": 1, "title": "中华人民共和国增值税法", "locator": "第十一条",
                                          "chunk_id": "c1"}
    assert isinstance(out[-1], TaskStatusUpdateEvent) and out[-1].status.state == TaskState.TASK_STATE_COMPLETED
    assert pauses(out[-1], proj) and proj.final
    task = proj.task()
    assert task.artifacts[0].artifact_id == ANSWER and task.history[0].parts[0].text == "征收率？"
    assert task.metadata[SEQ_KEY] == 8


def untimed(update):
    """The update without its status timestamp (the time it was made, not part of the mapping)."""
    data = MessageToDict(update)
    data.get("status", {}).pop("timestamp", None)
    return data


def test_a_snapshot_up_to_an_event_plus_the_rest_is_the_whole_run() -> None:
    """Resubscribing after event 6: the task as of 6, then the events after it, give what one stream gave."""
    whole = TaskProjection("t", "s", "q")
    streamed = [u for ev in RUN for u in whole.apply(ev)]
    part = TaskProjection("t", "s", "q")
    for ev in RUN[:6]:
        part.apply(ev)
    assert part.task().artifacts[0].parts[0].text == "征收率" and part.seq == 6
    rest = [u for ev in RUN for u in part.apply(ev)]  # replays 1..6 add nothing
    assert [untimed(u) for u in rest] == [untimed(u) for u in streamed[4:]]


def test_approvals_and_needs_input_are_input_required() -> None:
    approval = {"call_id": "c9", "tool": "code_exec", "arguments": {"code": "print(1)"}, "reason": "算",
                "arguments_digest": "d", "expires_at": "2026-12-02T12:00:00Z"}
    proj = TaskProjection("t", "s", "q")
    (update,) = proj.apply(LoggedEvent(1, "tool.approval_required", json.dumps(approval)))
    assert update.status.state == TaskState.TASK_STATE_INPUT_REQUIRED and pauses(update, proj)
    assert proj.awaiting["call_id"] == "c9" and not proj.final
    data = MessageToDict(update.status.message)["parts"][1]["data"]
    assert data["event"] == "tool.approval_required" and data["arguments_digest"] == "d"
    proj.apply(LoggedEvent(2, "tool.completed", json.dumps({"call_id": "c9", "tool": "code_exec", "outcome": "ok",
                                                             "duration_ms": 1.0, "approval": "approved"})))
    assert proj.awaiting is None and proj.state == TaskState.TASK_STATE_WORKING
    (asked,) = proj.apply(LoggedEvent(3, "task.needs_input", json.dumps({"question": "哪一年？"})))
    assert asked.status.state == TaskState.TASK_STATE_INPUT_REQUIRED and proj.needs_input
    assert asked.status.message.parts[0].text == "哪一年？"


def test_reset_failure_and_cancel() -> None:
    proj = TaskProjection("t", "s", "q")
    proj.apply(LoggedEvent(1, "answer.delta", json.dumps({"text": "先说"})))
    (reset,) = proj.apply(LoggedEvent(2, "answer.reset", json.dumps({"reason": "tools"})))
    assert not reset.append and reset.artifact.parts[0].text == "" and proj.task().artifacts == []
    (failed,) = proj.apply(LoggedEvent(3, "task.failed", json.dumps({"code": "model_timeout", "message": "slow"})))
    assert failed.status.state == TaskState.TASK_STATE_FAILED and "model_timeout" in failed.status.message.parts[0].text
    other = TaskProjection("t", "s", "q")
    (cancelled,) = other.apply(LoggedEvent(1, "task.cancelled", json.dumps({"reason": "cancelled"})))
    assert cancelled.status.state == TaskState.TASK_STATE_CANCELED and other.final
