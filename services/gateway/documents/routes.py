"""Search and documents over HTTP, served by the retriever over the bus (contracts: ``contracts/documents.py``).

Routes (tenant = the caller's, from the credential; writes need the tenant admin role, 403
``forbidden`` otherwise; bodies are JSON, read with a byte limit). A tenant's documents and
search hits are its own; the public law corpus is everyone's:

- ``POST /v1/search`` ``{query, top_k?, filters?: {document_ids?, collections?}}`` -> 200 ``SearchResponse``
  (the filters are resolved and checked as a question's scope, rule Q1: ``services.gateway.documents.scope``): publishes
  ``SearchRequested`` to ``conduit.retriever.requests`` and BLPOPs the retriever's
  ``SearchReply`` from ``conduit:reply:{request_id}`` for at most ``TOOL_TIMEOUT_S`` seconds.
  The items are exactly what ``kb_search`` gives the agent (same ``KbSearcher``).
- ``POST /v1/documents`` ``{title, text, source?, document_id?, collection?}`` -> 202 ``DocumentAccepted``
  (status ``queued``): saves the record, then publishes ``DocumentIngestRequested`` to
  ``conduit.retriever.writes``; the retriever indexes it and sets the record to ``ingested`` (once
  every replica holding a copy of the store indexed it, rule K10) or ``failed`` (with ``reason``).
  With ``Content-Type: application/pdf`` the body is the raw PDF (at most ``PDF_BODY_BYTES``):
  its text (pages split by blank lines, pypdf) then goes the same way; title = ``?title=``, else
  the ``X-Filename`` header without ``.pdf``, else the PDF's metadata title; ``?source=``,
  ``?document_id=`` and ``?collection=`` as in the JSON body.
- ``GET /v1/documents`` -> ``DocumentList``; ``GET /v1/documents/{id}`` -> ``DocumentView``.
- ``DELETE /v1/documents/{id}`` -> 202 (status ``deleting``); from then on ``GET`` and ``DELETE``
  of the id answer 404, while ``GET /v1/documents`` lists it as ``deleting`` until the retriever
  has deleted its chunks and then the record.

Errors (``ErrorBody``): 422 ``invalid_request`` (malformed JSON, empty query or text, bad
``document_id``, unknown fields, a PDF without a title), 422 ``pdf_unreadable`` (not a PDF, or
pypdf fails) / ``pdf_no_text`` (no extractable text: scanned?), 422 ``scope_too_large`` / 404
``document_not_found`` / ``collection_not_found`` (search filters, rule Q1), 413 ``document_too_large`` (text over
``MAX_DOCUMENT_CHARS`` characters) / ``body_too_large``, 404 ``document_not_found``,
503 ``broker_unavailable`` (Kafka did not ack) / ``kb_backend_unavailable`` (the retriever's
store or model failed) / ``store_unavailable`` (Redis), 504 ``retriever_timeout``.
"""

from __future__ import annotations

import asyncio
import io
import logging
import uuid
from datetime import timedelta
from typing import TypeVar

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError

from conduit.records import keys, slots
from conduit.records import replies
from contracts import topics
from contracts.api import ErrorBody
from contracts.documents import (
    DOCUMENT_ID_PATTERN,
    MAX_DOCUMENT_CHARS,
    DocumentAccepted,
    DocumentCreate,
    DocumentDeletePayload,
    DocumentDeleteRequested,
    DocumentIngestPayload,
    DocumentIngestRequested,
    DocumentList,
    DocumentView,
    SearchReply,
    SearchRequest,
    SearchRequested,
    SearchRequestPayload,
    SearchResponse,
    index_document_id,
)
from contracts.envelope import utcnow
from services.gateway.documents import scope
from services.gateway.identity.auth import Principal, authenticate, require_admin
from services.gateway.openapi import body_doc
from services.gateway.errors import ApiError
from services.gateway.state import GatewayState, get_state, publish

log = logging.getLogger("conduit.gateway.documents")

router = APIRouter(prefix="/v1", dependencies=[Depends(authenticate)])

