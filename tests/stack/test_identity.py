"""Identity over the real stack: session isolation down to the model's request, the session
routes, the admin key and login link of the embedded stack, the CLI key commands and
``conduit ask`` with auth on, rate limits shared by two gateway replicas, and ``CONDUIT_AUTH=none``
on loopback only. Real orchestrator and gateway processes, tansu, Redis and the scripted model.
"""

from __future__ import annotations

import asyncio
import os
import stat
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from redis.asyncio import Redis

from ops import bootstrap, infra
from ops.client import stream_task
from ops.services import ServiceProcess, settings_env
from ops.stack import Stack
from conduit.records.taskstream import TaskEventLog
from conduit.runtime.settings import Settings
from testkit.scripted_model import ScriptedModel, Turn
from testkit.stack import auth, make_key, new_key, start_stack
from testkit.waits import wait_until
from contracts.stream import TaskCompleted


def echo(body: dict) -> Turn:
    """Answer every request by naming its last user message (order-free: other modules' leftover
    questions on the shared broker may reach this model too). A question starting ``search:``
    first gets a ``kb_search`` call for the rest of it."""
    users = [m for m in body["messages"] if m["role"] == "user"]
    question = users[-1]["content"] if users else "?"
    if question.startswith("search:") and not any(m["role"] == "tool" for m in body["messages"]):
        return Turn(tool_calls=[{"name": "kb_search", "arguments": {"query": question[7:], "reason": "look it up"}}])
    return Turn(content=f"answer to {question}")


def request_for(model: ScriptedModel, question: str) -> str:
    """Everything the model was sent for the request whose last user message is ``question``."""
    for body in model.requests:
        users = [m for m in body["messages"] if m["role"] == "user"]
        if users and users[-1]["content"] == question:
            return str(body)
    raise AssertionError(f"the model never got {question!r}")


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedModel]:
    m = ScriptedModel(default=echo).start()  # type: ignore[arg-type]  # a Turn source may be a function
    yield m
    m.stop()


@pytest.fixture(scope="module")
def stack(infra_stack, tmp_path_factory, model) -> Iterator[Stack]:
    st = start_stack(infra_stack.bootstrap, infra_stack.redis_url, tmp_path_factory.mktemp("identity"),
                     ("retriever", "orchestrator", "gateway"),
                     {"OPENAI_BASE_URL": model.base_url, "OPENAI_API_KEY": "test", "CONDUIT_MODEL": "scripted"})
    yield st
    st.stop()


def ask(stack: Stack, key: str, question: str, session_id: str | None = None) -> httpx.Response:
    body = {"question": question} | ({"session_id": session_id} if session_id else {})
    return httpx.post(f"{stack.gateway_url}/v1/tasks", json=body, headers=auth(key), timeout=10)


def finish(stack: Stack, key: str, task_id: str) -> str:
    """Follow the task to its end; the terminal event's type."""
    return list(stream_task(stack.gateway_url, task_id, read_timeout_s=60, api_key=key))[-1].event


