"""Redis round trips per question and per two-turn run, by process and by caller (issue 33, rules O10, O11).

    python -m bench.redis_trips [--n 30] [--idle-s 5]

``bench.e2e``'s stack and scripted model (a returning user: the bench's admin user has episodes, so the
memory recall runs), each service process counting its Redis requests by caller
(``bench/tripcount/sitecustomize.py``: one command, one pipeline or one script call is one round trip).
After a warm-up, an idle window gives each caller's background rate (sweeper, liveness, the gateway's
shared XREAD); then ``--n`` plain questions and ``--n`` ``kb:`` two-turn runs are asked one after the
other. Per run: the counted round trips minus the background rate over the run's time, divided by the
runs. Prints a Markdown table; writes nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import tempfile
import time
from pathlib import Path

from bench import e2e
from bench.common import machine
from testkit.scripted_model import ScriptedModel

HERE = Path(__file__).resolve().parent


def snapshot(folder: Path) -> dict[str, collections.Counter]:
    """Each service's counts so far: ``{service: Counter(caller -> round trips)}`` (replicas summed)."""
    out: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for f in folder.glob("*.json"):
        try:
            out[f.stem.rsplit("-", 1)[0]].update(json.loads(f.read_text()))
        except (OSError, ValueError):
            continue
    return out


def delta(after: dict, before: dict) -> dict[str, collections.Counter]:
    """``after`` minus ``before``, per service and caller."""
    return {s: collections.Counter({k: v - before.get(s, {}).get(k, 0) for k, v in c.items()}) for s, c in after.items()}


async def runs(stack, kind: str, n: int) -> float:
    """Ask ``n`` questions of ``kind`` (``plain`` or ``kb``) one after the other; seconds taken."""
    c = e2e.Lean(stack.gateway_url, stack.admin_key)
    t0 = time.perf_counter()
    for i in range(n):
        await c.post("/v1/ask", {"question": e2e.KB_QUESTION if kind == "kb" else f"trips {i}"})
    took = time.perf_counter() - t0
    await c.close()
    return took


def per_run(d: dict, idle: dict, idle_s: float, took_s: float, n: int) -> dict[str, dict[str, float]]:
    """Round trips per run by service and caller, the idle rate over ``took_s`` taken off."""
    out = {}
    for s, c in d.items():
        rows = {k: (v - idle.get(s, {}).get(k, 0) * took_s / idle_s) / n for k, v in c.items()}
        out[s] = {k: v for k, v in rows.items() if abs(v) >= 0.05}
    return out


async def measure(stack, folder: Path, n: int, idle_s: float) -> dict:
    for kind in ("plain", "kb"):
        await runs(stack, kind, 3)
    await asyncio.sleep(1.0)
    s0 = snapshot(folder)
    await asyncio.sleep(idle_s)
    s1 = snapshot(folder)
    idle = delta(s1, s0)
    out = {}
    for kind in ("plain", "kb"):
        took = await runs(stack, kind, n)
        await asyncio.sleep(0.5)  # the counts' writer runs every 0.2 s; the after-answer writes land
        s2 = snapshot(folder)
        out[kind] = per_run(delta(s2, s1), idle, idle_s, took + 0.5, n)
        s1 = snapshot(folder)
    return out


def table(result: dict) -> str:
    lines = ["| process | per plain question | per two-turn `kb:` run |", "| --- | --- | --- |"]
    services = sorted(set(result["plain"]) | set(result["kb"]))
    for s in services:
        a, b = sum(result["plain"].get(s, {}).values()), sum(result["kb"].get(s, {}).values())
        lines.append(f"| {s} | {a:.1f} | {b:.1f} |")
    lines += ["", "| caller (first two frames of Conduit's code) | per plain question | per two-turn run |",
              "| --- | --- | --- |"]
    callers = collections.Counter()
    for kind in ("plain", "kb"):
        for s, c in result[kind].items():
            for k, v in c.items():
                callers[(s, k)] += v
    for (s, k), _ in callers.most_common():
        a, b = result["plain"].get(s, {}).get(k, 0.0), result["kb"].get(s, {}).get(k, 0.0)
        if max(abs(a), abs(b)) >= 0.3:
            lines.append(f"| {s}: `{k}` | {a:.1f} | {b:.1f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=30, help="runs of each kind")
    ap.add_argument("--idle-s", type=float, default=5.0, help="seconds of the idle window (background rate)")
    a = ap.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="conduit-trips-"))
    os.environ["CONDUIT_BENCH_TRIPS_DIR"] = str(folder)
    os.environ["PYTHONPATH"] = os.pathsep.join([str(HERE / "tripcount"), os.environ.get("PYTHONPATH", "")])
    model = ScriptedModel(default=e2e.script).start()
    stack = e2e.start(Path(tempfile.mkdtemp(prefix="conduit-trips-stack-")), model)
    load = os.getloadavg()[0]
    try:
        result = asyncio.run(measure(stack, folder, a.n, a.idle_s))
    finally:
        stack.stop()
        model.stop()
    print(f"`python -m bench.redis_trips --n {a.n} --idle-s {a.idle_s:g}` · {machine()} · "
          f"{time.strftime('%H:%M', time.gmtime())} UTC · load (1 min) {load:.1f} → {os.getloadavg()[0]:.1f}\n")
    print(table(result))


if __name__ == "__main__":
    main()
