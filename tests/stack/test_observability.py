"""Metrics, traces and log context over the real parts: the gateway app (in process, its real
lifespan against the session's tansu and Redis) and a real bus consumer (``conduit.runtime.bus.subscribe``).

Spans go to an in-memory exporter installed with ``conduit.runtime.tracing.use_provider``.
"""

from __future__ import annotations

import uuid

import httpx
import pytest
import structlog
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import REGISTRY

from conduit.records import apikeys
from conduit.runtime import bus, tracing
from testkit.stack import auth
from testkit.waits import until
from contracts import topics
from contracts.events import QuestionAsked
from services.gateway.app import create_app


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use_provider(provider)
    yield exporter
    tracing.use_provider(None)


async def test_one_question_is_one_trace_and_metrics_move(settings, spans):
    consumer = f"obs-{uuid.uuid4().hex[:6]}"
    bad_topic = f"conduit.test.obs.{uuid.uuid4().hex[:6]}"
    await bus.ensure_topics(settings.bus, (bad_topic,))
    seen: dict[str, dict] = {}

    async def handler(event: QuestionAsked) -> None:
        seen[event.task_id] = {"traceparent": event.traceparent, "log": structlog.contextvars.get_contextvars()}

    consumer_broker = bus.make_broker(settings, client_id=consumer)
    from redis.asyncio import Redis

    redis = Redis.from_url(settings.store.url())
    bus.subscribe(consumer_broker, settings.bus, redis, topic=(topics.QUESTIONS, bad_topic), group_id=consumer,
                  model=QuestionAsked, handler=handler, consumer_name=consumer)
    app = create_app(settings)
    ok_before = sample("conduit_consumer_handling_seconds_count", consumer=consumer, outcome="ok")
    dead_before = sample("conduit_dead_letters_total", consumer=consumer, reason="invalid")
    try:
        await consumer_broker.start()
        async with app.router.lifespan_context(app):
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw",
                                         headers=auth((await apikeys.create(redis, "default", "u1"))[0])) as client:
                resp = await client.post("/v1/tasks", json={"question": "增值税的标准税率是多少？"})
                assert resp.status_code == 202
                task_id = resp.json()["task_id"]
                # a malformed message on the consumer's topic goes to the dead-letter topic
                await consumer_broker.publish(b"{not json", bad_topic, key=b"x")
                assert await until(lambda: task_id in seen and sample(
                    "conduit_dead_letters_total", consumer=consumer, reason="invalid") > dead_before, 30)
                assert task_id in seen, "consumer never got the question"

                metrics_text = (await client.get("/metrics")).text
        assert 'conduit_http_requests_total{method="POST",route="/v1/tasks",status="202"}' in metrics_text
        assert 'conduit_http_request_duration_seconds_count{method="POST",route="/v1/tasks"}' in metrics_text
        assert "conduit_sse_streams_open" in metrics_text
    finally:
        await consumer_broker.stop()
        await redis.aclose()

    # metrics: handling histogram and dead-letter counter moved
    assert sample("conduit_consumer_handling_seconds_count", consumer=consumer, outcome="ok") > ok_before
    # > not ==: earlier tests in the session left malformed questions on conduit.questions too
    assert sample("conduit_dead_letters_total", consumer=consumer, reason="invalid") > dead_before
    assert sample("conduit_consumer_handling_seconds_count", consumer=consumer, outcome="invalid") >= 1

    # one trace: gateway span -> publish span -> consumer span
    trace_id = tracing.trace_id_of(seen[task_id]["traceparent"])
    assert trace_id
    mine = [s for s in spans.get_finished_spans() if s.attributes.get("conduit.task_id") == task_id]
    names = {s.name for s in mine}
    assert {"task create", f"{topics.QUESTIONS} publish", f"{topics.QUESTIONS} process"} <= names, names
    assert {f"{s.context.trace_id:032x}" for s in mine} == {trace_id}
    by_name = {s.name: s for s in mine}
    assert by_name[f"{topics.QUESTIONS} process"].parent.span_id == by_name[f"{topics.QUESTIONS} publish"].context.span_id
    assert by_name[f"{topics.QUESTIONS} publish"].parent.span_id == by_name["task create"].context.span_id

    # log context inside the handler carried task_id and trace_id
    assert seen[task_id]["log"]["task_id"] == task_id and seen[task_id]["log"]["trace_id"] == trace_id


def test_traceparent_helpers_work_with_tracing_off():
    tp = tracing.new_traceparent()
    assert tracing.parse(tp) is not None and tracing.trace_id_of(tp) == tp[3:35]
    assert tracing.parse("00-" + "0" * 32 + "-" + "0" * 16 + "-01") is None  # all-zero ids are invalid
    with tracing.span("x", tp, task_id="t1") as inner:  # no provider: ids still flow, the parent's trace
        assert inner == tp and structlog.contextvars.get_contextvars()["trace_id"] == tp[3:35]
    with tracing.span("y", None) as fresh:
        assert tracing.parse(fresh) is not None and fresh != tp
