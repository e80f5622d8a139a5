"""Offline checks of the monitoring files: k8s/monitoring (PodMonitor, PrometheusRule) and the compose
Prometheus and Grafana services (deploy/prometheus, deploy/grafana).

The rules themselves are tested with promtool in tests/deploy/test_alert_rules.py; here: the PrometheusRule
carries exactly deploy/prometheus/alerts.yml's groups, the PodMonitor reaches every service's metrics port
in both namespaces and labels it ``service``, and compose mounts files that exist.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

yaml = pytest.importorskip("yaml", reason="PyYAML (installed with the dev dependency kubernetes-validate) is needed")

from ops.services import SERVICES  # noqa: E402
from tests.deploy.test_manifests import BASE, NAMESPACE, SANDBOX_NAMESPACE, render  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "k8s" / "monitoring"


def _objs() -> dict[str, dict[str, Any]]:
    return {o["kind"]: o for o in render(MONITORING)}


def test_monitoring_kustomization_has_a_podmonitor_and_a_prometheusrule() -> None:
    objs = _objs()
    assert set(objs) == {"PodMonitor", "PrometheusRule"}
    for obj in objs.values():
        assert obj["apiVersion"] == "monitoring.coreos.com/v1"
        assert obj["metadata"]["namespace"] == NAMESPACE


def test_prometheusrule_carries_the_compose_rules() -> None:
    rules = yaml.safe_load((ROOT / "deploy" / "prometheus" / "alerts.yml").read_text())
    assert _objs()["PrometheusRule"]["spec"]["groups"] == rules["groups"], \
        "k8s/monitoring/prometheusrule.yaml differs from deploy/prometheus/alerts.yml: copy the groups over"


def test_podmonitor_scrapes_every_service_on_its_metrics_port() -> None:
    monitor = _objs()["PodMonitor"]["spec"]
    assert set(monitor["namespaceSelector"]["matchNames"]) == {NAMESPACE, SANDBOX_NAMESPACE}
    endpoints = {e["port"]: e for e in monitor["podMetricsEndpoints"]}
    for endpoint in endpoints.values():
        assert endpoint["path"] == "/metrics"
        assert {"sourceLabels": ["__meta_kubernetes_pod_label_app_kubernetes_io_component"],
                "targetLabel": "service"} in endpoint["relabelings"]
    for service in SERVICES:
        ns = SANDBOX_NAMESPACE if service == "sandbox" else NAMESPACE
        (deployment,) = [o for o in render(BASE) if o["kind"] == "Deployment"
                         and o["metadata"]["name"] == f"conduit-{service}" and o["metadata"]["namespace"] == ns]
        template = deployment["spec"]["template"]
        labels = template["metadata"]["labels"]
        assert monitor["selector"]["matchLabels"].items() <= labels.items(), service
        assert labels["app.kubernetes.io/component"] == service
        (main,) = template["spec"]["containers"]
        port = "http" if service == "gateway" else "metrics"
        assert port in {p.get("name") for p in main["ports"]}, f"{service}: no port {port!r}"
        assert port in endpoints


def test_compose_prometheus_and_grafana_mount_the_repository_files() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    for name in ("prometheus", "grafana"):
        svc = compose["services"][name]
        assert svc["healthcheck"]["test"] and svc["restart"] == "unless-stopped"
        assert "backend" in svc["networks"], f"{name} reaches the services on the backend network"
        assert all(p.startswith("127.0.0.1:") for p in svc["ports"]), f"{name}: loopback only"
        for volume in svc["volumes"]:
            source = volume.split(":")[0]
            if source.startswith("./"):
                assert (ROOT / source).exists(), f"{name} mounts missing {source}"
    config = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    assert ["/etc/prometheus/alerts.yml"] == config["rule_files"]
    assert "./deploy/prometheus/alerts.yml:/etc/prometheus/alerts.yml:ro" in compose["services"]["prometheus"]["volumes"]
    datasource = yaml.safe_load((ROOT / "deploy/grafana/provisioning/datasources/prometheus.yml").read_text())
    assert datasource["datasources"][0]["url"] == "http://prometheus:9090"
    dashboard = json.loads((ROOT / "deploy/grafana/dashboards/conduit.json").read_text())
    assert dashboard["uid"] == "conduit-overview"
