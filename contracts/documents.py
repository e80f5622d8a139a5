"""Search and documents through the gateway: API bodies, bus events and Redis keys.

HTTP (gateway, ``services/gateway/documents/routes.py``):

- ``POST /v1/search`` ``SearchRequest`` -> 200 ``SearchResponse`` (the evidence items
  ``kb_search`` gives the agent, from the retriever over the bus);
- ``POST /v1/documents`` ``DocumentCreate`` -> 202 ``DocumentAccepted``;
  ``GET /v1/documents`` -> ``DocumentList``; ``GET /v1/documents/{id}`` -> ``DocumentView``;
  ``DELETE /v1/documents/{id}`` -> 202 ``DocumentAccepted`` (status ``deleting``).

Bus (topic ``contracts.topics.RETRIEVER_REQUESTS``, read by the retriever's one consumer
together with ``conduit.tools.kb.requests``): ``SearchRequested``,
``DocumentIngestRequested``, ``DocumentDeleteRequested`` (``contracts.channels.CHANNELS``).
The envelope's ``task_id`` is the partition key: the search ``request_id``, or
``index_document_id`` for document events (so one document's events stay in order).

Replies and state live in Redis:

- ``conduit.records.keys.reply(request_id)`` (``conduit:reply:{request_id}``): the retriever LPUSHes one
  ``SearchReply`` JSON there (TTL ``REPLY_TTL_S``); the gateway BLPOPs it.
- ``keys.document(tenant, id)`` (``conduit:document:{tenant}:{id}``): the ``DocumentView``
  JSON; ``keys.documents(tenant)`` (``conduit:documents:{tenant}``): set of the tenant's ids.
  The record's ``request_id`` names the latest request about the document; the retriever
  applies an older (superseded or redelivered) request's outcome to the store only when it
  is still current, so replays cannot resurrect a deleted document.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

from contracts.envelope import Envelope
from contracts.events import Payload
from contracts.evidence import EvidenceItem
from contracts.scope import BUILT_IN_COLLECTIONS, COLLECTION_PATTERN, COLLECTIONS_DOC, Collections, DocumentRef

MAX_QUERY_CHARS = 500
"""Longest search query (characters), the same as ``kb_search``'s ``query`` argument."""
MAX_TOP_K = 20
"""Largest ``top_k`` of ``POST /v1/search`` (the agent's default is ``RETRIEVAL_TOP_K``=6)."""
MAX_DOCUMENT_CHARS = 200_000
"""Longest document text (characters) accepted by ``POST /v1/documents`` (~600 KB of UTF-8
Chinese: it travels inside one Kafka message, under the 1 MB default message size)."""
MAX_TITLE_CHARS = 300
REPLY_TTL_S = 60
"""Seconds a search reply waits in Redis for the gateway (then it expires)."""
DOCUMENT_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
"""Client-chosen document ids: 1-128 of letters, digits, ``.``, ``_``, ``-`` (no ``:``,
so they can never name a law (``law:...``) or file (``file:...``) document of the store)."""

DocumentStatus = Literal["queued", "ingested", "failed", "deleting"]
"""``queued``: accepted, not yet indexed; ``ingested``: searchable; ``failed``: see
``reason``; ``deleting``: a delete was accepted (the record disappears when it is done)."""


def index_document_id(tenant_id: str, document_id: str) -> str:
    """Document id in the vector store (and in evidence items): ``doc:{tenant}:{id}``,
    so two tenants' documents with the same id never share chunk ids."""
    return f"doc:{tenant_id}:{document_id}"


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ====================================================================== HTTP bodies
class SearchFilters(_Body):
    """Optional search filters; the tenant filter (own chunks + public corpus) always applies.

    ``document_ids``: only these documents (store ids, ``EvidenceItem.document_id``, e.g. ``law:…`` or
    ``doc:{tenant}:{id}``; or the ids ``POST /v1/documents`` returned); ``collections``: only these
    collections (``contracts.scope``). With both, a passage of either matches (rule Q3).
    """

    document_ids: list[DocumentRef] | None = Field(default=None, min_length=1, max_length=50)
    collections: Collections | None = Field(default=None, min_length=1, description=COLLECTIONS_DOC)


class SearchRequest(_Body):
    """``POST /v1/search``: ``query`` (1-500 chars after trimming), ``top_k`` (1-20; default
    ``RETRIEVAL_TOP_K``), ``filters``."""

    query: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_QUERY_CHARS,
                                            pattern=r"\S")]
    top_k: int | None = Field(default=None, ge=1, le=MAX_TOP_K)
    filters: SearchFilters | None = None


class SearchAttempt(_Body):
    """One search round of the pipeline: ``kind`` (original | compressed | topic:<name> | sub:n | rewrite[:n]),
    the ``query`` used, hits ``returned`` and ``kept`` (dense cosine >= floor), ``best`` cosine; or a helper call
    of rules K11-K13, kind ``<stage>:<outcome>``, ``query`` why it failed ("" when ok), ``duration_ms`` how long the
    search waited for it (docs/retrieval.md "Reranking and the model's help")."""

    kind: str
    query: str
    returned: int
    kept: int
    best: float | None = None
    duration_ms: float | None = None


