"""Gateway over real HTTP (uvicorn in a thread) against the session's real tansu and Redis.

The orchestrator's side is played by the test itself: it reads the real
``QuestionAsked``/``TaskCancelled`` from Kafka with an aiokafka consumer and
appends task events to the real Redis log with ``TaskEventLog``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import uvicorn
from aiokafka import AIOKafkaConsumer, ConsumerRecord
from fastapi import FastAPI
from pydantic import TypeAdapter
from redis.asyncio import Redis

from ops import infra
from ops.services import ServiceProcess, settings_env
from conduit.runtime.settings import Settings
from conduit.records import keys
from conduit.records.taskstore import TaskStore
from conduit.records.taskstream import TaskEventLog
from testkit.waits import until
from contracts import topics
from contracts.events import QuestionAsked, TaskCancelled
from contracts.stream import AnswerDelta, TaskCompleted, TaskStreamEvent
from testkit.stack import auth, new_key
from contracts.api import TaskCreate
from services.gateway.api import tasks
from services.gateway.app import create_app

parse_stream_event = TypeAdapter(TaskStreamEvent).validate_json
"""The JSON ``data`` of an SSE event as its ``contracts.stream`` model."""

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


# ------------------------------------------------------------------ helpers
@dataclass
class RunningGateway:
    app: FastAPI
    server: uvicorn.Server
    url: str

    @property
    def open_streams(self) -> int:
        return self.app.state.gateway.open_streams


@contextlib.contextmanager
def run_gateway(settings: Settings) -> Iterator[RunningGateway]:
    """Serve ``create_app(settings)`` with uvicorn on a free port in a thread."""
    port = infra.free_port()
    app = create_app(settings)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                           lifespan="on", timeout_graceful_shutdown=2))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("gateway did not start")
        time.sleep(0.02)
    try:
        yield RunningGateway(app, server, f"http://127.0.0.1:{port}")
    finally:
        server.should_exit = True
        thread.join(15)


def gateway_settings(bootstrap: str, redis_url: str, data_dir: Path, **extra: object) -> Settings:
    """Settings for a test gateway: fast heartbeats and polls; no running-task limit (the test plays the
    orchestrator and leaves most tasks running)."""
    return Settings(kafka_bootstrap_servers=bootstrap, redis_url=redis_url, data_dir=data_dir,
                    sse_heartbeat_s=0.3, gateway_sse_poll_ms=200, max_question_chars=200, running_tasks_per_key=0,
                    **extra)


@pytest.fixture(scope="module")
def gw(infra_stack, tmp_path_factory) -> Iterator[RunningGateway]:
    s = gateway_settings(infra_stack.bootstrap, infra_stack.redis_url, tmp_path_factory.mktemp("gw"))
    with run_gateway(s) as running:
        yield running


@pytest.fixture(scope="module")
def headers(infra_stack) -> dict[str, str]:
    """A member key of user u1 in the default tenant (the gateway's Redis)."""
    return auth(new_key(infra_stack.redis_url, user="u1", role="member"))


@pytest.fixture
async def client(gw: RunningGateway, headers) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=gw.url, timeout=10, headers=headers) as c:
        yield c


@pytest.fixture
def log(redis: Redis) -> TaskEventLog:
    return TaskEventLog(redis)


async def sse_messages(resp: httpx.Response) -> AsyncIterator[dict[str, str]]:
    """Parse an SSE body: yields ``{"id", "event", "data"}`` dicts and ``{"comment": ...}``."""
    fields: dict[str, str] = {}
    async for line in resp.aiter_lines():
        if line == "":
            if fields:
                yield fields
                fields = {}
        elif line.startswith(":"):
            yield {"comment": line[1:].strip()}
        else:
            name, _, value = line.partition(":")
            fields[name] = value[1:] if value.startswith(" ") else value


async def collect_events(resp: httpx.Response, timeout: float = 10) -> list[dict[str, str]]:
    """All data events until the server ends the stream (fails on timeout)."""
    async def run() -> list[dict[str, str]]:
        return [m async for m in sse_messages(resp) if "event" in m]
    return await asyncio.wait_for(run(), timeout)


