"""Where a returning user's first token waits: the spans of each question, a returning user beside a new one.

    python -m bench.ttft_stages [--n 40] [--seed 20] [--gap-ms 0]

``bench.e2e``'s stack (every service, the retriever over its three laws, the scripted model answering at once)
with tracing on (rules O5-O7) to a local OTLP receiver (``testkit.otlp_receiver``), and two users asking plain
questions in turn, the order swapped every pair:

- **returning**: the tenant admin of ``default``, who first asks ``--seed`` questions, so the memory holds their
  episodes and every question of theirs sends a recall (rule M13);
- **new**: a member of the tenant ``fresh``, for which long-term memory is off (``CONDUIT_MEMORY_OFF_TENANTS``):
  nothing is recalled or remembered (rule M8), as a new user is served.

Per question: the client's time to first token minus the scripted model's own delay (ms), and every span of the
question's trace as its start and end, in ms from the start of the gateway's ``task create`` span. The report
gives, per span (service and name) and user, the p50 of both, and the p50 difference returning − new: the first
row where the difference grows is the stage that holds the returning user's first token back. ``--gap-ms``: a
pause after every question (background work after an answer, e.g. the episode's indexing, then runs alone).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import httpx

from bench import e2e
from bench.common import machine, pct
from bench.stackbench import NO_RATE_LIMITS
from conduit.runtime.settings import Settings
from ops import infra
from ops.stack import Stack
from testkit.otlp_receiver import OtlpReceiver, ReceivedSpan
from testkit.scripted_model import ScriptedModel
from testkit.stack import make_key

USERS = ("returning", "new")
TASK_ID = re.compile(rb'"task_id": ?"([^"]+)"')


def start(data_dir: Path, model: ScriptedModel, receiver: OtlpReceiver) -> Stack:
    """Ingest ``e2e.LAWS`` and start every service, exporting spans to ``receiver`` (batches every 100 ms)."""
    from services.retriever.ingest import ingest_law_db

    settings = Settings(data_dir=data_dir, embedded_kafka_port=infra.free_port(), embedded_redis_port=infra.free_port(),
                        gateway_port=infra.free_port())
    ingest_law_db(settings, law_names=e2e.LAWS, progress=False)
    env = {"OPENAI_BASE_URL": model.base_url, "OPENAI_API_KEY": "bench", "CONDUIT_MODEL": "scripted",
           "CONDUIT_LOG_LEVEL": "WARNING", "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.base_url,
           "OTEL_BSP_SCHEDULE_DELAY": "100", "CONDUIT_MEMORY_OFF_TENANTS": '["fresh"]', **NO_RATE_LIMITS}
    return Stack(settings, extra_env=env).start()


async def ask(client: e2e.Lean, model: ScriptedModel, i: int) -> tuple[float, str]:
    """One plain question: (TTFT minus the model's own first-token delay in ms, the task's id)."""
    own = len(model.first_token_s)
    first, _, lines = await client.post("/v1/ask", {"question": f"stage {i}: 增值税的征收率是多少？"})
    found = next((m.group(1).decode() for line in lines if (m := TASK_ID.search(line))), "")
    return ((first or 0) - model.first_token_s[own]) * 1000, found


def stages(spans: list[ReceivedSpan], task_id: str) -> dict[str, tuple[float, float]] | None:
    """``service name`` → (start, end) in ms from the gateway's ``task create`` span's start, for the trace of
    ``task_id``; the first span of each name (None when the trace has no ``task create`` yet)."""
    root = next((s for s in spans if s.name == "task create" and s.attributes.get("conduit.task_id") == task_id), None)
    if root is None:
        return None
    out: dict[str, tuple[float, float]] = {}
    for s in sorted((s for s in spans if s.trace_id == root.trace_id), key=lambda s: s.start_ns):
        out.setdefault(f"{s.service} · {s.name}", ((s.start_ns - root.start_ns) / 1e6, (s.end_ns - root.start_ns) / 1e6))
    return out


async def run(a: argparse.Namespace, stack: Stack, model: ScriptedModel, receiver: OtlpReceiver) -> dict:
    """Seed the returning user, then ``a.n`` pairs; the overheads and the stages of each user's questions."""
    keys = {"returning": stack.admin_key, "new": await make_key(stack.settings.store.url(), tenant="fresh",
                                                                user="newcomer", role="member")}
    clients = {u: e2e.Lean(stack.gateway_url, keys[u]) for u in USERS}
    for i in range(a.seed):
        await ask(clients["returning"], model, -i - 1)
    await asyncio.sleep(2)  # the seed's episodes indexed
    ttft: dict[str, list[float]] = defaultdict(list)
    tasks: dict[str, list[str]] = defaultdict(list)
    for i in range(a.n + 3):
        for user in (USERS if i % 2 else USERS[::-1]):
            overhead, task_id = await ask(clients[user], model, i)
            if i >= 3:  # warm-up
                ttft[user].append(overhead)
                tasks[user].append(task_id)
            await asyncio.sleep(a.gap_ms / 1000)
    await asyncio.sleep(2)  # the last spans exported
    for c in clients.values():
        await c.close()
    spans = receiver.spans()
    by_user = {u: [st for t in tasks[u] if (st := stages(spans, t))] for u in USERS}
    recall_parts: dict[str, list[float]] = defaultdict(list)
    for sp in spans:
        if sp.name == "memory recall" and sp.attributes.get("conduit.task_id") in tasks["returning"]:
            for k, v in sp.attributes.items():
                if k.startswith("conduit.recall.") and isinstance(v, (int, float)) and not isinstance(v, bool):
                    recall_parts[k.removeprefix("conduit.recall.")].append(float(v))
    return {"ttft": ttft, "stages": by_user, "waits": await recall_waits(stack, tasks["returning"]),
            "recall_parts": recall_parts}


