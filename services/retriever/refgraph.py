"""The law corpus's reference graph: which article cites which (rules K14-K16, docs/retrieval.md
"The law's own references"), built at index time from the article texts (``lawrefs.parse``, no model),
shipped beside the law index as ``law_index/refs.json.gz`` and loaded by the retriever.

Article ids (``ref id``): ``<law_id>:<n>`` for 第n条, ``<law_id>:<n>-<k>`` for 第n条之k (a law's articles
without a readable number: ``<law_id>:p<position>``). Short and stable: the model copies them into
``kb_follow``.

Rule K15 (resolution): an ``article`` reference whose law is ``self`` (本法, 本条例, a bare 第N条) is this
law's article N; one whose law is a title is resolved by the title as written, then with the prefix
中华人民共和国 added or removed (「《民法典》」 → 中华人民共和国民法典); 前条 is the article before this one.
A reference to the article itself and 前款 / 本条 / 第N款 are ``intra`` (counted, never followed).
Unresolved references are counted by reason: ``law_not_in_corpus`` (the title names no current law of
the corpus), ``article_not_in_law`` (the law has no such article), ``amending_text`` (a bare number in
an amendment decision or 修正案 names the amended law's article, in its old numbering: not followed).
Titles without an article (「依照《…法》的规定」) and chapters are counted apart (no article to follow).

File (gzip'd UTF-8 JSON): ``format``, ``corpus`` (``lawindex.corpus_fingerprint()``: a file built from
another corpus is not used), ``built_at``, ``build_command``, ``stats`` (the figures above),
``laws`` ``{law_id: {"name", "articles": [number key of each article in statute order]}}`` and
``edges`` ``{source ref id: [target ref id, ...]}`` (distinct, in text order).
"""

from __future__ import annotations

import gzip
import json
import logging
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from services.retriever import lawdb, lawrefs
from services.retriever.documents import point_id

log = logging.getLogger("conduit.retriever.refgraph")

FORMAT = 1
FILE_NAME = "refs.json.gz"
BUILD_COMMAND = "conduit index build --law-db --refs"
PRC = "中华人民共和国"
AMENDING_TYPES = frozenset({"修改决定", "修正案"})
"""Rule K15: in these documents a bare article number names the amended law's article (old numbering)."""
_ARTICLE_NO = re.compile(r"^第([零〇一二两三四五六七八九十百千\d]+)条(?:之([一二三四五六七八九十]+))?$")


class RefGraphError(RuntimeError):
    """The reference graph file is missing, unreadable or built from another corpus."""


def number_key(article_no: str, arabic: int | None, position: int) -> str:
    """Key of an article within its law: ``"23"``, ``"23-1"`` (第二十三条之一), ``"p<position>"`` when unreadable."""
    m = _ARTICLE_NO.match(article_no or "")
    if m:
        try:
            n = lawrefs.chinese_number(m.group(1))
            return f"{n}-{lawrefs.chinese_number(m.group(2))}" if m.group(2) else str(n)
        except lawrefs.NumeralError:
            pass
    return str(arabic) if arabic is not None and not m else f"p{position}"


def short_name(name: str) -> str:
    """A law's name without its 中华人民共和国 prefix (「民法典」), as labels show it."""
    return name[len(PRC):] if name.startswith(PRC) and len(name) > len(PRC) else name


def label(law_name: str, key: str) -> str:
    """Short label of an article: 「《民法典》第1065条」, 「《刑法》第120条之1」."""
    n, _, sub = key.partition("-")
    return f"《{short_name(law_name)}》" + (f"第{n}条" + (f"之{sub}" if sub else "") if not n.startswith("p") else "")


