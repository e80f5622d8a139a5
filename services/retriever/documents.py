"""Turn sources into ``Chunk``s: law articles (one chunk each) and text/Markdown/PDF files.

A ``Chunk`` is what gets embedded and stored: ``index_text`` (what the dense and
sparse encoders see) and ``payload`` (what a search returns). Its point id is
``point_id(document_id, position)``, a UUID5, so ingesting the same source again
writes the same ids (idempotent).

Law chunks: ``index_text`` = law name + chapter + section + article number + text
(the prefix helps sparse retrieval by several points: docs/retrieval.md "Measured before the pipeline was built"). A long article
(>= ``ITEM_MIN_ARTICLE_CHARS`` characters and at least two lines) also gets one ITEM
chunk per line (paragraph 款 or enumerated item 项; an item is preceded by its lead-in
line, e.g. 「下列各项个人所得，免征个人所得税：（二）国债和国家发行的金融债券利息；」).
Item chunks point back to their article (``parent_id`` = the article's point id,
``parent_text`` = the article text), so a hit on one item is merged into the article
as the evidence item, like a file's child chunk (``pipeline``): one item of a long
exemption list embeds and scores close to a question about it, the whole article
does not (bench/retrieval, docs/retrieval.md "Item chunks").
File chunks (rule K5, docs/rules.md: parent/child): a document is split on headings and
paragraphs into PARENT chunks of up to ``PARENT_CHUNK_CHARS`` (4,000; sections are
filled to ~3,500-4,000) and each parent into CHILD chunks of up to
``CHILD_CHUNK_CHARS`` (800). Only children are stored and embedded (a short child
embeds close to a question about it; a 4,000-char chunk's embedding is an average
that fell under the 0.30 floor). Each child's payload carries its parent's id
(``parent_id``), position and full text (``parent_text``), so a hit on a child
returns the parent as evidence (``pipeline``). PDF parents never cross a page so
their locator (``第 N 页``) is exact.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from services.retriever.lawdb import Article, Law
from services.retriever.store import PUBLIC_TENANT

POINT_NAMESPACE = uuid.UUID("6f1d3c2a-8e7b-5c41-9a0d-2b3e4f5a6c7d")
"""UUID5 namespace of Conduit chunk ids (fixed forever: changing it re-keys every point)."""
PARENT_CHUNK_CHARS = 4000
"""Largest parent chunk in characters (rule K5: parents of 3,500-4,000 chars)."""
CHILD_CHUNK_CHARS = 800
"""Largest child chunk in characters (what is embedded and matched; ~400-800 chars)."""
TEXT_SUFFIXES = frozenset({".txt", ".text", ".md", ".markdown"})
PDF_SUFFIXES = frozenset({".pdf"})
HTML_SUFFIXES = frozenset({".html", ".htm"})
SUPPORTED_SUFFIXES = TEXT_SUFFIXES | PDF_SUFFIXES | HTML_SUFFIXES
ITEM_MIN_ARTICLE_CHARS = 200
"""Articles at least this long (and with two or more lines) get item chunks (2,882 of the
23,490 current articles, 15,305 item chunks); 120 and 300 measured no better on bench/retrieval
(docs/retrieval.md "Item chunks")."""
ITEM_LEAD_IN_CHARS = 60
"""At most this many characters of an enumeration's lead-in line are repeated before each item."""
LAW_LAYOUT = "articles+items/1"
"""Chunk layout of the law corpus (``law_chunks``: one chunk per article plus item chunks of long
articles), recorded in the ingest marker (``ingest.CORPUS_MARKER``: a marker without it is an older
store, so ``conduit up``/``demo`` re-run the ingest once) and in the shipped law index
(``lawindex``). Change it whenever ``law_chunks`` changes what it produces."""
MAX_FILE_BYTES = 20 * 1024 * 1024
"""Files larger than this (20 MiB) are refused with a per-file reason (``file_chunks(max_bytes=...)``)."""


class DocumentError(ValueError):
    """A file cannot be turned into chunks; the message is the per-file reason."""


@dataclass
class Chunk:
    """One unit of retrieval.

    Fields: ``document_id``; ``position`` (0-based within the document, consecutive);
    ``index_text`` (embedded and tokenised); ``payload`` (stored and returned;
    always holds tenant_id, document_id, position, title, locator, text, source);
    for a file's child chunk ``parent_position`` and ``child_position`` (0-based:
    which parent, which child of it); for a law article's item chunk the article's
    position and the item's index; else None (the article itself).
    """

    document_id: str
    position: int
    index_text: str
    payload: dict[str, Any]
    parent_position: int | None = None
    child_position: int | None = None

    @property
    def is_child(self) -> bool:
        """True for a file's child chunk or an article's item chunk (hits merge into the parent)."""
        return self.parent_position is not None

    @property
    def id(self) -> str:
        """Deterministic point id: UUID5 of document id + parent and child position
        (child chunks), else of document id + position (law articles)."""
        if self.parent_position is not None:
            return child_point_id(self.document_id, self.parent_position, self.child_position or 0)
        return point_id(self.document_id, self.position)