_OVERHEAD_BYTES = 16 * 1024
SEARCH_BODY_BYTES = 64 * 1024
"""Largest ``POST /v1/search`` body (bytes)."""
DOCUMENT_BODY_BYTES = MAX_DOCUMENT_CHARS * 6 + _OVERHEAD_BYTES
"""Largest ``POST /v1/documents`` body (bytes): 6 bytes per text char (``\\uXXXX``) + 16 KiB."""
PDF_BODY_BYTES = 20 * 1024 * 1024
"""Largest ``POST /v1/documents`` PDF body (bytes, 20 MiB: the retriever's file limit); its text
must still fit ``MAX_DOCUMENT_CHARS``."""
PDF_TYPE = "application/pdf"

M = TypeVar("M", bound=BaseModel)
_ERRORS = {r: {"model": ErrorBody} for r in (401, 403, 404, 413, 422, 429, 503, 504)}


async def _read_bytes(request: Request, limit: int) -> bytes:
    """The request body; raises ``ApiError`` 413 ``body_too_large`` past ``limit`` bytes."""
    too_large = ApiError(413, "body_too_large", f"the request body is larger than {limit} bytes", {"max_bytes": limit})
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_large
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)


def _validate(model: type[M], raw: bytes | None = None, fields: dict | None = None) -> M:
    """``model`` from JSON ``raw`` or from ``fields``.

    Raises ``ApiError`` 413 ``document_too_large`` (text too long), 422 ``scope_too_large`` (too many
    search filter ids, rule Q1), ``RequestValidationError`` (-> 422 ``invalid_request``) otherwise.
    """
    try:
        return model.model_validate_json(raw) if raw is not None else model.model_validate(fields)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False)
        if any(e["type"] == "string_too_long" and tuple(e["loc"]) == ("text",) for e in errors):
            raise ApiError(413, "document_too_large", f"the document text is longer than {MAX_DOCUMENT_CHARS} characters",
                           {"max_document_chars": MAX_DOCUMENT_CHARS}) from None
        raise scope.too_large(errors) or RequestValidationError(
            [{**e, "loc": ("body", *e["loc"])} for e in errors]) from None


async def _read_body(request: Request, model: type[M], limit: int) -> M:
    """Read at most ``limit`` bytes of JSON and validate it into ``model`` (errors: ``_read_bytes``, ``_validate``)."""
    return _validate(model, await _read_bytes(request, limit))


def pdf_text(data: bytes) -> tuple[str, str | None]:
    """``(text, metadata title)`` of a PDF: page texts (pypdf) joined by blank lines.

    Raises ``ApiError`` 422 ``pdf_unreadable`` (not a PDF, pypdf fails) / ``pdf_no_text`` (scanned?).
    """
    from pypdf import PdfReader  # noqa: PLC0415 - only PDF uploads need it

    try:
        reader = PdfReader(io.BytesIO(data))
        pages = [page.extract_text() or "" for page in reader.pages]
        title = (reader.metadata.title if reader.metadata else None) or None
    except Exception as exc:  # noqa: BLE001 - pypdf raises many types
        raise ApiError(422, "pdf_unreadable", f"the body is not a readable PDF: {type(exc).__name__}") from None
    text = "\n\n".join(p.strip() for p in pages if p.strip())
    if not text:
        raise ApiError(422, "pdf_no_text", "the PDF has no extractable text (scanned?)", {"pages": len(pages)})
    return text, (title.strip() if isinstance(title, str) else None)


async def _document_body(request: Request, title: str | None, source: str | None,
                         document_id: str | None, collection: str | None = None) -> DocumentCreate:
    """The ``DocumentCreate`` of a JSON body, or of a raw PDF body (``Content-Type: application/pdf``)."""
    if request.headers.get("content-type", "").split(";")[0].strip().lower() != PDF_TYPE:
        return await _read_body(request, DocumentCreate, DOCUMENT_BODY_BYTES)
    text, meta_title = await asyncio.to_thread(pdf_text, await _read_bytes(request, PDF_BODY_BYTES))
    filename = request.headers.get("x-filename", "").strip()
    if filename.lower().endswith(".pdf"):
        filename = filename[:-4]
    fields = {"title": title or filename or meta_title or "", "text": text, "source": source, "document_id": document_id,
              "collection": collection}
    return _validate(DocumentCreate, fields=fields)


