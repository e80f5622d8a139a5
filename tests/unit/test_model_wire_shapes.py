"""The model stream reader's wire-shape matrix (rules A17-A19): each provider family's byte stream
(tests/unit/wireshapes.py) read by the production reader (``reader.read``: SSE split, orjson,
``assembler.Assembler``), cut into network reads of any size; then, through the agent core
(``agentsim.Sim``), what a malformed stream or an unknown tool name does to the task."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest

import wireshapes as w
from agentsim import Sim
from services.orchestrator.agent.effects import Metric
from conduit.runtime.llm.assembler import StreamError
from conduit.runtime.llm.model import ModelError, ModelResponse
from conduit.runtime.llm.openai_model import as_model_error
from conduit.runtime.llm.reader import Reading, read

KB = ("kb_search", w.ARGS)
WEB = ("web_search", w.WEB_ARGS)


async def _reads(raw: bytes, size: int) -> AsyncIterator[bytes]:
    for i in range(0, len(raw), size):
        yield raw[i:i + size]


async def read_all(raw: bytes, size: int = 7, thinking: bool = True) -> tuple[ModelResponse, str, str]:
    """``raw`` read in network reads of ``size`` bytes: the response, the answer text and the reasoning
    as they were streamed (``thinking`` False: no ``on_thinking``, as for a tenant without thinking)."""
    text: list[str] = []
    thoughts: list[str] = []

    async def on_delta(t: str) -> None:
        text.append(t)

    async def on_thinking(t: str) -> None:
        thoughts.append(t)

    reading = Reading()
    await read(_reads(raw, size), reading, on_delta, on_thinking if thinking else None)
    return reading.resp, "".join(text), "".join(thoughts)


def calls_of(resp: ModelResponse) -> list[tuple[str, dict]]:
    return [(c.name, json.loads(c.arguments)) for c in resp.tool_calls]


MATRIX = [
    # name, stream, tool calls, answer text, reasoning, total tokens, finish_reason
    ("openai text, usage-only last chunk", w.OPENAI_TEXT, [], "征收率为3%[1]。", "", 443, "stop"),
    ("openai parallel calls", w.OPENAI_PARALLEL, [KB, WEB], "", "", 443, "tool_calls"),
    ("parallel calls interleaved by index", w.INTERLEAVED, [KB, WEB], "", "", 0, "tool_calls"),
    ("openai repeating id and name", w.OPENAI_REPEATING, [KB], "", "", 0, "tool_calls"),
    ("deepseek reasoning_content", w.DEEPSEEK_REASONER, [], "征收率为3%[1]。", "用户问小规模纳税人的征收率。", 476, "stop"),
    ("deepseek tool call", w.DEEPSEEK_TOOLS, [KB], "", "", 476, "tool_calls"),
    ("qwen dashscope tool call", w.QWEN_TOOLS, [KB], "", "", 318, "tool_calls"),
    ("qwen thinking", w.QWEN_THINKING, [], "征收率为3%[1]。", "先查法条。", 18, "stop"),
    ("kimi usage in the choice", w.KIMI_TOOLS, [KB], "", "", 326, "tool_calls"),
    ("kimi via fireworks repeats the name", w.KIMI_FIREWORKS, [KB], "", "", 326, "tool_calls"),
    ("glm whole call in one chunk", w.GLM_WHOLE_CALL, [KB], "", "需要查法条。", 462, "tool_calls"),
    ("minimax via nim: think tags, repeated name", w.MINIMAX_NIM, [KB], "", "用户想知道征收率。", 556, "tool_calls"),
    ("vllm hermes, usage-only last chunk", w.VLLM_TOOLS, [KB], "", "", 330, "tool_calls"),
    ("vllm reasoning", w.VLLM_REASONING, [], "征收率为3%[1]。", "先想一下。", 0, "stop"),
    ("ollama whole parallel calls", w.OLLAMA_TOOLS, [KB, WEB], "", "用户问征收率。", 290, "tool_calls"),
    ("older ollama: all index 0, stop", w.OLLAMA_OLD, [KB, WEB], "", "", 0, "stop"),
    ("llama.cpp server, CRLF", w.LLAMACPP_TOOLS, [KB], "", "查一下。", 202, "tool_calls"),
    ("litellm: nulls, stop after the call", w.LITELLM_TOOLS, [KB], "我先查一下。", "", 340, "stop"),
    ("no index: whole calls by id", w.LITELLM_NO_INDEX, [KB, WEB], "", "", 0, "tool_calls"),
    ("no index, no id, name in every chunk", w.NO_INDEX_NO_ID, [KB, KB], "", "", 0, "tool_calls"),
    ("legacy function_call", w.LEGACY_FUNCTION_CALL, [KB], "", "", 0, "function_call"),
    ("non-streamed reply", w.NON_STREAMED, [KB], "", "要查。", 120, "tool_calls"),
    ("length inside the text: the text so far", w.LENGTH_IN_TEXT, [], "征收率为", "", 0, "length"),
]


@pytest.mark.parametrize("size", [1, 7, 1 << 20], ids=["byte by byte", "7-byte reads", "one read"])
@pytest.mark.parametrize("name,raw,calls,text,thought,tokens,finish", MATRIX, ids=[m[0] for m in MATRIX])
async def test_every_family_shape_reads_to_the_same_answer_and_calls(name, raw, calls, text, thought, tokens, finish, size):
    resp, streamed, thoughts = await read_all(raw, size)
    assert calls_of(resp) == calls, "names and ids taken once, arguments joined per call (rule A17.1-2)"
    assert resp.content == streamed == text and thoughts == thought, "reasoning never joins the answer (A17.3)"
    assert resp.usage.total_tokens == tokens and resp.finish_reason == finish
    assert len({c.id for c in resp.tool_calls}) == len(resp.tool_calls), "call ids are unique"
    if calls:
        assert resp.first_token_s is not None


async def test_the_repeated_name_is_taken_once_and_the_first_id_kept():
    resp, _, _ = await read_all(w.MINIMAX_NIM)
    [call] = resp.tool_calls
    assert call.name == "kb_search" and call.id == "call_function_9kq2" and json.loads(call.arguments) == w.ARGS
    resp, _, _ = await read_all(w.KIMI_TOOLS)
    assert resp.tool_calls[0].id == "functions.kb_search:0"


async def test_reasoning_is_dropped_when_thinking_is_off_and_never_reaches_the_answer():
    for raw in (w.DEEPSEEK_REASONER, w.MINIMAX_NIM, w.VLLM_REASONING):
        resp, text, thoughts = await read_all(raw, thinking=False)
        assert thoughts == "" and "<think>" not in resp.content and "用户" not in text


async def test_reasoning_sent_twice_in_one_delta_is_read_once():
    both = {"reasoning": "想", "reasoning_content": "想", "reasoning_details": [{"type": "reasoning.text", "text": "想"}]}
    raw = w.sse({"choices": [{"index": 0, "delta": both}]}, {"choices": [{"index": 0, "delta": {"content": "答"}}]},
                {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    _, text, thoughts = await read_all(raw)
    assert (text, thoughts) == ("答", "想")


@pytest.mark.parametrize("content,text,thought", [
    (["<think>", "a", "</think>", "答"], "答", "a"),
    (["  \n<think>a</think>\n\n答", "案"], "答案", "a"),
    (["答案 <think>不是推理</think>"], "答案 <think>不是推理</think>", ""),  # only a leading tag is reasoning
    (["<", "thinking about it"], "<thinking about it", ""),
    (["<think>never closed"], "", "never closed"),
])
async def test_a_leading_think_tag_is_reasoning_across_chunk_cuts(content, text, thought):
    raw = w.sse(*({"choices": [{"index": 0, "delta": {"content": c}}]} for c in content),
                {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    resp, streamed, thoughts = await read_all(raw, 3)
    assert resp.content == streamed == text and thoughts == thought


@pytest.mark.parametrize("raw,code,streamed", [
    (w.NOT_JSON, "model_protocol_error", True),
    (w.CUT_MID_ARGUMENTS, "model_stream_truncated", False),
    (w.CUT_MID_ANSWER, "model_stream_truncated", True),
    (w.LENGTH_IN_ARGUMENTS, "model_output_truncated", False),
    (w.CONTENT_FILTERED, "model_content_filtered", True),
    (w.sse({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]},
                         "finish_reason": "tool_calls"}]}), "model_protocol_error", False),  # a call without a name
], ids=["a chunk that is not JSON", "cut inside arguments", "cut mid-answer", "length inside arguments",
        "content filter", "a call without a name"])
async def test_a_malformed_stream_is_a_failure_with_its_code_never_an_answer(raw, code, streamed):
    with pytest.raises(ModelError) as err:
        await read_all(raw, 5)
    assert err.value.code == code and err.value.streamed is streamed


@pytest.mark.parametrize("raw,code", [(w.VLLM_ERROR, "context_length_exceeded"), (w.MINIMAX_ERROR, "model_auth_failed")])
async def test_an_error_object_inside_the_stream_means_what_it_says(raw, code):
    with pytest.raises(StreamError) as err:
        await read_all(raw)
    assert as_model_error(err.value, False).code == code


async def test_a_value_split_over_two_data_lines_of_one_event_is_joined():
    raw = b'data: {"choices":[{"index":0,"delta":{"content":"a"}\ndata: ,"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'
    resp, text, _ = await read_all(raw, 4)
    assert text == "a" and resp.finish_reason == "stop"


class Replay:
    """A ``Model`` answering each call with the next recorded body, read by the production reader
    (the HTTP around it is the scripted server's part: tests/stack/test_model_providers.py)."""

    def __init__(self, *bodies: bytes) -> None:
        self.bodies = list(bodies)
        self.calls: list[tuple[list[dict], list[dict] | None]] = []  # (messages, tools), as ``TestModel.calls``

    async def stream(self, messages, tools, on_delta, should_stop=None, max_tokens=None, on_thinking=None,
                     model=None, timeout_s=None) -> ModelResponse:
        self.calls.append(([dict(m) for m in messages], tools))
        raw = self.bodies.pop(0) if self.bodies else w.sse(w._oa({"content": "征收率为3%[1]。"}), w._oa({}, "stop"))
        reading = Reading()
        try:
            await read(_reads(raw, 13), reading, on_delta, on_thinking)
        except StreamError as exc:
            raise as_model_error(exc, reading.streamed) from exc
        return reading.resp


async def test_a_repeated_name_reaches_the_tool_as_its_own_name():
    sim = Sim(Replay(w.MINIMAX_NIM))
    state = await sim.ask()
    assert [(r.name, r.arguments) for r in sim.requests] == [("kb_search", w.ARGS)]
    assert state.status == "completed" and state.mode == "agent" and state.fallback_reason is None


@pytest.mark.parametrize("raw,code", [(w.BROKEN_NAME, "unknown_tool_name"), (w.NOT_JSON, "model_protocol_error"),
                                      (w.CUT_MID_ARGUMENTS, "model_stream_truncated"),
                                      (w.LENGTH_IN_ARGUMENTS, "model_output_truncated")])
async def test_a_protocol_error_ends_with_its_code_on_the_trace_and_a_metric_not_a_silent_answer(raw, code):
    sim = Sim(Replay(raw))
    state = await sim.ask()
    assert state.fallback_reason.startswith(f"{code}: ") and state.mode == "retrieval_only"  # rule A13's answer
    assert any(t["phase"] == "llm" and t.get("code") == code and t.get("kind") == "protocol" for t in state.trace)
    assert any(e.type == "trace" and e.data.get("code") == code for e in sim.events)
    assert Metric("model_failed", (code, "protocol")) in sim.metrics
    assert not any(e.type == "tool.completed" and e.error_code == "tool_not_available" for e in sim.events)
    done = sim.events[-1]
    assert done.type == "task.completed" and done.mode == "retrieval_only" and done.fallback_reason.startswith(code)
    if code == "model_protocol_error":  # text had gone out: withdrawn before the fallback answer
        assert "answer.reset" in sim.types()


async def test_a_known_tool_the_task_was_not_offered_is_still_a_refusal_told_to_the_model():
    raw = w.sse(w._oa({"tool_calls": [{"index": 0, "id": "c", "type": "function",
                                       "function": {"name": "web_fetch", "arguments": '{"url":"https://a.b","reason":"r"}'}}]}),
                w._oa({}, "tool_calls"))
    sim = Sim(Replay(raw))
    state = await sim.ask()
    assert state.mode == "agent" and "tool_not_available" in sim.tool_messages()[0]
