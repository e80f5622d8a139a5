"""``conduit evals policy --fast`` over a real private stack (retriever, orchestrator, gateway processes on the
session's tansu and Redis; real law articles; a model endpoint that is down, so answers fall back)."""

from __future__ import annotations

from ops import evals


def test_fast_eval_suites_pass(settings):
    gates = evals.run(None, fast=True, infra_settings=settings)
    failed = [g for g in gates if not g.passed]
    assert not failed, failed
    suites = {g.suite for g in gates}
    assert suites == {"guardrails", "routing", "golden", "fault", "security"}
    names = {g.name for g in gates}
    assert "malformed-event-dead-lettered" in names and "oversized-413" in names and "corpus" in names
    assert any(n.startswith("model-down:") for n in names) and any(n.startswith("ssrf:") for n in names)


def test_ssrf_gates_refuse_every_listed_url():
    gates = evals.ssrf_gates()
    assert len(gates) >= 8 and all(g.passed for g in gates), [g for g in gates if not g.passed]
