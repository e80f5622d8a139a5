"""Long-term memory and the semantic cache over the real stack (issue 20): retriever (memory shard),
orchestrator and gateway processes, tansu, Redis and the scripted model.

- a fact stated in one session reaches the model's request in a new session with its source,
  never for another user, and not after ``DELETE /v1/memory``; a tenant with memory off keeps nothing;
- the same first question in a new session is answered from the cache (no model call, no tool call,
  streamed, ``cache: hit`` with its measured latency); ``Cache-Control: no-cache`` bypasses it; another
  tenant never hits it; re-ingesting the cited document invalidates it;
- a new user of a tenant with nothing cached gets no recall request (rule M8), a user with items does.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from ops.client import SseEvent, stream_task
from ops.stack import Stack
from testkit.scripted_model import ScriptedModel, Turn
from testkit.stack import auth, new_key, start_stack
from testkit.waits import wait_until

T1, T2, T3, OFF = "mem-t1", "mem-t2", "mem-t3", "mem-off"
DOC_ID = "nebula-taxi-policy"
DOC_TEXT = "# Nebula 出租车报销规定\n\nNebula 公司员工市内打车，每次报销上限为八十元，超出部分需说明事由。\n"
CACHED_Q = "Nebula 员工市内打车每次能报销多少钱？"


def model_turn(body: dict) -> Turn:
    """A question naming Nebula is searched first, then answered citing [1]; others get an echo."""
    users = [m for m in body["messages"] if m["role"] == "user"]
    question = users[-1]["content"] if users else "?"
    if "Nebula" in question and not any(m["role"] == "tool" for m in body["messages"]):
        return Turn(tool_calls=[{"name": "kb_search", "arguments": {"query": question, "reason": "查制度"}}])
    if "Nebula" in question:
        return Turn(content="每次上限为八十元[1]。")
    return Turn(content=f"answer to {question}")


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedModel]:
    m = ScriptedModel(default=model_turn).start()  # type: ignore[arg-type]
    yield m
    m.stop()


@pytest.fixture(scope="module")
def stack(infra_stack, tmp_path_factory, model) -> Iterator[Stack]:
    st = start_stack(infra_stack.bootstrap, infra_stack.redis_url, tmp_path_factory.mktemp("memory"),
                     ("retriever", "orchestrator", "gateway"),
                     {"OPENAI_BASE_URL": model.base_url, "OPENAI_API_KEY": "test", "CONDUIT_MODEL": "scripted",
                      "CONDUIT_MEMORY_OFF_TENANTS": f'["{OFF}"]', "CONDUIT_TOOL_TIMEOUT_S": "20",
                      "CONDUIT_HISTORY_TURNS": "2", "CONDUIT_CACHE_ENABLED": "true"})
    yield st
    st.stop()


@pytest.fixture(scope="module")
def keys(stack, infra_stack) -> dict[str, str]:
    r = infra_stack.redis_url
    return {"alice": new_key(r, T1, "alice", "member"), "bob": new_key(r, T1, "bob", "member"),
            "carol": new_key(r, T1, "carol", "member"), "admin": new_key(r, T1, "boss", "admin"),
            "mallory": new_key(r, T2, "mallory", "member"), "dave": new_key(r, T1, "dave", "member"), "olga": new_key(r, OFF, "olga", "member"),
            "erin": new_key(r, T3, "erin", "member"), "frank": new_key(r, T1, "frank", "member")}


def ask(stack: Stack, key: str, question: str, session_id: str | None = None,
        headers: dict[str, str] | None = None) -> tuple[str, list[SseEvent]]:
    """Ask and follow the task to its end: ``(task_id, events)``."""
    body = {"question": question} | ({"session_id": session_id} if session_id else {})
    r = httpx.post(f"{stack.gateway_url}/v1/tasks", json=body, headers=auth(key) | (headers or {}), timeout=30)
    assert r.status_code == 202, r.text
    task_id = r.json()["task_id"]
    return task_id, list(stream_task(stack.gateway_url, task_id, read_timeout_s=90, api_key=key))


def sent_for(model: ScriptedModel, question: str) -> list[str]:
    """Every request the model got whose last user message is ``question``, as text."""
    out = []
    for body in list(model.requests):
        users = [m for m in body["messages"] if m["role"] == "user"]
        if users and users[-1]["content"] == question:
            out.append(str(body))
    return out


def memory_of(stack: Stack, key: str) -> dict:
    return httpx.get(f"{stack.gateway_url}/v1/memory", headers=auth(key), timeout=10).json()


def test_a_fact_is_recalled_in_a_new_session_for_its_user_only_until_deleted(stack, keys, model):
    first, events = ask(stack, keys["alice"], "我叫张三，在杭州做会计")
    assert events[-1].event == "task.completed"
    assert wait_until(lambda: any(i["text"] == "我叫张三" for i in memory_of(stack, keys["alice"])["items"]), 30)
    item = next(i for i in memory_of(stack, keys["alice"])["items"] if i["text"] == "我叫张三")
    assert (item["type"], item["topic"], item["task_id"], item["confirmed"]) == ("fact", "name", first, True)

    _, events = ask(stack, keys["alice"], "我叫什么？")  # a new session
    sent = " ".join(sent_for(model, "我叫什么？"))
    assert "我叫张三" in sent and first in sent and "untrusted_content" in sent, sent[:2000]
    done = events[-1].data
    assert any(m["text"] == "我叫张三" for m in done["memory"]), done

    _, events = ask(stack, keys["bob"], "请问我叫什么？")  # same tenant, another user
    sent = " ".join(sent_for(model, "请问我叫什么？"))
    assert sent and "张三" not in sent and events[-1].data["memory"] == []

    gone = httpx.delete(f"{stack.gateway_url}/v1/memory", headers=auth(keys["alice"]), timeout=10)
    assert gone.status_code == 200 and gone.json()["deleted"] >= 2, gone.text
    assert memory_of(stack, keys["alice"])["items"] == []
    _, events = ask(stack, keys["alice"], "你知道我叫什么吗？")
    sent = " ".join(sent_for(model, "你知道我叫什么吗？"))
    assert sent and "张三" not in sent and events[-1].data["memory"] == []


def test_a_correction_replaces_the_fact_and_one_item_can_be_forgotten(stack, keys):
    ask(stack, keys["bob"], "我在杭州做会计")
    assert wait_until(lambda: any(i["topic"] == "work" for i in memory_of(stack, keys["bob"])["items"]), 30)
    ask(stack, keys["bob"], "不是会计，其实我在杭州做审计")
    assert wait_until(lambda: any(i["text"] == "其实我在杭州做审计" for i in memory_of(stack, keys["bob"])["items"]), 30)
    work = [i for i in memory_of(stack, keys["bob"])["items"] if i["topic"] == "work"]
    assert len(work) == 1 and work[0]["source"] == "user_correction", work
    assert work[0]["history"][0]["text"] == "我在杭州做会计" and "corrected" in work[0]["history"][0]["reason"]
    url = f"{stack.gateway_url}/v1/memory/{work[0]['id']}"
    assert httpx.delete(url, headers=auth(keys["bob"]), timeout=10).status_code == 200
    assert httpx.delete(url, headers=auth(keys["bob"]), timeout=10).status_code == 404
    assert not any(i["topic"] == "work" for i in memory_of(stack, keys["bob"])["items"])


def test_forgetting_a_fact_forgets_what_was_derived_from_it(stack, keys, model, infra_stack):
    """Rule M9: the episode that repeats a deleted fact goes with it, as do cache entries built on it;
    nothing about it is recalled in a new session, and the export no longer holds it."""
    import redis as redis_sync  # noqa: PLC0415

    first, _ = ask(stack, keys["frank"], "我叫李四。请问个人所得税的起征点是多少？")
    assert wait_until(lambda: {"fact", "episode"} <= {i["type"] for i in memory_of(stack, keys["frank"])["items"]
                                                      if "李四" in i["text"]}, 30), memory_of(stack, keys["frank"])
    exported = httpx.get(f"{stack.gateway_url}/v1/me/export", headers=auth(keys["frank"]), timeout=10).json()
    assert any("李四" in i["text"] for i in exported["items"]) and exported["sessions"][0]["turns"]
    fact = next(i for i in memory_of(stack, keys["frank"])["items"] if i["type"] == "fact" and "李四" in i["text"])
    gone = httpx.delete(f"{stack.gateway_url}/v1/memory/{fact['id']}", headers=auth(keys["frank"]), timeout=10)
    assert gone.status_code == 200 and gone.json()["deleted"] >= 2, gone.text  # the fact and its episode
    assert not any("李四" in i["text"] for i in memory_of(stack, keys["frank"])["items"])
    exported = httpx.get(f"{stack.gateway_url}/v1/me/export", headers=auth(keys["frank"]), timeout=10).json()
    assert not any("李四" in i["text"] for i in exported["items"])
    r = redis_sync.Redis.from_url(infra_stack.redis_url)
    try:
        entries = [r.get(k) for k in r.scan_iter(match=f"conduit:cache:{T1}:*") if b":bydoc:" not in k]
        assert not any(e and "李四".encode() in e for e in entries)
    finally:
        r.close()
    _, events = ask(stack, keys["frank"], "你还记得我的名字吗？")
    sent = " ".join(sent_for(model, "你还记得我的名字吗？"))
    assert sent and "李四" not in sent and events[-1].data["memory"] == []


def lookup_ms(stack: Stack, key: str, task_id: str) -> object:
    """The ``memory`` trace entry's ``lookup_ms`` (None: no recall request was sent)."""
    trace = httpx.get(f"{stack.gateway_url}/v1/tasks/{task_id}/trace", headers=auth(key), timeout=10).json()["trace"]
    entry = next(t for t in trace if t.get("phase") == "memory")
    assert entry["cache"] == "miss", entry
    return entry["lookup_ms"]


