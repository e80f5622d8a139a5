"""Tools people already use, against the real stack: the ``openai`` Python SDK pointed at the
gateway (``/v1/chat/completions``, ``/v1/models``, streaming and not) and the example
CloudEvents subscriber (``examples/subscriber.py``) reading the public agent-event topic.

Real retriever, orchestrator and gateway processes over tansu and Redis; the scripted
OpenAI-compatible model plays the agent's model.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from ops.stack import Stack
from testkit.scripted_model import Turn, evidence_number
from testkit.stack import auth, new_key, start_stack

ROOT = Path(__file__).resolve().parents[2]
VAT_LAW = "中华人民共和国增值税法"
QUESTION = "小规模纳税人适用简易计税方法的征收率是多少？"


def cite(body: dict) -> Turn:
    n = evidence_number(body["messages"], "增值税法", "第十一条")
    if n is None:
        return Turn(content="没有找到。")
    return Turn(content=f"征收率为百分之三[{n}]。", chunks=6)


KB_CALL = Turn(tool_calls=[{"name": "kb_search", "arguments": {"query": "小规模纳税人 简易计税方法 征收率",
                                                                "reason": "查找征收率"}}])


@pytest.fixture(scope="module")
def stack(infra_stack, tmp_path_factory, model) -> Iterator[Stack]:
    st = start_stack(infra_stack.bootstrap, infra_stack.redis_url, tmp_path_factory.mktemp("outside"),
                     ("retriever", "orchestrator", "gateway"),
                     {"OPENAI_BASE_URL": model.base_url, "OPENAI_API_KEY": "test", "CONDUIT_MODEL": "scripted",
                      "CONDUIT_TOOL_TIMEOUT_S": "20"}, laws=[VAT_LAW])
    yield st
    st.stop()


@pytest.fixture(scope="module")
def client(stack: Stack) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{stack.gateway_url}/v1", api_key=stack.admin_key, timeout=120, max_retries=0)


def _footnoted(content: str) -> int:
    """The footnote number of 增值税法 第十一条 in ``content`` (its reference and its definition)."""
    hit = re.search(r"\[\^(\d+)\]: 《中华人民共和国增值税法》 第十一条", content)
    assert hit, content
    n = int(hit.group(1))
    assert f"百分之三[^{n}]" in content, content
    return n


def test_models_lists_the_agent_modes(client: openai.OpenAI) -> None:
    ids = [m.id for m in client.models.list()]
    assert ids[0] == "conduit" and "conduit-kb" in ids


def test_sdk_gets_a_cited_answer(client: openai.OpenAI, model) -> None:
    model.push(KB_CALL, cite)
    raw = client.chat.completions.with_raw_response.create(
        model="conduit-kb", messages=[{"role": "system", "content": "ignored"}, {"role": "user", "content": QUESTION}])
    done = raw.parse()
    content = done.choices[0].message.content or ""
    n = _footnoted(content)
    ext = done.model_extra["conduit"]
    assert ext["status"] == "completed" and ext["task_id"] == raw.headers["x-task-id"]
    assert any(c["index"] == n and c["locator"] == "第十一条" for c in ext["citations"])
    assert done.choices[0].finish_reason == "stop" and done.usage and done.usage.total_tokens > 0
    assert model.requests[-2]["tools"] and [t["function"]["name"] for t in model.requests[-2]["tools"]] == [
        "kb_search", "kb_follow"]  # rule A30: kb_follow goes with kb_search

    # the follow-up (history as the SDK user keeps it) continues the same session
    model.push(Turn(content="一般纳税人适用一般计税方法。"))
    again = client.chat.completions.with_raw_response.create(model="conduit", messages=[
        {"role": "user", "content": QUESTION}, {"role": "assistant", "content": content},
        {"role": "user", "content": "那一般纳税人呢？"}])
    assert again.headers["x-conduit-session"] == raw.headers["x-conduit-session"]
    assert QUESTION in [m.get("content") for m in model.requests[-1]["messages"]]


def test_sdk_streams_a_cited_answer(client: openai.OpenAI, model) -> None:
    model.push(KB_CALL, cite)
    stream = client.chat.completions.create(model="conduit", stream=True, stream_options={"include_usage": True},
                                            messages=[{"role": "user", "content": QUESTION}])
    chunks = list(stream)
    deltas = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(deltas) >= 3, deltas  # the answer arrives in pieces, then its footnotes
    _footnoted("".join(deltas))
    finish = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert [c.choices[0].finish_reason for c in finish] == ["stop"]
    assert finish[0].model_extra["conduit"]["citations"]
    assert chunks[-1].choices == [] and chunks[-1].usage and chunks[-1].usage.total_tokens > 0
    assert len({c.id for c in chunks}) == 1


def test_sdk_errors_have_openai_shape(client: openai.OpenAI, stack: Stack, infra_stack) -> None:
    with pytest.raises(openai.NotFoundError) as err:
        client.chat.completions.create(model="gpt-nothing", messages=[{"role": "user", "content": "hi"}])
    assert err.value.code == "model_not_found" and err.value.type == "not_found_error"
    with pytest.raises(openai.UnprocessableEntityError) as bad:
        client.chat.completions.create(model="conduit", messages=[{"role": "system", "content": "no question"}])
    assert bad.value.code == "invalid_request"
    stranger = openai.OpenAI(base_url=f"{stack.gateway_url}/v1", api_key="cdk_nope_nope", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as denied:
        stranger.models.list()
    assert denied.value.code == "unauthenticated" and denied.value.type == "authentication_error"
    other = new_key(infra_stack.redis_url, tenant="elsewhere", user="eve", role="member")
    first = httpx.post(f"{stack.gateway_url}/v1/chat/completions", headers=auth(stack.admin_key), timeout=120,
                       json={"model": "conduit", "messages": [{"role": "user", "content": "你好"}]})
    assert first.status_code == 200, first.text
    theirs = httpx.post(f"{stack.gateway_url}/v1/chat/completions", timeout=30,
                        headers={**auth(other), "X-Conduit-Session": first.headers["x-conduit-session"]},
                        json={"model": "conduit", "messages": [{"role": "user", "content": "你好"}]})
    assert theirs.status_code == 404 and theirs.json()["error"]["code"] == "session_not_found"


def test_example_subscriber_prints_a_tasks_cloudevents(client: openai.OpenAI, stack: Stack, model) -> None:
    model.push(KB_CALL, cite)
    raw = client.chat.completions.with_raw_response.create(model="conduit", messages=[{"role": "user", "content": QUESTION}])
    task_id = raw.headers["x-task-id"]
    run = subprocess.run([sys.executable, str(ROOT / "examples" / "subscriber.py"), "--bootstrap",
                          stack.settings.bus.bootstrap_servers(), "--from-beginning", "--task", task_id, "--until-terminal",
                          "--timeout", "90", "--fetch-max-wait-ms", "10"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    lines = [json.loads(line) for line in run.stdout.splitlines()]
    assert [x["kind"] for x in lines] == ["task.started", "tool.requested", "tool.completed", "task.completed"], lines
    for x in lines:
        assert x["type"] == f"conduit.agent.{x['kind']}" and x["subject"] == task_id and x["source"] == "/conduit/orchestrator"
        assert x["id"] == x["data"]["event_id"] and x["tenant"] == "default" and x["time"]
