"""Run untrusted Python code with limits: ``await run_code(code, limits) -> RunResult``.

Isolation comes from ``isolation`` (bubblewrap). Limits, all enforced per run:

- wall time ``timeout_s`` (settings.sandbox.sandbox_timeout_s, default 10 s): the whole sandbox is killed;
- CPU time ``cpu_s`` (default: the wall time rounded up), open files, file size (``file_bytes``),
  process count (``max_procs``) and no core dumps via ``prlimit`` around the interpreter;
- resident memory: a watchdog polls the process tree every ``poll_s`` (50 ms) and kills it
  once the summed RSS passes ``memory_mb`` (settings.sandbox.sandbox_memory_mb); no address-space
  limit (rule S2, docs/rules.md: it breaks numpy);
- the watchdog also kills a tree larger than ``max_procs`` (``RLIMIT_NPROC`` does not bind
  host root, so this is the backstop when bwrap has to run as root);
- output: stdout + stderr together are kept up to ``output_bytes`` (settings.sandbox.sandbox_output_bytes);
  past that the run is stopped and ``truncated`` is set;
- output files: what the code leaves in ``/tmp/out`` (``./out``) when it exits comes back in
  ``RunResult.files`` (at most ``max_files`` regular files, ``max_file_bytes`` in total, read
  from a pipe on fd 3 that only the launcher holds; the rest is dropped and ``files_dropped`` says so).
  A run killed by a limit returns no files. Unsafe mode returns none either.

Without a working bubblewrap ``run_code`` raises ``SandboxUnavailable`` unless
``allow_unsafe`` (settings.sandbox.sandbox_unsafe): then it runs ``python -I -B`` as a plain
subprocess with the same limits (no RLIMIT_NPROC: outside a user namespace it would count
every process of the service's uid), an environment without the service's variables and
a temporary working directory, and logs a loud warning every time.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

from conduit.runtime.settings import SandboxSettings
from services.sandbox import isolation, watchdog

log = logging.getLogger("conduit.sandbox.runner")

MIB = 1024 * 1024
BWRAP_OVERHEAD_PROCS = 3
"""Processes added to the tree: bwrap's monitor, the namespace's pid 1 and the launcher."""
HEADER_MAX = 1024
"""Longest accepted header line of one output file on the pipe (bytes)."""


class SandboxUnavailable(RuntimeError):
    """No isolation is available and unsafe mode is off; ``str(exc)`` is the reason."""


@dataclass(frozen=True)
class Limits:
    """Per-run limits. Units: seconds, MiB (memory), bytes (output, files, tmpfs)."""

    timeout_s: float = 10.0
    memory_mb: int = 512
    output_bytes: int = 64_000
    max_procs: int = 32
    file_bytes: int = 16 * MIB
    tmpfs_bytes: int = 64 * MIB
    cpu_s: int | None = None
    poll_s: float = 0.05
    max_files: int = 10
    max_file_bytes: int = 8 * MIB

    @classmethod
    def from_settings(cls, sandbox: SandboxSettings) -> "Limits":
        """Limits from ``sandbox_timeout_s``, ``sandbox_memory_mb`` and ``sandbox_output_bytes``."""
        return cls(timeout_s=sandbox.sandbox_timeout_s, memory_mb=sandbox.sandbox_memory_mb,
                   output_bytes=sandbox.sandbox_output_bytes,
                   max_files=sandbox.sandbox_artifact_max_files, max_file_bytes=sandbox.sandbox_artifact_max_bytes)

    @property
    def cpu_seconds(self) -> int:
        return self.cpu_s if self.cpu_s is not None else max(1, math.ceil(self.timeout_s))


@dataclass
class RunResult:
    """Outcome of one run.

    ``exit_code``: the process exit status (negative = killed by that signal; bwrap
    reports a signal inside as 128 + signal). ``killed_reason``: why Conduit or a limit
    stopped it: ``timeout``, ``memory``, ``processes``, ``output_limit``, ``cpu_time`` or None.
    ``truncated``: output was cut at ``Limits.output_bytes``. ``duration_s``: wall seconds.
    ``files``: ``(relative name, content)`` of the output folder's files; ``files_dropped``:
    how many were left out (over the count or byte caps, or malformed).
    """

    stdout: str
    stderr: str
    exit_code: int | None
    timed_out: bool
    killed_reason: str | None
    truncated: bool
    duration_s: float
    files: list[tuple[str, bytes]] = field(default_factory=list)
    files_dropped: int = 0


@dataclass
class _Run:
    """Mutable state shared by the output pumps and the watchdog of one run."""

    proc: asyncio.subprocess.Process
    limits: Limits
    out: dict[str, bytearray] = field(default_factory=lambda: {"stdout": bytearray(), "stderr": bytearray()})
    captured: int = 0
    truncated: bool = False
    killed_reason: str | None = None

    def kill(self, reason: str) -> None:
        """Kill the whole sandbox (process group and every descendant), remembering the first reason."""
        if self.killed_reason is None:
            self.killed_reason = reason
        if self.proc.returncode is not None:
            return
        tree = watchdog.process_tree(self.proc.pid)
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        watchdog.kill_all(tree)

    async def pump(self, name: str, stream: asyncio.StreamReader) -> None:
        """Copy ``stream`` into ``out[name]`` until EOF, within the shared output budget."""
        while chunk := await stream.read(65536):
            room = self.limits.output_bytes - self.captured
            if room > 0:
                self.out[name] += chunk[:room]
                self.captured += min(room, len(chunk))
            if len(chunk) > room:
                self.truncated = True
                self.kill("output_limit")

    async def watch(self) -> None:
        """Every ``poll_s``: kill the tree when its RSS or process count is over the limits."""
        limit_bytes = self.limits.memory_mb * MIB
        while self.proc.returncode is None:
            tree = watchdog.process_tree(self.proc.pid)
            if watchdog.rss_bytes(tree) > limit_bytes:
                self.kill("memory")
                return
            if len(tree) > self.limits.max_procs + BWRAP_OVERHEAD_PROCS:
                self.kill("processes")
                return
            await asyncio.sleep(self.limits.poll_s)


def _unsafe_command(code_file: str, limits: Limits) -> list[str]:
    return [isolation.PRLIMIT, f"--cpu={limits.cpu_seconds}:{limits.cpu_seconds + 1}",
            f"--fsize={limits.file_bytes}", "--nofile=256", "--core=0", "--",
            sys.executable, "-I", "-B", code_file]


async def run_code(code: str, limits: Limits, *, allow_unsafe: bool = False,
                   setup: isolation.Setup | None = None) -> RunResult:
    """Run ``code`` (Python 3 source) isolated under ``limits``.

    ``setup`` is the isolation to use (default: ``isolation.discover()``, probed once).
    Raises ``SandboxUnavailable`` when bubblewrap cannot run and ``allow_unsafe`` is false,
    ``OSError`` when the process cannot be spawned.
    """
    plan, why = setup if setup is not None else await asyncio.to_thread(isolation.discover)
    run_as = plan.run_as if plan else None
    if plan is None and not allow_unsafe:
        raise SandboxUnavailable(why)
    path = isolation.prepare_code_dir(code, run_as)
    read_fd = write_fd = -1
    try:
        if plan is not None:
            if limits.max_files > 0:
                read_fd, write_fd = os.pipe()
            cmd = isolation.bwrap_command(plan, str(path), cpu_s=limits.cpu_seconds, max_procs=limits.max_procs,
                                          file_bytes=limits.file_bytes, tmpfs_bytes=limits.tmpfs_bytes,
                                          max_files=limits.max_files, max_file_bytes=limits.max_file_bytes,
                                          files_fd=write_fd)
            env, cwd = {"PATH": "/usr/bin:/bin"}, "/"
        else:
            log.warning("SANDBOX UNSAFE: running model-written code WITHOUT isolation "
                        "(CONDUIT_SANDBOX_UNSAFE=true) because %s", why)
            cmd = _unsafe_command(str(path), limits)
            env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": str(path.parent), **isolation.THREAD_ENV}
            cwd = str(path.parent)
        started = time.monotonic()
        fds = {"pass_fds": (write_fd,)} if write_fd >= 0 else {}
        try:
            proc = await asyncio.create_subprocess_exec(
                *cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                env=env, cwd=cwd, start_new_session=True, **fds, **isolation.spawn_user(run_as))
        finally:
            if write_fd >= 0:
                os.close(write_fd)  # the child holds it now; EOF comes when the launcher closes its copy
        files = asyncio.create_task(_read_files(read_fd, limits)) if read_fd >= 0 else None
        read_fd = -1 if files else read_fd  # the reader owns it now
        result = await _supervise(proc, limits, started)
        if files is not None:
            try:
                result.files, result.files_dropped = await asyncio.wait_for(files, timeout=2.0)
            except TimeoutError:  # a grandchild kept the pipe open: the run's files are lost
                result.files_dropped += 1
            if result.killed_reason:
                result.files_dropped += len(result.files)
                result.files = []
        return result
    finally:
        if read_fd >= 0:
            os.close(read_fd)
        shutil.rmtree(path.parent, ignore_errors=True)


async def _read_files(fd: int, limits: Limits) -> tuple[list[tuple[str, bytes]], int]:
    """Read the launcher's output files from pipe ``fd`` (closed on return) within the caps.

    Returns ``(files, dropped)``; reading stops at ``max_file_bytes`` + headers, at a malformed
    header or a name that is not a plain relative path.
    """
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=HEADER_MAX)
    transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb", 0))
    files: list[tuple[str, bytes]] = []
    dropped, budget = 0, limits.max_file_bytes
    try:
        while True:
            try:
                line = await reader.readuntil(b"\n")
            except asyncio.IncompleteReadError as exc:
                dropped += bool(exc.partial)
                break
            except asyncio.LimitOverrunError:
                dropped += 1
                break
            try:
                head = json.loads(line)
                name, size = str(head["name"]), int(head["bytes"])
            except (ValueError, KeyError, TypeError):
                dropped += 1
                break
            if size < 0 or size > budget or len(files) >= limits.max_files or not _plain_name(name):
                dropped += 1
                break
            try:
                data = await reader.readexactly(size)
            except asyncio.IncompleteReadError:
                dropped += 1
                break
            budget -= size
            files.append((name, data))
    finally:
        transport.close()
    return files, dropped


def _plain_name(name: str) -> bool:
    """A relative path without ``..``, empty parts or control characters, at most 200 characters."""
    parts = name.split("/")
    return (0 < len(name) <= 200 and all(p not in ("", ".", "..") for p in parts)
            and not any(ord(c) < 32 or c == "\\" for c in name))


async def _supervise(proc: asyncio.subprocess.Process, limits: Limits, started: float) -> RunResult:
    run = _Run(proc, limits)
    assert proc.stdout is not None and proc.stderr is not None
    pumps = [asyncio.create_task(run.pump("stdout", proc.stdout)), asyncio.create_task(run.pump("stderr", proc.stderr))]
    watcher = asyncio.create_task(run.watch())
    try:
        try:
            await asyncio.wait_for(proc.wait(), timeout=limits.timeout_s)
        except TimeoutError:
            run.kill("timeout")
            await proc.wait()
    finally:
        if proc.returncode is None:  # cancelled from outside: never leave the sandbox running
            run.kill("cancelled")
            await asyncio.shield(proc.wait())
        watcher.cancel()
        _, pending = await asyncio.wait(pumps, timeout=1.0)
        for task in pending:
            task.cancel()
    code = proc.returncode
    if run.killed_reason is None and code in (-signal.SIGXCPU, 128 + signal.SIGXCPU):
        run.killed_reason = "cpu_time"
    return RunResult(
        stdout=run.out["stdout"].decode("utf-8", errors="replace"),
        stderr=run.out["stderr"].decode("utf-8", errors="replace"),
        exit_code=code, timed_out=run.killed_reason == "timeout", killed_reason=run.killed_reason,
        truncated=run.truncated, duration_s=round(time.monotonic() - started, 3),
    )
