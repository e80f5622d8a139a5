"""The golden set's pure parts (rules E11, E13; docs/evals.md): the file's shape, the checks of one run, pass^k,
the case made from a task record, and how the scripted model finds the evidence number it cites."""

from __future__ import annotations

from collections import Counter

from ops import evalcases, golden
from testkit.golden_model import cited_number, play

KNOWN_EXPECT = {"outcome", "status", "code", "category", "mode", "tools", "citations", "cite", "evidence"}


def test_the_golden_file_has_50_cases_of_every_category_with_known_checks():
    cases = golden.load()["cases"]
    assert len(cases) >= 50 and len({c["id"] for c in cases}) == len(cases)
    assert len({golden.question_of(c) for c in cases}) == len(cases)  # the scripted model finds a case by its question
    counts = Counter(c["category"] for c in cases)
    assert all(counts[k] >= 5 for k in ("corpus", "document", "chitchat", "refusal", "tool")), counts
    assert all(set(c["expect"]) <= KNOWN_EXPECT for c in cases)
    assert len(golden.laws_of(cases)) == 8 and all(law.startswith("中华人民共和国") for law in golden.laws_of(cases))


def run_of(**kw) -> golden.Observed:
    return golden.Observed(**({"outcome": "task.completed", "task_id": "t", "mode": "agent"} | kw))


def test_a_run_fails_on_each_expectation_it_misses():
    case = {"expect": {"outcome": "task.completed", "mode": "agent", "tools": ["kb_search"],
                       "cite": {"title": "增值税法", "locator": "第十一条"}}}
    cite = {"chunk_id": "c1", "title": "中华人民共和国增值税法", "locator": "第十一条"}
    assert golden.check(case, run_of(tools=["kb_search"], citations=[cite])) == []
    bad = golden.check(case, run_of(mode="retrieval_only", tools=[], citations=[{**cite, "locator": "第十条"}]))
    assert len(bad) == 3 and bad[0].startswith("mode") and bad[1].startswith("tools") and "no citation" in bad[2]
    refused = {"expect": {"outcome": "rejected", "status": 422, "code": "input_rejected", "category": "role_play"}}
    assert golden.check(refused, golden.Observed("rejected", status=422, code="input_rejected", category="role_play")) == []


def test_pass_k_needs_every_run_to_pass_and_to_end_the_same_way():
    a = {"chunk_id": "a", "title": "T"}
    b = {"chunk_id": "b", "title": "T"}
    case = {"id": "x", "expect": {"citations": True}}
    same = golden.CaseResult(case, [(run_of(citations=[a]), []) for _ in range(3)])
    assert same.passed and same.passes == 3
    differ = golden.CaseResult(case, [(run_of(citations=[a]), []), (run_of(citations=[b]), []), (run_of(citations=[a]), [])])
    assert differ.passes == 3 and not differ.passed and "differently" in differ.detail()
    flaky = golden.CaseResult(case, [(run_of(citations=[a]), []), (run_of(), ["citations 0"]), (run_of(citations=[a]), [])])
    assert flaky.passes == 2 and not flaky.passed


def test_a_task_record_becomes_a_case_that_replays_its_tool_calls():
    view = {"task_id": "0123456789abcdef", "status": "completed", "mode": "agent", "question": "税率？",
            "answer": "税率为百分之二十五[1]。", "created_at": "2026-12-02T00:00:00Z",
            "steps": [{"step": 1, "kind": "model"},
                      {"step": 1, "kind": "tool", "tool": "kb_search", "arguments": {"query": "税率", "reason": "查"}}],
            "citations": [{"index": 1, "chunk_id": "c9", "title": "《中华人民共和国企业所得税法》", "locator": "第四条"}]}
    case = evalcases.case_from_view(view)
    assert case["id"] == "task-0123456789ab" and case["category"] == "from_task"
    assert case["model"] == [{"call": "kb_search", "args": {"query": "税率"}},
                             {"answer": "税率为百分之二十五", "cite": {"title": "《中华人民共和国企业所得税法》", "locator": "第四条"}}]
    assert case["expect"] == {"outcome": "task.completed", "mode": "agent", "tools": ["kb_search"],
                              "cite": {"title": "《中华人民共和国企业所得税法》", "locator": "第四条"}, "evidence": ["c9"]}
    fallback = evalcases.case_from_view(view | {"mode": "retrieval_only"})
    assert fallback["run"] == "retrieval_only" and "model" not in fallback


def test_the_scripted_model_cites_the_block_whose_label_names_the_article():
    tool = {"role": "tool", "content": "【知识库检索结果】\n<u>\n[1] 《中华人民共和国增值税法》 第十条（原文）\n依照本法第十一条……\n</u>\n"
                                       "<u>\n[2] 《中华人民共和国增值税法》 第十一条（原文）\n征收率为百分之三。\n</u>"}
    assert cited_number([tool], {"title": "增值税法", "locator": "第十一条"}) == 2
    assert cited_number([tool], {"text": "百分之三"}) == 2 and cited_number([tool], {"locator": "第九条"}) is None
    case = {"question": "q", "model": [{"call": "kb_search"}, {"answer": "是", "cite": {"locator": "第十一条"}}]}
    first = play(case, {"messages": [{"role": "user", "content": "q"}], "tools": [{"function": {"name": "kb_search"}}]})
    assert first.tool_calls == [{"name": "kb_search", "arguments": {"query": "q", "reason": "golden set"}}]
    later = play(case, {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": ""}, tool]})
    assert later.content == "是[2]"
    assert play(case, {"messages": [{"role": "user", "content": "q"}], "tools": []}).content == "未提供工具 kb_search。"
    assert play({"question": "q", "run": "retrieval_only"}, {"messages": []}).status == 503


def test_the_report_lists_every_case_and_gate_in_a_table_and_in_html():
    from rich.console import Console

    from ops import evalreport
    from ops.gates import Gate

    ok = golden.CaseResult({"id": "ok-case", "category": "corpus"}, [(run_of(tools=["kb_search"]), [])] * 3)
    bad = golden.CaseResult({"id": "bad<case>", "category": "tool"}, [(run_of(), ["tools [] != ['code_exec']"])] * 3)
    gates = [Gate("retrieval", "heldout:hit@1", False, "0.339 (floor 0.52, n=118)")]
    console = Console(width=200, record=True)
    console.print(evalreport.table([ok, bad], gates))
    text = console.export_text()
    assert "ok-case" in text and "3/3" in text and "0/3" in text and "heldout:hit@1" in text and "FAIL" in text
    page = evalreport.to_html([ok, bad], gates, k=3)
    assert "bad&lt;case&gt;" in page and "golden: 1/2 cases pass^k; gates: 0/1 passed" in page and "k = 3" in page
