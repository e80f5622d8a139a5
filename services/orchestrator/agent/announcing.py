"""What a step writes besides its checkpoint, decided inside the transition.

An ending asks for ``Announce`` (and, for a completed person's task, ``Remember``); a step that
changes the record asks for ``WriteView``. ``settle`` is the last part of every transition (the
interpreter applies ``settle(deps, fn(state))`` before the save): it fills those effects in with what
to write, so the I/O layer's handlers only write what an effect carries and decide nothing:

- ``Announce``: the terminal event, the record, the public event, the session turn, the tokens of
  the tenant's day (rule G6) and a worker's result for its supervisor (rule D5);
- ``Remember``: the user's facts and the episode (rules M1, M2) and a semantic-cache entry (rule C2);
  a ``Remember`` that keeps nothing is dropped;
- ``WriteView``: the record as ``GET /v1/tasks/{id}`` shows it.

Times are the task's own (``finished_at``), never the wall clock of the replica that writes, so a
transition applied again after a lost race decides the same.
"""

from __future__ import annotations

from datetime import datetime

from contracts.evidence import Citation
from services.orchestrator.agent import cache, endings, memory, team
from services.orchestrator.agent.deps import Deps
from services.orchestrator.agent.effects import Announce, Announcement, Remember, Step, Turn, WriteView
from services.orchestrator.agent.state import TaskState

PUBLIC_KIND = {"completed": "task.completed", "failed": "task.failed", "cancelled": "task.cancelled",
               "needs_input": "task.needs_input"}
"""An ended task's status -> its public agent event's kind (docs/events.md)."""


def settle(deps: Deps, step: Step | None) -> Step | None:
    """``step`` with its ``Announce``, ``Remember`` and ``WriteView`` effects filled in (see the module
    docstring); other effects and the state are left as they are. None stays None."""
    if step is None or not any(isinstance(e, (Announce, Remember, WriteView)) for e in step.effects):
        return step
    state, effects = step.state, []
    for e in step.effects:
        if isinstance(e, Announce) and e.decided is None:
            e = Announce(e.citations, announcement(deps, state, e.citations))
        elif isinstance(e, Remember) and not e.items and e.cache is None:
            e = remember(deps, state, e.citations)
            if e is None:
                continue
        elif isinstance(e, WriteView) and e.view is None:
            e = WriteView(endings.record_view(state))
        effects.append(e)
    step.effects = effects
    return step


def ended_at(state: TaskState) -> datetime:
    """The time an ended task's writes carry: its ``finished_at`` (its start for an old checkpoint)."""
    return state.finished_at or state.created_at


def announcement(deps: Deps, state: TaskState, citations: list[Citation] | None = None) -> Announcement:
    """Everything the ended task ``state`` tells (``effects.Announcement``). ``citations``: the checked
    answer's, else (a resumed or re-announced task) derived again from the answer and the evidence pool."""
    if state.status == "completed" and citations is None:
        citations = endings.citations_of(state)
    end = ended_at(state)
    event = endings.terminal_event(state, end, citations)
    latency_ms = endings.latency_ms(state, end)
    turn, tokens = None, 0
    if state.child is None:  # a worker's task is no turn of the person's session (team mode)
        tokens = state.usage.total_tokens  # rule G6: a worker's tokens are in its parent's usage
        if state.status == "completed":
            turn = Turn(state.question, state.answer or "", n=state.turn_no)
        elif state.status == "needs_input":  # the reply continues with this evidence (rule E10)
            turn = Turn(state.question, state.answer or "", n=state.turn_no,
                        evidence=[e.model_dump(mode="json") for e in state.evidence])
    return Announcement(
        event=event, view=endings.record_view(state, latency_ms, citations), public_kind=PUBLIC_KIND[state.status],
        public_fields={"latency_ms": latency_ms, "code": getattr(event, "code", None)}, turn=turn, tokens=tokens,
        child_result=team.child_result(deps, state) if state.child is not None else None)


def remember(deps: Deps, state: TaskState, citations: list[Citation]) -> Remember | None:
    """Rules M1, M2, C2: the facts the user stated and the episode (when memory is on for them) and the
    semantic-cache entry (when the cache is on and the answer may be cached) that ``state`` leaves for
    later; None when it leaves nothing."""
    s, now = deps.settings.memory, ended_at(state)
    items = []
    if state.memory_on and state.user_id:
        items = list(memory.extract_facts(state.question, tenant_id=state.tenant_id, user_id=state.user_id,
                                     task_id=state.task_id, session_id=state.session_id, now=now,
                                     temporary_days=s.memory_temporary_days))
        if memory.worth_an_episode(state):
            items.append(memory.episode(tenant_id=state.tenant_id, user_id=state.user_id, task_id=state.task_id,
                                        session_id=state.session_id, question=state.question, answer=state.answer,
                                        citations=citations, now=now, episode_days=s.memory_episode_days))
    entry = cache.entry_for(state, citations, now) if s.cache_enabled else None
    if not items and entry is None:
        return None
    return Remember(citations, items, entry)


def again(state: TaskState) -> Step:
    """Announce an ended task again, changing nothing (a replica that died between saving the end and
    announcing it told nobody; a supervisor that asked again may have lost its worker's result). The log
    seals once, so a client never sees two terminal events."""
    return Step(state, [Announce()], save=False)