async def consume(bootstrap: str, topic: str, match: Callable[[ConsumerRecord], bool],
                  timeout: float = 15) -> ConsumerRecord:
    """First record on ``topic`` (from the beginning) for which ``match`` is true."""
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=None,
                                auto_offset_reset="earliest", fetch_max_wait_ms=10)
    await consumer.start()
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=200)
            for records in batch.values():
                for rec in records:
                    if match(rec):
                        return rec
        raise AssertionError(f"no matching record on {topic} within {timeout} s")
    finally:
        await consumer.stop()


async def consume_all(bootstrap: str, topic: str, match: Callable[[ConsumerRecord], bool]) -> list[ConsumerRecord]:
    """Every record on ``topic`` for which ``match`` is true (read until three empty fetches in a row)."""
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=None,
                                auto_offset_reset="earliest", fetch_max_wait_ms=10)
    await consumer.start()
    found, empty = [], 0
    try:
        while empty < 3:
            batch = await consumer.getmany(timeout_ms=200)
            empty = 0 if batch else empty + 1
            found += [rec for records in batch.values() for rec in records if match(rec)]
        return found
    finally:
        await consumer.stop()


def question_of(rec: ConsumerRecord) -> str | None:
    """The question of a ``QuestionAsked`` record, None for anything else on the topic."""
    try:
        return QuestionAsked.model_validate_json(rec.value).payload.question
    except ValueError:
        return None


def completed(answer: str = "done") -> TaskCompleted:
    return TaskCompleted(answer=answer, latency_ms=12.5)


async def new_task(client: httpx.AsyncClient, question: str = "what is conduit?") -> str:
    resp = await client.post("/v1/tasks", json={"question": question})
    assert resp.status_code == 202, resp.text
    return resp.json()["task_id"]


# ------------------------------------------------------------------ tests
async def test_post_task_publishes_question(client, infra_stack, redis):
    question = f"q-{uuid.uuid4().hex}"
    resp = await client.post("/v1/tasks", json={"question": question, "user_id": "u1", "allowed_tools": ["kb_search"]},
                             headers={"traceparent": TRACEPARENT})
    assert resp.status_code == 202
    body = resp.json()
    task_id, session_id = body["task_id"], body["session_id"]
    assert len(task_id) == 32 and session_id
    assert body["events_url"] == f"/v1/tasks/{task_id}/events"
    assert resp.headers["location"] == f"/v1/tasks/{task_id}"

    rec = await consume(infra_stack.bootstrap, topics.QUESTIONS, lambda r: r.key == task_id.encode())
    event = QuestionAsked.model_validate_json(rec.value)
    assert (event.task_id, event.session_id, event.user_id) == (task_id, session_id, "u1")
    assert event.tenant_id == "default" and event.traceparent == TRACEPARENT
    assert event.payload.question == question and event.payload.allowed_tools == ["kb_search"]
    assert dict(rec.headers)["type"] == b"question.asked"

    view = (await client.get(f"/v1/tasks/{task_id}")).json()
    assert view["status"] == "accepted" and view["question"] == question and view["user_id"] == "u1"
    # the accepted event is already in the log, before any orchestrator ran
    first = await TaskEventLog(redis).read(task_id)
    assert [e.type for e in first] == ["task.accepted"] and first[0].seq == 1

    again = await client.post("/v1/tasks", json={"question": "follow-up", "session_id": session_id})
    assert again.json()["session_id"] == session_id


async def test_idempotency_key_replays_the_same_task(client, infra_stack):
    """A retried POST with the same Idempotency-Key and body gets the same task; nothing is queued twice."""
    key, question = f"retry-{uuid.uuid4().hex}", f"q-{uuid.uuid4().hex}"
    first = await client.post("/v1/tasks", json={"question": question}, headers={"Idempotency-Key": key})
    again = await client.post("/v1/tasks", json={"question": question}, headers={"Idempotency-Key": key})
    assert first.status_code == again.status_code == 202
    assert again.json() == first.json() and again.headers["idempotent-replayed"] == "true"
    assert "idempotent-replayed" not in first.headers
    task_id = first.json()["task_id"]
    # one question on the bus for that key
    await consume(infra_stack.bootstrap, topics.QUESTIONS, lambda r: r.key == task_id.encode())
    asked = await consume_all(infra_stack.bootstrap, topics.QUESTIONS,
                              lambda r: question_of(r) == question)
    assert len(asked) == 1

    other = await client.post("/v1/tasks", json={"question": "something else"}, headers={"Idempotency-Key": key})
    assert other.status_code == 409 and other.json()["error"]["code"] == "idempotency_key_reused"
    assert other.json()["error"]["details"]["task_id"] == task_id
    for bad in ("", "has space", "x" * 256):
        resp = await client.post("/v1/tasks", json={"question": question}, headers={"Idempotency-Key": bad})
        assert resp.status_code == 422 and resp.json()["error"]["code"] == "invalid_request", bad


