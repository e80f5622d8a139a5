"""Shared helpers of the benchmarks: private infrastructure, percentiles, the machine, the report.

``infra()`` starts a private tansu broker and redis-server on free ports (the
same binaries the embedded stack and tests use) and yields ``Settings`` for them.
``write_section(name, markdown)`` replaces the section between
``<!-- bench:NAME -->`` markers in ``docs/benchmarks.md`` (other sections, e.g.
the retrieval engineer's, are left alone).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import platform
import re
import statistics
import tempfile
from collections.abc import Iterator
from pathlib import Path

from ops import infra as cinfra
from conduit.runtime.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
REPORT = ROOT / "docs" / "benchmarks.md"


async def read_chunk(reader: asyncio.StreamReader) -> bytes:
    """The next chunk of an HTTP/1.1 chunked body (``b""`` for the terminating zero-size chunk).

    The benches' lean clients read SSE responses with it, so their own cost stays out of the figures.
    """
    size = int((await reader.readuntil(b"\r\n")).split(b";", 1)[0], 16)
    return (await reader.readexactly(size + 2))[:-2]


def pct(values: list[float], p: float) -> float:
    """The ``p``-th percentile (0..100, nearest rank) of ``values``; NaN when empty."""
    if not values:
        return float("nan")
    s = sorted(values)
    k = max(0, min(len(s) - 1, round(p / 100 * (len(s) - 1))))
    return s[k]


def summary_ms(values_s: list[float]) -> str:
    """``p50 … ms, p99 … ms, mean … ms (n=…)`` of durations given in seconds."""
    ms = [v * 1000 for v in values_s]
    return (f"p50 {pct(ms, 50):.2f} ms, p99 {pct(ms, 99):.2f} ms, mean {statistics.fmean(ms):.2f} ms (n={len(ms)})"
            if ms else "no samples")


def machine() -> str:
    """One line describing this machine: CPUs, RAM, CPU model, OS, Python."""
    model = "unknown CPU"
    with contextlib.suppress(OSError):
        m = re.search(r"model name\s*:\s*(.+)", Path("/proc/cpuinfo").read_text())
        model = m.group(1).strip() if m else model
    ram = "?"
    with contextlib.suppress(OSError):
        kb = int(re.search(r"MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text()).group(1))
        ram = f"{kb / 1024 / 1024:.1f} GiB"
    return (f"{os.cpu_count()} CPUs (nproc), {ram} RAM, {model}, {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}")


def rss_mib(pid: int) -> float:
    """Resident memory of process ``pid`` in MiB (``VmRSS``)."""
    m = re.search(r"VmRSS:\s+(\d+)", Path(f"/proc/{pid}/status").read_text())
    return int(m.group(1)) / 1024 if m else float("nan")


def cpu_s(pid: int) -> float:
    """CPU time (user + system, seconds) process ``pid`` has used so far (``/proc/PID/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def infra_procs(**overrides: object) -> Iterator[tuple[Settings, dict[str, int]]]:
    """A private tansu broker and redis-server: yields ``(settings, {"tansu": pid, "redis": pid})``."""
    root = Path(tempfile.mkdtemp(prefix="conduit-bench-"))
    kport, rport = cinfra.free_port(), cinfra.free_port()
    tansu = cinfra.start_tansu(kport, root / "tansu.log")
    redis = cinfra.start_redis(rport, root / "redis", root / "redis.log", persist=False)
    try:
        yield (Settings(kafka_bootstrap_servers=f"127.0.0.1:{kport}", redis_url=f"redis://127.0.0.1:{rport}/0",
                        data_dir=root / "data", **overrides), {"tansu": tansu.pid, "redis": redis.pid})
    finally:
        cinfra.stop(tansu)
        cinfra.stop(redis)


@contextlib.contextmanager
def infra(**overrides: object) -> Iterator[Settings]:
    """A private tansu broker and redis-server for one benchmark run (see ``infra_procs``)."""
    with infra_procs(**overrides) as (settings, _):
        yield settings


def write_section(name: str, markdown: str) -> None:
    """Replace (or append) the ``name`` section of ``docs/benchmarks.md``."""
    start, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    text = REPORT.read_text(encoding="utf-8") if REPORT.exists() else "# Benchmarks\n\n"
    block = f"{start}\n{markdown.strip()}\n{end}"
    if start in text and end in text:
        text = text[: text.index(start)] + block + text[text.index(end) + len(end):]
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    REPORT.write_text(text, encoding="utf-8")
    print(block)
