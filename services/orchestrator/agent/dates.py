"""When a question is asked and what time it is about (pure; rules V1, V2 of docs/agent-rules.md).

- ``local_date``: the day a task was asked, in its tenant's time zone (rule V1: the task's creation
  time, so a resumed or retried task keeps its date).
- ``parse_period``: the time a question names, as a ``Period`` of days: a year (``2024年``,
  ``二〇二四年``, ``2024年度``, ``in 2024``), a month (``2024年3月``), a day (``2024年3月1日``,
  ``2024-03-01``), a relative year (今年/本年, 去年/上年, 前年, 明年, 后年; this/last/next year) or a
  word meaning "now" (现在, 目前, 当前, 现行, 最新, 如今, 今天…; now, currently, latest…). Several
  named times give the span from the earliest to the latest; None: the question names no time.
- ``prompt_block``: what the system prompt says about the date (rule V1).

``Asked`` bundles a task's date and its question's period; ``services.orchestrator.agent.versions``
uses it to label evidence (rules V2-V4).
"""

from __future__ import annotations

import re
from calendar import monthrange
from dataclasses import dataclass
from datetime import UTC, date, datetime
from zoneinfo import ZoneInfo

_CN_DIGITS = str.maketrans("〇零一二三四五六七八九", "00123456789")
_YEAR = r"((?:19|20)\d{2}|[一二][〇零一二三四五六七八九]{3})"
_DAY = re.compile(r"(?<!\d)((?:19|20)\d{2})\s*(?:年|-|/|\.)\s*(\d{1,2})\s*(?:月|-|/|\.)\s*(\d{1,2})\s*(?:日|号)?(?!\d)")
_MONTH = re.compile(_YEAR + r"\s*年\s*(\d{1,2})\s*月(?!\s*\d)")
_YEAR_ZH = re.compile(r"(?<!\d)" + _YEAR + r"\s*年(?:度)?")
_YEAR_EN = re.compile(r"\b(?:in|for|during|of|since|until|by|year|fy)\s+((?:19|20)\d{2})\b"
                      r"|\b((?:19|20)\d{2})\s+(?:tax\s+year|fiscal\s+year)\b", re.IGNORECASE)
_RELATIVE = {"今年": 0, "本年": 0, "本年度": 0, "去年": -1, "上年": -1, "上一年": -1, "前年": -2,
             "明年": 1, "下一年": 1, "后年": 2, "this year": 0, "last year": -1, "next year": 1}
_NOT_AFTER = {"明年": "说证表声标注阐查指", "上年": "以之向往加累线", "前年": "提目当之以此", "后年": "以之此然最今",
              "本年": "基成资样根版账课剧文日读", "今年": "", "去年": "除"}
"""Characters that, just before a relative-year word, make it part of another word (说明年度, 以上年满, 提前年,
以后年度, 基本年金)."""
_RELATIVE_RE = re.compile("|".join(
    (f"(?<![{_NOT_AFTER[w]}])" if _NOT_AFTER.get(w) else "") + re.escape(w)
    for w in sorted(_RELATIVE, key=len, reverse=True)), re.IGNORECASE)
_NOW = re.compile(r"现在|目前|当前|现行|最新|如今|眼下|当下|今天|今日|现阶段|截至目前|截止目前"
                  r"|\b(?:now|nowadays|currently|current|latest|today|at present)\b", re.IGNORECASE)
_WEEKDAYS = "一二三四五六日"
DEFAULT_ZONE = "Asia/Shanghai"
"""The time zone of a tenant without one (setting ``time_zone``) and of a checkpoint from before rule V1."""


@dataclass(frozen=True)
class Period:
    """The days a question is about, ``start`` to ``end`` inclusive; ``phrase``: the words that named
    it (e.g. ``2024年``, ``今年``, ``现在``); ``current``: it contains the day asked (今年, 现在, the
    current year) or lies after it, so the law in force is the current text (rule V4)."""

    start: date
    end: date
    phrase: str
    current: bool

    def label(self) -> str:
        """``2024年（2024-01-01 至 2024-12-31）`` or ``现在（2026-12-02）`` for one day."""
        span = self.start.isoformat() if self.start == self.end else f"{self.start} 至 {self.end}"
        return f"{self.phrase}（{span}）"


@dataclass(frozen=True)
class Asked:
    """A task's day (``today``, in its tenant's zone ``zone``) and its question's ``period`` (None:
    the question names no time, i.e. the law in force on ``today``)."""

    today: date
    zone: str
    period: Period | None = None

    @property
    def window(self) -> tuple[date, date]:
        """The days the question is about: its period, else ``(today, today)``."""
        return (self.period.start, self.period.end) if self.period else (self.today, self.today)

    @property
    def current(self) -> bool:
        """True when the question is about the law in force now (no time named, or a current period)."""
        return self.period is None or self.period.current