async def test_a_key_whose_first_request_died_before_creating_its_task_is_in_progress_then_free(client, redis):
    """A gateway killed between claiming an Idempotency-Key and creating its task leaves a claim
    without a task: a retry gets 409 ``idempotency_key_in_progress`` (Retry-After), never the id of
    a task that does not exist, and once the claim lapses the retry creates the task."""
    key, question = f"died-{uuid.uuid4().hex}", f"q-{uuid.uuid4().hex}"
    claim = keys.idempotency("default", hashlib.sha256(f"u1\x00{key}".encode()).hexdigest())
    body_digest = hashlib.sha256(TaskCreate(question=question).model_dump_json().encode()).hexdigest()
    ghost = uuid.uuid4().hex  # what the dead request had claimed, as it left it in Redis
    await redis.set(claim, json.dumps({"task_id": ghost, "session_id": "s", "body": body_digest}),
                    ex=tasks.PENDING_CLAIM_TTL_S)
    busy = await client.post("/v1/tasks", json={"question": question}, headers={"Idempotency-Key": key})
    assert busy.status_code == 409 and busy.json()["error"]["code"] == "idempotency_key_in_progress", busy.text
    assert busy.headers["retry-after"] == "1" and busy.json()["error"]["details"]["task_id"] == ghost
    await redis.delete(claim)  # the claim lapses (PENDING_CLAIM_TTL_S)
    made = await client.post("/v1/tasks", json={"question": question}, headers={"Idempotency-Key": key})
    assert made.status_code == 202 and made.json()["task_id"] != ghost
    assert await redis.ttl(claim) > tasks.PENDING_CLAIM_TTL_S  # created: the key replays for the task's life


async def test_sse_streams_prior_and_live_events_then_stops(client, log, gw):
    task_id = await new_task(client)
    await log.append(task_id, AnswerDelta(text="Hel"))  # before the client connects
    hub = gw.app.state.gateway.hub

    subs: list = []

    async def orchestrator() -> None:
        assert await until(lambda: task_id in hub._topics, 10)  # the client is connected and its log read
        sub = next(iter(hub._topics[task_id].subs))
        subs.append(sub)
        # each delta finds the stream waiting with nothing in hand: the hub writes it straight to the response
        for seq, text in ((3, "lo"), (4, "!")):
            waiting = lambda seq=seq: sub.last == seq - 1 and sub._waiter is not None and not sub._waiter.done()  # noqa: E731
            assert await until(waiting, 10)
            await log.append(task_id, AnswerDelta(text=text))
        assert await until(lambda: sub.last == 4, 10)
        await log.append(task_id, completed("Hello!"))
        await log.append(task_id, AnswerDelta(text="after terminal"))  # refused: log sealed

    async with client.stream("GET", f"/v1/tasks/{task_id}/events") as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        assert resp.headers["cache-control"] == "no-cache"
        assert resp.headers["x-accel-buffering"] == "no"
        writer = asyncio.create_task(orchestrator())
        events = await collect_events(resp)
        await writer
    assert [e["id"] for e in events] == ["1", "2", "3", "4", "5"]
    assert [e["event"] for e in events] == ["task.accepted", "answer.delta", "answer.delta", "answer.delta",
                                            "task.completed"]
    assert "".join(parse_stream_event(e["data"]).text for e in events[1:4]) == "Hello!"
    assert parse_stream_event(events[-1]["data"]).answer == "Hello!"
    assert subs[0].written >= 1  # written by the hub (Subscription.sink), in order with the rest


