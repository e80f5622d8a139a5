"""``conduit evals policy``'s offline suites (guardrail corpus, routing set) run in process without a stack."""

from __future__ import annotations

from ops import evals


def test_offline_suites_pass_without_a_stack():
    gates = evals.run(None, fast=True, suites=("guardrails", "routing"))
    assert {g.suite for g in gates} == {"guardrails", "routing"}
    assert all(g.passed for g in gates), [g for g in gates if not g.passed]
    names = {g.name for g in gates}
    assert {"corpus", "rules-precision", "rules-accuracy"} <= names


def test_routing_set_has_forty_labelled_inputs_in_both_languages():
    import json
    rows = [json.loads(line) for line in (evals.EVALS_DIR / "routing.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(rows) >= 40 and {r["label"] for r in rows} == {"domain", "chitchat", "out_of_scope", "calculation"}
    assert any(r["text"].isascii() for r in rows) and any(not r["text"].isascii() for r in rows)
