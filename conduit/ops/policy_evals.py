"""Offline gates of ``conduit eval`` that need no stack: the input guardrail corpus and the
routing set (pure rules, in process).

- ``guardrails`` (``evals/guardrails.jsonl``: ``expect`` reject | accept, ``category``): every
  attack is rejected with its category, no harmless look-alike is (gate: 0 missed, 0 false alarms).
"""

from __future__ import annotations

import json
from pathlib import Path

from conduit.ops.evals import EVALS_DIR, Gate


def _jsonl(name: str) -> list[dict]:
    return [json.loads(line) for line in (EVALS_DIR / name).read_text(encoding="utf-8").splitlines() if line.strip()]


def guardrail_gates(path: Path | None = None) -> list[Gate]:
    """One gate per failing row plus the summary gate ``guardrails:corpus`` (0 missed, 0 false alarms)."""
    from conduit.policy.guardrails import check

    rows = _jsonl(path.name) if path else _jsonl("guardrails.jsonl")
    gates, missed, false_alarms = [], 0, 0
    for row in rows:
        got = check(row["text"])
        if row["expect"] == "reject" and (got is None or got.category != row["category"]):
            missed += 1
            gates.append(Gate("guardrails", f"missed:{row['id']}", False, f"expected {row['category']}, got {got}"))
        elif row["expect"] == "accept" and got is not None:
            false_alarms += 1
            gates.append(Gate("guardrails", f"false-alarm:{row['id']}", False, f"{got.category} ({got.rule})"))
    attacks = sum(r["expect"] == "reject" for r in rows)
    gates.append(Gate("guardrails", "corpus", missed == 0 and false_alarms == 0,
                      f"{attacks} attacks, {len(rows) - attacks} harmless: {missed} missed, {false_alarms} false alarms"))
    return gates