async def _send(state: GatewayState, topic: str, event) -> None:
    """Publish to ``topic`` (``RETRIEVER_REQUESTS`` for a search, ``RETRIEVER_WRITES`` for a document
    write, rule K10); raises ``ApiError`` 503 ``broker_unavailable`` on failure."""
    try:
        await publish(state, topic, event)
    except Exception as exc:  # noqa: BLE001 - any publish failure means nothing was queued
        log.error("publish of %s failed: %r", event.type, exc)
        raise ApiError(503, "broker_unavailable", "the message broker is unavailable; the request was not queued") from None


# ====================================================================== search
@router.post("/search", response_model=SearchResponse, responses=_ERRORS, openapi_extra=body_doc(SearchRequest))
async def search(request: Request, state: GatewayState = Depends(get_state),
                 who: Principal = Depends(authenticate)) -> SearchResponse:
    """Search the knowledge base as the agent's ``kb_search`` does (body: ``SearchRequest``)."""
    body = await _read_body(request, SearchRequest, SEARCH_BODY_BYTES)
    filters = body.filters
    limited = await scope.resolve(state.redis, who.tenant_id, filters.document_ids if filters else None,
                                  filters.collections if filters else None)  # rule Q1, as a task's scope
    timeout_s = state.settings.tools.tool_timeout_s
    request_id = uuid.uuid4().hex
    event = SearchRequested(
        task_id=request_id, session_id=request_id, tenant_id=who.tenant_id, user_id=who.user_id,
        payload=SearchRequestPayload(
            request_id=request_id, query=body.query, top_k=body.top_k,
            document_ids=limited.document_ids or None if limited else None,
            collections=limited.collections or None if limited else None,
            deadline_at=utcnow() + timedelta(seconds=timeout_s)),
    )
    await _send(state, topics.RETRIEVER_REQUESTS, event)
    popped = await replies.wait(state.redis, request_id, timeout_s)
    if popped is None:
        raise ApiError(504, "retriever_timeout", f"the retriever did not answer within {timeout_s:.0f} s",
                       {"timeout_s": timeout_s})
    reply = SearchReply.model_validate_json(popped)
    if reply.outcome != "ok":
        raise ApiError(503, reply.error_code or "kb_backend_unavailable", reply.message or "the knowledge base failed")
    return SearchResponse(query=body.query, items=reply.items, attempts=reply.attempts, duration_ms=reply.duration_ms)


# ====================================================================== documents
def _url(document_id: str) -> str:
    return f"/v1/documents/{document_id}"


async def _load(state: GatewayState, tenant_id: str, document_id: str) -> DocumentView:
    """The document's record; 404 when unknown or already being deleted (a deleted resource is gone at once)."""
    raw = await state.redis.get(keys.document(tenant_id, document_id))
    if not raw or DocumentView.model_validate_json(raw).status == "deleting":
        raise ApiError(404, "document_not_found", f"no document {document_id!r} (unknown or deleted)",
                       {"document_id": document_id})
    return DocumentView.model_validate_json(raw)


async def _save(state: GatewayState, view: DocumentView) -> None:
    async with slots.atomic(state.redis) as pipe:
        pipe.set(keys.document(view.tenant_id, view.document_id), view.model_dump_json())
        pipe.sadd(keys.documents(view.tenant_id), view.document_id)
        await pipe.execute()


_PDF_QUERY = "only with a PDF body (Content-Type: application/pdf)"


@router.post("/documents", status_code=202, response_model=DocumentAccepted, responses=_ERRORS,
             openapi_extra=body_doc(DocumentCreate, raw={PDF_TYPE: "a PDF file; its text is ingested"}))
