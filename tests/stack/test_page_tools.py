"""The chat page's tool work in a real browser (Debian's Chromium under Playwright) against the real
stack: inline approvals (approve, reject, edit), sandbox plots and files, documents by drag and drop,
a question limited to a picked document, sessions renamed and deleted, and an axe-core accessibility check.

Each scenario keeps a screenshot under ``test-output/page/`` (``CONDUIT_TEST_OUTPUT`` overrides).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from testkit.page import (
    CHROMIUM,
    WAIT_MS,
    admin_key,
    ask,
    chromium,
    code,
    evidence_number,
    kb,
    last_turn,
    markdown_answer,
    open_page,
    sandbox_outputs,
    shot,
)
from testkit.pdf import minimal_pdf
from testkit.page_fixtures import fresh_script, stack  # noqa: F401 - fixtures
from testkit.scripted_model import Turn
from testkit.stack import auth
from testkit.waits import wait_until

pytest.importorskip("playwright")
from playwright.sync_api import Browser, Locator, Page, expect  # noqa: E402

pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed (.ci/run installs it)")


@pytest.fixture(scope="module")
def browser(stack) -> Iterator[Browser]:
    with chromium() as b:
        yield b


PLOT = """
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
frame = pd.DataFrame({"x": [1, 2, 3, 4], "y": [1, 4, 9, 16]})
frame.to_csv("/tmp/out/squares.csv", index=False)
frame.plot(x="x", y="y", marker="o", title="squares")
plt.savefig("/tmp/out/plot.png")
print("saved plot")
"""


POLICY = "# 星河公司差旅报销制度\n\n## 第三条 住宿标准\n\n员工出差住宿费每晚不超过四百五十元，一线城市每晚不超过六百元。\n"
DROP = """([name, text]) => {
  const dt = new DataTransfer();
  dt.items.add(new File([text], name, {type: 'text/markdown'}));
  const target = document.getElementById('conversation');
  for (const type of ['dragover', 'drop']) target.dispatchEvent(new DragEvent(type, {dataTransfer: dt, bubbles: true, cancelable: true}));
}"""


def expect_listed_once(dialog: Locator, title: str) -> None:
    """After an upload: the document is one row of the list, with its status, and in no other row of the
    dialog (its upload row gives way to the list row)."""
    expect(dialog.locator(".docs-list .doc", has_text=title).locator(".doc-status")).to_contain_text("已入库")
    expect(dialog.locator("li", has_text=title)).to_have_count(1)


AXE_VERSION = "4.14.1"


def cite_policy(body: dict) -> Turn:
    n = evidence_number(body, "星河公司差旅报销制度", "")
    return Turn(content=f"出差住宿费每晚不超过四百五十元[{n}]。" if n else "没有找到。")


@pytest.fixture(scope="module")
def axe_js(tmp_path_factory) -> str:
    """axe-core's browser build, fetched with npm (pinned); the test skips without npm or the registry."""
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm is not installed: axe-core cannot be fetched")
    dest = tmp_path_factory.mktemp("axe")
    got = subprocess.run([npm, "pack", f"axe-core@{AXE_VERSION}", "--pack-destination", str(dest)],
                         capture_output=True, text=True, timeout=180)
    if got.returncode != 0:
        pytest.skip(f"npm could not fetch axe-core: {got.stderr[-300:]}")
    with tarfile.open(next(dest.glob("axe-core-*.tgz"))) as tar:
        member = tar.extractfile("package/axe.min.js")
        assert member is not None
        return member.read().decode("utf-8")


def serious_violations(page: Page, axe: str) -> list[dict]:
    page.add_script_tag(content=axe)
    result = page.evaluate("async () => (await axe.run(document, {resultTypes: ['violations']})).violations")
    return [{"id": v["id"], "impact": v["impact"], "nodes": [n["target"] for n in v["nodes"]][:5]}
            for v in result if v["impact"] in ("serious", "critical")]


