"""A model per request and the fallback chain through the whole stack (issue 29, rules A20, A21): two
scripted servers, the second configured in ``CONDUIT_MODELS``, and a third entry whose port nothing
listens on; ``GET /v1/models`` lists them, a task or chat completion naming one is answered by it, a
name the tenant does not have is a 4xx with its code, and a named model that is down hands the answer
to the tenant's chain, saying so in the trace and ``task.completed``."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from ops.client import create_task, stream_task
from ops import infra
from ops.stack import Stack
from testkit.scripted_model import ScriptedModel, Turn
from testkit.stack import model_env, start_stack


@pytest.fixture(scope="module")
def second() -> Iterator[ScriptedModel]:
    m = ScriptedModel(shape="repeated_names", default=Turn(content="第二个模型的回答。")).start()
    yield m
    m.stop()


@pytest.fixture(scope="module")
def stack(infra_stack, tmp_path_factory, model, second) -> Iterator[Stack]:
    named = [{"name": "second", "base_url": second.base_url, "api_key": "k2", "model": "second-model", "tools": True},
             {"name": "down", "base_url": f"http://127.0.0.1:{infra.free_port()}/v1", "api_key": "k3", "model": "gone"}]
    st = start_stack(infra_stack.bootstrap, infra_stack.redis_url, tmp_path_factory.mktemp("named-models-data"),
                     ("retriever", "orchestrator", "gateway"),
                     {**model_env(model.base_url), "CONDUIT_MODELS": json.dumps(named)})
    yield st
    st.stop()


def _headers(stack: Stack) -> dict[str, str]:
    return {"Authorization": f"Bearer {stack.admin_key}"}


def test_models_lists_the_modes_then_the_tenants_models(stack: Stack) -> None:
    data = httpx.get(f"{stack.gateway_url}/v1/models", headers=_headers(stack), timeout=10).json()["data"]
    ids = [m["id"] for m in data]
    assert ids[:3] == ["conduit", "conduit-kb", "conduit-research"] and ids[3:] == ["default", "second", "down"]
    assert data[4]["model"] == "second-model" and data[4]["tools"] is True and "base_url" not in data[4]


def test_a_task_naming_a_model_is_answered_by_it(stack: Stack, model: ScriptedModel, second: ScriptedModel) -> None:
    before = len(model.requests)
    created = create_task(stack.gateway_url, "你好，请介绍一下你自己。", api_key=stack.admin_key, model="second")
    events = list(stream_task(stack.gateway_url, created["task_id"], read_timeout_s=60, reconnects=0,
                              api_key=stack.admin_key))
    assert events[-1].event == "task.completed" and events[-1].data["answer"].startswith("第二个模型的回答")
    assert second.requests and all(r["model"] == "second-model" for r in second.requests)
    assert len(model.requests) == before, "the default model was not asked"


def test_a_chat_completion_naming_a_configured_model_runs_the_agent_with_it(stack: Stack, second: ScriptedModel) -> None:
    before = len(second.requests)
    reply = httpx.post(f"{stack.gateway_url}/v1/chat/completions", headers=_headers(stack), timeout=60,
                       json={"model": "second", "messages": [{"role": "user", "content": "你好"}]})
    assert reply.status_code == 200, reply.text
    assert reply.json()["choices"][0]["message"]["content"].startswith("第二个模型的回答")
    assert len(second.requests) == before + 1


def test_a_model_the_tenant_does_not_have_is_refused(stack: Stack) -> None:
    url = stack.gateway_url
    reply = httpx.post(f"{url}/v1/tasks", headers=_headers(stack), timeout=10, json={"question": "问题", "model": "gpt-9"})
    assert reply.status_code == 404 and reply.json()["error"]["code"] == "unknown_model"
    assert reply.json()["error"]["details"]["models"] == ["default", "second", "down"]
    chat = httpx.post(f"{url}/v1/chat/completions", headers=_headers(stack), timeout=10,
                      json={"model": "gpt-9", "messages": [{"role": "user", "content": "你好"}]})
    assert chat.status_code == 404 and chat.json()["error"]["code"] == "model_not_found"


def test_a_named_model_that_is_down_hands_the_answer_to_the_tenants_chain(stack: Stack, model: ScriptedModel) -> None:
    model.push(Turn(content="试用期最长六个月。"))
    created = create_task(stack.gateway_url, "劳动合同的试用期最长是多久？", api_key=stack.admin_key, model="down")
    events = list(stream_task(stack.gateway_url, created["task_id"], read_timeout_s=90, reconnects=0,
                              api_key=stack.admin_key))
    done = events[-1]
    assert done.event == "task.completed" and done.data["answer"].startswith("试用期最长六个月")
    assert done.data["model"] == "default" and done.data["fallback_reason"] is None
    moved = [e.data["data"] for e in events if e.event == "trace" and e.data["phase"] == "model_fallback"]
    assert [(m["from"], m["to"]) for m in moved] == [("down", "default")]
    failed = [e.data["data"] for e in events if e.event == "trace" and e.data["data"].get("code")]
    assert failed[0]["model"] == "down" and failed[0]["kind"] != "configuration"
    assert not [e for e in events if e.event == "answer.reset"], "nothing streamed before the fallback"
