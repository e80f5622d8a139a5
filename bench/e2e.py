"""End to end, the way a user meets Conduit, side by side with the model called directly.

    python -m bench.e2e [--n 30] [--idle-s 60] [--idle-n 2] [--sessions 50,200] [--seconds 15] [--scale orchestrator=2]

The embedded stack (tansu, redis-server, orchestrator, gateway, retriever over a few real laws,
web, sandbox; each a process) with the scripted OpenAI-compatible model. Lean clients (one
keep-alive socket each, HTTP/1.1 and SSE parsed by hand) call ``POST /v1/ask`` and, interleaved
pair by pair, the model server directly (``POST /v1/chat/completions`` with the same turns):

1. **time to first token**, warm: ``POST /v1/ask`` → first ``answer.delta``, minus the model's
   own first-token delay (``ScriptedModel.first_token_s``); beside it the direct call's figure;
2. **two-turn run** (a ``kb_search`` call, then the answer): ``POST`` → terminal event, minus the
   two direct model calls of the pair and minus kb_search's own run time (``tool.completed``);
3. **idle CPU** per process over 30 s, from ``/proc/PID/stat`` (robust to the machine's load),
   then **time to first token after ``--idle-s`` idle** (``--idle-n`` times);
4. **throughput**: closed-loop sessions doing two-turn runs with a 1 s model delay for
   ``--seconds`` per row, counted in a steady state (after a warm-up in which every session
   finished one run: the runs that finish inside the window), the same sessions calling the model
   directly beside it (the ceiling), and the CPU each process spent per run in the window;
5. **peak RSS** per process (``VmHWM``).

``--scale`` runs replicas as ``conduit up --scale`` does (``orchestrator=2``, ``retriever=2``: copies of the
embedded store, rule K10); every replica's CPU and RSS is given under its own key.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import tempfile
import time
from pathlib import Path
from urllib.parse import urlparse

from bench.common import cpu_s, machine, pct, read_chunk, write_section
from bench.stackbench import NO_RATE_LIMITS
from ops import infra
from ops.stack import Stack, parse_scale
from conduit.runtime.settings import Settings
from testkit.scripted_model import ScriptedModel, Turn

LAWS = ["中华人民共和国增值税法", "中华人民共和国车船税法", "中华人民共和国契税法"]
"""Real laws ingested for kb_search (a small store: the figure is Conduit's, not the search's)."""
KB_QUESTION = "kb: 小规模纳税人适用简易计税方法的征收率是多少？"
ANSWER = "根据《中华人民共和国增值税法》第十一条，小规模纳税人的征收率为百分之三。"
DELAY = {"s": 0.0}
"""The scripted model's delay before its first token (seconds), set per phase."""


def script(body: dict) -> Turn:
    """Turn source: after a tool result the answer; a ``kb:`` question a kb_search call; else the answer."""
    messages = body.get("messages", [])
    last = messages[-1] if messages else {}
    if last.get("role") == "user" and str(last.get("content", "")).startswith("kb:"):
        return Turn(tool_calls=[{"name": "kb_search", "arguments": {"query": KB_QUESTION[4:], "reason": "查征收率"}}],
                    delay_s=DELAY["s"])
    return Turn(content=ANSWER, delay_s=DELAY["s"])


def direct_bodies(kind: str) -> list[dict]:
    """The model requests a direct pair makes: one for a plain answer, two for the kb_search run."""
    user = {"role": "user", "content": KB_QUESTION if kind == "kb" else "ttft"}
    first = {"model": "scripted", "stream": True, "messages": [user]}
    if kind != "kb":
        return [first]
    call = {"id": "call_1", "type": "function", "function": {"name": "kb_search", "arguments": "{}"}}
    return [first, {"model": "scripted", "stream": True, "messages": [
        user, {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "证据"}]}]