def test_approve_one_and_reject_another_of_two_parallel_code_calls(browser, stack, model):
    from services.sandbox.isolation import sandbox_status

    model.push(Turn(tool_calls=[code("print('A' * 3)"), code("print('B' * 3)")]), sandbox_outputs)
    page = open_page(browser, stack)
    ask(page, "分别运行两段代码")
    turn = last_turn(page)
    prompts = turn.locator(".approval")
    expect(prompts).to_have_count(2)
    expect(prompts.first.locator(".tok-keyword").first).to_have_text("print")  # highlighted code
    expect(turn.locator(".status")).to_contain_text("等待你的确认")
    shot(page, "05-approvals")
    prompts.filter(has_text="'A'").get_by_role("button", name="允许运行").click()
    rejected = prompts.filter(has_text="'B'")
    rejected.get_by_placeholder("备注（可选）").fill("不需要这一段")
    rejected.get_by_role("button", name="拒绝").click()
    expect(turn).to_have_attribute("data-state", "completed")
    if sandbox_status()[0]:
        expect(turn.locator(".answer")).to_contain_text("AAA")
    expect(turn.locator(".answer")).not_to_contain_text("BBB")
    record = turn.locator("details.record")
    record.locator("summary").click()
    expect(record.locator(".pill-approval")).to_have_count(2)
    expect(record).to_contain_text("已允许")
    expect(record).to_contain_text("已拒绝")
    expect(record).to_contain_text("你拒绝了这次调用")
    shot(page, "06-approvals-decided", full=True)
    page.context.close()


def test_edit_an_approval_rename_and_delete_a_session_in_english_by_keyboard(browser, stack, model):
    model.push(Turn(tool_calls=[code("print('ORIGINAL')")]), sandbox_outputs)
    page = open_page(browser, stack)
    page.get_by_role("button", name="English").first.click()
    expect(page.locator("#question")).to_have_attribute("placeholder", re.compile("Enter to send"))
    ask(page, "run some code")
    turn = last_turn(page)
    prompt = turn.locator(".approval")
    prompt.get_by_role("button", name="Run edited").click()
    editor = prompt.locator("textarea")
    expect(editor).to_be_focused()
    editor.fill("print('EDITED')")
    prompt.get_by_role("button", name="Run edited").click()
    expect(turn).to_have_attribute("data-state", "completed")
    from services.sandbox.isolation import sandbox_status
    if sandbox_status()[0]:
        expect(turn.locator(".answer")).to_contain_text("EDITED")
    expect(turn.locator(".answer")).not_to_contain_text("ORIGINAL")
    expect(turn.locator("details.record")).to_contain_text("Approved with edits")
    # switching language draws the answers on screen again in it
    page.get_by_role("button", name="中文").first.click()
    expect(last_turn(page).locator("details.record")).to_contain_text("执行记录")
    page.get_by_role("button", name="English").first.click()
    expect(last_turn(page).locator("details.record")).to_contain_text("Approved with edits")
    # Shift+Enter is a new line, not a question
    box = page.locator("#question")
    box.fill("line one")
    box.press("Shift+Enter")
    box.type("line two")
    assert box.input_value() == "line one\nline two"
    expect(page.locator(".turn")).to_have_count(1)
    box.fill("")
    # rename and delete the session
    page.once("dialog", lambda d: d.accept("My renamed chat"))
    page.locator("#sessions .session.current").get_by_role("button", name="Rename").click()
    expect(page.locator("#sessions .session.current")).to_contain_text("My renamed chat")
    expect(page.locator("#session-title")).to_have_text("My renamed chat")
    listed = page.request.get(f"{stack.gateway_url}/v1/sessions",
                              headers={"Authorization": f"Bearer {admin_key(stack)}"}).json()["sessions"]
    assert "My renamed chat" in [x["title"] for x in listed], listed  # renamed on the gateway, not only here
    asked: list[str] = []
    page.once("dialog", lambda d: (asked.append(d.message), d.accept()))
    page.locator("#sessions .session.current").get_by_role("button", name="Delete").click()
    expect(page.locator("#sessions")).not_to_contain_text("My renamed chat")
    expect(page.locator(".turn")).to_have_count(0)
    assert "deleted from the server" in asked[0], asked  # it says what deleting does
    page.context.close()


