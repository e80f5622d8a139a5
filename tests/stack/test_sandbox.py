"""Sandbox service: real bubblewrap runs, limits, refusal without isolation, one bus round trip.

Tests that need bubblewrap skip with the probe's reason when it cannot run here
(install: ``apt-get install -y bubblewrap``).
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
import uuid
from pathlib import Path

import pytest
from aiokafka.partitioner import murmur2

from conduit.runtime import bus
from testkit.bus import await_tool_result
from testkit.waits import until
from ops.services import ServiceProcess, settings_env
from conduit.runtime.settings import Settings
from contracts import topics
from contracts.events import ToolRequested, ToolRequestPayload
from services.sandbox import isolation, watchdog
from services.sandbox.main import build_service, format_output
from services.sandbox.runner import Limits, SandboxUnavailable, run_code

PROJECT = Path(__file__).resolve().parents[2]
OK, WHY = isolation.sandbox_status()
needs_bwrap = pytest.mark.skipif(not OK, reason=f"sandbox isolation unavailable: {WHY}")
LIMITS = Limits(timeout_s=5.0, memory_mb=512, output_bytes=64_000)


def _request(code: str, task_id: str | None = None) -> ToolRequested:
    call_id, task_id = uuid.uuid4().hex, task_id or f"t-{uuid.uuid4().hex[:8]}"
    return ToolRequested(task_id=task_id, session_id="s1", payload=ToolRequestPayload(
        call_id=call_id, tool="code_exec", arguments={"code": code, "reason": "test"}, step=1,
        idempotency_key=f"{task_id}:1:{call_id}"))


@needs_bwrap
async def test_print_and_numpy() -> None:
    result = await run_code("import numpy as np\nprint('hello', int(np.arange(10).sum()))", LIMITS)
    assert (result.stdout, result.exit_code, result.killed_reason) == ("hello 45\n", 0, None), result


@needs_bwrap
async def test_network_is_unreachable() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    code = f"""
import socket
for target in [("127.0.0.1", {port}), ("1.1.1.1", 53), ("10.0.0.1", 80)]:
    try:
        socket.create_connection(target, timeout=1).close()
        print("CONNECTED", target)
    except OSError as exc:
        print("blocked", type(exc).__name__)
"""
    try:
        result = await run_code(code, LIMITS)
        assert "CONNECTED" not in result.stdout and result.stdout.count("blocked") == 3, result
        with pytest.raises(BlockingIOError):
            listener.accept()  # nobody reached the host's listener
    finally:
        listener.close()


@needs_bwrap
async def test_infinite_loop_stopped_at_wall_time() -> None:
    started = time.monotonic()
    result = await run_code("while True:\n    pass", Limits(timeout_s=1.5, cpu_s=30))
    assert result.timed_out and result.killed_reason == "timeout" and result.exit_code != 0
    assert time.monotonic() - started < 4.0


@needs_bwrap
async def test_cpu_limit_kills_busy_loop() -> None:
    result = await run_code("while True:\n    pass", Limits(timeout_s=8.0, cpu_s=1))
    # 1 CPU second can take several wall seconds on a loaded box: the claim is that the CPU limit,
    # not the 8 s wall-time limit, stopped it
    assert result.killed_reason == "cpu_time" and not result.timed_out and result.duration_s < 8.0, result


@needs_bwrap
async def test_100_mb_of_output_is_truncated() -> None:
    code = "import sys\nfor _ in range(1000):\n    sys.stdout.write('x' * 100_000)\nprint('END')"
    started = time.monotonic()
    result = await run_code(code, LIMITS)
    assert result.truncated and result.killed_reason == "output_limit"
    assert len(result.stdout) == LIMITS.output_bytes and "END" not in result.stdout
    assert time.monotonic() - started < 5.0
    assert "[output cut at 64000 bytes]" in format_output(result, LIMITS)


@needs_bwrap
async def test_memory_watchdog_kills_big_allocations() -> None:
    result = await run_code("x = bytearray(1_500_000_000)\nprint('survived')", Limits(timeout_s=10, memory_mb=200))
    assert result.killed_reason == "memory" and "survived" not in result.stdout, result


@needs_bwrap
async def test_secret_files_and_project_are_invisible() -> None:
    paths = ["/etc/shadow", "/etc/passwd", str(PROJECT / "pyproject.toml"), str(PROJECT / ".env"),
             str(PROJECT / "conduit" / "settings.py"), str(PROJECT / "conduit"), str(Path.home() / ".bashrc"),
             "/home", "/sys/kernel"]
    code = f"""
import os
for p in {paths!r}:
    try:
        print(p, "LEAK", os.listdir(p)[:3] if os.path.isdir(p) else open(p).read(20))
    except OSError as exc:
        print(p, "refused", type(exc).__name__)
try:
    import conduit
    print("LEAK conduit importable")
except ImportError:
    print("conduit not importable")