def test_another_users_session_is_404_and_never_reaches_the_model(stack: Stack, model: ScriptedModel,
                                                                   infra_stack) -> None:
    mark = uuid.uuid4().hex[:10]
    alice, bob = (new_key(infra_stack.redis_url, tenant="t1", user=u, role="member") for u in ("alice", "bob"))
    eve = new_key(infra_stack.redis_url, tenant="t2", user="eve", role="admin")
    secret = f"alice's private question {mark}"
    first = ask(stack, alice, secret)
    assert first.status_code == 202, first.text
    session, task1 = first.json()["session_id"], first.json()["task_id"]
    assert finish(stack, alice, task1) == "task.completed"
    second = ask(stack, alice, f"and then? {uuid.uuid4().hex}", session)
    assert finish(stack, alice, second.json()["task_id"]) == "task.completed"
    follow_up = httpx.get(f"{stack.gateway_url}/v1/tasks/{second.json()['task_id']}", headers=auth(alice)).json()
    assert secret in request_for(model, follow_up["question"])  # the owner's follow-up sees the history
    done = httpx.get(f"{stack.gateway_url}/v1/tasks/{task1}", headers=auth(alice)).json()  # owner kept by the orchestrator
    assert (done["status"], done["tenant_id"], done["user_id"]) == ("completed", "t1", "alice")

    for intruder in (bob, eve):  # same tenant other member; another tenant's admin
        denied = ask(stack, intruder, "what did we talk about?", session)
        assert denied.status_code == 404 and denied.json()["error"]["code"] == "session_not_found"
        assert mark not in denied.text
    bobs_question = f"my own question {uuid.uuid4().hex}"
    own = ask(stack, bob, bobs_question)
    assert finish(stack, bob, own.json()["task_id"]) == "task.completed"
    assert mark not in request_for(model, bobs_question)
    assert not [b for b in model.requests if "what did we talk about?" in str(b)]  # the refused ones never ran

    # the session routes: alice's list and detail; bob sees none of it
    listed = httpx.get(f"{stack.gateway_url}/v1/sessions", headers=auth(alice)).json()["sessions"]
    assert listed[0]["session_id"] == session and listed[0]["turns"] == 2 and mark in listed[0]["title"]
    bobs = httpx.get(f"{stack.gateway_url}/v1/sessions", headers=auth(bob)).json()["sessions"]
    assert session not in [s["session_id"] for s in bobs] and mark not in str(bobs)
    detail = httpx.get(f"{stack.gateway_url}/v1/sessions/{session}", headers=auth(alice)).json()
    assert [t["task_id"] for t in detail["turns"]] == [task1, second.json()["task_id"]]
    # the answer as the user saw it: its uncited claim is marked (rule O1, docs/agent-rules.md)
    assert detail["turns"][0]["answer"] == f"answer to {secret} [low confidence]" and detail["turns"][0]["status"] == "completed"
    assert httpx.get(f"{stack.gateway_url}/v1/sessions/{session}", headers=auth(bob)).status_code == 404

    # delete: history, records and logs go; the same id later starts empty
    gone = httpx.delete(f"{stack.gateway_url}/v1/sessions/{session}", headers=auth(alice))
    assert gone.status_code == 200 and gone.json() == {"session_id": session, "deleted_tasks": 2}
    for path in (f"/v1/sessions/{session}", f"/v1/tasks/{task1}", f"/v1/tasks/{task1}/events"):
        assert httpx.get(f"{stack.gateway_url}{path}", headers=auth(alice)).status_code == 404, path
    later = f"do you remember? {uuid.uuid4().hex}"
    again = ask(stack, alice, later, session)
    assert again.status_code == 202 and finish(stack, alice, again.json()["task_id"]) == "task.completed"
    assert mark not in request_for(model, later)


def test_the_agents_kb_search_sees_only_its_tenants_documents(stack: Stack, infra_stack) -> None:
    mark = uuid.uuid4().hex[:10]
    acme_admin = new_key(infra_stack.redis_url, tenant=f"acme-{mark}", user="root", role="admin")
    acme, rival = (new_key(infra_stack.redis_url, tenant=f"{t}-{mark}", user="u", role="member") for t in ("acme", "rival"))
    doc = httpx.post(f"{stack.gateway_url}/v1/documents", headers=auth(acme_admin), timeout=10, json={
        "document_id": "policy", "title": f"travel policy {mark}", "text": f"Acme staff fly economy, code {mark}."})
    assert doc.status_code == 202, doc.text
    assert wait_until(lambda: httpx.get(f"{stack.gateway_url}/v1/documents/policy", headers=auth(acme_admin))
                      .json()["status"] == "ingested", 90)

    def evidence(key: str) -> str:
        created = ask(stack, key, f"search:travel policy economy {mark}")
        assert created.status_code == 202, created.text
        events = list(stream_task(stack.gateway_url, created.json()["task_id"], read_timeout_s=60, api_key=key))
        assert events[-1].event == "task.completed", events[-1].data
        assert [e.data["tool"] for e in events if e.event == "tool.completed"] == ["kb_search"]
        return str([e.data for e in events if e.event == "evidence"])

    assert f"code {mark}" in evidence(acme)  # the tenant's member finds the tenant's document
    assert f"code {mark}" not in evidence(rival)  # another tenant's agent never sees it


