"""Provider errors handled as they mean (rule A18): each family's wording classified, ``Retry-After``
read in its three forms, a context exceeded folding the history once, configuration errors traced
and counted as such (in process; the HTTP side with the scripted server: tests/stack/test_model_providers.py)."""

from __future__ import annotations

import pytest

from agentsim import Reply, Sim, TestModel
from services.orchestrator.agent import modelfailures
from services.orchestrator.agent.effects import Metric
from conduit.runtime.llm.providererrors import classify, describe, retry_after_s


@pytest.mark.parametrize("status,code,message,expected", [
    (400, "context_length_exceeded", "This model's maximum context length is 128000 tokens. However, your messages "
                                     "resulted in 130512 tokens.", "context_length_exceeded"),  # OpenAI
    (400, "invalid_request_error", "This model's maximum context length is 65536 tokens. However, you requested 70123 "
                                   "tokens (69123 in the messages, 1000 in the completion).", "context_length_exceeded"),  # DeepSeek
    (400, None, "This model's maximum context length is 8192 tokens. However, you requested 9000 tokens (8000 in the "
                "messages, 1000 in the completion).", "context_length_exceeded"),  # vLLM
    (400, None, "Input prompt (9000 tokens) is too long and exceeds limit of 8192", "context_length_exceeded"),  # vLLM V1
    (400, "InvalidParameter", "<400> InternalError.Algo.InvalidParameter: Range of input length should be [1, 129024]",
     "context_length_exceeded"),  # Qwen (DashScope)
    (400, "invalid_request_error", "Invalid request: Your request exceeded model token limit: 131072",
     "context_length_exceeded"),  # Kimi
    (400, "1261", "Prompt exceeds max length", "context_length_exceeded"),  # GLM
    (400, "2013", "invalid params, context window exceeds limit", "context_length_exceeded"),  # MiniMax
    (400, "exceed_context_size_error", "the request exceeds the available context size, try increasing it",
     "context_length_exceeded"),  # llama.cpp
    (400, None, "litellm.ContextWindowExceededError: litellm.BadRequestError: prompt is too long: 210000 tokens > "
                "200000 maximum", "context_length_exceeded"),  # LiteLLM
    (401, "invalid_api_key", "Incorrect API key provided: sk-***", "model_auth_failed"),
    (403, None, "Access denied", "model_auth_failed"),
    (404, "model_not_found", "The model `gpt-9` does not exist or you do not have access to it.", "model_not_found"),
    (404, None, 'model "qwen3:32b" not found, try pulling it first', "model_not_found"),  # Ollama
    (400, "invalid_request_error", "Model Not Exist", "model_not_found"),  # DeepSeek
    (402, None, "Insufficient Balance", "model_quota_exceeded"),  # DeepSeek
    (429, "insufficient_quota", "You exceeded your current quota, please check your plan and billing details.",
     "model_quota_exceeded"),  # OpenAI
    (400, "Arrearage", "Access denied, please make sure your account is in good standing.", "model_quota_exceeded"),  # Qwen
    (429, "1113", "您的账户已欠费，请充值后重试。", "model_quota_exceeded"),  # GLM
    (400, None, "registry.ollama.ai/library/gemma2:2b does not support tools", "model_tools_unsupported"),  # Ollama
    (400, None, '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set',
     "model_tools_unsupported"),  # vLLM
    (429, "rate_limit_exceeded", "Rate limit reached for gpt-4.1 on tokens per min (TPM)", "model_rate_limited"),
    (503, None, "The server is overloaded", "model_unavailable"),
    (529, "overloaded_error", "Overloaded", "model_unavailable"),
    (None, "network_error", "the provider ended the stream", "model_unavailable"),
    (422, None, "messages.2.content: field required", "model_bad_request"),
])
def test_each_family_wording_gets_its_code(status, code, message, expected):
    assert classify(status, code, message) == expected