"""
    result = await run_code(code, LIMITS)
    assert "LEAK" not in result.stdout and result.stdout.count("refused") == len(paths), result.stdout


@needs_bwrap
async def test_system_is_read_only_and_tmp_is_writable() -> None:
    code = """
for p in ["/usr/evil", "/opt/site/evil.py", "/sandbox/main.py", "/evil", "/dev/evil", "/tmp/ok"]:
    try:
        open(p, "w").write("x")
        print(p, "written")
    except OSError as exc:
        print(p, "refused")
"""
    result = await run_code(code, LIMITS)
    assert result.stdout.count("refused") == 5 and "/tmp/ok written" in result.stdout, result.stdout


@needs_bwrap
async def test_environment_has_no_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SECRET", "hunter2-fake-secret")
    monkeypatch.setenv("CONDUIT_OPENAI_API_KEY", "sk-fake")
    code = "import os\nprint(sorted(os.environ.items()))\nprint(open('/proc/1/environ').read())"
    result = await run_code(code, LIMITS)
    assert "hunter2" not in result.stdout and "sk-fake" not in result.stdout and "SECRET" not in result.stdout
    assert "HOME" in result.stdout


@needs_bwrap
async def test_fork_bomb_is_contained_and_cleaned_up() -> None:
    code = "import os, time\nfor _ in range(200):\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    code += "time.sleep(30)"
    result = await run_code(code, Limits(timeout_s=2.0, max_procs=16))
    assert result.exit_code != 0 and result.duration_s < 4.0
    assert await _gone(isolation.CODE_PATH), "fork bomb processes were left behind"


async def _gone(path: str, timeout_s: float = 10.0) -> bool:
    """Wait until no process started as ``path`` is left (killed trees are reaped by init a moment later)."""
    return await until(lambda: not [p for p in watchdog.process_tree(1) if _cmdline(p).endswith(path)], timeout_s)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""


async def test_refuses_without_isolation_unless_unsafe(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = (None, "bubblewrap is not installed (test)")
    assert isolation.find_setup(bwrap="/nonexistent/bwrap")[0] is None
    with pytest.raises(SandboxUnavailable):
        await run_code("print(1)", LIMITS, setup=missing)
    payload = await build_service(settings, setup=missing).execute(_request("print(1)"))
    assert payload.outcome == "error" and payload.error is not None
    assert (payload.error.error_code, payload.error.kind) == ("sandbox_unavailable", "forbidden")
    assert payload.error.message == isolation.off_message("bubblewrap is not installed (test)")
    assert isolation.enable_command() in payload.error.message and "code execution is off" in payload.error.message
    monkeypatch.setenv("SECRET", "hunter2-fake-secret")
    unsafe = await run_code("import os\nprint(6 * 7, sorted(os.environ))", LIMITS, setup=missing, allow_unsafe=True)
    assert unsafe.stdout.startswith("42") and "SECRET" not in unsafe.stdout


@needs_bwrap
async def test_service_keeps_serving_after_each_bomb(settings: Settings) -> None:
    """Fork bomb, memory bomb and infinite loop through the real service code path, then a normal run."""
    service = build_service(settings.changed({"sandbox_timeout_s": 3.0, "sandbox_memory_mb": 200}))
    bombs = {
        "fork": ("import os, time\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        time.sleep(0.01)",
                 "stopped:"),
        "memory": ("chunks = []\nwhile True:\n    chunks.append(bytearray(50_000_000))", "memory use passed 200 MiB"),
        "loop": ("while True:\n    pass", "stopped:"),
    }
    try:
        for name, (code, note) in bombs.items():
            started = time.monotonic()
            payload = await service.execute(_request(code))
            assert payload.outcome == "ok" and note in (payload.output or ""), (name, payload)
            assert time.monotonic() - started < 7.0, name
        after = await service.execute(_request("print(sum(range(10)))"))
        assert after.outcome == "ok" and (after.output or "").startswith("45\n"), after
    finally:
        await service.redis.aclose()
    assert await _gone(isolation.LAUNCHER_PATH), "sandbox launchers were left behind"


@needs_bwrap
async def test_service_environment_is_unreadable(monkeypatch: pytest.MonkeyPatch) -> None:
    """The service's own /proc entry (host pid) and every environ the sandbox can see hold no secret."""
    monkeypatch.setenv("CONDUIT_OPENAI_API_KEY", "sk-service-secret")
    code = f"""
import os
try:
    print("host pid", open("/proc/{os.getpid()}/environ", "rb").read()[:200])
except OSError as exc:
    print("host pid refused", type(exc).__name__)
for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
    try:
        print(pid, open(f"/proc/{{pid}}/environ", "rb").read())
    except OSError as exc:
        print(pid, "refused")
"""
    result = await run_code(code, LIMITS)
    assert result.exit_code == 0 and "sk-service-secret" not in result.stdout + result.stderr, result
    assert "OPENAI" not in result.stdout


