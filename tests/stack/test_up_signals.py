"""`conduit up` as a real process: a stop signal at any moment of start-up, or a SIGKILL, leaves
no process behind; a start that finds an earlier stack's processes on its ports names their pids.

Each test runs `conduit up --no-ingest` with its own data directory and free ports (its own
tansu, redis-server and six services). Leftovers are found by their environment: every
process the stack starts inherits ``CONDUIT_DATA_DIR``.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from ops import infra
from testkit.upcli import UpFactory, stack_processes, wait_no_processes

@pytest.fixture
def up_factory(tmp_path: Path):
    factory = UpFactory(tmp_path)
    yield factory
    factory.cleanup()


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
    assert len(pids) == 8  # tansu, redis and six services
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


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_stop_signal_during_the_first_ingest_exits_non_zero_and_starts_nothing(up_factory, sig):
    up = up_factory(ingest=True)
    up.wait_for(lambda: "Ingesting the law corpus" in up.output(), "the ingest")
    up.proc.send_signal(sig)
    assert up.proc.wait(120) == 128 + sig, up.output()
    assert not wait_no_processes(up.data_dir, 10)
    assert not (up.data_dir / "logs" / "tansu.log").exists(), "nothing is started after an interrupted ingest"


def test_a_second_start_names_the_running_stacks_supervisor(up_factory):
    """A second `conduit up` on a running stack's ports names the first one's `conduit up` (stopping
    it stops its services), not its supervised services (killing those only restarts them)."""
    first = up_factory()
    first.wait_for(first.ready, "ready")
    ports = {k: v for k, v in first.env.items() if k.startswith("CONDUIT_") and k.endswith("_PORT")}
    second = up_factory(**ports)
    assert second.proc.wait(60) == 1
    out = " ".join(second.output().split())
    assert f"pid {first.proc.pid}" in out and f"kill {first.proc.pid}" in out and "already running" in out, out
    assert not wait_no_processes(second.data_dir, 10)
