"""The memory suite of ``conduit evals run`` (docs/evals.md "The memory suite"; data ``evals/memory.yaml``):
long-term memory through the public API only, as one user: a fact told is stored (``told``), given back in a new
session (``recalled``), replaced by a correction with its history (``corrected``) and, once deleted, never given
back (``forgotten``). The suite first deletes every memory item of the key's user: give it a key of its own.
"""

from __future__ import annotations

import time
from typing import Any

import httpx
import yaml

from ops.gates import EVALS_DIR, Gate

MEMORY = EVALS_DIR / "memory.yaml"


def _ask(base: str, key: str, question: str) -> dict[str, Any]:
    """Ask in a new session; the terminal event's data ({} when none came)."""
    from ops.client import bearer, stream_task

    r = httpx.post(f"{base}/v1/tasks", json={"question": question}, headers=bearer(key), timeout=30)
    r.raise_for_status()
    last = None
    for ev in stream_task(base, r.json()["task_id"], read_timeout_s=90, api_key=key):
        last = ev
    return dict(last.data) if last is not None and isinstance(last.data, dict) else {}


def _items(base: str, key: str) -> list[dict[str, Any]]:
    from ops.client import bearer

    return httpx.get(f"{base}/v1/memory", headers=bearer(key), timeout=30).json().get("items", [])


def _wait(base: str, key: str, found: Any, timeout_s: float = 30.0) -> dict[str, Any] | None:
    """The first item ``found(item)`` accepts within ``timeout_s`` (memory is written after the answer)."""
    deadline = time.monotonic() + timeout_s
    while True:
        hit = next((i for i in _items(base, key) if found(i)), None)
        if hit is not None or time.monotonic() > deadline:
            return hit
        time.sleep(0.5)


def run(base: str, key: str) -> list[Gate]:
    """The four gates (suite ``memory``) for the user of ``key`` at gateway ``base``."""
    from ops.client import bearer

    m = yaml.safe_load(MEMORY.read_text(encoding="utf-8"))
    httpx.delete(f"{base}/v1/memory", headers=bearer(key), timeout=30).raise_for_status()
    _ask(base, key, m["tell"])
    fact = _wait(base, key, lambda i: i.get("text") == m["fact"])
    gates = [Gate("memory", "told", fact is not None, f"item {fact and fact.get('id')} type {fact and fact.get('type')}")]
    given = [x.get("text") for x in _ask(base, key, m["recall"]).get("memory", [])]
    gates.append(Gate("memory", "recalled", m["fact"] in given, f"given to the model: {given}"))
    _ask(base, key, m["work"])
    first = _wait(base, key, lambda i: i.get("text") == m["work"])
    topic = (first or {}).get("topic")
    _ask(base, key, m["correction"])
    fixed = _wait(base, key, lambda i: i.get("text") == m["corrected"])
    same_topic = [i for i in _items(base, key) if topic and i.get("topic") == topic and i.get("type") == "fact"]
    ok = (fixed is not None and fixed.get("source") == "user_correction" and len(same_topic) == 1
          and any(h.get("text") == m["work"] for h in fixed.get("history", [])))
    gates.append(Gate("memory", "corrected", ok, f"topic {topic}: {[i.get('text') for i in same_topic]}"))
    if fact is not None:
        httpx.delete(f"{base}/v1/memory/{fact['id']}", headers=bearer(key), timeout=30).raise_for_status()
    left = [i.get("text") for i in _items(base, key) if m["name"] in str(i.get("text"))]
    given = [x.get("text") for x in _ask(base, key, m["recall_again"]).get("memory", [])]
    gates.append(Gate("memory", "forgotten", fact is not None and not left and not any(m["name"] in str(t) for t in given),
                      f"left: {left}; given: {given}"))
    return gates
