"""A real Prometheus (Debian's ``prometheus``) scrapes the embedded stack and evaluates Conduit's alert rules.

The stack writes ``prometheus-targets.json`` (one file_sd group per service process, labelled ``service``);
Prometheus scrapes it every second and evaluates ``deploy/prometheus/alerts.yml`` every second, with every
``for:`` cut to 1 s (the expressions are the shipped ones). The tests see a target per service up, a
question's tokens counted by tenant, model and kind and the orchestrator's consumer lag; three failed model
calls fire ``ConduitCircuitBreakerOpen`` and ``ConduitModelErrorRateHigh``; a stopped sandbox fires
``ConduitSandboxUnavailable``. Skipped when the ``prometheus`` binary is missing (.ci/run installs it).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from ops import infra
from ops.services import SERVICES
from ops.stack import Stack
from testkit.scripted_model import Turn
from testkit.stack import admin_client, model_env, start_stack
from testkit.waits import wait_until

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS = shutil.which("prometheus")
pytestmark = pytest.mark.skipif(PROMETHEUS is None, reason="prometheus not installed (Debian: apt-get install -y "
                                "prometheus; .ci/run installs it): the real-Prometheus test cannot run")


@pytest.fixture(scope="module")
def stack(infra_stack, tmp_path_factory, model) -> Iterator[Stack]:
    """Every service over the session broker and Redis, the scripted model answering."""
    env = model_env(model.base_url) | {"CONDUIT_MODEL_MAX_RETRIES": "0", "CONDUIT_MODEL_BREAKER_COOLDOWN_S": "120"}
    st = start_stack(infra_stack.bootstrap, infra_stack.redis_url, tmp_path_factory.mktemp("prom-data"), SERVICES, env)
    yield st
    st.stop()


@pytest.fixture(scope="module")
def prometheus(stack: Stack, tmp_path_factory) -> Iterator[str]:
    """A Prometheus server on a free loopback port scraping ``stack``; yields its base URL."""
    home = tmp_path_factory.mktemp("prometheus")
    rules = yaml.safe_load((ROOT / "deploy" / "prometheus" / "alerts.yml").read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = "1s"
    (home / "alerts.yml").write_text(yaml.safe_dump(rules))
    config = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"},
              "rule_files": [str(home / "alerts.yml")],
              "scrape_configs": [{"job_name": "conduit", "file_sd_configs": [{"files": [str(stack.targets_path)],
                                                                             "refresh_interval": "1s"}]}]}
    (home / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = infra.free_port()
    log = (home / "prometheus.log").open("ab")
    proc = subprocess.Popen([PROMETHEUS or "prometheus", f"--config.file={home / 'prometheus.yml'}",
                             f"--storage.tsdb.path={home / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        assert wait_until(lambda: _get(url, "/-/ready") is not None, 30), f"prometheus not ready; {home}/prometheus.log"
        yield url
    finally:
        proc.terminate()
        infra.wait_or_kill(proc, 10)
        log.close()


def _get(url: str, path: str, **params: str) -> Any:
    """The JSON ``data`` of a Prometheus API answer (``/-/ready``: True), or None when it does not answer yet."""
    try:
        resp = httpx.get(url + path, params=params, timeout=5)
    except httpx.HTTPError:
        return None
    if resp.status_code != 200:
        return None
    return True if path == "/-/ready" else resp.json()["data"]


def _up_by_service(url: str) -> dict[str, str]:
    targets = (_get(url, "/api/v1/targets") or {}).get("activeTargets", [])
    return {t["labels"].get("service", "?"): t["health"] for t in targets}


def _firing(url: str) -> set[str]:
    alerts = (_get(url, "/api/v1/alerts") or {}).get("alerts", [])
    return {a["labels"]["alertname"] for a in alerts if a["state"] == "firing"}


def test_prometheus_sees_every_service_and_the_tokens_of_a_question(stack: Stack, prometheus: str, model) -> None:
    assert wait_until(lambda: _up_by_service(prometheus) == {s: "up" for s in SERVICES}, 60), _up_by_service(prometheus)
    model.push(Turn(content="增值税的标准税率是百分之十三。"))
    with admin_client(stack) as client:
        task_id = client.post("/v1/tasks", json={"question": "增值税的标准税率是多少？"}).json()["task_id"]
        assert wait_until(lambda: client.get(f"/v1/tasks/{task_id}").json()["status"] == "completed", 60)

    def tokens() -> list[dict]:
        return (_get(prometheus, "/api/v1/query", query="sum by (tenant, model, kind) (conduit_model_tokens_total)")
                or {}).get("result", [])

    assert wait_until(lambda: len(tokens()) == 2, 30), tokens()
    assert {(r["metric"]["tenant"], r["metric"]["model"]) for r in tokens()} == {("default", "default")}
    assert {r["metric"]["kind"] for r in tokens()} == {"input", "output"}
    assert all(float(r["value"][1]) > 0 for r in tokens())
    lag = _get(prometheus, "/api/v1/query", query="max by (consumer) (conduit_consumer_lag_messages)")["result"]
    assert {r["metric"]["consumer"] for r in lag} >= {"orchestrator"}, lag
    if shutil.which("bwrap"):  # without bubblewrap no sandbox can run code: the alert fires at once
        assert wait_until(lambda: _value(prometheus, "max(conduit_sandbox_runnable_processes)") == 1, 30)
        # the alert resolves at the rule evaluation after the one that saw no runnable sandbox (every 1 s,
        # slower under load): wait for that evaluation, not for the query's view (CI saw the two differ)
        assert wait_until(lambda: "ConduitSandboxUnavailable" not in _firing(prometheus), 30), _firing(prometheus)


def _value(url: str, query: str) -> float | None:
    """The one value of an instant ``query``, or None when it has none."""
    result = (_get(url, "/api/v1/query", query=query) or {}).get("result", [])
    return float(result[0]["value"][1]) if len(result) == 1 else None


def test_a_failing_model_opens_its_breaker_and_fires_the_alerts(stack: Stack, prometheus: str, model) -> None:
    """Three failed model calls in a row open the default model's breaker (rule A21); the tasks still end
    (retrieval-only answers). Prometheus reads the breaker at scrape time and sees the error rate."""
    model.push(*[Turn(status=500) for _ in range(3)])
    with admin_client(stack) as client:
        for question in ("增值税的标准税率是多少？", "个人所得税的起征点是多少？", "小规模纳税人的征收率是多少？"):
            task_id = client.post("/v1/tasks", json={"question": question}).json()["task_id"]
            assert wait_until(lambda: client.get(f"/v1/tasks/{task_id}").json()["status"] in
                              ("completed", "failed"), 60)
    assert wait_until(lambda: {"ConduitCircuitBreakerOpen", "ConduitModelErrorRateHigh"} <= _firing(prometheus), 60), \
        _firing(prometheus)
    alerts = (_get(prometheus, "/api/v1/alerts") or {})["alerts"]
    (breaker,) = [a for a in alerts if a["labels"]["alertname"] == "ConduitCircuitBreakerOpen"]
    assert (breaker["labels"]["kind"], breaker["labels"]["name"]) == ("model", "default")


def test_a_stopped_sandbox_fires_its_alert(stack: Stack, prometheus: str) -> None:
    assert wait_until(lambda: _up_by_service(prometheus).get("sandbox") == "up", 60)
    stack.procs["sandbox"].stop()
    # the two alerts come from different series (the orchestrator's view of the sandbox, the scrape's `up`), each
    # after its own scrape and rule evaluation: a CI run saw the first fire one evaluation before the second
    both = {"ConduitSandboxUnavailable", "ConduitTargetDown"}
    assert wait_until(lambda: both <= _firing(prometheus), 60), _firing(prometheus)
    assert _up_by_service(prometheus)["orchestrator"] == "up"
