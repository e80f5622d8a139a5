"""The model stream reader over real HTTP against the scripted server playing each provider shape
(rules A12, A17, A18), and one question through the whole stack with a provider that repeats the
call's id and name in every chunk (MiniMax through NIM). The byte-level matrix: tests/unit/test_model_wire_shapes.py."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import httpx
import pytest

from ops.client import create_task, stream_task
from ops.stack import Stack
from conduit.runtime.settings import Settings
from testkit.provider_shapes import SHAPES
from testkit.scripted_model import ScriptedModel, Turn
from testkit.scripted_model import evidence_number as _number_of
from testkit.stack import model_env, start_stack
from conduit.runtime.llm.openai_model import ModelClient, ModelError

ARGS = {"query": "增值税 征收率", "reason": "查法条"}
WEB = {"queries": ["增值税 征收率 2026"], "reason": "核对"}
VAT_LAW = "中华人民共和国增值税法"


def client(model: ScriptedModel, **fields) -> ModelClient:
    return ModelClient(Settings(openai_base_url=model.base_url, openai_api_key="k", model="scripted", **fields).llm)


async def _collect(model: ScriptedModel, **fields):
    text, thoughts = [], []

    async def on_delta(t: str) -> None:
        text.append(t)

    async def on_thinking(t: str) -> None:
        thoughts.append(t)

    resp = await client(model, **fields).stream([{"role": "user", "content": "q"}], [{"type": "function"}], on_delta,
                                                on_thinking=on_thinking, timeout_s=10)
    return resp, "".join(text), "".join(thoughts)


@pytest.mark.parametrize("shape", SHAPES)
async def test_every_provider_shape_reads_over_http(model: ScriptedModel, shape: str) -> None:
    model.push(Turn(reasoning="先查法条。", content="征收率为3%。", shape=shape),
               Turn(tool_calls=[{"name": "kb_search", "arguments": ARGS}, {"name": "web_search", "arguments": WEB}],
                    shape=shape))
    resp, text, thoughts = await _collect(model)
    assert resp.content == text == "征收率为3%。" and thoughts == "先查法条。" and resp.usage.total_tokens > 0
    resp, text, _ = await _collect(model)
    assert [(c.name, json.loads(c.arguments)) for c in resp.tool_calls] == [("kb_search", ARGS), ("web_search", WEB)]
    assert text == "" and len({c.id for c in resp.tool_calls}) == 2


@pytest.mark.parametrize("status,error,code", [
    (401, {"message": "Incorrect API key provided", "type": "invalid_request_error", "code": "invalid_api_key"},
     "model_auth_failed"),
    (403, {"message": "Access denied"}, "model_auth_failed"),
    (404, {"message": "The model `scripted` does not exist", "code": "model_not_found"}, "model_not_found"),
    (400, {"message": "This model's maximum context length is 8192 tokens. However, you requested 9100 tokens",
           "code": "context_length_exceeded"}, "context_length_exceeded"),
    (400, {"message": "Range of input length should be [1, 30720]", "code": "InvalidParameter"}, "context_length_exceeded"),
])
async def test_configuration_and_context_errors_are_never_retried(model: ScriptedModel, status, error, code) -> None:
    before = len(model.requests)
    model.push(Turn(status=status, error=error), Turn(content="never asked"))
    with pytest.raises(ModelError) as err:
        await _collect(model)
    assert err.value.code == code and err.value.status == status and not err.value.streamed
    assert len(model.requests) == before + 1, "not retried"
    model.script.clear()


async def test_a_retry_after_past_the_calls_limit_fails_at_once(model: ScriptedModel) -> None:
    model.push(Turn(status=429, retry_after_s=30, error={"message": "Rate limit reached", "code": "rate_limit_exceeded"}))
    started = time.monotonic()
    with pytest.raises(ModelError) as err:
        await _collect(model)  # the call's limit is 10 s
    assert time.monotonic() - started < 2 and err.value.code == "model_rate_limited" and "past the call's limit" in str(err.value)


async def test_a_503_with_retry_after_is_waited_for_then_answered(model: ScriptedModel) -> None:
    model.push(Turn(status=503, retry_after_s=1.2), Turn(content="好。"))
    resp, text, _ = await _collect(model)
    assert text == "好。" and resp.retries == 1
    refused, retried = model.received_at[-2:]
    assert retried - refused >= 1.2


async def test_a_stream_that_stops_mid_answer_fails_as_streamed(model: ScriptedModel) -> None:
    model.push(Turn(content="征收率为", cut=True))
    with pytest.raises(ModelError) as err:
        await _collect(model)
    assert err.value.code == "model_stream_truncated" and err.value.streamed


@pytest.fixture(scope="module")
def stack(infra_stack, tmp_path_factory, model) -> Iterator[Stack]:
    """Retriever, orchestrator and gateway processes whose model plays MiniMax-through-NIM's shape."""
    st = start_stack(infra_stack.bootstrap, infra_stack.redis_url, tmp_path_factory.mktemp("providers-data"),
                     ("retriever", "orchestrator", "gateway"),
                     model_env(model.base_url, "minimax-m2"), laws=[VAT_LAW])
    yield st
    st.stop()