def test_the_recall_is_asked_only_when_something_can_come_back(stack, keys):
    first, events = ask(stack, keys["erin"], "我叫赵六")  # a new user, a tenant with no cache entry
    assert events[-1].event == "task.completed"
    assert lookup_ms(stack, keys["erin"], first) is None
    assert wait_until(lambda: memory_of(stack, keys["erin"])["items"], 30)
    second, events = ask(stack, keys["erin"], "我叫什么？")  # now she has items
    assert lookup_ms(stack, keys["erin"], second) is not None
    assert any(m["text"] == "我叫赵六" for m in events[-1].data["memory"]), events[-1].data


def test_a_tenant_with_memory_off_keeps_nothing(stack, keys):
    _, events = ask(stack, keys["olga"], "我叫王五")
    assert events[-1].event == "task.completed"
    listed = memory_of(stack, keys["olga"])
    assert listed == {"items": [], "enabled": False}


def test_the_same_first_question_is_answered_from_the_cache_until_the_document_changes(stack, keys, model):
    admin = httpx.Client(base_url=stack.gateway_url, headers=auth(keys["admin"]), timeout=30)
    doc = {"document_id": DOC_ID, "title": "Nebula 出租车报销规定", "text": DOC_TEXT}
    assert admin.post("/v1/documents", json=doc).status_code == 202
    assert wait_until(lambda: admin.get(f"/v1/documents/{DOC_ID}").json()["status"] == "ingested", 90)

    _, full = ask(stack, keys["carol"], CACHED_Q)
    assert full[-1].data["cache"] == "miss" and full[-1].data["citations"], full[-1].data
    calls = len(sent_for(model, CACHED_Q))
    assert calls == 2  # the search call and the answer

    def hit() -> list[SseEvent]:
        return ask(stack, keys["carol"], CACHED_Q)[1]

    # rule M15: the entry is embedded in a batch after the running recalls, so a question right after may miss
    assert wait_until(lambda: hit()[-1].data["cache"] == "hit", 30), "the second first turn never hit the cache"
    calls = len(sent_for(model, CACHED_Q))  # the misses while it was being indexed called the model
    events = hit()
    done = events[-1].data
    types = [e.event for e in events]
    assert done["cache"] == "hit" and done["answer"] == full[-1].data["answer"], done
    assert done["citations"] == full[-1].data["citations"] and "evidence" in types and "answer.delta" in types
    assert "tool.requested" not in types and "step.started" not in types, types
    assert len(sent_for(model, CACHED_Q)) == calls, "a cache hit called the model"
    assert 0 < done["latency_ms"] < 10_000 and done["latency_ms"] != 10.0

    _, bypass = ask(stack, keys["carol"], CACHED_Q, headers={"Cache-Control": "no-cache"})
    assert bypass[-1].data["cache"] == "bypass" and len(sent_for(model, CACHED_Q)) > calls

    _, other = ask(stack, keys["mallory"], CACHED_Q)  # another tenant
    assert other[-1].data["cache"] == "miss"

    doc["text"] = DOC_TEXT.replace("八十元", "一百元")  # a new version of the cited document
    assert admin.post("/v1/documents", json=doc).status_code == 202
    assert wait_until(lambda: admin.get(f"/v1/documents/{DOC_ID}").json()["status"] == "ingested"
                      and ask(stack, keys["carol"], CACHED_Q)[1][-1].data["cache"] == "miss", 60)
    admin.close()