async def test_resume_after_last_event_id(client, log):
    task_id = await new_task(client)
    for text in ("a", "b", "c"):
        await log.append(task_id, AnswerDelta(text=text))
    await log.append(task_id, completed())  # seqs: 1 accepted, 2-4 deltas, 5 completed
    url = f"/v1/tasks/{task_id}/events"

    async with client.stream("GET", url, headers={"Last-Event-ID": "2"}) as resp:
        events = await collect_events(resp)
    assert [e["id"] for e in events] == ["3", "4", "5"]
    assert [json.loads(e["data"]).get("text") for e in events[:2]] == ["b", "c"]

    async with client.stream("GET", url, params={"last_event_id": "4"}) as resp:
        assert [e["id"] for e in await collect_events(resp)] == ["5"]
    # header wins over the query parameter
    async with client.stream("GET", url, params={"last_event_id": "1"}, headers={"Last-Event-ID": "3"}) as resp:
        assert [e["id"] for e in await collect_events(resp)] == ["4", "5"]
    # already saw the terminal event (or claims a later one): 204 No Content, so an EventSource stops
    for seen in ("5", "999"):
        resp = await client.get(url, headers={"Last-Event-ID": seen})
        assert resp.status_code == 204 and resp.content == b""

    for bad in ("abc", "-1", "1.5"):
        resp = await client.get(url, headers={"Last-Event-ID": bad})
        assert resp.status_code == 422 and resp.json()["error"]["code"] == "invalid_request"
    assert (await client.get(url, params={"last_event_id": "x"})).status_code == 422


async def test_heartbeat_comment_when_idle(client, log):
    task_id = await new_task(client)
    seen: list[dict[str, str]] = []
    async with client.stream("GET", f"/v1/tasks/{task_id}/events") as resp:
        messages = sse_messages(resp)

        async def until(pred: Callable[[dict[str, str]], bool]) -> None:
            async for msg in messages:
                seen.append(msg)
                if pred(msg):
                    return
            raise AssertionError("stream ended early")

        await asyncio.wait_for(until(lambda m: "comment" in m), 3)  # heartbeat every 0.3 s
        await log.append(task_id, completed())
        await asyncio.wait_for(until(lambda m: m.get("event") == "task.completed"), 5)
        rest = [m async for m in messages]  # the server ends the stream after the terminal event
    assert seen[0]["event"] == "task.accepted"
    assert {"comment": "ping"} in seen
    assert [m["event"] for m in seen if "event" in m] == ["task.accepted", "task.completed"]
    assert [m for m in rest if "event" in m] == []


async def test_client_disconnect_ends_stream_loop(client, gw):
    task_id = await new_task(client)
    hub = gw.app.state.gateway.hub
    before, subs_before = gw.open_streams, hub.subscribers
    async with client.stream("GET", f"/v1/tasks/{task_id}/events") as resp:
        async for msg in sse_messages(resp):
            if msg.get("event") == "task.accepted":
                break
        assert gw.open_streams == before + 1 and hub.subscribers == subs_before + 1
    deadline = time.monotonic() + 5
    while gw.open_streams != before and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert gw.open_streams == before
    assert hub.subscribers == subs_before  # the shared reader no longer follows this task's log


async def test_validation_errors(client):
    malformed = await client.post("/v1/tasks", content=b'{"question": ', headers={"content-type": "application/json"})
    assert malformed.status_code == 422
    err = malformed.json()["error"]
    assert err["code"] == "invalid_request" and err["details"][0]["type"] == "json_invalid"

    missing = await client.post("/v1/tasks", json={"user_id": "u"})
    assert missing.status_code == 422
    details = missing.json()["error"]["details"]
    assert any(d["loc"] == ["body", "question"] and d["type"] == "missing" for d in details)

    for bad in ({"question": ""}, {"question": "q", "extra": 1}, {"question": "q", "allowed_tools": ["rm_rf"]},
                {"question": "q", "session_id": "has space"}, ["question"]):
        resp = await client.post("/v1/tasks", json=bad)
        assert resp.status_code == 422, bad
        assert resp.json()["error"]["code"] == "invalid_request"

    too_big = await client.post("/v1/tasks", json={"question": "x" * 201})  # max_question_chars=200
    assert too_big.status_code == 413 and too_big.json()["error"]["code"] == "question_too_large"
    huge = await client.post("/v1/ask", content=b"x" * 100_000)  # over the byte limit, never parsed
    assert huge.status_code == 413 and huge.json()["error"]["code"] == "question_too_large"
    ok = await client.post("/v1/tasks", json={"question": "é" * 200})
    assert ok.status_code == 202

    # a form-encoded body (curl -d) is still read as JSON
    curl_like = await client.post("/v1/tasks", content=b'{"question":"hi"}',
                                  headers={"content-type": "application/x-www-form-urlencoded"})
    assert curl_like.status_code == 202


