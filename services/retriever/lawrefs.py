"""Find the references an article of Chinese law makes to other articles (rule K14, docs/retrieval.md
"The law's own references"): patterns only, no model.

``parse(text)`` returns ``RawRef``s in text order, each one of:

- ``article``: an article named by number, with the law it belongs to as written: ``law`` is the
  title inside 《》 (「《中华人民共和国民法典》第一千零六十五条」), ``"self"`` for 本法 / 本条例 / 本规定 /
  本办法 ... and for a bare 「第二十三条」 (in a statute a bare article number is the same law's), and
  a corpus law's name written without 《》 right before the number (「适用刑法第三百八十二条」, ``names``) is a title;
  a list continued by 、 和 及 或者 至 keeps the law of its first member (「本法第十条、第十二条至第十四条」:
  10, 12, 13, 14; a range ``至`` expands up to ``MAX_RANGE`` articles). ``number`` is the article's
  number, ``sub`` its 之N (「第二十三条之一」 → 23, 1; 0 when absent). A trailing 第N款 / 第（N）项 is kept
  in ``tail`` (the reference still targets the article);
- ``previous``: 前条 (the article before this one, same law);
- ``intra``: 前款, 前两款, 本条, 本款, a bare 第N款 or 第N项: the same article (counted, not followed);
- ``law``: a title in 《》 not followed by an article number (「依照《中华人民共和国税收征收管理法》的规定」):
  the whole law, no article to follow;
- ``chapter``: 本法第N章 / 第N节 (a part of a law, not an article).

``chinese_number`` reads the numerals of article numbers (零〇一二两三四五六七八九十百千, Arabic digits).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Literal

RefKind = Literal["article", "previous", "intra", "law", "chapter"]

MAX_RANGE = 30
"""Rule K14: a range 「第N条至第M条」 expands to at most this many articles (a longer one is cut)."""

_DIGITS = {"零": 0, "〇": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9}
_UNITS = {"十": 10, "百": 100, "千": 1000}
_NUM = r"[零〇一二两三四五六七八九十百千\d]+"
_SELF = r"本(?:法|条例|规定|办法|决定|细则|解释|规则|准则|通则|修正案)"

_TOKENS = (
    rf"《(?P<title>[^《》\n]{{1,80}})》"
    rf"|(?P<selfword>{_SELF})"
    rf"|第(?P<num>{_NUM})条(?:之(?P<sub>[一二三四五六七八九十]+))?"
    rf"(?P<tail>(?:第{_NUM}款)?(?:第[（(]?[一二三四五六七八九十\d]+[）)]?项)?)"
    rf"|第(?P<chap>{_NUM})[章节编]"
    rf"|(?P<prev>前条)"
    rf"|(?P<intra>前[一二两三四五]?款|本条(?:第{_NUM}款)?(?:第[（(]?[一二三四五六七八九十\d]+[）)]?项)?|本款"
    rf"|第{_NUM}款(?:第[（(]?[一二三四五六七八九十\d]+[）)]?项)?|第[（(][一二三四五六七八九十\d]+[）)]项)"
)
_TOKEN = re.compile(_TOKENS)


@functools.lru_cache(maxsize=4)
def token_pattern(names: frozenset[str] = frozenset()) -> re.Pattern[str]:
    """The token pattern; with ``names`` (law names and short names of the corpus) a name written without
    《》 right before an article number (「依照刑法第三百八十二条」) is a title too."""
    if not names:
        return _TOKEN
    alts = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
    return re.compile(rf"(?P<plain>{alts})(?=第{_NUM}条)|" + _TOKENS)


_CONTINUE = re.compile(r"^(?:、|，|,|和|及|以及|或者|或|与|至|到)$")
_RANGE = frozenset({"至", "到"})


class NumeralError(ValueError):
    """Text that is not a Chinese or Arabic integer numeral."""


def chinese_number(text: str) -> int:
    """The integer a numeral names: 「一千零六十五」 1065, 「二十三」 23, 「十二」 12, 「一百零四」 104,
    「两」 2, 「1065」 1065. Raises ``NumeralError`` for anything else (empty, 「十十」)."""
    if text.isdigit():
        return int(text)
    if not text or any(c not in _DIGITS and c not in _UNITS for c in text):
        raise NumeralError(f"not a numeral: {text!r}")
    total, digit, last_unit = 0, None, 10_000
    for c in text:
        if c in _DIGITS:
            if digit is not None and digit != 0 and _DIGITS[c] != 0:
                raise NumeralError(f"two digits in a row: {text!r}")
            digit = _DIGITS[c]
        else:
            unit = _UNITS[c]
            if unit >= last_unit:
                raise NumeralError(f"units out of order: {text!r}")
            total += (1 if digit is None else digit) * unit
            digit, last_unit = None, unit
    return total + (digit or 0)


@dataclass(frozen=True)
class RawRef:
    """One reference as written: ``kind`` (module docstring), ``law`` (title, ``"self"`` or None),
    ``number``/``sub`` of an article (0 otherwise), ``tail`` (款/项 after it), ``text`` (the match),
    ``start`` (character offset in the article text)."""

    kind: RefKind
    law: str | None
    number: int = 0
    sub: int = 0
    tail: str = ""
    text: str = ""
    start: int = 0


def _number(raw: str) -> int | None:
    try:
        return chinese_number(raw)
    except NumeralError:
        return None


def parse(text: str, names: frozenset[str] = frozenset()) -> list[RawRef]:
    """Every reference in one article's ``text``, in order (see the module docstring); ``names``: the
    corpus's law names, read without 《》 before an article number (``token_pattern``)."""
    out: list[RawRef] = []
    pending: tuple[str, int] | None = None  # a title or 本法 just seen: (law, end offset)
    last: tuple[str, int, int] | None = None  # the last article ref: (law, number, end offset)
    for m in token_pattern(names).finditer(text):
        gap = text[(last[2] if last else 0):m.start()].strip()
        word = m.groupdict().get("plain") or m.group("title") or m.group("selfword")
        if word:
            _flush(out, pending, text)
            pending, last = ("self" if word == m.group("selfword") else word, m.end()), None
            continue
        prefix = pending if pending and not text[pending[1]:m.start()].strip() else None
        if prefix is None:
            _flush(out, pending, text)
        pending = None
        if m.group("num") is not None:
            last = _article(out, m, prefix, last, gap)
        else:
            kind = "chapter" if m.group("chap") is not None else "previous" if m.group("prev") else "intra"
            out.append(RawRef(kind, prefix[0] if prefix and kind == "chapter" else "self", text=m.group(0),
                              start=m.start()))
            last = None
    _flush(out, pending, text)
    return out