def point_id(document_id: str, position: int) -> str:
    """UUID5 string of ``"{document_id}#{position}"`` in ``POINT_NAMESPACE``."""
    return str(uuid.uuid5(POINT_NAMESPACE, f"{document_id}#{position}"))


def parent_chunk_id(document_id: str, parent_position: int) -> str:
    """Id of a parent chunk (not a stored point; the evidence ``chunk_id`` of its children's
    hits): UUID5 of ``"{document_id}#p{parent_position}"``."""
    return str(uuid.uuid5(POINT_NAMESPACE, f"{document_id}#p{parent_position}"))


def child_point_id(document_id: str, parent_position: int, child_position: int) -> str:
    """Point id of a child chunk: UUID5 of ``"{document_id}#p{parent}.c{child}"``."""
    return str(uuid.uuid5(POINT_NAMESPACE, f"{document_id}#p{parent_position}.c{child_position}"))


# ====================================================================== laws
def law_document_id(law: Law) -> str:
    """Document id of a law: ``law:<law_id>``."""
    return f"law:{law.law_id}"


_ITEM_LINE = re.compile(r"^\s*[（(][一二三四五六七八九十百零]+[）)]")


def article_items(text: str, min_chars: int = ITEM_MIN_ARTICLE_CHARS) -> list[str]:
    """Item texts of one article: one per non-empty line (paragraph or enumerated item),
    an item line (``（一）``...) preceded by its lead-in (the closest earlier non-item
    line, cut to ``ITEM_LEAD_IN_CHARS``). ``[]`` for an article shorter than
    ``min_chars`` characters or with fewer than two lines (the article chunk suffices).
    """
    lines = [line.strip() for line in text.split("\n") if line.strip()]
    if len(text) < min_chars or len(lines) < 2:
        return []
    out, lead = [], ""
    for line in lines:
        if _ITEM_LINE.match(line):
            out.append(f"{lead}{line}")
        else:
            out.append(line)
            lead = line if len(line) <= ITEM_LEAD_IN_CHARS else line[:ITEM_LEAD_IN_CHARS] + "……"
    return out


def law_chunks(law: Law, articles: list[Article], items: bool = True) -> list[Chunk]:
    """One chunk per article, public (``tenant_id="_public"``), in statute order; with
    ``items`` each long article is followed by its item chunks (``article_items``).

    An article chunk's id and position are ``point_id(doc, n)`` / ``n`` for the n-th
    article (unchanged by item chunks, so old stores keep their vectors). An item chunk
    has the article's ``position``, id ``child_point_id(doc, n, k)``, and payload = the
    article's payload with ``text`` = the item, ``parent_text`` = the article text,
    ``parent_id`` = the article's point id, ``parent_position`` = n, ``child_position`` = k.
    """
    doc_id = law_document_id(law)
    chunks = []
    for pos, art in enumerate(articles):
        prefix = " ".join(x for x in (law.law_name, art.chapter, art.section, art.article_no) if x)
        payload = {
            "tenant_id": PUBLIC_TENANT,
            "document_id": doc_id,
            "position": pos,
            "source": "law_db",
            "law_id": law.law_id,
            "law_name": law.law_name,
            "title": f"《{law.law_name}》",
            "chapter": art.chapter,
            "section": art.section,
            "article_no": art.article_no,
            "locator": art.article_no or None,
            "status": art.status,
            "version_date": law.version_date,
            "effective_date": law.effective_date,
            "text": art.text,
        }
        chunks.append(Chunk(doc_id, pos, f"{prefix}\n{art.text}", payload))
        for k, item in enumerate(article_items(art.text) if items else []):
            chunks.append(Chunk(doc_id, pos, f"{prefix}\n{item}", {
                **payload, "text": item, "parent_text": art.text, "parent_id": point_id(doc_id, pos),
                "parent_position": pos, "child_position": k,
            }, pos, k))
    return chunks


# ====================================================================== files
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.+?)\s*#*\s*$")
_SENTENCE_END = re.compile(r"(?<=[。！？!?；;.])")


def file_document_id(path: Path, tenant_id: str) -> str:
    """Document id of a file: ``file:<tenant>:<sha1 of the absolute path, 16 hex>``."""
    return f"file:{tenant_id}:{hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:16]}"


