"""Tracing rules O5-O7 in process (docs/operations.md "Tracing"): where spans go, what tracing off costs,
the task span recorded at its end with the ids reserved at its start, and the spans of a task run through
the production model steps (``agentsim``) with an in-memory exporter."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from agentsim import T0, Reply, Sim, TestModel, kb, question
from conduit.runtime import bus, tracing
from contracts import topics
from contracts.events import QuestionAsked
from services.orchestrator import spans as task_spans
from services.orchestrator.agent.state import Failure, TaskState


@pytest.fixture
def exported():
    exporter = InMemorySpanExporter()
    tracing.use_provider(tracing.make_provider("conduit-test", SimpleSpanProcessor(exporter)))
    yield exporter
    tracing.use_provider(None)


def test_rule_o5_the_endpoint_comes_from_the_standard_variables_or_conduits_setting():
    assert tracing.traces_endpoint(None, {}) is None
    assert tracing.traces_endpoint(None, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/"}) == "http://c:4318/v1/traces"
    assert tracing.traces_endpoint("http://mine:4318", {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}) \
        == "http://mine:4318/v1/traces"
    per_signal = {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t:4318/custom", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c"}
    assert tracing.traces_endpoint("http://mine", per_signal) == "http://t:4318/custom"  # used as is
    assert tracing.traces_endpoint("http://mine", {"OTEL_SDK_DISABLED": "true"}) is None
    assert tracing.traces_endpoint("http://mine", {"OTEL_TRACES_EXPORTER": "none"}) is None


class _Broker:
    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    async def publish(self, body: bytes, topic: str, **kw: Any) -> None:
        self.sent.append({"topic": topic, **kw})


def _asked() -> QuestionAsked:
    q = question()
    return q.model_copy(update={"traceparent": tracing.new_traceparent()})


async def test_rule_o5_tracing_off_makes_no_span_and_the_envelopes_context_still_travels():
    assert not tracing.enabled()
    broker, event = _Broker(), _asked()
    await bus.publish(broker, topics.QUESTIONS, event)  # type: ignore[arg-type]
    assert broker.sent[0]["headers"]["traceparent"] == event.traceparent
    assert "tracestate" not in broker.sent[0]["headers"]
    assert tracing.reserve(event.traceparent) is None  # no task span to reserve
    with tracing.span("x", event.traceparent) as tp:
        assert tp == event.traceparent


async def test_rule_o7_a_publish_is_a_producer_span_whose_context_and_tracestate_ride_in_the_headers(exported):
    broker, event = _Broker(), _asked()
    with tracing.span("consumer", event.traceparent, tracestate="vendor=abc"):
        await bus.publish(broker, topics.QUESTIONS, event)  # type: ignore[arg-type]
    headers = broker.sent[0]["headers"]
    produced = next(s for s in exported.get_finished_spans() if s.name == f"{topics.QUESTIONS} publish")
    assert produced.kind == SpanKind.PRODUCER and headers["traceparent"] == tracing.format_span(produced.context)
    assert headers["tracestate"] == "vendor=abc"
    assert tracing.trace_id_of(headers["traceparent"]) == tracing.trace_id_of(event.traceparent)


def test_rule_o6_a_reserved_span_is_recorded_later_with_its_ids_parent_times_and_outcome(exported):
    parent = tracing.new_traceparent()
    own = tracing.reserve(parent)
    assert own is not None and tracing.trace_id_of(own) == tracing.trace_id_of(parent) and own != parent
    tracing.record_span("later", own, parent, T0, T0 + timedelta(seconds=3), error="deadline", **{"k": 1, "none": None})
    (sp,) = exported.get_finished_spans()
    assert tracing.format_span(sp.context) == own and sp.parent.span_id == tracing.parse(parent).span_id
    assert (sp.end_time - sp.start_time) == 3_000_000_000
    assert sp.status.status_code == StatusCode.ERROR and sp.attributes["error.type"] == "deadline"
    assert dict(sp.attributes) == {"k": 1, "error.type": "deadline"}


async def test_rules_o6_o7_a_tool_using_task_is_one_tree_under_its_own_span(exported):
    sim = Sim(TestModel(Reply(tool_calls=[kb("增值税 征收率")]), Reply(content="答[1]。")))
    event = _asked()
    with tracing.span("conduit.questions process", event.traceparent):
        asked, parent = task_spans.task_context(event)
    state = await sim.ask(asked)
    assert state.status == "completed"
    state.trace_parent = parent
    task_spans.record_task(state, sim.now)

    finished = exported.get_finished_spans()
    task = next(s for s in finished if s.name == "invoke_agent conduit")
    assert tracing.format_span(task.context) == state.traceparent and task.parent.span_id == tracing.parse(parent).span_id
    assert task.attributes["conduit.task.status"] == "completed" and task.attributes["gen_ai.usage.output_tokens"] > 0
    steps = [s for s in finished if s.name == "task step"]
    assert len(steps) == 2 and {s.parent.span_id for s in steps} == {task.context.span_id}
    calls = [s for s in finished if s.name.startswith("chat ")]
    assert len(calls) == 2 and {c.parent.span_id for c in calls} == {s.context.span_id for s in steps}
    first = calls[0].attributes
    assert calls[0].kind == SpanKind.CLIENT and first["gen_ai.operation.name"] == "chat"
    assert first["gen_ai.request.model"] == first["gen_ai.response.model"]
    assert first["gen_ai.usage.input_tokens"] > 0 and first["gen_ai.usage.output_tokens"] > 0
    assert first["conduit.model.tool_calls"] == 1
    assert {s.context.trace_id for s in finished} == {tracing.parse(event.traceparent).trace_id}


def test_rule_o6_a_failed_task_span_carries_its_code_and_a_task_started_untraced_records_none(exported):
    state = TaskState(task_id=question().task_id, session_id="s", tenant_id="t", question="q", allowed_tools=[],
                      status="failed", failure=Failure(code="model_unavailable", message="down"))
    task_spans.record_task(state, T0)  # no trace context kept: nothing recorded
    assert exported.get_finished_spans() == ()
    parent = tracing.new_traceparent()
    state.traceparent, state.trace_parent = tracing.reserve(parent), parent
    task_spans.record_task(state, state.created_at + timedelta(seconds=1))
    (sp,) = exported.get_finished_spans()
    assert sp.status.status_code == StatusCode.ERROR and sp.attributes["error.type"] == "model_unavailable"


async def test_rule_o7_a_failed_model_call_is_an_error_span_with_the_models_code(exported):
    sim = Sim(TestModel(Reply(error="bad key", error_code="model_auth_failed"), Reply(content="答。")))
    event = _asked()
    with tracing.span("conduit.questions process", event.traceparent):
        asked, _ = task_spans.task_context(event)
    await sim.ask(asked)
    failed = next(s for s in exported.get_finished_spans() if s.name.startswith("chat "))
    assert failed.status.status_code == StatusCode.ERROR and failed.attributes["error.type"] == "model_auth_failed"
    assert failed.attributes["conduit.model.streamed"] is False and "gen_ai.usage.input_tokens" not in failed.attributes
