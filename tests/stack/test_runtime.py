"""The durable agent runtime (issue 5) over the real stack: approvals, tool timeouts and circuit
breaker, parallel calls, cancel, disconnecting clients, and
SIGKILLed orchestrators (while streaming, after a tool request, while waiting for approval),
plus two replicas sharing the work. The rules alone (loop detection, limits, approvals decided
independently, approval expiry) are tested in process in tests/unit.

Real tansu broker, real Redis, Qdrant Edge with one real law, the sandbox (bubblewrap when
present), scripted OpenAI-compatible model over HTTP.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
import redis as redis_lib

from ops.client import SseEvent, create_task, stream_task
from ops.stack import Stack
from conduit.runtime.liveness import alive_key
from conduit.runtime.toolservice import ToolFailure, ToolOutput, ToolService
from testkit.bus import agent_events_of, await_tool_result
from testkit.scripted_model import Turn
from testkit.stack import FAULT, HOOKS, add_replica, auth, orchestrator_crashing_once, restart, start_stack
from testkit.waits import wait_until
from contracts import topics
from contracts.evidence import EvidenceItem
from services.sandbox import isolation, watchdog
from services.sandbox.isolation import sandbox_status

TOOL_TIMEOUT_S = 4
APPROVAL_TTL_S = 60


@pytest.fixture(scope="module")
def stack(infra_stack, tmp_path_factory, model) -> Iterator[Stack]:
    st = start_stack(
        infra_stack.bootstrap, infra_stack.redis_url, tmp_path_factory.mktemp("runtime-data"),
        ("retriever", "sandbox", "orchestrator", "gateway"),
        {"OPENAI_BASE_URL": model.base_url, "OPENAI_API_KEY": "test", "CONDUIT_MODEL": "scripted",
         "CONDUIT_TOOL_TIMEOUT_S": str(TOOL_TIMEOUT_S), "CONDUIT_LEASE_TTL_S": "3",
         "CONDUIT_APPROVAL_TTL_S": str(APPROVAL_TTL_S), "CONDUIT_MAX_ROUNDS": "6", "CONDUIT_MAX_TOOL_CALLS": "5",
         "CONDUIT_TOOL_BREAKER_FAILURES": "2", "CONDUIT_TOOL_BREAKER_COOLDOWN_S": "60",
         # web tools are offered, but no web service runs: their calls time out
         "CONDUIT_SEARXNG_URL": "http://127.0.0.1:9"},
        laws=["中华人民共和国增值税法"])
    yield st
    st.stop()


@pytest.fixture(autouse=True)
def fresh_script(model):
    model.script.clear()
    model.default = Turn(content="OK.")
    yield


def kb(query: str) -> dict:
    return {"name": "kb_search", "arguments": {"query": query, "reason": "查法条"}}


def code(src: str) -> dict:
    return {"name": "code_exec", "arguments": {"code": src, "reason": "精确计算"}}


def tool_messages(body: dict) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


def events_of(stack: Stack, question: str, on_event=None, **extra) -> tuple[str, list[SseEvent]]:
    created = create_task(stack.gateway_url, question, **extra, api_key=stack.admin_key)
    seen: list[SseEvent] = []
    for ev in stream_task(stack.gateway_url, created["task_id"], read_timeout_s=120, reconnects=2, api_key=stack.admin_key):
        seen.append(ev)
        if on_event:
            on_event(created["task_id"], ev)
    return created["task_id"], seen


def decide(stack: Stack, task_id: str, call_id: str, **body) -> httpx.Response:
    return httpx.post(f"{stack.gateway_url}/v1/tasks/{task_id}/approvals/{call_id}", json=body, timeout=10, headers=auth(stack.admin_key))


def sandboxed_code_running() -> bool:
    """True while a program runs in a sandbox started by this test session's stack."""
    return any(_cmdline(pid).endswith(isolation.CODE_PATH) for pid in watchdog.process_tree(os.getpid()))


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""


def types(events: list[SseEvent]) -> list[str]:
    return [e.event for e in events]


