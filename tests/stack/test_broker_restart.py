"""What a broker restart must not lose: tansu keeps topics in memory, so a question it held that
no orchestrator had read is gone with it (the orchestrator's sweeper starts it from the gateway's
record, rule G4, docs/rules.md), and so is a tool request no tool service had read (it is sent
again every ``TOOL_RESEND_S`` until its deadline, rule A14, docs/architecture.md).

Real tansu (a private one: the test kills it), the session's Redis, the scripted model.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from ops import infra
from ops.client import create_task, stream_task
from ops.services import ServiceProcess
from ops.stack import Stack
from testkit.scripted_model import Turn
from testkit.stack import auth, start_stack
from testkit.site import reply, serve


class Broker:
    """A private tansu that the test can restart on the same port."""

    def __init__(self, root: Path) -> None:
        self.root, self.port = root, infra.free_port()
        self.proc = infra.start_tansu(self.port, root / "tansu.log")

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def restart(self) -> None:
        """SIGKILL tansu (its topics are gone) and start a new one on the same port."""
        self.proc.kill()
        self.proc.wait(10)
        self.proc = infra.start_tansu(self.port, self.root / "tansu.log")


TOOL_TIMEOUT_S = "30" if os.geteuid() == 0 else "150"
"""As root a restarted broker is back in about a second (``infra.clear_time_wait``); otherwise its
port is free only after the closed connections' 60 s, and the deadline must outlast that."""


@pytest.fixture(scope="module")
def broker(tmp_path_factory) -> Iterator[Broker]:
    b = Broker(tmp_path_factory.mktemp("broker"))
    yield b
    infra.stop(b.proc)


