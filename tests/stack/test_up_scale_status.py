"""`conduit up --scale` runs replicas that share their consumer group (retriever replicas on the
embedded store refuse an external broker, rule K10); `conduit status` shows
each process's pid, uptime, restarts, readiness, its group's lag and a retriever replica's writes lag, and the supervisor's
restart of a SIGKILLed replica shows there."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testkit.upcli import UpFactory, wait_no_processes


@pytest.fixture
def up_factory(tmp_path: Path):
    factory = UpFactory(tmp_path)
    yield factory
    factory.cleanup()


def status(up) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "conduit", "status"], env={**up.env, "COLUMNS": "200"},
                          capture_output=True, text=True, timeout=60)


def test_scaled_stack_status_and_a_replica_restart(up_factory):
    up = up_factory("--scale", "orchestrator=2,web=2,retriever=2")
    up.wait_for(up.ready, "ready")
    children = up.state()["children"]
    assert {"orchestrator", "orchestrator-2", "web", "web-2", "retriever", "retriever-2"} <= set(children)
    done = status(up)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {line.split()[0]: line.split() for line in done.stdout.splitlines()[1:-1]}
    assert set(rows) == set(children)
    assert rows["orchestrator-2"][1] == str(children["orchestrator-2"]["pid"]) and rows["orchestrator-2"][4] == "yes"
    assert rows["orchestrator"][5].isdigit() and rows["gateway"][5] == "-"  # lag of the group; the gateway has none
    assert rows["retriever"][6].isdigit() and rows["retriever-2"][6].isdigit()  # each replica's writes group (K10)
    assert rows["orchestrator"][6] == "-"
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


def test_retriever_replicas_on_the_embedded_store_refuse_an_external_broker(up_factory):
    """Rule K10: replicas start from fresh copies of the shards, which only the embedded broker's empty
    topics match; the refusal comes before anything starts (the address is never dialled)."""
    up = up_factory("--scale", "retriever=2", CONDUIT_KAFKA_BOOTSTRAP_SERVERS="127.0.0.1:1")
    assert up.proc.wait(60) == 1
    said = " ".join(up.output().split())
    assert "more than one retriever on the embedded Qdrant Edge store needs the embedded broker" in said
    assert "committed offsets of the writes groups" in said and "set QDRANT_URL" in said
    assert not wait_no_processes(up.data_dir, 10)