# ------------------------------------------------------------------------------------ approvals
def test_approval_approve_runs_exactly_what_was_approved(stack, model):
    model.push(Turn(tool_calls=[code("print(6*7)")]), Turn(content="结果是 42（沙箱计算）。"))
    answers: list[httpx.Response] = []

    def on_event(task_id: str, ev: SseEvent) -> None:
        if ev.event == "tool.approval_required":
            view = httpx.get(f"{stack.gateway_url}/v1/tasks/{task_id}", headers=auth(stack.admin_key)).json()
            assert view["status"] == "waiting_approval" and view["pending_approvals"][0]["call_id"] == ev.data["call_id"]
            answers.append(decide(stack, task_id, ev.data["call_id"], decision="approve", arguments_digest="0" * 64))
            answers.append(decide(stack, task_id, ev.data["call_id"], decision="approve",
                                  arguments_digest=ev.data["arguments_digest"]))
            answers.append(decide(stack, task_id, "no-such-call", decision="approve"))

    task_id, events = events_of(stack, "6 乘 7 等于几？", on_event)
    assert [a.status_code for a in answers] == [409, 202, 404]
    assert answers[0].json()["error"]["code"] == "digest_mismatch"
    t = types(events)
    assert t.index("tool.requested") < t.index("tool.approval_required") < t.index("tool.completed")
    assert t[-1] == "task.completed"
    sandbox_msg = tool_messages(model.requests[-1])[0]
    assert "沙箱" in sandbox_msg or "sandbox" in sandbox_msg
    if sandbox_status()[0]:  # isolation available: the approved code really ran
        assert "42" in sandbox_msg and "exit code 0" in sandbox_msg, sandbox_msg
    trace = httpx.get(f"{stack.gateway_url}/v1/tasks/{task_id}/trace", headers=auth(stack.admin_key)).json()["trace"]
    assert any(x["phase"] == "approval" and x["decision"] == "approve" for x in trace)
    assert any(x["phase"] == "tool" and x["tool"] == "code_exec" for x in trace)
    # other teams see the approval on the public feed, between the request and the run
    public = asyncio.run(agent_events_of(stack.settings.bus.bootstrap_servers(), task_id, "task.completed"))
    kinds = [e.payload.kind for e in public]
    assert kinds.index("approval.requested") < kinds.index("approval.decided") < kinds.index("tool.completed")
    decided = next(e for e in public if e.payload.kind == "approval.decided")
    assert (decided.payload.tool, decided.payload.outcome) == ("code_exec", "approved")


def test_approval_edit_validates_and_runs_the_edited_arguments(stack, model):
    model.push(Turn(tool_calls=[code("print('ORIGINAL')")]), Turn(content="好的。"))
    codes: list[int] = []

    def on_event(task_id: str, ev: SseEvent) -> None:
        if ev.event == "tool.approval_required":
            bad = decide(stack, task_id, ev.data["call_id"], decision="edit", arguments={"code": ""})
            codes.append(bad.status_code)
            good = decide(stack, task_id, ev.data["call_id"], decision="edit",
                          arguments={"code": "print('EDITED')", "reason": "改过的代码"})
            codes.append(good.status_code)

    _, events = events_of(stack, "打印点东西", on_event)
    assert codes == [422, 202]
    assert events[-1].event == "task.completed"
    msg = tool_messages(model.requests[-1])[0]
    assert "ORIGINAL" not in msg
    if '"outcome": "error"' not in msg:  # bubblewrap present: the edited code really ran
        assert "EDITED" in msg


def test_approval_reject_is_final_and_a_repeat_is_refused_without_asking(stack, model):
    model.push(Turn(tool_calls=[code("import os; print(os.listdir('/'))")]),
               Turn(tool_calls=[code("import os; print(os.listdir('/'))")]),
               Turn(content="不执行了。"))
    asked: list[str] = []

    def on_event(task_id: str, ev: SseEvent) -> None:
        if ev.event == "tool.approval_required":
            asked.append(ev.data["call_id"])
            assert decide(stack, task_id, ev.data["call_id"], decision="reject", comment="不允许").status_code == 202
            again = decide(stack, task_id, ev.data["call_id"], decision="approve")
            assert again.status_code == 409, again.text  # one decision per call, recorded or not yet
            assert again.json()["error"]["code"] == "approval_not_pending"
            assert again.json()["error"]["details"] == {"status": "rejected"}

    _, events = events_of(stack, "列出根目录", on_event)
    assert len(asked) == 1, "the repeated call must be refused without a new approval"
    assert events[-1].event == "task.completed"
    msgs = tool_messages(model.requests[-1])
    assert all("rejected_by_user" in m for m in msgs) and len(msgs) == 2
    assert "tool.completed" in types(events)


