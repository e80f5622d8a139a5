"""Rules T8 and A23: a tool call whose run's process is gone is noticed from Redis's connections
and sent again at once to a live replica (pure rules, in process: no broker, no Redis)."""

from __future__ import annotations

import json
import os
import socket
from datetime import timedelta

from agentsim import Reply, Sim, TestModel, kb, ok
from conduit.runtime import owners
from services.orchestrator.agent import recording, timers
from services.orchestrator.agent.effects import PublishTool
from services.orchestrator.sweeper import STEPS_KEPT_S, steps_of_others

WEB = "web:host-a:41:0a1b2c3d"
OTHER = "web:host-b:42:ffee0011"


def seen(*connected: str, uptime_s: float = 100.0) -> owners.Sighting:
    return owners.Sighting(uptime_s=uptime_s, connected=frozenset(owners.connection_name(o) for o in connected))


def test_an_owner_names_its_service_host_pid_and_incarnation():
    me = owners.owner_id("web")
    assert owners.parse(me) == ("web", socket.gethostname(), os.getpid(), owners.PROCESS_NONCE)
    assert owners.parse("host:12:abcd") is None  # a claim written before rule T8: its TTL decides


def test_an_owner_lives_while_redis_holds_a_connection_named_after_it():
    assert not owners.is_gone(WEB, seen(WEB, OTHER))
    assert owners.is_gone(WEB, seen(OTHER))
    # a restarted container (same host and pid 1, another nonce) does not keep its predecessor alive
    assert owners.is_gone("web:pod:1:aaaaaaaa", seen("web:pod:1:bbbbbbbb"))


def test_nobody_is_declared_gone_within_the_grace_after_a_redis_start():
    """After a Redis restart every process reconnects on its next command (heartbeat: 2 s)."""
    assert not owners.is_gone(WEB, seen(uptime_s=owners.OWNER_GRACE_S - 0.5))
    assert owners.is_gone(WEB, seen(uptime_s=owners.OWNER_GRACE_S))
    assert not owners.is_gone("host:12:abcd", seen())  # an older claim: never declared gone here


def test_client_names_are_read_from_a_client_list_reply():
    reply = (f"id=3 addr=127.0.0.1:5 name={owners.connection_name(WEB)} age=9 cmd=client|list\n"
             "id=4 addr=127.0.0.1:6 name= age=1 cmd=get\n")
    assert owners._names(reply) == {owners.connection_name(WEB)}


def test_a_run_entry_names_owner_task_and_call():
    member = owners.run_member(WEB, "t1", "t1:2:call_a")
    assert owners.parse_run(member) == (WEB, "t1", "t1:2:call_a")
    assert owners.parse_run(member.encode()) == (WEB, "t1", "t1:2:call_a")
    assert owners.parse_run("junk") is None


def test_a_rescue_goes_to_a_partition_a_fresh_live_member_holds():
    now = 1000.0
    entries = {WEB: {"parts": {"t": [0, 1]}, "at": now}, OTHER: {"parts": {"t": [2, 3]}, "at": now - 1}}
    assert owners.pick_partition(entries, "t", {WEB}, "task-1", now) in (2, 3)
    assert owners.pick_partition(entries, "t", {WEB}, "task-1", now) == owners.pick_partition(
        entries, "t", {WEB}, "task-1", now)  # stable for one key
    stale = {OTHER: {"parts": {"t": [2]}, "at": now - owners.MEMBER_FRESH_S - 1}}
    assert owners.pick_partition(stale, "t", set(), "k", now) is None  # not announced lately: by key
    assert owners.pick_partition(entries, "other-topic", set(), "k", now) is None


def test_a_topic_is_settled_since_its_members_partitions_last_changed():
    """Rule A37's input: each member dates its partition list from its last change (``settled_since``); a
    topic settled when its latest member did, and is settling now while its live members hold none of it."""
    since = owners.settled_since({}, {}, {"t": []}, 10.0)
    assert since == {"t": 10.0}
    since = owners.settled_since({"t": []}, since, {"t": [0, 1]}, 13.0)
    assert since == {"t": 13.0}  # assigned after the rebalance: dated from then
    assert owners.settled_since({"t": [0, 1]}, since, {"t": [0, 1]}, 20.0) == {"t": 13.0}
    now = 100.0
    entries = [{"parts": {"t": [0, 1]}, "since": {"t": 90.0}, "at": now},
               {"parts": {"t": [2, 3]}, "since": {"t": 95.0}, "at": now - 1},
               {"parts": {"t": [4]}, "since": {"t": 99.0}, "at": now - owners.MEMBER_FRESH_S - 1}]  # stale
    view = owners.read_topics_served(entries, now)
    assert view.served == frozenset({"t"}) and view.settled == {"t": 95.0}
    rebalancing = owners.read_topics_served([{"parts": {"t": []}, "since": {"t": 98.0}, "at": now}], now)
    assert rebalancing.served == frozenset({"t"}) and rebalancing.settled == {"t": now}
    assert owners.read_topics_served([], now) == owners.TopicsServed()


