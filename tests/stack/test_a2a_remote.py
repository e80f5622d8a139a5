"""A Conduit task asks another Conduit over A2A and cites it (issue 32, rule T10, docs/a2a.md "Remote agents as tools").

Two stacks, each with its own scripted model: B (retriever with the VAT law, orchestrator, gateway) on the
session's broker and Redis answers law questions; A (mcp, orchestrator, gateway) on an embedded broker and
Redis of its own has B registered for its tenant as remote A2A agents (``CONDUIT_A2A_AGENTS``, private
addresses allowed: rule T11). A's model calls ``a2a__conduitb``: the call waits for a person's approval (a
remote agent is an external side effect, rule T9), the mcp service sends the message with the ``a2a-sdk``
client, B answers with a cited artifact, and A's answer cites B's answer (with B's sources under it) as [n].
An agent registered ``read_only`` runs unasked.

Push notifications (rule T12): the ``a2a-sdk``'s client asks B with a push config in the message's configuration;
a local HTTP receiver (a private address, allowed on B by ``CONDUIT_A2A_ALLOW_PRIVATE``) gets the task's state
as the config was set, then a push for each state change, with the config's token, the last one the completed task with its cited answer, and the
config reads back with ``tasks/pushNotificationConfig/get``.

Real tansu brokers, real Redis servers, Qdrant Edge with one real law, scripted OpenAI-compatible models.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from a2a.client import ClientConfig, ClientFactory
from a2a.types.a2a_pb2 import (
    GetTaskPushNotificationConfigRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    TaskPushNotificationConfig,
)
from redis import Redis
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from conduit.records import keys
from contracts.mcp import McpCatalog
from ops.client import SseEvent, create_task, stream_task
from ops.stack import Stack
from testkit.page import VAT_LAW, evidence_number, kb
from testkit.page_fixtures import fresh_script  # noqa: F401 - autouse fixture: an empty script per test
from testkit.scripted_model import ScriptedModel, Turn
from testkit.threadserver import ThreadedServer
from testkit.stack import auth, model_env, start_stack
from testkit.waits import wait_until

QUESTION = "小规模纳税人适用简易计税方法的征收率是多少？"
WAIT_S = 120
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def stack_b(infra_stack, tmp_path_factory, model: ScriptedModel) -> Iterator[Stack]:
    env = model_env(model.base_url, tool_timeout_s=30) | {"CONDUIT_A2A_ALLOW_PRIVATE": "true"}  # push receivers on 127.0.0.1
    st = start_stack(infra_stack.bootstrap, infra_stack.redis_url, tmp_path_factory.mktemp("a2a-b"),
                     ("retriever", "orchestrator", "gateway"), env, laws=[VAT_LAW])
    yield st
    st.stop()


@pytest.fixture(scope="module")
def model_a() -> Iterator[ScriptedModel]:
    m = ScriptedModel().start()
    yield m
    m.stop()


@pytest.fixture(scope="module")
def stack_a(stack_b: Stack, model_a: ScriptedModel, tmp_path_factory) -> Iterator[Stack]:
    remote = {"url": stack_b.gateway_url, "headers": auth(stack_b.admin_key), "timeout_s": 90}
    agents = {"default": [{"name": "conduitb", **remote},
                          {"name": "conduitro", **remote, "read_only": True, "description": "法律问答（只读）"}]}
    env = model_env(model_a.base_url, tool_timeout_s=90) | {
        "CONDUIT_A2A_AGENTS": json.dumps(agents), "CONDUIT_A2A_ALLOW_PRIVATE": "true",
        "CONDUIT_MCP_REFRESH_S": "1", "CONDUIT_APPROVAL_TTL_S": "120"}
    st = start_stack(None, None, tmp_path_factory.mktemp("a2a-a"), ("mcp", "orchestrator", "gateway"), env)
    yield st
    st.stop()


def catalog(stack: Stack) -> McpCatalog | None:
    r = Redis.from_url(stack.settings.store.url())
    try:
        raw = r.get(keys.mcp_catalog("default"))
    finally:
        r.close()
    return McpCatalog.model_validate_json(raw) if raw else None


def agent_text(body: dict, name: str) -> tuple[int | None, str]:
    """The pool number and text the model saw for the answer of remote agent tool ``name``."""
    for m in body["messages"]:
        content = m.get("content") or ""
        if m.get("role") == "tool" and f"] {name}（外部工具）" in content:
            return int(content.split(f"] {name}（外部工具）")[0].rsplit("[", 1)[1]), content
    return None, ""


def b_answers(body: dict) -> Turn:
    n = evidence_number(body, VAT_LAW, "第十一条")
    assert n is not None, "the article reached B's model"
    return Turn(content=f"征收率为百分之三[{n}]。")


def run(stack: Stack, question: str) -> list[SseEvent]:
    """Ask ``question`` on ``stack``, approving every held call; the task's events."""
    created = create_task(stack.gateway_url, question, api_key=stack.admin_key)
    seen: list[SseEvent] = []
    for ev in stream_task(stack.gateway_url, created["task_id"], read_timeout_s=WAIT_S, api_key=stack.admin_key):
        seen.append(ev)
        if ev.event == "tool.approval_required":
            r = httpx.post(f"{stack.gateway_url}/v1/tasks/{created['task_id']}/approvals/{ev.data['call_id']}",
                           json={"decision": "approve", "arguments_digest": ev.data["arguments_digest"]},
                           headers=auth(stack.admin_key), timeout=10)
            assert r.status_code == 202, r.text
    return seen