# ---------------------------------------------------------------- parallel calls, tools, cancel
def test_parallel_tool_calls_run_together_and_return_together(stack, model):
    """Overlap is read from the task's own event order (seq numbers), not from wall-clock times:
    both calls are requested before either completes, and one model request gets both results."""
    model.push(Turn(tool_calls=[kb("增值税 税率"), kb("简易计税 征收率")]), Turn(content="合并回答。"))
    _, events = events_of(stack, "两个问题一起查")
    requested = [e.id for e in events if e.event == "tool.requested"]
    completed = [e.id for e in events if e.event == "tool.completed"]
    assert len(requested) == 2 and len(completed) == 2
    assert max(requested) < min(completed), "the second call was requested only after the first completed"
    model_steps = [e.id for e in events if e.event == "step.started" and e.data.get("phase") == "model"]
    assert not [s for s in model_steps if min(completed) < s < max(completed)], "a model step ran between the results"
    assert len(tool_messages(model.requests[-1])) == 2
    assert events[-1].event == "task.completed"


def test_a_transient_tool_error_is_retried_with_the_same_key_and_hidden_from_the_model(stack, model):
    """A web_search that fails transiently on its first delivery per idempotency key (an in-process
    ToolService on the web topic: no web service runs in this stack) is sent again after a backoff
    (full jitter, ``tool_retry_base_s``); the model sees one successful result."""
    deliveries: dict[str, int] = {}

    async def web_search(args, request):
        key = request.payload.idempotency_key
        deliveries[key] = deliveries.get(key, 0) + 1
        if deliveries[key] == 1:
            raise ToolFailure("search_busy", "the search backend is busy", kind="transient")
        return ToolOutput(evidence=[EvidenceItem(chunk_id="https://example.org/rate#0", kind="web", title="Rate",
                                                 url="https://example.org/rate", text="征收率为百分之三。")])

    service = ToolService("web", topics.TOOL_REQUESTS_WEB, topics.GROUP_WEB, stack.settings)
    service.tool("web_search", web_search)
    ready, stop = threading.Event(), None
    loop = asyncio.new_event_loop()

    async def serve() -> None:
        nonlocal stop
        stop = asyncio.Event()

        async def on_ready() -> None:
            ready.set()

        await service.serve(ready=on_ready, stop=stop)

    runner = threading.Thread(target=loop.run_until_complete, args=(serve(),), daemon=True)
    runner.start()
    try:
        assert ready.wait(60), "the in-process web service did not start"
        model.push(Turn(tool_calls=[{"name": "web_search", "arguments": {"query": "征收率", "reason": "查"}}]),
                   Turn(content="百分之三[1]。"))
        task_id, events = events_of(stack, "网上查征收率")
    finally:
        loop.call_soon_threadsafe(lambda: stop.set())
        runner.join(60)
    assert events[-1].event == "task.completed"
    completed = [e.data for e in events if e.event == "tool.completed"]
    assert [(c["tool"], c["outcome"]) for c in completed] == [("web_search", "ok")]
    mine = [k for k in deliveries if k.startswith(f"{task_id}:")]
    assert len(mine) == 1 and deliveries[mine[0]] == 2  # the same call, run again (a transient result is not stored)
    traced = [e.data["data"] for e in events if e.event == "trace" and e.data["phase"] == "tool"]
    assert [t["attempts"] for t in traced] == [2]
    (result,) = tool_messages(model.requests[-1])
    assert "search_busy" not in result and "百分之三" in result


