"""Rules V1-V4 (docs/agent-rules.md): the day a question is asked, the time it names, and which version
of a law a passage is. Pure functions, and the agent core driven in memory (``agentsim``)."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta

import pytest
from pydantic import ValidationError

from conduit.runtime import tenants
from contracts.evidence import EvidenceItem, NumberedEvidence
from services.orchestrator.agent import dates, fallback, planning, prompt, versions
from services.orchestrator.agent.dates import Asked, Period, parse_period
from services.orchestrator.agent.state import TaskState
from services.orchestrator.testmodel import FunctionModel

from agentsim import Reply, Sim, kb, ok, question, settings

TODAY = date(2026, 12, 2)
VAT = {"status": "现行有效", "effective_date": "2026-01-01", "version_date": "2024-12-25", "law_name": "中华人民共和国增值税法"}
LABOUR = {"status": "现行有效", "effective_date": "2008-01-01", "version_date": "2012-12-28"}
TRADEMARK_NEXT = {"status": "现行有效", "effective_date": "2027-01-01", "version_date": "2026-06-26"}
ARBITRATION_OLD = {"status": "历史版本", "effective_date": "1995-09-01", "version_date": "2017-09-01",
                   "effective_until": "2026-03-01"}


def asked(question_text: str = "", today: date = TODAY) -> Asked:
    return dates.asked(today, "Asia/Shanghai", question_text)


# ------------------------------------------------------------------ V1: the time a question names
@pytest.mark.parametrize(("text", "start", "end", "current"), [
    ("2024年的增值税税率是多少？", date(2024, 1, 1), date(2024, 12, 31), False),
    ("2024 年度个税汇算", date(2024, 1, 1), date(2024, 12, 31), False),
    ("二〇二四年的规定", date(2024, 1, 1), date(2024, 12, 31), False),
    ("2024年3月的社保基数", date(2024, 3, 1), date(2024, 3, 31), False),
    ("2024年3月1日起施行的条款", date(2024, 3, 1), date(2024, 3, 1), False),
    ("2025-07-01 以后签的合同", date(2025, 7, 1), date(2025, 7, 1), False),
    ("今年个税起征点是多少？", date(2026, 1, 1), date(2026, 12, 31), True),
    ("本年度的汇算", date(2026, 1, 1), date(2026, 12, 31), True),
    ("去年的企业所得税", date(2025, 1, 1), date(2025, 12, 31), False),
    ("前年的规定", date(2024, 1, 1), date(2024, 12, 31), False),
    ("明年商标法怎么规定", date(2027, 1, 1), date(2027, 12, 31), True),
    ("2023年和2024年有什么不同", date(2023, 1, 1), date(2024, 12, 31), False),
    ("去年和今年", date(2025, 1, 1), date(2026, 12, 31), True),
    ("2026年的增值税", date(2026, 1, 1), date(2026, 12, 31), True),
    ("现在小规模纳税人征收率是多少", TODAY, TODAY, True),
    ("最新的公司法注册资本规定", TODAY, TODAY, True),
    ("目前的规定", TODAY, TODAY, True),
    ("What was the VAT rate in 2024?", date(2024, 1, 1), date(2024, 12, 31), False),
    ("what is the current rate", TODAY, TODAY, True),
    ("last year's filing", date(2025, 1, 1), date(2025, 12, 31), False),
])
def test_a_question_names_its_time(text, start, end, current):
    p = parse_period(text, TODAY)
    assert p is not None and (p.start, p.end, p.current) == (start, end, current), p


@pytest.mark.parametrize("text", [
    "小规模纳税人适用简易计税方法的征收率是多少？", "说明年度报告怎么写", "60周岁以上年满十年", "以后年度亏损可以弥补吗",
    "提前年休假", "基本年金怎么算", "月薪2024元要交税吗", "第2024号文件", "2024", "2月30日",
])
def test_no_time_named_is_none(text):
    assert parse_period(text, TODAY) is None


def test_an_explicit_year_wins_over_a_now_word_and_phrases_are_kept():
    p = parse_period("现在看2024年的规定", TODAY)
    assert p == Period(date(2024, 1, 1), date(2024, 12, 31), "2024年", False)
    assert p.label() == "2024年（2024-01-01 至 2024-12-31）"
    assert parse_period("现在", TODAY).label() == "现在（2026-12-02）"


# ------------------------------------------------------------------ V1: the day asked, in the tenant's zone
def test_the_day_asked_is_the_tenants_local_day():
    late = datetime(2026, 12, 31, 20, 0, tzinfo=UTC)
    assert dates.local_date(late, "Asia/Shanghai") == date(2027, 1, 1)
    assert dates.local_date(late, "America/New_York") == date(2026, 12, 31)
    assert dates.local_date(late.replace(tzinfo=None), "UTC") == date(2026, 12, 31)  # naive = UTC


def test_time_zones_are_checked_and_default_to_shanghai():
    assert settings().tenancy.time_zone == "Asia/Shanghai"
    with pytest.raises(ValidationError, match="unknown time zone 'Mars/Olympus'"):
        settings(time_zone="Mars/Olympus")
    s = settings(tenants={"acme": {"time_zone": "Europe/Berlin"}, "bad": {"time_zone": "nowhere"}})
    assert tenants.policy(s, "acme").time_zone == "Europe/Berlin"
    assert tenants.policy(s, "other").time_zone == "Asia/Shanghai"
    with pytest.raises(ValidationError, match="unknown time zone"):
        tenants.policy(s, "bad")


def test_the_prompt_block_names_the_day_weekday_zone_and_the_time_asked():
    block = dates.prompt_block(asked("去年的个税"))
    assert block.startswith("今天是 2026-12-02（星期三，Asia/Shanghai），即提问日。Today is 2026-12-02 (Wednesday")
    assert "今年 is 2026" in block and "never present it as current" in block
    assert block.endswith("问题所指时间 / time asked about: 去年（2025-01-01 至 2025-12-31）")
    assert "问题所指时间" not in dates.prompt_block(asked("增值税征收率"))
    assert "\n" not in dates.prompt_block(asked(), rules=False)


async def test_the_system_prompt_carries_the_day_asked_in_the_tenants_zone_and_keeps_it_on_resume():
    model = FunctionModel(lambda messages, tools: Reply(content="答。"))
    zones = {"default": {"time_zone": "America/Los_Angeles"}}
    sim = Sim(model, tenants=zones)
    asked_at = datetime(2027, 1, 1, 5, 0, tzinfo=UTC)  # 2027-01-01 in Shanghai, still 2026-12-31 in Los Angeles
    q = question("今年的增值税征收率是多少？", occurred_at=asked_at)
    sim.now = asked_at
    state = await sim.ask(q)
    system = model.calls[0][0][0]["content"]
    assert "今天是 2026-12-31（星期四，America/Los_Angeles）" in system and "今年 is 2026" in system
    assert "今年（2026-01-01 至 2026-12-31）" in system
    assert state.messages[0]["content"] == prompt.SYSTEM_PROMPT  # the checkpoint keeps the plain prompt
    assert state.asked_on == date(2026, 12, 31) and state.time_zone == "America/Los_Angeles"
    # resumed from its checkpoint after local midnight, on a replica whose settings changed: the same day
    started = planning.start(Sim(model, tenants=zones, task_deadline_s=86400).deps, q, ["kb_search"], []).state
    again = TaskState.model_validate_json(started.model_dump_json())  # the checkpoint, read back
    other = Sim(model, time_zone="Europe/Berlin", tenants={}, task_deadline_s=86400)
    plan = planning.plan_step(other.deps, again, asked_at + timedelta(hours=3, minutes=2))
    assert "今天是 2026-12-31（星期四，America/Los_Angeles）" in plan.messages[0]["content"]


def test_a_checkpoint_from_before_the_rule_dates_by_its_creation_time():
    state = TaskState(task_id="t", session_id="s", tenant_id="default", question="现在呢", allowed_tools=[],
                      created_at=datetime(2026, 6, 30, 17, 0, tzinfo=UTC))
    assert state.asked() == Asked(date(2026, 7, 1), "Asia/Shanghai", Period(date(2026, 7, 1), date(2026, 7, 1), "现在", True))


# ------------------------------------------------------------------ V2: status and effective date
def test_a_passages_header_states_its_status_and_dates_on_the_day_asked():
    assert versions.header(VAT, TODAY) == "现行有效；2026-01-01 起施行；本版本 2024-12-25 公布"
    assert versions.header(VAT, date(2025, 6, 1)) == "尚未施行；2026-01-01 起施行；本版本 2024-12-25 公布"
    assert versions.header(TRADEMARK_NEXT, TODAY).startswith("尚未施行；2027-01-01 起施行")
    assert versions.header(TRADEMARK_NEXT, None).startswith("现行有效")  # no day: laws.db's status as it is
    assert versions.header(ARBITRATION_OLD, TODAY) == "历史版本；1995-09-01 起施行，2026-03-01 失效；本版本 2017-09-01 公布"
    assert versions.header({"status": "现行有效", "effective_date": "2021-01-01", "version_date": "2021-01-01"},
                           TODAY) == "现行有效；2021-01-01 起施行"
    assert versions.header({"section": "住宿标准", "version_date": "2026-05-01"}, TODAY) is None  # a user's document
    assert versions.in_force_from(LABOUR) == date(2012, 12, 28)  # an amended law's text dates from the amendment


# ------------------------------------------------------------------ V3: time notes
def test_a_question_before_the_texts_effective_date_is_flagged():
    n = versions.note(VAT, asked("2024年小规模纳税人的征收率"))
    assert n and "2024年早于此条文的施行日期 2026-01-01；此为现行文本" in n and "不在知识库中" in n
    partly = versions.note(LABOUR, asked("2012年劳务派遣"))
    assert partly and "自 2012-12-28 起施行，晚于问题所问时间的开始（2012-01-01）" in partly
    assert versions.note(VAT, asked("增值税征收率")) is None  # in force on the day asked
    assert versions.note(VAT, asked("2026年的征收率")) is None  # in force all that year
    assert versions.note(LABOUR, asked("2015年")) is None
    assert versions.note({"section": "x"}, asked("2024年")) is None  # not a law passage


def test_a_text_not_yet_in_force_is_flagged_for_current_questions_only():
    n = versions.note(TRADEMARK_NEXT, asked("商标注册要多久"))
    assert n and "自 2027-01-01 起施行，提问日 2026-12-02 尚未生效" in n and "现在适用的是此前的版本" in n
    assert "今年尚未生效" in versions.note(TRADEMARK_NEXT, asked("今年商标法"))
    assert versions.note(TRADEMARK_NEXT, asked("明年商标法")) is None  # the right version for 2027
    assert "此为尚未施行的新文本，2024年适用的版本" in versions.note(TRADEMARK_NEXT, asked("2024年商标法"))


def test_a_superseded_text_says_when_it_stopped():
    n = versions.note(ARBITRATION_OLD, asked("2026年仲裁"))
    assert n and "历史版本，2026-03-01 起不再适用" in n
    assert versions.note(ARBITRATION_OLD, asked("2020年仲裁")) is None


# ------------------------------------------------------------------ V4: the filter decision
def test_superseded_text_never_enters_a_current_question():
    for q in ("仲裁时效多久", "现在仲裁时效多久", "今年仲裁时效", "最新仲裁法", "2026年仲裁", "明年"):
        assert not versions.admissible(ARBITRATION_OLD, asked(q)), q
    for status in ("已废止", "已被修改"):
        assert not versions.admissible({**ARBITRATION_OLD, "status": status}, asked("现在"))
    assert versions.admissible(ARBITRATION_OLD, asked("2020年仲裁"))  # in force then
    assert not versions.admissible(ARBITRATION_OLD, asked("1990年仲裁"))  # before it began
    assert not versions.admissible({**ARBITRATION_OLD, "effective_until": "2019-01-01"}, asked("2020年"))  # over by then
    assert versions.admissible(TRADEMARK_NEXT, asked("现在")) and versions.admissible({"x": 1}, asked("现在"))


# ------------------------------------------------------------------ rendering for the model and the reader
def numbered(meta: dict, index: int = 1, kind: str = "original") -> NumberedEvidence:
    return NumberedEvidence(chunk_id=f"c{index}", document_id=f"d{index}", kind=kind, title="《中华人民共和国增值税法》",
                            locator="第十一条", text="简易计税方法的征收率为百分之三。", metadata=meta, index=index)


def test_the_model_reads_the_dates_inside_the_label_and_the_time_note_outside_the_wrapper():
    text = prompt.render_evidence([numbered(VAT), numbered({}, 2)], asked("2024年的征收率"))
    assert "[1] 《中华人民共和国增值税法》 第十一条（知识库原文；现行有效；2026-01-01 起施行；本版本 2024-12-25 公布）" in text
    assert "[2] 《中华人民共和国增值税法》 第十一条（知识库原文）\n" in text  # no status: no dates
    note_at = text.index("[1] 时间提示：问题所问的2024年早于")
    assert note_at > text.index(prompt.CLOSE) and "<untrusted_content>" not in text[note_at:note_at + 120]
    assert "时间提示" not in prompt.render_evidence([numbered(VAT)], asked("增值税征收率"))


def test_the_retrieval_only_answer_shows_the_effective_date_and_the_note():
    answer = fallback.compose("2024年的增值税征收率", [numbered(VAT)], False, asked("2024年的增值税征收率"))
    assert "《中华人民共和国增值税法》第十一条（现行有效；2026-01-01 起施行；本版本 2024-12-25 公布）：" in answer
    assert re.search(r"\[1\]\n时间提示：问题所问的2024年早于此条文的施行日期 2026-01-01", answer)
    plain = fallback.compose("增值税征收率", [numbered(VAT)], False, asked("增值税征收率"))
    assert "2026-01-01 起施行" in plain and "时间提示" not in plain


async def test_a_this_year_question_is_answered_with_the_day_asked_and_superseded_text_stays_out():
    """The model sees the day asked (and what 今年 means) and the dated passage; the superseded passage a
    search returned never reaches it or the pool (rule V4; named in the trace)."""
    current = EvidenceItem(chunk_id="vat11", document_id="law:vat", title="《中华人民共和国增值税法》", locator="第十一条",
                           text="征收率为百分之三。", metadata=VAT, score=0.8)
    old = EvidenceItem(chunk_id="old", document_id="law:old", title="《中华人民共和国仲裁法》", locator="第九条",
                       text="旧条文。", metadata=ARBITRATION_OLD, score=0.7)

    def answer(messages, tools):
        tool = [m for m in messages if m["role"] == "tool"]
        if not tool:
            return Reply(tool_calls=[kb("增值税 征收率")])
        day = re.search(r"今天是 (\d{4}-\d{2}-\d{2})", messages[0]["content"]).group(1)
        return Reply(content=f"截至 {day}，征收率为百分之三[1]。")

    model = FunctionModel(answer)
    sim = Sim(model, tools={"kb_search": lambda c: ok(c, old, current)})
    sim.now = datetime(2026, 12, 2, 1, 30, tzinfo=UTC)
    state = await sim.ask(question("今年增值税征收率是多少？", occurred_at=sim.now))
    assert state.status == "completed" and state.answer.startswith("截至 2026-12-02，")
    assert [e.chunk_id for e in state.evidence] == ["vat11"]
    assert {"phase": "versions", "kept_out": ["old"]} in state.trace
    (tool_text,) = sim.tool_messages()
    assert "现行有效；2026-01-01 起施行" in tool_text and "仲裁法" not in tool_text


def test_rule_v5_a_relative_year_keeps_the_question_out_of_the_semantic_cache() -> None:
    from services.orchestrator.agent import cache  # noqa: PLC0415

    assert dates.names_relative_year("今年的个税起征点是多少？") and dates.names_relative_year("what changed last year?")
    assert not dates.names_relative_year("2024年的个税起征点是多少？") and not dates.names_relative_year("现在的征收率？")
    assert not dates.names_relative_year("说明年度预算")  # 明年 inside another word
    assert cache.lookup_outcome(True, True, True, relative_year=True) == "off"
    assert cache.lookup_outcome(True, True, True, relative_year=False) == "miss"