def ask_remote(agent: str, offered: list[str]):
    def turn(body: dict) -> Turn:
        offered.extend(t["function"]["name"] for t in body.get("tools") or [])
        return Turn(tool_calls=[{"name": f"a2a__{agent}", "arguments": {"message": QUESTION, "reason": "请法律智能体回答"}}])
    return turn


def cite_remote(agent: str):
    def turn(body: dict) -> Turn:
        n, text = agent_text(body, f"a2a.{agent}")
        assert n is not None and "百分之三[" in text and VAT_LAW in text and "<untrusted_content>" in text, body["messages"][-2:]
        return Turn(content=f"另一个 Conduit 答复：征收率为百分之三[{n}]。")
    return turn


def ask_through(stack_a: Stack, model_a: ScriptedModel, model: ScriptedModel, agent: str,
                question: str) -> tuple[list[SseEvent], list[str]]:
    """Once A's catalog offers both agents: A's model asks ``agent`` the question and cites its answer, B's model
    searches and answers; the events of A's task (held calls approved) and the functions A's model was offered."""
    assert wait_until(lambda: len((catalog(stack_a) or McpCatalog(tenant_id="-")).tools) == 2, WAIT_S), catalog(stack_a)
    offered: list[str] = []
    model_a.script.clear()
    model_a.push(ask_remote(agent, offered), cite_remote(agent))
    model.push(Turn(tool_calls=[kb()]), b_answers)
    seen = run(stack_a, question)
    assert [e.event for e in seen][-1] == "task.completed", [e.event for e in seen]
    return seen, offered


def test_a_task_asks_a_remote_conduit_under_approval_and_cites_it(stack_a: Stack, stack_b: Stack,
                                                                  model_a: ScriptedModel, model: ScriptedModel) -> None:
    seen, offered = ask_through(stack_a, model_a, model, "conduitb", "请另一个法律智能体回答：" + QUESTION)
    listed = httpx.get(f"{stack_a.gateway_url}/v1/mcp-servers", headers=auth(stack_a.admin_key), timeout=10).json()
    agents = {a["agent"]["name"]: a for a in listed["agents"]}
    assert agents["conduitb"]["status"]["ok"] and agents["conduitb"]["status"]["transport"] == "a2a", agents
    assert agents["conduitb"]["agent"]["headers"] == {"Authorization": "***"}, "the credential is not shown"
    held = [e.data for e in seen if e.event == "tool.approval_required"]
    assert [h["tool"] for h in held] == ["a2a.conduitb"], "an external agent waits for a person (rule T9)"
    assert {"a2a__conduitb", "a2a__conduitro"} <= set(offered)
    done = seen[-1].data
    assert "百分之三[" in done["answer"] and done["citations"][0]["title"] == "a2a.conduitb", done
    asked = [b for b in model.requests if any(QUESTION in (m.get("content") or "") for m in b["messages"])]
    assert asked, "B's model was asked the question"


