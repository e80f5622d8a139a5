"""`conduit up` as a real process: a stop signal at any moment of start-up, or a SIGKILL, leaves
no process behind; a start that finds an earlier stack's processes on its ports names their pids.

Each test runs `conduit up --no-ingest` with its own data directory and free ports (its own
tansu, redis-server and five services). Leftovers are found by their environment: every
process the stack starts inherits ``CONDUIT_DATA_DIR``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from conduit.ops import infra

START_TIMEOUT_S = 120


def stack_processes(data_dir: Path) -> list[psutil.Process]:
    """Every live process whose environment names ``data_dir`` (the stack's children and `conduit up`)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("CONDUIT_DATA_DIR") == str(data_dir) and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except psutil.Error:
            continue
    return found


def wait_no_processes(data_dir: Path, timeout_s: float = 60.0) -> list[psutil.Process]:
    """Wait until no process of the stack is left; return what is still there after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    left = stack_processes(data_dir)
    while left and time.monotonic() < deadline:
        psutil.wait_procs(left, timeout=1)
        left = stack_processes(data_dir)
    return left


class Up:
    """One `conduit up --no-ingest` child process with private ports and data directory."""

    def __init__(self, tmp: Path, *args: str, **env: str) -> None:
        self.data_dir = tmp / "data"
        tmp.mkdir(parents=True, exist_ok=True)
        self.out = tmp / "up.out"
        self.env = {**os.environ, "CONDUIT_DATA_DIR": str(self.data_dir),
                    "CONDUIT_EMBEDDED_KAFKA_PORT": str(infra.free_port()),
                    "CONDUIT_EMBEDDED_REDIS_PORT": str(infra.free_port()),
                    "CONDUIT_GATEWAY_PORT": str(infra.free_port()), "COLUMNS": "200", **env}
        self.proc = subprocess.Popen([sys.executable, "-m", "conduit", "up", "--no-ingest", *args], env=self.env,
                                     stdout=self.out.open("wb"), stderr=subprocess.STDOUT)

    def output(self) -> str:
        return self.out.read_text(errors="replace")

    def wait_for(self, ready: "callable", what: str, timeout_s: float = START_TIMEOUT_S) -> None:
        """Wait until ``ready()`` is true; fail with the output when `conduit up` exits first or time runs out."""
        deadline = time.monotonic() + timeout_s
        while not ready():
            assert self.proc.poll() is None, f"conduit up exited ({self.proc.returncode}) before {what}:\n{self.output()}"
            assert time.monotonic() < deadline, f"no {what} after {timeout_s} s:\n{self.output()}"
            time.sleep(0.05)

    def log_exists(self, name: str) -> bool:
        return (self.data_dir / "logs" / f"{name}.log").exists()

    def state(self) -> dict:
        return json.loads((self.data_dir / "stack.json").read_text())

    def ready(self) -> bool:
        return (self.data_dir / "stack.json").exists()

    def cleanup(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        for p in stack_processes(self.data_dir):
            p.kill()


@pytest.fixture
def up_factory(tmp_path: Path):
    made: list[Up] = []

    def make(*args: str, **env: str) -> Up:
        made.append(Up(tmp_path / f"up{len(made)}", *args, **env))
        return made[-1]

    yield make
    for up in made:
        up.cleanup()


# the moments of start-up a signal lands in: each is the first sign of that phase
PHASES = {
    "broker starting": lambda up: up.log_exists("tansu"),
    "redis starting": lambda up: up.log_exists("redis"),
    "services starting": lambda up: up.log_exists("orchestrator"),
    "gateway starting": lambda up: up.log_exists("gateway"),
}


@pytest.mark.parametrize("phase", list(PHASES))
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_stop_signal_during_start_up_stops_everything_and_exits_non_zero(up_factory, phase, sig):
    up = up_factory()
    up.wait_for(lambda: PHASES[phase](up) or up.ready(), phase)
    up.proc.send_signal(sig)
    code = up.proc.wait(120)
    left = wait_no_processes(up.data_dir, 10)
    assert not left, f"left behind after {sig.name} at {phase}: {[p.cmdline() for p in left]}"
    if not up.ready():  # the signal landed before ready (the usual case)
        assert code == 128 + sig, up.output()


def test_sigterm_after_ready_stops_everything_and_exits_zero(up_factory):
    up = up_factory()
    up.wait_for(up.ready, "ready")
    pids = [c["pid"] for c in up.state()["children"].values()]
    assert len(pids) == 7  # tansu, redis and five services
    up.proc.send_signal(signal.SIGTERM)
    assert up.proc.wait(120) == 0, up.output()
    assert not wait_no_processes(up.data_dir, 10)
    assert not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids)


@pytest.mark.parametrize("when", ["services starting", "ready"])
def test_sigkill_of_conduit_up_leaves_no_process(up_factory, when):
    up = up_factory()
    up.wait_for(lambda: PHASES.get(when, lambda u: u.ready())(up), when)
    up.proc.kill()
    up.proc.wait()
    left = wait_no_processes(up.data_dir, 60)
    assert not left, f"left behind after SIGKILL at {when}: {[p.cmdline() for p in left]}"


def test_a_start_against_stale_processes_names_their_pids(up_factory, tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", "import socket,sys,time; s=socket.socket(); "
                               "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
                               "s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen(); print('ok', flush=True); time.sleep(600)",
                               port := str(infra.free_port())], stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline().strip() == b"ok"
        up = up_factory(CONDUIT_EMBEDDED_KAFKA_PORT=port)
        assert up.proc.wait(60) == 1
        out = " ".join(up.output().split())
        assert f"port {port}" in out and f"pid {holder.pid}" in out and f"kill {holder.pid}" in out, out
        assert not wait_no_processes(up.data_dir, 10)
    finally:
        holder.kill()
        holder.wait()
