"""The sandbox replicas' isolation statuses: one Redis hash for all of them (``keys.SANDBOX_STATUSES``).

Each sandbox process writes its field ``{host}:{pid}`` every ``STATUS_TTL_S / 3`` seconds with JSON
``{"isolated", "unsafe", "reason", "at"}`` (``at``: Unix seconds of the write); a field not rewritten
for ``STATUS_TTL_S`` seconds belongs to a process that is gone and is ignored, and writers drop fields
older than ``STALE_AFTER_S``. Readers (the orchestrator every 2 s, a pod's readiness probe) read the
one hash with ``HGETALL`` instead of SCANning the keyspace, whose cost grows with every task's keys.
"""

from __future__ import annotations

import json
from typing import Any

STATUS_TTL_S = 30
"""Seconds a status counts after its write (its writer rewrites it every third of that)."""
STALE_AFTER_S = 3 * STATUS_TTL_S
"""Seconds after which a writer removes another process's unrewritten field."""


def field(host: str, pid: int) -> str:
    """The hash field of the sandbox process ``pid`` on ``host``."""
    return f"{host}:{pid}"


def encode(isolated: bool, unsafe: bool, reason: str, now: float) -> str:
    """One status as stored (``now``: Unix seconds)."""
    return json.dumps({"isolated": isolated, "unsafe": unsafe, "reason": reason, "at": now})


def fresh(raw: dict[Any, Any], now: float, host: str | None = None) -> list[dict[str, Any]]:
    """The statuses of ``HGETALL`` ``raw`` written within ``STATUS_TTL_S`` of ``now`` (Unix seconds),
    of every host or of ``host`` only; unreadable fields are skipped."""
    out = []
    for name, body in raw.items():
        name = name.decode() if isinstance(name, bytes) else str(name)
        if host is not None and not name.startswith(f"{host}:"):
            continue
        try:
            status = json.loads(body)
        except (TypeError, ValueError):
            continue
        if now - float(status.get("at", 0)) <= STATUS_TTL_S:
            out.append(status)
    return out


def stale(raw: dict[Any, Any], now: float) -> list[Any]:
    """The fields of ``raw`` (``HGETALL``) not rewritten for ``STALE_AFTER_S`` seconds."""
    gone = []
    for name, body in raw.items():
        try:
            at = float(json.loads(body).get("at", 0))
        except (TypeError, ValueError):
            at = 0.0
        if now - at > STALE_AFTER_S:
            gone.append(name)
    return gone
