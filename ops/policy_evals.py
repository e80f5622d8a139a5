"""Offline gates of ``conduit eval`` that need no stack: the input guardrail corpus and the
routing set (pure rules, in process).

- ``routing`` (``evals/routing.jsonl``, at least 40 labelled inputs): accuracy of the rules alone and,
  when ``CONDUIT_ROUTER_MODEL`` is set, of the router model (``routing_gates``).
- ``guardrails`` (``evals/guardrails.jsonl``: ``expect`` reject | accept, ``category``): every
  attack is rejected with its category, no harmless look-alike is (gate: 0 missed, 0 false alarms).
"""

from __future__ import annotations

import json
from pathlib import Path

from ops.gates import EVALS_DIR, Gate


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


def _expected(label: str, route: str, calc_hint: bool) -> bool:
    """True when a decision fits a label (domain and calculation go to the agent, a calculation with the hint)."""
    if label == "calculation":
        return route == "agent" and calc_hint
    if label == "domain":
        return route == "agent" and not calc_hint
    return route == label


def routing_gates() -> list[Gate]:
    """Routing (``evals/routing.jsonl``: ``label`` domain | chitchat | out_of_scope | calculation).

    ``routing:rules-precision`` fails when a rule decides wrongly (rules must never misroute);
    ``routing:rules-accuracy`` reports the share routed right by the rules alone (undecided = the
    agent); with ``CONDUIT_ROUTER_MODEL`` set, ``routing:model-accuracy`` runs the classifier on every
    row and passes at 80 % or more.
    """
    import asyncio

    from conduit.runtime.settings import get_settings
    from services.orchestrator import router
    from services.orchestrator.agent.routing import Domain, by_rules

    rows = _jsonl("routing.jsonl")
    wrong, right = [], 0
    for row in rows:
        got = by_rules(row["text"])
        route, hint = (got.route, got.calc_hint) if got else ("agent", False)
        right += _expected(row["label"], route, hint)
        if got is not None and not _expected(row["label"], route, hint):
            wrong.append(f"{row['id']}→{route}")
    decided = sum(by_rules(r["text"]) is not None for r in rows)
    gates = [Gate("routing", "rules-precision", not wrong, f"{decided} decided by rules, wrong: {wrong or 'none'}"),
             Gate("routing", "rules-accuracy", True, f"{right}/{len(rows)} = {right / len(rows):.0%} with the rules alone")]
    settings = get_settings()
    if settings.router.router_model:
        async def classify_all() -> list[bool]:
            out = []
            for row in rows:
                d = await router.decide(settings.router, settings.llm, row["text"], Domain())
                out.append(_expected(row["label"], d.route if d else "agent", d.calc_hint if d else False))
            return out
        hits = asyncio.run(classify_all())
        gates.append(Gate("routing", "model-accuracy", sum(hits) / len(rows) >= 0.8,
                          f"{sum(hits)}/{len(rows)} = {sum(hits) / len(rows):.0%} with {settings.router.router_model}"))
    return gates
