"""Short form of ``bench/throughput.py`` (issue 41): one burst of concurrent two-turn runs through the embedded
stack with every service and the product defaults, each model call 1 s before its first token, the retriever's
rewrite and rerank calls to the model (rules K12, K13) too.

The gate is set to catch a halving, not to measure: on this 2-core machine the full benchmark does 8 runs/s
at 50 concurrent (docs/benchmarks.md, "Throughput under concurrent load"), so the floor is 2.5 runs/s, which also
holds on a machine about three times slower. A cap that serialises independent tasks fails it: the default
pool of 6 search threads (``retriever_concurrency`` back at 4) did 1.7 runs/s, one model step or one search at
a time would take over 100 s. Every run must end with ``task.completed``.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from bench import e2e
from bench.throughput import burst, scripted_model

RUNS = 50
FLOOR_RUNS_PER_S = 2.5


def test_burst_of_concurrent_runs_keeps_its_throughput() -> None:
    model = scripted_model(1.0, 1.0)
    stack = e2e.start(Path(tempfile.mkdtemp(prefix="conduit-throughput-test-")), model)
    try:
        asyncio.run(burst(stack, 5, first=10**6))  # warm-up: first searches, connections
        r = asyncio.run(burst(stack, RUNS))
    finally:
        stack.stop()
        model.stop()
    assert r["failed"] == {}, r["failed"]
    assert len(r["lat"]) == RUNS
    rate = RUNS / r["makespan"]
    assert rate >= FLOOR_RUNS_PER_S, f"{rate:.1f} runs/s at {RUNS} concurrent (floor {FLOOR_RUNS_PER_S})"
