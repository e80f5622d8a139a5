"""The embedded stack on one machine: broker, Redis and every service as its own process.

``Stack.start()`` starts what is not configured externally (tansu when
``KAFKA_BOOTSTRAP_SERVERS`` is unset, a private redis-server when ``REDIS_URL``
is unset), waits until Redis has loaded its data, creates the topics, starts every
service but the gateway with ``conduit serve NAME`` (``scale`` replicas each), waits
until each has checked in, and only then starts the gateway: its ``/readyz`` never
answers while a service it depends on has not checked in. Logs go to ``<data_dir>/logs/``.

Each process is registered the moment it is spawned, so ``stop()`` (run on any
failure or signal during ``start()``) reaches everything; and every child dies with
this process anyway (``infra.die_with_parent``). ``ops.supervisor`` restarts
children that exit.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import httpx

from ops import bootstrap, infra, stopsignals
from ops.services import SERVICES, STOP_MARGIN_S, ChildProcess, ServiceProcess, settings_env, shutdown_budget_s
from conduit.runtime import bus
from conduit.runtime.liveness import alive_key
from conduit.runtime.redis_client import make_sync
from conduit.runtime.settings import Settings

READY_POLL_S = 0.2
"""How often ``wait_ready`` looks at the liveness keys (seconds)."""
LOG_TAIL_BYTES = 2_000
"""How much of a service's log a readiness error quotes (bytes from its end)."""


def log_tail(path: Path, size: int = LOG_TAIL_BYTES) -> str:
    """The last ``size`` bytes of the log at ``path`` as text ("" when it is missing or unreadable)."""
    try:
        with path.open("rb") as fh:
            fh.seek(max(0, path.stat().st_size - size))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


class StackError(RuntimeError):
    """The stack could not start; the message says which part and where its log is."""


class InfraProcess(ChildProcess):
    """tansu or the embedded redis-server, startable again by the supervisor.

    Args:
        name: ``tansu`` or ``redis``.
        spawn: starts the process (does not wait).
        ready: blocks until the spawned process serves (raises RuntimeError otherwise).
        log_path: its log file.
        stop_timeout_s: seconds ``stop`` waits after SIGTERM before SIGKILL.
    """

    def __init__(self, name: str, spawn: Callable[[], subprocess.Popen], ready: Callable[[subprocess.Popen], None],
                 log_path: Path, stop_timeout_s: float = 10.0) -> None:
        self.name = self.key = name
        self._spawn, self._ready = spawn, ready
        self.log_path = log_path
        self.stop_timeout_s = stop_timeout_s
        self.proc: subprocess.Popen | None = None
        self.started_at = 0.0

    def start(self) -> "InfraProcess":
        """Spawn the process and wait until it serves."""
        self.proc = self._spawn()
        self.started_at = time.time()
        self._ready(self.proc)
        return self


def parse_scale(spec: str | None) -> dict[str, int]:
    """``"orchestrator=2,retriever=2"`` -> ``{"orchestrator": 2, "retriever": 2}``.

    Raises ValueError on an unknown service, a count below 1, or more than one gateway: the gateway binds
    its port alone (a second process would fail to start); one process fans 1,000 SSE streams out within
    the issue-33 aims (docs/benchmarks.md, "Issue 33: SSE fan-out").
    """
    scale: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in (spec or "").split(","))):
        name, _, count = part.partition("=")
        if name not in SERVICES or not count.isdigit() or int(count) < 1:
            raise ValueError(f"bad --scale item {part!r}: expected SERVICE=N with N >= 1, SERVICE one of {', '.join(SERVICES)}")
        if name == "gateway" and int(count) > 1:
            raise ValueError(f"bad --scale item {part!r}: the embedded stack runs one gateway process (it binds "
                             "CONDUIT_GATEWAY_PORT alone); run more gateways behind a load balancer, each on its own port")
        scale[name] = int(count)
    return scale


