"""The authorization matrix: every route of the gateway × every kind of caller -> the expected status.

The routes come from the running gateway's own route table (its OpenAPI document), so a new
route without an entry in ``MATRIX`` fails ``test_every_route_has_an_entry``. Callers: no
credential, a bad key, a revoked key, an expired JWT, a JWT for another audience, a member of
another tenant, another member of the same tenant, the owner (alice, with a JWT) and the
tenant's admin (an API key). Alice's data (her question, her artifact's bytes, the tenant's
document text) must appear in no body, header or SSE event another party gets.

Real gateway and retriever processes over tansu and Redis, ``CONDUIT_AUTH=jwt`` with a shared
secret (API keys are accepted too).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import jwt
import pytest
from redis.asyncio import Redis

from ops.stack import Stack
from conduit.records import apikeys, approvals, memory
from conduit.records.artifacts import ArtifactStore
from testkit.stack import auth, new_key, start_stack
from testkit.waits import wait_until
from contracts.api import ApprovalRecord
from contracts.memory import MemoryItem
from contracts.tools import arguments_digest

SECRET = "matrix-shared-secret-0123456789abcdef"
VAT_LAW = "中华人民共和国增值税法"
MARK = uuid.uuid4().hex[:12]
QUESTION = f"alice-question-{MARK}"
DOC_TEXT = f"Document body only tenant t1 may read: doc-text-{MARK}."
ARTIFACT = f"artifact-bytes-{MARK}".encode()
T1, T2 = f"t1-{MARK}", f"t2-{MARK}"
MEMORY_TEXT = f"alice-memory-{MARK}"
MEMORY_ID = f"m-matrix{MARK}"
LEAKS = (QUESTION, f"doc-text-{MARK}", ARTIFACT.decode(), MEMORY_TEXT)
"""Strings of alice's (and tenant t1's) data that no outsider may ever see."""

UNAUTHENTICATED = ("none", "bad_key", "revoked_key", "expired_jwt", "wrong_audience")
OUTSIDERS = ("other_tenant", "same_tenant_member")


def token(sub: str, tenant: str, roles: list[str] | None = None, aud: str = "conduit", exp_s: int = 600) -> str:
    claims = {"sub": sub, "tenant_id": tenant, "roles": roles or [], "aud": aud,
              "exp": datetime.now(UTC) + timedelta(seconds=exp_s)}
    return jwt.encode(claims, SECRET, algorithm="HS256")


@dataclass
class World:
    """The stack, every caller's headers and alice's resources."""

    stack: Stack
    headers: dict[str, dict[str, str]]
    task_id: str = ""
    session_id: str = ""
    artifact_id: str = ""
    document_id: str = "t1-handbook"
    fresh: Callable[[], str] = field(default=lambda: "")
    redis_url: str = ""

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.stack.gateway_url, timeout=30)


async def _revoked(redis_url: str) -> str:
    redis = Redis.from_url(redis_url)
    try:
        key, record = await apikeys.create(redis, T1, "alice", "member")
        await apikeys.revoke(redis, record.key_id)
        return key
    finally:
        await redis.aclose()


async def _pending_approval(redis_url: str, task_id: str) -> str:
    """A pending approval of ``task_id`` as the orchestrator would record it; its call id."""
    call_id = uuid.uuid4().hex
    redis = Redis.from_url(redis_url)
    try:
        await approvals.save(redis, ApprovalRecord(
            task_id=task_id, call_id=call_id, tool="code_exec", arguments={"code": "print(1)"},
            arguments_digest=arguments_digest({"code": "print(1)"}), expires_at=datetime.now(UTC) + timedelta(hours=1)))
    finally:
        await redis.aclose()
    return call_id


async def _seed(world: World, redis_url: str) -> None:
    redis = Redis.from_url(redis_url)
    try:
        art = await ArtifactStore(redis, 3600).save("out.txt", ARTIFACT, task_id=world.task_id, tenant_id=T1,
                                                   user_id="alice")
        world.artifact_id = art.id
        now = datetime.now(UTC)
        await memory.put_items(redis, [MemoryItem(id=MEMORY_ID, tenant_id=T1, user_id="alice", type="fact", topic="name",
                                                  text=MEMORY_TEXT, task_id=world.task_id, importance=8,
                                                  created_at=now, last_used_at=now)])
    finally:
        await redis.aclose()


@pytest.fixture(scope="module")
def world(infra_stack, tmp_path_factory) -> Iterator[World]:
    env = {"CONDUIT_AUTH": "jwt", "CONDUIT_AUTH_JWT_SECRET": SECRET, "CONDUIT_TOOL_TIMEOUT_S": "20"}
    stack = start_stack(infra_stack.bootstrap, infra_stack.redis_url, tmp_path_factory.mktemp("matrix"),
                        ("retriever", "gateway"), env, laws=[VAT_LAW])
    r = infra_stack.redis_url
    headers = {
        "none": {},
        "bad_key": auth("cdk_0123456789ab_not-a-real-secret"),
        "revoked_key": auth(asyncio.run(_revoked(r))),
        "expired_jwt": auth(token("alice", T1, exp_s=-60)),
        "wrong_audience": auth(token("alice", T1, aud="someone-else")),
        "other_tenant": auth(new_key(r, tenant=T2, user="mallory", role="member")),
        "same_tenant_member": auth(new_key(r, tenant=T1, user="carol", role="member")),
        "owner": auth(token("alice", T1)),
        "admin": auth(new_key(r, tenant=T1, user="boss", role="admin")),
    }
    world = World(stack, headers, redis_url=r)
    try:
        with world.client() as c:
            created = c.post("/v1/tasks", json={"question": QUESTION}, headers=headers["owner"])
            assert created.status_code == 202, created.text
            world.task_id, world.session_id = created.json()["task_id"], created.json()["session_id"]
            doc = c.post("/v1/documents", headers=headers["admin"],
                         json={"document_id": world.document_id, "title": f"handbook {MARK}", "text": DOC_TEXT})
            assert doc.status_code == 202, doc.text
            assert wait_until(lambda: c.get(f"/v1/documents/{world.document_id}", headers=headers["admin"])
                              .json()["status"] == "ingested", 90), "document never ingested"


        def fresh() -> str:  # a new session of alice's, for routes that destroy it
            with world.client() as c:
                return c.post("/v1/tasks", json={"question": "another one"}, headers=headers["owner"]).json()["session_id"]

        world.fresh = fresh
        asyncio.run(_seed(world, r))
        yield world
    finally:
        stack.stop()


@dataclass(frozen=True)
class Case:
    """Expected statuses of one route for the authenticated callers (the unauthenticated get 401)."""

    path: str
    owner: int
    admin: int
    same_tenant_member: int
    other_tenant: int
    body: dict[str, Any] | None = None
    sse: bool = False
    public: bool = False  # no credential needed: every caller gets ``owner``'s status
    fresh_session: bool = False  # {session} is a new session of alice's for every caller
    fresh_call: bool = False  # {call} is a new pending approval of alice's task for every caller (one decision each)
    headers: dict[str, str] = field(default_factory=dict)  # request headers besides the caller's credential


A2A_GET = {"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"id": "{task}"}}
"""An A2A ``tasks/get`` of alice's task (its id filled in)."""