@pytest.mark.parametrize("shape", SHAPES)
def test_one_question_per_provider_shape_gets_a_cited_answer(stack: Stack, model: ScriptedModel, shape: str) -> None:
    """Each family's shape through the whole stack; ``repeated_names`` (MiniMax through NIM) is the one
    that used to request ``kb_searchkb_search…``."""
    def cite(body: dict) -> Turn:
        n = _number_of(body["messages"], "增值税法", "第十一条")
        return Turn(content=f"征收率为百分之三[{n}]。" if n else "没有找到。", reasoning="有依据了。", shape=shape)

    model.push(Turn(reasoning="先查法条。", shape=shape,
                    tool_calls=[{"name": "kb_search", "arguments": {"query": "小规模纳税人 简易计税方法 征收率",
                                                                     "reason": "查找增值税法的征收率"}}]), cite)
    created = create_task(stack.gateway_url, "小规模纳税人适用简易计税方法的征收率是多少？", api_key=stack.admin_key)
    events = list(stream_task(stack.gateway_url, created["task_id"], read_timeout_s=60, reconnects=0,
                              api_key=stack.admin_key))
    requested = [e.data["tool"] for e in events if e.event == "tool.requested"]
    assert requested == ["kb_search"], "the name repeated in every chunk is taken once"
    done = events[-1]
    assert done.event == "task.completed" and done.data["mode"] == "agent" and done.data["fallback_reason"] is None
    assert any(c["locator"] == "第十一条" for c in done.data["citations"]) and "<think>" not in done.data["answer"]


def test_a_wrong_key_is_a_configuration_error_on_the_answer_and_readyz_until_a_call_succeeds(stack, model) -> None:
    model.push(Turn(status=401, error={"message": "Incorrect API key provided", "code": "invalid_api_key"}))
    before = len(model.requests)
    created = create_task(stack.gateway_url, "劳动合同试用期最长多久？", api_key=stack.admin_key)
    events = list(stream_task(stack.gateway_url, created["task_id"], read_timeout_s=60, reconnects=0,
                              api_key=stack.admin_key))
    done = events[-1].data
    assert events[-1].event == "task.completed" and done["mode"] == "retrieval_only"
    assert done["fallback_reason"].startswith("model_auth_failed: 401") and "OPENAI_API_KEY" in done["fallback_reason"]
    assert len(model.requests) == before + 1, "never retried"
    traced = [e.data["data"] for e in events if e.event == "trace" and e.data["data"].get("code")]
    assert traced and traced[0]["code"] == "model_auth_failed" and traced[0]["kind"] == "configuration"
    ready = httpx.get(f"{stack.gateway_url}/readyz", timeout=10).json()
    assert ready["status"] == "ready" and ready["model"]["code"] == "model_auth_failed" and ready["model"]["status"] == 401

    model.push(Turn(content="试用期最长六个月。"))  # the key was fixed: the next call succeeds
    created = create_task(stack.gateway_url, "劳动合同的试用期最长可以约定多久？", api_key=stack.admin_key)
    events = list(stream_task(stack.gateway_url, created["task_id"], read_timeout_s=60, reconnects=0,
                              api_key=stack.admin_key))
    assert events[-1].data["mode"] == "agent"
    assert httpx.get(f"{stack.gateway_url}/readyz", timeout=10).json()["model"] is None


async def test_an_endpoint_configured_without_streaming_is_asked_for_one_reply(model: ScriptedModel) -> None:
    """``streaming: false`` in ``CONDUIT_MODELS``: the request says ``stream: false`` and the one JSON reply,
    tool calls included, goes through the same reader (its text arrives in one piece)."""
    before = len(model.requests)
    model.push(Turn(tool_calls=[{"name": "kb_search", "arguments": ARGS}]), Turn(content="征收率为3%。"))
    whole = ModelClient(Settings(openai_base_url=model.base_url, openai_api_key="k", model="scripted").llm, streaming=False)
    texts: list[str] = []

    async def on_delta(t: str) -> None:
        texts.append(t)

    resp = await whole.stream([{"role": "user", "content": "q"}], [{"type": "function"}], on_delta, timeout_s=10)
    assert [(c.name, json.loads(c.arguments)) for c in resp.tool_calls] == [("kb_search", ARGS)]
    resp = await whole.stream([{"role": "user", "content": "q"}], None, on_delta, timeout_s=10)
    assert resp.content == "征收率为3%。" and texts == ["征收率为3%。"]
    assert [r["stream"] for r in model.requests[before:]] == [False, False]
    assert all("stream_options" not in r for r in model.requests[before:])
