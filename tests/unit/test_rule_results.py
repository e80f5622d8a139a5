"""Recording rules: transient errors are retried with jittered exponential backoff, every
result feeds the tool breaker, deadlines give timeouts, evidence is pooled and numbered,
answers' citations are checked (in process)."""

from __future__ import annotations

from datetime import timedelta

from agentsim import Reply, Sim, TestModel, kb, ok, passage
from contracts import topics
from contracts.events import ToolError, ToolResultPayload
from services.orchestrator.agent import recording, timers
from services.orchestrator.agent.state import Phase


def transient_error(call) -> ToolResultPayload:
    return ToolResultPayload(call_id=call.call_id, tool=call.tool, idempotency_key=call.idempotency_key, outcome="error",
                             error=ToolError(error_code="upstream_down", kind="transient", message="503"))


async def _waiting_sim(**fields) -> tuple[Sim, list]:
    held: list = []
    sim = Sim(TestModel(Reply(tool_calls=[kb("q")]), Reply(content="答[1]。")),
              tools={"kb_search": lambda c: held.append(c) or None}, **fields)
    await sim.ask()
    return sim, held


async def test_transient_error_is_retried_after_a_jittered_backoff_then_shown():
    sim, held = await _waiting_sim(tool_max_retries=2, tool_retry_base_s=0.5)
    call = sim.state.pending[0]
    for attempt in (1, 2):
        step = recording.record_results(sim.deps, sim.state, [transient_error(held[-1])], sim.now)
        await sim.run(step)
        call = sim.state.pending[0]
        assert call.result is None and call.attempts == attempt
        backoff = (call.retry_at - sim.now).total_seconds()
        assert 0 <= backoff <= 0.5 * 2 ** attempt  # full jitter: uniform(0, base × 2^attempt)
        assert call.deadline_at == call.retry_at + timedelta(seconds=sim.deps.settings.tools.tool_timeout_s)
        await sim.wake(backoff + 0.001)  # the retry is due: the request goes out again
        assert len(held) == attempt + 1 and held[-1].idempotency_key == held[0].idempotency_key
    await sim.run(recording.record_results(sim.deps, sim.state, [transient_error(held[-1])], sim.now))
    assert sim.state.status == "completed"  # retries used up: the model saw the error
    assert "upstream_down" in sim.tool_messages()[0]
    assert sim.of("tool.completed")[0].outcome == "error"


def test_backoff_is_jittered_and_grows_with_the_attempt():
    sim = Sim(TestModel(), tool_retry_base_s=1.0)
    draws = {a: [recording.backoff_s(sim.deps, a) for _ in range(200)] for a in (1, 2, 3)}
    for attempt, values in draws.items():
        assert all(0 <= v <= 2 ** attempt for v in values)
        assert len(set(values)) > 150  # jitter: not one fixed delay
    assert max(draws[3]) > 2 ** 2  # the bound doubles each attempt


async def test_a_duplicate_or_unknown_delivery_changes_nothing():
    sim, held = await _waiting_sim()
    await sim.run(recording.record_results(sim.deps, sim.state, [ok(held[0], passage("a"))], sim.now))
    assert sim.state.status == "completed"
    sim2, held2 = await _waiting_sim()
    stray = ok(held2[0]).model_copy(update={"idempotency_key": "other"})
    assert recording.record_results(sim2.deps, sim2.state, [stray], sim2.now) is None
    first = recording.record_results(sim2.deps, sim2.state, [ok(held2[0])], sim2.now)
    assert first is not None and recording.record_results(sim2.deps, sim2.state, [ok(held2[0])], sim2.now) is None


async def test_missing_result_times_out_at_the_deadline_and_counts_against_the_breaker():
    sim, _ = await _waiting_sim(tool_timeout_s=30, tool_breaker_failures=1)
    await sim.wake(10)
    assert sim.state.phase == Phase.TOOLS  # not yet due
    await sim.wake(21)
    done = sim.of("tool.completed")[0]
    assert done.outcome == "timeout" and done.error_code == "tool_timeout"
    assert sim.deps.tool_breakers["kb_search"].state(sim.now.timestamp()) == "open"


async def test_dead_tool_times_out_then_its_breaker_fails_fast():
    url = {"url": "https://example.org/x", "reason": "读网页"}
    model = TestModel(Reply(tool_calls=[{"name": "web_fetch", "arguments": url}]),
                      Reply(tool_calls=[{"name": "web_fetch", "arguments": {**url, "url": "https://example.org/y"}}]),
                      Reply(tool_calls=[{"name": "web_fetch", "arguments": {**url, "url": "https://example.org/z"}}]),
                      Reply(content="网页服务不可用。"))
    sim = Sim(model, tools={}, allowed=["kb_search", "web_fetch"], tool_timeout_s=4, tool_breaker_failures=2)
    await sim.ask()
    await sim.wake(4.1)
    await sim.wake(4.1)
    assert sim.state.status == "completed"
    outcomes = sim.of("tool.completed")
    assert [o.outcome for o in outcomes[:2]] == ["timeout", "timeout"]
    assert outcomes[2].error_code == "circuit_open" and len(sim.requests) == 2


