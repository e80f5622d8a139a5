"""Run `conduit up` as a child process in a test and find what it left behind.

Every process a stack starts inherits ``CONDUIT_DATA_DIR`` from `conduit up`, so
``stack_processes(data_dir)`` finds them all (also orphans) by their environment.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from ops import infra

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
    """One `conduit up` child process (``--no-ingest`` unless ``ingest``) with private ports and data directory."""

    def __init__(self, tmp: Path, *args: str, ingest: bool = False, **env: str) -> None:
        self.data_dir = tmp / "data"
        tmp.mkdir(parents=True, exist_ok=True)
        self.out = tmp / "up.out"
        self.env = {**os.environ, "CONDUIT_DATA_DIR": str(self.data_dir),
                    "CONDUIT_EMBEDDED_KAFKA_PORT": str(infra.free_port()),
                    "CONDUIT_EMBEDDED_REDIS_PORT": str(infra.free_port()),
                    "CONDUIT_GATEWAY_PORT": str(infra.free_port()), "COLUMNS": "200", **env}
        flags = [] if ingest else ["--no-ingest"]
        self.proc = subprocess.Popen([sys.executable, "-m", "conduit", "up", *flags, *args], env=self.env,
                                     stdout=self.out.open("wb"), stderr=subprocess.STDOUT)

    def output(self) -> str:
        return self.out.read_text(errors="replace")

    def wait_for(self, ready: Callable[[], bool], what: str, timeout_s: float = START_TIMEOUT_S) -> None:
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




class UpFactory:
    """Makes ``Up`` processes under ``root`` (one folder each); ``cleanup()`` kills what is left."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.made: list[Up] = []

    def __call__(self, *args: str, ingest: bool = False, **env: str) -> Up:
        self.made.append(Up(self.root / f"up{len(self.made)}", *args, ingest=ingest, **env))
        return self.made[-1]

    def cleanup(self) -> None:
        for up in self.made:
            up.cleanup()
