"""Benchmark 3: SSE fan-out through one gateway process.

    python -m bench.sse_fanout [--tasks 1000] [--deltas 200] [--interval-ms 100] [--clients 2]
                               [--warmup 50] [--repeat 1] [--settle-s 30] [--allocators auto,pymalloc]
                               [--gateway-env NAME=VALUE] [--no-report]

A real gateway process (``conduit serve gateway``) over a private tansu broker and
redis-server. The bench creates ``--tasks`` tasks with ``POST /v1/tasks``, opens one
SSE stream per task (``GET /v1/tasks/{id}/events``, all concurrent) from ``--clients``
client processes, then plays the orchestrators' part: every ``--interval-ms`` it appends
one ``answer.delta`` (text ``"<round>|<send time>"``) to every task's real log with the
``TaskEventLog`` append script (one pre-packed write of ``EVALSHA`` commands on a raw
socket, so the writer's own cost stays out of the latency), ``--deltas`` rounds, then
``task.completed``.

Clients are lean on purpose, so they are not the bottleneck: each client process
runs plain asyncio sockets (one HTTP/1.1 connection per stream, chunked body
decoded by hand, SSE blocks split on blank lines) and, like a browser EventSource,
reconnects with ``Last-Event-ID`` after 1 s when a stream is cut before its
terminal event.

Reported (section ``sse_fanout`` of docs/benchmarks.md, or stdout with ``--no-report``):
events lost (expected − received, must be 0), streams out of order, delivery latency
(writer's send time → client parse; seconds in the wire, ms in the report) p50/p99, the CPU the gateway,
Redis, the client processes and the writer used while the rounds were written (% of one core),
delivered rate, Redis connections on the server before and while all streams are open,
the gateway's CPU seconds (``/proc``; also per event from the first round written until every stream ended,
the send path without the streams' connects), and its RSS before the streams open (after a
``--warmup`` of small streams), at peak (sampled every 0.25 s) and after they end
(sampled every 0.5 s for up to ``--settle-s`` s, until within 5 % of the baseline).
``--repeat N`` runs the same fan-out N times through the same gateway and reports the
RSS of each, which separates allocator high-water from growth. ``--allocators`` repeats the
whole run with a fresh gateway per ``gateway_allocator`` value, side by side.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import sys
import time
from collections.abc import Awaitable, Callable
from multiprocessing.connection import Connection
from pathlib import Path
from urllib.parse import urlparse

import httpx
from redis.asyncio import Redis

from bench.common import infra_procs, machine, pct, read_chunk, rss_mib, write_section
from conduit.runtime import allocator
from ops import infra as cinfra
from conduit.records import apikeys
from conduit.runtime.redis_client import make_redis
from ops.services import ServiceProcess, settings_env
from conduit.records.taskstream import TaskEventLog
from contracts.stream import AnswerDelta, TaskCompleted

RECONNECT_S = 1.0  # the gateway's retry: hint
BASELINE_FRACTION = 0.05
"""RSS within 5 % of the baseline (4 MiB at ~80 MiB) counts as back: the live state a first burst leaves
(the Redis pool's extra connections, caches), against +40 % of allocator high-water under pymalloc."""


def _back(rss: dict[str, float]) -> bool:
    return rss["after"] <= rss["before"] * (1 + BASELINE_FRACTION)


# ------------------------------------------------------------------ client processes
async def _follow(port: int, task_id: str, lat: list[tuple[float, int]], seqs: list[int], accepted: list[int],
                  all_accepted: asyncio.Event, n: int, reconnects: list[int], gate: asyncio.Semaphore) -> None:
    """Follow one task's stream to its terminal event; on a cut, reconnect with Last-Event-ID."""
    last_id = 0
    seen_accepted = False
    while True:
        writer = None
        try:
            async with gate:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write((f"GET /v1/tasks/{task_id}/events HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                              f"Authorization: Bearer {os.environ['CONDUIT_API_KEY']}\r\n"
                              f"Accept: text/event-stream\r\nLast-Event-ID: {last_id}\r\n"
                              "Connection: close\r\n\r\n").encode())
                head = await reader.readuntil(b"\r\n\r\n")
            if not head.startswith(b"HTTP/1.1 200"):
                raise ConnectionError(head[:80])
            chunked = b"transfer-encoding: chunked" in head.lower()
            rest = b""
            while True:
                if chunked:
                    data = await read_chunk(reader)
                    if not data:
                        break
                else:
                    data = await reader.read(65536)
                    if not data:
                        break
                blocks = (rest + data).split(b"\n\n")
                rest = blocks.pop()
                for block in blocks:
                    event = None
                    for line in block.split(b"\n"):
                        if line.startswith(b"id: "):
                            last_id = int(line[4:])
                        elif line.startswith(b"event: "):
                            event = line[7:]
                        elif line.startswith(b"data: "):
                            if event == b"answer.delta":
                                j, sent = json.loads(line[6:])["text"].split("|")
                                lat.append((time.time() - float(sent), int(j)))
                                seqs.append(int(j))
                            elif event == b"task.accepted" and not seen_accepted:
                                seen_accepted = True
                                accepted[0] += 1
                                if accepted[0] == n:
                                    all_accepted.set()
                            elif event == b"task.completed":
                                return
        except (OSError, asyncio.IncompleteReadError, ValueError, ConnectionError):
            pass
        finally:
            if writer is not None:
                writer.close()
        reconnects[0] += 1
        await asyncio.sleep(RECONNECT_S)


async def _client_main(port: int, ids: list[str], conn: Connection) -> None:
    lat: list[tuple[float, int]] = []
    got: dict[str, list[int]] = {t: [] for t in ids}
    accepted, reconnects = [0], [0]
    all_accepted = asyncio.Event()
    gate = asyncio.Semaphore(64)  # connects in flight
    streams = [asyncio.create_task(_follow(port, t, lat, got[t], accepted, all_accepted, len(ids), reconnects, gate))
               for t in ids]
    await asyncio.wait_for(all_accepted.wait(), 300)
    conn.send(("connected", len(ids)))
    await asyncio.gather(*streams)
    conn.send(("done", {"lat": [x for x, _ in lat], "lat_j": [j for _, j in lat], "received": sum(len(v) for v in got.values()),
                        "seqs": got, "reconnects": reconnects[0], "ended": time.time()}))


def _client_process(port: int, ids: list[str], conn: Connection) -> None:
    asyncio.run(_client_main(port, ids, conn))


# ------------------------------------------------------------------ gateway probes
def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# ------------------------------------------------------------------ the run
def _progress(msg: str) -> None:
    print(f"[sse_fanout {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


async def _create_tasks(port: int, n: int) -> list[str]:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30,
                                 headers={"Authorization": f"Bearer {os.environ['CONDUIT_API_KEY']}"}) as client:
        sem = asyncio.Semaphore(32)

        async def create(i: int) -> str:
            async with sem:
                r = await client.post("/v1/tasks", json={"question": f"fan-out {i}"})
                r.raise_for_status()
                return r.json()["task_id"]

        return list(await asyncio.gather(*(create(i) for i in range(n))))


async def _wait_ready(port: int) -> None:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as client:
        for _ in range(300):
            try:
                if (await client.get("/readyz")).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.2)
    raise RuntimeError("gateway not ready")


