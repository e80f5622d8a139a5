"""Benchmark 4: throughput and scaling with a 1 s model.

    python -m bench.throughput [--sessions 50,200,500] [--replicas 1,2] [--seconds 20]

The embedded stack (tansu, redis-server, orchestrator, gateway as processes) with the
scripted model answering directly after ``--model-delay-s`` (default 1 s). For each
orchestrator replica count and each session count C: C closed-loop clients each
``POST /v1/tasks`` and follow the task's SSE stream to its terminal event, then ask
again, for ``--seconds``. Reported: completed tasks per second (completions inside the
window / window), task latency p50/p99, failures with their reasons, and the CPU each
process spent per completed task (``/proc/PID/stat``; "client + model" is this process:
the HTTP clients and the scripted model's thread). With 2 replicas a second
orchestrator process joins the consumer group (rebalance awaited before measuring).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
import uuid

import httpx

from bench.common import cpu_s, machine, pct, write_section
from bench.stackbench import model_stack, sse_events
from ops.services import ServiceProcess
from testkit.scripted_model import Turn

RETRIES = 5
"""Connection failures a session retries per task, like a real client (POST with the same
Idempotency-Key, the stream with Last-Event-ID); each retry is counted in ``retries``."""


async def load(base: str, key: str, sessions: int, seconds: float, question: str = "load {i}") -> dict:
    """Run ``sessions`` closed-loop clients for ``seconds``, session ``i`` asking ``question.format(i=i)``;
    return rate, latencies, failures and retries."""
    done: list[float] = []
    failed = [0]
    reasons: dict[str, int] = {}
    retries: dict[str, int] = {}
    stop_at = time.perf_counter() + seconds

    def count(table: dict[str, int], key: str) -> None:
        table[key] = table.get(key, 0) + 1

    async with httpx.AsyncClient(base_url=base, limits=httpx.Limits(max_connections=2 * sessions + 20),
                                 timeout=60, headers={"Authorization": f"Bearer {key}"}) as client:
        async def one_task(i: int) -> str | None:
            """One question to its terminal event type (None when the retries ran out)."""
            key, task_id, last = uuid.uuid4().hex, None, 0
            for _ in range(RETRIES + 1):
                try:
                    if task_id is None:
                        r = await client.post("/v1/tasks", json={"question": question.format(i=i)}, headers={"Idempotency-Key": key})
                        r.raise_for_status()
                        task_id = r.json()["task_id"]
                    async for ev, data in sse_events(client, "GET", f"/v1/tasks/{task_id}/events",
                                                     headers={"Last-Event-ID": str(last)}):
                        last += 1  # events are numbered 1, 2, ... without gaps
                        if ev in ("task.completed", "task.failed", "task.cancelled"):
                            if ev != "task.completed":
                                count(reasons, f"{ev}:{data.get('code', '')}")
                            return ev
                    count(reasons, "stream ended without a terminal event")
                    return None
                except httpx.TransportError as exc:
                    count(retries, type(exc).__name__)
                except httpx.HTTPStatusError as exc:
                    count(reasons, f"HTTP {exc.response.status_code}")
                    return None
            count(reasons, "retries exhausted")
            return None

        async def session(i: int) -> None:
            while time.perf_counter() < stop_at:
                t0 = time.perf_counter()
                end = await one_task(i)
                if end == "task.completed" and time.perf_counter() <= stop_at:
                    done.append(time.perf_counter() - t0)
                elif end != "task.completed":
                    failed[0] += 1

        await asyncio.gather(*(session(i) for i in range(sessions)))
    return {"rate": len(done) / seconds, "lat": done, "failed": failed[0], "reasons": reasons, "retries": retries}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", default="50,200,500")
    ap.add_argument("--replicas", default="1,2")
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--model-delay-s", type=float, default=1.0)
    a = ap.parse_args()
    rows = []
    with model_stack(Turn(content="吞吐基准的回答。", chunks=4, delay_s=a.model_delay_s)) as (stack, _):
        extra: list[ServiceProcess] = []
        try:
            for replicas in [int(x) for x in a.replicas.split(",")]:
                while len(extra) + 1 < replicas:
                    extra.append(ServiceProcess("orchestrator", stack.procs["orchestrator"].env, stack.log_dir).start())
                    time.sleep(25)  # tansu: a joining member and the rebalance take ~5-20 s
                asyncio.run(load(stack.gateway_url, stack.admin_key, 10, 5))  # warm up (and settle the rebalance)
                pids = {"orchestrator": [stack.procs["orchestrator"].proc.pid] + [p.proc.pid for p in extra],
                        "gateway": [stack.procs["gateway"].proc.pid],
                        **{name: [proc.pid] for name, proc in stack.infra_procs}}
                for c in [int(x) for x in a.sessions.split(",")]:
                    before = {k: sum(cpu_s(p) for p in v) for k, v in pids.items()}
                    me = time.process_time()
                    r = asyncio.run(load(stack.gateway_url, stack.admin_key, c, a.seconds))
                    n = max(1, len(r["lat"]))
                    per_task = {k: (sum(cpu_s(p) for p in v) - before[k]) * 1000 / n for k, v in pids.items()}
                    per_task["client + model"] = (time.process_time() - me) * 1000 / n
                    cpu = ", ".join(f"{k} {v:.1f}" for k, v in per_task.items())
                    ms = [x * 1000 for x in r["lat"]]
                    why = ", ".join(f"{k} ×{v}" for k, v in r["reasons"].items())
                    again = ", ".join(f"{k} ×{v}" for k, v in r["retries"].items()) or "0"
                    rows.append(f"| {replicas} | {c} | **{r['rate']:.1f}** | {pct(ms, 50):.0f} ms | {pct(ms, 99):.0f} ms | "
                                f"{r['failed']}{f' ({why})' if why else ''} | {again} | {cpu} |")
                    print(rows[-1], flush=True)
        finally:
            for p in extra:
                p.stop()
    table = "\n".join(rows)
    write_section("throughput", f"""
## 4. Throughput and scaling (model delay {a.model_delay_s:g} s)

Command: `python -m bench.throughput --sessions {a.sessions} --replicas {a.replicas} --seconds {a.seconds:g}` · machine: {machine()} ·
load average at the end {os.getloadavg()[0]:.1f}

Closed-loop sessions (ask, stream to the end, ask again) for {a.seconds:g} s per row through the embedded stack;
the scripted model answers directly after {a.model_delay_s:g} s. Ideal rate = sessions / (1 s + overhead).
Everything (broker, Redis, gateway, orchestrators, model, clients) shares the same 2 cores.

| orchestrators | sessions | completed tasks/s | task latency p50 | p99 | failed | client retries | CPU ms per completed task |
| --- | --- | --- | --- | --- | --- | --- | --- |
{table}
""")


if __name__ == "__main__":
    main()