def test_dead_tool_times_out_then_circuit_breaker_fails_fast(stack, model):
    url = {"url": "https://example.org/x", "reason": "读网页"}
    model.push(Turn(tool_calls=[{"name": "web_fetch", "arguments": url}]),
               Turn(tool_calls=[{"name": "web_fetch", "arguments": {**url, "url": "https://example.org/y"}}]),
               Turn(tool_calls=[{"name": "web_fetch", "arguments": {**url, "url": "https://example.org/z"}}]),
               Turn(content="网页服务不可用。"))
    _, events = events_of(stack, "读三个网页")
    assert events[-1].event == "task.completed"
    outcomes = [e.data for e in events if e.event == "tool.completed"]
    assert [o["outcome"] for o in outcomes[:2]] == ["timeout", "timeout"]
    assert outcomes[2]["error_code"] == "circuit_open"
    assert outcomes[2]["duration_ms"] == 0  # refused before it went out: the third call did not wait


def test_cancel_stops_a_streaming_answer(stack, model):
    model.push(Turn(content="很长的回答。" * 60, chunks=60, chunk_delay_s=0.2))

    def on_event(task_id: str, ev: SseEvent) -> None:
        if ev.event == "answer.delta" and not getattr(on_event, "sent", False):
            on_event.sent = True  # type: ignore[attr-defined]
            assert httpx.post(f"{stack.gateway_url}/v1/tasks/{task_id}/cancel", timeout=10, headers=auth(stack.admin_key)).status_code == 202

    task_id, events = events_of(stack, "慢慢回答", on_event)
    assert events[-1].event == "task.cancelled"
    streamed = "".join(e.data["text"] for e in events if e.event == "answer.delta")
    assert len(streamed) < len("很长的回答。" * 60)  # the answer stopped before the model finished it
    assert httpx.get(f"{stack.gateway_url}/v1/tasks/{task_id}", headers=auth(stack.admin_key)).json()["status"] == "cancelled"
    again = httpx.post(f"{stack.gateway_url}/v1/tasks/{task_id}/cancel", timeout=10, headers=auth(stack.admin_key))
    assert again.status_code == 409


def test_crash_between_saving_a_cancel_and_announcing_it_still_ends_the_stream(stack, model):
    """The cancel's offset is committed after its handler, so the redelivered cancel announces the end
    that the dead replica saved but never told (a task waiting for approval holds no lease)."""
    with orchestrator_crashing_once(stack, "cancel") as proc:
        model.push(Turn(tool_calls=[code("print(1)")]))
        created = create_task(stack.gateway_url, "取消时崩溃", api_key=stack.admin_key)
        seen: list[str] = []
        for ev in stream_task(stack.gateway_url, created["task_id"], read_timeout_s=30, api_key=stack.admin_key):
            seen.append(ev.event)
            if ev.event == "tool.approval_required":
                break
        assert seen[-1] == "tool.approval_required"
        assert httpx.post(f"{stack.gateway_url}/v1/tasks/{created['task_id']}/cancel", timeout=10, headers=auth(stack.admin_key)).status_code == 202
        assert proc.wait_exit(30), "the fault-injected orchestrator should have exited after saving the cancel"
        restart(stack, "orchestrator", drop=(FAULT, HOOKS))
        events = list(stream_task(stack.gateway_url, created["task_id"], read_timeout_s=60, api_key=stack.admin_key))
        assert events[-1].event == "task.cancelled" and types(events).count("task.cancelled") == 1
        assert httpx.get(f"{stack.gateway_url}/v1/tasks/{created['task_id']}", headers=auth(stack.admin_key)).json()["status"] == "cancelled"


def test_disconnecting_client_does_not_stop_the_task(stack, model):
    model.push(Turn(content="客户端走了我也会写完。", chunks=10, chunk_delay_s=0.1))
    created = create_task(stack.gateway_url, "断开测试", api_key=stack.admin_key)
    with httpx.stream("GET", f"{stack.gateway_url}/v1/tasks/{created['task_id']}/events", timeout=10, headers=auth(stack.admin_key)) as resp:
        for line in resp.iter_lines():
            if line.startswith("event:"):
                break  # hang up after the first event
    view: dict = {}

    def completed() -> bool:
        view.update(httpx.get(f"{stack.gateway_url}/v1/tasks/{created['task_id']}", headers=auth(stack.admin_key)).json())
        return view["status"] == "completed"

    assert wait_until(completed, 30), view
    assert view["answer"] == "客户端走了我也会写完[低置信度]。"  # uncited: marked (rule O1)