class Lean:
    """One keep-alive HTTP/1.1 connection; POSTs JSON and reads the chunked SSE reply by hand."""

    CONDUIT_FIRST = re.compile(rb"event: answer\.delta\n")
    MODEL_FIRST = re.compile(rb'"content": "[^"]|"tool_calls"')

    def __init__(self, url: str, key: str = "", headers: dict[str, str] | None = None) -> None:
        u = urlparse(url)
        self.host, self.port, self.key = u.hostname or "127.0.0.1", u.port or 80, key
        self.extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items()).encode()
        self.first = self.CONDUIT_FIRST if key else self.MODEL_FIRST
        self.rw: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def post(self, path: str, body: dict, stamps: dict[str, float] | None = None) -> tuple[float | None, float, list[bytes]]:
        """Seconds to the first token and to the end of the stream, and the SSE data lines. ``stamps``: event
        types to time, ``{type: nan}``; each gets the seconds from the POST to the chunk its first event came in."""
        wanted = {f"event: {k}\n".encode(): k for k in (stamps or {})}
        if self.rw is None:
            self.rw = await asyncio.open_connection(self.host, self.port)
        reader, writer = self.rw
        raw = json.dumps(body, ensure_ascii=False).encode()
        auth = b"Authorization: Bearer %s\r\n" % self.key.encode() if self.key else b""
        t0 = time.perf_counter()
        writer.write(b"POST %s HTTP/1.1\r\nHost: %s\r\nAccept: text/event-stream\r\n%s%sContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (path.encode(), self.host.encode(), auth, self.extra, len(raw), raw))
        head = await reader.readuntil(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200") or b"chunked" not in head.lower():
            raise RuntimeError(head[:300])
        first, buf = None, b""
        while data := await read_chunk(reader):
            buf += data
            for mark in [m for m in wanted if m in data]:
                stamps[wanted.pop(mark)] = time.perf_counter() - t0  # type: ignore[index]
            if first is None and self.first.search(buf):
                first = time.perf_counter() - t0
        return first, time.perf_counter() - t0, buf.split(b"\n")

    async def close(self) -> None:
        if self.rw is not None:
            self.rw[1].close()


def tool_ms(lines: list[bytes]) -> float:
    """kb_search's own run time (``tool.completed``'s ``duration_ms``) in a task's SSE lines; 0 when none."""
    for i, line in enumerate(lines):
        if line == b"event: tool.completed" and i + 1 < len(lines):
            return json.loads(lines[i + 1][6:])["duration_ms"]
    return 0.0


async def direct(client: Lean, kind: str) -> tuple[float | None, float]:
    """A direct run: the first call's time to first token and the total of all its calls (seconds)."""
    first, total = None, 0.0
    for body in direct_bodies(kind):
        f, t, _ = await client.post("/v1/chat/completions", body)
        first = f if first is None else first
        total += t
    return first, total


async def latency(stack: Stack, model: ScriptedModel, n: int) -> dict[str, list[float]]:
    """Phases 1-2: interleaved pairs at model delay 0; milliseconds."""
    conduit, model_c = Lean(stack.gateway_url, stack.admin_key), Lean(model.base_url.removesuffix("/v1"))
    out: dict[str, list[float]] = {k: [] for k in ("ttft", "ttft_direct", "run", "run_direct", "tool", "overhead")}
    for i in range(n + 3):
        own = len(model.first_token_s)
        first, _, _ = await conduit.post("/v1/ask", {"question": f"ttft {i}"})
        ttft = ((first or 0) - model.first_token_s[own]) * 1000
        own = len(model.first_token_s)
        d_first, _ = await direct(model_c, "plain")
        d_ttft = ((d_first or 0) - model.first_token_s[own]) * 1000
        _, total, lines = await conduit.post("/v1/ask", {"question": KB_QUESTION})
        _, d_total = await direct(model_c, "kb")
        if i >= 3:  # warm-up
            out["ttft"].append(ttft)
            out["ttft_direct"].append(d_ttft)
            out["run"].append(total * 1000)
            out["run_direct"].append(d_total * 1000)
            out["tool"].append(tool_ms(lines))
            out["overhead"].append(total * 1000 - d_total * 1000 - out["tool"][-1])
    await conduit.close()
    await model_c.close()
    return out


def pids_of(stack: Stack) -> dict[str, int]:
    """Every process of the stack by name."""
    return {**{k: p.proc.pid for k, p in stack.infra.items() if p.proc}, **{k: p.pid for k, p in stack.procs.items()}}


def cpu_of(pids: dict[str, int]) -> dict[str, float]:
    """CPU seconds (user + system) each process used so far."""
    return {k: cpu_s(p) for k, p in pids.items()}


def peak_rss_mib(pid: int) -> float:
    """Peak resident memory (``VmHWM``) of ``pid`` in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def idle(stack: Stack, model: ScriptedModel, idle_s: float, idle_n: int) -> tuple[dict[str, float], list[float], str]:
    """Phase 3: per-process idle CPU (% of a core over 30 s) and TTFT overheads after ``idle_s`` idle (ms)."""
    pids = pids_of(stack)
    await asyncio.sleep(5)
    load0, a, t0 = os.getloadavg(), cpu_of(pids), time.monotonic()
    await asyncio.sleep(30)
    b, wall = cpu_of(pids), time.monotonic() - t0
    load = f"{load0[0]:.1f} → {os.getloadavg()[0]:.1f}"
    cpu = {k: (b[k] - a[k]) / wall * 100 for k in pids}
    overheads = []
    conduit = Lean(stack.gateway_url, stack.admin_key)
    for i in range(idle_n):
        await asyncio.sleep(max(0.0, idle_s - (35 if i == 0 else 0)))
        own = len(model.first_token_s)
        first, _, _ = await conduit.post("/v1/ask", {"question": f"after idle {i}"})
        overheads.append(((first or 0) - model.first_token_s[own]) * 1000)
        await conduit.close()
        conduit = Lean(stack.gateway_url, stack.admin_key)  # a new connection, as a returning user
    await conduit.close()
    return cpu, overheads, load


WARM_UP_CAP_S = 120.0
"""Longest warm-up of a throughput row (seconds): it ends when every session has finished one run."""


async def closed_loop(make: callable, sessions: int, seconds: float,
                      pids: dict[str, int] | None = None) -> tuple[int, list[float], dict[str, float]]:
    """``sessions`` loops of ``make()``-made runs, measured in a steady state.

    A warm-up lasts until every session has finished one run (at most ``WARM_UP_CAP_S``), so the
    window does not start with every session's first run in flight together; then a window of
    ``seconds`` counts the runs that *finish* inside it, whatever their length. After the window no
    session starts a new run and the ones in flight drain. Returns the runs finished in the window,
    their latencies (seconds) and, per process of ``pids``, the CPU seconds spent during the window.
    """
    window: dict[str, float] = {}
    done: list[float] = []
    warmed = asyncio.Event()
    left = {"n": sessions}

    async def session() -> None:
        run, first = make(), True
        while "end" not in window:
            t = time.perf_counter()
            await run.go()
            now = time.monotonic()
            if "start" in window and now <= window.get("end", float("inf")):
                done.append(time.perf_counter() - t)
            if first:
                first, left["n"] = False, left["n"] - 1
                if not left["n"]:
                    warmed.set()
        await run.close()

    async def clock() -> dict[str, float]:
        try:
            await asyncio.wait_for(warmed.wait(), WARM_UP_CAP_S)
        except TimeoutError:
            pass
        a = cpu_of(pids or {})
        window["start"] = time.monotonic()
        await asyncio.sleep(seconds)
        window["end"] = time.monotonic()
        b = cpu_of(pids or {})
        return {k: b[k] - a[k] for k in a}

    *_, cpu = await asyncio.gather(*(session() for _ in range(sessions)), clock())
    return len(done), done, cpu


class ConduitRun:
    def __init__(self, stack: Stack) -> None:
        self.c = Lean(stack.gateway_url, stack.admin_key)

    async def go(self) -> None:
        await self.c.post("/v1/ask", {"question": KB_QUESTION})

    async def close(self) -> None:
        await self.c.close()


class DirectRun:
    def __init__(self, model: ScriptedModel) -> None:
        self.c = Lean(model.base_url.removesuffix("/v1"))

    async def go(self) -> None:
        await direct(self.c, "kb")

    async def close(self) -> None:
        await self.c.close()


async def throughput(stack: Stack, model: ScriptedModel, sessions: list[int], seconds: float) -> list[str]:
    """Phase 4 rows: runs/s through Conduit and directly, p50, CPU ms per completed run per process."""
    DELAY["s"] = 1.0
    pids, rows = pids_of(stack), []
    for s in sessions:
        d_n, d_lat, _ = await closed_loop(lambda: DirectRun(model), s, seconds)
        load0 = os.getloadavg()[0]
        c_n, c_lat, cpu = await closed_loop(lambda: ConduitRun(stack), s, seconds, pids)
        per = ", ".join(f"{k} {v / max(c_n, 1) * 1000:.1f}" for k, v in cpu.items() if v > 0.05)
        ratio = (c_n / d_n * 100) if d_n else float("nan")
        rows.append(f"| {s} | **{c_n / seconds:.1f}** | {d_n / seconds:.1f} | **{ratio:.0f} %** | "
                    f"{pct(c_lat, 50) * 1000:.0f} / {pct(d_lat, 50) * 1000:.0f} ms | {per} | "
                    f"{load0:.1f} → {os.getloadavg()[0]:.1f} |")
        print(rows[-1], flush=True)
        await asyncio.sleep(3)  # let the last runs drain
    DELAY["s"] = 0.0
    return rows


def start(data_dir: Path, model: ScriptedModel, scale: dict[str, int] | None = None) -> Stack:
    """Ingest ``LAWS`` and start the embedded stack with every service (``scale``: replicas per service)."""
    from services.retriever.ingest import ingest_law_db

    settings = Settings(data_dir=data_dir, embedded_kafka_port=infra.free_port(), embedded_redis_port=infra.free_port(),
                        gateway_port=infra.free_port())
    ingest_law_db(settings, law_names=LAWS, progress=False)
    return Stack(settings, extra_env={"OPENAI_BASE_URL": model.base_url, "OPENAI_API_KEY": "bench",
                                      "CONDUIT_MODEL": "scripted", "CONDUIT_LOG_LEVEL": "WARNING",
                                      **NO_RATE_LIMITS}, scale=scale).start()


def ms(values: list[float]) -> str:
    return f"p50 {pct(values, 50):.1f}, p90 {pct(values, 90):.1f} ms"


async def measure(a: argparse.Namespace, stack: Stack, model: ScriptedModel) -> dict:
    lat = await latency(stack, model, a.n)
    cpu, after_idle, idle_load = await idle(stack, model, a.idle_s, a.idle_n)
    rows = await throughput(stack, model, [int(s) for s in a.sessions.split(",")], a.seconds)
    return {"lat": lat, "cpu": cpu, "after_idle": after_idle, "idle_load": idle_load, "rows": rows,
            "rss": {k: peak_rss_mib(p) for k, p in pids_of(stack).items()}}


def report(a: argparse.Namespace, r: dict, load: tuple[float, float]) -> str:
    lat, cpu = r["lat"], r["cpu"]
    cpus = ", ".join(f"{k} {v:.1f} %" for k, v in cpu.items())
    return f"""
## 5. End to end through `POST /v1/ask` (`bench/e2e.py`)

Command: `python -m bench.e2e --n {a.n} --idle-s {a.idle_s:g} --idle-n {a.idle_n} --sessions {a.sessions} --seconds {a.seconds:g}{f" --scale {a.scale}" if a.scale else ""}`
· machine: {machine()} · load average (1 min) {load[0]:.1f} at the start, {load[1]:.1f} at the end

The embedded stack with every service (retriever over {len(LAWS)} real laws) and the scripted model; lean clients;
pairs interleaved with the same model turns called directly. Overheads subtract the model's own first-token
delay (TTFT) or the pair's direct calls and kb_search's own run time (the two-turn run). Wall-clock figures move
with the machine's load; CPU seconds (from `/proc`) do not.

| figure | through Conduit | the model directly | aim |
| --- | --- | --- | --- |
| time to first token, warm, minus the model's own delay (n={a.n}) | **{ms(lat['ttft'])}** | {ms(lat['ttft_direct'])} | p50 ≤ 15 ms |
| the same after {a.idle_s:g} s idle (each, ms) | **{', '.join(f'{x:.1f}' for x in r['after_idle'])}** | | p50 ≤ 15 ms |
| two-turn kb_search run, POST → terminal event (n={a.n}) | {ms(lat['run'])} | {ms(lat['run_direct'])} (both calls) | |
| kb_search's own run time | {ms(lat['tool'])} | | |
| **two-turn overhead** (run − direct calls − kb_search) | **{ms(lat['overhead'])}** | | p50 ≤ 15 ms |
| idle CPU over 30 s (load {r['idle_load']}), % of one core | **{sum(cpu.values()):.1f} %** ({cpus}) | | ≤ 5 % |
| peak RSS (MiB) | {', '.join(f'{k} {v:.0f}' for k, v in r['rss'].items())} | | |

Throughput, two-turn runs with a 1 s model delay (closed loop; after a warm-up in which every session finished
one run, the runs that finish in a {a.seconds:g} s window; the direct ceiling is the same sessions calling the model
directly; CPU per run in the window through Conduit, ms):

| sessions | runs/s through Conduit | direct ceiling | of the ceiling | latency p50 Conduit / direct | CPU ms per run | load |
| --- | --- | --- | --- | --- | --- | --- |
{chr(10).join(r['rows'])}
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=30, help="measured pairs per latency figure")
    ap.add_argument("--idle-s", type=float, default=60.0, help="idle seconds before each after-idle question")
    ap.add_argument("--idle-n", type=int, default=2)
    ap.add_argument("--sessions", default="50,200", help="closed-loop sessions per throughput row")
    ap.add_argument("--seconds", type=float, default=15.0, help="seconds per throughput row")
    ap.add_argument("--scale", default="", help="replicas per service, e.g. orchestrator=2 (as `conduit up --scale`)")
    ap.add_argument("--no-write", action="store_true", help="print only, leave docs/benchmarks.md alone")
    a = ap.parse_args()
    model = ScriptedModel(default=script).start()  # type: ignore[arg-type]  # a Turn source may be a function
    load0 = os.getloadavg()[0]
    stack = start(Path(tempfile.mkdtemp(prefix="conduit-e2e-")), model, parse_scale(a.scale) if a.scale else None)
    try:
        r = asyncio.run(measure(a, stack, model))
    finally:
        stack.stop()
        model.stop()
    text = report(a, r, (load0, os.getloadavg()[0]))
    print(text) if a.no_write else write_section("e2e", text)


if __name__ == "__main__":
    main()
