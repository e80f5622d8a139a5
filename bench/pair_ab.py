"""Two checkouts' stacks side by side, asked in turn request by request, so both meet the same load.

    .venv/bin/python bench/pair_ab.py OTHER_CHECKOUT N [VAR=VALUE ...]

Run from one checkout ("new"): it starts ``bench.e2e``'s stack and a child process in OTHER_CHECKOUT ("old",
with that checkout's own ``.venv``), which starts its own; ``VAR=VALUE`` go into the child's environment only
(the same checkout twice with one setting changed). Then, N times (plus 3 warm-ups), a plain question and a
``kb:`` two-turn run on each side in turn, the order swapped every pair. Per request: time to first token minus
the model's own first-token delay, and the two-turn run's POST → terminal event minus kb_search's own run time
and the model's own first-token delays (ms). Prints p50 / p90 per side and the load average every 10 pairs.
The side that drives the run (this process) comes out a few ms slower whatever its code: run both roles.
"""
from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.getcwd())  # this checkout's bench and conduit, also when run as a file by the child

from bench import e2e  # noqa: E402
from bench.common import pct  # noqa: E402
from testkit.scripted_model import ScriptedModel  # noqa: E402


async def one(c: e2e.Lean, model: ScriptedModel, kind: str, i: int) -> float:
    """One request on this side: the TTFT overhead (``ttft``) or the two-turn run's (``kb``), ms."""
    if kind == "ttft":
        own = len(model.first_token_s)
        first, _, _ = await c.post("/v1/ask", {"question": f"ttft {i}"})
        return ((first or 0) - model.first_token_s[own]) * 1000
    own = len(model.first_token_s)
    _, total, lines = await c.post("/v1/ask", {"question": e2e.KB_QUESTION})
    return total * 1000 - e2e.tool_ms(lines) - sum(model.first_token_s[own:own + 2]) * 1000


async def child(stack, model) -> None:
    """The other side: answer each ``KIND I`` line on stdin with one request's figure; an empty line ends."""
    c = e2e.Lean(stack.gateway_url, stack.admin_key)
    print("ready", flush=True)
    loop = asyncio.get_running_loop()
    while line := (await loop.run_in_executor(None, sys.stdin.readline)).strip():
        kind, i = line.split()
        print(await one(c, model, kind, int(i)), flush=True)
    await c.close()


def send(proc: subprocess.Popen, line: str) -> None:
    """One line to the child (an empty one ends it)."""
    proc.stdin.write(line + "\n")
    proc.stdin.flush()


def readval(proc: subprocess.Popen) -> float:
    """The child's next figure (lines that are not a number, e.g. start-up output, are skipped)."""
    while True:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError("the old side's child ended")
        try:
            return float(line)
        except ValueError:
            continue


async def parent(proc: subprocess.Popen, stack, model: ScriptedModel, n: int) -> None:
    """Drive both sides, pair by pair, and print the figures."""
    out = {(s, k): [] for s in ("new", "old") for k in ("ttft", "kb")}
    loads = [os.getloadavg()[0]]
    try:
        while proc.stdout.readline().strip() != "ready":
            pass
        c = e2e.Lean(stack.gateway_url, stack.admin_key)
        for i in range(n + 3):
            for kind in ("ttft", "kb"):
                order = ("new", "old") if i % 2 == 0 else ("old", "new")
                for side in order:
                    if side == "new":
                        v = await one(c, model, kind, i)
                    else:
                        send(proc, f"{kind} {i}")
                        v = readval(proc)
                    if i >= 3:
                        out[(side, kind)].append(v)
            if i % 10 == 0:
                loads.append(os.getloadavg()[0])
        await c.close()
    finally:
        send(proc, "")
        proc.wait(60)
    loads.append(os.getloadavg()[0])
    print(f"n={n}, load (1 min) " + " → ".join(f"{x:.1f}" for x in loads))
    for kind, what in (("ttft", "time to first token minus the model's own"),
                       ("kb", "two-turn run minus kb_search and the model's own")):
        for side in ("new", "old"):
            v = out[(side, kind)]
            print(f"{what:50s} {side}: p50 {pct(v, 50):6.1f}  p90 {pct(v, 90):6.1f} ms")


if __name__ == "__main__":
    child_mode = sys.argv[1] == "--child"
    if not child_mode:
        extra = dict(kv.split("=", 1) for kv in sys.argv[3:])  # the child's environment only (e.g. a setting)
        proc = subprocess.Popen([f"{sys.argv[1]}/.venv/bin/python", __file__, "--child"], cwd=sys.argv[1], text=True,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, env={**os.environ, **extra})
    model = ScriptedModel(default=e2e.script).start()
    stack = e2e.start(Path(tempfile.mkdtemp(prefix="conduit-pair-")), model)
    try:
        asyncio.run(child(stack, model) if child_mode else parent(proc, stack, model, int(sys.argv[2])))
    finally:
        stack.stop()
        model.stop()
