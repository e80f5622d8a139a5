"""The alert rules and the dashboard against promtool and the metrics Conduit really exports.

- ``promtool check rules`` and ``promtool test rules`` (Debian package ``prometheus``; .ci/run installs it)
  on ``deploy/prometheus/alerts.yml`` and its unit tests ``alerts.test.yml``; skipped, saying so, without
  promtool. Every alert has at least one test there.
- ``promtool check config`` on the compose Prometheus configuration.
- Every ``conduit_*`` metric the rules and the Grafana dashboard name is one ``conduit.runtime.metrics``
  registers, and no label of it is a task id (bounded labels).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client import REGISTRY

from conduit.runtime import metrics
from ops.services import SERVICES

ROOT = Path(__file__).resolve().parents[2]
PROM = ROOT / "deploy" / "prometheus"
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "conduit.json"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed: the alert rules' tests need "
                                    "Debian's prometheus package (apt-get install -y prometheus; .ci/run installs it)")
METRIC = re.compile(r"\b(conduit_[a-z_]+)")
SUFFIXES = ("_bucket", "_count", "_sum", "_created")


def _promtool(*args: str, cwd: Path = PROM) -> str:
    out = subprocess.run([PROMTOOL or "promtool", *args], capture_output=True, text=True, timeout=60, cwd=cwd)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def _alerts() -> list[dict]:
    return [r for g in yaml.safe_load((PROM / "alerts.yml").read_text())["groups"] for r in g["rules"]]


@needs_promtool
def test_promtool_checks_the_rules() -> None:
    assert f"SUCCESS: {len(_alerts())} rules found" in _promtool("check", "rules", "alerts.yml")


@needs_promtool
def test_promtool_runs_the_unit_test_of_every_alert() -> None:
    _promtool("test", "rules", "alerts.test.yml")
    tests = yaml.safe_load((PROM / "alerts.test.yml").read_text())["tests"]
    tested = {case["alertname"] for t in tests for case in t["alert_rule_test"] if case["exp_alerts"]}
    assert tested == {a["alert"] for a in _alerts()}, "every alert is seen firing in alerts.test.yml"


@needs_promtool
def test_promtool_checks_the_compose_configuration(tmp_path: Path) -> None:
    """The compose file mounts alerts.yml at /etc/prometheus; here it sits next to the configuration."""
    config = yaml.safe_load((PROM / "prometheus.yml").read_text())
    assert config["rule_files"] == ["/etc/prometheus/alerts.yml"]
    config["rule_files"] = [str(PROM / "alerts.yml")]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    _promtool("check", "config", str(tmp_path / "prometheus.yml"))
    targets = {c["labels"]["service"]: c["targets"] for c in config["scrape_configs"][0]["static_configs"]}
    assert set(targets) == set(SERVICES), "one target per service, labelled service=<name>"


def _registered() -> dict[str, set[str]]:
    """``{metric name: its label names}`` of every ``conduit_*`` metric in the default registry."""
    names: dict[str, set[str]] = {}
    for family in REGISTRY.collect():
        if family.name.startswith("conduit_"):
            labels = {k for s in family.samples for k in s.labels if k not in ("le", "quantile")}
            name = family.name + ("_total" if family.type == "counter" else "")
            names[name] = labels
    return names


def test_rules_and_dashboard_name_only_exported_metrics() -> None:
    assert metrics.MODEL_TOKENS._labelnames == ("tenant", "model", "kind")
    known = set(_registered()) | {"conduit_circuit_breaker_open"}
    exprs = [a["expr"] for a in _alerts()]
    dashboard = json.loads(DASHBOARD.read_text())
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    exprs += [t["expr"] for p in panels for t in p["targets"]]
    named = set()
    for expr in exprs:
        for name in METRIC.findall(expr):
            for suffix in SUFFIXES:
                if name.endswith(suffix) and name.removesuffix(suffix) in known:
                    name = name.removesuffix(suffix)
            named.add(name)
    assert named - known == set(), "metrics the rules or dashboard name but Conduit does not export"
    assert {"conduit_consumer_lag_messages", "conduit_dead_letters_total", "conduit_model_tokens_total"} <= named
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))


def test_no_metric_is_labelled_by_task_or_session() -> None:
    """Bounded labels: no label that names one task, session, user or call (one series each would grow forever)."""
    metrics.tool_call("kb_search", "ok", 0.01)
    for name, labels in _registered().items():
        assert not labels & {"task_id", "task", "session_id", "session", "user", "user_id", "call_id"}, name


def test_tenant_label_is_bounded_by_configuration() -> None:
    assert metrics.tenant_label("acme", {"acme": {}}) == "acme"
    assert metrics.tenant_label("default", {}) == "default"
    assert metrics.tenant_label("someone-new", {"acme": {}}) == "other"


def test_breakers_are_read_at_scrape_time() -> None:
    """``conduit_circuit_breaker_open`` follows the watched breakers; MCP tools share ``name="mcp"``."""
    from conduit.runtime.settings import Settings
    from services.orchestrator.agent.deps import Deps

    deps = Deps.from_settings(Settings(), model_configured=True)
    metrics.watch_breakers(deps)
    for _ in range(deps.model_breaker.failures):
        deps.model_breaker.failure(__import__("time").time())
    deps.breaker("mcp.acme.lookup")

    def value(kind: str, name: str) -> float | None:
        return REGISTRY.get_sample_value("conduit_circuit_breaker_open", {"kind": kind, "name": name})

    assert value("model", "default") == 1
    assert value("tool", "kb_search") == 0
    assert value("tool", "mcp") == 0
    assert REGISTRY.get_sample_value("conduit_tasks_total", {"outcome": "failed", "mode": "agent"}) is not None