MATRIX: dict[tuple[str, str], Case] = {
    ("POST", "/v1/tasks"): Case("/v1/tasks", 202, 404, 404, 404, {"question": "follow-up", "session_id": "{session}"}),
    ("POST", "/v1/ask"): Case("/v1/ask", 200, 404, 404, 404, {"question": "again", "session_id": "{session}"}, sse=True),
    ("GET", "/v1/tasks/{task_id}"): Case("/v1/tasks/{task}", 200, 200, 404, 404),
    ("GET", "/v1/tasks/{task_id}/events"): Case("/v1/tasks/{task}/events", 200, 200, 404, 404, sse=True),
    ("POST", "/v1/tasks/{task_id}/cancel"): Case("/v1/tasks/{task}/cancel", 202, 202, 404, 404),
    ("POST", "/v1/tasks/{task_id}/approvals/{call_id}"): Case(
        "/v1/tasks/{task}/approvals/{call}", 202, 202, 404, 404, {"decision": "reject"}, fresh_call=True),
    ("GET", "/v1/tasks/{task_id}/trace"): Case("/v1/tasks/{task}/trace", 200, 200, 404, 404),
    ("GET", "/v1/artifacts/{artifact_id}"): Case("/v1/artifacts/{artifact}?task_id={task}", 200, 200, 404, 404),
    ("POST", "/v1/search"): Case("/v1/search", 200, 200, 200, 200, {"query": f"document body tenant {MARK}"}),
    ("POST", "/v1/documents"): Case("/v1/documents", 403, 202, 403, 403,
                                    {"document_id": "scratch", "title": "scratch", "text": "scratch text"}),
    ("GET", "/v1/documents"): Case("/v1/documents", 200, 200, 200, 200),
    ("GET", "/v1/documents/{document_id}"): Case("/v1/documents/{document}", 200, 200, 200, 404),
    ("DELETE", "/v1/documents/{document_id}"): Case("/v1/documents/scratch", 403, 202, 403, 403),
    ("GET", "/v1/me"): Case("/v1/me", 200, 200, 200, 200),
    ("POST", "/v1/login"): Case("/v1/login", 401, 401, 401, 401, {"token": "not-a-login-token"}, public=True),
    ("GET", "/v1/sessions"): Case("/v1/sessions", 200, 200, 200, 200),
    ("GET", "/v1/sessions/{session_id}"): Case("/v1/sessions/{session}", 200, 200, 404, 404),
    ("PATCH", "/v1/sessions/{session_id}"): Case("/v1/sessions/{session}", 200, 200, 404, 404, {"title": "renamed"}),
    ("DELETE", "/v1/sessions/{session_id}"): Case("/v1/sessions/{session}", 200, 200, 404, 404, fresh_session=True),
    ("POST", "/v1/mcp-servers"): Case("/v1/mcp-servers", 403, 201, 403, 403,
                                      {"name": "scratch", "url": "http://127.0.0.1:9/mcp"}),
    ("GET", "/v1/mcp-servers"): Case("/v1/mcp-servers", 200, 200, 200, 200),
    ("DELETE", "/v1/mcp-servers/{name}"): Case("/v1/mcp-servers/scratch", 403, 204, 403, 403),
    ("GET", "/v1/memory"): Case("/v1/memory", 200, 200, 200, 200),  # each caller's own items
    ("DELETE", "/v1/memory/{item_id}"): Case(f"/v1/memory/{MEMORY_ID}", 200, 404, 404, 404),  # the owner's goes first
    ("DELETE", "/v1/memory"): Case("/v1/memory", 200, 200, 200, 200),  # each caller forgets their own
    ("GET", "/v1/me/export"): Case("/v1/me/export", 200, 200, 200, 200),  # each caller's own
    ("GET", "/v1/models"): Case("/v1/models", 200, 200, 200, 200),
    ("POST", "/v1/chat/completions"): Case("/v1/chat/completions", 200, 404, 404, 404, {
        "model": "conduit", "messages": [{"role": "user", "content": "again"}], "stream": True}, sse=True,
        headers={"X-Conduit-Session": "{session}"}),
    # A2A (docs/a2a.md): JSON-RPC answers 200 with a result or a JSON-RPC error; test_a2a_is_scoped checks which
    ("POST", "/v1/a2a"): Case("/v1/a2a", 200, 200, 200, 200, A2A_GET),
    ("POST", "/v1/agui"): Case("/v1/agui", 200, 404, 404, 404, {  # AG-UI (docs/agui.md): a new run in alice's session
        "threadId": "{session}", "runId": "{fresh}", "messages": [{"id": "m1", "role": "user", "content": "again"}]},
        sse=True),
    ("GET", "/.well-known/agent-card.json"): Case("/.well-known/agent-card.json", 200, 200, 200, 200, public=True),
    ("GET", "/healthz"): Case("/healthz", 200, 200, 200, 200, public=True),
    ("GET", "/readyz"): Case("/readyz", 200, 200, 200, 200, public=True),
}
"""Every route the gateway serves. Routes outside ``/v1`` that are not listed here must be
public (documentation, metrics, the browser page and its static files)."""