async def test_readiness_reports_why_isolation_is_missing(infra_stack, settings: Settings) -> None:
    """The probe's sandbox readiness reads the status key: refused (with bubblewrap's reason) unless unsafe."""
    from conduit.runtime import liveness
    from ops import probe
    from conduit.records import keys
    from services.sandbox.main import publish_status, status_field

    url = infra_stack.redis_url.rsplit("/", 1)[0] + "/7"  # a database of its own: no real replica's keys
    missing = (None, "bubblewrap is not installed (test)")
    for unsafe, expected in [(False, 1), (True, 0)]:
        service = build_service(settings.changed({"redis_url": url, "sandbox_unsafe": unsafe}), setup=missing)
        await service.redis.flushdb()
        await service.redis.set(liveness.alive_key("sandbox"), "1", ex=10)
        status = asyncio.create_task(publish_status(service, setup=missing))
        try:
            for _ in range(50):
                if await service.redis.hexists(keys.SANDBOX_STATUSES, status_field()):
                    break
                await asyncio.sleep(0.05)
            code, reason = await asyncio.to_thread(probe.check, "ready", "sandbox", url)
        finally:
            status.cancel()
            await service.redis.flushdb()
            await service.redis.aclose()
        assert code == expected and "not installed (test)" in reason, (unsafe, reason)
        if not unsafe:  # the same line as the tool error and `bootstrap.py demo`
            assert reason == "sandbox_not_isolated: " + isolation.off_message("bubblewrap is not installed (test)")
        else:
            assert "UNSAFE" in reason


def _task_id_on(partition: int, partitions: int) -> str:
    """A task id whose Kafka key lands on ``partition`` (the producer's murmur2 partitioner)."""
    while True:
        task_id = f"t-{uuid.uuid4().hex[:8]}"
        if (murmur2(task_id.encode()) & 0x7FFFFFFF) % partitions == partition:
            return task_id


@needs_bwrap
async def test_concurrency_limit_runs_n_at_once_in_task_order(settings: Settings) -> None:
    """sandbox_concurrency=2 (rule T7): two programs run at the same time, never three; two requests
    of the same task run one after the other, in order. Overlap is read from the times the programs print."""
    settings = settings.changed({"sandbox_concurrency": 2})
    service = build_service(settings)
    assert service.concurrency == 2
    await bus.ensure_topics(settings.bus)
    service.subscribe(group_id=f"{service.group_id}-conc-{uuid.uuid4().hex[:6]}")
    await service.broker.start()
    try:
        (subscriber,) = service.broker.subscribers
        assert await until(lambda: bool(subscriber.consumer.assignment()), 30)  # joined (joins take seconds)
        code = "import time\nprint(time.time())\ntime.sleep(1.5)\nprint(time.time())"
        first_task = f"t-{uuid.uuid4().hex[:8]}"
        requests = [_request(code, t) for t in (first_task, f"t-{uuid.uuid4().hex[:8]}", f"t-{uuid.uuid4().hex[:8]}",
                                               first_task)]
        for request in requests:
            await bus.publish(service.broker, topics.TOOL_REQUESTS_SANDBOX, request)
        spans = []
        for request in requests:
            result = await await_tool_result(settings.bus.bootstrap_servers(), request.payload.call_id, timeout_s=60)
            assert result.payload.outcome == "ok", result.payload
            start, end = (float(x) for x in (result.payload.output or "").splitlines()[:2])
            spans.append((start, end))
    finally:
        await service.broker.stop()
        await service.redis.aclose()
    at_once = max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans)
    assert at_once == 2, spans  # 1 would mean no concurrency, 3 a broken limit
    assert spans[3][0] >= spans[0][1], spans  # the task's second request ran after its first


@needs_bwrap
async def test_bus_round_trip(settings: Settings, tmp_path: Path) -> None:
    await bus.ensure_topics(settings.bus)
    env = settings_env(settings.bus.bootstrap_servers(), settings.store.url(), tmp_path / "data", CONDUIT_LOG_JSON="false")
    service = ServiceProcess("sandbox", env, tmp_path / "logs").start()
    broker = bus.make_broker(settings, client_id="test-sandbox")
    await broker.start()
    try:
        request = _request("import numpy as np\nprint(int(np.prod([6, 7])))")
        await bus.publish(broker, topics.TOOL_REQUESTS_SANDBOX, request)
        try:
            result = await await_tool_result(settings.bus.bootstrap_servers(), request.payload.call_id)
        except AssertionError:
            raise AssertionError(service.log_path.read_text()[-3000:]) from None
        assert result.payload.outcome == "ok", result.payload.error
        assert result.payload.output is not None and result.payload.output.startswith("42\n")
        assert "[exit code 0" in result.payload.output and result.payload.evidence == []
    finally:
        await broker.stop()
        service.stop()
