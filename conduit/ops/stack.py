"""The embedded stack on one machine: broker, Redis and every service as its own process.

``Stack.start()`` starts what is not configured externally (tansu when
``KAFKA_BOOTSTRAP_SERVERS`` is unset, a private redis-server when ``REDIS_URL``
is unset), creates the topics, starts each service with ``conduit serve NAME``
and waits until the gateway is ready and every service has checked in.
Logs go to ``<data_dir>/logs/``.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from pathlib import Path

import httpx
import redis as redis_sync

from conduit.runtime import bus
from conduit.ops import bootstrap, infra
from conduit.runtime.liveness import alive_key
from conduit.ops.services import SERVICES, ServiceProcess, settings_env
from conduit.runtime.settings import Settings


class StackError(RuntimeError):
    """The stack could not start; the message says which part and where its log is."""


class Stack:
    """Start and stop the whole stack.

    Args:
        settings: where things listen (ports, data dir, external addresses).
        services: which services to run (default: all of them).
        extra_env: extra environment for every service process (e.g. model endpoint).
    """

    def __init__(self, settings: Settings, services: tuple[str, ...] = SERVICES, extra_env: dict[str, str] | None = None) -> None:
        self.settings = settings
        self.services = services
        self.extra_env = extra_env or {}
        self.data_dir = Path(settings.data_dir).resolve()
        self.log_dir = self.data_dir / "logs"
        self.infra_procs: list[tuple[str, subprocess.Popen]] = []
        self.procs: dict[str, ServiceProcess] = {}
        self.admin_key: str | None = None
        """The tenant admin's API key (``<data_dir>/admin.key``), set by ``start()``."""

    @property
    def gateway_url(self) -> str:
        """Base URL of the gateway."""
        return f"http://{self.settings.gateway_host}:{self.settings.gateway_port}"

    def start_infra(self) -> None:
        """Start the embedded broker and Redis unless external ones are configured."""
        s = self.settings
        if not s.kafka_bootstrap_servers:
            if infra.port_open(s.embedded_kafka_port):
                raise StackError(f"port {s.embedded_kafka_port} is busy: is another Conduit stack running? "
                                 "Stop it or set CONDUIT_EMBEDDED_KAFKA_PORT.")
            self.infra_procs.append(("tansu", infra.start_tansu(s.embedded_kafka_port, self.log_dir / "tansu.log")))
        if not s.redis_url:
            if infra.port_open(s.embedded_redis_port):
                raise StackError(f"port {s.embedded_redis_port} is busy: is another Conduit stack running? "
                                 "Stop it or set CONDUIT_EMBEDDED_REDIS_PORT.")
            self.infra_procs.append(("redis", infra.start_redis(s.embedded_redis_port, self.data_dir / "redis", self.log_dir / "redis.log")))
        asyncio.run(bus.ensure_topics(s))

    def start_services(self, timeout_s: float | None = None) -> None:
        """Start every service process and wait until all are ready (``stack_ready_timeout_s``)."""
        s = self.settings
        env = settings_env(s.bootstrap_servers(), s.redis(), self.data_dir, **self.extra_env)
        env["CONDUIT_GATEWAY_HOST"] = s.gateway_host
        env["CONDUIT_GATEWAY_PORT"] = str(s.gateway_port)
        if s.gateway_port and "gateway" in self.services and infra.port_open(s.gateway_port, s.gateway_host):
            raise StackError(f"port {s.gateway_port} is busy: set CONDUIT_GATEWAY_PORT to a free port.")
        for name in self.services:
            self.procs[name] = ServiceProcess(name, env, self.log_dir).start()
        self.wait_ready(timeout_s or self.settings.stack_ready_timeout_s)

    def wait_ready(self, timeout_s: float) -> None:
        """Block until every service process checked in (its own liveness key, set once its
        consumer joined its group) and the gateway answers /readyz; raises StackError."""
        r = redis_sync.Redis.from_url(self.settings.redis())
        deadline = time.monotonic() + timeout_s
        try:
            while time.monotonic() < deadline:
                for name, proc in self.procs.items():
                    if not proc.running:
                        raise StackError(f"service {name} exited early; see {proc.log_path}")
                missing = [n for n, p in self.procs.items() if not r.exists(alive_key(n, p.proc.pid))]
                if not missing and ("gateway" not in self.services or self._gateway_ready()):
                    return
                time.sleep(0.2)
        finally:
            r.close()
        raise StackError(f"services not ready after {timeout_s:.0f} s: {missing}; logs in {self.log_dir}")

    def _gateway_ready(self) -> bool:
        try:
            return httpx.get(f"{self.gateway_url}/readyz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def start(self) -> "Stack":
        """Start infrastructure and services; stops what started if anything fails."""
        try:
            self.start_infra()
            self.admin_key = bootstrap.ensure_admin_key(self.settings)
            self.start_services()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop services (gateway first), then Redis and the broker."""
        for name in reversed(list(self.procs)):
            self.procs[name].stop()
        for _, proc in reversed(self.infra_procs):
            infra.stop(proc)
        self.procs.clear()
        self.infra_procs.clear()
