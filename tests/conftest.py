"""Shared fixtures: a real tansu broker and a private real redis-server per test session.

No Docker is needed: both run as local processes (see ops.infra). With
``--containers`` the session's broker, Redis and vector store are instead Apache Kafka
(KRaft), Redis and Qdrant containers (``testkit.containers``, testcontainers) and
tests marked ``containers`` run too; without a Docker engine every test that needs them is
skipped with one reason. Tests that start their own private tansu or redis-server (to kill
it) keep doing so either way.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from ops import infra
from conduit.runtime.settings import Settings
from testkit.scripted_model import ScriptedModel


CONTAINERS = "--containers"

READY_TIMEOUT_S = "200"
"""A stack a test starts gives up waiting for its services after this many seconds, well inside pytest's 300 s
timeout, so a stack that does not come up fails with the missing services' log tails (``ops.stack.wait_ready``)
instead of a bare timeout; a cold start takes 5-20 s on a quiet 2-core machine."""
os.environ.setdefault("CONDUIT_STACK_READY_TIMEOUT_S", READY_TIMEOUT_S)


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--containers``: run the integration suites against Kafka, Qdrant and Redis containers."""
    parser.addoption(CONTAINERS, action="store_true", default=False,
                     help="use apache/kafka (KRaft), qdrant/qdrant and redis containers (testcontainers; needs a "
                          "Docker engine) instead of tansu, Qdrant Edge and a local redis-server")


def pytest_configure(config: pytest.Config) -> None:
    """Register the ``containers`` marker (tests that only mean something against real containers)."""
    config.addinivalue_line("markers", "containers: needs --containers and a Docker engine")


def pytest_report_header(config: pytest.Config) -> str | None:
    """One line saying which infrastructure the session uses (``--containers`` without Docker: why it skips)."""
    if not config.getoption(CONTAINERS):
        return None
    from testkit.containers import engine_missing

    reason = engine_missing()
    return ("--containers: apache/kafka, qdrant/qdrant and redis containers" if reason is None else
            f"--containers: tests that need Kafka, Redis or Qdrant are skipped: {reason}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip, with one reason, what cannot run: ``containers`` tests without the option; with the
    option and no Docker engine, every test that needs the session's infrastructure."""
    if not config.getoption(CONTAINERS):
        skip = pytest.mark.skip(reason="container tests need --containers and a Docker engine")
        for item in items:
            if "containers" in item.keywords:
                item.add_marker(skip)
        return
    from testkit.containers import engine_missing

    reason = engine_missing()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=f"--containers: {reason}")
    for item in items:
        if "infra_stack" in getattr(item, "fixturenames", ()) or "containers" in item.keywords:
            item.add_marker(skip)


REQUIRE_SANDBOX = "CONDUIT_REQUIRE_SANDBOX"
"""Set to 1 by ``.ci/run`` once it installed bubblewrap: a sandbox test that skips then fails."""


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    """Under ``CONDUIT_REQUIRE_SANDBOX=1`` turn the skip of a sandbox test into a failure with its reason."""
    outcome = yield
    report = outcome.get_result()
    if os.environ.get(REQUIRE_SANDBOX) == "1" and report.skipped and "sandbox" in item.nodeid.lower() + str(
            report.longrepr).lower():
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"{REQUIRE_SANDBOX}=1 (CI installed bubblewrap) but this sandbox test skipped: {reason}"


@dataclass
class Infra:
    """Addresses of the session's broker and Redis, plus a scratch data dir."""

    kafka_port: int
    redis_port: int
    root: Path
    containers: Any = None
    """``testkit.containers.Containers`` under ``--containers`` (None: local processes)."""

    @property
    def bootstrap(self) -> str:
        return f"{'localhost' if self.containers else '127.0.0.1'}:{self.kafka_port}"

    @property
    def redis_url(self) -> str:
        return f"redis://127.0.0.1:{self.redis_port}/0"


@pytest.fixture(scope="session")
def infra_stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Infra]:
    """Start tansu and redis-server on free ports for the whole test session (with
    ``--containers``: Kafka, Redis and Qdrant containers; ``QDRANT_URL`` points every stack at it)."""
    root = tmp_path_factory.mktemp("infra")
    if request.config.getoption(CONTAINERS):
        from testkit import containers

        running = containers.start()
        try:
            with pytest.MonkeyPatch.context() as env:
                env.setenv("QDRANT_URL", running.qdrant_url)
                yield Infra(running.kafka_port, running.redis_port, root, running)
        finally:
            running.stop()
        return
    kport, rport = infra.free_port(), infra.free_port()
    tansu = infra.start_tansu(kport, root / "tansu.log")
    redis = infra.start_redis(rport, root / "redis", root / "redis.log", persist=False)
    try:
        yield Infra(kport, rport, root)
    finally:
        infra.stop(tansu)
        infra.stop(redis)


@pytest.fixture
def settings(infra_stack: Infra, tmp_path: Path) -> Settings:
    """Settings pointing at the session broker and Redis, with a fresh data dir."""
    return Settings(
        kafka_bootstrap_servers=infra_stack.bootstrap,
        redis_url=infra_stack.redis_url,
        data_dir=tmp_path / "data",
    )


@pytest.fixture
async def redis(infra_stack: Infra) -> AsyncIterator[Redis]:
    """An asyncio client of the session's private Redis."""
    client = Redis.from_url(infra_stack.redis_url)
    yield client
    await client.aclose()


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedModel]:
    """A scripted OpenAI-compatible model server over real HTTP, one per test module."""
    m = ScriptedModel().start()
    yield m
    m.stop()


@pytest.fixture(scope="module")
def vat_agent_stack(infra_stack: Infra, tmp_path_factory: pytest.TempPathFactory, model: ScriptedModel) -> Iterator[Any]:
    """Retriever, orchestrator and gateway over the session's broker and Redis, answering with the module's
    scripted ``model``, the VAT law ingested; one per test module (the A2A and AG-UI stack tests)."""
    from testkit.page import VAT_LAW
    from testkit.stack import agent_stack

    st = agent_stack(infra_stack, tmp_path_factory.mktemp("vat-agent"), model.base_url, [VAT_LAW])
    yield st
    st.stop()
