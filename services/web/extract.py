"""Page text extraction, chunking and TF-IDF reranking (rule W2, docs/rules.md).

- ``extract_html(html, url) -> Extracted``: main text with trafilatura; when it finds
  nothing (or far less than the page holds), a plain tag strip.
- ``chunk(text, size=600, overlap=100)``: 600-character chunks, 100 shared by neighbours (rule W2).
- ``rerank(query, chunks, top=5)``: TF-IDF cosine against the query, the best 5 kept (rule W2), with
  character 2-3-grams so Chinese (no spaces) and English both work.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from html.parser import HTMLParser

import trafilatura

from services.web import tfidf

CHUNK_SIZE = 600
"""Characters per chunk (rule W2)."""
CHUNK_OVERLAP = 100
"""Characters shared by consecutive chunks (rule W2)."""
TOP_CHUNKS = 5
"""Chunks kept after reranking (rule W2)."""
SHORT_TEXT = 1000
"""Below this many characters trafilatura's text is checked against a plain tag strip."""
MAX_TEXT_CHARS = 60_000
"""Extracted text kept per page (about 120 chunks). Reranking 2,000 chunks took 1.5 s on a
busy 2-core machine; six pages at this cap stay near half a second."""

_SENTENCE_END = re.compile(r"[。！？；!?;.\n]")
_SPACES = re.compile(r"[ \t\r\f\v\u00a0\u3000]+")
_BLANK_LINES = re.compile(r"\n\s*\n+")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


@dataclass(frozen=True)
class Extracted:
    """Main ``text`` of a page (untrusted, plain text) and its ``title`` (may be empty)."""

    title: str
    text: str


def clean_text(text: str) -> str:
    """Drop control characters, collapse runs of spaces and blank lines; strip."""
    text = _CONTROL.sub("", text)
    text = _SPACES.sub(" ", text)
    text = _BLANK_LINES.sub("\n", text)
    return text.strip()[:MAX_TEXT_CHARS]


class _TagStripper(HTMLParser):
    """Collects visible text and the ``<title>``; skips script, style and similar."""

    SKIP = {"script", "style", "noscript", "template", "svg", "head"}
    BLOCK = {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "section", "article", "table"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.title_parts: list[str] = []
        self._skip = 0
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: object) -> None:
        if tag == "title":
            self._in_title = True
        elif tag in self.SKIP:
            self._skip += 1
        elif tag in self.BLOCK:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        elif tag in self.SKIP and self._skip:
            self._skip -= 1

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title_parts.append(data)
        elif not self._skip:
            self.parts.append(data)


def strip_tags(html: str) -> Extracted:
    """Fallback extraction: all visible text of ``html`` and its ``<title>``."""
    parser = _TagStripper()
    try:
        parser.feed(html)
        parser.close()
    except Exception:  # noqa: BLE001 - hostile markup: keep what was parsed
        pass
    return Extracted(title=clean_text("".join(parser.title_parts))[:300], text=clean_text("".join(parser.parts)))


def extract_html(html: str, url: str | None = None) -> Extracted:
    """Main text and title of an HTML page (trafilatura, else tag strip).

    trafilatura's result is used unless it is short (under ``SHORT_TEXT`` chars) and under a
    tenth of the tag-stripped text (it sometimes keeps only a caption of a short page). The
    pure-Python tag strip runs only in that case: it costs about 1 s on a 2 MB page.
    """
    try:
        doc = trafilatura.bare_extraction(html, url=url, with_metadata=True, include_comments=False,
                                          include_tables=True, favor_recall=True)
    except Exception:  # noqa: BLE001 - a parser failure on hostile markup is not our crash
        doc = None
    text = clean_text(getattr(doc, "text", None) or "") if doc is not None else ""
    title = clean_text(getattr(doc, "title", None) or "")[:300] if doc is not None else ""
    if len(text) < SHORT_TEXT:
        fallback = strip_tags(html)
        if len(text) * 10 < len(fallback.text) or not text:
            text = fallback.text
        title = title or fallback.title
    return Extracted(title=title, text=text)


def chunk(text: str, size: int = CHUNK_SIZE, overlap: int = CHUNK_OVERLAP) -> list[str]:
    """Split ``text`` into windows of at most ``size`` characters overlapping by about ``overlap``.

    A window ends at the last sentence end (。！？；.!?; or newline) in its final
    quarter when there is one, so chunks rarely cut a sentence. Raises ValueError
    unless ``0 <= overlap < size``.
    """
    if size <= 0 or overlap < 0 or overlap >= size:
        raise ValueError(f"need 0 <= overlap < size, got size={size} overlap={overlap}")
    text = text.strip()
    chunks: list[str] = []
    start = 0
    while start < len(text):
        end = min(start + size, len(text))
        if end < len(text):
            tail_from = start + size * 3 // 4
            cut = None
            for match in _SENTENCE_END.finditer(text, tail_from, end):
                cut = match.end()
            if cut:
                end = cut
        piece = text[start:end].strip()
        if piece:
            chunks.append(piece)
        if end >= len(text):
            break
        start = max(end - overlap, start + 1)
    return chunks


def rerank(query: str, chunks: list[str], top: int = TOP_CHUNKS) -> list[tuple[int, float]]:
    """Rank ``chunks`` by TF-IDF cosine similarity to ``query``; return ``[(chunk index, score)]``, best first.

    Analyzer: character 2-3-grams (``analyzer="char_wb"``), fitted on the chunks and
    the query together. Scores are cosine in [0, 1]; ties keep page order. An empty
    query or a vocabulary failure returns the first ``top`` chunks with score 0.
    """
    if not chunks or top <= 0:
        return []
    if not query.strip():
        return [(i, 0.0) for i in range(min(top, len(chunks)))]
    scores = tfidf.cosines(query, chunks)  # rule O13: plain Python, no scikit-learn in the service
    if scores is None:  # empty vocabulary (no text at all)
        return [(i, 0.0) for i in range(min(top, len(chunks)))]
    order = sorted(range(len(chunks)), key=lambda i: (-scores[i], i))
    return [(i, float(scores[i])) for i in order[:top]]


def warm_up() -> None:
    """Run extraction and reranking once on a tiny page so lazy imports and caches load now.

    trafilatura loads parts of itself on first use (about 0.1 s idle, over 1 s on a busy 2-core
    machine); call this at service start, in a thread beside the consumer's start-up (``start_warm_up``),
    so the first search does not spend its 6 s page budget on it.
    """
    body = "增值税 warm up text. " * 40
    sample = f"<html><head><title>t</title></head><body><article><p>{body}</p></article></body></html>"
    rerank("warm up", chunk(extract_html(sample, "http://warm.up/").text))


def start_warm_up() -> threading.Thread:
    """Run ``warm_up`` in a daemon thread and return it; a call that arrives before it ends waits for
    the imports (Python's import lock), not for a second warm-up."""
    thread = threading.Thread(target=warm_up, name="web-warm-up", daemon=True)
    thread.start()
    return thread
