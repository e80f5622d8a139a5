"""Team mode over the real stack (rules D1-D9, docs/agent-rules.md): a supervisor's two workers
run in parallel as their own tasks on two orchestrator replicas, the answer's every [n] resolves,
an orchestrator SIGKILLed during the fan-out loses nothing (each worker completes once, each
tool runs once, the parent completes once), and cancelling the question cancels its workers. The rules alone are tests/unit/test_rule_team.py.

Real tansu broker, real Redis, Qdrant Edge with two real laws, the scripted OpenAI-compatible
model over HTTP; each replica names its own model, so every model call says which replica made it.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ops import infra
from ops.client import SseEvent, create_task, stream_task
from ops.stack import Stack
from testkit.bus import agent_events_of
from testkit.scripted_model import Turn
from testkit.stack import add_replica, auth, new_key, restart, start_stack
from services.orchestrator.agent import finalizer, team

QUESTION = "个人所得税和增值税对小规模纳税人分别有什么规定？"
WORKER_DELAY_S = 2.0  # the second worker's call must arrive before the first one's answer (parallel)


@pytest.fixture(scope="module")
def broker(tmp_path_factory) -> Iterator[str]:
    """A private tansu: the SIGKILL during fan-out leaves tansu's orchestrator group in a state
    where later members of other test modules never finished joining on the session's broker."""
    root = tmp_path_factory.mktemp("team-broker")
    port = infra.free_port()
    proc = infra.start_tansu(port, root / "tansu.log")
    yield f"127.0.0.1:{port}"
    infra.stop(proc)


@pytest.fixture(scope="module")
def stack(broker, infra_stack, tmp_path_factory, model) -> Iterator[Stack]:
    st = start_stack(
        broker, infra_stack.redis_url, tmp_path_factory.mktemp("team-data"),
        ("retriever", "orchestrator", "gateway"),
        {"OPENAI_BASE_URL": model.base_url, "OPENAI_API_KEY": "test", "CONDUIT_MODEL": "replica-1",
         "CONDUIT_LEASE_TTL_S": "3", "CONDUIT_TOOL_TIMEOUT_S": "30"},
        laws=["中华人民共和国个人所得税法", "中华人民共和国增值税法"])
    try:
        add_replica(st, "orchestrator", "orchestrator-2", CONDUIT_MODEL="replica-2")
        st.wait_ready(120)
        yield st
    finally:
        st.stop()


def role(body: dict[str, Any]) -> str:
    system = body["messages"][0]["content"]
    if system.startswith(finalizer.FINALIZER_PROMPT[:20]):
        return "finalizer"
    return "supervisor" if system.startswith(team.SUPERVISOR_PROMPT[:20]) else "worker"


def cited(texts: list[str]) -> str:
    return "".join(f"[{n}]" for n in sorted(set(re.findall(r"\[(\d+)\]", "\n".join(texts))), key=int)[:4])


def brain(worker_delay_s: float):
    """Every role of the scripted model: the supervisor delegates one sub-question per tax, then cites
    what its workers' results show; a worker searches (after ``worker_delay_s``) and cites what it
    found; the finalizer rewrites the draft without changing it."""
    def turn(body: dict[str, Any]) -> Turn:
        tool_texts = [m["content"] for m in body["messages"] if m["role"] == "tool"]
        who = role(body)
        if who == "finalizer":
            draft = re.search(r"<untrusted_content>\n(.*)\n</untrusted_content>", body["messages"][-1]["content"], re.S)
            return Turn(content="综上所述，" + draft.group(1))
        if who == "supervisor":
            if not tool_texts:
                return Turn(tool_calls=[
                    {"name": "delegate", "arguments": {"worker": "kb_researcher", "task": "小规模纳税人 个人所得税", "reason": "分头研究"}},
                    {"name": "delegate", "arguments": {"worker": "kb_researcher", "task": "小规模纳税人 增值税 征收率", "reason": "分头研究"}}])
            return Turn(content=f"个人所得税和增值税的规定见下{cited(tool_texts)}。")
        task = next(m["content"] for m in body["messages"] if m["role"] == "user")
        if not tool_texts:
            return Turn(tool_calls=[{"name": "kb_search", "arguments": {"query": task, "reason": "查法条"}}],
                        delay_s=worker_delay_s)
        return Turn(content=f"{task}：相关条文如下{cited(tool_texts)}。")
    return turn