class SearchResponse(_Body):
    """``POST /v1/search`` answer: ``items`` exactly as ``kb_search`` gives them to the agent
    (fused order, packed text; not yet numbered: numbers belong to a task's evidence pool)."""

    query: str
    items: list[EvidenceItem]
    attempts: list[SearchAttempt] = Field(default_factory=list)
    duration_ms: float = 0.0


class DocumentCreate(_Body):
    """``POST /v1/documents``: a Markdown or plain-text document for the tenant's knowledge base.

    ``title`` 1-300 chars; ``text`` 1-200,000 chars (not blank); ``source`` free text (URL,
    system name) kept in the chunks' metadata; ``document_id`` (``DOCUMENT_ID_PATTERN``)
    chooses the id: posting the same id again replaces that document. Default: a new uuid4 hex.
    ``collection`` (``contracts.scope.COLLECTION_PATTERN``): the named collection it joins (stored in
    its chunks' payload, rule Q3); re-posting the id with another collection moves it.
    """

    title: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_TITLE_CHARS,
                                            pattern=r"\S")]
    text: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_DOCUMENT_CHARS,
                                           pattern=r"\S")]
    source: Annotated[str, StringConstraints(strip_whitespace=True, max_length=1000)] | None = None
    document_id: Annotated[str, StringConstraints(pattern=DOCUMENT_ID_PATTERN)] | None = None
    collection: Annotated[str, StringConstraints(pattern=COLLECTION_PATTERN)] | None = Field(
        default=None, description="put the document in this named collection (a question can be limited to it); "
                                  "not 'law' or 'documents'")

    @field_validator("collection")
    @classmethod
    def _not_built_in(cls, value: str | None) -> str | None:
        """``law`` and ``documents`` name built-in collections (``contracts.scope``), not one a document joins."""
        if value in BUILT_IN_COLLECTIONS:
            raise ValueError(f"{value!r} is a built-in collection; choose another name")
        return value


class DocumentView(_Body):
    """A document's record (``GET /v1/documents/{id}``).

    ``index_document_id``: its id in the store and in evidence items; ``chars``: text length;
    ``chunks``: chunks indexed (when ``ingested``); ``reason``: why it ``failed``;
    ``request_id``: event id of the latest request about it; ``collection``: its named collection.
    """

    document_id: str
    tenant_id: str
    index_document_id: str
    title: str
    source: str | None = None
    collection: str | None = None
    status: DocumentStatus
    reason: str | None = None
    chars: int = 0
    chunks: int | None = None
    request_id: str
    created_at: datetime
    updated_at: datetime


class DocumentAccepted(_Body):
    """202 answer of ``POST`` / ``DELETE /v1/documents``: the id, the new status and where to poll."""

    document_id: str
    status: DocumentStatus
    url: str


class DocumentList(_Body):
    """``GET /v1/documents``: the tenant's documents, oldest first."""

    documents: list[DocumentView]


# ====================================================================== bus payloads
class SearchRequestPayload(Payload):
    """gateway -> retriever: run ``kb_search`` for ``query`` as the envelope's tenant.

    ``top_k`` None = ``RETRIEVAL_TOP_K``; ``document_ids`` (store ids) and ``collections`` restrict the
    search to those documents and collections (rule Q3, a union);
    ``deadline_at`` (UTC): the gateway stops waiting then, so a later request is dropped.
    """

    request_id: str
    query: str
    top_k: int | None = None
    document_ids: list[str] | None = None
    collections: list[str] | None = None
    deadline_at: datetime | None = None


class SearchReply(_Body):
    """retriever -> gateway (Redis ``keys.reply``): ``outcome`` ok with ``items``/``attempts``,
    or error with ``error_code`` (``kb_backend_unavailable``) and ``message``."""

    request_id: str
    outcome: Literal["ok", "error"]
    items: list[EvidenceItem] = Field(default_factory=list)
    attempts: list[SearchAttempt] = Field(default_factory=list)
    error_code: str | None = None
    message: str | None = None
    duration_ms: float = 0.0


class DocumentIngestPayload(Payload):
    """gateway -> retriever: index this document's text for the envelope's tenant
    (replacing an earlier version with the same id); ``collection``: its named collection."""

    document_id: str
    index_document_id: str
    title: str
    text: str
    source: str | None = None
    collection: str | None = None


class DocumentDeletePayload(Payload):
    """gateway -> retriever: delete every chunk of ``index_document_id``."""

    document_id: str
    index_document_id: str


# ====================================================================== envelopes
class SearchRequested(Envelope):
    """gateway -> retriever: a search without the agent (``POST /v1/search``)."""

    type: Literal["search.requested"] = "search.requested"
    payload: SearchRequestPayload


class DocumentIngestRequested(Envelope):
    """gateway -> retriever: ingest a posted document (``POST /v1/documents``)."""

    type: Literal["document.ingest_requested"] = "document.ingest_requested"
    payload: DocumentIngestPayload


class DocumentDeleteRequested(Envelope):
    """gateway -> retriever: delete a document (``DELETE /v1/documents/{id}``)."""

    type: Literal["document.delete_requested"] = "document.delete_requested"
    payload: DocumentDeletePayload
