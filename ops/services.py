"""Start Conduit's services as separate processes (``conduit serve NAME``).

Each service package exposes ``services.<name>.main.main(settings)``, a blocking
entry point that serves until SIGTERM. ``ServiceProcess`` runs one of them as
``python -m conduit serve NAME`` with its settings passed as environment variables.
Each process gets SIGTERM from the kernel when the process that started it dies
(``infra.die_with_parent``), so no service outlives a SIGKILLed ``conduit up``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from ops import infra
from conduit.runtime.settings import Settings

SERVICES = ("retriever", "web", "sandbox", "mcp", "orchestrator", "gateway")
"""Every service, in start order (tool services before the orchestrator, gateway last)."""

STOP_MARGIN_S = 5.0
"""Seconds a stopper waits beyond a process's own shutdown budget before it sends SIGKILL."""


def shutdown_budget_s(service: str, settings: Settings) -> float:
    """Seconds ``service`` may take to stop cleanly after SIGTERM, from its own settings.

    - gateway: uvicorn's graceful shutdown (``gateway_shutdown_grace_s``);
    - orchestrator: running model steps (``shutdown_grace_s``) plus a handler in flight
      (``tool_timeout_s``: the longest a handler waits on anything);
    - retriever, web, mcp: a tool handler in flight (``tool_timeout_s + 5``, the FastStream deadline);
    - sandbox: a run in flight (``sandbox_timeout_s + 5``).
    Each stopper (``ServiceProcess.stop``, Kubernetes' ``terminationGracePeriodSeconds``)
    waits this plus ``STOP_MARGIN_S``; tests/deploy checks the manifests agree.
    """
    if service == "gateway":
        return settings.gateway.gateway_shutdown_grace_s
    if service == "orchestrator":
        return settings.agent.shutdown_grace_s + settings.tools.tool_timeout_s
    if service == "sandbox":
        return settings.sandbox.sandbox_timeout_s + 5
    return settings.tools.tool_timeout_s + 5


MALLOC_ENV = {"MALLOC_ARENA_MAX": "2"}
"""glibc malloc settings of every service process (rule O12), unless the operator's environment sets them."""


def settings_env(bootstrap: str, redis_url: str, data_dir: Path, **extra: str) -> dict[str, str]:
    """Environment variables that point a service process at one stack.

    Rule O12 (docs/operations.md, "Memory"): at most two glibc malloc arenas per process
    (``MALLOC_ARENA_MAX=2``, ``MALLOC_ENV``) unless ``os.environ`` or ``extra`` sets it: glibc gives each
    thread that allocates its own 64 MiB arena (up to 8 per core), and the retriever's search and e5
    threads kept freed memory in theirs. The gateway runs on jemalloc instead (``conduit.runtime.allocator``).
    """
    env = {
        "CONDUIT_KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "CONDUIT_REDIS_URL": redis_url,
        "CONDUIT_DATA_DIR": str(data_dir),
        "PYTHONUNBUFFERED": "1",
        "OMP_WAIT_POLICY": "PASSIVE",
        **{k: v for k, v in MALLOC_ENV.items() if k not in os.environ},
    }
    env.update(extra)
    return env


class ChildProcess:
    """What the stack does with any process it started: ``proc`` (``subprocess.Popen``, None
    before start) and ``stop_timeout_s`` (seconds ``stop`` waits after SIGTERM before SIGKILL)."""

    proc: subprocess.Popen | None
    stop_timeout_s: float

    def stop(self) -> None:
        """SIGTERM the process and wait for a clean exit (SIGKILL after ``stop_timeout_s``)."""
        if self.proc:
            infra.stop(self.proc, self.stop_timeout_s)

    def kill(self) -> None:
        """SIGKILL the process (crash simulation)."""
        if self.proc and infra.poll(self.proc) is None:
            infra.send(self.proc, signal.SIGKILL)
            infra.wait(self.proc, infra.KILL_WAIT_S)

    @property
    def running(self) -> bool:
        """True while the process has not exited."""
        return bool(self.proc and infra.poll(self.proc) is None)

    @property
    def pid(self) -> int | None:
        """The process id (None before ``start``)."""
        return self.proc.pid if self.proc else None


class ServiceProcess(ChildProcess):
    """One service subprocess with its log file at ``<data_dir>/logs/<key>.log``.

    Args:
        name: one of ``SERVICES``.
        env: extra environment (see ``settings_env``).
        log_dir: folder for the log file.
        key: this replica's name in a stack (default ``name``; ``orchestrator-2`` for a second replica).
        stop_timeout_s: seconds ``stop`` waits after SIGTERM before SIGKILL
            (default: ``shutdown_budget_s`` of the default settings plus ``STOP_MARGIN_S``).
    """

    def __init__(self, name: str, env: dict[str, str], log_dir: Path, key: str | None = None,
                 stop_timeout_s: float | None = None) -> None:
        if name not in SERVICES:
            raise ValueError(f"unknown service {name!r}; expected one of {SERVICES}")
        self.name = name
        self.key = key or name
        self.env = env
        self.log_path = log_dir / f"{self.key}.log"
        self.proc: subprocess.Popen | None = None
        self.started_at = 0.0
        self.stop_timeout_s = stop_timeout_s if stop_timeout_s is not None else (
            shutdown_budget_s(name, Settings()) + STOP_MARGIN_S)

    def start(self) -> "ServiceProcess":
        """Spawn the process (non-blocking)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.proc = infra.popen([sys.executable, "-m", "conduit", "serve", self.name],
                                env=infra.env_for_children(self.env), stdout=self.log_path.open("ab"),
                                stderr=subprocess.STDOUT)
        self.started_at = time.time()
        return self

    def wait_exit(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` seconds for the process to exit by itself; True if it did."""
        if self.proc is None:
            return True
        return infra.wait(self.proc, timeout_s) is not None
