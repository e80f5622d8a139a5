"""The embedded stack's memory, per process, at idle and under the 200-session closed-loop run (issue 33).

    python -m bench.stack_memory [--sessions 200] [--seconds 20] [--model-delay-s 1] [--no-write]

Starts the embedded stack with every service over ``bench.e2e``'s three real laws and its scripted model (the
retriever with its default two stages, so the e5 embedder and the e5 law index are loaded), warms up with 10
two-turn runs, waits 10 s and reads each process's resident memory at idle; then runs ``--sessions`` closed-loop
sessions of two-turn runs (a ``kb_search`` call, then the answer, each after ``--model-delay-s``) for
``--seconds`` after their warm-up (``bench.e2e.closed_loop``) while a sampler reads every process's ``VmRSS``
and ``Pss`` (``/proc/PID/smaps_rollup``) every 0.5 s. Reports, per process (MiB): RSS and PSS at idle, the
peak RSS (``VmHWM``: the kernel's own high-water mark over the process's life, start included), the peak of the
sampled PSS, and the peak of the *sum* over processes of the sampled RSS and PSS (what the machine held at
one moment; the sum of the per-process peaks is an upper bound of it).

RSS counts shared pages (libpython, numpy's libraries, the page cache of mapped files) once per process;
PSS divides each shared page among the processes mapping it, so the sum of PSS is what the stack costs the
machine. The issue-33 aim is on the peak RSS (docs/benchmarks.md, "Issue 33: the stack's memory").
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import tempfile
import time
from pathlib import Path

from bench import e2e
from bench.common import machine, write_section
from bench.e2e import ConduitRun, closed_loop, peak_rss_mib, pids_of, script, start
from testkit.scripted_model import ScriptedModel

SAMPLE_S = 0.5
"""Seconds between two samples of every process's memory under load."""


def rss_pss_mib(pid: int) -> tuple[float, float]:
    """``(VmRSS, Pss)`` of ``pid`` in MiB (``/proc/PID/status``, ``/proc/PID/smaps_rollup``); NaN when gone."""
    try:
        rss = re.search(r"VmRSS:\s+(\d+)", Path(f"/proc/{pid}/status").read_text())
        pss = re.search(r"^Pss:\s+(\d+)", Path(f"/proc/{pid}/smaps_rollup").read_text(), re.M)
    except OSError:
        return float("nan"), float("nan")
    return (int(rss.group(1)) / 1024 if rss else float("nan"), int(pss.group(1)) / 1024 if pss else float("nan"))


class Sampler:
    """Samples every process of ``pids`` every ``SAMPLE_S`` until ``stop``; keeps per-process peaks of RSS and
    PSS and the peaks of their sums over processes (MiB)."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self.rss = dict.fromkeys(pids, 0.0)
        self.pss = dict.fromkeys(pids, 0.0)
        self.sum_rss = self.sum_pss = 0.0
        self._stop = asyncio.Event()

    def sample(self) -> None:
        """One reading of every process."""
        now = {k: rss_pss_mib(p) for k, p in self.pids.items()}
        for k, (rss, pss) in now.items():
            self.rss[k], self.pss[k] = max(self.rss[k], rss), max(self.pss[k], pss)
        self.sum_rss = max(self.sum_rss, sum(r for r, _ in now.values()))
        self.sum_pss = max(self.sum_pss, sum(p for _, p in now.values()))

    async def run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            await asyncio.sleep(SAMPLE_S)

    def stop(self) -> None:
        self._stop.set()


async def measure(a: argparse.Namespace, stack, model: ScriptedModel) -> dict:
    """Idle readings after a warm-up, then the closed-loop run with the sampler; returns every figure."""
    pids = pids_of(stack)
    warm = ConduitRun(stack)
    for _ in range(10):
        await warm.go()
    await warm.close()
    await asyncio.sleep(10)
    idle = {k: rss_pss_mib(p) for k, p in pids.items()}
    e2e.DELAY["s"] = a.model_delay_s
    sampler = Sampler(pids)
    task = asyncio.create_task(sampler.run())
    load0 = os.getloadavg()
    runs, _, cpu = await closed_loop(lambda: ConduitRun(stack), a.sessions, a.seconds, pids)
    sampler.stop()
    await task
    sampler.sample()
    return {"pids": pids, "idle": idle, "hwm": {k: peak_rss_mib(p) for k, p in pids.items()},
            "sampler": sampler, "runs": runs, "cpu": cpu, "load": (load0[0], os.getloadavg()[0])}


def report(a: argparse.Namespace, r: dict, started: str) -> str:
    s: Sampler = r["sampler"]
    cpu = ", ".join(f"{k} {v / max(r['runs'], 1) * 1000:.1f}" for k, v in r["cpu"].items() if v > 0.05)
    rows = [f"| {k} | {r['idle'][k][0]:.0f} | {r['idle'][k][1]:.0f} | **{r['hwm'][k]:.0f}** | {s.pss[k]:.0f} |"
            for k in r["pids"]]
    total = (f"| **all** | {sum(v[0] for v in r['idle'].values()):.0f} | {sum(v[1] for v in r['idle'].values()):.0f} "
             f"| **{sum(r['hwm'].values()):.0f}** (sum of peaks); {s.sum_rss:.0f} (peak of the sum) "
             f"| {s.sum_pss:.0f} (peak of the sum) |")
    return f"""
Command: `python -m bench.stack_memory --sessions {a.sessions} --seconds {a.seconds:g} --model-delay-s {a.model_delay_s:g}`
· run {started} UTC · machine: {machine()} · load average (1 min) {r['load'][0]:.1f} → {r['load'][1]:.1f} during the run
· {r['runs']} two-turn runs finished in the {a.seconds:g} s window; CPU ms per run: {cpu}

| process | RSS idle | PSS idle | peak RSS (VmHWM) | peak PSS (sampled) |
| --- | --- | --- | --- | --- |
{chr(10).join(rows)}
{total}
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=200, help="closed-loop sessions")
    ap.add_argument("--seconds", type=float, default=20.0, help="seconds of the measured window")
    ap.add_argument("--model-delay-s", type=float, default=1.0, help="the scripted model's delay before each reply")
    ap.add_argument("--no-write", action="store_true", help="print only, leave docs/benchmarks.md alone")
    a = ap.parse_args()
    started = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    model = ScriptedModel(default=script).start()  # type: ignore[arg-type]  # a Turn source may be a function
    stack = start(Path(tempfile.mkdtemp(prefix="conduit-mem-")), model)
    try:
        r = asyncio.run(measure(a, stack, model))
    finally:
        stack.stop()
        model.stop()
    text = report(a, r, started)
    print(text) if a.no_write else write_section("stack_memory", text)


if __name__ == "__main__":
    main()
