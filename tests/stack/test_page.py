"""The chat page in a real browser (Debian's Chromium driven by Playwright) against the real stack
(tansu, Redis, retriever with a real law, sandbox, orchestrator, gateway, scripted model): streamed
cited answers, evidence cards, reset, stop, reconnect, sessions, phone width (the composer's placeholder on
one line in both languages), login.

Each scenario keeps a screenshot under ``test-output/page/`` (``CONDUIT_TEST_OUTPUT`` overrides).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from testkit.page import (
    CHROMIUM,
    VAT_LAW,
    WAIT_MS,
    ask,
    chromium,
    identity_enabled,
    kb,
    last_turn,
    make_identity,
    markdown_answer,
    open_page,
    shot,
)
from testkit.page_fixtures import fresh_script, stack  # noqa: F401 - fixtures
from testkit.scripted_model import Turn, evidence_number
from testkit.stack import restart

pytest.importorskip("playwright")
from playwright.sync_api import Browser, Locator, Page, expect  # noqa: E402

pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed (.ci/run installs it)")


@pytest.fixture(scope="module")
def identity(stack):
    return make_identity(stack)  # before the browser: its helpers run their own event loop


@pytest.fixture(scope="module")
def browser(stack, identity) -> Iterator[Browser]:
    with chromium() as b:
        yield b


SEEN_ANSWERS = """
window.__answers = [];
new MutationObserver(() => {
  for (const a of document.querySelectorAll('.answer')) {
    const text = a.textContent;
    if (text && window.__answers[window.__answers.length - 1] !== text) window.__answers.push(text);
  }
}).observe(document, {subtree: true, childList: true, characterData: true});
"""


def test_a_cited_answer_streams_its_chip_opens_the_article_and_survives_a_reload(browser, stack, model):
    model.push(Turn(tool_calls=[kb()]), markdown_answer)
    page = open_page(browser, stack)
    shot(page, "00-empty")
    ask(page, "小规模纳税人适用简易计税方法的征收率是多少？")
    turn = last_turn(page)
    # streamed: text is on screen while the task is still running
    expect(turn.locator(".answer")).to_contain_text("结论")
    assert turn.get_attribute("data-state") is None
    expect(turn.locator(".status")).to_contain_text("写答案")
    expect(turn).to_have_attribute("data-state", "completed")
    answer = turn.locator(".answer")
    expect(answer.locator("table td").first).to_have_text("征收率")
    expect(answer.locator("li").first).to_contain_text("小规模纳税人")
    expect(answer.locator("code")).to_contain_text("应纳税额")
    chip = answer.locator(".chip").first
    chip.hover()
    card = page.locator(".card")
    expect(card).to_be_visible()
    expect(card).to_contain_text(f"《{VAT_LAW}》第十一条")
    expect(card.locator(".badge")).to_have_text("原文")
    expect(card.locator("mark").first).to_be_visible()
    shot(page, "01-cited-answer-card")
    sources = turn.locator(".sources")
    expect(sources).to_contain_text(VAT_LAW)
    expect(sources).to_contain_text("第十一条")
    record = turn.locator("details.record")
    record.locator("summary").click()
    expect(record).to_contain_text("kb_search")
    expect(record).to_contain_text("小规模纳税人 简易计税方法 征收率")
    expect(record).to_contain_text("首字")
    shot(page, "02-record", full=True)

    page.reload()
    turn = last_turn(page)
    expect(turn).to_have_attribute("data-state", "completed")
    expect(turn.locator(".answer")).to_contain_text("百分之三")
    turn.locator(".answer .chip").first.click()
    expect(page.locator(".card")).to_contain_text(f"《{VAT_LAW}》第十一条")
    expect(turn.locator("details.record summary")).to_contain_text("1 次工具调用")
    expect(page.locator("#sessions .session.current")).to_contain_text("小规模纳税人")  # reopened after the reload
    shot(page, "03-after-reload")
    page.context.close()


def test_answer_reset_replaces_the_text_written_before_the_tool_call(browser, stack, model):
    model.push(Turn(content="我这就去查一下相关法条……", tool_calls=[kb()], chunks=4, chunk_delay_s=0.3), markdown_answer)
    page = open_page(browser, stack)
    page.add_init_script(SEEN_ANSWERS)
    page.reload()
    ask(page, "简易计税的征收率？")
    turn = last_turn(page)
    expect(turn).to_have_attribute("data-state", "completed")
    seen = page.evaluate("window.__answers")
    assert any("我这就去查" in s for s in seen), seen  # the pre-tool text was on screen ...
    expect(turn.locator(".answer")).not_to_contain_text("我这就去查")  # ... and the reset replaced it
    expect(turn.locator(".answer")).to_contain_text("百分之三")
    page.context.close()


def test_stop_cancels_a_running_answer(browser, stack, model):
    model.push(Turn(content="这是一段很长的回答，" * 40, chunks=40, chunk_delay_s=0.5))
    page = open_page(browser, stack)
    ask(page, "写一段很长的回答")
    turn = last_turn(page)
    expect(turn.locator(".answer")).to_contain_text("很长的回答")
    page.get_by_role("button", name="停止").click()
    expect(turn).to_have_attribute("data-state", "cancelled")
    expect(turn.locator(".notice")).to_contain_text("已停止")
    expect(page.get_by_role("button", name="发送")).to_be_visible()
    shot(page, "04-stopped")
    page.context.close()


def test_a_follow_up_stays_in_the_same_session(browser, stack, model):
    model.push(Turn(content="第一轮回答：征收率为百分之三。"), Turn(content="这是后续回答。"))
    page = open_page(browser, stack)
    page.get_by_role("button", name="新会话").click()
    ask(page, "增值税征收率是多少？")
    expect(last_turn(page)).to_have_attribute("data-state", "completed")
    ask(page, "那一般纳税人呢？")
    expect(page.locator(".turn")).to_have_count(2)
    expect(last_turn(page)).to_have_attribute("data-state", "completed")
    contents = [m.get("content") for m in model.requests[-1]["messages"]]
    assert "增值税征收率是多少？" in contents  # the model saw the earlier turn (its answer may carry a confidence mark)
    assert any(str(c).startswith("第一轮回答：征收率为百分之三") for c in contents)
    expect(page.locator("#sessions .session.current")).to_contain_text("增值税征收率是多少？")
    page.context.close()


def test_a_dropped_connection_reconnects_and_the_answer_completes_once(browser, stack, model):
    text = "".join(f"第{i}句。" for i in range(1, 21))
    model.push(Turn(content=text, chunks=20, chunk_delay_s=0.3))
    page = open_page(browser, stack)
    ask(page, "慢慢回答")
    turn = last_turn(page)
    expect(turn.locator(".answer")).to_contain_text("第2句")
    # block the stream's route, cut the open stream (the gateway restarts), then release the route
    page.route("**/v1/tasks/*/events", lambda route: route.abort())
    restart(stack, "gateway")
    expect(turn.locator(".status")).to_contain_text("正在重连")
    page.unroute("**/v1/tasks/*/events")
    expect(turn).to_have_attribute("data-state", "completed")
    assert turn.locator(".answer").inner_text().strip() == text
    page.context.close()


def test_phone_width_layout(browser, stack, model):
    model.push(Turn(tool_calls=[kb()]), markdown_answer)
    page = open_page(browser, stack, width=390, height=844, touch=True)
    expect(page.locator("#sidebar")).not_to_be_in_viewport()
    page.locator("#example").tap()  # the empty state's example question
    turn = last_turn(page)
    expect(turn).to_have_attribute("data-state", "completed")
    turn.locator(".answer .chip").first.tap()
    expect(page.locator(".card")).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    shot(page, "07-phone")
    page.keyboard.press("Escape")
    expect(page.locator(".card")).to_be_hidden()
    shot(page, "07b-phone-closed")
    page.get_by_role("button", name="会话列表").click()
    expect(page.locator("#sidebar")).to_be_in_viewport()
    shot(page, "08-phone-sidebar")
    page.context.close()


PLACEHOLDER_WRAPS = """() => {
  const box = document.getElementById('question');
  const [value, height] = [box.value, box.style.height];
  box.style.height = '0px';  // scrollHeight is then the text's own height
  box.value = 'x';
  const one = box.scrollHeight;
  box.value = box.placeholder;  // the placeholder wraps like the text in its place
  const all = box.scrollHeight;
  [box.value, box.style.height] = [value, height];
  return {placeholder: box.placeholder, wraps: all > one};
}"""


def test_the_composer_placeholder_fits_one_line_at_phone_width_in_both_languages(browser, stack):
    page = open_page(browser, stack, width=375, height=740, touch=True)
    zh = page.evaluate(PLACEHOLDER_WRAPS)
    shot(page, "07c-phone-placeholder-zh")
    page.get_by_role("button", name="会话列表").click()
    page.locator("#sidebar").get_by_role("button", name="English").click()
    page.locator("#scrim").click(position={"x": 360, "y": 400})  # beside the sidebar: it closes
    expect(page.locator("#question")).to_have_attribute("placeholder", re.compile(r"^[^\u4e00-\u9fff]+$"))
    en = page.evaluate(PLACEHOLDER_WRAPS)
    shot(page, "07d-phone-placeholder-en")
    assert re.search(r"[\u4e00-\u9fff]", zh["placeholder"]) and en["placeholder"]
    assert (zh["wraps"], en["wraps"]) == (False, False), (zh, en)
    page.context.close()


def test_a_citation_chip_opens_its_card_from_the_keyboard(browser, stack, model):
    model.push(Turn(tool_calls=[kb()]), markdown_answer)
    page = open_page(browser, stack)
    ask(page, "小规模纳税人适用简易计税方法的征收率是多少？")
    turn = last_turn(page)
    expect(turn).to_have_attribute("data-state", "completed")
    chip = turn.locator(".answer .chip").first
    chip.focus()
    expect(page.locator(".card")).to_be_visible()
    expect(chip).to_have_attribute("aria-expanded", "true")
    page.keyboard.press("Escape")
    expect(page.locator(".card")).to_be_hidden()
    expect(chip).to_be_focused()
    page.context.close()


def answered_with_the_model_down(browser, stack, model, question: str) -> tuple[Page, Locator]:
    """The page and the finished turn of ``question`` asked while every model call fails (retrieval-only)."""
    model.push(Turn(status=500), Turn(status=500), Turn(status=500))
    page = open_page(browser, stack)
    ask(page, question)
    turn = last_turn(page)
    expect(turn).to_have_attribute("data-state", "completed")
    return page, turn


def test_retrieval_only_answers_say_so_in_a_banner(browser, stack, model):
    page, turn = answered_with_the_model_down(browser, stack, model, "小规模纳税人适用简易计税方法的征收率是多少？")
    notice = turn.locator(".retrieval-banner")
    expect(notice).to_contain_text("仅检索模式")
    expect(notice).to_contain_text("model unavailable")
    expect(turn.locator(".sources")).to_contain_text("第十一条")
    expect(turn.locator(".answer")).to_contain_text("第十一条")
    expect(turn.locator(".answer")).not_to_contain_text("语言模型暂时不可用")  # said once, in the banner
    shot(page, "11-retrieval-only")
    page.context.close()


def test_a_code_request_in_retrieval_only_mode_is_told_it_needs_the_model(browser, stack, model):
    page, turn = answered_with_the_model_down(browser, stack, model, "用代码计算 1234*5678")
    expect(turn.locator(".answer")).to_have_text("语言模型暂时不可用，现在不能运行代码，请稍后再问。")  # rule O4, no passages
    expect(turn.locator(".retrieval-banner")).to_be_hidden()  # it would announce passages that do not follow
    shot(page, "11b-retrieval-only-code")
    page.context.close()


def test_the_page_is_served_from_the_package_with_no_outside_origin(stack):
    index = httpx.get(f"{stack.gateway_url}/", timeout=10)
    assert index.status_code == 200 and index.headers["content-type"].startswith("text/html")
    csp = index.headers["content-security-policy"]
    assert "default-src 'self'" in csp and "script-src 'self'" in csp
    assert not re.search(r"(src|href)=\"(https?:)?//", index.text)  # no CDN, no remote fonts
    module = httpx.get(f"{stack.gateway_url}/static/js/app.js", timeout=10)
    assert module.status_code == 200 and "javascript" in module.headers["content-type"]
    missing = httpx.get(f"{stack.gateway_url}/static/nope.js", timeout=10)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    assert "/" not in httpx.get(f"{stack.gateway_url}/openapi.json", timeout=10).json()["paths"]


def test_logout_and_a_wrong_key(browser, stack):
    page = open_page(browser, stack)
    page.get_by_role("button", name="退出", exact=True).click()
    expect(page.get_by_label("API 密钥")).to_be_visible()
    assert page.evaluate("sessionStorage.getItem('conduit.key')") is None
    if not identity_enabled(stack):
        page.context.close()
        pytest.skip("the gateway has no /v1/me yet (identity not merged): every key is accepted")
    page.get_by_label("API 密钥").fill("not-a-real-key")
    page.get_by_role("button", name="登录").click()
    expect(page.locator("#login-error")).to_contain_text("没有通过验证")
    expect(page.locator("#app")).to_be_hidden()
    shot(page, "09-wrong-key")
    # a key that stops working mid-session sends the page back to the login form with a message
    page.evaluate("sessionStorage.setItem('conduit.key', 'revoked-key')")
    page.reload()
    expect(page.locator("#login-error")).to_contain_text("登录已失效")
    page.context.close()


def test_the_login_link_signs_in_once_and_two_users_see_only_their_own_sessions(browser, stack, model, identity):
    if identity is None or not identity_enabled(stack):
        pytest.skip("the gateway has no identity layer yet (no /v1/me, no login links)")
    context = browser.new_context(locale="zh-CN")
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    page.goto(identity.login_link)
    expect(page.locator("#question")).to_be_visible()
    assert "#login=" not in page.url  # the single-use token left the address bar
    second = context.new_page()
    second.goto(identity.login_link)
    expect(second.locator("#login-error")).to_contain_text("登录链接无效")
    context.close()

    model.push(Turn(content="爱丽丝的回答。"))
    alice = open_page(browser, stack, key=identity.alice)
    ask(alice, "爱丽丝的问题")
    expect(last_turn(alice)).to_have_attribute("data-state", "completed")
    expect(alice.locator("#sessions")).to_contain_text("爱丽丝的问题")
    task_id = last_turn(alice).get_attribute("data-task-id")
    bob = open_page(browser, stack, key=identity.bob)
    expect(bob.locator("#sessions")).not_to_contain_text("爱丽丝的问题")
    expect(bob.locator("#sessions .sessions-empty")).to_be_visible()
    # bob cannot read alice's task through the API the page uses either
    status = bob.evaluate("""async (id) => (await fetch(`/v1/tasks/${id}`, {headers: {Authorization: `Bearer ${sessionStorage.getItem('conduit.key')}`}})).status""", task_id)
    assert status == 404
    shot(bob, "14-other-user")
    alice.context.close()
    bob.context.close()


def test_an_error_is_a_readable_sentence_and_the_question_is_kept(browser, stack):
    page = open_page(browser, stack)
    too_long = "税" * (stack.settings.gateway.max_question_chars + 1)
    ask(page, too_long)
    expect(page.locator("#banner")).to_contain_text("问题太长了")
    expect(page.locator("#banner")).not_to_contain_text("{")
    assert page.locator("#question").input_value() == too_long
    expect(page.locator(".turn")).to_have_count(0)
    page.context.close()


def test_a_planned_and_reviewed_answer_shows_its_checklist_and_the_check(browser, stack, model):
    """Rules A25 and A22 on the page: the plan as a checklist (✓ per step done) and a note that the answer
    was checked against its sources (an orchestrator with both turned on, then back)."""
    restart(stack, "orchestrator", CONDUIT_PLAN_MODE="always", CONDUIT_REVIEW_ENABLED="true")
    try:
        def answer(body: dict) -> Turn:
            n = evidence_number(body["messages"], "增值税法", "第十一条") or 1
            return Turn(content=f"小规模纳税人适用简易计税方法的征收率为百分之三[{n}]。")

        plan = {"steps": [{"goal": "查找增值税法中的征收率", "tool": "kb_search"}, {"goal": "据原文作答", "tool": "none"}]}
        model.push(Turn(content=json.dumps(plan, ensure_ascii=False)), Turn(tool_calls=[kb()]), answer,
                   Turn(content=json.dumps({"verdicts": ["supported"]})))
        page = open_page(browser, stack)
        ask(page, "小规模纳税人适用简易计税方法的征收率是多少？")
        turn = last_turn(page)
        expect(turn).to_have_attribute("data-state", "completed")
        steps = turn.locator(".plan .plan-step")
        expect(steps).to_have_count(2)
        expect(steps.first).to_have_attribute("data-status", "done")
        expect(steps.first).to_contain_text("✓")
        expect(turn.locator(".notice")).to_contain_text("已对照来源核对")
        shot(page, "14-plan-and-review")
        page.context.close()
    finally:
        restart(stack, "orchestrator", drop=("CONDUIT_PLAN_MODE", "CONDUIT_REVIEW_ENABLED"))