CALLERS = UNAUTHENTICATED + OUTSIDERS + ("owner", "admin")


def _fill(text: Any, world: World, session: str, call: str) -> Any:
    if isinstance(text, dict):
        return {k: _fill(v, world, session, call) for k, v in text.items()}
    if not isinstance(text, str):
        return text
    return (text.replace("{task}", world.task_id).replace("{fresh}", uuid.uuid4().hex)
            .replace("{session}", session).replace("{call}", call)
            .replace("{artifact}", world.artifact_id).replace("{document}", world.document_id))


def _expected(case: Case, caller: str) -> int:
    if case.public:
        return case.owner
    return 401 if caller in UNAUTHENTICATED else getattr(case, caller)


def _call(world: World, method: str, case: Case, caller: str) -> tuple[int, str, dict[str, str]]:
    """One request; returns ``(status, everything the caller received as text, headers)``."""
    session = world.fresh() if case.fresh_session else world.session_id
    call = asyncio.run(_pending_approval(world.redis_url, world.task_id)) if case.fresh_call else ""
    path = _fill(case.path, world, session, call)
    body = None if case.body is None else _fill(case.body, world, session, call)
    headers = {**{k: _fill(v, world, session, call) for k, v in case.headers.items()}, **world.headers[caller]}
    with world.client() as c:
        if case.sse:
            with c.stream(method, path, json=body, headers=headers) as resp:
                text = ""
                for line in resp.iter_lines():  # the first event is enough; an error body is read whole
                    text += line + "\n"
                    if resp.status_code == 200 and line == "":
                        break
                return resp.status_code, text, dict(resp.headers)
        resp = c.request(method, path, json=body, headers=headers)
        return resp.status_code, resp.text, dict(resp.headers)