def test_a_plot_from_the_sandbox_appears_and_the_csv_downloads(browser, stack, model):
    from services.sandbox.isolation import sandbox_status

    if not sandbox_status()[0]:
        pytest.skip(f"sandbox isolation unavailable: {sandbox_status()[1]}")
    model.push(Turn(tool_calls=[code(PLOT)]), Turn(content="图已画好（沙箱计算）。"))
    page = open_page(browser, stack)
    ask(page, "画一张平方数的折线图")
    turn = last_turn(page)
    turn.get_by_role("button", name="允许运行").click()
    expect(turn).to_have_attribute("data-state", "completed")
    img = turn.locator(".files img")
    expect(img).to_have_attribute("src", re.compile(r"^blob:"))
    page.wait_for_function("document.querySelector('.turn:last-child .files img')?.naturalWidth > 100")
    with page.expect_download() as download:
        turn.locator(".files .artifact-file", has_text="squares.csv").click()
    assert download.value.suggested_filename == "squares.csv"
    record = turn.locator("details.record")
    record.locator("summary").click()
    expect(record.locator(".rec-stdout")).to_contain_text("saved plot")
    expect(record.locator(".rec-files")).to_contain_text("plot.png")
    shot(page, "10-plot", full=True)
    page.context.close()


def test_a_dropped_markdown_file_is_ingested_and_answers_a_question(browser, stack, model):
    page = open_page(browser, stack)
    page.evaluate(DROP, ["星河公司差旅报销制度.md", POLICY])
    dialog = page.locator("#docs")
    expect(dialog).to_be_visible()
    expect_listed_once(dialog, "星河公司差旅报销制度")
    shot(page, "12-documents")
    dialog.get_by_role("button", name="关闭").click()
    model.push(Turn(tool_calls=[kb("星河公司 出差 住宿费 标准")]), cite_policy)
    ask(page, "出差住宿每晚能报多少？")
    turn = last_turn(page)
    expect(turn).to_have_attribute("data-state", "completed")
    expect(turn.locator(".answer")).to_contain_text("四百五十元")
    turn.locator(".answer .chip").first.hover()
    expect(page.locator(".card")).to_contain_text("星河公司差旅报销制度")
    expect(page.locator(".card mark").first).to_be_visible()
    shot(page, "13-document-answer")
    # delete it again: the list no longer shows it
    page.once("dialog", lambda d: d.accept())
    page.get_by_role("button", name="文档").click()
    dialog.get_by_role("button", name="删除 星河公司差旅报销制度").click()
    expect(dialog.locator(".docs-list")).not_to_contain_text("星河公司差旅报销制度")
    page.context.close()


def test_axe_finds_no_serious_accessibility_violations(browser, stack, model, axe_js):
    context = browser.new_context(viewport={"width": 1280, "height": 900}, locale="zh-CN", bypass_csp=True)
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    page.goto(stack.gateway_url + "/")
    expect(page.get_by_label("API 密钥")).to_be_visible()
    assert serious_violations(page, axe_js) == []
    page.get_by_label("API 密钥").fill(admin_key(stack))
    page.get_by_role("button", name="登录").click()
    model.push(Turn(tool_calls=[kb()]), markdown_answer, Turn(tool_calls=[code("print(1)")]))
    ask(page, "小规模纳税人适用简易计税方法的征收率是多少？")
    expect(last_turn(page)).to_have_attribute("data-state", "completed")
    last_turn(page).locator("details.record summary").click()
    last_turn(page).locator(".answer .chip").first.hover()
    expect(page.locator(".card")).to_be_visible()
    assert serious_violations(page, axe_js) == []
    ask(page, "再算一下")
    expect(last_turn(page).locator(".approval")).to_be_visible()
    assert serious_violations(page, axe_js) == []
    last_turn(page).get_by_role("button", name="拒绝").click()
    expect(last_turn(page)).to_have_attribute("data-state", "completed")
    page.get_by_role("button", name="文档").click()
    assert serious_violations(page, axe_js) == []
    context.close()


