"""The chat page in a real browser (Debian's Chromium driven by Playwright) against the real stack:
tansu broker, Redis, retriever with a real law, sandbox, orchestrator, gateway, scripted model.

Each scenario keeps a screenshot under ``test-output/page/`` (``CONDUIT_TEST_OUTPUT`` overrides).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from conduit.ops.stack import Stack
from conduit.testing.scripted_model import Turn
from conduit.testing.stack import start_stack

pytest.importorskip("playwright")
from playwright.sync_api import Browser, Page, expect, sync_playwright  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
VAT_LAW = "中华人民共和国增值税法"
OUT = Path(os.environ.get("CONDUIT_TEST_OUTPUT", Path(__file__).resolve().parents[2] / "test-output")) / "page"
WAIT_MS = 60_000

pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed (.ci/run installs it)")


@pytest.fixture(scope="module")
def stack(infra_stack, tmp_path_factory, model) -> Iterator[Stack]:
    st = start_stack(infra_stack.bootstrap, infra_stack.redis_url, tmp_path_factory.mktemp("page-data"),
                     ("retriever", "sandbox", "orchestrator", "gateway"),
                     {"OPENAI_BASE_URL": model.base_url, "OPENAI_API_KEY": "test", "CONDUIT_MODEL": "scripted",
                      "CONDUIT_TOOL_TIMEOUT_S": "20", "CONDUIT_APPROVAL_TTL_S": "120"},
                     laws=[VAT_LAW])
    yield st
    st.stop()


@pytest.fixture(autouse=True)
def fresh_script(model):
    model.script.clear()
    model.default = Turn(content="好的。")
    yield


@pytest.fixture(scope="module")
def browser(stack) -> Iterator[Browser]:
    """Chromium for the module; starts after the stack (Playwright's sync API keeps an event loop
    running in this thread, so nothing may call ``asyncio.run`` while it is open)."""
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


def admin_key(stack: Stack) -> str:
    """The embedded stack's admin key when it wrote one, else any string (no identity layer yet)."""
    path = Path(stack.data_dir) / "admin.key"
    return path.read_text().strip() if path.exists() else "page-test-key"


def identity_enabled(stack: Stack) -> bool:
    """True when the gateway checks keys (``GET /v1/me`` exists)."""
    return httpx.get(f"{stack.gateway_url}/v1/me", timeout=10).status_code != 404


def open_page(browser: Browser, stack: Stack, width: int = 1280, height: int = 900) -> Page:
    context = browser.new_context(viewport={"width": width, "height": height}, locale="zh-CN")
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    page.goto(stack.gateway_url + "/")
    page.get_by_label("API 密钥").fill(admin_key(stack))
    page.get_by_role("button", name="登录").click()
    expect(page.locator("#question")).to_be_visible()
    return page


def shot(page: Page, name: str, full: bool = False) -> Path:
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{name}.png"
    page.screenshot(path=str(path), full_page=full)
    return path


def ask(page: Page, question: str) -> None:
    box = page.locator("#question")
    box.fill(question)
    box.press("Enter")


def last_turn(page: Page):
    return page.locator(".turn").last


def evidence_number(body: dict, title_part: str, locator: str) -> int | None:
    for m in body["messages"]:
        if m.get("role") == "tool":
            hit = re.search(rf"\[(\d+)\] 《[^》]*{title_part}[^》]*》 ?{locator}", m.get("content") or "")
            if hit:
                return int(hit.group(1))
    return None


def kb(query: str = "小规模纳税人 简易计税方法 征收率") -> dict:
    return {"name": "kb_search", "arguments": {"query": query, "reason": "查找增值税法中简易计税的征收率"}}


def code(src: str) -> dict:
    return {"name": "code_exec", "arguments": {"code": src, "reason": "精确计算"}}


def markdown_answer(body: dict) -> Turn:
    """A Markdown answer (list, table, code) citing the pool number of 增值税法 第十一条."""
    n = evidence_number(body, "增值税法", "第十一条")
    assert n is not None, "增值税法 第十一条 was not retrieved"
    text = (f"**结论**：适用简易计税方法计算缴纳增值税的，征收率为百分之三[{n}]。\n\n"
            "- 适用对象：小规模纳税人\n- 计税方法：简易计税\n\n"
            "| 项目 | 规定 |\n|---|---|\n| 征收率 | 3% |\n| 依据 | 增值税法第十一条 |\n\n"
            "`应纳税额 = 销售额 × 征收率`")
    return Turn(content=text, chunks=12, chunk_delay_s=0.15)


# ------------------------------------------------------------------------------------------ scenarios
def test_a_cited_answer_streams_its_chip_opens_the_article_and_survives_a_reload(browser, stack, model):
    model.push(Turn(tool_calls=[kb()]), markdown_answer)
    page = open_page(browser, stack)
    shot(page, "00-empty")
    ask(page, "小规模纳税人适用简易计税方法的征收率是多少？")
    turn = last_turn(page)
    # streamed: text is on screen while the task is still running
    expect(turn.locator(".answer")).to_contain_text("结论", timeout=WAIT_MS)
    assert turn.get_attribute("data-state") is None
    expect(turn.locator(".status")).to_contain_text("写答案")
    expect(turn).to_have_attribute("data-state", "completed", timeout=WAIT_MS)
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
    expect(turn).to_have_attribute("data-state", "completed", timeout=WAIT_MS)
    expect(turn.locator(".answer")).to_contain_text("百分之三")
    turn.locator(".answer .chip").first.click()
    expect(page.locator(".card")).to_contain_text(f"《{VAT_LAW}》第十一条")
    expect(turn.locator("details.record summary")).to_contain_text("1 次工具调用")
    expect(page.locator("#sessions .session")).to_have_count(1)
    shot(page, "03-after-reload")
    page.context.close()
