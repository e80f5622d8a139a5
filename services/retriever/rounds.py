"""The rounds of a ``kb_search`` after the first (rules K9 and K12, docs/rules.md): the caller's sub-queries and
the model's rewrite of the question (``modelhelp.ModelHelp.rewrite``), merged into one list; and the record of
each round made (``Attempt``)."""

from __future__ import annotations

from dataclasses import dataclass, field

MAX_SUB_QUERIES = 2
"""Sub-query rounds per search, the caller's (rule K9) and the rewrite's (rule K12) together."""


@dataclass(frozen=True)
class Rewrite:
    """The model's rewrite (rule K12): ``query`` (None: none given) and ``sub_queries`` (at most ``MAX_SUB_QUERIES``)."""

    query: str | None
    sub_queries: list[str] = field(default_factory=list)


def plan_rounds(query: str, sub_queries: list[str] | None, rewrite: Rewrite | None) -> list[tuple[str, str]]:
    """The rounds after the first, as (kind, query): the rewrite's query (kind ``rewrite``) when it differs from
    ``query``, then the sub-queries, the caller's (rule K9, ``sub:n``) before the rewrite's (``rewrite:n``), at most
    ``MAX_SUB_QUERIES`` in all, each stripped; blanks, non-strings and repeats of an earlier query are dropped
    (fail-open: never an error)."""
    seen, rounds, count = {query.strip()}, [], {"sub": 0, "rewrite": 0}
    main = (rewrite.query or "").strip() if rewrite is not None else ""
    if main and main not in seen:
        seen.add(main)
        rounds.append(("rewrite", main))
    offered = [("sub", q) for q in sub_queries or []] + [("rewrite", q) for q in (rewrite.sub_queries if rewrite else [])]
    for kind, sub in offered:
        text = sub.strip() if isinstance(sub, str) else ""
        if text and text not in seen and count["sub"] + count["rewrite"] < MAX_SUB_QUERIES:
            seen.add(text)
            count[kind] += 1
            rounds.append((f"{kind}:{count[kind]}", text))
    return rounds


@dataclass
class Attempt:
    """One search round: ``kind`` (original | compressed | topic:<name> | sub:n | rewrite[:n]), the query, hits returned,
    hits kept by the threshold, the best dense cosine kept; or a helper call (``assist.py``: ``<stage>:<outcome>``,
    ``query`` = why it failed, ``duration_ms`` = how long the search waited for it)."""

    kind: str
    query: str
    returned: int
    kept: int
    best: float | None
    duration_ms: float | None = None
