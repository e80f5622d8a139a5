"""Flame graphs of every Python service for the 200-session two-turn run: where each service's CPU goes.

    python -m bench.profile_services [--sessions 200] [--seconds 20] [--rate 50] [--out docs/profiles]

Starts the embedded stack with every service over ``bench.e2e``'s three real laws and its scripted model
(a ``kb_search`` call, then the answer, each after ``--model-delay-s``), warms up with 10 sessions, then
runs ``--sessions`` closed-loop sessions of two-turn runs for ``--seconds`` while ``py-spy record`` (a
locked dev dependency) samples each Python service process at ``--rate`` Hz, idle samples left out.
Writes one SVG flame graph per service (``OUT/SERVICE.svg``: open it in a browser, a box's width is its
share of that process's CPU samples) and prints runs/s, CPU ms per run of every process (``/proc``) and
each service's samples per run. The broker (tansu) and Redis are not Python: their CPU is in the table,
not in a graph. py-spy needs ptrace rights over the services (root, or ``kernel.yama.ptrace_scope=0``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import cpu_s, machine
from bench import e2e
from bench.e2e import KB_QUESTION, pids_of, script, start
from bench.throughput import load
from testkit.scripted_model import ScriptedModel

PYTHON_SERVICES = ("gateway", "orchestrator", "retriever", "web", "sandbox", "mcp")
"""Service processes py-spy can read (a replica's key is ``name`` or ``name-K``)."""


def py_spy() -> str:
    """The path of the ``py-spy`` binary beside this interpreter (the dev install), else on PATH;
    raises ``SystemExit`` naming the install command when there is none."""
    found = Path(sys.executable).with_name("py-spy")
    if found.exists():
        return str(found)
    if (on_path := shutil.which("py-spy")) is not None:
        return on_path
    raise SystemExit("py-spy is not installed: python3 -c 'import bootstrap; bootstrap.install(dev=True)'")


def record(pids: dict[str, int], seconds: float, rate: int, out: Path) -> dict[str, subprocess.Popen]:
    """Start one ``py-spy record`` per Python service process, writing ``out/NAME.svg``."""
    out.mkdir(parents=True, exist_ok=True)
    spy = py_spy()
    return {name: subprocess.Popen([spy, "record", "-p", str(pid), "-d", str(int(seconds)), "-r", str(rate),
                                    "-f", "flamegraph", "-o", str(out / f"{name}.svg"), "--nonblocking"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            for name, pid in pids.items() if name.split("-")[0] in PYTHON_SERVICES}


def retitle(svg: Path, title: str) -> None:
    """Replace the graph's title (py-spy writes its own command line there, with this machine's paths)."""
    text = svg.read_text()
    start = text.find('<text id="title"')
    if start >= 0:
        opened, closed = text.index(">", start) + 1, text.index("</text>", start)
        svg.write_text(text[:opened] + title + text[closed:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--rate", type=int, default=50, help="samples per second per process")
    ap.add_argument("--model-delay-s", type=float, default=1.0)
    ap.add_argument("--out", type=Path, default=Path("docs/profiles"))
    a = ap.parse_args()
    e2e.DELAY["s"] = a.model_delay_s
    model = ScriptedModel(default=script).start()
    stack = start(Path(tempfile.mkdtemp(prefix="conduit-profile-")), model)
    question = KB_QUESTION + "（{i}）"
    try:
        asyncio.run(load(stack.gateway_url, stack.admin_key, 10, 5, question))  # warm up
        pids = pids_of(stack)
        spies = record(pids, a.seconds, a.rate, a.out)
        before, load0 = {k: cpu_s(p) for k, p in pids.items()}, os.getloadavg()[0]
        r = asyncio.run(load(stack.gateway_url, stack.admin_key, a.sessions, a.seconds, question))
        after = {k: cpu_s(p) for k, p in pids.items()}
        runs = max(1, len(r["lat"]))
        for name, spy in spies.items():
            _, err = spy.communicate(timeout=a.seconds + 60)
            if spy.returncode != 0:
                print(f"  py-spy {name}: exit {spy.returncode}: {err.decode()[-300:]}")
            elif (svg := a.out / f"{name}.svg").exists():
                retitle(svg, f"{name}: {a.sessions} sessions of two-turn kb_search runs, {a.seconds:g} s, "
                             f"{a.rate} Hz (python -m bench.profile_services)")
    finally:
        stack.stop()
        model.stop()
    print(f"{a.sessions} sessions, {a.seconds:g} s: {r['rate']:.1f} runs/s, {r['failed']} failed · machine: {machine()}"
          f" · load (1 min) {load0:.1f} → {os.getloadavg()[0]:.1f} · {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    for name in sorted(after, key=lambda k: before[k] - after[k]):
        svg = a.out / f"{name}.svg"
        print(f"  {name}: {(after[name] - before[name]) * 1000 / runs:.1f} ms CPU per run"
              + (f", flame graph {svg}" if svg.exists() else ""))


if __name__ == "__main__":
    main()
