"""Rule M9, forget means forget (pure parts): what a deleted fact takes with it."""

from __future__ import annotations

from datetime import UTC, datetime

from conduit.records import forgetting
from contracts.api import ExactValue, SessionContext
from contracts.memory import MemoryChange, MemoryItem

NOW = datetime(2026, 12, 1, tzinfo=UTC)


def item(id_: str, type_: str, text: str, task: str, **more) -> MemoryItem:
    return MemoryItem(id=id_, tenant_id="t", user_id="u", type=type_, text=text, task_id=task, importance=5,
                      created_at=NOW, last_used_at=NOW, **more)


def test_episodes_of_the_fact_s_task_or_repeating_its_words_are_derived():
    fact = item("f1", "fact", "我叫李四", "task-1", topic="name",
                history=[MemoryChange(text="我叫李三", replaced_at=NOW, reason="corrected (task task-0)")])
    items = [fact, item("e1", "episode", "问：个税起征点？\n答：五千元。", "task-1"),
             item("e2", "episode", "问：我叫李三，能报销吗？\n答：可以。", "task-9"),
             item("e3", "episode", "问：增值税税率？\n答：百分之十三。", "task-5"),
             item("e4", "episode", "问：旧问题\n答：旧回答。", "task-0")]
    assert forgetting.derived_episodes(items, [fact]) == ["e1", "e2", "e4"]
    assert sorted(forgetting.words([fact])) == ["我叫李三", "我叫李四"]


def test_a_summary_loses_the_lines_and_values_that_repeat_the_fact():
    ctx = SessionContext(summary="用户：我叫李四\n用户问了个税起征点", folded=2, seen=2,
                         values=[ExactValue(kind="fact", value="我叫李四", turn=1), ExactValue(kind="amount", value="5000元", turn=1)])
    out = forgetting.redact_context(ctx, ["我叫李四"])
    assert out is not None and out.summary == "〔已删除〕\n用户问了个税起征点"
    assert [v.value for v in out.values] == ["5000元"]
    assert forgetting.redact_context(out, ["我叫李四"]) is None  # nothing left to change