@pytest.fixture(autouse=True)
def script(model):
    model.script.clear()
    model.default = brain(WORKER_DELAY_S)
    yield


def ask(stack: Stack, on_event=None) -> tuple[str, list[SseEvent]]:
    created = create_task(stack.gateway_url, QUESTION, mode="team", api_key=stack.admin_key)
    seen: list[SseEvent] = []
    for ev in stream_task(stack.gateway_url, created["task_id"], read_timeout_s=180, reconnects=3, api_key=stack.admin_key):
        seen.append(ev)
        if on_event:
            on_event(ev)
    return created["task_id"], seen


def child_stream(stack: Stack, task_id: str) -> list[SseEvent]:
    return list(stream_task(stack.gateway_url, task_id, read_timeout_s=180, reconnects=3, api_key=stack.admin_key))


def types(events: list[SseEvent]) -> list[str]:
    return [e.event for e in events]


def assert_answer_resolves(events: list[SseEvent]) -> None:
    evidence = [item for e in events if e.event == "evidence" for item in e.data["items"]]
    done = events[-1]
    assert done.event == "task.completed", types(events)
    numbers = {int(n) for n in re.findall(r"\[(\d+)\]", done.data["answer"])}
    assert numbers and numbers == {c["index"] for c in done.data["citations"]}
    by_index = {item["index"]: item for item in evidence}
    assert len(by_index) == len(evidence)  # one number per evidence item
    for c in done.data["citations"]:
        assert by_index[c["index"]]["chunk_id"] == c["chunk_id"]


def test_team_question_runs_two_workers_in_parallel_and_every_citation_resolves(stack, model):
    first = len(model.requests)
    task_id, events = ask(stack)
    t = types(events)
    assert t.count("worker.started") == 2 and t.count("worker.completed") == 2 and t.count("task.completed") == 1
    assert_answer_resolves(events)
    answer = events[-1].data["answer"]
    assert answer.startswith("综上所述，个人所得税和增值税的规定见下[") and "kb_researcher" not in answer
    # the draft is not streamed: the only text is the finalizer's
    assert "".join(e.data["text"] for e in events if e.event == "answer.delta").startswith("综上所述")
    # the two workers' first model calls started together (parallel), not one after the other
    bodies = list(zip(model.requests[first:], model.received_at[first:]))
    worker_first = [at for body, at in bodies if role(body) == "worker" and not any(
        m["role"] == "tool" for m in body["messages"])]
    assert len(worker_first) == 2 and abs(worker_first[0] - worker_first[1]) < WORKER_DELAY_S
    replicas = {body["model"] for body, _ in bodies}
    print("replicas that made model calls:", sorted(replicas))
    assert replicas <= {"replica-1", "replica-2"}
    # each worker is a task of its own: its stream is readable by the same owner, not by another user
    children = [e.data["task_id"] for e in events if e.event == "worker.started"]
    for child in children:
        own = child_stream(stack, child)
        assert types(own).count("task.completed") == 1 and types(own).count("tool.completed") == 1
    other = new_key(stack.settings.store.url(), tenant="default", user="someone-else", role="member")
    r = httpx.get(f"{stack.gateway_url}/v1/tasks/{children[0]}", headers=auth(other), timeout=10)
    assert r.status_code == 404
    # the public topic says whose workers they are
    public = asyncio.run(agent_events_of(stack.settings.bus.bootstrap_servers(), children[0], "task.completed"))
    assert {e.payload.parent_task_id for e in public} == {task_id}
    # deleting the session deletes its workers' tasks too
    session_id = events[0].data["session_id"]
    r = httpx.delete(f"{stack.gateway_url}/v1/sessions/{session_id}", headers=auth(stack.admin_key), timeout=10)
    assert r.status_code == 200
    for child in children:
        r = httpx.get(f"{stack.gateway_url}/v1/tasks/{child}", headers=auth(stack.admin_key), timeout=10)
        assert r.status_code == 404, r.text


