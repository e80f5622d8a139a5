"""A Conduit task's event log as AG-UI events (``ag-ui-protocol``'s models; the table is in docs/agui.md).

``RunTranslator`` reads a task's ``LoggedEvent`` s in order and returns, per event, the AG-UI events it adds:
steps as ``STEP_STARTED``/``STEP_FINISHED`` pairs, the answer as ``TEXT_MESSAGE_START``/``CONTENT``/``END``, each
tool call as ``TOOL_CALL_START``/``ARGS``/``END`` then ``TOOL_CALL_RESULT``, the evidence and the final answer as
``STATE_SNAPSHOT`` s, progress (a step's status and number) and the plan (rule A25: made, a step done, revised)
as ``STATE_DELTA`` s, JSON Patch operations on the last state (rule A28), and the end as ``RUN_FINISHED`` (outcome ``success``, ``cancelled``, or ``interrupt`` for a
call waiting for approval) or ``RUN_ERROR``. It closes what it opened (a text message, a step) before the next
kind of event and before the run ends, so the stream is well formed event by event.

``opening(seq)`` is the start of a run's stream: ``RUN_STARTED`` and the state as of ``seq``, plus the
``TEXT_MESSAGE_START`` of an answer still being written at ``seq`` (a resumed stream goes on with it).
An approval's interrupt id is ``<task_id>:<call_id>``, so a resuming run finds the task from it alone.

Pure: no Redis, no HTTP; ``tests/unit/test_agui_events.py`` validates it event by event.
"""

from __future__ import annotations

import json
from typing import Any

from ag_ui.core import (
    BaseEvent,
    CustomEvent,
    RunErrorEvent,
    RunFinishedEvent,
    RunStartedEvent,
    StateDeltaEvent,
    StateSnapshotEvent,
    StepFinishedEvent,
    StepStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)
from ag_ui.core.events import RunFinishedCancelledOutcome, RunFinishedInterruptOutcome, RunFinishedSuccessOutcome
from ag_ui.core.types import Interrupt

from conduit.records.taskstream import LoggedEvent

APPROVAL_REASON = "tool_approval"
"""``Interrupt.reason`` of a tool call waiting for a person's decision."""
DECISION_SCHEMA = {"type": "object", "properties": {
    "decision": {"enum": ["approve", "reject", "edit"]}, "arguments": {"type": "object"},
    "arguments_digest": {"type": "string"}, "comment": {"type": "string"}}, "required": ["decision"]}
"""``Interrupt.response_schema``: the ``payload`` a resume entry answers an approval with."""


def interrupt_id(task_id: str, call_id: str) -> str:
    """The interrupt id of an approval: ``<task_id>:<call_id>``."""
    return f"{task_id}:{call_id}"