def read_text_file(path: Path) -> str:
    """File text decoded as UTF-8 (BOM allowed), else GB18030; raises ``DocumentError``."""
    data = path.read_bytes()
    for encoding in ("utf-8-sig", "gb18030"):
        try:
            return data.decode(encoding)
        except UnicodeDecodeError:
            continue
    raise DocumentError("not UTF-8 or GB18030 text")


def _split_long(paragraph: str, limit: int) -> list[str]:
    """Split one paragraph longer than ``limit`` at sentence ends, hard-cutting as a last resort."""
    parts, current = [], ""
    for sentence in (s for s in _SENTENCE_END.split(paragraph) if s):
        while len(sentence) > limit:
            if current:
                parts.append(current)
                current = ""
            parts.append(sentence[:limit])
            sentence = sentence[limit:]
        if len(current) + len(sentence) > limit:
            parts.append(current)
            current = ""
        current += sentence
    if current:
        parts.append(current)
    return parts


def pack_paragraphs(paragraphs: list[str], limit: int = PARENT_CHUNK_CHARS) -> list[str]:
    """Greedily join paragraphs (blank line between) into pieces of at most ``limit`` chars."""
    pieces, current = [], ""
    for para in paragraphs:
        for part in _split_long(para, limit) if len(para) > limit else [para]:
            if current and len(current) + 2 + len(part) > limit:
                pieces.append(current)
                current = ""
            current = f"{current}\n\n{part}" if current else part
    if current:
        pieces.append(current)
    return pieces


def _sections(text: str) -> tuple[str | None, list[tuple[str | None, list[str]]]]:
    """Split text into (first heading, [(heading, paragraphs)]) by Markdown headings and blank lines."""
    first_heading, sections = None, [(None, [])]
    for block in re.split(r"\n\s*\n", text.replace("\r\n", "\n")):
        lines, body = block.strip("\n").split("\n"), []
        for line in lines:
            m = _HEADING.match(line)
            if m:
                if body:
                    sections[-1][1].append("\n".join(body).strip())
                    body = []
                heading = m.group(2).strip()
                first_heading = first_heading or heading
                sections.append((heading, []))
            elif line.strip():
                body.append(line.rstrip())
        if body:
            sections[-1][1].append("\n".join(body).strip())
    return first_heading, [(h, p) for h, p in sections if p]


def _file_payload(doc_id: str, tenant_id: str, pos: int, path: Path, title: str, locator: str, text: str,
                  *, section: str | None = None, page: int | None = None) -> dict[str, Any]:
    """Payload of a file chunk: tenant, ids, title, locator, text, plus ``section`` (heading),
    ``page`` (PDF, 1-based), ``version_date`` (file mtime, ``YYYY-MM-DD``) and ``ingested_at``
    (UTC ISO time; not part of the content hash, see ``ingest.content_hash``)."""
    try:
        version_date = datetime.fromtimestamp(path.stat().st_mtime, UTC).date().isoformat()
    except OSError:
        version_date = None
    return {
        "section": section,
        "page": page,
        "version_date": version_date,
        "ingested_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "tenant_id": tenant_id,
        "document_id": doc_id,
        "position": pos,
        "source": "file",
        "source_path": str(path),
        "file_name": path.name,
        "title": f"《{title}》",
        "locator": locator,
        "text": text,
    }


def family(doc_id: str, parent_position: int, parent_text: str, prefix: str, first_position: int,
           payload: dict[str, Any]) -> list[Chunk]:
    """Child chunks of one parent: its paragraphs (blank-line separated) packed to at most
    ``CHILD_CHUNK_CHARS`` each. ``prefix`` (title + heading) starts every child's index text;
    ``payload`` (the parent's display fields) is copied into each child with ``text`` = the
    child, ``parent_text``, ``parent_id``, ``parent_position``, ``child_position`` and
    ``position`` = ``first_position`` + child index (consecutive within the document)."""
    pieces = pack_paragraphs([p for p in parent_text.split("\n\n") if p.strip()], CHILD_CHUNK_CHARS)
    out = []
    for k, child in enumerate(pieces):
        pos = first_position + k
        out.append(Chunk(doc_id, pos, f"{prefix}\n{child}", {
            **payload, "position": pos, "text": child, "parent_text": parent_text,
            "parent_id": parent_chunk_id(doc_id, parent_position), "parent_position": parent_position,
            "child_position": k,
        }, parent_position, k))
    return out


def text_file_chunks(path: Path, tenant_id: str) -> list[Chunk]:
    """Chunks of a text or Markdown file; title = first heading, else the file name stem.

    Locator: the chunk's heading (other than the title), else ``片段 N``. Raises ``DocumentError``.
    """
    return markdown_chunks(read_text_file(path), path, tenant_id)