# ----------------------------------------------------------------------- crashes and replicas
def _kill_and_replace_orchestrator(stack: Stack) -> None:
    stack.procs["orchestrator"].kill()
    restart(stack, "orchestrator")


def _kill_on(stack: Stack, event_type: str):  # noqa: ANN202 - (Event, callback) pair
    """An ``on_event`` callback that SIGKILLs and replaces the orchestrator at the first ``event_type``."""
    killed = threading.Event()

    def on_event(task_id: str, ev: SseEvent) -> None:
        if ev.event == event_type and not killed.is_set():
            killed.set()
            threading.Thread(target=_kill_and_replace_orchestrator, args=(stack,), daemon=True).start()

    return killed, on_event


def test_sigkill_while_streaming_resumes_from_checkpoint_with_answer_reset(stack, model):
    model.push(Turn(content="第一次写到一半。" * 40, chunks=40, chunk_delay_s=0.2), Turn(content="重新写的完整答案。"))
    killed, on_event = _kill_on(stack, "answer.delta")
    _, events = events_of(stack, "写一个长答案", on_event)
    t = types(events)
    assert killed.is_set() and "answer.reset" in t and t.count("task.completed") == 1
    assert events[-1].data["answer"] == "重新写的完整答案[低置信度]。"  # uncited: marked (rule O1)
    after_reset = "".join(e.data["text"] for e in events[t.index("answer.reset"):] if e.event == "answer.delta")
    assert after_reset == "重新写的完整答案。"


def test_sigkill_after_tool_request_runs_the_tool_once(stack, model):
    model.push(Turn(tool_calls=[kb("小规模纳税人 征收率")]))
    # the kill lands some ms after tool.requested reached the client: the old replica may already be in
    # the next step's model call, which the new one then runs again, so every later call gets this answer
    model.default = lambda body: Turn(content="答案[1]。" if tool_messages(body) else "没有工具结果。")
    killed, on_event = _kill_on(stack, "tool.requested")
    task_id, events = events_of(stack, "查征收率", on_event)
    assert events[-1].event == "task.completed" and events[-1].data["answer"] == "答案[1]。"
    assert types(events).count("tool.requested") == 1 and types(events).count("tool.completed") == 1
    trace = httpx.get(f"{stack.gateway_url}/v1/tasks/{task_id}/trace", headers=auth(stack.admin_key)).json()["trace"]
    assert len([x for x in trace if x["phase"] == "tool"]) == 1


def test_crash_right_after_a_tool_result_is_saved_loses_none_of_its_events(stack, model):
    """The outbox: the tool result's checkpoint and its client events are one write, so a replica that
    dies right after it leaves nothing the client misses (this once lost ``tool.completed``)."""
    with orchestrator_crashing_once(stack, "tool_result") as proc:
        model.push(Turn(tool_calls=[kb("小规模纳税人 征收率")]))
        model.default = lambda body: Turn(content="答案[1]。" if tool_messages(body) else "没有工具结果。")
        created = create_task(stack.gateway_url, "查征收率", api_key=stack.admin_key)
        assert proc.wait_exit(30), "the fault-injected orchestrator should have exited after the save"
        restart(stack, "orchestrator", drop=(FAULT, HOOKS))
        events = list(stream_task(stack.gateway_url, created["task_id"], read_timeout_s=60, api_key=stack.admin_key))
        t = types(events)
        assert t.count("tool.requested") == 1 and t.count("tool.completed") == 1 and t.count("evidence") == 1
        assert t.index("tool.completed") < t.index("evidence") < t.index("answer.reset")
        assert events[-1].event == "task.completed" and events[-1].data["answer"] == "答案[1]。"