def test_sigkill_of_an_orchestrator_during_fan_out_loses_nothing(stack, model):
    model.default = brain(3.0)  # the workers' model calls are still running when the kill lands
    killed = threading.Event()
    threads: list[threading.Thread] = []

    def kill_and_replace() -> None:
        stack.procs["orchestrator"].kill()
        restart(stack, "orchestrator")

    def on_event(ev: SseEvent) -> None:
        if ev.event == "worker.started" and not killed.is_set():
            killed.set()
            threads.append(threading.Thread(target=kill_and_replace, daemon=True))
            threads[-1].start()

    task_id, events = ask(stack, on_event)
    threads[0].join(120)  # the replacement checked in (the stack is whole again for later tests)
    t = types(events)
    assert killed.is_set()
    assert t.count("task.completed") == 1 and t.count("worker.started") == 2 and t.count("worker.completed") == 2
    assert_answer_resolves(events)
    for child in (e.data["task_id"] for e in events if e.event == "worker.started"):
        own = child_stream(stack, child)
        assert types(own).count("task.completed") == 1, types(own)
        trace = httpx.get(f"{stack.gateway_url}/v1/tasks/{child}/trace", headers=auth(stack.admin_key), timeout=10)
        assert len([x for x in trace.json()["trace"] if x["phase"] == "tool"]) == 1  # its search ran once


def test_cancelling_the_question_cancels_its_workers(stack, model):
    model.default = brain(3.0)  # the workers are still in their model calls when the cancel lands
    task_id = create_task(stack.gateway_url, QUESTION, mode="team", api_key=stack.admin_key)["task_id"]
    started: list[str] = []
    events: list[SseEvent] = []
    for ev in stream_task(stack.gateway_url, task_id, read_timeout_s=180, reconnects=3, api_key=stack.admin_key):
        events.append(ev)
        if ev.event == "worker.started":
            started.append(ev.data["task_id"])
            if len(started) == 2:
                r = httpx.post(f"{stack.gateway_url}/v1/tasks/{task_id}/cancel", headers=auth(stack.admin_key), timeout=10)
                assert r.status_code == 202
    assert events[-1].event == "task.cancelled" and len(started) == 2
    for child in started:  # rule D8: each worker's own stream ends cancelled too
        assert child_stream(stack, child)[-1].event == "task.cancelled"


def test_the_page_asks_in_team_mode_and_shows_each_worker_in_the_record(stack):
    """The composer's team switch sends ``mode: "team"``; the status line says the workers are
    researching, and the record lists each worker with its sub-question, result and time."""
    pytest.importorskip("playwright")
    from playwright.sync_api import expect

    from testkit.page import CHROMIUM, ask as ask_on_page, chromium, last_turn, open_page, shot

    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is not installed (.ci/run installs it)")
    with chromium() as browser:
        page = open_page(browser, stack)
        page.get_by_label("团队").check()
        ask_on_page(page, QUESTION)
        turn = last_turn(page)
        expect(turn.locator(".status-text")).to_have_text("研究员正在并行研究…")
        expect(turn.locator(".answer")).to_contain_text("综上所述")
        turn.locator("details.record summary").click()
        workers = turn.locator(".rec-worker")
        expect(workers).to_have_count(2)
        expect(workers.first).to_contain_text("研究员 · kb_researcher")
        expect(turn.locator("details.record")).to_contain_text("小规模纳税人 增值税 征收率")
        expect(workers.locator(".rec-stdout").first).to_contain_text("相关条文如下")
        shot(page, "team-record", full=True)
        page.context.close()