def test_admin_key_file_and_one_time_login_link(stack: Stack, infra_stack, tmp_path: Path) -> None:
    path = bootstrap.admin_key_path(stack.data_dir)
    assert path.read_text().strip() == stack.admin_key and stat.S_IMODE(path.stat().st_mode) == 0o600
    me = httpx.get(f"{stack.gateway_url}/v1/me", headers=auth(stack.admin_key)).json()
    assert me == {"tenant_id": "default", "user_id": "admin", "role": "admin", "auth": "key"}

    link = bootstrap.login_link(stack.settings, stack.gateway_url)
    assert link.startswith(f"{stack.gateway_url}/#login=")
    login = {"token": link.split("#login=", 1)[1]}
    got = httpx.post(f"{stack.gateway_url}/v1/login", json=login)
    assert got.status_code == 200, got.text
    page_key = got.json()["api_key"]
    assert got.json()["tenant_id"] == "default" and got.json()["role"] == "admin"
    assert httpx.get(f"{stack.gateway_url}/v1/me", headers=auth(page_key)).json()["role"] == "admin"
    reused = httpx.post(f"{stack.gateway_url}/v1/login", json=login)
    assert reused.status_code == 401 and reused.json()["error"]["code"] == "login_token_invalid"

    # a second start reuses the file; a wiped Redis gets the same key back; a revoked one is replaced
    other = Settings(redis_url=infra_stack.redis_url, data_dir=tmp_path)
    key = bootstrap.ensure_admin_key(other)
    assert bootstrap.ensure_admin_key(other) == key == bootstrap.read_admin_key(tmp_path)
    key_id = key.split("_")[1]
    subprocess.run([sys.executable, "-m", "conduit", "keys", "revoke", key_id], check=True,
                   env={**os.environ, "CONDUIT_REDIS_URL": infra_stack.redis_url}, capture_output=True)
    assert httpx.get(f"{stack.gateway_url}/v1/me", headers=auth(key)).status_code == 401
    replaced = bootstrap.ensure_admin_key(other)
    assert replaced != key and bootstrap.read_admin_key(tmp_path) == replaced
    assert httpx.get(f"{stack.gateway_url}/v1/me", headers=auth(replaced)).status_code == 200