def test_sigkill_while_waiting_for_approval(stack, model):
    model.push(Turn(tool_calls=[code("print(2+2)")]), Turn(content="4（沙箱计算）。"))

    def on_event(task_id: str, ev: SseEvent) -> None:
        if ev.event == "tool.approval_required":
            _kill_and_replace_orchestrator(stack)
            assert decide(stack, task_id, ev.data["call_id"], decision="approve").status_code == 202

    _, events = events_of(stack, "2+2", on_event)
    assert events[-1].event == "task.completed" and types(events).count("tool.completed") == 1


def test_two_replicas_share_tasks_and_run_each_tool_once(stack, model):
    """The second replica names its model ``scripted-2``, so each model call says which replica made it.

    Tasks are started until both replicas made model calls: the joining replica gets partitions
    only after it has started and joined the group, so after the first six tasks more are sent,
    four at a time, until it has taken some (at most 120 s after its heartbeat appeared)."""
    def agent(body: dict) -> Turn:
        if not tool_messages(body):
            question = next(m["content"] for m in reversed(body["messages"]) if m["role"] == "user")
            return Turn(tool_calls=[kb(f"增值税 {question[-2:]}")])
        return Turn(content="完成[1]。")

    model.default = agent
    results: dict[str, list[SseEvent]] = {}
    first_request = len(model.requests)

    def one(i: int) -> None:
        task_id, evs = events_of(stack, f"并发问题{i:02d}")
        results[task_id] = evs

    def run_batch(numbers: range) -> None:
        threads = [threading.Thread(target=one, args=(i,)) for i in numbers]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)

    def by_replica() -> set[str]:
        return {body.get("model") for body in model.requests[first_request:]}

    threads = [threading.Thread(target=one, args=(i,)) for i in range(6)]
    for t in threads[:3]:
        t.start()
    second = add_replica(stack, "orchestrator", "orchestrator-2", CONDUIT_MODEL="scripted-2")  # join during the run
    for t in threads[3:]:
        t.start()
    for t in threads:
        t.join(timeout=120)
    try:
        probe = redis_lib.Redis.from_url(stack.settings.store.url())
        assert wait_until(lambda: probe.exists(alive_key("orchestrator", second.proc.pid)), 120)  # started
        deadline = time.monotonic() + 120
        sent = 6
        while by_replica() != {"scripted", "scripted-2"} and time.monotonic() < deadline:
            run_batch(range(sent, sent + 4))
            sent += 4
        assert by_replica() == {"scripted", "scripted-2"}, "one replica handled every task"
        assert len(results) == sent
        for task_id, evs in results.items():
            assert evs[-1].event == "task.completed", (task_id, types(evs))
            assert types(evs).count("tool.completed") == 1 and types(evs).count("task.completed") == 1
    finally:
        stack.procs.pop("orchestrator-2").stop()


@pytest.mark.skipif(not sandbox_status()[0], reason="sandbox isolation (bubblewrap) unavailable")
def test_cancel_stops_a_running_sandbox_call(stack, model):
    """A cancel reaches a call already running: the sandbox kills it instead of letting it finish."""
    model.push(Turn(tool_calls=[code("import time\ntime.sleep(8)\nprint('finished')")]), Turn(content="不应出现"))
    call: dict = {}

    def on_event(task_id: str, ev: SseEvent) -> None:
        if ev.event == "tool.approval_required":
            call["id"] = ev.data["call_id"]
            assert decide(stack, task_id, ev.data["call_id"], decision="approve",
                          arguments_digest=ev.data["arguments_digest"]).status_code == 202
            assert wait_until(sandboxed_code_running, 30), "the approved code never started in the sandbox"
            call["cancelled_at"] = time.monotonic()
            r = httpx.post(f"{stack.gateway_url}/v1/tasks/{task_id}/cancel", timeout=10, headers=auth(stack.admin_key))
            assert r.status_code == 202, r.text

    task_id, events = events_of(stack, "等八秒再回答", on_event)
    assert types(events)[-1] == "task.cancelled"
    result = asyncio.run(await_tool_result(stack.settings.bus.bootstrap_servers(), call["id"], timeout_s=30))
    assert result.payload.error is not None and result.payload.error.error_code == "task_cancelled"
    assert result.payload.duration_ms < 6000  # stopped soon after it started, not after the 8 s sleep
