"""The sandbox tool service: ``code_exec`` over Kafka.

Run as ``python -m conduit serve sandbox``. Consumes ``contracts.topics.TOOL_REQUESTS_SANDBOX``
in group ``GROUP_SANDBOX``; the per-call deadline is ``sandbox_timeout_s + 5`` seconds so
the runner's own wall-time limit fires first. The result is text in ``ToolOutput.output``
(stdout, then stderr, exit code and notes) and never evidence (rule S4, docs/rules.md).

Without working bubblewrap every call fails with ``ToolFailure("sandbox_unavailable",
kind="forbidden")`` carrying ``isolation.off_message`` (the reason and the command that turns
it on), unless ``CONDUIT_SANDBOX_UNSAFE=true``; and the model is not offered ``code_exec``
(``conduit.runtime.toolcatalog.unavailable_tools`` reads the status below).

Files the code leaves in ``/tmp/out`` (``./out``) are stored as artifacts
(``conduit.records.artifacts.ArtifactStore``: Redis, TTL ``sandbox_artifact_ttl_s``) owned by the
request's task, user and tenant, listed in ``ToolResultPayload.artifacts`` and named in the
text output, so the model can mention them.

Concurrency: the tool-service runtime's (``ToolService.concurrency``, rule T7) with
``sandbox_concurrency`` (N) as the isolation limit: a replica runs at most N programs at once and
its one consumer takes no further request while N run, so waiting requests stay in the topic. With
N = 1 (the default) an offset is committed after the run, and a run lost with the process is
redelivered; with N > 1 it is committed when the run starts (the orchestrator re-sends, rule A14).

Readiness: ``python -m ops.probe ready sandbox`` also reads the status key written by
``publish_status`` (field ``{host}:{pid}`` of the hash ``conduit:sandbox:statuses``: ``{"isolated", "unsafe", "reason", "at"}``)
and fails, printing the reason, when no replica can isolate code and unsafe mode is off.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time

from conduit.records import keys, sandboxstatus
from conduit.records.artifacts import ArtifactStore
from conduit.runtime.settings import Settings
from conduit.runtime.toolservice import ToolFailure, ToolOutput, ToolService
from contracts import topics
from contracts.events import ToolRequested
from contracts.tools import CodeExecArgs
from services.sandbox.isolation import Setup, off_message, sandbox_status
from services.sandbox.runner import Limits, RunResult, SandboxUnavailable, run_code

log = logging.getLogger("conduit.sandbox")

_NOTES = {
    "timeout": "stopped: wall-time limit of {timeout:g} s reached",
    "memory": "stopped: memory use passed {memory} MiB",
    "processes": "stopped: too many processes",
    "output_limit": "stopped: output passed {output} bytes",
    "cpu_time": "stopped: CPU-time limit reached",
    "cancelled": "stopped: the call was cancelled",
}


def format_output(result: RunResult, limits: Limits) -> str:
    """The text the model sees: stdout, a ``[stderr]`` section, ``[exit code N]`` and notes."""
    parts = [result.stdout.rstrip("\n") if result.stdout else "(no output)"]
    if result.stderr:
        parts.append("[stderr]\n" + result.stderr.rstrip("\n"))
    parts.append(f"[exit code {result.exit_code}, {result.duration_s:.2f} s]")
    if result.killed_reason:
        parts.append("[" + _NOTES.get(result.killed_reason, "stopped: {reason}").format(
            timeout=limits.timeout_s, memory=limits.memory_mb, output=limits.output_bytes,
            reason=result.killed_reason) + "]")
    if result.truncated:
        parts.append(f"[output cut at {limits.output_bytes} bytes]")
    if result.files_dropped:
        parts.append(f"[{result.files_dropped} output file(s) not kept: limits are {limits.max_files} files, "
                     f"{limits.max_file_bytes} bytes, and none when a limit stopped the run]")
    return "\n".join(parts)


def status_field() -> str:
    """This process's field in the statuses hash (``keys.SANDBOX_STATUSES``): ``{host}:{pid}``."""
    return sandboxstatus.field(socket.gethostname(), os.getpid())