class _Page(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802
        body = "<html><head><title>征收率</title></head><body><p>征收率为百分之三。</p></body></html>".encode()
        reply(self, body)


@pytest.fixture(scope="module")
def site() -> Iterator[str]:
    with serve(ThreadingHTTPServer(("127.0.0.1", 0), _Page)) as url:
        yield url


@pytest.fixture(scope="module")
def stack(broker, infra_stack, tmp_path_factory, model, site) -> Iterator[Stack]:
    # the deadline outlasts a broker restart (~1 s as root, when infra.clear_time_wait can destroy the
    # old port's TIME_WAIT connections; else ~60 s: tansu binds without SO_REUSEADDR) and a timeout is
    # not retried, so only a re-send before the deadline gives the tool's own result
    st = start_stack(broker.bootstrap, infra_stack.redis_url, tmp_path_factory.mktemp("restart-data"),
                     ("web", "orchestrator", "gateway"),
                     {"OPENAI_BASE_URL": model.base_url, "OPENAI_API_KEY": "test", "CONDUIT_MODEL": "scripted",
                      "CONDUIT_LEASE_TTL_S": "3", "CONDUIT_TOOL_TIMEOUT_S": TOOL_TIMEOUT_S, "CONDUIT_TOOL_MAX_RETRIES": "0",
                      "CONDUIT_SEARXNG_URL": site, "CONDUIT_WEB_ALLOW_PRIVATE": "true",
                      "CONDUIT_APPROVAL_POLICIES": '{"web_fetch": "if:url~approve"}'})
    yield st
    st.stop()


def fetch_turn(url: str, **fields) -> Turn:
    """The scripted model's turn that asks ``web_fetch`` for ``url``."""
    return Turn(tool_calls=[{"name": "web_fetch", "arguments": {"url": url, "reason": "查征收率"}}], **fields)


def answer_from_tool(body: dict) -> Turn:
    """The scripted answer: cites the tool result when the request carries one."""
    return Turn(content="百分之三[1]。" if any(m["role"] == "tool" for m in body["messages"]) else "没有工具结果。")


def restart_service(stack: Stack, name: str) -> None:
    old = stack.procs[name]
    old.stop()
    stack.procs[name] = ServiceProcess(name, old.env, stack.log_dir).start()
    stack.wait_ready(90)


def test_a_question_the_broker_lost_unread_is_started_anyway(stack, broker, model):
    model.script.clear()
    model.default = Turn(content="重启后的答案。")
    orch = stack.procs["orchestrator"]
    orch.stop()  # nobody reads the question: it waits in tansu's memory
    created = create_task(stack.gateway_url, "中断之后还能回答吗？", api_key=stack.admin_key)
    broker.restart()  # ... and is lost with it
    restart_service(stack, "orchestrator")
    events = list(stream_task(stack.gateway_url, created["task_id"], read_timeout_s=60, reconnects=0,
                              api_key=stack.admin_key))
    assert [e.event for e in events].count("task.completed") == 1, [e.event for e in events]
    assert events[-1].data["answer"].startswith("重启后的答案")


def test_an_approval_the_broker_lost_unread_is_applied_anyway(stack, broker, model, site):
    """Rule G5: the gateway records the decision before publishing it; the broker loses it unread,
    and the orchestrator's sweeper applies it from the record, so the call runs and the task ends."""
    model.script.clear()
    model.push(fetch_turn(f"{site}/approve-rate"))
    model.default = answer_from_tool
    created = create_task(stack.gateway_url, "网上查征收率（需要批准）", api_key=stack.admin_key)
    seen: list = []
    for ev in stream_task(stack.gateway_url, created["task_id"], read_timeout_s=60, reconnects=3,
                          api_key=stack.admin_key):
        seen.append(ev)
        if ev.event == "tool.approval_required":
            stack.procs["orchestrator"].stop()  # nobody reads the decision: it waits in tansu's memory
            url = f"{stack.gateway_url}/v1/tasks/{created['task_id']}/approvals/{ev.data['call_id']}"
            r = httpx.post(url, json={"decision": "approve", "arguments_digest": ev.data["arguments_digest"]},
                           headers=auth(stack.admin_key), timeout=10)
            assert r.status_code == 202, r.text
            broker.restart()  # ... and is lost with it
            restart_service(stack, "orchestrator")
    completed = [e.data for e in seen if e.event == "tool.completed"]
    assert [c["outcome"] for c in completed] == ["ok"], [(e.event, str(e.data)[:200]) for e in seen]
    assert seen[-1].event == "task.completed" and seen[-1].data["answer"] == "百分之三[1]。"


def test_a_tool_request_the_broker_lost_unread_is_sent_again_before_its_deadline(stack, broker, model, site):
    model.script.clear()
    model.push(fetch_turn(f"{site}/rate"))
    model.default = answer_from_tool
    web = stack.procs["web"]
    os.kill(web.pid, signal.SIGSTOP)  # still offered (checked in), but nobody reads the request: it waits in tansu
    created = create_task(stack.gateway_url, "网上查征收率", api_key=stack.admin_key)
    seen: list = []
    for ev in stream_task(stack.gateway_url, created["task_id"], read_timeout_s=60, reconnects=0,
                          api_key=stack.admin_key):
        seen.append(ev)
        if ev.event == "tool.requested":
            broker.restart()  # ... and is lost with it
            web.kill()  # the stopped web service gets SIGKILL; a new one takes its place
            restart_service(stack, "web")
    completed = [e.data for e in seen if e.event == "tool.completed"]
    logs = "".join((stack.log_dir / f"{n}.log").read_text(errors="replace")[-3000:] for n in ("orchestrator", "web"))
    assert [c["outcome"] for c in completed] == ["ok"], ([(e.event, str(e.data)[:200]) for e in seen], logs)
    assert seen[-1].event == "task.completed" and seen[-1].data["answer"] == "百分之三[1]。"


def test_a_tool_request_whose_publish_fails_is_sent_once_the_broker_is_back(stack, broker, model, site):
    # the broker dies while the model is still answering, so the request's publish fails or waits
    # for the new broker: the checkpoint holds the request unsent until a publish succeeds and its
    # wake-up sends it again; the task never fails
    model.script.clear()
    model.push(fetch_turn(f"{site}/rate", delay_s=2.0))
    model.default = answer_from_tool
    created = create_task(stack.gateway_url, "网上再查征收率", api_key=stack.admin_key)
    seen: list = []
    for ev in stream_task(stack.gateway_url, created["task_id"], read_timeout_s=90, reconnects=0,
                          api_key=stack.admin_key):
        seen.append(ev)
        if ev.event == "step.started" and [e.event for e in seen].count("step.started") == 1:
            broker.restart()
            stack.wait_ready(90)
    outcomes = [e.data["outcome"] for e in seen if e.event == "tool.completed"]
    assert outcomes == ["ok"], [(e.event, str(e.data)[:200]) for e in seen]
    assert seen[-1].event == "task.completed" and seen[-1].data["answer"] == "百分之三[1]。"