def test_every_route_has_an_entry(world: World) -> None:
    spec = httpx.get(f"{world.stack.gateway_url}/openapi.json", timeout=10).json()
    served = {(m.upper(), p) for p, ops in spec["paths"].items() for m in ops if m != "parameters"}
    missing = sorted(r for r in served if r not in MATRIX and r[1].startswith("/v1"))
    assert not missing, f"routes without an authorization entry: {missing}"
    assert not sorted(r for r in MATRIX if r not in served), "entries for routes that no longer exist"
    for method, path in served - set(MATRIX):  # outside /v1: public by rule (page, static files, docs)
        assert method == "GET", (method, path)


@pytest.mark.parametrize("route", list(MATRIX), ids=lambda r: f"{r[0]} {r[1]}")
def test_route_answers_each_caller_as_expected(world: World, route: tuple[str, str]) -> None:
    case = MATRIX[route]
    for caller in CALLERS:
        status, text, headers = _call(world, route[0], case, caller)
        want = _expected(case, caller)
        assert status == want, f"{route} as {caller}: {status} (want {want}) {text[:300]}"
        if status == 401 and not case.public:
            assert headers.get("www-authenticate", "").startswith("Bearer"), (route, caller)
            assert '"code":"unauthenticated"' in text.replace(" ", ""), (route, caller, text)
        if status >= 400:
            assert text.lstrip().startswith('{"error":{"code":'), (route, caller, text[:200])
        if caller in UNAUTHENTICATED + ("other_tenant",) or (caller == "same_tenant_member" and "document" not in
                                                              route[1] and route[1] != "/v1/search"):
            seen = text + " ".join(headers.values())
            leaked = [m for m in LEAKS if m in seen]
            assert not leaked, f"{route} as {caller} saw {leaked}"


MCP_INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                  "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "m", "version": "1"}}}


def test_mcp_endpoint_authenticates_like_the_api(world: World) -> None:
    """``POST /mcp`` (not in the OpenAPI document: it speaks JSON-RPC) answers 401 to every
    unauthenticated caller before the MCP SDK sees the request, and serves every credential."""
    headers = {"Accept": "application/json, text/event-stream"}
    with world.client() as c:
        for caller in CALLERS:
            r = c.post("/mcp", json=MCP_INITIALIZE, headers={**headers, **world.headers[caller]})
            if caller in UNAUTHENTICATED:
                assert r.status_code == 401 and r.json()["error"]["code"] == "unauthenticated", (caller, r.text)
                assert r.headers.get("www-authenticate", "").startswith("Bearer"), caller
            else:
                assert r.status_code == 200 and '"serverInfo"' in r.text, (caller, r.status_code, r.text[:300])


