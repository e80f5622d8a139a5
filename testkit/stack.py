"""Start a real Conduit stack inside a test: services as processes over the test's broker and Redis."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
from redis.asyncio import Redis

from ops import infra
from conduit.records import apikeys
from ops.services import ServiceProcess
from conduit.runtime.settings import Settings
from ops.stack import Stack


def start_stack(bootstrap: str | None, redis_url: str | None, data_dir: Path, services: tuple[str, ...],
                env: dict[str, str], laws: list[str] | None = None, scale: dict[str, int] | None = None) -> Stack:
    """Ingest ``laws`` (real articles from the law corpus) into ``data_dir``, then start ``services``
    (``scale``: replicas per service, as ``conduit up --scale``).

    ``bootstrap`` / ``redis_url`` None: the stack starts its own embedded broker / Redis on free ports
    (retriever replicas on the embedded store need the embedded broker, rule K10).

    ``env`` is given to every service process (model endpoint, limits...). Long-term memory and the
    semantic cache are off unless ``env`` sets ``CONDUIT_MEMORY_OFF_TENANTS`` / ``CONDUIT_CACHE_ENABLED``:
    a test about something else asks the same question in several sessions and expects the model
    to be called with exactly its own history (``tests/stack/test_memory.py`` turns them on). With
    ``QDRANT_URL`` set (pytest ``--containers``) the knowledge base is a collection of its own on that
    Qdrant server. Returns the running ``Stack`` (its admin key: ``stack.admin_key``); the caller stops it.
    """
    env = {"CONDUIT_CACHE_ENABLED": "false", "CONDUIT_MEMORY_OFF_TENANTS": '["*"]'} | env
    server = os.environ.get("QDRANT_URL")
    vectors = {"qdrant_url": server, "qdrant_collection": f"conduit-{uuid.uuid4().hex[:12]}"} if server else {}
    if server:
        env = {**env, "QDRANT_URL": server, "CONDUIT_QDRANT_COLLECTION": vectors["qdrant_collection"]}
    cluster = env.get("CONDUIT_REDIS_CLUSTER", "").lower() == "true"  # redis_url names a Redis Cluster (rule O8)
    settings = Settings(kafka_bootstrap_servers=bootstrap, redis_url=redis_url, data_dir=data_dir, redis_cluster=cluster,
                        gateway_port=infra.free_port(), embedded_kafka_port=infra.free_port(),
                        embedded_redis_port=infra.free_port(), **vectors)
    if laws:
        from services.retriever.ingest import ingest_law_db

        ingest_law_db(settings, law_names=laws, progress=False)
    return Stack(settings, services=services, extra_env=env, scale=scale).start()


def agent_stack(infra: Any, data_dir: Path, model_url: str, laws: list[str]) -> Stack:
    """The retriever, orchestrator and gateway over ``infra``'s broker and Redis (the ``infra_stack`` fixture), with
    the scripted model at ``model_url`` (30 s tool deadlines) and ``laws`` ingested into ``data_dir``."""
    return start_stack(infra.bootstrap, infra.redis_url, data_dir, ("retriever", "orchestrator", "gateway"),
                       model_env(model_url, tool_timeout_s=30), laws=laws)


def model_env(base_url: str, model: str = "scripted", tool_timeout_s: float = 20) -> dict[str, str]:
    """The ``env`` of a stack whose model is the scripted server at ``base_url`` (OpenAI-compatible) named ``model``,
    with tool deadlines of ``tool_timeout_s`` seconds."""
    return {"OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": "test", "CONDUIT_MODEL": model,
            "CONDUIT_TOOL_TIMEOUT_S": str(tool_timeout_s).removesuffix(".0")}


def restart(stack: Stack, name: str, drop: tuple[str, ...] = (), **env: str) -> ServiceProcess:
    """Replace service ``name`` with a new process: its old environment minus ``drop`` plus ``env``.

    Waits until the new process checked in; returns it.
    """
    old = stack.procs[name]
    old.stop()
    new_env = {k: v for k, v in old.env.items() if k not in drop} | env
    stack.procs[name] = ServiceProcess(name, new_env, stack.log_dir).start()
    stack.wait_ready(90)
    return stack.procs[name]


def add_replica(stack: Stack, name: str, key: str, **env: str) -> ServiceProcess:
    """Start one more process of service ``name`` (registered as ``key``) with the same environment
    plus ``env`` overrides (e.g. a ``CONDUIT_MODEL`` of its own, to tell its model calls apart) and a
    ``/metrics`` port of its own."""
    own = {"CONDUIT_METRICS_PORT": str(infra.free_port())} if name != "gateway" else {}
    proc = ServiceProcess(name, {**stack.procs[name].env, **own, **env}, stack.log_dir).start()
    stack.procs[key] = proc
    return proc


FAULT = "CONDUIT_FAULT_CRASH_ONCE"
"""Names the fault point ``testkit.faults`` crashes the orchestrator at."""
HOOKS = "CONDUIT_TEST_HOOKS"
"""Names the orchestrator's test hook module (``services.orchestrator.hooks``)."""


def crash_env(point: str) -> dict[str, str]:
    """Environment of an orchestrator that exits at fault point ``point`` once per task."""
    return {HOOKS: "testkit.faults", FAULT: point}


@contextmanager
def orchestrator_crashing_once(stack: Stack, point: str) -> Iterator[ServiceProcess]:
    """Run the body against an orchestrator that exits at fault point ``point`` once per task
    (``testkit.faults``); yields that process. The body replaces it with
    ``restart(stack, "orchestrator", drop=(FAULT,))``; if it did not, that happens on exit.
    """
    proc = restart(stack, "orchestrator", **crash_env(point))
    try:
        yield proc
    finally:
        if FAULT in stack.procs["orchestrator"].env:
            restart(stack, "orchestrator", drop=(FAULT, HOOKS))


async def make_key(redis_url: str, tenant: str = "default", user: str = "admin", role: str = "admin",
                   expires_in: timedelta | None = None) -> str:
    """Create an API key in the Redis at ``redis_url`` (``conduit.records.apikeys``); returns the key."""
    redis = Redis.from_url(redis_url)
    try:
        return (await apikeys.create(redis, tenant, user, role, expires_in, label="test"))[0]
    finally:
        await redis.aclose()


def new_key(redis_url: str, tenant: str = "default", user: str = "admin", role: str = "admin",
            expires_in: timedelta | None = None) -> str:
    """``make_key`` for code outside an event loop (fixtures)."""
    return asyncio.run(make_key(redis_url, tenant, user, role, expires_in))


@contextmanager
def admin_client(stack: Stack, timeout_s: float = 30) -> Iterator[httpx.Client]:
    """An ``httpx.Client`` on the stack's gateway with the tenant admin's key (``stack.admin_key``)."""
    with httpx.Client(base_url=stack.gateway_url, timeout=timeout_s, headers=auth(stack.admin_key)) as c:
        yield c


def auth(key: str) -> dict[str, str]:
    """The ``Authorization`` header of ``key``."""
    return {"Authorization": f"Bearer {key}"}

