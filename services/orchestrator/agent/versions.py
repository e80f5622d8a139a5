"""Which version of a law a passage is, said to the model and the reader (pure; rules V2-V4,
docs/agent-rules.md).

A law passage's evidence ``metadata`` carries, from ``laws.db`` (``services.retriever.documents.law_chunks``):
``status`` (现行有效, or for superseded text 历史版本 / 已废止 / 已被修改), ``effective_date`` (the day the law, or
its comprehensive revision, took effect), ``version_date`` (the day this text was adopted: an amendment's date)
and, for superseded text only, ``effective_until`` (the day the next version took effect). Dates are
``YYYY-MM-DD``. Evidence without a ``status`` (users' documents, web pages) is not a law version and is left
alone.

- ``header`` (rule V2): 「现行有效；2026-01-01 起施行」, 「尚未施行；2027-01-01 起施行」 (a current text whose
  effective date is after the day asked), 「历史版本；1995-09-01 起施行，2026-03-01 失效」.
- ``note`` (rule V3): a time note when the time a question asks about starts before this text took
  effect (``in_force_from``: the later of its effective and version dates), or ends after a superseded text
  stopped applying.
- ``admissible`` (rule V4): superseded text enters a task's evidence only for a question about a time
  wholly in the past, and only when it applied then; for a current question it never does.
"""

from __future__ import annotations

from datetime import date

from services.orchestrator.agent.dates import Asked

CURRENT = "现行有效"
SUPERSEDED = frozenset({"历史版本", "已废止", "已被修改"})
NOT_YET = "尚未施行"


def _day(value: object) -> date | None:
    try:
        return date.fromisoformat(str(value)[:10]) if value else None
    except ValueError:
        return None


def is_law(meta: dict) -> bool:
    """True for a law passage (its metadata has a ``status``)."""
    return bool(meta.get("status"))


def in_force_from(meta: dict) -> date | None:
    """The first day this text applies: the later of ``effective_date`` and ``version_date`` (an amended
    law keeps its original effective date in laws.db; its text dates from the amendment). None: unknown."""
    days = [d for d in (_day(meta.get("effective_date")), _day(meta.get("version_date"))) if d]
    return max(days) if days else None


def status_on(meta: dict, today: date | None) -> str:
    """The passage's status on ``today``: laws.db's ``status``, except 尚未施行 for a current text whose
    effective date is after ``today`` (None: laws.db's status as it is)."""
    status = str(meta.get("status") or "")
    effective = _day(meta.get("effective_date"))
    if status == CURRENT and today is not None and effective is not None and effective > today:
        return NOT_YET
    return status


def header(meta: dict, today: date | None) -> str | None:
    """Rule V2: 「<status on today>；<effective date> 起施行[；本版本 <version date> 公布][，<until> 失效]」, or
    None for evidence that is not a law passage."""
    if not is_law(meta):
        return None
    parts = [status_on(meta, today)]
    effective, version, until = (_day(meta.get(k)) for k in ("effective_date", "version_date", "effective_until"))
    if effective:
        parts.append(f"{effective} 起施行" + (f"，{until} 失效" if until else ""))
    if version and version != effective:
        parts.append(f"本版本 {version} 公布")
    return "；".join(parts)


def note(meta: dict, asked: Asked) -> str | None:
    """Rule V3: the time note of a law passage for the question ``asked``, or None when the text applied
    throughout the time asked about (the day asked, when the question names no time)."""
    if not is_law(meta):
        return None
    start, end = asked.window
    begins, until = in_force_from(meta), _day(meta.get("effective_until"))
    what = asked.period.phrase if asked.period else f"提问日 {asked.today} "
    missing = "此前适用的版本不在知识库中（知识库只收录现行文本）"
    if begins and begins > end:
        if asked.period is None or (asked.period.current and begins > asked.today):
            return (f"时间提示：此条文自 {begins} 起施行，{what}尚未生效；现在适用的是此前的版本，{missing}。"
                    f" Time note: this text takes effect on {begins}, after the day asked ({asked.today}).")
        text = "尚未施行的新文本" if begins > asked.today else "现行文本"
        return (f"时间提示：问题所问的{what}早于此条文的施行日期 {begins}；此为{text}，{what}适用的版本不在知识库中。"
                f" Time note: the time asked about is before this text took effect ({begins}).")
    if begins and begins > start:
        return (f"时间提示：此条文自 {begins} 起施行，晚于问题所问时间的开始（{start}）；{missing}。"
                f" Time note: this text took effect on {begins}, within the time asked about.")
    if until and until <= end:  # the note is outside the untrusted wrapper: only a known status is named
        status = meta.get("status") if meta.get("status") in SUPERSEDED else "旧版本"
        return (f"时间提示：此条文为{status}，{until} 起不再适用。"
                f" Time note: this text stopped applying on {until}.")
    return None


def admissible(meta: dict, asked: Asked) -> bool:
    """Rule V4: may this passage enter the task's evidence? Anything but superseded law text: yes.
    Superseded text (历史版本, 已废止, 已被修改): only when the question is about a time wholly in the past
    (``asked.current`` False) and the text applied during it."""
    if str(meta.get("status") or "") not in SUPERSEDED:
        return True
    if asked.current:
        return False
    start, end = asked.window
    begins, until = in_force_from(meta), _day(meta.get("effective_until"))
    return (begins is None or begins <= end) and (until is None or until > start)