def test_a_chosen_pdf_and_text_file_are_ingested_and_each_listed_once(browser, stack):
    page = open_page(browser, stack)
    page.get_by_role("button", name="文档").click()
    dialog = page.locator("#docs")
    pdf = minimal_pdf(["Orion Labs remote work policy", "Staff may work remotely three days a week."])
    text = "Orion Labs travel policy\n\nHotel nights are paid up to 450 yuan.\n".encode()
    dialog.locator("input[type=file]").set_input_files(  # two at once: the first one done lists the other still in flight
        files=[{"name": "Orion remote policy.pdf", "mimeType": "application/pdf", "buffer": pdf},
               {"name": "Orion travel policy.txt", "mimeType": "text/plain", "buffer": text}])
    expect_listed_once(dialog, "Orion remote policy")
    expect_listed_once(dialog, "Orion travel policy")
    shot(page, "12b-documents-uploaded")
    for title in ("Orion remote policy", "Orion travel policy"):
        page.once("dialog", lambda d: d.accept())
        dialog.get_by_role("button", name=f"删除 {title}").click()
        expect(dialog.locator(".docs-list")).not_to_contain_text(title)
    page.context.close()


def test_a_kb_search_that_finds_nothing_is_shown_as_nothing_found_not_as_an_error(browser, stack, model):
    model.push(Turn(tool_calls=[kb("zxqvw plmokn qazwsx")]), Turn(content="知识库里没有相关内容。"))
    page = open_page(browser, stack)
    ask(page, "zxqvw plmokn qazwsx 是什么？")
    turn = last_turn(page)
    expect(turn).to_have_attribute("data-state", "completed")
    record = turn.locator("details.record")
    record.locator("summary").click()
    call = record.locator(".rec-call")
    expect(call.locator(".pill-empty")).to_have_text("无结果")
    expect(call.locator(".rec-note")).to_contain_text("知识库里没有足够相关的段落 (kb_no_results)")
    expect(record.locator(".pill-error, .rec-error")).to_have_count(0)
    shot(page, "14-kb-nothing-found", full=True)
    page.context.close()


SCOPED = {"scope-travel": ("星河差旅细则", None, "# 星河差旅细则\n\n出差住宿费每晚不超过五百元，凭发票报销。\n"),
          "scope-handbook": ("星河员工手册", "hr", "# 星河员工手册\n\n员工出差住宿应选择协议酒店，住宿费凭发票报销。\n")}


def cite_every_passage(body: dict) -> Turn:
    shown = sorted({int(n) for m in body["messages"] if m["role"] == "tool"
                    for n in re.findall(r"\[(\d+)\]", m.get("content") or "")})
    return Turn(content="住宿费按制度报销" + "".join(f"[{n}]" for n in shown) + "。")


def test_a_question_limited_to_a_picked_document_searches_only_it(browser, stack, model):
    with httpx.Client(base_url=stack.gateway_url, headers=auth(admin_key(stack)), timeout=30) as c:
        for doc_id, (title, collection, text) in SCOPED.items():
            body = {"title": title, "text": text, "document_id": doc_id} | ({"collection": collection} if collection else {})
            assert c.post("/v1/documents", json=body).status_code == 202
        assert wait_until(lambda: all(c.get(f"/v1/documents/{d}").json()["status"] == "ingested" for d in SCOPED), 60)
    model.push(Turn(tool_calls=[kb("星河 出差 住宿费 报销")]), cite_every_passage)
    page = open_page(browser, stack)
    scope = page.locator("#scope")
    expect(scope.locator(".scope-summary")).to_have_text("全部资料")
    scope.get_by_role("button", name=re.compile("检索范围")).click()
    panel = page.locator("#scope-panel")
    expect(panel.get_by_label("法律法规")).to_be_visible()
    expect(panel.locator(".scope-collections")).to_contain_text("hr")  # the handbook's named collection
    panel.get_by_label("星河差旅细则").check()
    expect(scope.locator(".scope-summary")).to_have_text("星河差旅细则")
    shot(page, "15-scope-picked")
    panel.get_by_role("button", name="完成").click()
    expect(panel).to_be_hidden()
    with page.expect_request(lambda r: r.url.endswith("/v1/tasks") and r.method == "POST") as sent:
        ask(page, "出差住宿费怎么报销？")
    assert sent.value.post_data_json["document_ids"] == ["scope-travel"]
    turn = last_turn(page)
    expect(turn).to_have_attribute("data-state", "completed")
    seen = "".join(m["content"] or "" for m in model.requests[-1]["messages"] if m["role"] == "tool")
    assert "星河差旅细则" in seen and "星河员工手册" not in seen and "增值税法" not in seen, seen
    expect(scope.locator(".scope-summary")).to_have_text("星河差旅细则")  # kept for the next question
    shot(page, "15b-scope-answer")
    page.context.close()
