"""Offline checks of the deployment files: k8s/ (kustomize), docker-compose.yml, Dockerfile.

- ``render`` is a small kustomize loader for the keys the kustomizations use
  (``resources``, ``images``, JSON 6902 ``patches``); when ``kubectl`` is on PATH its
  output is compared with ``kubectl kustomize``.
- Every built-in object is validated with kubernetes-validate against Kubernetes
  1.31 in strict mode (unknown fields are errors). KEDA and Strimzi custom resources
  have no schema there: they are checked for apiVersion/kind/metadata.name and,
  below, for what Conduit relies on.
- The rest checks the contract between the manifests and the code: one Deployment
  per service of ``ops.services.SERVICES``, probes, resources, hardening,
  network isolation, topics and consumer groups from ``contracts.topics``, settings
  keys that ``conduit.runtime.settings.Settings`` reads.
- ``docker-compose config`` runs when the ``docker-compose`` binary exists (Debian
  package ``docker-compose``), else that one test skips.

Needs the dev dependencies (PyYAML comes with kubernetes-validate).
"""

from __future__ import annotations

import copy
import ipaddress
import json
import re
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest

yaml = pytest.importorskip("yaml", reason="PyYAML (installed with the dev dependency kubernetes-validate) is needed")

from ops.services import SERVICES  # noqa: E402
from conduit.runtime.settings import GROUPS, Settings  # noqa: E402
from contracts import topics  # noqa: E402
from contracts.channels import CHANNELS  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "k8s" / "base"
DEV = ROOT / "k8s" / "overlays" / "dev"
K8S_VERSION = "1.31.0"
CUSTOM_API_VERSIONS = {"kafka.strimzi.io/v1", "keda.sh/v1alpha1"}
NAMESPACE = "conduit"
SANDBOX_NAMESPACE = "conduit-sandbox"
PARTITIONS = 12
PRIVATE_V4 = ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "169.254.0.0/16"]
METRICS_PORT = 9100  # CONDUIT_METRICS_PORT of the services without HTTP; the gateway serves /metrics on its HTTP port
# the only peer admitted to /metrics: Prometheus pods in namespace "monitoring" (docs/deploy.md, "Metrics")
PROMETHEUS_PEER = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
    "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
}

Obj = dict[str, Any]


# --------------------------------------------------------------------------- loader
KUSTOMIZATION_KEYS = {"apiVersion", "kind", "resources", "images", "patches"}