def test_a_long_session_keeps_turn_ones_values_exact_in_its_state(stack, keys, model):
    first = "发票 INV-7781 的金额是 118.5 元，请记下。"
    session = httpx.post(f"{stack.gateway_url}/v1/tasks", json={"question": first}, headers=auth(keys["dave"]),
                         timeout=30).json()
    list(stream_task(stack.gateway_url, session["task_id"], read_timeout_s=90, api_key=keys["dave"]))
    for n in range(2, 5):
        ask(stack, keys["dave"], f"第{n}轮：报销流程还有什么要注意的？", session_id=session["session_id"])
    sent = " ".join(sent_for(model, "第4轮：报销流程还有什么要注意的？"))
    assert "会话状态" in sent and "INV-7781" in sent and "118.5 元" in sent, sent[:2000]
    body = next(b for b in model.requests if b["messages"][-1]["content"] == "第4轮：报销流程还有什么要注意的？")
    assert first not in [m["content"] for m in body["messages"] if m["role"] == "user"], "turn 1 is folded"
    view = httpx.get(f"{stack.gateway_url}/v1/sessions/{session['session_id']}", headers=auth(keys["dave"]),
                     timeout=10).json()
    ctx = view["context"]
    assert ctx["folded"] >= 1 and ctx["seen"] == 3, ctx
    assert {"kind": "amount", "value": "118.5 元", "turn": 1, "side": "user"} in ctx["values"]
    # rule M7: the model rewrites the folded turns into the summary, off the tasks' path; the next turn reads it
    summary_of = lambda: httpx.get(f"{stack.gateway_url}/v1/sessions/{session['session_id']}",  # noqa: E731
                                   headers=auth(keys["dave"]), timeout=10).json()["context"]
    assert wait_until(lambda: summary_of()["summary_by"] == "model", 30), summary_of()
    ctx = summary_of()
    assert ctx["summarised"] == ctx["folded"] and ctx["summary"].startswith("【模型摘要】") and "INV-7781" in ctx["summary"]
    assert any(first in str(b) for b in model.summary_requests), "the summary call got turn 1's full text"
    ask(stack, keys["dave"], "第5轮：还有吗？", session_id=session["session_id"])
    assert "【模型摘要】" in " ".join(sent_for(model, "第5轮：还有吗？"))