class _Writer:
    """Plays the orchestrators: appends one event to every task's log per round, as fast as Redis takes it.

    Each round is one write of pre-packed ``EVALSHA`` commands of ``TaskEventLog``'s append script on a raw
    socket (redis-py's pipeline packing took ~50 ms per 1,000 commands here, which would be counted as
    delivery latency); the send time is patched into the packed bytes right before the write.
    """

    STAMP = b"@" * 24  # "<round:06d>|<time.time():017.6f>"

    def __init__(self, url: str, sha: str, ids: list[str], maxlen: int, ttl_s: int) -> None:
        self.url, self.ids = url, ids
        self.templates = {}
        for etype, data in (("answer.delta", AnswerDelta(text=self.STAMP.decode()).model_dump_json()),
                            ("task.completed", TaskCompleted(answer="done", latency_ms=1.0).model_dump_json())):
            terminal = b"1" if etype == "task.completed" else b"0"
            self.templates[etype] = b"".join(
                _pack(b"EVALSHA", sha.encode(), b"3", *(k.encode() for k in TaskEventLog.keys(t)), etype.encode(),
                      data.encode(), str(maxlen).encode(), str(ttl_s).encode(), terminal) for t in ids)
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> None:
        u = urlparse(self.url)
        self.reader, self.writer = await asyncio.open_connection(u.hostname, u.port or 6379)

    async def round(self, j: int, terminal: bool = False) -> None:
        """Append one event to every task (``answer.delta`` ``"<j>|<now>"``, or the terminal one); wait for the acks."""
        payload = self.templates["task.completed" if terminal else "answer.delta"]
        if not terminal:
            payload = payload.replace(self.STAMP, b"%06d|%017.6f" % (j, time.time()))
        self.writer.write(payload)
        lines, tail = 0, b""
        while lines < len(self.ids):
            data = await self.reader.read(1 << 16)
            if not data:
                raise ConnectionError("redis closed the connection")
            chunk = tail + data
            lines += chunk.count(b"\r\n")
            tail = chunk[chunk.rfind(b"\r\n") + 2:]
            if b"-" in chunk[:1] or b"\r\n-" in chunk:
                raise RuntimeError(f"append failed: {chunk[:200]!r}")

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def _pack(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


def _cpu_split(pids: dict[str, int], procs: list[mp.Process]) -> dict[str, float]:
    """CPU seconds so far of ``pids``, the client processes (summed) and this process (the writer)."""
    out = {k: cpu_s(p) for k, p in pids.items()}
    out["clients"] = sum(cpu_s(p.pid) for p in procs if p.pid is not None)
    out["writer"] = cpu_s(os.getpid())
    return out


async def _fanout(port: int, redis: Redis, url: str, ids: list[str], deltas: int, interval_s: float, clients: int,
                  on_open: Callable[[], Awaitable[None]] | None = None, pids: dict[str, int] | None = None) -> dict:
    """Open one stream per task from ``clients`` processes, write ``deltas`` rounds + the terminal, collect;
    ``cpu``: % of one core each of ``pids``, the clients and the writer used while the rounds were written."""
    log = TaskEventLog(redis, ttl_s=3600, maxlen=20000)
    writer = _Writer(url, await redis.script_load(log._append.script), ids, log.maxlen, log.ttl_s)
    await writer.open()
    ctx = mp.get_context("spawn")
    procs: list[mp.Process] = []
    pipes: list[Connection] = []
    try:
        for k in range(clients):
            parent, child = ctx.Pipe()
            p = ctx.Process(target=_client_process, args=(port, ids[k::clients], child), daemon=True)
            p.start()
            procs.append(p)
            pipes.append(parent)
        for c in pipes:
            msg = await asyncio.to_thread(c.recv)
            assert msg[0] == "connected", msg
        if on_open is not None:
            await on_open()
        round_s: list[float] = []
        cpu0 = _cpu_split(pids or {}, procs)
        started, started_wall = time.perf_counter(), time.time()
        behind = 0
        for j in range(deltas):
            tick = time.perf_counter()
            await writer.round(j)
            round_s.append(time.perf_counter() - tick)
            pause = interval_s - (time.perf_counter() - tick)
            behind += pause < 0
            await asyncio.sleep(max(0.0, pause))
        await writer.round(deltas, terminal=True)
        write_s = time.perf_counter() - started
        cpu = {k: (v - cpu0[k]) / write_s * 100 for k, v in _cpu_split(pids or {}, procs).items()}
        results = [(await asyncio.to_thread(c.recv))[1] for c in pipes]
        send_cpu_s = cpu_s(pids["gateway"]) - cpu0["gateway"] if pids and "gateway" in pids else 0.0
    finally:
        await writer.close()
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.terminate()
    received = sum(r["received"] for r in results)
    by_round: dict[int, list[float]] = {}
    for r in results:
        for x, j in zip(r["lat"], r["lat_j"]):
            by_round.setdefault(j, []).append(x)
    return {"lat": [x for r in results for x in r["lat"]], "received": received,
            "round_first": [min(v) for v in by_round.values()], "round_last": [max(v) for v in by_round.values()], "lost": len(ids) * deltas - received,
            "disorder": sum(1 for r in results for v in r["seqs"].values() if v != list(range(deltas))),
            "reconnects": sum(r["reconnects"] for r in results), "write_s": write_s, "behind": behind,
            "drain_s": max(r["ended"] for r in results) - started_wall, "round_s": round_s, "cpu": cpu,
            "send_cpu_s": send_cpu_s}


async def run(tasks: int, deltas: int, interval_s: float, clients: int, settle_s: float, warmup: int,
              repeat: int = 1, gateway_env: dict[str, str] | None = None) -> dict:
    """One gateway; ``repeat`` identical fan-outs of ``tasks`` x ``deltas``; the first one's figures plus RSS per burst."""
    with infra_procs() as (settings, infra_pids):
        port = cinfra.free_port()
        env = settings_env(settings.bus.bootstrap_servers(), settings.store.url(), settings.stack.data_dir,
                           CONDUIT_GATEWAY_PORT=str(port), CONDUIT_LOG_LEVEL="WARNING",
                           CONDUIT_RATE_LIMIT_KEY_PER_MINUTE="0", CONDUIT_RATE_LIMIT_TENANT_PER_MINUTE="0",
                           CONDUIT_RUNNING_TASKS_PER_KEY="0", CONDUIT_RUNNING_TASKS_PER_TENANT="0",
                           **(gateway_env or {}))
        gw = ServiceProcess("gateway", env, settings.stack.data_dir / "logs").start()
        redis = make_redis(settings.store)
        # the bench's key, inherited by its client processes (every request carries it)
        os.environ["CONDUIT_API_KEY"] = (await apikeys.create(redis, settings.identity.default_tenant, "bench", "admin"))[0]
        bursts: list[dict] = []
        try:
            await _wait_ready(port)
            pid = gw.proc.pid
            environ = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace").split("\0")
            in_use = allocator.in_use(dict(kv.split("=", 1) for kv in environ if "=" in kv))  # after its re-exec
            start_rss = rss_mib(pid)
            if warmup:
                _progress(f"warm-up: {warmup} streams x 5 deltas")
                await _fanout(port, redis, settings.store.url(), await _create_tasks(port, warmup), 5, 0.05, 1)
            for b in range(repeat):
                _progress(f"burst {b + 1}/{repeat}: creating {tasks} tasks")
                ids = await _create_tasks(port, tasks)
                _progress("tasks created; the baseline is taken in 4 s")
                await asyncio.sleep(4.0)  # the gateway releases memory 2 s after its last stream
                rss = {"start": start_rss, "before": rss_mib(pid), "peak": 0.0}
                cpu0 = cpu_s(pid)
                conns = {"before": int((await redis.info("clients"))["connected_clients"])}

                async def sample(rss: dict[str, float] = rss) -> None:
                    while True:
                        rss["peak"] = max(rss["peak"], rss_mib(pid))
                        await asyncio.sleep(0.25)

                async def opened(conns: dict[str, int] = conns) -> None:
                    conns["open"] = int((await redis.info("clients"))["connected_clients"])
                    _progress(f"{tasks} streams open (gateway pid {pid}); writing {deltas} rounds")

                sampler = asyncio.create_task(sample())
                r = await _fanout(port, redis, settings.store.url(), ids, deltas, interval_s, clients, opened,
                                  {"gateway": pid, "redis": infra_pids["redis"]})
                ended = time.perf_counter()
                sampler.cancel()
                r["cpu_s"] = cpu_s(pid) - cpu0
                _progress(f"all streams ended after {r['drain_s']:.1f} s; waiting for the gateway's RSS")
                at5, after, after_t = None, rss_mib(pid), 0.0
                while time.perf_counter() - ended < settle_s:
                    await asyncio.sleep(0.5)
                    after, after_t = rss_mib(pid), time.perf_counter() - ended
                    if at5 is None and after_t >= 5:
                        at5 = after
                    if after_t >= 5 and _back({"before": rss["before"], "after": after}):
                        break
                rss.update(after=after, after_t=after_t, at5=at5 if at5 is not None else after)
                r.update(rss=rss, conns=conns)
                bursts.append(r)
        finally:
            await redis.aclose()
            gw.stop()
    first = bursts[0]
    first["bursts"] = [{"lost": b["lost"], **b["rss"]} for b in bursts]
    first["allocator"] = in_use
    return first


def _bursts_text(r: dict) -> str:
    if len(r["bursts"]) < 2:
        return "not run (`--repeat 1`)"
    return "; ".join(f"burst {i + 1}: before {b['before']:.0f}, peak {b['peak']:.0f}, after {b['after']:.0f} MiB, "
                     f"lost {b['lost']}" for i, b in enumerate(r["bursts"]))


def _verdict(rss: dict[str, float]) -> str:
    over = rss["after"] - rss["before"]
    pct_over = over / rss["before"] * 100
    return (f"back to baseline (+{over:.0f} MiB, {pct_over:.0f} %)" if _back(rss)
            else f"+{over:.0f} MiB ({pct_over:.0f} %) over the baseline")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=1000)
    ap.add_argument("--deltas", type=int, default=200)
    ap.add_argument("--interval-ms", type=float, default=100.0, help="pause between delta rounds")
    ap.add_argument("--clients", type=int, default=2, help="client processes sharing the streams")
    ap.add_argument("--settle-s", type=float, default=30.0, help="max wait for the gateway's RSS to return to baseline")
    ap.add_argument("--warmup", type=int, default=50, help="streams run once before the baseline is taken (0 = none)")
    ap.add_argument("--repeat", type=int, default=1, help="identical fan-outs through the same gateway (RSS after each)")
    ap.add_argument("--allocators", default="auto,pymalloc",
                    help="gateway_allocator values, one gateway each, side by side; the first is the headline")
    ap.add_argument("--gateway-env", action="append", default=[], metavar="NAME=VALUE",
                    help="extra environment of the gateway process (repeatable)")
    ap.add_argument("--no-report", action="store_true", help="print the section, leave docs/benchmarks.md alone")
    a = ap.parse_args()
    gateway_env = dict(kv.split("=", 1) for kv in a.gateway_env)
    load_before = os.getloadavg()
    runs: list[tuple[str, dict]] = []
    for choice in a.allocators.split(","):
        _progress(f"gateway with gateway_allocator={choice}")
        env = {**gateway_env, "CONDUIT_GATEWAY_ALLOCATOR": choice}
        runs.append((choice, asyncio.run(run(a.tasks, a.deltas, a.interval_ms / 1000, a.clients, a.settle_s,
                                              a.warmup, a.repeat, env))))
    load_after = os.getloadavg()
    r = runs[0][1]
    ms = [x * 1000 for x in r["lat"]]
    rate = r["received"] / r["drain_s"]
    rss, conns = r["rss"], r["conns"]
    rounds = [x * 1000 for x in r["round_s"]]
    rows = []
    for choice, x in runs:
        xm = [v * 1000 for v in x["lat"]]
        xr = x["rss"]
        rows.append(f"| `{choice}` ({x['allocator']}) | {x['lost']} | p50 {pct(xm, 50):.1f} / p99 {pct(xm, 99):.1f} ms | "
                    f"{x['cpu_s'] / max(1, x['received']) * 1e6:.0f} µs | {xr['before']:.0f} / {xr['peak']:.0f} / "
                    f"{xr['after']:.0f} MiB: {_verdict(xr)} | {_bursts_text(x)} |")
    allocator_rows = "\n".join(rows)
    section = f"""
## 3. SSE fan-out through one gateway

Command: `python -m bench.sse_fanout --tasks {a.tasks} --deltas {a.deltas} --interval-ms {a.interval_ms:g} --clients {a.clients} --warmup {a.warmup} --repeat {a.repeat} --allocators {a.allocators}{"".join(f" --gateway-env {kv}" for kv in a.gateway_env)}` · machine: {machine()} · load average (1 min) {load_before[0]:.2f} at start, {load_after[0]:.2f} at end

{a.tasks:,} concurrent SSE streams × {a.deltas} `answer.delta` each ({a.tasks * a.deltas:,} events) through one gateway
process, whose shared `StreamHub` reads all task logs with one multi-key `XREAD` on one connection. The writer
appends one event to every log per round (the `TaskEventLog` append script, one pre-packed write) every {a.interval_ms:g} ms; {a.clients} lean
client processes (raw asyncio sockets) read the streams; broker, Redis, writer and clients share the same 2 cores.
The whole run is repeated with a fresh gateway per `gateway_allocator` (`--allocators`); the table's figures are
the first's (`{runs[0][0]}`, the default), the comparison below it.

| figure | value |
| --- | --- |
| events lost | **{r["lost"]}** (received {r["received"]:,}); streams out of order: {r["disorder"]}; client reconnects (Last-Event-ID): {r["reconnects"]} |
| delivery latency (writer's send time → parsed by the client) | **p50 {pct(ms, 50):.1f} ms, p99 {pct(ms, 99):.1f} ms**, max {max(ms):.1f} ms (one round of {a.tasks:,} appends takes the writer p50 {pct(rounds, 50):.1f} ms, p99 {pct(rounds, 99):.1f} ms) |
| each round's first and last delivery (of its {a.tasks:,} events), p50 over the rounds | first **{pct([x * 1000 for x in r["round_first"]], 50):.1f} ms**, last **{pct([x * 1000 for x in r["round_last"]], 50):.1f} ms** (p90 {pct([x * 1000 for x in r["round_first"]], 90):.1f} / {pct([x * 1000 for x in r["round_last"]], 90):.1f} ms): the first is the path's own latency, the gap to the last is the round's fan-out through one process |
| delivered rate | {rate:,.0f} events/s (writing took {r["write_s"]:.1f} s, {r["behind"]} of {a.deltas} rounds overran the interval; all streams ended after {r["drain_s"]:.1f} s) |
| gateway CPU | {r["cpu_s"]:.1f} s, {r["cpu_s"] / max(1, r["received"]) * 1e6:.0f} µs per delivered event (connects and disconnects included); the send path alone (from the first round written until every stream ended): **{r["send_cpu_s"] / max(1, r["received"]) * 1e6:.0f} µs per event** |
| CPU while the rounds were written, % of one core (of the machine's {os.cpu_count() * 100} %) | {", ".join(f"{k} {v:.0f} %" for k, v in r["cpu"].items())}; together {sum(r["cpu"].values()):.0f} % |
| Redis connections on the server | {conns["before"]} before the streams opened, {conns.get("open", 0)} with all {a.tasks:,} open (the growth is the gateway's pool answering the burst of `GET /events`; the hub reads on one) |
| gateway RSS ({r["allocator"]}) | **before {rss["before"]:.0f} MiB, peak {rss["peak"]:.0f} MiB, after {rss["after"]:.0f} MiB** ({rss["after_t"]:.0f} s after the streams ended; {rss["at5"]:.0f} MiB at 5 s): {_verdict(rss)}; {rss["start"]:.0f} MiB right after start |
| the same fan-out again (same gateway) | {_bursts_text(r)} |

| `gateway_allocator` (in use) | lost | delivery latency | CPU per event | RSS before / peak / after | each burst |
| --- | --- | --- | --- | --- | --- |
{allocator_rows}

"Before" is taken after a warm-up of {a.warmup} streams and the {a.tasks:,} `POST /v1/tasks`, 4 s after the last
stream; "back" means within {BASELINE_FRACTION:.0%} of it. The gateway's hub runs `gc.collect()` and glibc `malloc_trim(0)`
2 s after its last stream ends (after a peak of ≥ 32 streams; skipped off glibc).

**Why the allocator** (conduit/runtime/allocator.py): under CPython's own small-object allocator (`pymalloc`) what stays
above the baseline is allocator high-water, not live objects. A gateway instrumented for it by hand (`sys._debugmallocstats()`
before the burst and 17 s after; `tracemalloc` started at the burst for the survivors; not a command here, so no
figures) showed about as many live small objects after as before, in nearly twice the arenas, most of the growth
in empty 16 KiB pools: pymalloc frees a
1 MiB arena only when every block in it is free, and a few hundred blocks that outlive the burst (cancelled timers
still in the event loop's heap, the Redis pool connections' state and last replies, uvicorn's date header) keep most
of the burst's arenas alive. With `PYTHONMALLOC=malloc` every object goes to `malloc`, and jemalloc preloaded under it
(`background_thread:true,dirty_decay_ms:1000`) returns freed pages to the OS within about a second, also when the
gateway sits idle (without its background thread a burst stayed +31 MiB until the next requests): `conduit serve gateway`
re-executes itself that way when `libjemalloc.so.2` is installed (Debian `libjemalloc2`, in the Dockerfile), which
is `gateway_allocator=auto`. Tried before and not kept (1,000 × 10 runs): `PYTHONMALLOC=malloc` with glibc's malloc
+21 MiB (at ~25 % more CPU per event), jemalloc or mimalloc preloaded *without* `PYTHONMALLOC=malloc` +40 MiB (pymalloc
still takes every small object), flushing asyncio's future-iterator free list, touching every pool connection after
the burst. Found and fixed under pymalloc: pydantic-core's JSON string cache kept ~2,000 task-id strings from
`GET /events` record reads (the route now checks the record with `EXISTS`, and `TaskView` is parsed with
`cache_strings="keys"`): +44 → +28 MiB in a 1,000 × 10 run; the stream's own heartbeats instead of sse-starlette's
ping task and a shutdown signal without a watcher task (peak −9 MiB).
Before the hub (one blocking `XREAD` and Redis connection per stream) 300 streams × 100 deltas delivered
774 events/s at p50 1.5 s, and RSS went 91 → 112 → 112 MiB.
"""
    if a.no_report:
        print(section)
    else:
        write_section("sse_fanout", section)


if __name__ == "__main__":
    main()
