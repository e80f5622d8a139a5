"""Checks the labels of ``bench/retrieval``'s question files against the law corpus (issue 40).

A row is ``{id, question, law_name, article_no}`` plus, in the hard set (``laws_hard.jsonl``), ``kind`` (one of
``KINDS``) and optionally ``also`` (``[{law_name, article_no}]``: the other article a two-article question needs).
A label is good when its law is a current law of ``laws.db`` and the article is one of that law's current
articles; a question is rejected when it copies its article (a run of ``COPY_CHARS`` characters in common).

    .venv/bin/python -m ops.retrieval_labels bench/retrieval/laws_hard.jsonl     # exit 1 and the problems, or "ok"
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

KINDS = ("referenced", "list_item", "lookalike", "everyday", "in_force", "numbers", "two_articles")
"""The seven kinds of issue 40, in its table's order: the fact sits in an article another article points to; one
item of a long list; a look-alike law is the trap; everyday wording beyond tax; the version in force; numbers,
periods and thresholds; two articles needed."""
COPY_CHARS = 12
"""A question sharing this many consecutive characters with its article copies it (people do not type that)."""

Corpus = dict[str, dict[str, str]]
"""``{law_name: {article_no: text}}`` of the current laws."""


def corpus_articles(law_names: list[str] | None = None) -> Corpus:
    """The current articles of ``law_names`` (all laws when None) from laws.db: ``{law_name: {article_no: text}}``.

    Raises ``LawDbError`` when laws.db is missing or a name is not a current law.
    """
    from services.retriever import lawdb

    laws = lawdb.list_laws(law_names=law_names)
    arts = lawdb.articles_by_law(laws)
    return {law.law_name: {a.article_no: a.text for a in arts[law.law_id]} for law in laws}


def _copied(question: str, text: str, n: int = COPY_CHARS) -> str | None:
    """The first run of ``n`` characters of ``question`` that ``text`` also holds, else None."""
    return next((question[i:i + n] for i in range(len(question) - n + 1) if question[i:i + n] in text), None)


def label_problems(rows: list[dict[str, Any]], corpus: Corpus, *, kinds: bool = False) -> list[str]:
    """Every problem of ``rows`` against ``corpus`` as ``"<id>: <what>"`` (empty list = all labels good): an
    unknown law or article (for the label and each ``also``), a repeated id or question, a question copying its
    article; with ``kinds`` also a missing or unknown ``kind``."""
    out: list[str] = []
    seen_ids: set[str] = set()
    seen_q: set[str] = set()
    for row in rows:
        rid = str(row.get("id"))
        if rid in seen_ids:
            out.append(f"{rid}: repeated id")
        if row.get("question") in seen_q:
            out.append(f"{rid}: repeated question")
        seen_ids.add(rid)
        seen_q.add(row.get("question"))
        if kinds and row.get("kind") not in KINDS:
            out.append(f"{rid}: kind {row.get('kind')!r} is not one of {', '.join(KINDS)}")
        for label in [row, *row.get("also", [])]:
            law, no = label.get("law_name"), label.get("article_no")
            if law not in corpus:
                out.append(f"{rid}: {law} is not a current law of the corpus")
            elif no not in corpus[law]:
                out.append(f"{rid}: {law} has no current article {no}")
        text = corpus.get(row.get("law_name"), {}).get(row.get("article_no"), "")
        copied = _copied(str(row.get("question", "")), text)
        if copied:
            out.append(f"{rid}: the question copies its article ({copied!r})")
    return out


def main(argv: list[str] | None = None) -> int:
    """Check each JSON Lines file named in ``argv`` (hard-set rows need a ``kind`` when the name has ``hard``);
    print the problems and return 1, or print ``ok`` and return 0."""
    from ops.retrieval_gate import labelled

    problems: list[str] = []
    corpus = corpus_articles()
    for name in argv if argv is not None else sys.argv[1:]:
        rows = labelled(Path(name).name)
        problems += [f"{name}: {p}" for p in label_problems(rows, corpus, kinds="hard" in name)]
    print("\n".join(problems) if problems else "ok")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