def markdown_chunks(text: str, path: Path, tenant_id: str, title: str | None = None,
                    document_id: str | None = None) -> list[Chunk]:
    """Child chunks of Markdown/plain ``text`` read from ``path`` (see ``text_file_chunks``):
    parents = each heading's paragraphs packed to ``PARENT_CHUNK_CHARS``, children of
    ``CHILD_CHUNK_CHARS`` (``family``). ``title`` overrides the first heading;
    ``document_id`` overrides ``file_document_id(path, tenant_id)``. Locator: the
    parent's heading, else ``片段 <parent number>``. Raises ``DocumentError("no text")``."""
    first_heading, sections = _sections(text)
    if not sections:
        raise DocumentError("no text")
    title = title or first_heading or path.stem
    doc_id = document_id or file_document_id(path, tenant_id)
    chunks: list[Chunk] = []
    parent = 0
    for heading, paragraphs in sections:
        section = heading if heading != title else None
        for piece in pack_paragraphs(paragraphs, PARENT_CHUNK_CHARS):
            locator = section or f"片段 {parent + 1}"
            prefix = " ".join(x for x in (title, section) if x)
            payload = _file_payload(doc_id, tenant_id, len(chunks), path, title, locator, piece, section=section)
            chunks += family(doc_id, parent, piece, prefix, len(chunks), payload)
            parent += 1
    return chunks


def html_file_chunks(path: Path, tenant_id: str) -> list[Chunk]:
    """Chunks of an HTML page: main text extracted by trafilatura as Markdown (headings
    kept, boilerplate dropped); title = the page's ``<title>``/metadata title, else the
    first heading, else the file stem. Raises ``DocumentError``."""
    import trafilatura  # noqa: PLC0415

    html = read_text_file(path)
    try:
        text = trafilatura.extract(html, output_format="markdown", include_tables=True, include_comments=False,
                                   favor_recall=True) or ""
        meta = trafilatura.extract_metadata(html)
    except Exception as exc:  # noqa: BLE001 - lxml raises many types
        raise DocumentError(f"unreadable HTML: {type(exc).__name__}: {exc}") from exc
    if not text.strip():
        raise DocumentError("no text")
    return markdown_chunks(text, path, tenant_id, title=(meta.title if meta and meta.title else None))


def pdf_file_chunks(path: Path, tenant_id: str) -> list[Chunk]:
    """Child chunks of a PDF, parents page by page (locator ``第 N 页``); title = PDF metadata title or file stem.

    Raises ``DocumentError`` for unreadable or text-less (scanned) PDFs.
    """
    from pypdf import PdfReader  # noqa: PLC0415

    try:
        reader = PdfReader(str(path))
        pages = [page.extract_text() or "" for page in reader.pages]
        meta_title = (reader.metadata.title if reader.metadata else None) or None
    except Exception as exc:  # noqa: BLE001 - pypdf raises many types
        raise DocumentError(f"unreadable PDF: {type(exc).__name__}: {exc}") from exc
    title = (meta_title or path.stem).strip()
    doc_id = file_document_id(path, tenant_id)
    chunks: list[Chunk] = []
    parent = 0
    for number, page_text in enumerate(pages, start=1):
        paragraphs = [p.strip() for p in re.split(r"\n\s*\n", page_text) if p.strip()]
        for piece in pack_paragraphs(paragraphs, PARENT_CHUNK_CHARS):
            payload = _file_payload(doc_id, tenant_id, len(chunks), path, title, f"第 {number} 页", piece, page=number)
            chunks += family(doc_id, parent, piece, title, len(chunks), payload)
            parent += 1
    if not chunks:
        raise DocumentError("no extractable text (scanned PDF?)")
    return chunks


def file_chunks(path: Path, tenant_id: str, max_bytes: int = MAX_FILE_BYTES) -> list[Chunk]:
    """Chunks of one file by suffix (.txt/.md/.markdown/.html/.htm/.pdf).

    Raises ``DocumentError`` with the per-file reason: wrong type, over the size
    limit (``max_bytes``), unreadable, or no text.
    """
    suffix = path.suffix.lower()
    if suffix in SUPPORTED_SUFFIXES and path.stat().st_size > max_bytes:
        raise DocumentError(f"over the size limit: {path.stat().st_size} bytes > {max_bytes}")
    if suffix in HTML_SUFFIXES:
        return html_file_chunks(path, tenant_id)
    if suffix in TEXT_SUFFIXES:
        return text_file_chunks(path, tenant_id)
    if suffix in PDF_SUFFIXES:
        return pdf_file_chunks(path, tenant_id)
    raise DocumentError(f"unsupported file type {suffix or '(none)'}; supported: {', '.join(sorted(SUPPORTED_SUFFIXES))}")
