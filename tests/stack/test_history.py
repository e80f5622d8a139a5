"""History search over the real stack (rules M11, M12, issue 30): retriever (memory shard), orchestrator and
gateway processes, tansu, Redis and the scripted model.

Alice and Bob, users of one tenant, ask the same question and get different answers (their episodes,
rule M1). In a new session each asks what they were told before: ``history_search`` is offered, the model
calls it with the same query for both, and each gets only their own earlier answer as cited evidence;
Carol, who has no history, is not offered the tool.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from ops.client import SseEvent, stream_task
from ops.stack import Stack
from testkit.scripted_model import ScriptedModel, Turn
from testkit.stack import auth, model_env, new_key, start_stack
from testkit.waits import wait_until

TENANT = "hist-t1"
FIRST = {"alice": "我们公司差旅住宿标准是每晚多少钱？", "bob": "我们单位差旅住宿标准是每晚多少钱？"}
AGAIN = "我上次问的差旅住宿标准是多少？"
ANSWERS = {"公司": "每晚五百元（甲公司规定）。", "单位": "每晚三百元（乙单位规定）。"}


def model_turn(body: dict) -> Turn:
    """``AGAIN`` is answered by one ``history_search`` (the user's words as the query), then by quoting the
    tool's text with ``[1]``; Alice's and Bob's first questions get different answers."""
    users = [m for m in body["messages"] if m["role"] == "user"]
    question = users[-1]["content"] if users else "?"
    tool = [m for m in body["messages"] if m["role"] == "tool"]
    if question == AGAIN and not tool:
        return Turn(tool_calls=[{"name": "history_search", "arguments": {"query": "上次问的差旅住宿标准", "reason": "查以前的回答"}}])
    if question == AGAIN:
        return Turn(content=f"您以前得到的答复[1]：{tool[-1]['content'][-200:]}")
    return Turn(content=next((a for word, a in ANSWERS.items() if word in question), "好的。"))


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedModel]:
    m = ScriptedModel(default=model_turn).start()  # type: ignore[arg-type]
    yield m
    m.stop()


@pytest.fixture(scope="module")
def stack(infra_stack, tmp_path_factory, model) -> Iterator[Stack]:
    st = start_stack(infra_stack.bootstrap, infra_stack.redis_url, tmp_path_factory.mktemp("history"),
                     ("retriever", "orchestrator", "gateway"),
                     model_env(model.base_url) | {"CONDUIT_MEMORY_OFF_TENANTS": "[]"})
    yield st
    st.stop()


def ask(stack: Stack, key: str, question: str) -> tuple[str, list[SseEvent]]:
    """Ask in a new session and follow the task to its end: ``(task_id, events)``."""
    r = httpx.post(f"{stack.gateway_url}/v1/tasks", json={"question": question}, headers=auth(key), timeout=30)
    assert r.status_code == 202, r.text
    task_id = r.json()["task_id"]
    return task_id, list(stream_task(stack.gateway_url, task_id, read_timeout_s=90, api_key=key))


def episodes(stack: Stack, key: str) -> list[dict]:
    listed = httpx.get(f"{stack.gateway_url}/v1/memory", headers=auth(key), timeout=10).json()["items"]
    return [i for i in listed if i["type"] == "episode"]


def offered_for(model: ScriptedModel) -> list[list[str]]:
    """Tool names offered in each first model call whose last user message is ``AGAIN``, in order."""
    out = []
    for body in list(model.requests):
        users = [m for m in body["messages"] if m["role"] == "user"]
        if users and users[-1]["content"] == AGAIN and not any(m["role"] == "tool" for m in body["messages"]):
            out.append([t["function"]["name"] for t in body.get("tools") or []])
    return out


def history_evidence(events: list[SseEvent]) -> list[str]:
    return [item["text"] for e in events if e.event == "evidence" for item in e.data["items"]
            if item.get("kind") == "history"]


def test_each_user_searches_only_their_own_history(stack, infra_stack, model):
    r = infra_stack.redis_url
    alice, bob, carol = (new_key(r, TENANT, u, "member") for u in ("alice", "bob", "carol"))
    for key, who in ((alice, "alice"), (bob, "bob")):
        _, events = ask(stack, key, FIRST[who])
        assert events[-1].event == "task.completed", events[-1]
        assert wait_until(lambda k=key: episodes(stack, k), 30), f"no episode for {who}"

    before = len(offered_for(model))
    _, events = ask(stack, carol, AGAIN)  # no history: not offered
    assert events[-1].event == "task.completed"
    assert "history_search" not in offered_for(model)[before]

    for key, own, other in ((alice, "五百元", "三百元"), (bob, "三百元", "五百元")):
        before = len(offered_for(model))
        task_id, events = ask(stack, key, AGAIN)
        done = events[-1]
        assert done.event == "task.completed", done
        assert "history_search" in offered_for(model)[before]
        found = history_evidence(events)
        assert found and all(own in t for t in found) and not any(other in t for t in found), found
        assert own in done.data["answer"] and other not in done.data["answer"]
        assert [c["index"] for c in done.data["citations"]] == [1]
        assert done.data["cache"] != "hit"