def _article(out: list[RawRef], m: re.Match[str], prefix: tuple[str, int] | None,
             last: tuple[str, int, int] | None, gap: str) -> tuple[str, int, int] | None:
    """Append the article reference ``m`` (and a range's inner articles); returns the new ``last``."""
    number = _number(m.group("num"))
    if number is None:
        return None
    sub = (_number(m.group("sub")) or 0) if m.group("sub") else 0
    if prefix is not None:
        law = prefix[0]
    elif last is not None and _CONTINUE.match(gap):
        law = last[0]
        if gap in _RANGE and last[1] < number and not sub:
            out += [RawRef("article", law, n, 0, "", m.group(0), m.start())
                    for n in range(last[1] + 1, min(number, last[1] + MAX_RANGE))]
    else:
        law = "self"
    out.append(RawRef("article", law, number, sub, m.group("tail") or "", m.group(0), m.start()))
    return law, number, m.end()


def _flush(out: list[RawRef], pending: tuple[str, int] | None, text: str) -> None:
    """A title not followed by an article number is a reference to the whole law (``law``);
    a bare 本法 is no reference at all."""
    if pending is not None and pending[0] != "self":
        title = pending[0]
        start = text.rfind(title, 0, pending[1])
        out.append(RawRef("law", title, text=f"《{title}》", start=max(start - 1, 0)))
