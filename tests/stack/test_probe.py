"""``python -m ops.probe``: the exec health checks of docker-compose.yml and k8s/base.

Runs the real command against a private redis-server (``ops.infra.start_redis``,
a free port) and, for ``topics``, against the session's tansu broker.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from conduit.runtime import bus
from ops import infra, probe
from conduit.runtime.settings import Settings
from contracts import topics

ROOT = Path(__file__).resolve().parents[2]
HOST = socket.gethostname()


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("probe-redis")
    port = infra.free_port()
    proc = infra.start_redis(port, root / "data", root / "redis.log", persist=False)
    try:
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        infra.stop(proc)


def _main(monkeypatch: pytest.MonkeyPatch, *args: str, **env: str) -> int:
    """``probe.main`` in this process with exactly ``env`` for the Redis/Kafka settings."""
    for key in ("REDIS_URL", "CONDUIT_REDIS_URL", "KAFKA_BOOTSTRAP_SERVERS", "CONDUIT_KAFKA_BOOTSTRAP_SERVERS"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return probe.main(list(args))


def test_ready_and_live_follow_the_heartbeat_key(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    client = redis.Redis.from_url(redis_url)
    client.delete(*client.keys("conduit:alive:*") or ["none"])
    assert _main(monkeypatch, "ready", "web", REDIS_URL=redis_url) == 1
    assert _main(monkeypatch, "live", "web", REDIS_URL=redis_url) == 1
    client.set("conduit:alive:web:other-pod:1", "1", ex=30)
    assert _main(monkeypatch, "ready", "web", REDIS_URL=redis_url) == 1, "another pod's key does not count"
    assert _main(monkeypatch, "live", "web", REDIS_URL=redis_url) == 1, "a healthy replica keeps no hung pod alive"
    assert _main(monkeypatch, "ready", "web", "--host", "other-pod", REDIS_URL=redis_url) == 0
    client.set(f"conduit:alive:web:{HOST}:1", "1", ex=30)  # what conduit.runtime.liveness.heartbeat writes
    assert _main(monkeypatch, "ready", "web", REDIS_URL=redis_url) == 0
    assert _main(monkeypatch, "live", "web", REDIS_URL=redis_url) == 0
    assert _main(monkeypatch, "ready", "sandbox", REDIS_URL=redis_url) == 1, "another service's key does not count"
    # CONDUIT_REDIS_URL works too: the probe reads conduit.runtime.settings like the services
    assert _main(monkeypatch, "ready", "web", CONDUIT_REDIS_URL=redis_url) == 0
    client.delete(f"conduit:alive:web:{HOST}:1", "conduit:alive:web:other-pod:1")


def test_the_command_line_exit_status(redis_url: str) -> None:
    """The exact command of the manifests, as a process (one run: each costs an interpreter start)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CONDUIT_", "REDIS_URL", "KAFKA_"))}
    env["REDIS_URL"] = redis_url
    client = redis.Redis.from_url(redis_url)
    client.set(f"conduit:alive:orchestrator:{HOST}:1", "1", ex=60)
    try:
        done = subprocess.run([sys.executable, "-m", "ops.probe", "ready", "orchestrator"],
                              capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)
    finally:
        client.delete(f"conduit:alive:orchestrator:{HOST}:1")
    assert done.returncode == 0, done.stderr
    assert "heartbeat present" in done.stdout


def test_redis_outage_fails_readiness_but_not_liveness() -> None:
    closed = f"redis://127.0.0.1:{infra.free_port()}/0"
    assert probe.check("ready", "orchestrator", closed)[0] == 1
    status, reason = probe.check("live", "orchestrator", closed)
    assert status == 0 and "unreachable" in reason


async def test_topics_waits_for_every_contract_topic(infra_stack) -> None:  # noqa: ANN001 - conftest fixture
    settings = Settings(kafka_bootstrap_servers=infra_stack.bootstrap)
    await bus.ensure_topics(settings.bus)
    assert await probe.missing_topics(infra_stack.bootstrap, topics.ALL_TOPICS) == []
    assert await probe.missing_topics(infra_stack.bootstrap, ("conduit.never-created",)) == ["conduit.never-created"]


def test_topics_gives_up_after_its_timeout() -> None:
    status, reason = probe.wait_topics(f"127.0.0.1:{infra.free_port()}", timeout_s=0.5, every_s=0.1)
    assert status == 1 and "not reachable" in reason


def test_wait_until_retries_until_done_and_reports_the_last_reason() -> None:
    answers = iter(["not yet", RuntimeError("down"), None])
    seen = []

    def check() -> str | None:
        answer = next(answers)
        seen.append(answer)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert probe.wait_until(check, timeout_s=5, every_s=0.01) == (0, "ok")
    assert len(seen) == 3
    status, reason = probe.wait_until(lambda: "still loading", timeout_s=0.05, every_s=0.01)
    assert (status, reason) == (1, "still loading")


def test_corpus_wait_uses_the_retrievers_readiness_check(monkeypatch: pytest.MonkeyPatch) -> None:
    from services.retriever import ingest  # noqa: PLC0415

    calls = []
    monkeypatch.setattr(ingest, "corpus_ready", lambda settings: calls.append(settings) or len(calls) >= 2)
    settings = Settings(qdrant_url="http://qdrant.invalid:6333")
    assert probe.wait_corpus(settings, timeout_s=5, every_s=0.01)[0] == 0
    assert calls == [settings, settings]
