"""Where one throughput row's orchestrator time and Redis commands go (for A/B runs of two checkouts).

    .venv/bin/python bench/orchestrator_profile.py --label new [--sessions 200] [--seconds 20] [--py-spy PATH]

Starts the embedded stack with the throughput bench's scripted model (1 s, direct answer), warms up with
10 sessions, resets Redis' ``INFO commandstats``, then runs ``--sessions`` closed-loop sessions for
``--seconds`` while ``py-spy record`` (not a project dependency: give its path; skipped without it)
samples the orchestrator at 50 Hz. Prints the completed tasks/s, Redis commands per completed task and
py-spy samples per completed task (a CPU proxy); the raw profile goes to ``/tmp/orchestrator.LABEL.txt``.
The script imports ``bench`` and ``conduit`` from the current directory's checkout, so running this file
from another checkout's directory (with that checkout's ``.venv``) measures that checkout.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path.cwd()))

import redis  # noqa: E402

from bench.stackbench import model_stack  # noqa: E402
from bench.throughput import load  # noqa: E402
from testkit.scripted_model import Turn  # noqa: E402


def samples(path: Path) -> int:
    """Total samples in a py-spy ``raw`` (collapsed stacks) file."""
    return sum(int(line.rpartition(" ")[2]) for line in path.read_text().splitlines() if line.strip())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--label", required=True)
    ap.add_argument("--sessions", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--py-spy", default=None, help="path of a py-spy binary (optional)")
    a = ap.parse_args()
    out = Path(f"/tmp/orchestrator.{a.label}.txt")
    with model_stack(Turn(content="吞吐基准的回答。", chunks=4, delay_s=1.0)) as (stack, _):
        asyncio.run(load(stack.gateway_url, 10, 5))
        r = redis.Redis(port=stack.settings.embedded_redis_port)
        r.config_resetstat()
        spy = None
        if a.py_spy:
            spy = subprocess.Popen([a.py_spy, "record", "-p", str(stack.procs["orchestrator"].proc.pid),
                                    "-d", str(int(a.seconds)), "-r", "50", "-f", "raw", "-o", str(out), "--nonblocking"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        res = asyncio.run(load(stack.gateway_url, a.sessions, a.seconds))
        done = max(1, len(res["lat"]))
        print(f"{a.label}: {res['rate']:.1f} tasks/s, {len(res['lat'])} completed")
        stats = r.info("commandstats")
        for name, v in sorted(stats.items(), key=lambda kv: -kv[1]["calls"])[:10]:
            print(f"  {name.removeprefix('cmdstat_').upper()}: {v['calls'] / done:.1f} per completed task")
        if spy is not None:
            spy.wait()
            print(f"  py-spy samples per completed task: {samples(out) / done:.2f} (raw profile {out})")


if __name__ == "__main__":
    main()
