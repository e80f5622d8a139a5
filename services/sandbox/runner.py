"""Run untrusted Python code with limits: ``await run_code(code, limits) -> RunResult``.

Isolation comes from ``isolation`` (bubblewrap). Limits, all enforced per run:

- wall time ``timeout_s`` (settings.sandbox_timeout_s, default 10 s): the whole sandbox is killed;
- CPU time ``cpu_s`` (default: the wall time rounded up), open files, file size (``file_bytes``),
  process count (``max_procs``) and no core dumps via ``prlimit`` around the interpreter;
- resident memory: a watchdog polls the process tree every ``poll_s`` (50 ms) and kills it
  once the summed RSS passes ``memory_mb`` (settings.sandbox_memory_mb); no address-space
  limit (seed 000: it breaks numpy);
- the watchdog also kills a tree larger than ``max_procs`` (``RLIMIT_NPROC`` does not bind
  host root, so this is the backstop when bwrap has to run as root);
- output: stdout + stderr together are kept up to ``output_bytes`` (settings.sandbox_output_bytes);
  past that the run is stopped and ``truncated`` is set.

Without a working bubblewrap ``run_code`` raises ``SandboxUnavailable`` unless
``allow_unsafe`` (settings.sandbox_unsafe): then it runs ``python -I -B`` as a plain
subprocess with the same limits (no RLIMIT_NPROC: outside a user namespace it would count
every process of the service's uid), an environment without the service's variables and
a temporary working directory, and logs a loud warning every time.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

from conduit.settings import Settings
from services.sandbox import isolation, watchdog

log = logging.getLogger("conduit.sandbox.runner")

MIB = 1024 * 1024
BWRAP_OVERHEAD_PROCS = 2
"""Processes bwrap adds to the tree (its monitor and the namespace's pid 1)."""


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

    @classmethod
    def from_settings(cls, settings: Settings) -> "Limits":
        """Limits from ``sandbox_timeout_s``, ``sandbox_memory_mb`` and ``sandbox_output_bytes``."""
        return cls(timeout_s=settings.sandbox_timeout_s, memory_mb=settings.sandbox_memory_mb,
                   output_bytes=settings.sandbox_output_bytes)

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
    """

    stdout: str
    stderr: str
    exit_code: int | None
    timed_out: bool
    killed_reason: str | None
    truncated: bool
    duration_s: float


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
    try:
        if plan is not None:
            cmd = isolation.bwrap_command(plan, str(path), cpu_s=limits.cpu_seconds, max_procs=limits.max_procs,
                                          file_bytes=limits.file_bytes, tmpfs_bytes=limits.tmpfs_bytes)
            env, cwd = {"PATH": "/usr/bin:/bin"}, "/"
        else:
            log.warning("SANDBOX UNSAFE: running model-written code WITHOUT isolation "
                        "(CONDUIT_SANDBOX_UNSAFE=true) because %s", why)
            cmd = _unsafe_command(str(path), limits)
            env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": str(path.parent), **isolation.THREAD_ENV}
            cwd = str(path.parent)
        started = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            *cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=env, cwd=cwd, start_new_session=True, **isolation.spawn_user(run_as))
        return await _supervise(proc, limits, started)
    finally:
        shutil.rmtree(path.parent, ignore_errors=True)


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