def retriever_replicas_refusal(settings: Settings, replicas: int) -> str | None:
    """Why ``replicas`` retrievers cannot run with ``settings``, or None when they can (rule K10).

    More than one retriever on the embedded store (no ``QDRANT_URL``) needs the embedded broker:
    each replica gets a fresh copy of replica 1's shards at each start and reads the writes topic in
    a group of its own from its start, which matches only topics that start empty (tansu keeps them
    in memory). An external broker keeps the writes and each group's committed offsets across starts,
    and those would not match a fresh copy (writes lost or applied twice out of order).
    """
    if replicas <= 1 or settings.retrieval.qdrant_url or not settings.bus.kafka_bootstrap_servers:
        return None
    return ("more than one retriever on the embedded Qdrant Edge store needs the embedded broker: each replica "
            "starts from a fresh copy of replica 1's shards, and the committed offsets of the writes groups on "
            f"an external broker ({settings.bus.kafka_bootstrap_servers}) would not match it; set QDRANT_URL "
            "(one shared store) or run one retriever")


class Stack:
    """Start and stop the whole stack.

    Args:
        settings: where things listen (ports, data dir, external addresses).
        services: which services to run (default: all of them).
        extra_env: extra environment for every service process (e.g. model endpoint).
        scale: replicas per service (default 1); replica 2 of ``orchestrator`` is keyed ``orchestrator-2``.

    Retriever replicas (rule K10, ``services/retriever/replicas.py``): each process gets its index K
    and the count N (``CONDUIT_RETRIEVER_REPLICA``, ``CONDUIT_RETRIEVER_REPLICAS``); on the embedded
    store replica 1's shards are copied to every replica K's folder at each start, before the
    retrievers start (``start_services``).

    Raises StackError for retriever replicas on the embedded store with an external Kafka broker
    (``retriever_replicas_refusal``).
    """

    def __init__(self, settings: Settings, services: tuple[str, ...] = SERVICES, extra_env: dict[str, str] | None = None,
                 scale: dict[str, int] | None = None) -> None:
        self.settings = settings
        self.services = services
        self.extra_env = extra_env or {}
        self.scale = scale or {}
        refusal = retriever_replicas_refusal(settings, self.scale.get("retriever", 1))
        if refusal:
            raise StackError(refusal)
        self.data_dir = Path(settings.stack.data_dir).resolve()
        self.log_dir = self.data_dir / "logs"
        self.infra: dict[str, InfraProcess] = {}
        self.procs: dict[str, ServiceProcess] = {}
        self.admin_key: str | None = None
        """The tenant admin's API key (``<data_dir>/admin.key``), set by ``start()``."""

    @property
    def gateway_url(self) -> str:
        """Base URL of the gateway."""
        return f"http://{self.settings.gateway.gateway_host}:{self.settings.gateway.gateway_port}"

    @property
    def infra_procs(self) -> list[tuple[str, subprocess.Popen]]:
        """``[(name, process)]`` of the embedded broker and Redis that were started."""
        return [(name, p.proc) for name, p in self.infra.items() if p.proc is not None]

    def children(self) -> dict[str, InfraProcess | ServiceProcess]:
        """Every process this stack started, by key, in start order (infrastructure first)."""
        return {**self.infra, **self.procs}

    @property
    def targets_path(self) -> Path:
        """``<data_dir>/prometheus-targets.json``: ``metrics_targets`` as a Prometheus ``file_sd_configs`` file,
        written by ``start()`` (docs/operations.md, "Metrics and alerts")."""
        return self.data_dir / "prometheus-targets.json"

    def metrics_targets(self) -> list[dict]:
        """One Prometheus file_sd group per service process: ``{"targets": ["host:port"], "labels":
        {"service": name, "process": key}}`` (the gateway's HTTP port; the others' ``CONDUIT_METRICS_PORT``)."""
        groups = []
        for key, proc in self.procs.items():
            if proc.name == "gateway":
                address = f"{self.settings.gateway.gateway_host}:{self.settings.gateway.gateway_port}"
            else:
                address = f"127.0.0.1:{proc.env['CONDUIT_METRICS_PORT']}"
            groups.append({"targets": [address], "labels": {"service": proc.name, "process": key}})
        return groups

    def check_ports(self) -> None:
        """Raise StackError naming the processes (pids) that hold a port this stack needs."""
        s = self.settings
        wanted = []
        if not s.bus.kafka_bootstrap_servers:
            wanted.append(("127.0.0.1", s.bus.embedded_kafka_port, "embedded Kafka broker", "CONDUIT_EMBEDDED_KAFKA_PORT"))
        if not s.store.redis_url:
            wanted.append(("127.0.0.1", s.store.embedded_redis_port, "embedded Redis", "CONDUIT_EMBEDDED_REDIS_PORT"))
        if "gateway" in self.services and s.gateway.gateway_port:
            wanted.append((s.gateway.gateway_host, s.gateway.gateway_port, "gateway", "CONDUIT_GATEWAY_PORT"))
        busy = [infra.busy_port_message(p, what, env) for host, p, what, env in wanted if infra.port_open(p, host)]
        if busy:
            raise StackError("\n".join(dict.fromkeys(busy)))

    def start_infra(self) -> None:
        """Start the embedded broker and Redis unless external ones are configured; create the topics."""
        s = self.settings
        if not s.bus.kafka_bootstrap_servers:
            self.infra["tansu"] = self._tansu(s.bus.embedded_kafka_port)
            self.infra["tansu"].start()
            stopsignals.check()
        if not s.store.redis_url:
            self.infra["redis"] = self._redis(s.store.embedded_redis_port, s.store.url())
            self.infra["redis"].start()
            stopsignals.check()
        else:
            infra.wait_redis_loaded(s.store.url(), timeout_s=s.stack.stack_ready_timeout_s)
        self.ensure_topics()
        stopsignals.check()  # a signal inside the event loop's callbacks is logged, not raised

    def _tansu(self, port: int) -> InfraProcess:
        log = self.log_dir / "tansu.log"
        return InfraProcess("tansu", lambda: infra.spawn_tansu(port, log), lambda proc: infra.wait_port(port, proc=proc),
                            log, stop_timeout_s=5.0)

    def _redis(self, port: int, url: str) -> InfraProcess:
        log = self.log_dir / "redis.log"
        return InfraProcess("redis", lambda: infra.spawn_redis(port, self.data_dir / "redis", log),
                            lambda proc: (infra.wait_port(port, proc=proc), infra.wait_redis_loaded(url, proc=proc)), log)

    def ensure_topics(self) -> None:
        """Create every topic that is missing (after a broker start: tansu keeps topics in memory).
        Raises ``stopsignals.Interrupted`` within a tenth of a second of a stop signal."""
        asyncio.run(stopsignals.watch(bus.ensure_topics(self.settings.bus)))

    def service_env(self) -> dict[str, str]:
        """The environment every service process of this stack gets."""
        s = self.settings
        env = settings_env(s.bus.bootstrap_servers(), s.store.url(), self.data_dir, **self.extra_env)
        env["CONDUIT_GATEWAY_HOST"] = s.gateway.gateway_host
        env["CONDUIT_GATEWAY_PORT"] = str(s.gateway.gateway_port)
        return env

    def new_process(self, name: str, replica: int = 1) -> ServiceProcess:
        """A (not started) process of service ``name``; replica N > 1 is keyed ``name-N``. All but the
        gateway get a free port of their own for ``/metrics`` (``CONDUIT_METRICS_PORT``, ``metrics_targets``).
        A retriever also gets its replica index and the replica count (rule K10)."""
        key = name if replica == 1 else f"{name}-{replica}"
        env = self.service_env()
        if name != "gateway":  # each process its own /metrics port (the gateway serves it on its HTTP port)
            env["CONDUIT_METRICS_PORT"] = str(infra.free_port())
        if name == "retriever":
            env |= {"CONDUIT_RETRIEVER_REPLICA": str(replica),
                    "CONDUIT_RETRIEVER_REPLICAS": str(self.scale.get("retriever", 1))}
        return ServiceProcess(name, env, self.log_dir, key=key,
                              stop_timeout_s=shutdown_budget_s(name, self.settings) + STOP_MARGIN_S)

    def copy_retriever_shards(self) -> None:
        """Give every retriever replica K > 1 a fresh copy of replica 1's embedded shards (rule K10;
        ``services.retriever.replicas.copy_shards``); nothing with a Qdrant server or one retriever.
        Raises StackError when a copy fails."""
        count = self.scale.get("retriever", 1)
        if "retriever" not in self.services or count <= 1 or self.settings.retrieval.qdrant_url:
            return
        from services.retriever.replicas import copy_shards  # noqa: PLC0415 - the stack needs it only here

        try:
            copy_shards(self.data_dir, count)
        except OSError as exc:
            raise StackError(f"cannot copy the retriever's shards for its replicas: {exc}") from exc

    def _start_all(self, names: Iterable[str]) -> None:
        for name in names:
            for replica in range(1, self.scale.get(name, 1) + 1):
                proc = self.new_process(name, replica)
                self.procs[proc.key] = proc
                proc.start()
                stopsignals.check()

    def start_services(self, timeout_s: float | None = None) -> None:
        """Start every service process and wait until all are ready (``stack_ready_timeout_s``):
        first all but the gateway (retriever replicas get their copies of the shards first,
        ``copy_retriever_shards``), then, once they checked in, the gateway."""
        timeout_s = timeout_s or self.settings.stack.stack_ready_timeout_s
        deadline = time.monotonic() + timeout_s
        self.copy_retriever_shards()  # after any ingest, before a retriever opens a shard
        self._start_all(n for n in self.services if n != "gateway")
        self.wait_ready(timeout_s)
        if "gateway" in self.services:
            self._start_all(["gateway"])
            self.wait_ready(max(1.0, deadline - time.monotonic()))

    def wait_ready(self, timeout_s: float) -> None:
        """Block until every service process checked in (its own liveness key, set once its
        consumer joined its group) and the gateway answers /readyz; raises StackError."""
        r = make_sync(self.settings.store)  # a cluster client on Redis Cluster (rule O8)
        deadline = time.monotonic() + timeout_s
        missing: list[str] = []
        try:
            while time.monotonic() < deadline:
                for key, proc in self.procs.items():
                    if not proc.running:
                        raise StackError(f"service {key} exited early (status {proc.proc.returncode}); see {proc.log_path}")
                missing = [k for k, p in self.procs.items() if not r.exists(alive_key(p.name, p.pid))]
                if not missing and ("gateway" not in self.procs or self._gateway_ready()):
                    return
                stopsignals.check()
                time.sleep(READY_POLL_S)
        finally:
            r.close()
        tails = "".join(f"\n--- last lines of {key} ---\n{log_tail(self.procs[key].log_path)}" for key in missing)
        raise StackError(f"services not ready after {timeout_s:.0f} s: {missing}; logs in {self.log_dir}{tails}")

    def _gateway_ready(self) -> bool:
        try:
            return httpx.get(f"{self.gateway_url}/readyz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def start(self) -> "Stack":
        """Check the ports, start infrastructure and services; stops what started if anything fails
        (an exception from a signal handler included). Between steps it raises a stop signal that
        was recorded but swallowed (``stopsignals.check``)."""
        try:
            self.check_ports()
            self.log_dir.mkdir(parents=True, exist_ok=True)
            try:
                self.start_infra()
            except RuntimeError as exc:
                raise StackError(f"{exc}; logs in {self.log_dir}") from exc
            self.admin_key = bootstrap.ensure_admin_key(self.settings)
            self.start_services()
            self.targets_path.write_text(json.dumps(self.metrics_targets(), indent=2))
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop the gateway first, then the other services together, then Redis and the broker.

        Each process gets SIGTERM and its stop budget (``services.shutdown_budget_s``) before SIGKILL.
        """
        gateways = [p for p in self.procs.values() if p.name == "gateway"]
        for proc in gateways:
            proc.stop()
        rest = [p for p in self.procs.values() if p.name != "gateway"]
        for proc in rest:
            if proc.running:
                infra.send(proc.proc, signal.SIGTERM)
        for proc in rest:
            if proc.proc is not None:
                infra.wait_or_kill(proc.proc, proc.stop_timeout_s)
        for child in reversed(list(self.infra.values())):
            child.stop()
        self.procs.clear()
        self.infra.clear()
