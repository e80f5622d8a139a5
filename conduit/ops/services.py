"""Start Conduit's services as separate processes (``conduit serve NAME``).

Each service package exposes ``services.<name>.main.main(settings)``, a blocking
entry point that serves until SIGTERM. ``ServiceProcess`` runs one of them as
``python -m conduit serve NAME`` with its settings passed as environment variables.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conduit.ops import infra

SERVICES = ("retriever", "web", "sandbox", "orchestrator", "gateway")
"""Every service, in start order (tool services before the orchestrator, gateway last)."""


def settings_env(bootstrap: str, redis_url: str, data_dir: Path, **extra: str) -> dict[str, str]:
    """Environment variables that point a service process at one stack."""
    env = {
        "CONDUIT_KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "CONDUIT_REDIS_URL": redis_url,
        "CONDUIT_DATA_DIR": str(data_dir),
        "PYTHONUNBUFFERED": "1",
        "OMP_WAIT_POLICY": "PASSIVE",
    }
    env.update(extra)
    return env


class ServiceProcess:
    """One service subprocess with its log file at ``<data_dir>/logs/<name>.log``.

    Args:
        name: one of ``SERVICES``.
        env: extra environment (see ``settings_env``).
        log_dir: folder for the log file.
    """

    def __init__(self, name: str, env: dict[str, str], log_dir: Path) -> None:
        if name not in SERVICES:
            raise ValueError(f"unknown service {name!r}; expected one of {SERVICES}")
        self.name = name
        self.env = env
        self.log_path = log_dir / f"{name}.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> "ServiceProcess":
        """Spawn the process (non-blocking)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "conduit", "serve", self.name],
            env=infra.env_for_children(self.env),
            stdout=self.log_path.open("ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        return self

    def kill(self) -> None:
        """SIGKILL the process (crash simulation)."""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        """SIGTERM the process and wait for a clean exit."""
        if self.proc:
            infra.stop(self.proc)

    def wait_exit(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` seconds for the process to exit by itself; True if it did."""
        if self.proc is None:
            return True
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return False
        return True

    @property
    def running(self) -> bool:
        """True while the process has not exited."""
        return bool(self.proc and self.proc.poll() is None)