def test_a_read_only_agent_runs_unasked(stack_a: Stack, model_a: ScriptedModel, model: ScriptedModel) -> None:
    seen, _ = ask_through(stack_a, model_a, model, "conduitro", "请只读的法律智能体回答：" + QUESTION)
    assert "tool.approval_required" not in [e.event for e in seen]
    assert seen[-1].data["citations"][0]["title"] == "a2a.conduitro", seen[-1].data


class Receiver:
    """A local HTTP server that keeps every POSTed JSON body with its ``X-A2A-Notification-Token`` header."""

    def __init__(self) -> None:
        self.server = ThreadedServer()
        self.received: list[tuple[str, dict]] = []

    async def _post(self, request: Request) -> JSONResponse:
        self.received.append((request.headers.get("x-a2a-notification-token", ""), await request.json()))
        return JSONResponse({"ok": True})

    def __enter__(self) -> "Receiver":
        self.server.serve([Route("/push", self._post, methods=["POST"])])
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.port}/push"


async def test_a_push_notification_arrives_when_a_task_completes(stack_b: Stack, model: ScriptedModel) -> None:
    card = httpx.get(f"{stack_b.gateway_url}/.well-known/agent-card.json", timeout=10).json()
    assert card["capabilities"].get("pushNotifications") is True, card["capabilities"]
    model.push(Turn(tool_calls=[kb()]), b_answers)
    with Receiver() as receiver:
        http = httpx.AsyncClient(headers=auth(stack_b.admin_key), timeout=WAIT_S)
        try:
            client = await ClientFactory(ClientConfig(httpx_client=http, streaming=False)).create_from_url(
                stack_b.gateway_url)
            push = TaskPushNotificationConfig(id="p1", url=receiver.url, token="tok-1")
            sent = SendMessageRequest(message=Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER,
                                                      parts=[Part(text=QUESTION)]))
            sent.configuration.task_push_notification_config.CopyFrom(push)
            sent.configuration.return_immediately = True
            [first] = [item async for item in client.send_message(sent)]
            task_id = first.task.id
            stored = await client.get_task_push_notification_config(
                GetTaskPushNotificationConfigRequest(task_id=task_id, id="p1"))
            assert stored.url == receiver.url and stored.token == "tok-1", stored

            def completed() -> dict | None:
                return next((body for _, body in receiver.received
                             if body.get("task", {}).get("status", {}).get("state") == "TASK_STATE_COMPLETED"), None)

            assert wait_until(lambda: completed() is not None, WAIT_S), receiver.received
        finally:
            await http.aclose()
    assert {token for token, _ in receiver.received} == {"tok-1"}
    states = [b.get("statusUpdate", b.get("task", {})).get("status", {}).get("state") for _, b in receiver.received]
    assert states[-1] == "TASK_STATE_COMPLETED", states
    assert all(a != b for a, b in zip(states, states[1:])), f"one push per state change: {states}"
    final = completed()["task"]
    assert final["id"] == task_id and "百分之三[" in final["artifacts"][0]["parts"][0]["text"], final


def test_the_push_example_prints_the_pushed_answer(stack_b: Stack, model: ScriptedModel) -> None:
    """``examples/a2a_push.py`` (docs/a2a.md's push client) against B, its receiver on 127.0.0.1."""
    model.push(Turn(tool_calls=[kb()]), b_answers)
    run = subprocess.run([sys.executable, str(ROOT / "examples" / "a2a_push.py"), "--url", stack_b.gateway_url,
                          "--key", stack_b.admin_key, "--timeout", str(WAIT_S), QUESTION],
                         capture_output=True, text=True, timeout=WAIT_S + 30)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "push: completed" in run.stdout and "征收率为百分之三[" in run.stdout and VAT_LAW in run.stdout, run.stdout
