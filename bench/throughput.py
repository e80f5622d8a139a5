"""Benchmark 4: throughput under concurrent load, two-turn runs with a 1 s model (issue 41).

    python -m bench.throughput [--concurrent 50,200] [--model-s 1] [--help-s S] [--rounds 1] [--no-write]

**Burst** (the default): the embedded stack with every service (``bench.e2e.start``: three real laws, the
product defaults, per-key rate limits off) and the scripted model; per row one burst of N concurrent two-turn
runs (``POST /v1/ask`` with a question of its own: the model calls ``kb_search`` with the question, then
answers after the result; each model call waits ``--model-s`` before its first token, and the retriever's
rewrite and rerank calls to the model, rules K12 and K13, wait ``--help-s``, by default as long: a real model). Reported per row:
runs/s (N / seconds from the burst's start to its last terminal event), latency p50 / p90 (POST to terminal
event), failed runs, CPU ms per run of every process (``/proc``) and of the whole stack, peak RSS (MiB).
Requests carry ``Cache-Control: no-cache``: a run is an agent run, not a semantic-cache replay.
Side by side with another checkout: ``bench/ab.sh OLD_DIR 2 throughput --concurrent 50,200 --no-write``.

``load`` below (closed-loop sessions for a window) is the older harness that ``bench.profile_services`` drives.

``load``: C closed-loop clients each
``POST /v1/tasks`` and follow the task's SSE stream to its terminal event, then ask
again, for ``--seconds``. Reported: completed tasks per second (completions inside the
window / window), task latency p50/p99, failures with their reasons, and the CPU each
process spent per completed task (``/proc/PID/stat``).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
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


QUESTIONS = ["小规模纳税人适用简易计税方法的征收率是多少？", "车船税的纳税义务发生时间是什么时候？",
             "契税的税率幅度是多少？", "增值税的纳税期限有哪些？", "哪些车船免征车船税？",
             "个人购买家庭唯一住房的契税怎么算？", "进项税额不得抵扣的情形有哪些？", "契税什么时候申报缴纳？"]
"""What the burst's runs ask (run ``i`` asks question ``i mod 8`` with its number): a question of its own per run,
so the retriever embeds a query it has not cached, as under real load."""
MARKS = ("task.accepted", "step.started", "tool.requested", "tool.completed", "answer.delta", "task.completed")
"""SSE events whose first arrival each run stamps (the stage table's boundaries)."""


def two_turn(delay_s: float):  # noqa: ANN201 - a scripted model turn source
    """The scripted model's turns: a ``kb:`` question gets a ``kb_search`` call with the question as its query,
    a tool result gets the answer citing [1]; each after ``delay_s`` seconds."""
    def turn(body: dict) -> Turn:
        messages = body.get("messages", [])
        last = messages[-1] if messages else {}
        text = str(last.get("content", ""))
        if last.get("role") == "user" and text.startswith("kb:"):
            return Turn(tool_calls=[{"name": "kb_search", "arguments": {"query": text[3:].strip(), "reason": "查法条"}}],
                        delay_s=delay_s)
        return Turn(content="根据检索到的法条，答案见证据 [1]。", chunks=4, delay_s=delay_s)
    return turn


def scripted_model(model_s: float, help_s: float):  # noqa: ANN201 - a started testkit ScriptedModel
    """The burst's started scripted model: ``two_turn(model_s)`` for the agent's calls, and the retriever's rewrite
    and rerank calls (rules K12, K13) answered as ``echo_retrieval`` does, each after ``help_s`` seconds (a real
    model takes as long for them as for any call)."""
    from testkit.scripted_model import ScriptedModel, echo_retrieval

    def helper(body: dict) -> Turn:
        return dataclasses.replace(echo_retrieval(body), delay_s=help_s)

    return ScriptedModel(default=two_turn(model_s), retrieval=helper).start()  # type: ignore[arg-type]


async def burst(stack, n: int, first: int = 0) -> dict:  # noqa: ANN001 - ops.stack.Stack
    """One burst of ``n`` concurrent two-turn runs through ``POST /v1/ask``, numbered ``first`` .. ``first + n - 1``
    (a number is never asked twice on one stack, so no search hits a cache): latencies (s), per-stage arrival
    offsets (s from the POST, by ``MARKS``), failures and the burst's makespan (s)."""
    from bench.e2e import Lean

    async def one(i: int) -> tuple[float, dict[str, float], str]:
        client = Lean(stack.gateway_url, stack.admin_key, headers={"Cache-Control": "no-cache"})
        t0, stamps = time.perf_counter(), dict.fromkeys(MARKS, float("nan"))
        try:
            _, total, lines = await client.post("/v1/ask", {"question": f"kb: 第{first + i}号咨询：{QUESTIONS[i % len(QUESTIONS)]}"},
                                                stamps)
        except (OSError, RuntimeError, asyncio.IncompleteReadError) as exc:
            return time.perf_counter() - t0, {}, type(exc).__name__
        finally:
            await client.close()
        events = [line[7:].decode() for line in lines if line.startswith(b"event: ")]
        end = next((e for e in reversed(events) if e in ("task.completed", "task.failed", "task.cancelled")), "no terminal event")
        return total, stamps, "" if end == "task.completed" else end

    t0 = time.perf_counter()
    results = await asyncio.gather(*(one(i) for i in range(n)))
    makespan = time.perf_counter() - t0
    failed: dict[str, int] = {}
    for _, _, why in results:
        if why:
            failed[why] = failed.get(why, 0) + 1
    ok = [r for r in results if not r[2]]
    return {"lat": [r[0] for r in ok], "stamps": [r[1] for r in ok], "failed": failed, "makespan": makespan}


def stages(stamps: list[dict[str, float]], model_s: float) -> str:
    """p50 of each stage between ``MARKS`` (ms), the model's own delay taken out of the two stages holding a call."""
    names = ("POST → task.accepted (admission)", "→ step.started (question topic, orchestrator pickup)",
             "→ tool.requested (model call 1)", "→ tool.completed (tool topic, retriever)",
             "→ first answer.delta (model call 2)", "→ task.completed")
    cells = []
    for j, name in enumerate(names):
        gaps = [s[MARKS[j]] - (s[MARKS[j - 1]] if j else 0.0) for s in stamps if s[MARKS[j]] == s[MARKS[j]]
                and (j == 0 or s[MARKS[j - 1]] == s[MARKS[j - 1]])]
        own = model_s if j in (2, 4) else 0.0
        cells.append(f"{name} {(pct(gaps, 50) - own) * 1000:.0f}")
    return ", ".join(cells)


def burst_main(a: argparse.Namespace) -> None:
    """``--concurrent`` rows on one stack (see the module docstring); prints and (without ``--no-write``) writes them."""
    import tempfile
    from pathlib import Path

    from bench import e2e

    help_s = a.model_s if a.help_s is None else a.help_s
    model = scripted_model(a.model_s, help_s)
    stack = e2e.start(Path(tempfile.mkdtemp(prefix="conduit-throughput-")), model)
    rows: list[str] = []
    stage_rows: list[str] = []
    try:
        pids = e2e.pids_of(stack)
        asyncio.run(burst(stack, 10, first=10**6))  # warm-up: first searches, connections, caches
        first = 0
        for _ in range(a.rounds):
            for n in [int(x) for x in a.concurrent.split(",")]:
                time.sleep(2)
                load0, before = os.getloadavg()[0], e2e.cpu_of(pids)
                r = asyncio.run(burst(stack, n, first))
                first += n
                after = e2e.cpu_of(pids)
                done = max(1, len(r["lat"]))
                cpu = {k: (after[k] - before[k]) * 1000 / done for k in pids}
                per = ", ".join(f"{k} {v:.0f}" for k, v in sorted(cpu.items(), key=lambda kv: -kv[1]) if v >= 0.5)
                why = ", ".join(f"{k} ×{v}" for k, v in r["failed"].items())
                rows.append(f"| {n} | **{len(r['lat']) / r['makespan']:.1f}** | {pct(r['lat'], 50):.2f} s | "
                            f"{pct(r['lat'], 90):.2f} s | {sum(r['failed'].values())}{f' ({why})' if why else ''} | "
                            f"**{sum(cpu.values()):.0f}** ({per}) | {load0:.1f} → {os.getloadavg()[0]:.1f} |")
                print(rows[-1], flush=True)
                stage_rows.append(f"| {n} | {stages(r['stamps'], a.model_s)} |")
                print(stage_rows[-1], flush=True)
        rss = ", ".join(f"{k} {e2e.peak_rss_mib(p):.0f}" for k, p in pids.items())
    finally:
        stack.stop()
        model.stop()
    text = f"""
## 4. Throughput under concurrent load (`bench/throughput.py`, model {a.model_s:g} s per call)

Command: `python -m bench.throughput --concurrent {a.concurrent} --model-s {a.model_s:g} --help-s {help_s:g} --rounds {a.rounds}` ·
machine: {machine()}

One burst of N concurrent two-turn runs (kb_search, then the answer; each model call {a.model_s:g} s before its
first token) through the embedded stack with every service and the product defaults; runs/s = completed runs /
seconds from the burst's start to its last terminal event. Everything (broker, Redis, services, model, clients)
shares the machine's cores.

| concurrent runs | runs/s | latency p50 | p90 | failed | CPU ms per run: stack (each process) | load |
| --- | --- | --- | --- | --- | --- | --- |
{chr(10).join(rows)}

Where a run's time goes, p50 per stage in ms (from the client's SSE stream; the model's own {a.model_s:g} s taken out
of the two stages that hold a model call, so they show the orchestrator's queue and overhead around it):

| concurrent runs | stages |
| --- | --- |
{chr(10).join(stage_rows)}

Peak RSS (MiB): {rss}.
"""
    print(text) if a.no_write else write_section("throughput", text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--concurrent", default="50,200", help="runs per burst, one row each")
    ap.add_argument("--model-s", type=float, default=1.0, help="the scripted model's delay before each call's first token (seconds)")
    ap.add_argument("--help-s", type=float, default=None,
                    help="the delay of the retriever's rewrite and rerank calls to the model (seconds; default: --model-s)")
    ap.add_argument("--rounds", type=int, default=1, help="times each row runs")
    ap.add_argument("--no-write", action="store_true", help="print only, leave docs/benchmarks.md alone")
    burst_main(ap.parse_args())


if __name__ == "__main__":
    main()