def _walk_images(node: Any, image: dict[str, str]) -> None:
    """Apply one kustomize ``images`` entry to every container and initContainer under ``node``."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("containers", "initContainers") and isinstance(value, list):
                for container in value:
                    name = re.split(r"[:@]", container["image"], maxsplit=1)[0]
                    if name == image["name"]:
                        tag = container["image"][len(name):]
                        new = image.get("newName", name)
                        if "newTag" in image:
                            tag = f":{image['newTag']}"
                        container["image"] = new + tag
            _walk_images(value, image)
    elif isinstance(node, list):
        for item in node:
            _walk_images(item, image)


def _pointer(path: str) -> list[str]:
    return [p.replace("~1", "/").replace("~0", "~") for p in path.lstrip("/").split("/")]


def _json_patch(obj: Obj, ops: list[dict[str, Any]]) -> None:
    """Apply RFC 6902 ``add`` / ``replace`` / ``remove`` operations to ``obj`` in place."""
    for op in ops:
        *parents, last = _pointer(op["path"])
        node: Any = obj
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        if isinstance(node, list):
            index = len(node) if last == "-" else int(last)
            if op["op"] == "add":
                node.insert(index, copy.deepcopy(op["value"]))
            elif op["op"] == "replace":
                node[index] = copy.deepcopy(op["value"])
            elif op["op"] == "remove":
                del node[index]
            else:
                raise ValueError(f"unsupported op {op['op']}")
        else:
            if op["op"] in ("add", "replace"):
                if op["op"] == "replace" and last not in node:
                    raise KeyError(f"replace of missing {op['path']}")
                node[last] = copy.deepcopy(op["value"])
            elif op["op"] == "remove":
                del node[last]
            else:
                raise ValueError(f"unsupported op {op['op']}")


def _matches(obj: Obj, target: dict[str, str]) -> bool:
    unknown = set(target) - {"kind", "name", "namespace"}
    if unknown:
        raise ValueError(f"patch target keys not supported by the test loader: {unknown}")
    meta = obj["metadata"]
    return (
        target.get("kind", obj["kind"]) == obj["kind"]
        and target.get("name", meta["name"]) == meta["name"]
        and target.get("namespace", meta.get("namespace")) == meta.get("namespace")
    )


def render(directory: Path) -> list[Obj]:
    """Render the kustomization in ``directory`` like ``kubectl kustomize`` (the subset used here)."""
    spec = yaml.safe_load((directory / "kustomization.yaml").read_text())
    unknown = set(spec) - KUSTOMIZATION_KEYS
    if unknown:
        raise ValueError(f"{directory}: kustomization keys the test loader does not know: {unknown}")
    objs: list[Obj] = []
    for resource in spec.get("resources", []):
        path = (directory / resource).resolve()
        if path.is_dir():
            objs += render(path)
        else:
            objs += [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    for patch in spec.get("patches", []):
        ops = yaml.safe_load(patch["patch"])
        hits = [o for o in objs if _matches(o, patch["target"])]
        assert hits, f"{directory}: patch target {patch['target']} matches nothing"
        for obj in hits:
            _json_patch(obj, ops)
    for image in spec.get("images", []):
        _walk_images(objs, image)
    return objs


def _key(obj: Obj) -> tuple[str, str, str]:
    return obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"]


@pytest.fixture(scope="module", params=["base", "dev"])
def rendered(request: pytest.FixtureRequest) -> tuple[str, list[Obj]]:
    directory = BASE if request.param == "base" else DEV
    return request.param, render(directory)


@pytest.fixture(scope="module")
def base() -> list[Obj]:
    return render(BASE)


def _one(objs: list[Obj], kind: str, name: str, namespace: str | None = None) -> Obj:
    found = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name
             and (namespace is None or o["metadata"].get("namespace") == namespace)]
    assert len(found) == 1, f"expected one {kind}/{name}, found {len(found)}"
    return found[0]


def _kind(objs: list[Obj], kind: str) -> list[Obj]:
    return [o for o in objs if o["kind"] == kind]


def _labels_match(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


# --------------------------------------------------------------------------- rendering and schemas
def test_loader_agrees_with_kubectl_kustomize(rendered: tuple[str, list[Obj]]) -> None:
    """The test loader and ``kubectl kustomize`` produce the same objects."""
    name, objs = rendered
    kubectl = shutil.which("kubectl")
    if not kubectl:
        pytest.skip("kubectl not on PATH: the loader's output is checked by the other tests only")
    directory = BASE if name == "base" else DEV
    out = subprocess.run([kubectl, "kustomize", str(directory)], capture_output=True, text=True, timeout=60, check=True)
    theirs = {_key(o): o for o in yaml.safe_load_all(out.stdout) if o}
    ours = {_key(o): o for o in objs}
    assert sorted(ours) == sorted(theirs)
    for key, obj in ours.items():
        assert obj == theirs[key], f"{key} differs from kubectl kustomize"


def test_every_object_is_valid_for_kubernetes(rendered: tuple[str, list[Obj]]) -> None:
    """Built-in kinds pass kubernetes-validate --strict for 1.31; custom resources are known kinds."""
    kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="dev dependency kubernetes-validate not installed")
    _, objs = rendered
    assert len({_key(o) for o in objs}) == len(objs), "duplicate objects"
    errors, custom = [], []
    for obj in objs:
        try:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            custom.append(obj)
        except kubernetes_validate.ValidationError as exc:
            errors.append(f"{_key(obj)}: {exc.message} at {'/'.join(map(str, exc.path))}")
    assert not errors, "\n".join(errors)
    for obj in custom:
        assert obj["apiVersion"] in CUSTOM_API_VERSIONS, f"unexpected custom resource {_key(obj)}"
        assert obj["kind"] in {"Kafka", "KafkaNodePool", "KafkaTopic", "ScaledObject"}
        assert obj["metadata"]["name"] and obj.get("spec"), _key(obj)
    assert {o["kind"] for o in custom} == {"Kafka", "KafkaNodePool", "KafkaTopic", "ScaledObject"}


def test_every_object_has_a_namespace(base: list[Obj]) -> None:
    for obj in base:
        if obj["kind"] == "Namespace":
            continue
        assert obj["metadata"].get("namespace") in (NAMESPACE, SANDBOX_NAMESPACE), _key(obj)
    assert {o["metadata"]["name"] for o in _kind(base, "Namespace")} == {NAMESPACE, SANDBOX_NAMESPACE}


# --------------------------------------------------------------------------- workloads
def _pod_workloads(objs: list[Obj]) -> list[Obj]:
    return [o for o in objs if o["kind"] in ("Deployment", "StatefulSet", "Job")]


def test_one_deployment_per_service(rendered: tuple[str, list[Obj]]) -> None:
    name, objs = rendered
    deployments = {d["metadata"]["name"]: d for d in _kind(objs, "Deployment")}
    assert set(deployments) == {f"conduit-{s}" for s in SERVICES}
    tag = "0.1.0" if name == "base" else "dev"
    for service in SERVICES:
        deployment = deployments[f"conduit-{service}"]
        expected_ns = SANDBOX_NAMESPACE if service == "sandbox" else NAMESPACE
        assert deployment["metadata"]["namespace"] == expected_ns
        pod = deployment["spec"]["template"]["spec"]
        (main,) = pod["containers"]
        assert main["image"] == f"conduit:{tag}"
        assert main["args"] == ["serve", service]
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert _labels_match(deployment["spec"]["selector"]["matchLabels"], labels)
        assert labels["app.kubernetes.io/component"] == service
        refs = [e.get("configMapRef", e.get("secretRef"))["name"] for e in main["envFrom"]]
        assert refs[0] == "conduit-config"
        assert ("conduit-secrets" in refs) == (service == "orchestrator"), "only the orchestrator gets the API key"
        waits = [c["command"][3] for c in pod["initContainers"]]
        assert waits == (["topics", "corpus"] if service == "retriever" else ["topics"])
        for init in pod["initContainers"]:
            assert init["command"][:3] == ["python", "-m", "ops.probe"]


def test_ingest_job_loads_the_law_corpus(rendered: tuple[str, list[Obj]]) -> None:
    """The Job runs a real CLI command against the same settings as the retriever."""
    from typer.testing import CliRunner  # noqa: PLC0415

    from ops.cli import app  # noqa: PLC0415

    _, objs = rendered
    job = _one(objs, "Job", "conduit-ingest-laws", NAMESPACE)
    (main,) = job["spec"]["template"]["spec"]["containers"]
    assert main["args"] == ["ingest", "--law-db"]
    assert main["envFrom"] == [{"configMapRef": {"name": "conduit-config"}}]
    assert _compose()["services"]["ingest"]["command"] == main["args"]
    help_text = CliRunner().invoke(app, ["ingest", "--help"]).output
    assert "--law-db" in help_text


def test_every_container_has_resources_and_hardening(base: list[Obj]) -> None:
    for workload in _pod_workloads(base):
        pod = workload["spec"]["template"]["spec"]
        where = workload["metadata"]["name"]
        assert pod["automountServiceAccountToken"] is False, where
        assert pod["enableServiceLinks"] is False, f"{where}: service links inject *_PORT=tcp://... variables"
        assert pod["securityContext"]["runAsNonRoot"] is True, where
        assert pod["securityContext"]["runAsUser"] > 0, where
        assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault", where
        for container in pod.get("initContainers", []) + pod["containers"]:
            res = container["resources"]
            for part in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(res[part]), f"{where}/{container['name']} {part}"
            sc = container["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False, where
            assert sc["readOnlyRootFilesystem"] is True, where
            assert sc["capabilities"]["drop"] == ["ALL"], where
            mounts = {m["mountPath"] for m in container.get("volumeMounts", [])}
            if container["image"].startswith("conduit"):
                assert "/tmp" in mounts, f"{where}: read-only root needs a writable /tmp"


def test_probes(base: list[Obj]) -> None:
    """Gateway: HTTP /readyz and /healthz; the others: ``ops.probe`` on their liveness key."""
    for service in SERVICES:
        ns = SANDBOX_NAMESPACE if service == "sandbox" else NAMESPACE
        (main,) = _one(base, "Deployment", f"conduit-{service}", ns)["spec"]["template"]["spec"]["containers"]
        ready, live = main["readinessProbe"], main["livenessProbe"]
        if service == "gateway":
            ports = {p["name"]: p["containerPort"] for p in main["ports"]}
            assert ports == {"http": Settings().gateway.gateway_port}
            assert ready["httpGet"] == {"path": "/readyz", "port": "http"}
            assert live["httpGet"] == {"path": "/healthz", "port": "http"}
        else:
            assert ready["exec"]["command"] == ["python", "-m", "ops.probe", "ready", service]
            assert live["exec"]["command"] == ["python", "-m", "ops.probe", "live", service]
            assert main["startupProbe"]["exec"]["command"] == ready["exec"]["command"]
            assert ready["timeoutSeconds"] >= 5, "the check imports Python modules: allow it time"
    for name in ("redis", "qdrant"):
        (main,) = _one(base, "StatefulSet", name)["spec"]["template"]["spec"]["containers"]
        assert main["readinessProbe"] and main["livenessProbe"]


def test_sandbox_can_run_bubblewrap(base: list[Obj]) -> None:
    """The settings bubblewrap needs (docs/deploy.md) are present, and only on the sandbox."""
    for deployment in _kind(base, "Deployment"):
        pod = deployment["spec"]["template"]["spec"]
        (main,) = pod["containers"]
        if deployment["metadata"]["name"] == "conduit-sandbox":
            assert pod["hostUsers"] is False
            sc = main["securityContext"]
            assert sc["procMount"] == "Unmasked"
            assert sc["seccompProfile"] == {"type": "Unconfined"}
            assert sc["appArmorProfile"] == {"type": "Unconfined"}
            assert sc["capabilities"]["drop"] == ["ALL"] and sc["allowPrivilegeEscalation"] is False
        else:
            assert "hostUsers" not in pod
            assert "seccompProfile" not in main["securityContext"]
            assert "procMount" not in main["securityContext"]
    levels = {n["metadata"]["name"]: n["metadata"]["labels"]["pod-security.kubernetes.io/enforce"]
              for n in _kind(base, "Namespace")}
    assert levels == {NAMESPACE: "baseline", SANDBOX_NAMESPACE: "privileged"}


def test_services_ingress_and_scalers_point_at_real_workloads(base: list[Obj]) -> None:
    pods = {(w["metadata"]["namespace"], w["metadata"]["name"]): w for w in _pod_workloads(base)}
    for svc in _kind(base, "Service"):
        ns = svc["metadata"]["namespace"]
        matched = [w for (wns, _), w in pods.items() if wns == ns
                   and _labels_match(svc["spec"]["selector"], w["spec"]["template"]["metadata"]["labels"])]
        assert len(matched) == 1, f"Service {svc['metadata']['name']} selects {len(matched)} workloads"
        names = {p["name"] for c in matched[0]["spec"]["template"]["spec"]["containers"] for p in c.get("ports", [])}
        for port in svc["spec"]["ports"]:
            assert port["targetPort"] in names, f"Service {svc['metadata']['name']} port {port}"
    for ingress in _kind(base, "Ingress"):
        for rule in ingress["spec"]["rules"]:
            for path in rule["http"]["paths"]:
                backend = path["backend"]["service"]
                svc = _one(base, "Service", backend["name"], ingress["metadata"]["namespace"])
                assert backend["port"]["name"] in {p["name"] for p in svc["spec"]["ports"]}
    for kind in ("HorizontalPodAutoscaler", "ScaledObject"):
        for scaler in _kind(base, kind):
            target = scaler["spec"]["scaleTargetRef"]
            assert (scaler["metadata"]["namespace"], target["name"]) in pods
    for pdb in _kind(base, "PodDisruptionBudget"):
        ns = pdb["metadata"]["namespace"]
        assert any(wns == ns and _labels_match(pdb["spec"]["selector"]["matchLabels"], w["spec"]["template"]["metadata"]["labels"])
                   for (wns, _), w in pods.items()), pdb["metadata"]["name"]
    covered = {p["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] for p in _kind(base, "PodDisruptionBudget")}
    assert covered == set(SERVICES)
    scaled = {o["spec"]["scaleTargetRef"]["name"] for o in _kind(base, "ScaledObject")}
    hpa = {o["spec"]["scaleTargetRef"]["name"] for o in _kind(base, "HorizontalPodAutoscaler")}
    assert hpa == {"conduit-gateway"}
    assert scaled == {f"conduit-{s}" for s in SERVICES if s != "gateway"}, "one autoscaler per Deployment, never two"


def test_gateway_ingress_is_sse_friendly(base: list[Obj]) -> None:
    ingress = _one(base, "Ingress", "conduit-gateway")
    notes = ingress["metadata"]["annotations"]
    assert notes["nginx.ingress.kubernetes.io/proxy-buffering"] == "off"
    assert int(notes["nginx.ingress.kubernetes.io/proxy-read-timeout"]) >= 300
    assert int(notes["nginx.ingress.kubernetes.io/proxy-read-timeout"]) > Settings().gateway.sse_heartbeat_s
    hpa = _one(base, "HorizontalPodAutoscaler", "conduit-gateway")
    assert hpa["spec"]["minReplicas"] >= 2
    assert hpa["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] >= 300


# --------------------------------------------------------------------------- network policies
def _policy_for(objs: list[Obj], workload: Obj) -> Obj:
    labels = workload["spec"]["template"]["metadata"]["labels"]
    ns = workload["metadata"]["namespace"]
    found = [p for p in _kind(objs, "NetworkPolicy") if p["metadata"]["namespace"] == ns
             and _labels_match(p["spec"]["podSelector"]["matchLabels"], labels)]
    assert len(found) == 1, f"{workload['metadata']['name']}: {len(found)} NetworkPolicies"
    assert sorted(found[0]["spec"]["policyTypes"]) == ["Egress", "Ingress"]
    return found[0]


def _ports(rule: dict[str, Any]) -> set[int]:
    return {p["port"] for p in rule["ports"]}


def test_every_workload_has_a_closed_network_policy(base: list[Obj]) -> None:
    for workload in _pod_workloads(base):
        policy = _policy_for(base, workload)
        for rule in policy["spec"].get("egress", []):
            assert rule.get("to") and rule.get("ports"), f"{policy['metadata']['name']}: an egress rule open to all"
        for rule in policy["spec"].get("ingress", []):
            assert rule.get("from") and rule.get("ports"), f"{policy['metadata']['name']}: an ingress rule open to all"


def test_sandbox_admits_only_prometheus_and_reaches_only_kafka_redis_dns(base: list[Obj]) -> None:
    """The sandbox pod accepts only Prometheus on the metrics port, and reaches Kafka and
    Redis (its requests and results) and DNS: nothing else.

    The code it runs has no network at all (bubblewrap ``--unshare-all``); an egress
    rule of any other kind (an ipBlock, an empty ``to``) would let an escape out.
    """
    policy = _policy_for(base, _one(base, "Deployment", "conduit-sandbox"))
    assert policy["spec"]["ingress"] == [{"from": [PROMETHEUS_PEER], "ports": [{"protocol": "TCP", "port": METRICS_PORT}]}]
    reached = set()
    for rule in policy["spec"]["egress"]:
        for peer in rule["to"]:
            assert "ipBlock" not in peer
            assert peer.get("podSelector", {}).get("matchLabels"), "a bare namespaceSelector allows a whole namespace"
            ns = peer["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
            labels = peer["podSelector"]["matchLabels"]
            if labels.get("k8s-app") == "kube-dns":
                assert (ns, _ports(rule)) == ("kube-system", {53})
                reached.add("dns")
            elif labels.get("strimzi.io/cluster") == "conduit":
                assert (ns, _ports(rule)) == (NAMESPACE, {9092})
                reached.add("kafka")
            elif labels.get("app.kubernetes.io/name") == "redis":
                assert (ns, _ports(rule)) == (NAMESPACE, {6379})
                reached.add("redis")
            else:
                raise AssertionError(f"unexpected sandbox egress peer {peer}")
    assert reached == {"dns", "kafka", "redis"}


def _scrape_port(deployment: Obj) -> int:
    """The port the ``prometheus.io/*`` pod annotations send Prometheus to (checked below)."""
    return int(deployment["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"])


def test_every_deployment_is_annotated_for_prometheus_on_a_real_metrics_port(rendered: tuple[str, list[Obj]]) -> None:
    """Pod annotations point at a declared port of the service container that serves /metrics.

    Gateway: its HTTP port (``GET /metrics``). The others: ``CONDUIT_METRICS_PORT`` set on
    the container itself (``conduit serve`` starts prometheus-client's server on it), never
    in the ConfigMap the gateway shares, and declared as the containerPort named ``metrics``
    (what a PodMonitor selects).
    """
    _, objs = rendered
    config = _one(objs, "ConfigMap", "conduit-config", NAMESPACE)["data"]
    assert "CONDUIT_METRICS_PORT" in _settings_keys()
    assert "CONDUIT_METRICS_PORT" not in config, "the gateway shares the ConfigMap: set the port per container"
    for service in SERVICES:
        ns = SANDBOX_NAMESPACE if service == "sandbox" else NAMESPACE
        deployment = _one(objs, "Deployment", f"conduit-{service}", ns)
        template = deployment["spec"]["template"]
        notes = template["metadata"].get("annotations", {})
        assert notes.get("prometheus.io/scrape") == "true", service
        assert notes.get("prometheus.io/path") == "/metrics", service
        port = _scrape_port(deployment)
        assert notes["prometheus.io/port"] == str(port), f"{service}: annotation values are strings"
        (main,) = template["spec"]["containers"]
        declared = {p["containerPort"]: p for p in main.get("ports", [])}
        assert port in declared, f"{service}: annotated port {port} is not a containerPort"
        assert declared[port].get("protocol", "TCP") == "TCP"
        env = {e["name"]: e.get("value") for e in main.get("env", [])}
        if service == "gateway":
            assert port == Settings().gateway.gateway_port == int(config["CONDUIT_GATEWAY_PORT"])
            assert declared[port]["name"] == "http"
            assert "CONDUIT_METRICS_PORT" not in env, "the gateway serves /metrics on its HTTP port"
        else:
            assert port == METRICS_PORT, service
            assert declared[port]["name"] == "metrics", service
            assert env.get("CONDUIT_METRICS_PORT") == str(port), f"{service}: metrics server not started on {port}"
            assert Settings(metrics_port=env["CONDUIT_METRICS_PORT"]).observability.metrics_port == port


def test_network_policies_admit_prometheus_on_the_metrics_port_only(base: list[Obj]) -> None:
    """Each workload's policy has exactly one Prometheus rule, on exactly its scrape port.

    Besides it the non-gateway services accept nothing; Prometheus reaches no other
    workload (Redis, Qdrant, the ingest Job) and no other port.
    """
    scraped = set()
    for workload in _pod_workloads(base):
        policy = _policy_for(base, workload)
        name = workload["metadata"]["name"]
        rules = policy["spec"].get("ingress", [])
        for rule in rules:
            for peer in rule["from"]:
                if peer.get("namespaceSelector", {}).get("matchLabels", {}).get("kubernetes.io/metadata.name") == "monitoring":
                    assert peer == PROMETHEUS_PEER, f"{name}: the monitoring namespace is admitted beyond Prometheus"
        metrics_rules = [r for r in rules if PROMETHEUS_PEER in r["from"]]
        if workload["kind"] != "Deployment":
            assert not metrics_rules, f"{name} serves no metrics: Prometheus has no business there"
            continue
        (rule,) = metrics_rules
        assert rule == {"from": [PROMETHEUS_PEER], "ports": [{"protocol": "TCP", "port": _scrape_port(workload)}]}, name
        if workload["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"] != "gateway":
            assert rules == [rule], f"{name}: no ingress but /metrics"
        scraped.add(name)
    assert scraped == {f"conduit-{s}" for s in SERVICES}


@pytest.mark.parametrize("service", ["web", "gateway"])  # the gateway: A2A push notifications (rule T12)
def test_web_reaches_the_internet_but_no_private_address(base: list[Obj], service: str) -> None:
    policy = _policy_for(base, _one(base, "Deployment", f"conduit-{service}"))
    blocks = [peer["ipBlock"] for rule in policy["spec"]["egress"] for peer in rule["to"] if "ipBlock" in peer]
    v4 = [b for b in blocks if b["cidr"] == "0.0.0.0/0"]
    assert len(v4) == 1 and set(PRIVATE_V4) <= set(v4[0]["except"])
    for block in blocks:
        net = ipaddress.ip_network(block["cidr"])
        if net.version == 6:
            assert {"fc00::/7", "fe80::/10"} <= set(block["except"])
    internet_rules = [r for r in policy["spec"]["egress"] if any("ipBlock" in p for p in r["to"])]
    assert all(_ports(r) <= {80, 443} for r in internet_rules)
    selectors = [p.get("podSelector", {}).get("matchLabels", {}) for r in policy["spec"]["egress"] for p in r["to"]]
    assert not any(s.get("app.kubernetes.io/name") == "qdrant" for s in selectors)


def test_only_the_retriever_and_ingest_reach_qdrant_and_nothing_internal_has_internet(base: list[Obj]) -> None:
    for service in ("retriever", "ingest-laws"):
        policy = _policy_for(base, _one(base, "Job" if service == "ingest-laws" else "Deployment", f"conduit-{service}"))
        assert not any("ipBlock" in p for r in policy["spec"]["egress"] for p in r["to"]), service
    qdrant = _policy_for(base, _one(base, "StatefulSet", "qdrant"))
    (rule,) = qdrant["spec"]["ingress"]
    assert [p["podSelector"]["matchLabels"]["app.kubernetes.io/component"] for p in rule["from"]] == ["retriever", "ingest"]
    for name in ("redis", "qdrant"):
        assert _policy_for(base, _one(base, "StatefulSet", name))["spec"]["egress"] == []
    gateway = _policy_for(base, _one(base, "Deployment", "conduit-gateway"))
    proxy, scrape = gateway["spec"]["ingress"]
    assert proxy["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}}}]
    assert _ports(proxy) == {8000}
    assert scrape["from"] == [PROMETHEUS_PEER] and _ports(scrape) == {8000}


def test_kafka_listener_admits_conduit_and_keda(base: list[Obj]) -> None:
    kafka = _one(base, "Kafka", "conduit")
    (listener,) = kafka["spec"]["kafka"]["listeners"]
    assert listener["port"] == 9092 and listener["tls"] is False
    namespaces = {p.get("namespaceSelector", {}).get("matchLabels", {}).get("kubernetes.io/metadata.name")
                  for p in listener["networkPolicyPeers"]}
    assert {None, SANDBOX_NAMESPACE, "keda"} == namespaces


# --------------------------------------------------------------------------- Kafka topics, KEDA, settings
def test_strimzi_topics_match_contracts(rendered: tuple[str, list[Obj]]) -> None:
    _, objs = rendered
    kafka = _one(objs, "Kafka", "conduit")
    pool = _one(objs, "KafkaNodePool", "dual-role")
    assert pool["metadata"]["labels"]["strimzi.io/cluster"] == kafka["metadata"]["name"]
    assert {"broker", "controller"} == set(pool["spec"]["roles"])
    brokers = pool["spec"]["replicas"]
    config = kafka["spec"]["kafka"]["config"]
    assert config["auto.create.topics.enable"] is False
    assert config["min.insync.replicas"] < config["default.replication.factor"] <= brokers or brokers == 1
    kafka_topics = _kind(objs, "KafkaTopic")
    assert sorted(t["spec"]["topicName"] for t in kafka_topics) == sorted(topics.ALL_TOPICS)
    assert len(kafka_topics) == len(topics.ALL_TOPICS)
    for topic in kafka_topics:
        assert topic["metadata"]["labels"]["strimzi.io/cluster"] == kafka["metadata"]["name"]
        assert topic["spec"]["partitions"] == PARTITIONS
        assert topic["spec"]["replicas"] <= brokers
        assert topic["spec"]["config"]["min.insync.replicas"] <= topic["spec"]["replicas"]
        assert topic["spec"]["config"]["min.insync.replicas"] < topic["spec"]["replicas"] or brokers == 1, \
            "acks=all with min.insync.replicas == replicas stops producing when one broker is down"


def test_keda_scales_each_consumer_group_on_its_topics(base: list[Obj]) -> None:
    """One ScaledObject per consumer group, with a trigger for every topic the group reads."""
    config = _one(base, "ConfigMap", "conduit-config", NAMESPACE)["data"]
    consumed: dict[str, set[str]] = {}
    for doc in CHANNELS:
        for group in doc.consumers:
            consumed.setdefault(group, set()).add(doc.topic)
    seen = {}
    for scaled in _kind(base, "ScaledObject"):
        triggers = scaled["spec"]["triggers"]
        groups = {t["metadata"]["consumerGroup"] for t in triggers}
        assert len(groups) == 1, scaled["metadata"]["name"]
        (group,) = groups
        service = scaled["spec"]["scaleTargetRef"]["name"].removeprefix("conduit-")
        assert group == f"{topics.PREFIX}-{service}"
        assert {t["metadata"]["topic"] for t in triggers} == consumed[group]
        for trigger in triggers:
            meta = trigger["metadata"]
            assert trigger["type"] == "kafka"
            assert meta["bootstrapServers"] == config["KAFKA_BOOTSTRAP_SERVERS"]
            assert meta["allowIdleConsumers"] == "false"
            assert meta["offsetResetPolicy"] == "earliest", "conduit/runtime/bus.py subscribes with auto_offset_reset=earliest"
            assert int(meta["lagThreshold"]) > 0
        assert 1 <= scaled["spec"]["minReplicaCount"] <= scaled["spec"]["maxReplicaCount"] <= PARTITIONS
        seen[group] = scaled
    assert set(seen) == {topics.GROUP_ORCHESTRATOR, topics.GROUP_RETRIEVER, topics.GROUP_WEB, topics.GROUP_SANDBOX,
                         topics.GROUP_MCP}


def _settings_keys() -> set[str]:
    """Environment variable names ``Settings`` reads: CONDUIT_<FIELD> plus the plain aliases."""
    keys = set()
    for name, field in ((n, f) for group in GROUPS.values() for n, f in group.model_fields.items()):
        keys.add(f"CONDUIT_{name.upper()}")
        alias = field.validation_alias
        if alias is not None:
            keys |= {c for c in getattr(alias, "choices", [alias]) if isinstance(c, str)}
    return keys


NON_SETTINGS_ENV = {"OMP_WAIT_POLICY", "XDG_CACHE_HOME", "OTEL_EXPORTER_OTLP_ENDPOINT"}
"""Environment read outside the settings: numeric libraries, caches, and the OpenTelemetry standard variable
``conduit.runtime.tracing.traces_endpoint`` reads (rule O5)."""


def test_configmaps_hold_real_settings(base: list[Obj], monkeypatch: pytest.MonkeyPatch) -> None:
    main = _one(base, "ConfigMap", "conduit-config", NAMESPACE)["data"]
    sandbox = _one(base, "ConfigMap", "conduit-config", SANDBOX_NAMESPACE)["data"]
    assert main == sandbox, "the two namespaces' ConfigMaps drifted apart"
    unknown = set(main) - _settings_keys() - NON_SETTINGS_ENV
    assert not unknown, f"keys no setting reads: {unknown}"
    secret = _one(base, "Secret", "conduit-secrets")
    assert set(secret["stringData"]) <= _settings_keys()
    for key, value in {**main, **secret["stringData"]}.items():
        monkeypatch.setenv(key, value)
    settings = Settings()
    kafka = _one(base, "Kafka", "conduit")
    assert settings.bus.bootstrap_servers() == f"{kafka['metadata']['name']}-kafka-bootstrap.{NAMESPACE}.svc:9092"
    assert settings.bus.kafka_partitions == PARTITIONS
    assert settings.store.url() == f"redis://{_one(base, 'Service', 'redis')['metadata']['name']}.{NAMESPACE}.svc:6379/0"
    assert settings.retrieval.qdrant_url == f"http://{_one(base, 'Service', 'qdrant')['metadata']['name']}.{NAMESPACE}.svc:6333"
    assert settings.gateway.gateway_host == "0.0.0.0"


def _locked_version(package: str) -> str:
    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    (version,) = {p["version"] for p in lock["package"] if p["name"] == package}
    return version


def _compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_qdrant_server_matches_the_locked_client(base: list[Obj]) -> None:
    """qdrant-client warns against servers of another minor version: keep them in step."""
    major_minor = ".".join(_locked_version("qdrant-client").split(".")[:2])
    (container,) = _one(base, "StatefulSet", "qdrant")["spec"]["template"]["spec"]["containers"]
    images = {container["image"], _compose()["services"]["qdrant"]["image"]}
    for image in images:
        assert re.fullmatch(rf"qdrant/qdrant:v{re.escape(major_minor)}\.\d+(-unprivileged)?", image), image


# --------------------------------------------------------------------------- docker compose
INFRA = {"kafka", "redis", "qdrant"}
ONE_SHOT = {"ingest"}
MONITORING = {"prometheus", "grafana"}  # checked in tests/deploy/test_monitoring.py


def test_docker_compose_config_passes() -> None:
    binary = shutil.which("docker-compose")
    if not binary:
        pytest.skip("docker-compose not installed (Debian: apt-get install -y docker-compose)")
    out = subprocess.run([binary, "-f", str(ROOT / "docker-compose.yml"), "config", "-q"],
                         capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 0, out.stderr


def test_compose_stack_shape() -> None:
    compose = _compose()
    services = compose["services"]
    assert set(services) == set(SERVICES) | INFRA | ONE_SHOT | MONITORING
    assert compose["networks"]["backend"]["internal"] is True
    for name, svc in services.items():
        if name in ONE_SHOT:
            assert svc["restart"] == "no"
            continue
        assert svc.get("healthcheck", {}).get("test"), f"{name} has no health check"
        assert svc.get("restart") == "unless-stopped", name
        for dep, cond in svc.get("depends_on", {}).items():
            expected = "service_completed_successfully" if dep in ONE_SHOT else "service_healthy"
            assert cond == {"condition": expected}, f"{name} -> {dep}"
    for name in SERVICES:
        svc = services[name]
        build = svc["build"]
        assert (ROOT / build["context"] / build["dockerfile"]).is_file(), f"{name}: Dockerfile missing"
        assert svc["image"] == "conduit:local"
        assert svc["command"] == ["serve", name]
        assert {"kafka", "redis"} <= set(svc["depends_on"]), name
        assert svc["read_only"] is True and svc["cap_drop"] == ["ALL"]
        unknown = set(svc["environment"]) - _settings_keys() - NON_SETTINGS_ENV
        assert not unknown, f"{name}: {unknown}"
        if name != "gateway":
            assert svc["healthcheck"]["test"] == ["CMD", "python", "-m", "ops.probe", "ready", name]
            assert int(svc["environment"]["CONDUIT_METRICS_PORT"]) == METRICS_PORT, f"{name}: /metrics off"
        else:
            assert "CONDUIT_METRICS_PORT" not in svc["environment"], "the gateway serves /metrics on 8000"
    assert {"qdrant", "ingest"} <= set(services["retriever"]["depends_on"])
    assert services["ingest"]["depends_on"] == {"qdrant": {"condition": "service_healthy"}}
    assert services["ingest"]["networks"] == ["backend"]
    assert services["retriever"]["environment"]["QDRANT_URL"] == "http://qdrant:6333"
    assert services["gateway"]["ports"] == ["127.0.0.1:8000:8000"]
    assert "/readyz" in " ".join(services["gateway"]["healthcheck"]["test"])
    assert services["gateway"]["environment"]["CONDUIT_GATEWAY_HOST"] == "0.0.0.0"
    for isolated in ("sandbox", "retriever", "kafka", "redis", "qdrant"):
        assert services[isolated]["networks"] == ["backend"], f"{isolated} must have no route out"
    assert {"seccomp=unconfined", "apparmor=unconfined", "systempaths=unconfined"} <= set(services["sandbox"]["security_opt"])
    kafka_env = services["kafka"]["environment"]
    assert kafka_env["KAFKA_PROCESS_ROLES"] == "broker,controller", "KRaft, no ZooKeeper"
    assert services["kafka"]["image"].startswith("apache/kafka:")
    assert int(kafka_env["KAFKA_NUM_PARTITIONS"]) == PARTITIONS
    assert int(services["gateway"]["environment"]["CONDUIT_KAFKA_PARTITIONS"]) == PARTITIONS


# --------------------------------------------------------------------------- Dockerfile
def _dockerfile() -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` pairs of the Dockerfile, continuation lines joined."""
    text = re.sub(r"\\\n", " ", (ROOT / "Dockerfile").read_text())
    steps = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            instruction, _, rest = line.partition(" ")
            steps.append((instruction.upper(), rest.strip()))
    return steps


def test_dockerfile_builds_one_non_root_image_from_the_lock() -> None:
    steps = _dockerfile()
    assert steps[0] == ("FROM", "python:3.11-slim")
    runs = " ".join(arg for ins, arg in steps if ins == "RUN")
    assert "bubblewrap" in runs
    assert "pip install --no-cache-dir uv==0.13.8" in runs
    assert "uv sync --frozen --no-dev" in runs
    user = [arg for ins, arg in steps if ins == "USER"][-1]
    assert user.split(":")[0] not in ("0", "root")
    uid = int(user.split(":")[0])
    for workload in _pod_workloads(render(BASE)):
        pod = workload["spec"]["template"]["spec"]
        if pod["containers"][0]["image"].startswith("conduit"):
            assert pod["securityContext"]["runAsUser"] == uid
    assert json.loads(dict(steps)["ENTRYPOINT"]) == ["conduit"]
    assert json.loads(dict(steps)["CMD"]) == ["serve", "gateway"]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["scripts"]["conduit"] == "ops.entry:main"
    copied = {arg.split()[0] for ins, arg in steps if ins == "COPY"} | {
        part for ins, arg in steps if ins == "COPY" for part in arg.split()[:-1]}
    for package in project["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]:
        assert package in copied, f"package {package} not copied into the image"
    ignored = {line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
               if line.strip() and not line.startswith("#")}
    for source in copied:
        assert (ROOT / source).exists(), f"COPY source {source} missing"
        assert source not in ignored, f"COPY source {source} excluded by .dockerignore"
    assert project["project"]["readme"] in copied, "pyproject's readme is needed to build the project"