def asked(today: date, zone: str, question: str) -> Asked:
    """``Asked`` for a task asked on ``today`` (in ``zone``) with ``question``: its period parsed."""
    return Asked(today, zone, parse_period(question, today))


def local_date(at: datetime, zone: str) -> date:
    """The calendar day of the instant ``at`` (timezone-aware; naive means UTC) in the IANA time zone
    ``zone``. Raises ``zoneinfo.ZoneInfoNotFoundError`` for an unknown zone."""
    aware = at if at.tzinfo else at.replace(tzinfo=UTC)
    return aware.astimezone(ZoneInfo(zone)).date()


def _year(text: str) -> int:
    return int(text.translate(_CN_DIGITS))


def _safe_day(y: int, m: int, d: int) -> date | None:
    if not (1 <= m <= 12) or not (1 <= d <= monthrange(y, m)[1]):
        return None
    return date(y, m, d)


def _named(question: str, today: date) -> list[tuple[date, date, str]]:
    """Every explicit or relative time ``question`` names, as (start, end, phrase); days and months
    first, their text blanked so their year is not counted again."""
    found: list[tuple[date, date, str]] = []
    rest = question
    for m in _DAY.finditer(question):
        day = _safe_day(int(m.group(1)), int(m.group(2)), int(m.group(3)))
        if day is not None:
            found.append((day, day, m.group(0).strip()))
            rest = rest.replace(m.group(0), " " * len(m.group(0)), 1)
    for m in _MONTH.finditer(rest):
        y, mo = _year(m.group(1)), int(m.group(2))
        if 1 <= mo <= 12:
            found.append((date(y, mo, 1), date(y, mo, monthrange(y, mo)[1]), m.group(0).strip()))
            rest = rest.replace(m.group(0), " " * len(m.group(0)), 1)
    for m in [*_YEAR_ZH.finditer(rest), *_YEAR_EN.finditer(rest)]:
        y = _year(next(g for g in m.groups() if g))
        found.append((date(y, 1, 1), date(y, 12, 31), m.group(0).strip()))
    for m in _RELATIVE_RE.finditer(rest):
        y = today.year + _RELATIVE[m.group(0).lower()]
        found.append((date(y, 1, 1), date(y, 12, 31), m.group(0)))
    return found


def names_relative_year(question: str) -> bool:
    """True when ``question`` names a year relative to the day asked (今年, 去年, 明年, last year …; rule V5)."""
    return _RELATIVE_RE.search(question) is not None


def parse_period(question: str, today: date) -> Period | None:
    """The time ``question`` is about, relative to the day it was asked (``today``); None when it
    names none. Explicit and relative times win over "now" words; several give the span from the
    earliest start to the latest end, their phrases joined by ``、``."""
    named = _named(question, today)
    if named:
        start, end = min(n[0] for n in named), max(n[1] for n in named)
        phrases = list(dict.fromkeys(n[2] for n in named))
        return Period(start, end, "、".join(phrases), current=end >= today)
    now = _NOW.search(question)
    return Period(today, today, now.group(0), current=True) if now else None


def prompt_block(asked: Asked, rules: bool = True) -> str:
    """What the system prompt says about time (rule V1): the day asked with its weekday and zone, and
    with ``rules`` how to treat dates and versions (rules V2-V4) and the question's period."""
    d = asked.today
    line = (f"今天是 {d.isoformat()}（星期{_WEEKDAYS[d.weekday()]}，{asked.zone}），即提问日。"
            f"Today is {d.isoformat()} ({d.strftime('%A')}, {asked.zone}), the day the question was asked.")
    if not rules:
        return line
    lines = [line, (
        "Dates and versions: answer with the law in force on the day asked unless the question names another time "
        f"(现在/目前/最新 mean the day asked; 今年 is {d.year}). Each knowledge-base passage states its status and "
        "its effective date (施行日期). A passage marked 尚未施行, 历史版本, 已废止 or 已被修改 is not the law in force: "
        "never present it as current. When a passage carries a 时间提示 (time note), say it in the answer: e.g. the "
        "passage is today's text, in force from its effective date, and the version of the time asked about is not in "
        "the knowledge base.")]
    if asked.period is not None:
        lines.append(f"问题所指时间 / time asked about: {asked.period.label()}")
    return "\n".join(lines)