@dataclass
class Resolver:
    """Resolves ``lawrefs.RawRef``s of one corpus (rule K15). ``laws``: ``{law_id: (name, doc_type,
    [number keys in statute order])}``."""

    laws: dict[str, tuple[str, str | None, list[str]]]
    stats: Counter = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self.by_title: dict[str, str] = {}
        for law_id, (name, _, _) in self.laws.items():
            self.by_title.setdefault(name, law_id)
        for law_id, (name, _, _) in self.laws.items():  # short and prefixed forms never shadow a real name
            self.by_title.setdefault(short_name(name), law_id)
            self.by_title.setdefault(PRC + name, law_id)
        self.keys = {law_id: set(keys) for law_id, (_, _, keys) in self.laws.items()}

    def law_of(self, title: str) -> str | None:
        """Law id a title names (as written, then with 中华人民共和国 added or removed), or None."""
        t = re.sub(r"\s+", "", title)
        return self.by_title.get(t) or self.by_title.get(short_name(t))

    def resolve(self, law_id: str, position: int, ref: lawrefs.RawRef) -> str | None:
        """Target ref id of ``ref`` made by article ``position`` of ``law_id`` (None: intra or unresolved,
        counted in ``stats`` under ``intra`` / ``unresolved:<reason>`` / ``law:<outcome>`` / ``chapter``)."""
        name, doc_type, keys = self.laws[law_id]
        if ref.kind in ("intra", "chapter"):
            self.stats[ref.kind] += 1
            return None
        if ref.kind == "law":
            self.stats["law:" + ("resolved" if self.law_of(ref.law or "") else "not_in_corpus")] += 1
            return None
        self.stats["found"] += 1
        if ref.kind == "previous":
            target_law, key = law_id, keys[position - 1] if position > 0 else None
        elif ref.law == "self":
            if doc_type in AMENDING_TYPES:
                return self._unresolved("amending_text")
            target_law, key = law_id, f"{ref.number}-{ref.sub}" if ref.sub else str(ref.number)
        else:
            target_law = self.law_of(ref.law or "")
            if target_law is None:
                return self._unresolved("law_not_in_corpus")
            key = f"{ref.number}-{ref.sub}" if ref.sub else str(ref.number)
        if key is None or key not in self.keys[target_law]:
            return self._unresolved("article_not_in_law")
        if target_law == law_id and key == keys[position]:
            self.stats["intra"] += 1
            self.stats["found"] -= 1
            return None
        self.stats["resolved"] += 1
        return f"{target_law}:{key}"

    def _unresolved(self, reason: str) -> None:
        self.stats["unresolved:" + reason] += 1
        return None