async def recall_waits(stack: Stack, task_ids: list[str]) -> list[float]:
    """The recall's wait in each task (ms): its trace's ``lookup_ms`` (``GET /v1/tasks/{id}/trace``)."""
    waits = []
    async with httpx.AsyncClient(base_url=stack.gateway_url, headers={"Authorization": f"Bearer {stack.admin_key}"},
                                 timeout=30) as c:
        for task_id in task_ids:
            found = re.search(r'"lookup_ms": ?([0-9.]+)', (await c.get(f"/v1/tasks/{task_id}/trace")).text)
            if found:
                waits.append(float(found.group(1)))
    return waits


def table(r: dict) -> str:
    """The report's stage table: per span, p50 start / end per user and the returning − new difference."""
    names: dict[str, float] = {}
    for user in USERS:
        for st in r["stages"][user]:
            for name, (s, _) in st.items():
                names.setdefault(name, s)
    rows = ["| span (service · name) | returning: start / end | new: start / end | start, returning − new |",
            "| --- | --- | --- | --- |"]
    for name in sorted(names, key=names.get):
        cells, starts = [], {}
        for user in USERS:
            got = [st[name] for st in r["stages"][user] if name in st]
            if not got:
                cells.append("–")
                continue
            starts[user] = pct([g[0] for g in got], 50)
            cells.append(f"{starts[user]:.1f} / {pct([g[1] for g in got], 50):.1f} (n={len(got)})")
        diff = f"{starts['returning'] - starts['new']:+.1f}" if len(starts) == 2 else "–"
        rows.append(f"| {name} | {cells[0]} | {cells[1]} | {diff} |")
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=40, help="measured pairs")
    ap.add_argument("--seed", type=int, default=20, help="questions the returning user asks first")
    ap.add_argument("--gap-ms", type=float, default=0.0, help="pause after every question (ms)")
    a = ap.parse_args()
    model = ScriptedModel(default=e2e.script).start()  # type: ignore[arg-type]  # a Turn source may be a function
    receiver = OtlpReceiver().start()
    load0, started = os.getloadavg()[0], time.strftime("%H:%M", time.gmtime())
    stack = start(Path(tempfile.mkdtemp(prefix="conduit-stages-")), model, receiver)
    try:
        r = asyncio.run(run(a, stack, model, receiver))
    finally:
        stack.stop()
        model.stop()
        receiver.stop()
    print(f"python -m bench.ttft_stages --n {a.n} --seed {a.seed} --gap-ms {a.gap_ms:g} · {machine()} · "
          f"{started} UTC, load (1 min) {load0:.1f} → {os.getloadavg()[0]:.1f}\n")
    for user in USERS:
        v = r["ttft"][user]
        print(f"- TTFT overhead, {user}: p50 {pct(v, 50):.1f}, p90 {pct(v, 90):.1f} ms (n={len(v)})")
    w = r["waits"]
    print(f"- the returning user's wait for the recall's reply (trace `lookup_ms`): p50 {pct(w, 50):.1f}, "
          f"p90 {pct(w, 90):.1f} ms (n={len(w)})" if w else "- no `lookup_ms` in the returning user's traces")
    for k, v in r["recall_parts"].items():
        print(f"- the retriever's recall, {k}: p50 {pct(v, 50):.1f}, p90 {pct(v, 90):.1f}")
    print("\n" + table(r))
    print(json.dumps({u: [round(x, 2) for x in r["ttft"][u]] for u in USERS}))


if __name__ == "__main__":
    main()
