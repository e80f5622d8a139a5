"""The scope of a question: which documents and collections its knowledge-base searches may read.

Asked with ``document_ids`` / ``collections`` on ``POST /v1/tasks`` and ``POST /v1/ask``
(``contracts.api.TaskCreate``), in the ``conduit`` extension of ``POST /v1/chat/completions``
(``contracts.chat.ConduitOptions``), as arguments of the MCP ``ask`` tool, and in ``filters`` of
``POST /v1/search`` (``contracts.documents.SearchFilters``).

Collections (``collections``):

- ``law`` (``LAW``): the public law corpus (store tenant ``_public``);
- ``documents`` (``DOCUMENTS``): every document of the caller's tenant (posted with
  ``POST /v1/documents`` or ingested with ``conduit ingest``);
- any other name (``COLLECTION_PATTERN``): the tenant's documents posted with that ``collection``
  (``POST /v1/documents``); a name no live document of the tenant carries is unknown.

A passage is in scope when its document is one of ``document_ids`` OR it belongs to one of
``collections`` (the scope is a union). No scope: everything the tenant may read (its own
documents and the law corpus). The tenant filter always applies on top (rules Q1-Q4, docs/rules.md).

The gateway resolves what a client asked (ids as ``POST /v1/documents`` returned them or store
ids, ``EvidenceItem.document_id``) into a ``Scope`` of store ids (``services.gateway.documents.scope``) and
refuses: more than ``MAX_SCOPE_DOCUMENTS`` ids or ``MAX_SCOPE_COLLECTIONS`` collections (422
``scope_too_large``), an id the tenant has no document for (404 ``document_not_found``), an unknown
collection (404 ``collection_not_found``). The orchestrator holds the ``Scope`` in the task's checkpoint
and puts it on every ``kb_search`` request of the task and of its team workers; the model's
arguments cannot change it.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

LAW = "law"
"""The public law corpus."""
DOCUMENTS = "documents"
"""All of the tenant's own documents."""
BUILT_IN_COLLECTIONS = (LAW, DOCUMENTS)
COLLECTION_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,63}$"
"""A named collection (``POST /v1/documents`` ``collection``): 1-64 of lower-case letters, digits,
``_`` and ``-``, starting with a letter or digit; ``law`` and ``documents`` are reserved."""
MAX_SCOPE_DOCUMENTS = 50
"""Most ``document_ids`` one question may name."""
MAX_SCOPE_COLLECTIONS = 10
"""Most ``collections`` one question may name."""

DocumentRef = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=300, pattern=r"\S")]
"""A document as a client names it: the id ``POST /v1/documents`` returned, or a store id
(``EvidenceItem.document_id``: ``law:…``, ``doc:{tenant}:{id}``, ``file:{tenant}:…``)."""
CollectionRef = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=64, pattern=r"\S")]
"""A collection as a client names it (``law``, ``documents`` or a named collection)."""
DocumentIds = Annotated[list[DocumentRef], Field(max_length=MAX_SCOPE_DOCUMENTS)]
Collections = Annotated[list[CollectionRef], Field(max_length=MAX_SCOPE_COLLECTIONS)]

DOCUMENT_IDS_DOC = ("limit the question's knowledge-base searches to these documents (ids as POST /v1/documents "
                    f"returned them, or store ids such as law:…; at most {MAX_SCOPE_DOCUMENTS}); with collections: "
                    "a passage of either is in scope")
COLLECTIONS_DOC = (f"limit the searches to these collections: {LAW!r} (the law corpus), {DOCUMENTS!r} (all the "
                   f"tenant's documents) or a collection named at upload (at most {MAX_SCOPE_COLLECTIONS})")


class Scope(BaseModel):
    """A question's resolved scope (see the module docstring): store document ids and collection
    names, each list deduplicated in order; both empty never happens (no scope is None)."""

    model_config = ConfigDict(extra="forbid")

    document_ids: list[str] = Field(default_factory=list, description="store document ids (EvidenceItem.document_id)")
    collections: list[str] = Field(default_factory=list, description="law, documents or named collections")

    def reaches_law(self) -> bool:
        """True when the whole law corpus is in scope (``law`` is one of the collections)."""
        return LAW in self.collections
