"""Shared fixtures: a real tansu broker and a private real redis-server per test session.

No Docker is needed: both run as local processes (see conduit.ops.infra). When a
Docker daemon is reachable the same fixtures still use local processes, so CI
behaves the same everywhere.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from redis.asyncio import Redis

from conduit.ops import infra
from conduit.runtime.settings import Settings
from conduit.testing.scripted_model import ScriptedModel


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

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"

    @property
    def redis_url(self) -> str:
        return f"redis://127.0.0.1:{self.redis_port}/0"


@pytest.fixture(scope="session")
def infra_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Infra]:
    """Start tansu and redis-server on free ports for the whole test session."""
    root = tmp_path_factory.mktemp("infra")
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