def test_the_page_marks_recalled_facts_and_cached_answers(stack, keys):
    """Chromium (when installed): "来自记忆" lists the recalled fact, "缓存" marks a replayed answer."""
    from pathlib import Path

    from testkit import page as pagekit
    if not Path(pagekit.CHROMIUM).exists():
        pytest.skip("Debian's chromium is not installed (.ci/run installs it)")
    pytest.importorskip("playwright")
    from playwright.sync_api import expect

    erin = new_key(stack.settings.store.url(), T1, "erin", "member")
    ask(stack, erin, "我叫赵六")
    assert wait_until(lambda: any(i["text"] == "我叫赵六" for i in memory_of(stack, erin)["items"]), 30)
    question = "Nebula 员工打车每次的报销上限？"
    ask(stack, keys["admin"], question)  # cached for the tenant (the admin has no memory of it)
    assert wait_until(lambda: ask(stack, keys["carol"], question)[1][-1].data["cache"] == "hit", 30)
    with pagekit.chromium() as browser:
        page = pagekit.open_page(browser, stack, key=erin)
        pagekit.ask(page, "我叫什么名字？")
        turn = pagekit.last_turn(page)
        expect(turn).to_have_attribute("data-state", "completed")
        expect(turn.locator(".memory-note")).to_contain_text("来自记忆")
        expect(turn.locator(".memory-note")).to_contain_text("我叫赵六")
        pagekit.shot(page, "memory-01-from-memory")
        page.locator("#new-session").click()
        pagekit.ask(page, question)
        turn = pagekit.last_turn(page)
        expect(turn).to_have_attribute("data-state", "completed")
        expect(turn.locator(".cached-note")).to_contain_text("缓存")
        expect(turn.locator(".answer")).to_contain_text("八十元")
        pagekit.shot(page, "memory-02-cached")
        page.context.close()