class RunTranslator:
    """The AG-UI events of one run over one Conduit task (module doc).

    Args:
        thread_id: the AG-UI thread (Conduit's session).
        run_id: the AG-UI run.
        task_id: the Conduit task the run shows.
    Attributes:
        seq: seq of the last log event applied.
        state: the run's shared state (``STATE_SNAPSHOT``, ``STATE_DELTA``): ``task_id``, ``status``, ``step``,
            ``evidence``, ``plan`` (once a plan is made: its steps ``{goal, tool, status}``), and at the end
            ``answer``, ``citations``, ``mode``, ``confidence``.
        interrupts: ``call_id -> seq`` of each approval the task waited for.
        ended: True once the task's terminal event was applied (later events add nothing).
    """

    def __init__(self, thread_id: str, run_id: str, task_id: str) -> None:
        self.thread_id, self.run_id, self.task_id = thread_id, run_id, task_id
        self.seq = 0
        self.state: dict[str, Any] = {"task_id": task_id, "status": "accepted", "step": 0, "evidence": []}
        self.interrupts: dict[str, int] = {}
        self._message: str | None = None
        self._messages = 0
        self._step: str | None = None
        self.ended = False

    def opening(self, seq: int) -> list[BaseEvent]:
        """``RUN_STARTED``, the state as of ``seq`` and, mid-answer, the open message's start again."""
        out: list[BaseEvent] = [RunStartedEvent(thread_id=self.thread_id, run_id=self.run_id),
                                StateSnapshotEvent(snapshot=self._snapshot())]
        if self._step is not None:
            out.append(StepStartedEvent(step_name=self._step))
        if self._message is not None:
            out.append(TextMessageStartEvent(message_id=self._message, role="assistant"))
        return out

    def _snapshot(self) -> dict[str, Any]:
        return json.loads(json.dumps(self.state))

    def _close_text(self) -> list[BaseEvent]:
        if self._message is None:
            return []
        done, self._message = self._message, None
        return [TextMessageEndEvent(message_id=done)]

    def _close_step(self) -> list[BaseEvent]:
        out = self._close_text()
        if self._step is not None:
            out.append(StepFinishedEvent(step_name=self._step))
            self._step = None
        return out

    def _text(self, delta: str) -> list[BaseEvent]:
        if not delta:
            return []
        out: list[BaseEvent] = []
        if self._message is None:
            self._messages += 1
            self._message = f"{self.task_id}-answer-{self._messages}"
            out.append(TextMessageStartEvent(message_id=self._message, role="assistant"))
        return out + [TextMessageContentEvent(message_id=self._message, delta=delta)]

    def apply(self, ev: LoggedEvent) -> list[BaseEvent]:
        """The AG-UI events ``ev`` adds, in order (events at or before ``seq`` add none)."""
        if ev.seq <= self.seq or self.ended:
            return []
        self.seq = ev.seq
        data = json.loads(ev.data) if ev.data else {}
        kind = ev.type
        if kind == "answer.delta":
            return self._text(data["text"])
        if kind == "answer.reset":
            return self._close_text() + [CustomEvent(name="conduit.answer_reset", value=data)]
        if kind == "step.started":
            out = self._close_step()
            self._step = f"step {data['step']}: {data.get('phase', 'model')}"
            return out + [StepStartedEvent(step_name=self._step), *self._delta(status="working", step=data["step"])]
        if kind.startswith("plan."):
            return self._close_text() + self._plan(kind, data)
        if kind == "tool.requested":
            call = data["call_id"]
            return self._close_text() + [
                ToolCallStartEvent(tool_call_id=call, tool_call_name=data["tool"]),
                ToolCallArgsEvent(tool_call_id=call, delta=json.dumps(data["arguments"], ensure_ascii=False)),
                ToolCallEndEvent(tool_call_id=call)]
        if kind == "tool.completed":
            return self._close_text() + [ToolCallResultEvent(
                message_id=f"{data['call_id']}-result", tool_call_id=data["call_id"], role="tool",
                content=data.get("output") or json.dumps({k: data.get(k) for k in ("outcome", "error_code", "approval")},
                                                         ensure_ascii=False))]
        if kind == "evidence":
            self.state["evidence"] = self.state["evidence"] + data["items"]
            return self._close_text() + [StateSnapshotEvent(snapshot=self._snapshot())]
        if kind in ("worker.started", "worker.completed"):
            return [CustomEvent(name=f"conduit.{kind}", value=data)]
        return self._ending(kind, data)

    def _delta(self, **changes: Any) -> list[BaseEvent]:
        """Rule A28: ``changes`` to top-level keys of the state as one ``STATE_DELTA`` (``replace``, ``add`` for a
        key the state has not had yet); nothing when nothing changes."""
        ops = [{"op": "replace" if key in self.state else "add", "path": f"/{key}", "value": value}
               for key, value in changes.items() if self.state.get(key, object()) != value]
        self.state.update(changes)
        return [StateDeltaEvent(delta=json.loads(json.dumps(ops)))] if ops else []

    def _plan(self, kind: str, data: dict[str, Any]) -> list[BaseEvent]:
        """Rule A28 for the plan (rule A25): made or revised -> the whole ``/plan``; a step done -> its ``status``."""
        if kind in ("plan.created", "plan.revised"):
            return self._delta(plan=data["steps"])
        plan, index = self.state.get("plan") or [], data.get("index", -1)
        if kind != "plan.step_done" or not 0 <= index < len(plan) or plan[index].get("status") == data["status"]:
            return []
        plan[index] = {**plan[index], "status": data["status"]}
        return [StateDeltaEvent(delta=[{"op": "replace", "path": f"/plan/{index}/status", "value": data["status"]}])]

    def _finished(self, outcome: Any = None, result: Any = None, final: bool = True) -> list[BaseEvent]:
        self.ended = final  # an approval's interrupt ends this run, not the task: a resuming run goes on after it
        return self._close_step() + [RunFinishedEvent(thread_id=self.thread_id, run_id=self.run_id, outcome=outcome,
                                                      result=result)]

    def _ending(self, kind: str, data: dict[str, Any]) -> list[BaseEvent]:
        if kind == "tool.approval_required":
            call = data["call_id"]
            self.interrupts[call] = self.seq
            self.state["status"] = "waiting_for_approval"
            waiting = Interrupt(id=interrupt_id(data.get("task_id") or self.task_id, call), reason=APPROVAL_REASON,
                                message=f"{data['tool']} needs your approval: {data.get('reason', '')}".strip(),
                                tool_call_id=call, expires_at=data["expires_at"], response_schema=DECISION_SCHEMA,
                                metadata={k: data[k] for k in ("tool", "arguments", "arguments_digest") if k in data})
            return ([StateSnapshotEvent(snapshot=self._snapshot())]
                    + self._finished(RunFinishedInterruptOutcome(interrupts=[waiting]), final=False))
        if kind == "task.completed":
            keep = ("answer", "citations", "mode", "confidence", "stop_reason", "fallback_reason")
            self.state.update(status="completed", **{k: data.get(k) for k in keep})
            return ([*self._close_text(), StateSnapshotEvent(snapshot=self._snapshot())]
                    + self._finished(RunFinishedSuccessOutcome(), {k: data.get(k) for k in keep}))
        if kind == "task.needs_input":
            self.state.update(status="needs_input", question=data["question"])
            lead = self._close_text() + self._text(data["question"]) + self._close_text()
            return lead + [StateSnapshotEvent(snapshot=self._snapshot())] + self._finished(
                RunFinishedSuccessOutcome(), {"needs_input": data["question"]})
        if kind == "task.cancelled":
            self.state["status"] = "cancelled"
            return self._finished(RunFinishedCancelledOutcome())
        if kind == "task.failed":
            self.ended = True
            self.state["status"] = "failed"
            return self._close_step() + [RunErrorEvent(message=data["message"], code=data["code"])]
        return []  # trace, thinking, task.accepted and event types newer than this mapping
