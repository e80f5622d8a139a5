"""The OpenAI-compatible answer built from a task's events (``services.gateway.openai_compat.chatstream``)."""

from __future__ import annotations

import json

from conduit.records.taskstream import LoggedEvent
from services.gateway.openai_compat.chatstream import ChatAnswer, footnote_marks, footnotes
from contracts.evidence import Citation

CITES = [{"index": 1, "chunk_id": "c1", "title": "《增值税法》", "locator": "第十一条"},
         {"index": 2, "chunk_id": "w", "title": "news", "url": "https://example.org/a"}]


def ev(seq: int, type_: str, **data) -> LoggedEvent:
    return LoggedEvent(seq, type_, json.dumps({"type": type_, **data}, ensure_ascii=False))


def run(events: list[LoggedEvent]) -> tuple[ChatAnswer, str]:
    answer = ChatAnswer("t", "s")
    out = []
    for e in events:
        out += answer.finish(e) if e.terminal else answer.on_event(e)
    return answer, "".join(d.get("content", "") for d in out)


def test_citation_markers_become_footnotes_even_split_across_deltas() -> None:
    deltas = ["税率为百分之三[", "1", "]，另见[2", "]。"]
    answer, text = run([ev(i, "answer.delta", text=t) for i, t in enumerate(deltas)]
                       + [ev(9, "task.completed", answer="税率为百分之三[1]，另见[2]。", citations=CITES, latency_ms=1)])
    assert text == ("税率为百分之三[^1]，另见[^2]。\n\n[^1]: 《增值税法》 第十一条\n"
                    "[^2]: news <https://example.org/a>")
    assert answer.final == text and answer.sent == text
    assert answer.extension is not None and answer.extension.answer == "税率为百分之三[1]，另见[2]。"
    assert [c.index for c in answer.extension.citations] == [1, 2]


def test_a_reset_keeps_what_was_sent_and_the_rest_of_the_answer_follows() -> None:
    answer, text = run([ev(1, "answer.delta", text="我先查一下。"), ev(2, "answer.reset", reason="tools"),
                        ev(3, "answer.delta", text="答案"),
                        ev(4, "task.completed", answer="答案是三[1]。", citations=CITES[:1], latency_ms=1)])
    assert text == "我先查一下。\n\n答案是三[^1]。\n\n[^1]: 《增值税法》 第十一条"
    assert answer.final == "答案是三[^1]。\n\n[^1]: 《增值税法》 第十一条"


def test_needs_input_and_failures() -> None:
    answer, text = run([ev(1, "task.needs_input", question="哪一年？")])
    assert text == "哪一年？" and answer.extension is not None and answer.extension.status == "needs_input"
    failed, text = run([ev(1, "task.failed", code="deadline", message="too slow")])
    assert failed.error == (502, "deadline", "too slow") and text == ""
    cancelled, _ = run([ev(1, "task.cancelled", reason="user")])
    assert cancelled.error is not None and cancelled.error[:2] == (409, "task_cancelled")


def test_reasoning_streams_apart_and_helpers() -> None:
    answer = ChatAnswer("t", "s")
    assert answer.on_event(ev(1, "thinking", text="hmm")) == [{"reasoning_content": "hmm"}]
    assert answer.on_event(ev(2, "tool.requested", call_id="c", tool="kb_search", arguments={})) == []
    assert footnote_marks("a[1][23] [x] [1234]") == "a[^1][^23] [x] [1234]"
    assert footnotes([]) == "" and footnotes([Citation(**CITES[0])]) == "\n\n[^1]: 《增值税法》 第十一条"
