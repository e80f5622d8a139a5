"""One question is one trace across every service, exported over OTLP/HTTP (rules O5-O7, docs/operations.md
"Tracing"): a local OTLP receiver (``testkit.otlp_receiver``: real HTTP, the protobuf request decoded with
``opentelemetry-proto``), the retriever, orchestrator and gateway as processes pointed at it with the standard
``OTEL_EXPORTER_OTLP_ENDPOINT``, and one tool-using question answered by the scripted model; then a returning
user's question, whose recall (rule M13) is traced on the retriever.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import httpx
import pytest

from ops.client import create_task, stream_task
from ops.stack import Stack
from testkit.otlp_receiver import OtlpReceiver, ReceivedSpan
from testkit.scripted_model import Turn, evidence_number
from testkit.stack import auth, model_env, start_stack
from testkit.waits import wait_until

VAT_LAW = "中华人民共和国增值税法"
QUESTION = "小规模纳税人适用简易计税方法的征收率是多少？"
TASK_SPAN = "invoke_agent conduit"


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    r = OtlpReceiver().start()
    yield r
    r.stop()


@pytest.fixture(scope="module")
def traced_stack(infra_stack, tmp_path_factory, model, receiver) -> Iterator[Stack]:
    """Retriever, orchestrator and gateway exporting spans to ``receiver`` (batches sent every 200 ms), with
    long-term memory on (a returning user's recall is traced)."""
    env = model_env(model.base_url) | {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.base_url,
                                       "OTEL_BSP_SCHEDULE_DELAY": "200", "CONDUIT_MEMORY_OFF_TENANTS": "[]"}
    st = start_stack(infra_stack.bootstrap, infra_stack.redis_url, tmp_path_factory.mktemp("tracing-data"),
                     ("retriever", "orchestrator", "gateway"), env, laws=[VAT_LAW])
    yield st
    st.stop()


def cite(body: dict) -> Turn:
    n = evidence_number(body["messages"], "增值税法", "第十一条")
    return Turn(content=f"征收率为百分之三[{n}]。" if n else "没有找到。")


def orphans(spans: list[ReceivedSpan]) -> list[ReceivedSpan]:
    """Spans whose parent is not in ``spans``."""
    ids = {s.span_id for s in spans}
    return [s for s in spans if s.parent_id is not None and s.parent_id not in ids]


def whole(spans: list[ReceivedSpan]) -> bool:
    """The tree has arrived: the task's span, a tool run, two model calls, and no span waits for its parent."""
    names = Counter(s.name for s in spans)
    return (names[TASK_SPAN] == 1 and names["execute_tool kb_search"] >= 1
            and sum(n for name, n in names.items() if name.startswith("chat ")) >= 2 and not orphans(spans))


def test_a_tool_using_question_is_one_trace_tree_across_the_services(traced_stack, model, receiver):
    model.push(Turn(tool_calls=[{"name": "kb_search", "arguments": {"query": "小规模纳税人 简易计税 征收率",
                                                                    "reason": "查增值税法"}}]), cite)
    created = create_task(traced_stack.gateway_url, QUESTION, api_key=traced_stack.admin_key)
    task_id = created["task_id"]
    events = list(stream_task(traced_stack.gateway_url, task_id, read_timeout_s=60, reconnects=0,
                              api_key=traced_stack.admin_key))
    assert events[-1].event == "task.completed", [e.event for e in events]

    # GET /v1/tasks/{id}/trace names the trace a person looks up in their tracing UI
    shown = httpx.get(f"{traced_stack.gateway_url}/v1/tasks/{task_id}/trace", headers=auth(traced_stack.admin_key))
    assert shown.status_code == 200
    trace_id = shown.json()["trace_id"]
    assert isinstance(trace_id, str) and len(trace_id) == 32

    # batches arrive on the processors' schedule: wait until the tree is whole (its last span is the task's)
    arrived = wait_until(lambda: whole(receiver.spans(trace_id)), 60, every_s=0.2)
    spans = receiver.spans(trace_id)
    assert arrived, (f"tree incomplete: {sorted(Counter(s.name for s in spans).items())}; "
                     f"orphans: {[(s.service, s.name) for s in orphans(spans)]}")

    # one trace on every service, one root (the gateway's), no orphan
    mine = [s for s in receiver.spans() if s.attributes.get("conduit.task_id") == task_id]
    assert mine and {s.trace_id for s in mine} == {trace_id}
    assert {s.service for s in spans} >= {"conduit-gateway", "conduit-orchestrator", "conduit-retriever"}
    roots = [s for s in spans if s.parent_id is None]
    assert [(r.service, r.name) for r in roots] == [("conduit-gateway", "task create")]
    assert orphans(spans) == []
    by_id = {s.span_id: s for s in spans}

    def ancestors(s: ReceivedSpan) -> list[str]:
        chain = []
        while s.parent_id is not None:
            s = by_id[s.parent_id]
            chain.append(s.name)
        return chain

    # the task's span ends with its outcome; every step hangs under it
    task = next(s for s in spans if s.name == TASK_SPAN)
    assert task.service == "conduit-orchestrator" and not task.error
    assert task.attributes["conduit.task.status"] == "completed" and task.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert task.attributes["gen_ai.usage.output_tokens"] > 0
    steps = [s for s in spans if s.name == "task step"]
    assert len(steps) >= 2 and all(s.parent_id == task.span_id for s in steps)
    assert any(s.links for s in steps[1:]), "a step woken by a tool result links to that message"

    # model calls: the GenAI conventions, children of a step
    calls = [s for s in spans if s.name.startswith("chat ")]
    for call in calls:
        a = call.attributes
        assert call.kind == 3  # CLIENT
        assert a["gen_ai.operation.name"] == "chat" and a["gen_ai.provider.name"] == "openai"
        assert a["gen_ai.request.model"] == "scripted" and a["gen_ai.response.model"] == "scripted"
        assert a["gen_ai.usage.input_tokens"] > 0 and a["gen_ai.usage.output_tokens"] > 0
        assert a["gen_ai.response.time_to_first_chunk"] > 0
        assert by_id[call.parent_id].name == "task step"
    assert {c.attributes["gen_ai.response.finish_reasons"] for c in calls} >= {("tool_calls",), ("stop",)}

    # the tool run on the retriever: name, outcome, attempt, idempotency key, under the orchestrator's request
    tool = next(s for s in spans if s.name == "execute_tool kb_search")
    a = tool.attributes
    assert tool.service == "conduit-retriever" and not tool.error
    assert a["gen_ai.tool.name"] == "kb_search" and a["conduit.tool.outcome"] == "ok" and a["conduit.tool.attempt"] == 1
    assert a["conduit.tool.idempotency_key"].startswith(f"{task_id}:")
    assert ancestors(tool)[:3] == ["conduit.tools.kb.requests process", "conduit.tools.kb.requests publish", "task step"]
    assert ancestors(tool)[-3:] == ["conduit.questions process", "conduit.questions publish", "task create"]
    # the result goes back over the bus under the tool run
    assert any(s.name == "conduit.tools.results process" and by_id[s.parent_id].parent_id == tool.span_id
               for s in spans if s.parent_id in by_id)


def ask(stack: Stack, question: str) -> str:
    """Ask ``question`` as the tenant admin, read its stream to the end; the task's trace id."""
    task_id = create_task(stack.gateway_url, question, api_key=stack.admin_key)["task_id"]
    events = list(stream_task(stack.gateway_url, task_id, read_timeout_s=60, reconnects=0, api_key=stack.admin_key))
    assert events[-1].event == "task.completed", [e.event for e in events]
    return httpx.get(f"{stack.gateway_url}/v1/tasks/{task_id}/trace", headers=auth(stack.admin_key)).json()["trace_id"]


def test_a_returning_users_recall_is_in_the_question_trace(traced_stack, model, receiver):
    """Rule M13 and O6: the recall the gateway sends ahead for a user with memory is a ``memory recall`` span on the
    retriever, under the recall request's consumer span in the question's trace, with the recall's parts."""
    def recall_of(trace_id: str) -> ReceivedSpan | None:
        spans = receiver.spans(trace_id)
        found = next((s for s in spans if s.name == "memory recall"), None)
        return found if found is not None and whole_recall(spans, found) else None

    def whole_recall(spans: list[ReceivedSpan], recall: ReceivedSpan) -> bool:
        by_id = {s.span_id: s for s in spans}
        chain, s = [], recall
        while s.parent_id in by_id:
            s = by_id[s.parent_id]
            chain.append(s.name)
        return chain == ["conduit.retriever.requests process", "conduit.retriever.requests publish", "task create"]

    ask(traced_stack, "增值税是什么？")  # an answer the memory keeps: from here on the admin is a returning user
    found = None
    for i in range(3):  # the episode's record lands just after the answer: a later question is sure to recall
        model.push(Turn(content="增值税是对商品和服务的增值额征收的税。"))
        trace_id = ask(traced_stack, f"增值税的纳税人有哪些？（{i}）")
        if wait_until(lambda: recall_of(trace_id) is not None, 10, every_s=0.2):
            found = recall_of(trace_id)
            break
    assert found is not None, "no memory recall span in a returning user's question trace"
    a = found.attributes
    assert found.service == "conduit-retriever" and not found.error and a["conduit.recall.outcome"] == "ok"
    assert a["conduit.recall.search_ms"] > 0 and a["conduit.recall.user_items"] >= 1
    assert found.end_ns > found.start_ns > 0
