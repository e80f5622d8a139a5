"""Rule A34 (docs/agent-rules.md): a transition leaves the state it was given as it was; it changes a fork
(``TaskState.fork``) and returns it. Every unit test that drives the interpreter is watched
(tests/unit/conftest.py, ``purity.watch``); here: the watch itself, a retry after a lost race, the model
step's own counting, the fork's copy-on-write, and breaker feeds applied once after a successful save."""

from __future__ import annotations

import pytest

from agentsim import T0, Reply, Sim, TestModel, code, kb, ok, passage
from contracts.events import ToolError, ToolResultPayload
from services.orchestrator import interpreter
from services.orchestrator.agent import recording
from services.orchestrator.agent.effects import FeedBreaker, Step
from services.orchestrator.agent.state import PendingCall, TaskState
from purity import ChangedInput, watched_transition


def test_every_unit_test_runs_under_the_watch():
    assert interpreter.transition is watched_transition


async def waiting() -> Sim:
    """A task waiting for a ``kb_search`` result that never comes."""
    sim = Sim(TestModel(Reply(tool_calls=[kb("增值税")])), tools={})
    await sim.ask()
    return sim


def stale(sim: Sim) -> TaskState:
    """The stored checkpoint as a writer that lost the race holds it (one version behind)."""
    old = sim.state.model_copy(deep=True)
    old.version -= 1
    return old


async def test_the_watch_catches_a_transition_that_changes_its_input():
    sim = await waiting()

    def edits_a_message(state: TaskState) -> Step:  # a message's dict is shared with the input: never edit one
        state.messages[-1]["content"] = "changed"
        return Step(state)

    with pytest.raises(ChangedInput, match=r"\['messages'\]"):
        await sim.interp.apply(sim.state.task_id, edits_a_message)


async def test_a_retry_after_a_lost_race_starts_from_the_freshly_loaded_state():
    sim = await waiting()
    held, stored = stale(sim), sim.state
    held_dump, stored_dump = held.model_dump(), stored.model_dump()
    seen: list[tuple[int, int, int]] = []

    def grows(state: TaskState) -> Step:
        seen.append((state.version, len(state.trace), len(state.pending)))
        state.trace.append({"phase": "test"})
        state.pending[0].attempts += 1
        state.step += 1
        return Step(state)

    await sim.interp.apply(stored.task_id, grows, loaded=held)
    trace, pending = len(stored_dump["trace"]), len(stored_dump["pending"])
    assert seen == [(held.version, trace, pending), (stored_dump["version"], trace, pending)]
    assert held.model_dump() == held_dump and stored.model_dump() == stored_dump  # neither attempt changed its input
    assert sim.state.step == stored.step + 1 and sim.state.pending[0].attempts == stored.pending[0].attempts + 1


async def test_a_model_step_counts_the_step_on_a_copy_of_the_loaded_checkpoint():
    sim = Sim(TestModel(Reply(tool_calls=[kb("增值税")]), Reply(content="答：见[1]。")),
              tools={"kb_search": lambda c: ok(c, passage("p1"))})
    dumps: list[tuple[TaskState, dict]] = []
    real = sim.world.states.__class__.__setitem__

    class Kept(dict):  # every checkpoint the fake store held, with its dump as saved
        def __setitem__(self, key, value):
            dumps.append((value, value.model_dump()))
            real(self, key, value)

    sim.world.states = Kept(sim.world.states)
    await sim.ask()
    assert sim.state.status == "completed" and len(dumps) >= 4
    for saved, dump in dumps:  # nothing after a save changed a stored checkpoint, the model steps' counting included
        assert saved.model_dump() == dump


def test_a_fork_copies_what_transitions_change_and_shares_the_rest():
    state = TaskState(task_id="t", session_id="s", tenant_id="d", question="q", allowed_tools=["kb_search"],
                      messages=[{"role": "user", "content": "q"}], trace=[{"phase": "x"}], signatures={"a": 1})
    state.pending.append(a_call())
    fork = state.fork()
    assert fork == state and fork is not state
    for name in ("messages", "pending", "trace", "signatures", "allowed_tools", "evidence", "steps"):
        assert getattr(fork, name) is not getattr(state, name), name
    assert fork.pending[0] is not state.pending[0] and fork.messages[0] is state.messages[0]
    fork.pending[0].attempts, fork.signatures["a"] = 5, 2
    fork.trace.append({"phase": "y"})
    assert state.pending[0].attempts == 0 and state.signatures == {"a": 1} and len(state.trace) == 1


def a_call() -> PendingCall:
    """A pending ``kb_search`` call."""
    return PendingCall(call_id="c1", name="kb_search", tool="kb_search", arguments={"query": "q"}, step=1,
                       idempotency_key="t:1:c1", requested_at=T0, deadline_at=T0)


async def test_a_breaker_is_fed_once_after_the_save_even_when_the_transition_ran_twice():
    sim = await waiting()
    call = sim.state.pending[0]
    failed = ToolResultPayload(call_id=call.call_id, tool="kb_search", idempotency_key=call.idempotency_key,
                               outcome="error", error=ToolError(error_code="unavailable", kind="transient", message="down"),
                               duration_ms=5.0)
    feeds: list[int] = []

    def record(state: TaskState) -> Step | None:
        step = recording.record_results(sim.deps, state, [failed], sim.now)
        feeds.append(sum(isinstance(e, FeedBreaker) for e in step.effects))
        return step

    breaker = sim.deps.breaker("kb_search")
    assert breaker is not None and breaker.count == 0
    await sim.interp.apply(sim.state.task_id, record, loaded=stale(sim))
    assert feeds == [1, 1]  # decided by both attempts ...
    assert breaker.count == 1  # ... fed once, by the attempt that saved


async def test_an_approval_scenario_leaves_every_input_as_it_was():
    sim = Sim(TestModel(Reply(tool_calls=[code("print(1+1)")]), Reply(content="2")), allowed=["code_exec"])
    await sim.ask()  # watched: the start, the vetting and the approval request
    assert sim.state.status == "waiting_approval"