def build(out: Path | None = None) -> dict:
    """Parse and resolve every current article's references; write the file (``out`` or
    ``law_index/refs.json.gz``) atomically. Returns the file's header (no laws/edges) plus ``path``
    and ``bytes``. Raises ``LawDbError``."""
    from services.retriever.lawindex import INDEX_DIR, corpus_fingerprint  # noqa: PLC0415

    started = time.perf_counter()
    laws = lawdb.list_laws()
    articles = lawdb.articles_by_law(laws)
    table = {law.law_id: (law.law_name, law.doc_type,
                          [number_key(a.article_no, a.article_no_arabic, i) for i, a in enumerate(articles[law.law_id])])
             for law in laws}
    resolver = Resolver(table)
    names = frozenset(n for law in laws for n in (law.law_name, short_name(law.law_name)) if len(n) >= 2)
    edges: dict[str, list[str]] = {}
    for law in laws:
        keys = table[law.law_id][2]
        for pos, art in enumerate(articles[law.law_id]):
            targets = [resolver.resolve(law.law_id, pos, r) for r in lawrefs.parse(art.text, names)]
            distinct = list(dict.fromkeys(t for t in targets if t))
            if distinct:
                edges[f"{law.law_id}:{keys[pos]}"] = distinct
    stats = dict(sorted(resolver.stats.items()))
    stats |= {"articles": sum(len(v[2]) for v in table.values()), "articles_citing": len(edges),
              "edges": sum(len(v) for v in edges.values())}
    header = {"format": FORMAT, "corpus": corpus_fingerprint(), "built_at": datetime.now(UTC).isoformat(timespec="seconds"),
              "build_command": BUILD_COMMAND, "build_seconds": round(time.perf_counter() - started, 1), "stats": stats}
    body = {**header, "laws": {k: {"name": v[0], "articles": v[2]} for k, v in table.items()}, "edges": edges}
    path = out or INDEX_DIR / FILE_NAME
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(gzip.compress(json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8"), 9, mtime=0))
    tmp.replace(path)
    return {**header, "path": str(path), "bytes": path.stat().st_size}


@dataclass(frozen=True)
class Reference:
    """One outgoing reference of an article: its target's ref id and label (「《民法典》第1065条」)."""

    id: str
    label: str


class RefGraph:
    """The loaded graph (``load``): ref ids, labels, outgoing references and the point id of each article
    (what the store keys it by: ``documents.point_id("law:<law_id>", position)``)."""

    def __init__(self, body: dict) -> None:
        self.meta = {k: v for k, v in body.items() if k not in ("laws", "edges")}
        self.edges: dict[str, list[str]] = body["edges"]
        self.names = {law_id: v["name"] for law_id, v in body["laws"].items()}
        self.positions = {f"{law_id}:{key}": (law_id, pos)
                          for law_id, v in body["laws"].items() for pos, key in enumerate(v["articles"])}
        self._by_point: dict[str, str] | None = None

    @classmethod
    def load(cls, path: Path, check_corpus: bool = True) -> "RefGraph":
        """Read ``path``; with ``check_corpus`` refuse a file built from another corpus. Raises ``RefGraphError``."""
        try:
            body = json.loads(gzip.decompress(path.read_bytes()).decode("utf-8"))
        except (OSError, ValueError, EOFError) as exc:
            raise RefGraphError(f"cannot read the reference graph {path}: {exc}; rebuild it with `{BUILD_COMMAND}`") from exc
        if body.get("format") != FORMAT:
            raise RefGraphError(f"{path} has format {body.get('format')!r}, not {FORMAT}; rebuild it with `{BUILD_COMMAND}`")
        if check_corpus:
            from services.retriever.lawindex import corpus_fingerprint  # noqa: PLC0415

            if body.get("corpus") != corpus_fingerprint():
                raise RefGraphError(f"{path} was built from another law corpus; rebuild it with `{BUILD_COMMAND}`")
        return cls(body)

    def label(self, ref_id: str) -> str | None:
        """Label of an article (None: not an article of the graph)."""
        where = self.positions.get(ref_id)
        return label(self.names[where[0]], ref_id.split(":", 1)[1]) if where else None

    def references(self, ref_id: str) -> list[Reference]:
        """Outgoing references of the article ``ref_id`` ([] for none or an unknown id)."""
        return [Reference(t, self.label(t) or t) for t in self.edges.get(ref_id, [])]

    def point_of(self, ref_id: str) -> str | None:
        """Store point id of the article ``ref_id`` (None: unknown)."""
        where = self.positions.get(ref_id)
        return point_id(f"law:{where[0]}", where[1]) if where else None

    def ref_of_point(self, point: str) -> str | None:
        """Ref id of the law article stored as ``point`` (None: not a law article). The map (~23,000
        UUID5s, ~60 ms) is built on first use."""
        if self._by_point is None:
            self._by_point = {self.point_of(r) or "": r for r in self.positions}
        return self._by_point.get(point)


def find(directory: Path | None = None) -> RefGraph | None:
    """The shipped graph if its file exists and matches this corpus; None otherwise (logged: references are
    an extra, rule K16, so the retriever runs without them)."""
    from services.retriever.lawindex import INDEX_DIR  # noqa: PLC0415

    path = (directory or INDEX_DIR) / FILE_NAME
    if not path.is_file():
        log.warning("no reference graph at %s: passages carry no references (`%s`)", path, BUILD_COMMAND)
        return None
    try:
        return RefGraph.load(path)
    except (RefGraphError, lawdb.LawDbError) as exc:
        log.warning("reference graph not used: %s", exc)
        return None