async def create_document(request: Request, state: GatewayState = Depends(get_state),
                          who: Principal = Depends(authenticate),
                          title: str | None = Query(None, description=f"document title, {_PDF_QUERY}"),
                          source: str | None = Query(None, description=f"document source, {_PDF_QUERY}"),
                          document_id: str | None = Query(None, description=f"document id, {_PDF_QUERY}"),
                          collection: str | None = Query(None, description=f"named collection, {_PDF_QUERY}"),
                          ) -> DocumentAccepted:
    """Queue a document for ingestion (body: ``DocumentCreate`` or a PDF); re-posting an id replaces it (admin only)."""
    require_admin(who)
    body = await _document_body(request, title, source, document_id, collection)
    tenant = who.tenant_id
    document_id = body.document_id or uuid.uuid4().hex
    index_id = index_document_id(tenant, document_id)
    event = DocumentIngestRequested(
        task_id=index_id, session_id=index_id, tenant_id=tenant,
        payload=DocumentIngestPayload(document_id=document_id, index_document_id=index_id, title=body.title,
                                      text=body.text, source=body.source, collection=body.collection),
    )
    now = utcnow()
    previous = await state.redis.get(keys.document(tenant, document_id))
    created_at = DocumentView.model_validate_json(previous).created_at if previous else now
    view = DocumentView(document_id=document_id, tenant_id=tenant, index_document_id=index_id, title=body.title,
                        source=body.source, collection=body.collection, status="queued", chars=len(body.text), request_id=str(event.event_id),
                        created_at=created_at, updated_at=now)
    await _save(state, view)
    try:
        await _send(state, topics.RETRIEVER_WRITES, event)
    except ApiError:
        await _save(state, view.model_copy(update={"status": "failed", "reason": "broker_unavailable: not queued"}))
        raise
    return DocumentAccepted(document_id=document_id, status="queued", url=_url(document_id))


@router.get("/documents", response_model=DocumentList, responses=_ERRORS)
async def list_documents(state: GatewayState = Depends(get_state),
                         who: Principal = Depends(authenticate)) -> DocumentList:
    """The tenant's documents with their status, oldest first."""
    tenant = who.tenant_id
    ids = sorted(m.decode() for m in await state.redis.smembers(keys.documents(tenant)))
    views = []
    if ids:
        for document_id, raw in zip(ids, await slots.mget(state.redis, [keys.document(tenant, i) for i in ids])):
            if raw:
                views.append(DocumentView.model_validate_json(raw))
            else:  # deleted meanwhile
                await state.redis.srem(keys.documents(tenant), document_id)
    views.sort(key=lambda v: (v.created_at, v.document_id))
    return DocumentList(documents=views)


_DOC_ID = Path(pattern=DOCUMENT_ID_PATTERN, description="document id")


@router.get("/documents/{document_id}", response_model=DocumentView, responses=_ERRORS)
async def get_document(document_id: str = _DOC_ID, state: GatewayState = Depends(get_state),
                       who: Principal = Depends(authenticate)) -> DocumentView:
    """One document's record (404 ``document_not_found`` when unknown, deleted or another tenant's)."""
    return await _load(state, who.tenant_id, document_id)


@router.delete("/documents/{document_id}", status_code=202, response_model=DocumentAccepted, responses=_ERRORS)
async def delete_document(document_id: str = _DOC_ID, state: GatewayState = Depends(get_state),
                          who: Principal = Depends(authenticate)) -> DocumentAccepted:
    """Queue the deletion of a document's chunks and record (404 when unknown; admin only)."""
    require_admin(who)
    view = await _load(state, who.tenant_id, document_id)
    event = DocumentDeleteRequested(
        task_id=view.index_document_id, session_id=view.index_document_id, tenant_id=view.tenant_id,
        payload=DocumentDeletePayload(document_id=document_id, index_document_id=view.index_document_id),
    )
    previous = view
    await _save(state, view.model_copy(update={"status": "deleting", "request_id": str(event.event_id),
                                               "updated_at": utcnow()}))
    try:
        await _send(state, topics.RETRIEVER_WRITES, event)
    except ApiError:
        await _save(state, previous)
        raise
    return DocumentAccepted(document_id=document_id, status="deleting", url=_url(document_id))

