"""Benchmark 2: time-to-first-token overhead of Conduit.

    python -m bench.ttft [--n 40] [--model-delay-ms 200]

The embedded stack (tansu, redis-server, orchestrator, gateway as processes) with the
scripted OpenAI-compatible model answering directly (no tool) after ``--model-delay-ms``.
For each of ``--n`` sequential questions: ``POST /v1/ask`` → first ``answer.delta`` at the
client, minus the model's own first-token delay as the scripted model measured it (from
the request reaching its handler to its first token; ``ScriptedModel.first_token_s``). The overhead covers the gateway
(record, log, Kafka publish), the bus hop to the orchestrator, its checkpoint and lease,
the model HTTP call setup, the Redis log append and the SSE hop back.
"""

from __future__ import annotations

import argparse
import asyncio
import time

import httpx

from bench.common import machine, pct, write_section
from bench.stackbench import model_stack, sse_events
from conduit.settings import Settings
from conduit.testing.scripted_model import Turn


async def measure(base: str, n: int, warmup: int) -> list[tuple[int, float]]:
    """Return ``(request index, seconds from POST to first answer.delta)`` of the measured requests."""
    out = []
    async with httpx.AsyncClient(base_url=base) as client:
        for i in range(warmup + n):
            t0 = time.perf_counter()
            first = None
            async for ev, _ in sse_events(client, "POST", "/v1/ask", json={"question": f"ttft {i}"}):
                if ev == "answer.delta" and first is None:
                    first = time.perf_counter() - t0
                if ev.startswith("task.") and ev != "task.accepted":
                    break
            if i >= warmup and first is not None:
                out.append((i, first))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--model-delay-ms", type=float, default=200.0)
    a = ap.parse_args()
    delay = a.model_delay_ms / 1000
    with model_stack(Turn(content="这是基准测试的回答。" * 4, chunks=8, delay_s=delay)) as (stack, model):
        measured = asyncio.run(measure(stack.gateway_url, a.n, a.warmup))
    # one model call per question, in order: request i's own first-token delay is first_token_s[i]
    ttft = [t for _, t in measured]
    own = [model.first_token_s[i] for i, _ in measured]
    over = [(t - m) * 1000 for (_, t), m in zip(measured, own, strict=True)]
    verdict = "met" if pct(over, 50) <= 15 else "missed"
    write_section("ttft", f"""
## 2. Time-to-first-token overhead

Command: `python -m bench.ttft --n {a.n} --model-delay-ms {a.model_delay_ms:g}` · machine: {machine()}

Sequential `POST /v1/ask` through the embedded stack (gateway → Kafka → orchestrator → scripted model → Redis log → SSE);
the scripted model waits {a.model_delay_ms:g} ms before its first token; its own first-token delay, measured
in the model server, is subtracted per request (p50 {pct(own, 50) * 1000:.1f} ms).
Broker fetch wait `fetch_max_wait_ms` = {Settings().kafka_fetch_max_wait_ms} (tansu does not wake waiting fetches).

| figure | value |
| --- | --- |
| POST → first `answer.delta` | p50 {pct(ttft, 50) * 1000:.1f} ms, p99 {pct(ttft, 99) * 1000:.1f} ms (n={len(ttft)}) |
| **overhead (minus the model's own delay)** | **p50 {pct(over, 50):.1f} ms**, p90 {pct(over, 90):.1f} ms, p99 {pct(over, 99):.1f} ms (aim p50 ≤ 15: {verdict}) |
""")


if __name__ == "__main__":
    main()
