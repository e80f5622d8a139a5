"""The model's reasoning (``reasoning_content`` deltas, as DeepSeek, Qwen and vLLM send them) over
the real ``openai`` client path against the scripted HTTP model: ``on_thinking`` gets it, the
answer does not."""

from __future__ import annotations

from conduit.runtime.settings import Settings
from testkit.scripted_model import ScriptedModel, Turn
from conduit.runtime.llm.openai_model import ModelClient


async def test_reasoning_deltas_reach_on_thinking_not_the_answer(model: ScriptedModel) -> None:
    model.push(Turn(reasoning="用户问增值税，先查法条。", content="答案。"))
    client = ModelClient(Settings(openai_base_url=model.base_url, openai_api_key="t", model="scripted").llm)
    thoughts, text = [], []

    async def on_delta(t: str) -> None:
        text.append(t)

    async def on_thinking(t: str) -> None:
        thoughts.append(t)

    resp = await client.stream([{"role": "user", "content": "增值税？"}], None, on_delta, on_thinking=on_thinking,
                               max_tokens=600)
    assert "".join(thoughts) == "用户问增值税，先查法条。" and resp.content == "答案。" == "".join(text)
    assert model.requests[-1]["max_tokens"] == 600