def conduit(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "conduit", *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": "200", **env})


def test_cli_key_commands(stack: Stack, infra_stack) -> None:
    redis_env = {"CONDUIT_REDIS_URL": infra_stack.redis_url}
    made = conduit("keys", "create", "--tenant", "t9", "--user", "zed", "--expires", "1d", "--label", "ci", **redis_env)
    assert made.returncode == 0, made.stderr
    key = made.stdout.strip()
    assert key.startswith("cdk_") and len(made.stdout.splitlines()) == 1  # only the key on stdout
    me = httpx.get(f"{stack.gateway_url}/v1/me", headers=auth(key))
    assert me.json() == {"tenant_id": "t9", "user_id": "zed", "role": "member", "auth": "key"}
    key_id = key.split("_")[1]
    listed = conduit("keys", "list", "--tenant", "t9", **redis_env)
    assert key_id in listed.stdout and key.split("_", 2)[2] not in listed.stdout and "zed" in listed.stdout
    assert conduit("keys", "revoke", key_id, **redis_env).returncode == 0
    revoked = httpx.get(f"{stack.gateway_url}/v1/me", headers=auth(key))
    assert revoked.status_code == 401 and revoked.headers["www-authenticate"].startswith("Bearer")
    assert conduit("keys", "revoke", key_id, **redis_env).returncode == 1
    bad = conduit("keys", "create", "--tenant", "t9", "--user", "zed", "--expires", "soon", **redis_env)
    assert bad.returncode != 0


def test_conduit_ask_reads_the_admin_key_file(stack: Stack, model: ScriptedModel, tmp_path: Path) -> None:
    question = f"hello {uuid.uuid4().hex}?"
    done = conduit("ask", question, "--url", stack.gateway_url, CONDUIT_DATA_DIR=str(stack.data_dir))
    assert done.returncode == 0, done.stderr
    assert f"answer to {question}" in done.stdout
    without = conduit("ask", "hello?", "--url", stack.gateway_url, CONDUIT_DATA_DIR=str(tmp_path))
    assert without.returncode == 2 and "401" in without.stderr and "unauthenticated" in without.stderr
    assert httpx.post(f"{stack.gateway_url}/v1/tasks", json={"question": "curl without a key"}).status_code == 401


def _gateway(infra_stack, data_dir: Path, **env: str) -> tuple[ServiceProcess, str]:
    port = infra.free_port()
    host = env.get("CONDUIT_GATEWAY_HOST", "127.0.0.1")
    proc = ServiceProcess("gateway", settings_env(infra_stack.bootstrap, infra_stack.redis_url, data_dir,
                                                  CONDUIT_GATEWAY_PORT=str(port), **env), data_dir / "logs").start()
    return proc, f"http://{'127.0.0.1' if host == '0.0.0.0' else host}:{port}"


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def _wait_up(proc: ServiceProcess, url: str) -> None:
    assert wait_until(lambda: _healthy(url) or not proc.running, 60) and proc.running, proc.log_path.read_text()[-2000:]


def test_rate_limit_is_shared_by_two_replicas(infra_stack, tmp_path: Path) -> None:
    limits = {"CONDUIT_RATE_LIMIT_KEY_PER_MINUTE": "6", "CONDUIT_RATE_LIMIT_TENANT_PER_MINUTE": "0"}
    a, url_a = _gateway(infra_stack, tmp_path / "a", **limits)
    b, url_b = _gateway(infra_stack, tmp_path / "b", **limits)
    try:
        _wait_up(a, url_a)
        _wait_up(b, url_b)
        key = auth(new_key(infra_stack.redis_url, tenant=f"rl-{uuid.uuid4().hex[:6]}", user="u", role="member"))
        answers = [httpx.get(f"{url}/v1/me", headers=key).status_code for url in (url_a, url_b) * 3]
        assert answers == [200] * 6  # six requests, three on each replica, spend the one budget
        over = httpx.get(f"{url_b}/v1/me", headers=key)
        assert over.status_code == 429 and over.json()["error"]["code"] == "rate_limited"
        assert 1 <= int(over.headers["retry-after"]) <= 60
        assert httpx.get(f"{url_a}/v1/me", headers=key).status_code == 429
        other = auth(new_key(infra_stack.redis_url, tenant="rl-other", user="u", role="member"))
        assert httpx.get(f"{url_a}/v1/me", headers=other).status_code == 200  # another key's budget is its own
    finally:
        a.stop()
        b.stop()


async def test_running_task_limit_per_key(infra_stack, tmp_path: Path) -> None:
    """A private broker no orchestrator reads: tasks stay running until the test seals their logs as one would."""
    kport = infra.free_port()
    tansu = infra.start_tansu(kport, tmp_path / "tansu.log")
    port = infra.free_port()
    url = f"http://127.0.0.1:{port}"
    gw = ServiceProcess("gateway", settings_env(f"127.0.0.1:{kport}", infra_stack.redis_url, tmp_path,
                                                CONDUIT_GATEWAY_PORT=str(port), CONDUIT_RUNNING_TASKS_PER_KEY="2"),
                        tmp_path / "logs").start()
    redis = Redis.from_url(infra_stack.redis_url)
    try:
        await asyncio.to_thread(_wait_up, gw, url)
        key = auth(await make_key(infra_stack.redis_url, tenant=f"run-{uuid.uuid4().hex[:6]}", user="u", role="member"))
        async with httpx.AsyncClient(base_url=url, headers=key, timeout=10) as c:
            first, second = [(await c.post("/v1/tasks", json={"question": f"q{i}"})).json()["task_id"] for i in (1, 2)]
            full = await c.post("/v1/tasks", json={"question": "q3"})
            assert full.status_code == 429 and full.json()["error"]["code"] == "too_many_running_tasks"
            assert full.headers["retry-after"] == "5"
            await TaskEventLog(redis).append(first, TaskCompleted(answer="done", latency_ms=1.0))  # one ends
            assert (await c.post("/v1/tasks", json={"question": "q4"})).status_code == 202
            assert (await c.post("/v1/tasks", json={"question": "q5"})).status_code == 429
            assert second
    finally:
        await redis.aclose()
        gw.stop()
        infra.stop(tansu)


def test_auth_none_works_on_loopback_only(infra_stack, tmp_path: Path) -> None:
    refused, _ = _gateway(infra_stack, tmp_path / "open", CONDUIT_AUTH="none", CONDUIT_GATEWAY_HOST="0.0.0.0")
    try:
        assert refused.wait_exit(60), "a gateway without auth on 0.0.0.0 must not start"
        assert "loopback" in refused.log_path.read_text()
    finally:
        refused.stop()
    local, url = _gateway(infra_stack, tmp_path / "local", CONDUIT_AUTH="none")
    try:
        _wait_up(local, url)
        me = httpx.get(f"{url}/v1/me")
        assert me.status_code == 200 and me.json() == {"tenant_id": "default", "user_id": "local", "role": "admin",
                                                        "auth": "none"}
        assert "CONDUIT_AUTH=none" in local.log_path.read_text()  # the warning at start
    finally:
        local.stop()
