"""Rules T8, A23 and A24 end to end: a web replica SIGKILLed mid-call is seen gone from Redis's
connections, the orchestrator's sweeper sends the call again at once to the other replica's
partition, that replica takes the dead run's claim over, and the task completes with the page;
an orchestrator SIGKILLed mid-step has its step resumed by the other replica before its lease
(15 s, the default) could lapse.

Before these rules the call waited for its claim to lapse (``CLAIM_TTL_S``, 10 s) and for the
next re-send (rule A14, every 10 s); the test checks the re-send came before the claim could have
lapsed. The time itself goes to bench/chaos.py ("time lost per kill"), not into an assertion.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import pytest
import redis as redis_sync
from test_sigterm_in_flight import Site, site  # noqa: F401 - a page held until ``release``, counting ``hits``

from ops import infra
from ops.client import create_task, stream_task
from ops.stack import Stack
from conduit.records import keys
from conduit.runtime import owners
from conduit.runtime.redis_client import make_redis
from conduit.runtime.settings import Settings
from conduit.runtime.toolclaims import CLAIM_TTL_S
from contracts import topics
from testkit.scripted_model import ScriptedModel, Turn


@pytest.fixture(scope="module")
def stack(tmp_path_factory, model: ScriptedModel, site: Site) -> Iterator[Stack]:
    """Its own broker and Redis (the embedded ones), not the session's: this module SIGKILLs members of the web
    and orchestrator consumer groups, and a group left mid-rebalance must not hold a later module's services
    (a CI run on 2026-12-05 saw every later web service on the session broker never check in)."""
    settings = Settings(data_dir=tmp_path_factory.mktemp("owner-gone"), gateway_port=infra.free_port(),
                        embedded_kafka_port=infra.free_port(), embedded_redis_port=infra.free_port())
    st = Stack(settings, services=("web", "orchestrator", "gateway"), scale={"web": 2, "orchestrator": 2},
               extra_env={"OPENAI_BASE_URL": model.base_url, "OPENAI_API_KEY": "test", "CONDUIT_MODEL": "scripted",
                          "CONDUIT_SEARXNG_URL": site.base, "CONDUIT_WEB_ALLOW_PRIVATE": "true",
                          "CONDUIT_APPROVAL_POLICIES": "{\"code_exec\": \"never\"}", "CONDUIT_LOG_LEVEL": "INFO"}).start()
    yield st
    st.stop()


def runner_of(stack: Stack, r: redis_sync.Redis) -> str:
    """The stack key (``web`` or ``web-2``) of the replica holding the one web call's claim."""
    for key in r.scan_iter(match=keys.tool_claim("*")):
        parsed = owners.parse(r.get(key).decode())
        for name, proc in stack.procs.items():
            if parsed is not None and proc.pid == parsed[2]:
                return name
    raise AssertionError("no claim names a web replica")


def test_a_call_whose_replica_is_sigkilled_is_sent_again_at_once_and_answered(stack, model, site):
    model.default = lambda body: (Turn(content="征收率为百分之三。") if any(
        m["role"] == "tool" for m in body["messages"]) else Turn(
        tool_calls=[{"name": "web_fetch", "arguments": {"url": f"{site.base}/page", "reason": "查征收率"}}]))
    result: dict = {}

    def client() -> None:
        created = create_task(stack.gateway_url, "抓网页时进程被杀", api_key=stack.admin_key)
        result["events"] = list(stream_task(stack.gateway_url, created["task_id"], read_timeout_s=90, reconnects=20,
                                            api_key=stack.admin_key))

    thread = threading.Thread(target=client)
    thread.start()
    assert site.arrived.wait(60), "no web replica asked for the page"
    with redis_sync.Redis.from_url(stack.settings.store.url()) as r:
        victim = runner_of(stack, r)
    stack.procs[victim].proc.kill()
    killed_at = time.monotonic()
    deadline = killed_at + 60
    while site.hits < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    resent_after_s = time.monotonic() - killed_at
    site.release.set()
    thread.join(90)
    assert site.hits == 2, "the call was not run again after its replica died"
    assert resent_after_s < CLAIM_TTL_S, f"re-run {resent_after_s:.1f} s after the kill: the claim's TTL, not rule T8"
    events = result["events"]
    assert [e.event for e in events if e.event.startswith("task.") and e.event != "task.accepted"][-1] == "task.completed"
    tools = [e.data for e in events if e.event == "tool.completed"]
    assert len(tools) == 1 and tools[0]["outcome"] == "ok"
    logs = stack.settings.stack.data_dir / "logs"
    assert any("whose owner is gone" in p.read_text(encoding="utf-8", errors="replace")
               for p in logs.glob("orchestrator*.log"))
    survivor = "web-2" if victim == "web" else "web"
    assert "taken over (rule T8)" in (logs / f"{survivor}.log").read_text(encoding="utf-8", errors="replace")
    print(f"re-run at the site {resent_after_s:.2f} s after the SIGKILL")


def test_a_model_step_whose_orchestrator_is_sigkilled_resumes_before_its_lease_lapses(stack, model):
    """Rule A24: the step's lease would lapse after ``lease_ttl_s`` (15 s); the other replica's
    sweeper sees the owner gone and lapses it at once."""
    import json

    model.default = Turn(content="一段慢慢流出的答案。" * 5, chunks=30, chunk_delay_s=0.1)
    created = create_task(stack.gateway_url, "模型输出时进程被杀", api_key=stack.admin_key)
    killed_at, events = None, []
    for ev in stream_task(stack.gateway_url, created["task_id"], read_timeout_s=90, reconnects=20,
                          api_key=stack.admin_key):
        events.append(ev)
        if ev.event == "answer.delta" and killed_at is None:
            time.sleep(0.6)  # the replica's sweeper has listed the step (every 0.5 s)
            with redis_sync.Redis.from_url(stack.settings.store.url()) as r:
                listed = {k.decode(): json.loads(v)["tasks"] for k, v in r.hgetall(keys.STEPS).items()}
            owner = next(o for o, tasks in listed.items() if created["task_id"] in tasks)
            victim = next(name for name, proc in stack.procs.items() if proc.pid == owners.parse(owner)[2])
            stack.procs[victim].proc.kill()
            killed_at = time.monotonic()
    took_s = time.monotonic() - killed_at
    assert events[-1].event == "task.completed", [e.event for e in events][-5:]
    assert took_s < stack.settings.agent.lease_ttl_s, f"{took_s:.1f} s: the lease lapsed, rule A24 did not act"
    logs = stack.settings.stack.data_dir / "logs"
    assert any("whose replica is gone (rule A24)" in p.read_text(encoding="utf-8", errors="replace")
               for p in logs.glob("orchestrator*.log"))
    print(f"completed {took_s:.2f} s after the SIGKILL (3 s of streaming again included)")


async def test_the_web_topic_is_served_while_a_web_replica_lives(stack):
    """Rule A29's input: ``owners.served_topics`` reads the live web replicas' ``keys.members`` entries
    from Redis (a timeout of a web call then opens no circuit: a rolling restart is not the tool failing)."""
    client = make_redis(stack.settings.store)
    try:
        deadline = time.monotonic() + 30
        while topics.TOOL_REQUESTS_WEB not in (served := await owners.served_topics(client)):
            assert time.monotonic() < deadline, served
            await asyncio.sleep(0.2)
        assert topics.TOOL_REQUESTS_KB not in served  # no retriever in this stack
    finally:
        await client.aclose()