async def test_a_rolling_restart_costs_a_timeout_but_opens_no_circuit():
    """Rule A29 (issue 39): calls that got no answer while a web replica was serving (a rolling
    restart: the request waited through consumer-group rebalances) time out, but do not open
    web_fetch's circuit; the next call goes out and is answered (before, the third such timeout
    opened it and the next tasks' pages were refused unfetched)."""
    urls = [{"url": f"https://example.org/{n}", "reason": "读网页"} for n in range(3)]
    model = TestModel(*(Reply(tool_calls=[{"name": "web_fetch", "arguments": u}]) for u in urls), Reply(content="答[1]。"))
    held: list = []
    sim = Sim(model, tools={"web_fetch": lambda c: held.append(c) or (ok(c, passage("页")) if len(held) > 2 else None)},
              allowed=["kb_search", "web_fetch"], tool_timeout_s=4, tool_breaker_failures=2)
    await sim.ask()
    for _ in range(2):
        await sim.wake(4.1, served=frozenset({topics.TOOL_REQUESTS_WEB}))
    outcomes = sim.of("tool.completed")
    assert [o.outcome for o in outcomes] == ["timeout", "timeout", "ok"]  # not ["timeout", "timeout", "error"]: circuit_open
    assert len(held) == 3 and sim.deps.tool_breakers["web_fetch"].state(sim.now.timestamp()) == "closed"
    assert sim.state.status == "completed"


async def test_a_timeout_of_another_service_still_feeds_the_breaker():
    """Rule A29 names the served topics: a live retriever does not excuse a web call that got no answer."""
    sim, _ = await _waiting_sim(tool_timeout_s=30, tool_breaker_failures=1)
    await sim.wake(31, served=frozenset({topics.TOOL_REQUESTS_WEB}))
    assert sim.deps.tool_breakers["kb_search"].state(sim.now.timestamp()) == "open"


async def test_a_call_whose_run_is_under_way_waits_for_the_runs_own_deadline():
    """Rule A36 (issue 39): a request that waited in its topic (a rolling restart) and began 3 s before its
    deadline is not timed out at that deadline: it gets the run's own deadline (its start + tool_timeout_s)
    plus RUN_GRACE_S, and its result is recorded; past that, it times out."""
    sim, held = await _waiting_sim(tool_timeout_s=4)
    key = held[0].idempotency_key
    began = {key: (sim.now + timedelta(seconds=3)).timestamp()}
    await sim.wake(4.1, runs_started=began)
    assert not sim.of("tool.completed") and sim.state.phase == Phase.TOOLS
    assert sim.state.pending[0].deadline_at == sim.now - timedelta(seconds=4.1) + timedelta(seconds=3 + 4 + timers.RUN_GRACE_S)
    await sim.run(recording.record_results(sim.deps, sim.state, [ok(held[0], passage("a"))], sim.now))
    assert sim.of("tool.completed")[0].outcome == "ok" and sim.state.status == "completed"
    late, late_held = await _waiting_sim(tool_timeout_s=4)
    await late.wake(4.1, runs_started={late_held[0].idempotency_key: (late.now + timedelta(seconds=3)).timestamp()})
    await late.wake(8.0, runs_started={late_held[0].idempotency_key: (late.now - timedelta(seconds=9)).timestamp()})
    assert late.of("tool.completed")[0].outcome == "timeout"  # the run's own deadline passed too


