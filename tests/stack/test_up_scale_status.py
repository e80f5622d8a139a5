"""`conduit up --scale` runs replicas that share their consumer group; `conduit status` shows
each process's pid, uptime, restarts, readiness and its group's lag, and the supervisor's
restart of a SIGKILLed replica shows there."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conduit.testing.upcli import UpFactory, wait_no_processes


@pytest.fixture
def up_factory(tmp_path: Path):
    factory = UpFactory(tmp_path)
    yield factory
    factory.cleanup()


def status(up) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "conduit", "status"], env={**up.env, "COLUMNS": "200"},
                          capture_output=True, text=True, timeout=60)


def test_scaled_stack_status_and_a_replica_restart(up_factory):
    up = up_factory("--scale", "orchestrator=2,web=2")
    up.wait_for(up.ready, "ready")
    children = up.state()["children"]
    assert {"orchestrator", "orchestrator-2", "web", "web-2"} <= set(children)
    done = status(up)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {line.split()[0]: line.split() for line in done.stdout.splitlines()[1:-1]}
    assert set(rows) == set(children)
    assert rows["orchestrator-2"][1] == str(children["orchestrator-2"]["pid"]) and rows["orchestrator-2"][4] == "yes"
    assert rows["orchestrator"][5].isdigit() and rows["gateway"][5] == "-"  # lag of the group; the gateway has none
    assert "embedded Redis files" in done.stdout

    victim = children["orchestrator-2"]["pid"]
    os.kill(victim, signal.SIGKILL)
    up.wait_for(lambda: up.state()["children"]["orchestrator-2"]["restarts"] == 1, "restart of orchestrator-2", 60)
    after = up.state()["children"]["orchestrator-2"]
    assert after["pid"] != victim and after["last_exit"] == "killed by SIGKILL"
    assert f"orchestrator-2 (pid {victim}) exited: killed by SIGKILL" in " ".join(up.output().split())
    deadline = time.monotonic() + 60
    while (done := status(up)).returncode != 0 and time.monotonic() < deadline:
        pass  # the new replica checks in within seconds
    line = next(x for x in done.stdout.splitlines() if x.startswith("orchestrator-2"))
    assert line.split()[3] == "1" and line.split()[4] == "yes", done.stdout

    up.proc.send_signal(signal.SIGTERM)
    assert up.proc.wait(120) == 0
    assert not wait_no_processes(up.data_dir, 10)
    assert status(up).returncode == 1  # nothing runs any more


def test_retriever_replicas_need_a_qdrant_server(up_factory):
    up = up_factory("--scale", "retriever=2")
    assert up.proc.wait(60) == 1
    assert "more than one retriever needs a Qdrant server (set QDRANT_URL)" in " ".join(up.output().split())
    assert not wait_no_processes(up.data_dir, 10)
