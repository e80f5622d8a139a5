"""The sandbox tool service: ``code_exec`` over Kafka.

Run as ``python -m conduit serve sandbox``. Consumes ``contracts.topics.TOOL_REQUESTS_SANDBOX``
in group ``GROUP_SANDBOX``; the per-call deadline is ``sandbox_timeout_s + 5`` seconds so
the runner's own wall-time limit fires first. The result is text in ``ToolOutput.output``
(stdout, then stderr, exit code and notes) and never evidence (seed 000 §7).

Without working bubblewrap every call fails with ``ToolFailure("sandbox_unavailable",
kind="forbidden")`` carrying the reason, unless ``CONDUIT_SANDBOX_UNSAFE=true``.
"""

from __future__ import annotations

import asyncio
import logging

from conduit.settings import Settings
from conduit.toolservice import ToolFailure, ToolOutput, ToolService
from contracts import topics
from contracts.events import ToolRequested
from contracts.tools import CodeExecArgs
from services.sandbox.isolation import Setup, sandbox_status
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
    return "\n".join(parts)


def build_service(settings: Settings, setup: Setup | None = None) -> ToolService:
    """A ``ToolService("sandbox", ...)`` with ``code_exec`` registered (not started).

    ``setup`` overrides the probed isolation (``isolation.discover()``), e.g. to test refusal.
    """
    limits = Limits.from_settings(settings)

    async def code_exec(args: CodeExecArgs, request: ToolRequested) -> ToolOutput:
        try:
            result = await run_code(args.code, limits, allow_unsafe=settings.sandbox_unsafe, setup=setup)
        except SandboxUnavailable as exc:
            raise ToolFailure("sandbox_unavailable", f"code execution is disabled: {exc}",
                              hint="compute without code_exec", kind="forbidden") from exc
        return ToolOutput(output=format_output(result, limits))

    service = ToolService("sandbox", topics.TOOL_REQUESTS_SANDBOX, topics.GROUP_SANDBOX, settings,
                          timeout_s=settings.sandbox_timeout_s + 5)
    service.tool("code_exec", code_exec)  # type: ignore[arg-type]
    return service


def main(settings: Settings) -> None:
    """Probe the isolation, report it, then serve ``code_exec`` until SIGTERM/SIGINT (blocking)."""
    ok, reason = sandbox_status()
    if ok:
        log.info("sandbox ready: %s", reason)
    elif settings.sandbox_unsafe:
        log.warning("SANDBOX UNSAFE: no isolation (%s); code runs as a plain subprocess", reason)
    else:
        log.error("sandbox unavailable, code_exec will be refused: %s", reason)
    asyncio.run(build_service(settings).serve())