async def test_a_call_that_waited_through_a_rebalance_gets_its_time_from_the_rebalance_end():
    """Rule A37 (issue 39): a call not yet begun at its deadline whose request topic's consumers settled
    after it was requested (a chaos run: both web replicas restarted, their group took 11-31 s to assign
    the partitions) gets tool_timeout_s from the settling, and its result is recorded; a settling before
    the request, or one whose time has passed too, leaves the timeout."""
    sim, held = await _waiting_sim(tool_timeout_s=4)
    requested = sim.state.pending[0].requested_at
    settled = {topics.TOOL_REQUESTS_KB: (requested + timedelta(seconds=3)).timestamp()}
    await sim.wake(4.1, settled=settled)
    assert not sim.of("tool.completed") and sim.state.phase == Phase.TOOLS
    assert sim.state.pending[0].deadline_at == requested + timedelta(seconds=3 + 4)
    await sim.run(recording.record_results(sim.deps, sim.state, [ok(held[0], passage("a"))], sim.now))
    assert sim.of("tool.completed")[0].outcome == "ok" and sim.state.status == "completed"
    before, _ = await _waiting_sim(tool_timeout_s=4)
    early = (before.state.pending[0].requested_at - timedelta(seconds=1)).timestamp()
    await before.wake(4.1, settled={topics.TOOL_REQUESTS_KB: early})
    assert before.of("tool.completed")[0].outcome == "timeout"  # no rebalance since the request
    passed, _ = await _waiting_sim(tool_timeout_s=4)
    await passed.wake(4.1, settled={topics.TOOL_REQUESTS_KB: (passed.now + timedelta(seconds=1)).timestamp()})
    await passed.wake(4.0, settled={topics.TOOL_REQUESTS_KB: (passed.now - timedelta(seconds=3)).timestamp()})
    assert passed.of("tool.completed")[0].outcome == "timeout"  # settled 5.1 s in: its 4 s passed too
    stuck, _ = await _waiting_sim(tool_timeout_s=4)
    for _ in range(3):  # the group never settles: settling now at every look
        await stuck.wake(4.1, settled={topics.TOOL_REQUESTS_KB: (stuck.now + timedelta(seconds=4.1)).timestamp()})
    outcome = stuck.of("tool.completed")[0]
    assert outcome.outcome == "timeout"  # at most REBALANCE_WAIT_MAX deadlines from the request
    assert timers.REBALANCE_WAIT_MAX * 4000 <= outcome.duration_ms < timers.REBALANCE_WAIT_MAX * 4000 + 4100


async def test_unsent_request_is_sent_again_by_the_sweeper():
    sim, held = await _waiting_sim()
    sim.state.pending[0].sent = False  # as if the replica died between the checkpoint and the publish
    await sim.wake(2.5)
    assert len(held) == 2 and sim.state.pending[0].sent


async def test_a_request_without_a_result_is_sent_again_until_its_deadline():
    """Rule A14: the broker may have lost it; every repeat has the same idempotency key."""
    sim, held = await _waiting_sim(tool_timeout_s=25)
    await sim.wake(5)
    assert len(held) == 1  # not due yet
    await sim.wake(5.5)
    await sim.wake(10.5)
    assert len(held) == 3 and len({c.idempotency_key for c in held}) == 1
    await sim.wake(4.5)  # past the deadline: a timeout, not another send
    assert len(held) == 3 and sim.of("tool.completed")[0].outcome == "timeout"


async def test_a_deadline_waits_while_the_broker_does_not_answer():
    """Rule A15: no tool could answer while the bus is down; the call gets its time once it is back."""
    sim, held = await _waiting_sim(tool_timeout_s=25)
    await sim.wake(26, bus_up=False)  # past the deadline, but the broker is down: postponed, not a timeout
    assert not sim.of("tool.completed")
    await sim.wake(20)  # the broker is back: 20 s into the new 25 s
    assert not sim.of("tool.completed") and len(held) >= 2
    await sim.wake(6)
    assert sim.of("tool.completed")[0].outcome == "timeout"


async def test_a_postponed_deadline_never_passes_the_task_deadline():
    """Rule A15 within rule E2: at the task's deadline the call times out, bus or no bus."""
    sim, _ = await _waiting_sim(tool_timeout_s=25, task_deadline_s=40)
    await sim.wake(26, bus_up=False)  # moved to the task's deadline, 40 s after the start
    assert not sim.of("tool.completed")
    await sim.wake(15, bus_up=False)
    assert sim.of("tool.completed")[0].outcome == "timeout"


async def test_evidence_pool_numbers_new_passages_and_the_answer_cites_them():
    model = TestModel(Reply(tool_calls=[kb("一")]), Reply(tool_calls=[kb("二")]), Reply(content="甲[1]，乙[2]，丙[9]。"))
    answers = iter([[passage("a"), passage("b")], [passage("b"), passage("c")]])
    sim = Sim(model, tools={"kb_search": lambda c: ok(c, *next(answers))})
    state = await sim.ask()
    assert [(e.index, e.chunk_id) for e in state.evidence] == [(1, "a"), (2, "b"), (3, "c")]
    evidence_events = sim.of("evidence")
    assert [[i.index for i in e.items] for e in evidence_events] == [[1, 2], [3]]
    assert state.answer == "甲[1]，乙[2]，丙。"  # [9] names nothing in the pool: removed
    done = sim.events[-1]
    assert done.type == "task.completed" and [c.index for c in done.citations] == [1, 2]
    assert {"phase": "citations", "removed": [9]} in state.trace