def test_a_configuration_error_says_what_to_check():
    assert "OPENAI_API_KEY" in describe("model_auth_failed", 401, "Incorrect API key")
    assert "CONDUIT_MODEL" in describe("model_not_found", 404, "no such model")


def test_retry_after_is_read_in_seconds_milliseconds_and_as_a_date():
    assert retry_after_s({"retry-after": "7"}) == 7.0
    assert retry_after_s({"retry-after-ms": "1500", "retry-after": "7"}) == 1.5
    assert retry_after_s({"retry-after": "Wed, 01 Jan 2025 00:00:30 GMT"}, now=1735689600.0) == 30.0
    assert retry_after_s({"retry-after": "soon"}) is None and retry_after_s({}) is None


TURNS = [{"question": f"第{i}个问题：增值税的税率是多少？" * 20, "answer": f"回答{i}。" + "税率为13%。" * 60} for i in range(1, 4)]
EXCEEDED = Reply(error="400 This model's maximum context length is 8192 tokens", error_code="context_length_exceeded")


async def test_a_context_exceeded_folds_the_history_once_and_the_step_runs_again():
    model = TestModel(EXCEEDED, Reply(content="征收率为3%。"))
    sim = Sim(model)
    state = await sim.ask(turns=TURNS)
    assert state.status == "completed" and state.mode == "agent" and state.context_folds == 1
    first, second = model.calls[0][0], model.calls[1][0]
    assert sum(len(str(m["content"])) for m in second) < sum(len(str(m["content"])) for m in first) / 1.5
    note = [m for m in second if m["role"] == "system" and modelfailures.FOLD_NOTE in m["content"]]
    assert len(note) == 1 and "第1轮" in note[0]["content"] and "第3轮" in note[0]["content"]
    assert [m["role"] for m in second][-1] == "user" and not any(m["role"] == "assistant" for m in second)
    assert state.window_chars == sim.deps.settings.agent.context_window_chars // 2
    assert Metric("model_failed", ("context_length_exceeded", "provider")) in sim.metrics


async def test_a_second_context_exceeded_fails_as_any_model_call():
    sim = Sim(TestModel(EXCEEDED, EXCEEDED))
    state = await sim.ask(turns=TURNS)
    assert state.mode == "retrieval_only" and state.fallback_reason.startswith("context_length_exceeded: ")
    assert state.context_folds == 1 and len(sim.model.calls) == 2


async def test_nothing_to_fold_means_no_second_call():
    sim = Sim(TestModel(EXCEEDED))
    state = await sim.ask()
    assert len(sim.model.calls) == 1 and state.fallback_reason.startswith("context_length_exceeded")


async def test_a_configuration_error_is_traced_and_counted_as_one_and_the_call_gets_its_limit():
    sim = Sim(TestModel(Reply(error="401 Incorrect API key (check OPENAI_API_KEY)", error_code="model_auth_failed")))
    state = await sim.ask()
    assert state.fallback_reason.startswith("model_auth_failed: 401") and state.mode == "retrieval_only"
    assert {"phase": "llm", "code": "model_auth_failed", "kind": "configuration"}.items() <= next(
        t for t in state.trace if t.get("code")).items()
    assert Metric("model_failed", ("model_auth_failed", "configuration")) in sim.metrics
    assert sim.events[-1].fallback_reason.startswith("model_auth_failed")
    assert sim.model.timeouts_seen[0] == pytest.approx(sim.deps.settings.llm.model_call_cap_s)


def test_conduit_status_names_the_model_configuration_error():
    from ops.status import render

    report = {"rows": [], "gateway_url": "http://127.0.0.1:8000", "redis_bytes": 0,
              "model": {"code": "model_not_found", "message": "404 no such model (check CONDUIT_MODEL)", "status": 404,
                        "at": 1e9}}
    assert "model: CONFIGURATION ERROR model_not_found" in render(report) and "CONDUIT_MODEL" in render(report)
    assert "CONFIGURATION" not in render({**report, "model": None})
