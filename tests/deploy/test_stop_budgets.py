"""Shutdown budgets nest: every stopper waits longer than the process it stops may take.

``ops.services.shutdown_budget_s`` is what a service may spend after SIGTERM (from
its settings); ``conduit up`` waits that plus ``STOP_MARGIN_S`` before SIGKILL, and so must
Kubernetes (``terminationGracePeriodSeconds``, after any preStop sleep) and compose
(``stop_grace_period``), with the settings their ConfigMap / environment gives.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ops.services import SERVICES, STOP_MARGIN_S, shutdown_budget_s
from conduit.runtime.settings import Settings

yaml = pytest.importorskip("yaml", reason="PyYAML (installed with the dev dependency kubernetes-validate) is needed")
ROOT = Path(__file__).resolve().parents[2]


def _settings(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Settings:
    for key, value in env.items():
        monkeypatch.setenv(key, str(value))
    return Settings()


def _seconds(text: str) -> float:
    return float(text[:-1]) * (60 if text.endswith("m") else 1) if text[-1] in "sm" else float(text)


@pytest.mark.parametrize("service", SERVICES)
def test_kubernetes_grace_covers_the_services_budget(service, monkeypatch):
    config = next(d for d in yaml.safe_load_all((ROOT / "k8s/base/config.yaml").read_text())
                  if d and d["kind"] == "ConfigMap")
    deployment = next(d for d in yaml.safe_load_all((ROOT / f"k8s/base/{service}.yaml").read_text())
                      if d and d["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    container = next(c for c in pod["containers"] if c.get("args", [])[:2] == ["serve", service])
    env = {**config["data"], **{e["name"]: e["value"] for e in container.get("env", []) if "value" in e}}
    pre_stop = container.get("lifecycle", {}).get("preStop", {}).get("sleep", {}).get("seconds", 0)
    budget = shutdown_budget_s(service, _settings(env, monkeypatch))
    assert pod["terminationGracePeriodSeconds"] >= pre_stop + budget + STOP_MARGIN_S, (service, budget)


@pytest.mark.parametrize("service", SERVICES)
def test_compose_grace_covers_the_services_budget(service, monkeypatch):
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    spec = compose["services"][service]
    env = {k: v for k, v in spec.get("environment", {}).items() if not str(v).startswith("$")}
    budget = shutdown_budget_s(service, _settings(env, monkeypatch))
    assert _seconds(spec.get("stop_grace_period", "10s")) >= budget + STOP_MARGIN_S, (service, budget)