async def _waiting() -> Sim:
    sim = Sim(TestModel(Reply(tool_calls=[kb("q")]), Reply(content="答[1]。")), tools={"kb_search": lambda c: None})
    await sim.ask()
    return sim


async def test_a_call_whose_owner_is_gone_is_sent_again_at_once_to_a_live_replica():
    """Rule A23: no wait for the claim to lapse (10 s) and the next A14 re-send (10 s)."""
    sim = await _waiting()
    call = sim.state.pending[0]
    sim.now += timedelta(seconds=1)
    step = timers.rescue(sim.state, call.idempotency_key, WEB, sim.now)
    assert step is not None
    sent = [e for e in step.effects if isinstance(e, PublishTool)]
    assert [(e.call.idempotency_key, e.rescue) for e in sent] == [(call.idempotency_key, WEB)]
    await sim.run(step)
    assert len(sim.requests) == 2 and sim.state.pending[0].sent
    assert sim.state.pending[0].resend_at() == sim.now + timedelta(seconds=10)  # A14 counts from the rescue


async def test_a_rescue_leaves_answered_unsent_and_ended_calls_alone():
    sim = await _waiting()
    call = sim.state.pending[0]
    assert timers.rescue(sim.state, "another:1:key", WEB, sim.now) is None
    call.sent = False  # not on the bus yet: the outbox (OUTBOX_RESEND_S) sends it
    assert timers.rescue(sim.state, call.idempotency_key, WEB, sim.now) is None
    call.sent, call.approval = True, "pending"
    assert timers.rescue(sim.state, call.idempotency_key, WEB, sim.now) is None
    call.approval = None
    await sim.run(recording.record_results(sim.deps, sim.state, [ok(call)], sim.now))
    assert timers.rescue(sim.state, call.idempotency_key, WEB, sim.now) is None  # answered (the task moved on)


def test_the_steps_of_other_orchestrators_are_read_and_stale_fields_dropped():
    """Rule A24: each replica lists its running model steps every pass; a field nobody rewrote
    for STEPS_KEPT_S belongs to a replica long gone (its leases lapsed by their TTL)."""
    now = 5000.0
    me, other, idle, old = "orchestrator:h:1:aa", "orchestrator:h:2:bb", "orchestrator:h:3:cc", "orchestrator:h:4:dd"
    fields = {me.encode(): json.dumps({"tasks": ["t1"], "at": now}),
              other.encode(): json.dumps({"tasks": ["t2", "t3"], "at": now - 0.4}),
              idle: json.dumps({"tasks": [], "at": now}),
              old: json.dumps({"tasks": ["t9"], "at": now - STEPS_KEPT_S - 1})}
    stepping, stale = steps_of_others(fields, me, now)
    assert stepping == {other: ["t2", "t3"], idle: []} and stale == [old]


async def test_a_wake_up_takes_a_result_the_tool_service_stored():
    """Rule A27: a result message lost with an orchestrator (consumed, then SIGKILLed) or waiting in
    a dead one's partition is read from the store by the next wake-up instead of waited for."""
    sim = await _waiting()
    call = sim.state.pending[0]
    assert [c.call_id for c in timers.awaiting(sim.state)] == [call.call_id]
    stranger = ok(call).model_copy(update={"idempotency_key": "other:1:call_x"})
    assert timers.take_stored(sim.deps, sim.state, [stranger], sim.now) is None  # not this task's call
    await sim.run(timers.take_stored(sim.deps, sim.state, [ok(call)], sim.now))
    assert sim.of("tool.completed")[0].outcome == "ok" and sim.types()[-1] == "task.completed"
    assert timers.awaiting(sim.state) == []


async def test_only_sent_calls_not_awaiting_approval_are_looked_up():
    sim = await _waiting()
    call = sim.state.pending[0]
    call.sent = False
    assert timers.awaiting(sim.state) == []
    call.sent, call.approval = True, "pending"
    assert timers.awaiting(sim.state) == []
