"""Helpers of the page's browser tests (tests/stack/test_page*.py): a stack for the page, Debian's
Chromium under Playwright, login, asking, screenshots, and the scripted model turns they share.

Playwright is a test dependency: it is imported only by the functions that need it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from ops.stack import Stack
from testkit.scripted_model import ScriptedModel, Turn
from testkit.stack import start_stack

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Locator, Page

CHROMIUM = "/usr/bin/chromium"
"""Debian's Chromium (``apt-get install chromium``); Playwright's own browser download is not used."""
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
WAIT_MS = 60_000
"""Longest wait of a browser expectation (ms): a whole answer on a busy 2-core machine."""
VAT_LAW = "中华人民共和国增值税法"
ROOT = Path(__file__).resolve().parents[1]


def output_dir() -> Path:
    """Where screenshots go: ``$CONDUIT_TEST_OUTPUT/page`` or ``<repo>/test-output/page``."""
    out = Path(os.environ.get("CONDUIT_TEST_OUTPUT", ROOT / "test-output")) / "page"
    out.mkdir(parents=True, exist_ok=True)
    return out


def page_stack(infra: Any, data_dir: Path, model: ScriptedModel) -> Stack:
    """Retriever (with the VAT law), sandbox, orchestrator and gateway over ``infra``'s broker and Redis."""
    return start_stack(infra.bootstrap, infra.redis_url, data_dir, ("retriever", "sandbox", "orchestrator", "gateway"),
                       {"OPENAI_BASE_URL": model.base_url, "OPENAI_API_KEY": "test", "CONDUIT_MODEL": "scripted",
                        "CONDUIT_TOOL_TIMEOUT_S": "20", "CONDUIT_APPROVAL_TTL_S": "120"},
                       laws=[VAT_LAW])


@contextmanager
def chromium() -> Iterator[Browser]:
    """Debian's Chromium, headless. Playwright's sync API keeps an event loop running in this
    thread while it is open: nothing may call ``asyncio.run`` meanwhile (start stacks first)."""
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=WAIT_MS)  # expectations wait as long as actions (its default is 5 s: too short under load)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def admin_key(stack: Stack) -> str:
    """The embedded stack's admin key (``<data_dir>/admin.key``) when it wrote one, else any string."""
    path = Path(stack.data_dir) / "admin.key"
    return path.read_text().strip() if path.exists() else "page-test-key"


def identity_enabled(stack: Stack) -> bool:
    """True when the gateway checks keys (``GET /v1/me`` exists)."""
    return httpx.get(f"{stack.gateway_url}/v1/me", timeout=10).status_code != 404


@dataclass
class Identity:
    """Two members' keys and an admin's one-time login link."""

    alice: str
    bob: str
    login_link: str


def make_identity(stack: Stack) -> Identity | None:
    """Keys and a login link from the identity layer's helpers; None when it is not there.
    Call before ``chromium()`` (the helpers run their own event loop)."""
    try:
        from ops.bootstrap import login_link  # type: ignore[attr-defined]
        from testkit.stack import new_key  # type: ignore[attr-defined]
    except ImportError:
        return None
    redis_url = stack.settings.store.url()
    return Identity(alice=new_key(redis_url, user="alice", role="member"),
                    bob=new_key(redis_url, user="bob", role="member"),
                    login_link=login_link(stack.settings, stack.gateway_url))


def open_page(browser: Browser, stack: Stack, width: int = 1280, height: int = 900, touch: bool = False,
              bypass_csp: bool = False, key: str | None = None) -> Page:
    """A new browser context (Chinese locale, reduced motion) on the page, signed in with ``key``
    (default: the admin key) through the login form."""
    from playwright.sync_api import expect

    context = browser.new_context(viewport={"width": width, "height": height}, locale="zh-CN", has_touch=touch,
                                  reduced_motion="reduce", bypass_csp=bypass_csp)
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    page.goto(stack.gateway_url + "/")
    page.get_by_label("API 密钥").fill(key or admin_key(stack))
    page.get_by_role("button", name="登录").click()
    expect(page.locator("#question")).to_be_visible()
    expect(page.locator("body")).to_have_attribute("data-ready", "true")  # sessions listed, conversation chosen
    return page


def shot(page: Page, name: str, full: bool = False) -> Path:
    """Save a screenshot ``<output_dir>/<name>.png``; returns its path."""
    path = output_dir() / f"{name}.png"
    page.screenshot(path=str(path), full_page=full)
    return path


def ask(page: Page, question: str) -> None:
    """Type ``question`` and press Enter."""
    box = page.locator("#question")
    box.fill(question)
    box.press("Enter")


def last_turn(page: Page) -> Locator:
    """The newest question/answer pair on the page."""
    return page.locator(".turn").last


# ------------------------------------------------------------------ scripted model turns
def evidence_number(body: dict, title_part: str, locator: str = "") -> int | None:
    """The pool number the model saw for ``title_part`` (+ ``locator``) in the request's tool messages."""
    for m in body["messages"]:
        if m.get("role") == "tool":
            hit = re.search(rf"\[(\d+)\] 《[^》]*{title_part}[^》]*》 ?{locator}", m.get("content") or "")
            if hit:
                return int(hit.group(1))
    return None


def kb(query: str = "小规模纳税人 简易计税方法 征收率") -> dict:
    """A kb_search tool call."""
    return {"name": "kb_search", "arguments": {"query": query, "reason": "查找增值税法中简易计税的征收率"}}


def code(src: str) -> dict:
    """A code_exec tool call (needs approval by default)."""
    return {"name": "code_exec", "arguments": {"code": src, "reason": "精确计算"}}


def markdown_answer(body: dict) -> Turn:
    """A streamed Markdown answer (list, table, code) citing the pool number of 增值税法 第十一条."""
    n = evidence_number(body, "增值税法", "第十一条")
    assert n is not None, "增值税法 第十一条 was not retrieved"
    text = (f"**结论**：适用简易计税方法计算缴纳增值税的，征收率为百分之三[{n}]。\n\n"
            "- 适用对象：小规模纳税人\n- 计税方法：简易计税\n\n"
            "| 项目 | 规定 |\n|---|---|\n| 征收率 | 3% |\n| 依据 | 增值税法第十一条 |\n\n"
            "`应纳税额 = 销售额 × 征收率`")
    return Turn(content=text, chunks=12, chunk_delay_s=0.15)


def sandbox_outputs(body: dict) -> Turn:
    """An answer quoting every sandbox result the model received (a rejected call has none)."""
    outs = [m["content"] for m in body["messages"] if m["role"] == "tool" and "沙箱计算结果" in (m.get("content") or "")]
    return Turn(content="沙箱计算的输出：\n\n```\n" + "\n".join(outs) + "\n```")
