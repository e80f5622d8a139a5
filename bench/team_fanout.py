"""Benchmark: the parallel speed-up of team mode's fan-out (rules D2-D5, docs/agent-rules.md).

    python -m bench.team_fanout [--runs 5] [--workers 3] [--delay-s 1.0]

The embedded stack (tansu, redis-server, orchestrator, gateway as processes) with the scripted
OpenAI-compatible model. A team-mode question's supervisor delegates ``--workers`` sub-questions in
one reply; each worker's one model call answers after ``--delay-s`` seconds (no tool), then the
supervisor drafts and the finalizer rewrites (no delay). Measured on the parent's SSE stream:

- fan-out wall time: first ``worker.started`` to last ``worker.completed`` (parallel: about one
  delay; one after the other it would be ``workers`` × delay);
- overhead per child: a ``worker.completed``'s ``duration_ms`` minus the model's delay (the child's
  question on the bus, its checkpoint and lease, its model call set-up, its result back to the parent);
- the same with a model delay of 0 (the fan-out's own cost).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time

import httpx

from bench.common import machine, pct, write_section
from bench.stackbench import model_stack, sse_events
from testkit.scripted_model import Turn
from services.orchestrator.agent import finalizer, team


NOTE = (" With no model delay the three children's steps run on the one orchestrator process at the same moment "
        "(2 shared cores), so each waits for the others' CPU: the overhead per child is then larger than with a "
        "1 s delay, where their work falls into each other's waits.")
"""What the figures mean (appended to the report)."""


def brain(workers: int, delay: list[float]):
    """The scripted model: the supervisor delegates ``workers`` parts, a worker answers after
    ``delay[0]`` seconds, the draft and the finalizer's rewrite come at once."""
    def turn(body: dict) -> Turn:
        system = body["messages"][0]["content"]
        tools_seen = any(m["role"] == "tool" for m in body["messages"])
        if system.startswith(finalizer.FINALIZER_PROMPT[:20]):
            return Turn(content="汇总完毕。")
        if system.startswith(team.SUPERVISOR_PROMPT[:20]):
            if tools_seen:
                return Turn(content="汇总完毕。")
            return Turn(tool_calls=[{"name": "delegate", "arguments": {
                "worker": "kb_researcher", "task": f"子问题 {i}", "reason": "并行研究"}} for i in range(workers)])
        return Turn(content="子问题已回答。", delay_s=delay[0])
    return turn


async def one(client: httpx.AsyncClient, base: str, key: str) -> tuple[float, list[float], list[float]]:
    """One team question: ``(fan-out wall seconds, each child's duration seconds as the parent saw it,
    each child's own run seconds from its record)``."""
    started: list[float] = []
    completed: list[float] = []
    durations: list[float] = []
    children: list[str] = []
    async for kind, data in sse_events(client, "POST", f"{base}/v1/ask", json={"question": "并行问题", "mode": "team"},
                                       headers={"Authorization": f"Bearer {key}"}):
        now = time.perf_counter()
        if kind == "worker.started":
            started.append(now)
            children.append(data["task_id"])
        elif kind == "worker.completed":
            completed.append(now)
            durations.append(data["duration_ms"] / 1000)
        elif kind in ("task.completed", "task.failed", "task.cancelled"):
            break
    own = [(await client.get(f"{base}/v1/tasks/{c}", headers={"Authorization": f"Bearer {key}"})).json()["latency_ms"] / 1000
           for c in children]
    return max(completed) - min(started), durations, own


def report(rows: list, runs: int, load: tuple[float, ...]) -> str:
    """The Markdown section of ``docs/benchmarks.md``."""
    lines = ["## Team mode: parallel fan-out (`bench/team_fanout.py`)", "",
             f"`python -m bench.team_fanout --runs {runs}` on {machine()}; load average before: "
             f"{' '.join(f'{x:.2f}' for x in load)}.", "",
             "| model delay per worker | workers | fan-out wall p50 (max) | serial would be | overhead per child p50 (max) "
             "| of it: question hop and the child's run, p50 |",
             "| --- | --- | --- | --- | --- | --- |"]
    for delay, workers, walls, durs, owns in rows:
        over = [d - delay for ds in durs for d in ds]
        inside = [o - delay for os_ in owns for o in os_]
        lines.append(f"| {delay:.1f} s | {workers} | {pct(walls, 50):.2f} s ({max(walls):.2f} s) | {workers * delay:.1f} s "
                     f"| {pct(over, 50) * 1000:.0f} ms ({max(over) * 1000:.0f} ms) | {pct(inside, 50) * 1000:.0f} ms |")
    lines += ["", "Wall time is first `worker.started` to last `worker.completed` on the parent's stream; a child's "
              "overhead is its `worker.completed.duration_ms` minus the model's delay: its question on the bus, its "
              "checkpoint and lease, the model call's set-up and its result back through the bus to the parent. "
              f"Mean wall at {rows[0][0]:.1f} s delay: {statistics.fmean(rows[0][2]):.2f} s." + NOTE]
    return "\n".join(lines)


async def measure(base: str, key: str, runs: int, workers: int, delays: list[float], delay: list[float]) -> list:
    """For each model delay in ``delays`` (set in ``delay[0]``, which the model reads): a warm-up,
    then ``runs`` team questions; rows ``(delay, workers, walls, durations)``."""
    rows = []
    async with httpx.AsyncClient() as client:
        for d in delays:
            delay[0] = d
            await one(client, base, key)  # warm-up
            walls, durs, owns = [], [], []
            for _ in range(runs):
                wall, dur, own = await one(client, base, key)
                walls.append(wall)
                durs.append(dur)
                owns.append(own)
            rows.append((d, workers, walls, durs, owns))
    return rows


def run(runs: int, workers: int, delay_s: float) -> None:
    """Start the stack, measure, write the report's ``team-fanout`` section."""
    delay = [delay_s]
    load = os.getloadavg()
    with model_stack(brain(workers, delay)) as (stack, _model):  # type: ignore[arg-type]
        rows = asyncio.run(measure(stack.gateway_url, stack.admin_key or "", runs, workers, [delay_s, 0.0], delay))
    write_section("team-fanout", report(rows, runs, load))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--delay-s", type=float, default=1.0)
    a = parser.parse_args()
    run(a.runs, a.workers, a.delay_s)


if __name__ == "__main__":
    main()