async def test_not_found_and_method_errors(client):
    unknown = uuid.uuid4().hex
    for path in (f"/v1/tasks/{unknown}", f"/v1/tasks/{unknown}/events"):
        resp = await client.get(path)
        assert resp.status_code == 404 and resp.json()["error"]["code"] == "task_not_found", path
    cancel = await client.post(f"/v1/tasks/{unknown}/cancel")
    assert cancel.status_code == 404 and cancel.json()["error"]["code"] == "task_not_found"
    route = await client.get("/v2/nothing")
    assert route.status_code == 404 and route.json() == {
        "error": {"code": "not_found", "message": "Not Found", "details": None}}
    method = await client.delete("/v1/tasks")
    assert method.status_code == 405 and method.json()["error"]["code"] == "method_not_allowed"


async def test_unexpected_error_is_500_without_traceback(client, redis):
    task_id = uuid.uuid4().hex
    await redis.set(TaskStore.key(task_id), b"{not a task view", ex=60)  # a corrupt record
    resp = await client.get(f"/v1/tasks/{task_id}")
    assert resp.status_code == 500
    assert resp.json() == {"error": {"code": "internal_error", "message": "internal error", "details": None}}
    await redis.delete(TaskStore.key(task_id))


async def test_ask_streams_accepted_to_terminal(client, infra_stack, log):
    question = f"ask-{uuid.uuid4().hex}"

    async def orchestrator() -> str:
        rec = await consume(infra_stack.bootstrap, topics.QUESTIONS, lambda r: question_of(r) == question)
        task_id = rec.key.decode()
        await log.append(task_id, AnswerDelta(text="42"))
        await log.append(task_id, completed("42"))
        return task_id

    worker = asyncio.create_task(orchestrator())
    async with client.stream("POST", "/v1/ask", json={"question": question}) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        events = await collect_events(resp, timeout=20)
    task_id = await worker
    assert resp.headers["x-task-id"] == task_id
    assert [(e["id"], e["event"]) for e in events] == [("1", "task.accepted"), ("2", "answer.delta"),
                                                      ("3", "task.completed")]
    accepted = parse_stream_event(events[0]["data"])
    assert accepted.task_id == task_id and accepted.question == question


async def test_cancel_publishes_task_cancelled(client, infra_stack, log):
    task_id = await new_task(client)
    resp = await client.post(f"/v1/tasks/{task_id}/cancel", headers={"traceparent": TRACEPARENT})
    assert resp.status_code == 202
    assert resp.json() == {"task_id": task_id, "status": "cancel_requested"}
    rec = await consume(infra_stack.bootstrap, topics.CONTROL, lambda r: r.key == task_id.encode())
    event = TaskCancelled.model_validate_json(rec.value)
    assert event.task_id == task_id and event.traceparent == TRACEPARENT

    await log.append(task_id, completed())  # the task ended first
    late = await client.post(f"/v1/tasks/{task_id}/cancel")
    assert late.status_code == 409 and late.json()["error"]["code"] == "task_already_finished"


async def test_health_and_ready(client):
    assert (await client.get("/healthz")).json() == {"status": "ok"}
    resp = await client.get("/readyz")
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["status"] == "ready" and body["checks"] == {"redis": True, "kafka": True}
    assert body["alive_services"].get("gateway", 0) >= 1