async def publish_status(service: ToolService, setup: Setup | None = None) -> None:
    """Keep this replica's isolation status in Redis (``conduit.records.sandboxstatus``) until
    cancelled, then remove it; each write also drops the fields of processes long gone.

    Without isolation the reason is ``isolation.off_message``: why, and the command that turns it on.
    """
    ok, reason = (setup[0] is not None, setup[1]) if setup is not None else sandbox_status()
    reason = reason if ok else off_message(reason)
    try:
        while True:
            try:
                now = time.time()
                await service.redis.hset(keys.SANDBOX_STATUSES, status_field(),
                                         sandboxstatus.encode(ok, service.settings.sandbox.sandbox_unsafe, reason, now))
                if gone := sandboxstatus.stale(await service.redis.hgetall(keys.SANDBOX_STATUSES), now):
                    await service.redis.hdel(keys.SANDBOX_STATUSES, *gone)
            except Exception as exc:  # noqa: BLE001 - Redis down: readiness says so by itself
                log.warning("cannot write sandbox status: %r", exc)
            await asyncio.sleep(sandboxstatus.STATUS_TTL_S / 3)
    finally:
        with contextlib.suppress(Exception):  # a stopping replica: readers ignore it 30 s later anyway
            await asyncio.shield(service.redis.hdel(keys.SANDBOX_STATUSES, status_field()))


def build_service(settings: Settings, setup: Setup | None = None) -> ToolService:
    """A ``ToolService("sandbox", ...)`` with ``code_exec`` registered (not started).

    ``setup`` overrides the probed isolation (``isolation.discover()``), e.g. to test refusal.
    """
    limits = Limits.from_settings(settings.sandbox)
    service: ToolService

    async def code_exec(args: CodeExecArgs, request: ToolRequested) -> ToolOutput:
        try:
            result = await run_code(args.code, limits, allow_unsafe=settings.sandbox.sandbox_unsafe, setup=setup)
        except SandboxUnavailable as exc:
            raise ToolFailure("sandbox_unavailable", off_message(str(exc)),
                              hint="compute without code_exec", kind="forbidden") from exc
        store = ArtifactStore(service.redis, settings.sandbox.sandbox_artifact_ttl_s)
        refs = [(await store.save(name, data, task_id=request.task_id, tenant_id=request.tenant_id,
                                  user_id=request.user_id)).ref() for name, data in result.files]
        text = format_output(result, limits)
        if refs:
            text += "\n[files saved as artifacts: " + ", ".join(f"{r.name} ({r.media_type}, {r.bytes} bytes)"
                                                             for r in refs) + "]"
        return ToolOutput(output=text, artifacts=refs)

    service = ToolService("sandbox", topics.TOOL_REQUESTS_SANDBOX, topics.GROUP_SANDBOX, settings,
                          timeout_s=settings.sandbox.sandbox_timeout_s + 5)
    service.concurrency = settings.sandbox.sandbox_concurrency
    service.tool("code_exec", code_exec)  # type: ignore[arg-type]
    return service


def main(settings: Settings) -> None:
    """Probe the isolation, report it, then serve ``code_exec`` until SIGTERM/SIGINT (blocking)."""
    ok, reason = sandbox_status()
    if ok:
        log.info("sandbox ready: %s", reason)
    elif settings.sandbox.sandbox_unsafe:
        log.warning("SANDBOX UNSAFE: no isolation (%s); code runs as a plain subprocess", reason)
    else:
        log.error("sandbox unavailable, code_exec will be refused and not offered: %s", off_message(reason))
    service = build_service(settings)
    asyncio.run(service.serve(background=[lambda: publish_status(service)]))
