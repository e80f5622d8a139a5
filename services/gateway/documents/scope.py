"""A question's scope at the gateway (rule Q1, docs/rules.md; the terms are ``contracts.scope``).

``resolve`` turns what a client asked (``document_ids``, ``collections``) into a ``Scope`` of store
ids for the orchestrator and the retriever, or refuses it with a 4xx whose ``code`` says why:

- 404 ``document_not_found``: an id that names no live document of the caller's tenant. Accepted: the ids
  ``POST /v1/documents`` returned (-> ``doc:{tenant}:{id}``), the tenant's own store ids
  (``doc:{tenant}:…`` with a record, ``file:{tenant}:…`` of ``conduit ingest``, which has no record
  to check) and law ids (``law:…``, the public corpus). Another tenant's id answers exactly like a
  missing one (the retriever's tenant filter would hide its chunks anyway). 404 like a body's unknown
  ``session_id`` (``session_not_found``): the request is well formed, what it names is not there;
- 404 ``collection_not_found``: not ``law``, ``documents`` or a collection a live document of the tenant
  was posted in (``details.known`` lists the ones there are);
- 422 ``scope_too_large``: more than ``MAX_SCOPE_DOCUMENTS`` ids or ``MAX_SCOPE_COLLECTIONS``
  collections (``too_large``, from the body's validation errors).
"""

from __future__ import annotations

import re
from typing import Any

from redis.asyncio import Redis

from conduit.records import keys, slots
from contracts.documents import DOCUMENT_ID_PATTERN, DocumentView, index_document_id
from contracts.scope import BUILT_IN_COLLECTIONS, MAX_SCOPE_COLLECTIONS, MAX_SCOPE_DOCUMENTS, Scope
from services.gateway.errors import ApiError

SCOPE_FIELDS = ("document_ids", "collections")
_BARE_ID = re.compile(DOCUMENT_ID_PATTERN)


def too_large(errors: list[dict[str, Any]]) -> ApiError | None:
    """422 ``scope_too_large`` when the body's pydantic ``errors`` say a scope list is too long
    (``loc`` ending in ``document_ids`` or ``collections``, type ``too_long``), else None."""
    for e in errors:
        loc = tuple(str(p) for p in e.get("loc", ()))
        if e.get("type") == "too_long" and loc and loc[-1] in SCOPE_FIELDS:
            return ApiError(422, "scope_too_large",
                            f"a question may name at most {MAX_SCOPE_DOCUMENTS} document_ids and "
                            f"{MAX_SCOPE_COLLECTIONS} collections",
                            {"field": loc[-1], "max_document_ids": MAX_SCOPE_DOCUMENTS,
                             "max_collections": MAX_SCOPE_COLLECTIONS})
    return None


async def _live_documents(redis: Redis, tenant_id: str, ids: list[str] | None) -> dict[str, DocumentView]:
    """The tenant's documents that are not being deleted, by ``document_id``: those named in ``ids``,
    or all of them for None."""
    if ids is None:
        ids = sorted(m.decode() if isinstance(m, bytes) else m for m in await redis.smembers(keys.documents(tenant_id)))
    if not ids:
        return {}
    raws = await slots.mget(redis, [keys.document(tenant_id, i) for i in ids])
    views = (DocumentView.model_validate_json(raw) for raw in raws if raw)
    return {v.document_id: v for v in views if v.status != "deleting"}


def _store_id(tenant_id: str, ref: str) -> tuple[str | None, str | None]:
    """``(store id, record id)`` of a client's document ``ref``: the record id is the ``document_id``
    whose record must exist (None: nothing to check); ``(None, None)`` when it cannot be the tenant's."""
    own_doc, own_file = index_document_id(tenant_id, ""), f"file:{tenant_id}:"
    if ref.startswith("law:") or (ref.startswith(own_file) and len(ref) > len(own_file)):
        return ref, None
    if ref.startswith(own_doc):
        bare = ref[len(own_doc):]
        return (ref, bare) if _BARE_ID.fullmatch(bare) else (None, None)
    if _BARE_ID.fullmatch(ref):
        return index_document_id(tenant_id, ref), ref
    return None, None


async def resolve(redis: Redis, tenant_id: str, document_ids: list[str] | None,
                  collections: list[str] | None) -> Scope | None:
    """The ``Scope`` of a question of ``tenant_id`` (None when both lists are empty or None).

    Each list is deduplicated in order; ids become store ids (see the module docstring).

    Raises:
        ApiError: 404 ``document_not_found`` (``details.document_ids``: the ids refused) or
            ``collection_not_found`` (``details.collections``, ``details.known``).
        redis.RedisError: Redis failed (answered 503 ``store_unavailable``).
    """
    refs = list(dict.fromkeys(document_ids or []))
    names = list(dict.fromkeys(collections or []))
    if not refs and not names:
        return None
    resolved = [(ref, *_store_id(tenant_id, ref)) for ref in refs]
    named = [n for n in names if n not in BUILT_IN_COLLECTIONS]
    to_check = [record for _, _, record in resolved if record is not None]
    live = await _live_documents(redis, tenant_id, None if named else to_check) if named or to_check else {}
    unknown = [ref for ref, store, record in resolved if store is None or (record is not None and record not in live)]
    if unknown:
        raise ApiError(404, "document_not_found",
                       f"no document {unknown[0]!r} for this tenant (unknown, deleted or not yours)",
                       {"document_ids": unknown})
    known = sorted({v.collection for v in live.values() if v.collection})
    missing = [n for n in named if n not in known]
    if missing:
        raise ApiError(404, "collection_not_found",
                       f"no collection {missing[0]!r}: use law, documents or a collection your documents were posted in",
                       {"collections": missing, "known": [*BUILT_IN_COLLECTIONS, *known]})
    return Scope(document_ids=list(dict.fromkeys(store for _, store, _ in resolved if store)), collections=names)
