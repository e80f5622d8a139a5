"""The fetch journal: pages a tool call fetched, kept under its idempotency key (rule W5, docs/rules.md).

A web call's side effect (the request to someone's server) happens before its result is stored.
When the process dies in between (extraction and reranking take most of a call's time), the
call's next delivery would fetch the page again. The journal keeps each fetched page for
``JOURNAL_TTL_S`` seconds as soon as it arrives, so the next run of the same call reads it
instead of fetching twice. Best effort: a Redis error is logged and the page is fetched.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
from dataclasses import asdict

from redis.asyncio import Redis
from redis.exceptions import RedisError

from conduit.records import keys
from services.web.safefetch import FetchedPage

log = logging.getLogger("conduit.web.journal")

JOURNAL_TTL_S = 3600
"""Seconds a fetched page stays in the journal (as long as a tool result is kept)."""


class FetchJournal:
    """The pages of the tool call ``idempotency_key`` by URL, on ``redis``."""

    def __init__(self, redis: Redis, idempotency_key: str) -> None:
        self.redis, self.idempotency_key = redis, idempotency_key

    def _key(self, url: str) -> str:
        return keys.web_fetched(self.idempotency_key, hashlib.sha256(url.encode()).hexdigest()[:32])

    async def get(self, url: str) -> FetchedPage | None:
        """The page this call already fetched from ``url``, or None."""
        try:
            raw = await self.redis.get(self._key(url))
        except RedisError as exc:
            log.warning("fetch journal read failed: %r", exc)
            return None
        if raw is None:
            return None
        fields = json.loads(raw)
        fields["body"] = base64.b64decode(fields["body"])
        return FetchedPage(**fields)

    async def put(self, url: str, page: FetchedPage) -> None:
        """Keep ``page`` (fetched from ``url``) for ``JOURNAL_TTL_S`` seconds."""
        fields = asdict(page)
        fields["body"] = base64.b64encode(page.body).decode("ascii")
        try:
            await self.redis.set(self._key(url), json.dumps(fields), ex=JOURNAL_TTL_S)
        except RedisError as exc:
            log.warning("fetch journal write failed: %r", exc)
