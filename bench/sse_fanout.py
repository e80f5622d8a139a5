"""Benchmark 3: SSE fan-out through one gateway process.

    python -m bench.sse_fanout [--tasks 1000] [--deltas 200] [--interval-ms 50]

A real gateway process (``conduit serve gateway``) over a private tansu broker and
redis-server. The bench creates ``--tasks`` tasks with ``POST /v1/tasks``, opens one
SSE stream per task (``GET /v1/tasks/{id}/events``, all concurrent), then plays the
orchestrator's part by appending ``--deltas`` ``answer.delta`` events per task to the
real task logs (``TaskEventLog.append``, one round across all tasks every
``--interval-ms``), each carrying its send time, then ``task.completed``.
Reported: events lost (expected − received, must be 0), order violations, delivery
latency (append → client read) p50/p99, and the gateway's RSS before, at peak and
after the streams end. Client and writer share this process and the 2 cores with
the gateway, so latency includes client-side queueing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

import httpx

from bench.common import infra, machine, pct, rss_mib, write_section
from conduit import infra as cinfra
from conduit.redis_client import make_redis
from conduit.services import ServiceProcess, settings_env
from conduit.taskstream import TaskEventLog
from contracts.stream import AnswerDelta, TaskCompleted


async def stream(client: httpx.AsyncClient, task_id: str, lat: list[float], got: dict[str, list[int]],
                 connected: asyncio.Event, counter: list[int], n: int, reconnects: list[int]) -> None:
    """Follow one task's stream like a browser EventSource: on a cut, reconnect with Last-Event-ID."""
    seqs = got.setdefault(task_id, [])
    event, last_id = None, 0
    while True:
        try:
            async with client.stream("GET", f"/v1/tasks/{task_id}/events", timeout=httpx.Timeout(None),
                                     headers={"Last-Event-ID": str(last_id)}) as resp:
                async for line in resp.aiter_lines():
                    if line.startswith("id: "):
                        last_id = int(line[4:])
                    elif line.startswith("event: "):
                        event = line[7:]
                    elif line.startswith("data: "):
                        if event == "task.accepted":
                            counter[0] += 1
                            if counter[0] == n:
                                connected.set()
                        elif event == "answer.delta":
                            j, sent = json.loads(line[6:])["text"].split("|")
                            lat.append(time.time() - float(sent))
                            seqs.append(int(j))
                        elif event == "task.completed":
                            return
        except httpx.HTTPError:
            pass
        reconnects[0] += 1
        await asyncio.sleep(1.0)  # the gateway's retry: hint


async def run(tasks: int, deltas: int, interval_s: float) -> dict:
    with infra() as settings:
        port = cinfra.free_port()
        env = settings_env(settings.bootstrap_servers(), settings.redis(), settings.data_dir,
                           CONDUIT_GATEWAY_PORT=str(port), CONDUIT_LOG_LEVEL="WARNING")
        gw = ServiceProcess("gateway", env, settings.data_dir / "logs").start()
        base = f"http://127.0.0.1:{port}"
        try:
            async with httpx.AsyncClient(base_url=base, limits=httpx.Limits(max_connections=tasks + 20),
                                         timeout=30) as client:
                for _ in range(300):
                    try:
                        if (await client.get("/readyz")).status_code == 200:
                            break
                    except httpx.HTTPError:
                        pass
                    await asyncio.sleep(0.2)
                sem = asyncio.Semaphore(32)

                async def create(i: int) -> str:
                    async with sem:
                        r = await client.post("/v1/tasks", json={"question": f"fan-out {i}"})
                        r.raise_for_status()
                        return r.json()["task_id"]

                ids = await asyncio.gather(*(create(i) for i in range(tasks)))
                rss = {"before": rss_mib(gw.proc.pid), "peak": 0.0}
                lat: list[float] = []
                got: dict[str, list[int]] = {}
                connected, counter, reconnects = asyncio.Event(), [0], [0]
                readers = [asyncio.create_task(stream(client, t, lat, got, connected, counter, tasks, reconnects))
                           for t in ids]
                await asyncio.wait_for(connected.wait(), 120)
                redis = make_redis(settings)
                log = TaskEventLog(redis, ttl_s=3600, maxlen=20000)

                async def sample() -> None:
                    while True:
                        rss["peak"] = max(rss["peak"], rss_mib(gw.proc.pid))
                        await asyncio.sleep(0.25)

                sampler = asyncio.create_task(sample())
                started = time.perf_counter()
                for j in range(deltas):
                    tick = time.perf_counter()
                    await asyncio.gather(*(log.append(t, AnswerDelta(text=f"{j}|{time.time()}")) for t in ids))
                    await asyncio.sleep(max(0.0, interval_s - (time.perf_counter() - tick)))
                await asyncio.gather(*(log.append(t, TaskCompleted(answer="done", latency_ms=1.0)) for t in ids))
                write_s = time.perf_counter() - started
                await asyncio.wait_for(asyncio.gather(*readers), 300)
                drain_s = time.perf_counter() - started
                sampler.cancel()
                await asyncio.sleep(5)
                rss["after"] = rss_mib(gw.proc.pid)
                await redis.aclose()
        finally:
            gw.stop()
    received = sum(len(v) for v in got.values())
    disorder = sum(1 for v in got.values() if v != list(range(deltas)))
    return {"lost": tasks * deltas - received, "received": received, "disorder": disorder, "lat": lat,
            "rss": rss, "write_s": write_s, "drain_s": drain_s, "reconnects": reconnects[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=1000)
    ap.add_argument("--deltas", type=int, default=200)
    ap.add_argument("--interval-ms", type=float, default=50.0, help="pause between delta rounds")
    a = ap.parse_args()
    r = asyncio.run(run(a.tasks, a.deltas, a.interval_ms / 1000))
    ms = [x * 1000 for x in r["lat"]]
    rate = r["received"] / r["drain_s"]
    write_section("sse_fanout", f"""
## 3. SSE fan-out through one gateway

Command: `python -m bench.sse_fanout --tasks {a.tasks} --deltas {a.deltas} --interval-ms {a.interval_ms:g}` · machine: {machine()}

{a.tasks} concurrent SSE streams × {a.deltas} `answer.delta` each ({a.tasks * a.deltas:,} events), appended to the real
task logs in rounds every {a.interval_ms:g} ms; one gateway process; client and writer in one other process on the same 2 cores.

| figure | value |
| --- | --- |
| events lost | **{r["lost"]}** (received {r["received"]:,}); streams out of order: {r["disorder"]}; client reconnects (Last-Event-ID): {r["reconnects"]} |
| delivery latency (append → client) | p50 {pct(ms, 50):.1f} ms, p99 {pct(ms, 99):.1f} ms, max {max(ms):.1f} ms |
| delivered rate | {rate:,.0f} events/s (writing took {r["write_s"]:.1f} s, all streams ended after {r["drain_s"]:.1f} s) |
| gateway RSS | before {r["rss"]["before"]:.0f} MiB, peak {r["rss"]["peak"]:.0f} MiB, 5 s after the streams ended {r["rss"]["after"]:.0f} MiB |
""")


if __name__ == "__main__":
    main()
