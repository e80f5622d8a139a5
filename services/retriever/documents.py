"""Turn sources into ``Chunk``s: law articles (one chunk each) and text/Markdown/PDF files.

A ``Chunk`` is what gets embedded and stored: ``index_text`` (what the dense and
sparse encoders see) and ``payload`` (what a search returns). Its point id is
``point_id(document_id, position)``, a UUID5, so ingesting the same source again
writes the same ids (idempotent).

Law chunks: ``index_text`` = law name + chapter + section + article number + text
(FIELD-NOTES: the prefix helps sparse retrieval by several points).
File chunks: paragraphs packed up to ``FILE_CHUNK_CHARS`` characters; PDF chunks
never cross a page so their locator (``第 N 页``) is exact.
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
FILE_CHUNK_CHARS = 1500
"""Target size of a file chunk in characters (brief: ~1,500; under seed 000 CHUNK_MAX_CHARS=2000)."""
TEXT_SUFFIXES = frozenset({".txt", ".text", ".md", ".markdown"})
PDF_SUFFIXES = frozenset({".pdf"})
HTML_SUFFIXES = frozenset({".html", ".htm"})
SUPPORTED_SUFFIXES = TEXT_SUFFIXES | PDF_SUFFIXES | HTML_SUFFIXES
MAX_FILE_BYTES = 20 * 1024 * 1024
"""Files larger than this (20 MiB) are refused with a per-file reason (``file_chunks(max_bytes=...)``)."""


class DocumentError(ValueError):
    """A file cannot be turned into chunks; the message is the per-file reason."""


@dataclass
class Chunk:
    """One unit of retrieval.

    Fields: ``document_id``; ``position`` (0-based within the document);
    ``index_text`` (embedded and tokenised); ``payload`` (stored and returned;
    always holds tenant_id, document_id, position, title, locator, text, source).
    """

    document_id: str
    position: int
    index_text: str
    payload: dict[str, Any]

    @property
    def id(self) -> str:
        """Deterministic point id (UUID5 of document id and position)."""
        return point_id(self.document_id, self.position)


def point_id(document_id: str, position: int) -> str:
    """UUID5 string of ``"{document_id}#{position}"`` in ``POINT_NAMESPACE``."""
    return str(uuid.uuid5(POINT_NAMESPACE, f"{document_id}#{position}"))


# ====================================================================== laws
def law_document_id(law: Law) -> str:
    """Document id of a law: ``law:<law_id>``."""
    return f"law:{law.law_id}"


def law_chunks(law: Law, articles: list[Article]) -> list[Chunk]:
    """One chunk per article, public (``tenant_id="_public"``), in statute order."""
    doc_id = law_document_id(law)
    chunks = []
    for pos, art in enumerate(articles):
        prefix = " ".join(x for x in (law.law_name, art.chapter, art.section, art.article_no) if x)
        chunks.append(Chunk(doc_id, pos, f"{prefix}\n{art.text}", {
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
        }))
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


def pack_paragraphs(paragraphs: list[str], limit: int = FILE_CHUNK_CHARS) -> list[str]:
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


def text_file_chunks(path: Path, tenant_id: str) -> list[Chunk]:
    """Chunks of a text or Markdown file; title = first heading, else the file name stem.

    Locator: the chunk's heading (other than the title), else ``片段 N``. Raises ``DocumentError``.
    """
    return markdown_chunks(read_text_file(path), path, tenant_id)


def markdown_chunks(text: str, path: Path, tenant_id: str, title: str | None = None) -> list[Chunk]:
    """Chunks of Markdown/plain ``text`` read from ``path`` (see ``text_file_chunks``);
    ``title`` overrides the first heading. Raises ``DocumentError("no text")``."""
    first_heading, sections = _sections(text)
    if not sections:
        raise DocumentError("no text")
    title = title or first_heading or path.stem
    doc_id = file_document_id(path, tenant_id)
    chunks: list[Chunk] = []
    for heading, paragraphs in sections:
        for piece in pack_paragraphs(paragraphs):
            pos = len(chunks)
            locator = heading if heading and heading != title else f"片段 {pos + 1}"
            prefix = " ".join(x for x in (title, heading if heading != title else None) if x)
            chunks.append(Chunk(doc_id, pos, f"{prefix}\n{piece}",
                                _file_payload(doc_id, tenant_id, pos, path, title, locator, piece,
                                              section=heading if heading != title else None)))
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
    """Chunks of a PDF, page by page (locator ``第 N 页``); title = PDF metadata title or file stem.

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
    for number, page_text in enumerate(pages, start=1):
        paragraphs = [p.strip() for p in re.split(r"\n\s*\n", page_text) if p.strip()]
        for piece in pack_paragraphs(paragraphs):
            pos = len(chunks)
            chunks.append(Chunk(doc_id, pos, f"{title}\n{piece}",
                                _file_payload(doc_id, tenant_id, pos, path, title, f"第 {number} 页", piece,
                                              page=number)))
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