async def test_broker_down_fails_task_and_readyz(infra_stack, tmp_path, headers):
    """With its Kafka gone, POST answers 503 and the task ends failed(broker_unavailable)."""
    kport = infra.free_port()
    tansu = infra.start_tansu(kport, tmp_path / "tansu.log")
    try:
        s = gateway_settings(f"127.0.0.1:{kport}", infra_stack.redis_url, tmp_path / "data",
                             gateway_publish_timeout_s=1.0, gateway_ready_timeout_s=0.5)
        with run_gateway(s) as gw:
            async with httpx.AsyncClient(base_url=gw.url, timeout=10, headers=headers) as c:
                assert (await c.get("/readyz")).status_code == 200
                tansu.kill()  # a crash (SIGTERM takes tansu ~5 s with open connections)
                tansu.wait()
                resp = await c.post("/v1/tasks", json={"question": "anyone there?"})
                assert resp.status_code == 503
                err = resp.json()["error"]
                assert err["code"] == "broker_unavailable"
                task_id = err["details"]["task_id"]
                view = (await c.get(f"/v1/tasks/{task_id}")).json()
                assert view["status"] == "failed" and view["error"]["code"] == "broker_unavailable"
                async with c.stream("GET", f"/v1/tasks/{task_id}/events") as stream:
                    events = await collect_events(stream)
                assert [e["event"] for e in events] == ["task.accepted", "task.failed"]
                assert json.loads(events[1]["data"])["code"] == "broker_unavailable"

                ready = await c.get("/readyz")
                assert ready.status_code == 503
                assert ready.json()["error"]["code"] == "not_ready"
                assert ready.json()["error"]["details"]["checks"] == {"redis": True, "kafka": False}
    finally:
        infra.stop(tansu)


async def test_main_serves_and_ends_streams_on_sigterm(infra_stack, tmp_path, headers):
    """``conduit serve gateway`` (main): SIGTERM ends open SSE streams with a retry hint, then the process exits."""
    port = infra.free_port()
    env = settings_env(infra_stack.bootstrap, infra_stack.redis_url, tmp_path / "data",
                       CONDUIT_GATEWAY_PORT=str(port), CONDUIT_LOG_JSON="false")
    proc = ServiceProcess("gateway", env, tmp_path / "logs").start()
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10, headers=headers) as c:
            deadline = time.monotonic() + 60
            while True:
                with contextlib.suppress(httpx.TransportError):
                    if (await c.get("/healthz")).status_code == 200:
                        break
                assert proc.running and time.monotonic() < deadline, proc.log_path.read_text()[-2000:]
                await asyncio.sleep(0.1)
            task_id = await new_task(c)
            async with c.stream("GET", f"/v1/tasks/{task_id}/events") as resp:
                messages = sse_messages(resp)
                assert (await anext(messages))["event"] == "task.accepted"
                proc.proc.terminate()
                rest = await asyncio.wait_for(_drain(messages), 10)  # the server ends the response cleanly
            assert rest[-1] == {"retry": "1000"} and {"comment": "shutdown"} in rest
        assert await asyncio.to_thread(proc.proc.wait, 15) is not None
    finally:
        proc.stop()


async def _drain(messages: AsyncIterator[dict[str, str]]) -> list[dict[str, str]]:
    return [m async for m in messages]


async def test_stream_with_default_polling_survives_a_long_quiet_gap(infra_stack, tmp_path, log, headers):
    """A model that thinks for longer than redis-py's 5 s default read timeout must not cut the stream."""
    s = Settings(kafka_bootstrap_servers=infra_stack.bootstrap, redis_url=infra_stack.redis_url, data_dir=tmp_path)
    with run_gateway(s) as running:
        async with httpx.AsyncClient(base_url=running.url, timeout=30, headers=headers) as c:
            task_id = await new_task(c)

            async def slow_orchestrator() -> None:
                await asyncio.sleep(7)
                await log.append(task_id, completed("late but whole"))

            async with c.stream("GET", f"/v1/tasks/{task_id}/events") as resp:
                writer = asyncio.create_task(slow_orchestrator())
                events = await collect_events(resp, timeout=20)
                await writer
            assert [e["event"] for e in events] == ["task.accepted", "task.completed"]
            async with c.stream("GET", f"/v1/tasks/{task_id}/events", headers={"Last-Event-ID": "2"}) as resp:
                started = time.monotonic()
                assert await collect_events(resp, timeout=10) == []  # past the end of a sealed log: ends at once
                assert time.monotonic() - started < 5


async def test_blank_question_is_rejected(client):
    resp = await client.post("/v1/tasks", json={"question": "   \n "})
    assert resp.status_code == 422 and resp.json()["error"]["code"] == "invalid_request"
