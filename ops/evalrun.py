"""``conduit evals run`` (docs/evals.md): the golden set (rule E11), the memory suite, the retrieval gate (rule E12)
and the offline suites of ``conduit evals policy`` (guardrails, routing), against a gateway or a private stack.

Without ``--url`` a private stack is started: the golden scripted model as a process of its own
(``python -m testkit.golden_model``: a process, not an import, since nothing that ships imports the test support),
tansu, redis-server and ``golden.SERVICES`` on free ports, the golden laws and documents ingested, a key for the
memory suite's user. With ``--url`` the golden behaviour only means something when that stack's model is the golden
scripted model; the memory suite needs ``--memory-key`` (its user's memory is deleted first).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from ops import golden
from ops.gates import Gate

SUITES = ("golden", "memory", "retrieval", "guardrails", "routing")
"""Every suite of ``conduit evals run``, in the order they run."""


@dataclass
class Target:
    """Where the stack suites run: the gateway, the key of the cases and the memory suite's key (or None)."""

    base: str
    key: str | None
    memory_key: str | None = None


@dataclass
class Outcome:
    """What a run found: the golden cases' results and every other gate."""

    results: list[golden.CaseResult] = field(default_factory=list)
    gates: list[Gate] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """True when every case passed pass^k and every gate passed (and something ran)."""
        return bool(self.results or self.gates) and all(r.passed for r in self.results) and all(
            g.passed for g in self.gates)


@contextmanager
def private_stack(path: Path) -> Iterator[Target]:
    """Start the golden model process and a private stack for the golden file ``path``; stop both on exit."""
    from conduit.records import apikeys
    from conduit.runtime.settings import Settings
    from ops import infra
    from ops.stack import Stack
    from services.retriever.ingest import ingest_law_db

    data = golden.load(path)
    model = subprocess.Popen([sys.executable, "-m", "testkit.golden_model", "--golden", str(path)],
                             stdout=subprocess.PIPE, text=True, cwd=golden.ROOT)
    stack = None
    try:
        urls = json.loads(model.stdout.readline() if model.stdout else "{}")
        settings = Settings(data_dir=Path(tempfile.mkdtemp(prefix="conduit-evals-")), gateway_port=infra.free_port(),
                            embedded_kafka_port=infra.free_port(), embedded_redis_port=infra.free_port())
        ingest_law_db(settings, law_names=golden.laws_of(data["cases"]), progress=False)
        stack = Stack(settings, services=golden.SERVICES,
                      extra_env=golden.stack_env(urls["base_url"], urls["search_url"])).start()
        golden.upload(stack.gateway_url, stack.admin_key, data["documents"])

        async def member_key() -> str:
            from redis.asyncio import Redis

            redis = Redis.from_url(stack.settings.store.url())
            try:
                return (await apikeys.create(redis, "default", "memory-eval", "member", None, label="evals"))[0]
            finally:
                await redis.aclose()

        yield Target(stack.gateway_url, stack.admin_key, asyncio.run(member_key()))
    finally:
        if stack is not None:
            stack.stop()
        model.terminate()
        model.wait(10)


def run(target: Target | None, suites: tuple[str, ...], k: int, path: Path = golden.GOLDEN,
        only: tuple[str, ...] = ()) -> Outcome:
    """Run ``suites`` (``SUITES`` names) against ``target`` (None: a private stack when a stack suite is asked);
    ``only``: just these golden case ids."""
    from ops import policy_evals, retrieval_gate

    out = Outcome()
    if "guardrails" in suites:
        out.gates += policy_evals.guardrail_gates()
    if "routing" in suites:
        out.gates += policy_evals.routing_gates()
    if "retrieval" in suites:
        from conduit.runtime.settings import Settings

        out.gates += retrieval_gate.run(Settings(data_dir=Path(tempfile.mkdtemp(prefix="conduit-gate-"))))
    if not {"golden", "memory"} & set(suites):
        return out
    if target is None:
        with private_stack(path) as own:
            return _stack_suites(own, suites, k, path, only, out)
    return _stack_suites(target, suites, k, path, only, out)


def _stack_suites(t: Target, suites: tuple[str, ...], k: int, path: Path, only: tuple[str, ...],
                  out: Outcome) -> Outcome:
    from ops import memory_evals

    if "golden" in suites:
        cases = [c for c in golden.load(path)["cases"] if not only or c["id"] in only]
        out.results = golden.run(t.base, t.key, cases, k=k)
    if "memory" in suites and t.memory_key:
        out.gates += memory_evals.run(t.base, t.memory_key)
    return out
