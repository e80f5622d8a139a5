"""SIGTERM while work is in flight: each service finishes what it runs inside its stop budget
(``ops.services.shutdown_budget_s``), exits cleanly (status 0, not the stopper's
SIGKILL), and the task completes exactly once.

- web: SIGTERM while a ``web_fetch`` waits on the page (a local site holds the response);
- sandbox: SIGTERM while a ``code_exec`` program runs (its bubblewrap process is up);
- orchestrator: SIGTERM during a model step (the answer is streaming).
The gateway's own SIGTERM test is in tests/test_gateway.py.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import psutil
import pytest

from ops import infra
from ops.client import create_task, stream_task
from ops.services import STOP_MARGIN_S, shutdown_budget_s
from ops.stack import Stack
from conduit.runtime.settings import Settings
from testkit.scripted_model import ScriptedModel, Turn
from testkit.site import reply
from services.sandbox.isolation import sandbox_status

ANSWER = "收到工具结果后的完整答案。"
MARKED_ANSWER = "收到工具结果后的完整答案[低置信度]。"
"""What the user gets: the answer cites nothing, so its claim is marked (rule O1)."""


class Site(ThreadingHTTPServer):
    """A page whose response is held until ``release`` is set; ``arrived`` is set when it is asked for."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Held)
        self.base = f"http://127.0.0.1:{self.server_address[1]}"
        self.arrived, self.release = threading.Event(), threading.Event()
        self.hits = 0


class _Held(BaseHTTPRequestHandler):
    server: Site

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802
        self.server.hits += 1
        self.server.arrived.set()
        self.server.release.wait(60)
        body = ("<html><body><article><h1>征收率</h1>" + "<p>小规模纳税人征收率为百分之三。</p>" * 5
                + "</article></body></html>").encode()
        reply(self, body)


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    server = Site()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()


@pytest.fixture(scope="module")
def stack(infra_stack, tmp_path_factory, model: ScriptedModel, site: Site) -> Iterator[Stack]:
    settings = Settings(kafka_bootstrap_servers=infra_stack.bootstrap, redis_url=infra_stack.redis_url,
                        data_dir=tmp_path_factory.mktemp("sigterm"), gateway_port=infra.free_port())
    st = Stack(settings, services=("web", "sandbox", "orchestrator", "gateway"),
               extra_env={"OPENAI_BASE_URL": model.base_url, "OPENAI_API_KEY": "test", "CONDUIT_MODEL": "scripted",
                          "CONDUIT_SEARXNG_URL": site.base, "CONDUIT_WEB_ALLOW_PRIVATE": "true",
                          "CONDUIT_APPROVAL_POLICIES": "{\"code_exec\": \"never\"}", "CONDUIT_LEASE_TTL_S": "3"}).start()
    yield st
    st.stop()


def has_tool_result(body: dict) -> bool:
    return any(m["role"] == "tool" for m in body["messages"])


def sigterm_and_replace(stack: Stack, key: str) -> int | None:
    """SIGTERM ``key``, wait for its exit within its budget, start a new process; return the exit status."""
    stack.procs[key].proc.terminate()
    return wait_and_replace(stack, key)


def wait_and_replace(stack: Stack, key: str) -> int | None:
    """Wait for ``key`` (sent SIGTERM) to exit within its budget, start a new process; return the exit
    status (None when it overran its budget)."""
    old = stack.procs[key]
    budget = shutdown_budget_s(old.name, stack.settings) + STOP_MARGIN_S
    exited = old.wait_exit(budget)
    status = old.proc.returncode
    stack.procs[key] = stack.new_process(old.name).start()
    stack.wait_ready(90)
    return status if exited else None


def run_to_end(stack: Stack, question: str) -> list:
    created = create_task(stack.gateway_url, question, api_key=stack.admin_key)
    return list(stream_task(stack.gateway_url, created["task_id"], read_timeout_s=90, reconnects=20,
                            api_key=stack.admin_key))


def terminals(events: list) -> list:
    return [e for e in events if e.event in ("task.completed", "task.failed", "task.cancelled")]


def test_sigterm_during_a_web_fetch(stack, model, site):
    site.arrived.clear()
    site.release.clear()
    site.hits = 0
    model.default = lambda body: (Turn(content=ANSWER) if has_tool_result(body) else Turn(
        tool_calls=[{"name": "web_fetch", "arguments": {"url": f"{site.base}/page", "reason": "查征收率"}}]))
    result: dict = {}
    client = threading.Thread(target=lambda: result.setdefault("events", run_to_end(stack, "抓网页时停机")))
    client.start()
    assert site.arrived.wait(60), "the web service never asked for the page"
    stack.procs["web"].proc.terminate()
    site.release.set()  # the fetch was in flight when SIGTERM arrived
    status = wait_and_replace(stack, "web")
    client.join(120)
    assert status == 0, "web should finish its call and exit cleanly within its budget"
    ts = terminals(result["events"])
    assert [t.event for t in ts] == ["task.completed"] and ts[0].data["answer"] == MARKED_ANSWER
    assert site.hits == 1, "the call in flight finished; its redelivery (if any) was served from the stored result"


@pytest.mark.skipif(not sandbox_status()[0], reason=f"sandbox isolation unavailable: {sandbox_status()[1]}")
def test_sigterm_during_a_code_exec_run(stack, model):
    model.default = lambda body: (Turn(content=ANSWER) if has_tool_result(body) else Turn(
        tool_calls=[{"name": "code_exec", "arguments": {"code": "import time\ntime.sleep(2)\nprint(6 * 7)",
                                                        "reason": "计算"}}]))
    result: dict = {}
    client = threading.Thread(target=lambda: result.setdefault("events", run_to_end(stack, "运行代码时停机")))
    client.start()
    sandbox = psutil.Process(stack.procs["sandbox"].pid)
    deadline = time.monotonic() + 60
    while not any("bwrap" in " ".join(c.cmdline()) for c in sandbox.children(recursive=True)):
        assert time.monotonic() < deadline, "no code_exec run started"
        time.sleep(0.05)
    status = sigterm_and_replace(stack, "sandbox")
    client.join(120)
    assert status == 0, "the sandbox should finish the run and exit cleanly within its budget"
    ts = terminals(result["events"])
    assert [t.event for t in ts] == ["task.completed"] and ts[0].data["answer"] == MARKED_ANSWER
    outputs = [e for e in result["events"] if e.event == "tool.completed"]
    assert len(outputs) == 1 and outputs[0].data["outcome"] == "ok"


def test_sigterm_during_a_model_step(stack, model):
    streamed = "一段慢慢流出的答案。" * 10
    model.default = Turn(content=streamed, chunks=20, chunk_delay_s=0.1)
    created = create_task(stack.gateway_url, "模型输出时停机", api_key=stack.admin_key)
    events, status = [], "not stopped"
    for ev in stream_task(stack.gateway_url, created["task_id"], read_timeout_s=90, reconnects=20,
                          api_key=stack.admin_key):
        events.append(ev)
        if ev.event == "answer.delta" and status == "not stopped":
            status = sigterm_and_replace(stack, "orchestrator")
    assert status == 0, "the orchestrator should finish or hand over the step and exit cleanly within its budget"
    ts = terminals(events)
    assert [t.event for t in ts] == ["task.completed"] and ts[0].data["answer"] == "一段慢慢流出的答案[低置信度]。" * 10  # uncited (rule O1)