def test_a2a_is_scoped(world: World) -> None:
    """``POST /v1/a2a``: alice's task is hers and her admin's; for anyone else it does not exist (JSON-RPC
    -32001, like a missing id) and every A2A method says nothing of it; no credential is a 401 ``ErrorBody``."""
    hook = "https://push.example/hook"  # push configs (rule T12): an outsider learns nothing, not even the URL check
    methods = {"tasks/get": {"id": world.task_id}, "GetTask": {"id": world.task_id},
               "tasks/resubscribe": {"id": world.task_id}, "tasks/cancel": {"id": world.task_id},
               "tasks/pushNotificationConfig/set": {"taskId": world.task_id, "pushNotificationConfig": {"url": hook}},
               "tasks/pushNotificationConfig/get": {"id": world.task_id},
               "tasks/pushNotificationConfig/list": {"id": world.task_id},
               "CreateTaskPushNotificationConfig": {"taskId": world.task_id, "url": hook}}
    with world.client() as c:
        for caller in CALLERS:
            for method, params in methods.items():
                if caller in ("owner", "admin") and method not in ("tasks/get", "GetTask"):
                    continue  # no orchestrator here: a cancel would wait, a resubscribe stream on; no DNS for a hook
                headers = {**world.headers[caller], **({"A2A-Version": "1.0"} if method[0].isupper() else {})}
                r = c.post("/v1/a2a", json={"jsonrpc": "2.0", "id": 7, "method": method, "params": params},
                           headers=headers)
                if caller in UNAUTHENTICATED:
                    assert r.status_code == 401 and r.json()["error"]["code"] == "unauthenticated", (caller, r.text)
                    continue
                assert r.status_code == 200, (caller, method, r.text)
                text = r.text
                if caller in OUTSIDERS:
                    assert '"code":-32001' in text.replace(" ", ""), (caller, method, text[:300])
                    assert not [m for m in LEAKS if m in text], (caller, method)
                elif method in ("tasks/get", "GetTask"):
                    assert QUESTION in text and r.json()["result"]["id"] == world.task_id, (caller, text[:300])


def test_owner_and_admin_see_the_data(world: World) -> None:
    """The matrix's other half: the data an outsider never sees is there for those entitled."""
    with world.client() as c:
        for caller in ("owner", "admin"):
            h = world.headers[caller]
            assert c.get(f"/v1/tasks/{world.task_id}", headers=h).json()["question"] == QUESTION
            listed = c.get("/v1/sessions", headers=h).json()["sessions"]
            assert world.session_id in [s["session_id"] for s in listed], caller
            art = c.get(f"/v1/artifacts/{world.artifact_id}", params={"task_id": world.task_id}, headers=h)
            assert art.content == ARTIFACT
        me = c.get("/v1/me", headers=world.headers["owner"]).json()
        assert me == {"tenant_id": T1, "user_id": "alice", "role": "member", "auth": "jwt"}
        hits = c.post("/v1/search", json={"query": f"document body tenant {MARK}"}, headers=world.headers["same_tenant_member"])
        assert any(f"doc-text-{MARK}" in i["text"] for i in hits.json()["items"]), "tenant t1 cannot find its document"
        public = c.post("/v1/search", json={"query": "小规模纳税人征收率"}, headers=world.headers["other_tenant"])
        assert public.json()["items"], "the public law corpus is for every tenant"
        assert c.get("/v1/documents", headers=world.headers["other_tenant"]).json()["documents"] == []


def test_a_session_is_renamed_on_the_gateway(world: World) -> None:
    """``PATCH /v1/sessions/{id}``: the owner's new title is what every entitled list shows; bad bodies are 422."""
    with world.client() as c:
        url = f"/v1/sessions/{world.session_id}"
        r = c.patch(url, json={"title": "  Alice's VAT chat  "}, headers=world.headers["owner"])
        assert r.status_code == 200 and r.json()["title"] == "Alice's VAT chat", r.text
        for caller in ("owner", "admin"):
            listed = c.get("/v1/sessions", headers=world.headers[caller]).json()["sessions"]
            assert {s["session_id"]: s["title"] for s in listed}[world.session_id] == "Alice's VAT chat"
        for body in ({}, {"title": "   "}, {"title": "x" * 201}, {"title": "ok", "extra": 1}):
            r = c.patch(url, json=body, headers=world.headers["owner"])
            assert (r.status_code, r.json()["error"]["code"]) == (422, "invalid_request"), r.text
