"""One setting's two values side by side in one checkout: closed-loop two-turn runs, a fresh stack per row.

    python -m bench.setting_ab --setting CONDUIT_ORCHESTRATOR_CONCURRENCY --values 32,1 [--sessions 200] [--seconds 20] [--rounds 2]
    python -m bench.setting_ab --setting scale --values "orchestrator=1;orchestrator=2"   # replicas (``conduit up --scale``)

``bench.e2e``'s stack (every service, 3 real laws) and runs (a ``kb_search`` call, then the answer; 1 s model
delay), the values alternated and their order reversed every round, so a shared, noisy machine loads both alike.
Per row: completed runs/s, latency p50 / p90, the questions the orchestrator's sweeper had to start because
the bus had not delivered them within ``QUESTION_RESEND_S`` (rule G4), CPU ms per completed run of the
orchestrator and of the whole stack (from ``/proc``), and the load average. Prints a markdown table.
``--setting scale`` compares replica counts instead (values separated by ``;``, each a ``--scale`` spec); the
CPU column is then that of the scaled service (``orchestrator=…``: the orchestrator, ``retriever=…``: the
retriever, rule K10), summed over its replicas with each replica's share in brackets, and the sweeper count
is read from every orchestrator replica's log.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
from pathlib import Path

from bench import e2e
from ops.stack import parse_scale
from testkit.scripted_model import ScriptedModel

SWEPT = "the bus did not deliver"
"""The orchestrator's log line for a question its sweeper started (rule G4)."""


def swept_count(stack) -> int:
    """Questions the orchestrators' sweepers started so far (every replica's log)."""
    logs = (Path(stack.settings.stack.data_dir) / "logs").glob("orchestrator*.log")
    return sum(p.read_text(errors="replace").count(SWEPT) for p in logs)


def measured_service(setting: str, values: list[str]) -> str:
    """The service whose CPU the table shows: the one ``--setting scale`` values name (the first), else the orchestrator."""
    if setting != "scale":
        return "orchestrator"
    return next((name for v in values for name in parse_scale(v)), "orchestrator")


def service_cpu(cpu: dict[str, float], service: str, per: float) -> str:
    """``"45"`` for one process of ``service``, ``"45 (23 + 22)"`` for replicas (CPU seconds in ``cpu``
    keyed ``service``, ``service-2``...; ``per``: completed runs / 1000, so the figures are ms per run)."""
    mine = [v / per for k, v in cpu.items() if k == service or k.startswith(f"{service}-")]
    total = f"{sum(mine):.0f}"
    return total if len(mine) <= 1 else f"{total} ({' + '.join(f'{v:.0f}' for v in mine)})"


def row(setting: str, value: str, sessions: int, seconds: float, service: str = "orchestrator") -> str:
    """One fresh stack with ``setting=value``: ``sessions`` closed-loop runs, counted in a ``seconds`` window
    after a warm-up in which every session finished one run (``e2e.closed_loop``); the CPU column shows
    ``service``'s processes."""
    scale = parse_scale(value) if setting == "scale" else None
    if scale is None:
        os.environ[setting] = value  # the stack's processes inherit it
    model = ScriptedModel(default=e2e.script).start()  # type: ignore[arg-type]
    stack = e2e.start(Path(tempfile.mkdtemp(prefix="conduit-setting-ab-")), model, scale)
    try:
        e2e.DELAY["s"] = 1.0
        pids = e2e.pids_of(stack)
        load0, swept0 = os.getloadavg()[0], swept_count(stack)
        n, lat, cpu = asyncio.run(e2e.closed_loop(lambda: e2e.ConduitRun(stack), sessions, seconds, pids))
        swept = swept_count(stack) - swept0
        per = max(n, 1) / 1000
        return (f"| {value} | {n / seconds:.1f} | {e2e.pct(lat, 50):.2f} s | {e2e.pct(lat, 90):.2f} s | {swept} | "
                f"{service_cpu(cpu, service, per)} / {sum(cpu.values()) / per:.0f} | "
                f"{load0:.1f} → {os.getloadavg()[0]:.1f} |")
    finally:
        stack.stop()
        model.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--setting", required=True, help="environment variable, e.g. CONDUIT_ORCHESTRATOR_CONCURRENCY, or `scale`")
    ap.add_argument("--values", required=True, help="comma-separated values to compare")
    ap.add_argument("--sessions", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    values = a.values.split(";" if a.setting == "scale" else ",")
    service = measured_service(a.setting, values)
    print(f"| {a.setting} | runs/s | latency p50 | p90 | questions the sweeper started | CPU ms per run: {service} / stack | load |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in range(a.rounds):
        for value in values if r % 2 == 0 else values[::-1]:
            print(row(a.setting, value, a.sessions, a.seconds, service), flush=True)


if __name__ == "__main__":
    main()
