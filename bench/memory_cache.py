"""Benchmark: semantic-cache hit vs full answer, and the memory recall before each task (issue 20).

    python -m bench.memory_cache [--n 20] [--model-delay-ms 300]

The embedded stack (tansu, redis-server, retriever, orchestrator, gateway as processes) with the
scripted model: every first call asks for one ``kb_search``, the second writes a cited answer, each
after ``--model-delay-ms``. One tenant document is ingested. Alternating, ``--n`` times each, in a
new session every time: the same question sent with ``Cache-Control: no-cache`` (the full answer:
recall, two model calls, one search) and without it (a cache hit). Reported: the client's time from
``POST /v1/ask`` to ``task.completed``, the task's own ``latency_ms``, and the recall's time as the
task's trace records it (``phase: memory``, ``lookup_ms``: publish to the retriever, embed, search the
user's items and the tenant's cache, join with Redis, reply), with the user's memory growing by one
episode per full answer.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

import httpx

from bench.common import machine, pct, write_section
from bench.stackbench import model_stack, sse_events
from testkit.scripted_model import Turn

QUESTION = "Nebula 员工市内打车每次能报销多少钱？"
DOC = {"document_id": "nebula-taxi", "title": "Nebula 出租车报销规定",
       "text": "# Nebula 出租车报销规定\n\nNebula 公司员工市内打车，每次报销上限为八十元，超出部分需说明事由。\n"}


def scripted(delay_s: float):
    def turn(body: dict) -> Turn:
        if not any(m["role"] == "tool" for m in body["messages"]):
            return Turn(tool_calls=[{"name": "kb_search", "arguments": {"query": QUESTION, "reason": "查制度"}}],
                        delay_s=delay_s)
        return Turn(content="每次上限为八十元[1]，超出部分需说明事由[1]。", delay_s=delay_s)
    return turn


async def one(client: httpx.AsyncClient, headers: dict[str, str]) -> tuple[float, dict, str]:
    """(client seconds to task.completed, its data, task id) of one question in a new session."""
    t0 = time.perf_counter()
    task_id, done = "", {}
    async for event, data in sse_events(client, "POST", "/v1/ask", json={"question": QUESTION}, headers=headers):
        if event == "task.accepted":
            task_id = data.get("task_id", "")
        if event in ("task.completed", "task.failed"):
            done = data
            break
    return time.perf_counter() - t0, done, task_id


def run(n: int, delay_ms: float) -> str:
    """Start the stack (outside any event loop: it runs its own), measure, and return the section."""
    with model_stack(scripted(delay_ms / 1000), ("retriever", "orchestrator", "gateway")) as (stack, _model):
        rows = asyncio.run(measure(stack.gateway_url, stack.admin_key, n))
    return report(rows, n, delay_ms)


async def measure(base: str, key: str, n: int) -> dict[str, list[tuple[float, float, float | None]]]:
    """(client ms, task latency_ms, recall lookup_ms) of each full answer and each cache hit."""
    auth = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=base, headers=auth, timeout=120) as client:
        assert (await client.post("/v1/documents", json=DOC)).status_code == 202
        for _ in range(120):
            if (await client.get(f"/v1/documents/{DOC['document_id']}")).json()["status"] == "ingested":
                break
            await asyncio.sleep(0.5)
        await one(client, {})  # warm-up, and the entry the hits replay
        await asyncio.sleep(1.0)
        rows: dict[str, list[tuple[float, float, float | None]]] = {"full": [], "hit": [], "hit2": []}
        for _ in range(n):
            for kind, headers in (("full", {"Cache-Control": "no-cache"}), ("hit", {}), ("hit2", {})):
                took, done, task_id = await one(client, headers)
                want = "bypass" if kind == "full" else "hit"
                if done.get("cache") != want:
                    continue
                view = (await client.get(f"/v1/tasks/{task_id}")).json() if task_id else {}
                lookup = next((t.get("lookup_ms") for t in view.get("trace", []) if t.get("phase") == "memory"), None)
                rows[kind].append((took * 1000, done["latency_ms"], lookup))
    return rows


def _p(values: list[float]) -> str:
    return f"{pct(values, 50):.1f} / {pct(values, 90):.1f} ms" if values else "n/a"


def report(rows: dict[str, list[tuple[float, float, float | None]]], n: int, delay_ms: float) -> str:
    lines = [
        "## 6. Semantic cache hit vs full answer, memory recall (issue 20)", "",
        f"`python -m bench.memory_cache --n {n} --model-delay-ms {delay_ms:g}`, run "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average {os.getloadavg()[0]:.1f}; {machine()}.",
        "Same question, a new session each time; the full answer is forced with `Cache-Control: no-cache` "
        f"(recall, a `kb_search`, two scripted model calls of {delay_ms:g} ms each to first token). "
        "p50 / p90:", "",
        "| answer | samples | client POST -> task.completed | task.completed latency_ms | recall (trace lookup_ms) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for kind, label in (("full", "full answer (cache bypassed)"), ("hit", "cache hit right after a full answer"),
                        ("hit2", "cache hit after a cache hit")):
        r = rows[kind]
        lookups = [x for *_, x in r if x is not None]
        lines.append(f"| {label} | {len(r)} | {_p([a for a, *_ in r])} | {_p([b for _, b, _ in r])} | {_p(lookups)} |")
    lines += ["", "The recall runs before every task (it is also the cache lookup of a first turn): one bus "
              "round trip to the retriever, one query embedding (USE), two filtered exact searches in the memory "
              "shard and one Redis read. The user's memory grows by one episode per full answer. A full answer "
              "ends by sending its episode and cache entry to the retriever to embed and store; the retriever's "
              "one consumer handles them in order, so the recall of the task right after it waits for that write "
              "(the first hit row); the second hit row has no write queued ahead of it."]
    return "\n".join(lines)


def main() -> None:
    """Run the benchmark and write its section of ``docs/benchmarks.md``."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--model-delay-ms", type=float, default=300.0)
    args = ap.parse_args()
    section = run(args.n, args.model_delay_ms)
    print(section)
    write_section("memory_cache", section)


if __name__ == "__main__":
    main()
