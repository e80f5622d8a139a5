"""Chaos suite: tasks keep their promises while processes of the embedded stack are killed.

A supervised embedded stack (tansu, Redis with its append-only file, two orchestrator
replicas, two web tool service replicas, the gateway; ``ops.supervisor``) answers tasks
through the scripted model: each task fetches one page with ``web_fetch`` (from a local
site; every ``APPROVAL_EVERY``-th task's URL needs approval) and streams a scripted answer;
tasks belong to several sessions. Meanwhile SIGKILLs land at random moments on the
orchestrator and web replicas and the gateway (clients reconnect with
``Last-Event-ID``, as browsers do), plus one Redis kill and one broker kill; the supervisor
starts each again (a new broker gets its topics again). Counted:

- tasks whose log does not hold exactly one terminal event, or whose client did not get one;
- tool executions per idempotency key, counted where the tool meets the world: page
  requests per task at the local site (each task's one call has its own key);
- answers that differ from the script's;
- time from each kill to recovery (the new process checked in), and restarts done;
- time lost per kill: for each tool call a killed web replica was running (``conduit:toolruns``),
  from the kill to the call's next run elsewhere (rules T8, A23) and to its result, p50 / max, read
  from the web replicas' own log lines.

Modes (``--mode``):

- ``kill`` (default): SIGKILLs at random moments, plus one Redis and one broker kill;
- ``rollout``: like ``kubectl rollout restart``: SIGTERM each replica of each service in turn (web,
  web-2, orchestrator, orchestrator-2, gateway), the next once the last one's replacement checked in,
  for ``--rounds`` rounds, under the same load;
- ``mixed``: the rollout and, at the same time, random SIGKILLs (and the Redis and broker kills).

Usage::

    python -m bench.chaos                 # 100 tasks, 50 kills; writes docs/benchmarks.md
    python -m bench.chaos --mode rollout --rounds 2   # 10 SIGTERMs under load (its own section)
    python -m bench.chaos --tasks 20 --kills 10 --no-write   # the CI form (tests/stack/test_chaos.py)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import signal
import tempfile
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import redis as redis_sync

from bench.common import machine, pct, write_section
from ops import infra
from ops.client import bearer, create_task, stream_task
from ops.stack import Stack
from ops.supervisor import Supervisor
from conduit.records import keys
from conduit.records.taskstore import TaskStore
from conduit.records.taskstream import TaskEventLog
from conduit.runtime import owners
from conduit.runtime.liveness import alive_key
from conduit.runtime.redis_client import make_redis, make_sync
from conduit.runtime.settings import Settings
from testkit.scripted_model import ScriptedModel, Turn
from testkit.site import reply
from contracts.stream import TERMINAL_TYPES

if TYPE_CHECKING:
    from testkit.rediscluster import LocalCluster

APPROVAL_EVERY = 7
"""Every 7th task's page URL contains ``approve``: the policy ``if:url~approve`` asks a person."""
SESSIONS = 6
TARGETS = ("orchestrator", "orchestrator-2", "web", "web-2", "gateway")
"""Processes the SIGKILLs are spread over, and the rollout's order (``--mode rollout``: each in turn);
Redis and the broker get one kill each on top (not in a rollout)."""
ROLLOUT_STEP_S = 8.0
"""Rough seconds one rollout step takes here (SIGTERM, drain, restart, check-in): tasks are spread
over ``rounds * len(TARGETS) * ROLLOUT_STEP_S`` seconds in the rollout mode."""
ROLLOUT_PAUSE_S = 1.0
"""Seconds between a replacement checking in and the next SIGTERM of a rollout."""
RECOVERY_TIMEOUT_S = 120.0
SETTLE_S = 120.0
"""After the last kill, tasks get this long to finish; then the clients give up and the task counts as stuck."""
KILL_EVERY_S = 2.0
"""Mean seconds between two kills; tasks start spread over the whole kill schedule."""
KILLED_MID_CALL_S = 1.0
"""A page request this close to a web replica's or Redis's SIGKILL (seconds) counts as a run that died
mid-call (or could not keep its page, rule W5): the at-least-once floor."""
MIN_SERVING_S = 10.0
"""A restarted process is not killed again before it has served this long. Without it, on a loaded
machine (restarts of 15-25 s at load 20) every target was still recovering but the one that had just
checked in, so each web replica was killed within 2 s of serving again and the tool calls timed out
for want of any serving replica: a measure of the machine's start-up time, not of what a crash loses."""


def needs_approval(n: int) -> bool:
    """Every ``APPROVAL_EVERY``-th measured task (numbers from ``SESSIONS`` on) needs approval."""
    return n >= SESSIONS and n % APPROVAL_EVERY == 0


def answer_for(n: int) -> str:
    """The scripted answer of task ``n`` (what the client must end up with)."""
    return f"第{n}号任务的答案：小规模纳税人征收率为百分之三[1]。"


def page_path(n: int) -> str:
    """The path of task ``n``'s page at the site (``-approve``: its fetch needs approval)."""
    return f"/doc/{n}" + ("-approve" if needs_approval(n) else "")


class Site(ThreadingHTTPServer):
    """A local web site; ``hits`` counts GETs per path (one path per task)."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Page)
        self.base = f"http://127.0.0.1:{self.server_address[1]}"
        self.hits: Counter[str] = Counter()
        self.hit_times: dict[str, list[str]] = {}
        self.hit_epochs: dict[str, list[float]] = {}
        """Per path, the wall-clock time (``HH:MM:SS.mmm``) of each GET, to set beside the kill log."""
        self.lock = threading.Lock()


class _Page(BaseHTTPRequestHandler):
    server: Site

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802
        with self.server.lock:
            self.server.hits[self.path] += 1
            now = time.time()
            self.server.hit_times.setdefault(self.path, []).append(
                time.strftime("%H:%M:%S", time.localtime(now)) + f".{int(now % 1 * 1000):03d}")
            self.server.hit_epochs.setdefault(self.path, []).append(now)
        body = ("<html><head><title>征收率</title></head><body><article><h1>小规模纳税人征收率</h1>"
                + "<p>小规模纳税人适用简易计税方法，征收率为百分之三。</p>" * 6 + "</article></body></html>").encode()
        reply(self, body)


def script(site: Site):  # noqa: ANN201 - a TurnSource
    """The model: first a ``web_fetch`` of the task's page, then (with the tool result) its answer."""

    def turn(body: dict) -> Turn:
        messages = body["messages"]
        last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
        n = int(re.search(r"chaos-(\d+)", str(messages[last_user]["content"])).group(1))
        if any(m["role"] == "tool" for m in messages[last_user:]):
            return Turn(content=answer_for(n), chunks=12, chunk_delay_s=0.03)
        return Turn(tool_calls=[{"name": "web_fetch", "arguments": {"url": site.base + page_path(n), "reason": "查征收率"}}])

    return turn


@dataclass
class TaskOutcome:
    """What one client saw: terminal events received, the answer, replayed duplicates."""

    n: int
    task_id: str = ""
    terminals: list[str] = field(default_factory=list)
    answer: str | None = None
    duplicates: int = 0
    error: str | None = None
    last_event: str | None = None
    tools: list[str] = field(default_factory=list)


def _retry(call, attempts: int = 300):  # noqa: ANN001, ANN202
    """Call ``call()`` until it returns without a transport error or a 5xx (gateway restarting)."""
    for attempt in range(attempts):
        try:
            resp = call()
            if resp.status_code < 500:
                return resp
        except httpx.TransportError:
            pass
        time.sleep(min(1.0, 0.1 * (attempt + 1)))
    raise RuntimeError("gateway did not come back")


def run_client(base: str, key: str, n: int, session_id: str | None, abandon: threading.Event) -> TaskOutcome:
    """One task from a client's side: create it, follow its stream across gateway kills, approve;
    give up (``error="abandoned"``) once ``abandon`` is set and the connection drops."""
    out = TaskOutcome(n)
    created = None
    idempotency_key = uuid.uuid4().hex  # one per question: a retry after a lost 202 must not ask it twice
    for attempt in range(300):
        if abandon.is_set():
            break
        try:
            created = create_task(base, f"chaos-{n}：小规模纳税人的征收率是多少？", session_id, attempts=1, api_key=key,
                                  idempotency_key=idempotency_key)
            break
        except (httpx.TransportError, httpx.HTTPStatusError):
            time.sleep(min(1.0, 0.1 * (attempt + 1)))
    if created is None:
        out.error = "could not create"
        return out
    out.task_id = created["task_id"]
    last: int | None = None
    while not out.terminals:
        if abandon.is_set():
            out.error = "abandoned"
            return out
        try:
            for ev in stream_task(base, out.task_id, last_event_id=last, reconnects=0, read_timeout_s=60, api_key=key):
                if ev.id is not None:
                    out.duplicates += last is not None and ev.id <= last
                    last = ev.id
                out.last_event = ev.event
                if ev.event == "tool.completed":
                    out.tools.append(f"{ev.data.get('outcome')}:{ev.data.get('error_code') or ''}")
                if ev.event == "tool.approval_required":
                    url = f"{base}/v1/tasks/{out.task_id}/approvals/{ev.data['call_id']}"
                    body = {"decision": "approve", "arguments_digest": ev.data["arguments_digest"]}
                    _retry(lambda: httpx.post(url, json=body, timeout=10, headers=bearer(key)))  # noqa: B023
                elif ev.event in TERMINAL_TYPES:
                    out.terminals.append(ev.event)
                    out.answer = ev.data.get("answer")
        except httpx.TransportError:
            time.sleep(0.2)
        except httpx.HTTPStatusError as exc:
            if exc.response.status_code < 500:
                out.error = f"stream {exc.response.status_code}"
                return out
            time.sleep(0.2)
    return out


class Chaos:
    """The stack, its supervisor, the site, the model, and the kill schedule of one run."""

    def __init__(self, tasks: int, kills: int, seed: int, infra_kills: tuple[str, ...] = ("redis", "tansu"),
                 tool_timeout_s: float = 30.0, mode: str = "kill", rounds: int = 0,
                 targets: tuple[str, ...] = TARGETS, cluster: "LocalCluster | None" = None) -> None:
        if mode not in ("kill", "rollout", "mixed"):
            raise ValueError(f"unknown mode {mode!r}")
        self.tasks, self.kills, self.mode, self.rounds, self.targets = tasks, kills, mode, rounds, targets
        if mode == "rollout":
            self.kills, infra_kills = 0, ()
        self.infra_kills, self.tool_timeout_s = infra_kills, tool_timeout_s
        self.rng = random.Random(seed)
        self.site = Site()
        threading.Thread(target=self.site.serve_forever, daemon=True).start()
        self.model = ScriptedModel(default=script(self.site)).start()
        self.data_dir = Path(tempfile.mkdtemp(prefix="conduit-chaos-"))
        self.cluster = cluster  # a local Redis Cluster instead of the embedded Redis ("redis-master": kill one master)
        on_cluster = {"redis_url": cluster.url, "redis_cluster": True} if cluster is not None else {}
        self.settings = Settings(data_dir=self.data_dir, embedded_kafka_port=infra.free_port(),
                                 embedded_redis_port=infra.free_port(), gateway_port=infra.free_port(),
                                 supervisor_max_restarts=1000, supervisor_backoff_base_s=0.2, **on_cluster)
        env = {"OPENAI_BASE_URL": self.model.base_url, "OPENAI_API_KEY": "chaos", "CONDUIT_MODEL": "scripted",
               "CONDUIT_SEARXNG_URL": self.site.base, "CONDUIT_WEB_ALLOW_PRIVATE": "true",
               "CONDUIT_APPROVAL_POLICIES": '{"web_fetch": "if:url~approve", "code_exec": "always"}',
               "CONDUIT_LOG_LEVEL": "INFO", "CONDUIT_TOOL_TIMEOUT_S": str(tool_timeout_s)}
        if cluster is not None:
            env["CONDUIT_REDIS_CLUSTER"] = "true"
        self.stack = Stack(self.settings, services=("web", "orchestrator", "gateway"), extra_env=env,
                           scale={"orchestrator": 2, "web": 2})
        self.recoveries: list[float] = []  # seconds from each SIGKILL to the new process checking in
        self.term_recoveries: list[float] = []  # the same from each SIGTERM (drain and restart)
        self.serving_since: dict[str, float] = {}  # monotonic time each target last checked in after a kill
        self.kill_epochs: dict[str, list[float]] = {}  # wall-clock times of each target's kills
        self.killed: Counter[str] = Counter()
        self.terminated: Counter[str] = Counter()
        self.affected: list[tuple[float, str, str, str]] = []
        """(kill epoch, signal, owner killed, idempotency key) of each call a killed web replica ran."""
        self.busy: set[str] = set()  # targets being stopped or recovering (kills and the rollout never overlap)
        self.busy_lock = threading.Lock()
        self.log: list[str] = []

    def recovered(self, key: str, old_pid: int | None) -> bool:
        """True once ``key`` runs as a new process that serves (checked in / answers)."""
        child = self.stack.children()[key]
        if not child.running or child.pid == old_pid:
            return False
        if key == "redis":
            try:
                return bool(redis_sync.Redis.from_url(self.settings.store.url(), socket_timeout=1).ping())
            except redis_sync.RedisError:
                return False
        if key == "tansu":
            return infra.port_open(self.settings.bus.embedded_kafka_port)
        try:
            with make_sync(self.settings.store, timeout_s=1) as r:
                return bool(r.exists(alive_key(child.name, child.pid)))
        except redis_sync.RedisError:
            return False

    def running_calls(self, pid: int | None) -> list[tuple[str, str]]:
        """``[(owner, idempotency key)]`` of the tool calls process ``pid`` runs now (``keys.TOOL_RUNS``)."""
        try:
            with make_sync(self.settings.store, timeout_s=1) as r:
                runs = [owners.parse_run(m) for runs_key in keys.all_tool_runs() for m in r.zrange(runs_key, 0, -1)]
        except redis_sync.RedisError:
            return []
        return [(o, k) for o, _, k in filter(None, runs) if (p := owners.parse(o)) is not None and p[2] == pid]

    def kill_one(self, key: str, sig: signal.Signals = signal.SIGKILL) -> None:
        """Send ``sig`` (SIGKILL, or SIGTERM in a rollout) to ``key`` and wait until the supervisor
        brought it back; record the time and the tool calls it was running."""
        try:
            self._stop_and_wait(key, sig)
        finally:
            with self.busy_lock:
                self.busy.discard(key)

    def _stop_and_wait(self, key: str, sig: signal.Signals) -> None:
        if key == "redis-master":
            return self._kill_master()
        child = self.stack.children()[key]
        old = child.pid
        running = self.running_calls(old) if key.startswith("web") else []
        killed_at = time.monotonic()
        child.proc.send_signal(sig)
        (self.killed if sig == signal.SIGKILL else self.terminated)[key] += 1
        self.affected += [(time.time(), sig.name, owner, k) for owner, k in running]
        if sig == signal.SIGKILL:
            self.kill_epochs.setdefault(key, []).append(time.time())
        self.log.append(f"{time.strftime('%H:%M:%S')} {sig.name} {key} (pid {old}; {len(running)} call(s) running)")
        while not self.recovered(key, old):
            if time.monotonic() - killed_at > RECOVERY_TIMEOUT_S:
                self.log.append(f"{key} did not recover within {RECOVERY_TIMEOUT_S:.0f} s")
                return
            time.sleep(0.05)
        (self.recoveries if sig == signal.SIGKILL else self.term_recoveries).append(time.monotonic() - killed_at)
        self.serving_since[key] = time.monotonic()

    def _kill_master(self) -> None:
        """SIGKILL one master of the Redis Cluster; wait until its replica took over (no restart)."""
        assert self.cluster is not None, "a redis-master kill needs a cluster"
        killed_at = time.monotonic()
        self.kill_epochs.setdefault("redis-master", []).append(time.time())
        port = self.cluster.kill_master()
        self.killed["redis-master"] += 1
        self.log.append(f"{time.strftime('%H:%M:%S')} SIGKILL redis master :{port}")
        self.cluster.wait_failover(port, timeout_s=RECOVERY_TIMEOUT_S)
        self.recoveries.append(time.monotonic() - killed_at)
        self.log.append(f"{time.strftime('%H:%M:%S')} redis master :{port} replaced by its replica")

    def killer(self) -> None:
        """The kill schedule: ``kills`` SIGKILLs over ``TARGETS`` at random moments (mean ``KILL_EVERY_S``
        apart, never a process still recovering or serving for less than ``MIN_SERVING_S``), plus one
        of Redis and one of the broker."""
        specials = {(i + 1) * self.kills // (len(self.infra_kills) + 1): key for i, key in enumerate(self.infra_kills)}
        recovering: dict[str, threading.Thread] = {}

        def free() -> list[str]:
            now = time.monotonic()
            return [t for t in self.targets if t not in self.busy and now - self.serving_since.get(t, 0.0) >= MIN_SERVING_S]

        for i in range(self.kills):
            time.sleep(self.rng.uniform(0.3, 2 * KILL_EVERY_S - 0.3))
            while True:
                with self.busy_lock:
                    if eligible := free():
                        chosen = [self.rng.choice(eligible)] + ([specials[i]] if i in specials else [])
                        self.busy.update(chosen)
                        break
                time.sleep(0.1)
            for key in chosen:
                recovering[key] = threading.Thread(target=self.kill_one, args=(key,), daemon=True)
                recovering[key].start()
        for t in recovering.values():
            t.join()

    def rollout(self) -> None:
        """``rounds`` rollouts: SIGTERM each target in turn, the next ``ROLLOUT_PAUSE_S`` after the last
        one's replacement checked in (a random kill under way on it is waited for first)."""
        for _ in range(self.rounds):
            for key in self.targets:
                while True:
                    with self.busy_lock:
                        if key not in self.busy:
                            self.busy.add(key)
                            break
                    time.sleep(0.1)
                self.kill_one(key, signal.SIGTERM)
                time.sleep(ROLLOUT_PAUSE_S)

    def schedule_s(self) -> float:
        """Rough seconds the mode's kill schedule lasts (tasks are spread over it)."""
        kills_s = self.kills * KILL_EVERY_S
        rollout_s = self.rounds * len(self.targets) * ROLLOUT_STEP_S if self.mode != "kill" else 0.0
        return max(kills_s, rollout_s)

    def run(self) -> dict:
        """Start, run the tasks under the kill schedule, stop; return the figures."""
        self.stack.start()
        sup = Supervisor(self.stack, log=self.log.append)
        stopping = threading.Event()
        supervising = threading.Thread(target=sup.run, args=(stopping.is_set,), daemon=True)
        supervising.start()
        killing = [threading.Thread(target=fn, daemon=True) for fn, on in
                   ((self.killer, self.mode != "rollout"), (self.rollout, self.mode != "kill")) if on]
        started = time.monotonic()
        pool: ThreadPoolExecutor | None = None
        futures: list = []
        try:
            key = self.stack.admin_key
            sessions = [create_task(self.stack.gateway_url, f"chaos-{s}：开场", None, api_key=key)["session_id"]
                        for s in range(SESSIONS)]
            for t in killing:
                t.start()
            spacing = self.schedule_s() / max(1, self.tasks)  # tasks run all through the kill schedule
            abandon = threading.Event()
            pool = ThreadPoolExecutor(max_workers=16)
            for n in range(self.tasks):
                futures.append(pool.submit(run_client, self.stack.gateway_url, key, SESSIONS + n,
                                           sessions[n % SESSIONS], abandon))
                time.sleep(spacing)
            for t in killing:
                t.join()
            wait(futures, timeout=SETTLE_S)
            abandon.set()  # stuck clients return when the gateway stops below
            elapsed = time.monotonic() - started
        finally:
            stopping.set()
            supervising.join(30)
            logged = {}
            try:
                done_ids = [f.result().task_id for f in futures if f.done() and f.result().task_id]
                logged = asyncio.run(self._terminal_counts(done_ids))
                self.calls = asyncio.run(self._web_calls({f.result().n: f.result().task_id for f in futures
                                                          if f.done() and f.result().task_id}))
            except Exception as exc:  # noqa: BLE001 - Redis gone: the figures say so
                self.log.append(f"cannot read the task logs: {exc!r}")
            self.stack.stop()
            if pool is not None:
                pool.shutdown(wait=True)
            outcomes = [f.result() for f in futures]
            self.model.stop()
            self.site.shutdown()
        return self._figures(outcomes, logged, sup, elapsed)

    async def _terminal_counts(self, task_ids: list[str]) -> dict[str, int]:
        client = make_redis(self.settings.store)
        log = TaskEventLog(client)
        try:
            return {t: sum(e.terminal for e in await log.read(t, count=100_000)) for t in task_ids}
        finally:
            await client.aclose()

    async def _web_calls(self, tasks: dict[int, str]) -> dict[int, list[str]]:
        """Per task ``n`` whose page was not fetched once: its ``web_fetch`` calls as its trace shows
        them (id, outcome, attempts: two ids mean the model step ran again; one id with two attempts,
        a transient failure retried, rule T3; one attempt, one call run twice)."""
        client = make_redis(self.settings.store)
        store = TaskStore(client)
        out: dict[int, list[str]] = {}
        try:
            for n, task_id in tasks.items():
                if self.site.hits[page_path(n)] != 1:
                    view = await store.get(task_id)
                    out[n] = [f"{t.get('call_id')}: {t.get('outcome')} after {t.get('attempts')} attempt(s)"
                              for t in (view.trace if view else []) if t.get("tool") == "web_fetch"]
            return out
        finally:
            await client.aclose()

    def interrupted_runs(self) -> Counter[str]:
        """Per task id, the tool runs its web replicas started and never finished: the process died
        mid-call (a SIGKILL; a clean stop waits for running calls). Read from the services' own
        log lines ``call KEY: runs here (OWNER)`` and ``call KEY: ran (OWNER), ...``."""
        started: Counter[tuple[str, str]] = Counter()
        finished: Counter[tuple[str, str]] = Counter()
        pattern = re.compile(r"call (\w+):\S+: (runs here|ran) \(([^)]+)\)")
        for path in (self.data_dir / "logs").glob("web*.log"):
            for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
                if (m := pattern.search(line)) is not None:
                    (started if m.group(2) == "runs here" else finished)[(m.group(1), m.group(3))] += 1
        out: Counter[str] = Counter()
        for (task_id, owner), n in started.items():
            out[task_id] += max(0, n - finished[(task_id, owner)])
        return out

    def call_lines(self) -> list[tuple[float, str, str, str]]:
        """``(epoch, idempotency key, "runs here" | "ran", owner)`` of the web replicas' call log lines."""
        pattern = re.compile(r"call (\S+): (runs here|ran) \(([^)]+)\)")
        out = []
        for path in (self.data_dir / "logs").glob("web*.log"):
            for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
                if (m := pattern.search(line)) is None or (t := re.search(r'"timestamp": "([^"]+)"', line)) is None:
                    continue
                stamp = datetime.fromisoformat(t.group(1).replace("Z", "+00:00")).timestamp()
                out.append((stamp, m.group(1), m.group(2), m.group(3)))
        return sorted(out)

    def time_lost(self) -> dict[str, dict[str, list[float]]]:
        """Per signal, seconds from each kill to each call it hit running again elsewhere (``rerun``;
        a drained call has none) and to its result (``result``: the first run that ended after it)."""
        lines = self.call_lines()
        out: dict[str, dict[str, list[float]]] = {}
        for killed_at, sig, owner, key in self.affected:
            lost = out.setdefault(sig, {"rerun": [], "result": []})
            rerun = next((t for t, k, what, o in lines if k == key and what == "runs here" and o != owner
                          and t >= killed_at), None)
            result = next((t for t, k, what, _ in lines if k == key and what == "ran" and t >= killed_at), None)
            if rerun is not None:
                lost["rerun"].append(rerun - killed_at)
            if result is not None:
                lost["result"].append(result - killed_at)
        return out

    def _figures(self, outcomes: list[TaskOutcome], logged: dict[str, int], sup: Supervisor, elapsed: float) -> dict:
        bad_terminal = [o.n for o in outcomes if len(o.terminals) != 1 or logged.get(o.task_id) != 1]
        executions = [self.site.hits[page_path(o.n)] for o in outcomes]
        interrupted = self.interrupted_runs()
        # the at-least-once floor (rule T6): a run killed after its request reached the site and
        # before it could keep the page (rule W5) leaves the next run to fetch it again
        # (a run's "runs here" line can die unwritten with it, and a run whose Redis died cannot keep
        # its page: a page request within KILLED_MID_CALL_S of a web replica's or Redis's SIGKILL
        # counts as interrupted too)
        cuts = [t for key, ts in self.kill_epochs.items() if key.startswith(("web", "redis")) for t in ts]
        for o in outcomes:
            cut = sum(1 for hit in self.site.hit_epochs.get(page_path(o.n), [])[:-1]
                      if any(abs(k - hit) < KILLED_MID_CALL_S for k in cuts))
            interrupted[o.task_id] = max(interrupted[o.task_id], cut)
        floor = [(o.n, c) for o, c in zip(outcomes, executions) if c > 1 and c - 1 <= interrupted[o.task_id]]
        return {
            "tasks": len(outcomes), "kills": sum(self.killed.values()), "killed": dict(self.killed),
            "tool_timeout_s": self.tool_timeout_s, "load": " ".join(f"{x:.1f}" for x in os.getloadavg()),
            "not_one_terminal": bad_terminal,
            "not_completed": [o.n for o in outcomes if o.terminals != ["task.completed"]],
            "executions_not_one": [(o.n, c) for o, c in zip(outcomes, executions) if c != 1 and (o.n, c) not in floor],
            "repeated_after_kill_mid_call": floor,
            "executions_detail": {o.n: {"hits": self.site.hit_times.get(page_path(o.n), []),
                                        "calls": getattr(self, "calls", {}).get(o.n)}
                                  for o, c in zip(outcomes, executions) if c != 1},
            "wrong_answers": [o.n for o in outcomes if o.terminals == ["task.completed"] and o.answer != answer_for(o.n)],
            "wrong_answer_texts": {o.n: (o.answer or "")[:80] for o in outcomes
                                   if o.terminals == ["task.completed"] and o.answer != answer_for(o.n)},
            "tool_outcomes": {o.n: o.tools for o in outcomes if o.tools != ["ok:"]},
            "replayed_duplicates": sum(o.duplicates for o in outcomes),
            "client_errors": [(o.n, o.error) for o in outcomes if o.error],
            "recovery_p50_s": pct(self.recoveries, 50), "recovery_max_s": max(self.recoveries, default=float("nan")),
            "mode": self.mode, "rounds": self.rounds, "terminated": dict(self.terminated),
            "term_recovery_p50_s": pct(self.term_recoveries, 50),
            "term_recovery_max_s": max(self.term_recoveries, default=float("nan")),
            "affected": Counter(sig for _, sig, _, _ in self.affected), "time_lost": self.time_lost(),
            "restarts": sum(t.restarts for t in sup.tracks.values()), "elapsed_s": elapsed,
            "approvals": sum(1 for o in outcomes if needs_approval(o.n)),
            "stuck": [(o.n, o.last_event) for o in outcomes if o.error == "abandoned"],
        }


def _p50_max(values: list[float]) -> str:
    return f"{pct(values, 50):.2f} s / {max(values):.2f} s ({len(values)})" if values else "none"


def _what_was_done(f: dict) -> str:
    """The kills and SIGTERMs of a run, in words."""
    kills = (f"{f['kills']} SIGKILLs at random moments: {', '.join(f'{k} {v}' for k, v in sorted(f['killed'].items()))};"
             f" a restarted process serves at least {MIN_SERVING_S:.0f} s before it is killed again")
    rollout = (f"{sum(f['terminated'].values())} SIGTERMs in {f['rounds']} rollout round(s), each replica of each service"
               f" in turn ({', '.join(TARGETS)}), the next {ROLLOUT_PAUSE_S:.0f} s after the last one's replacement"
               " checked in (as `kubectl rollout restart`)")
    return {"kill": kills, "rollout": rollout, "mixed": f"{rollout}; at the same time {kills}"}[f["mode"]]


def report(f: dict) -> str:
    """The docs/benchmarks.md section for one run's figures."""
    title = {"kill": "kills while tasks run", "rollout": "a rolling restart while tasks run",
             "mixed": "a rolling restart and kills while tasks run"}[f["mode"]]
    lost = f["time_lost"]
    rows = []
    if f["mode"] != "rollout":
        rows.append(f"| SIGKILL to recovery (new process checked in), p50 / max | {f['recovery_p50_s']:.2f} s / "
                    f"{f['recovery_max_s']:.2f} s |")
    if f["mode"] != "kill":
        rows.append(f"| SIGTERM to recovery (drained, restarted, checked in), p50 / max | {f['term_recovery_p50_s']:.2f} s"
                    f" / {f['term_recovery_max_s']:.2f} s |")
    for sig, name in (("SIGKILL", "SIGKILLed"), ("SIGTERM", "SIGTERMed")):
        if f["affected"].get(sig):
            hit = lost.get(sig, {"rerun": [], "result": []})
            rows.append(f"| time lost per call a {name} web replica was running ({f['affected'][sig]} calls): kill to its run "
                        f"elsewhere, p50 / max (runs) | {_p50_max(hit['rerun'])} |")
            rows.append(f"| ... kill to its result, p50 / max (results) | {_p50_max(hit['result'])} |")
    extra = "\n".join(rows)
    return f"""## Chaos: {title} (`bench/chaos.py --mode {f['mode']}`)

{f['tasks']} tasks ({f['approvals']} needing approval, {SESSIONS} sessions), each one `web_fetch` and a streamed
scripted answer, through a supervised embedded stack (2 orchestrator replicas, 2 web replicas, gateway, tansu, Redis
with its AOF). {_what_was_done(f)}.
Clients reconnect with `Last-Event-ID`. The product's settings (lease TTL {Settings().agent.lease_ttl_s:.0f} s: rule A24 resumes a dead replica's steps at once) and tool deadline {f['tool_timeout_s']:.0f} s{'' if f['tool_timeout_s'] == Settings().tools.tool_timeout_s else ' (not the default)'}; supervisor crash-loop
limit raised to 1000 for the run. Machine: {machine()}; load average at the end: {f['load']}.

| figure | value |
|---|---|
| tasks without exactly one terminal event (log and client) | {len(f['not_one_terminal'])} |
| tasks not completed | {len(f['not_completed'])} |
| tasks stuck {SETTLE_S:.0f} s after the last kill (number, last event) | {len(f['stuck'])} {f['stuck'] or ''} |
| tool executions per idempotency key != 1 (page requests at the site) | {len(f['executions_not_one'])} {f['executions_not_one'] or ''} |
| pages fetched again because their first run was SIGKILLed mid-call (the at-least-once floor) | {len(f['repeated_after_kill_mid_call'])} {f['repeated_after_kill_mid_call'] or ''} |
| answers that differ from the script | {len(f['wrong_answers'])} |
| events a client got twice after a reconnect | {f['replayed_duplicates']} |
{extra}
| restarts done by the supervisor | {f['restarts']} |
| wall time | {f['elapsed_s']:.0f} s |
"""


def main(argv: list[str] | None = None) -> int:
    """Run the suite; print (and unless ``--no-write`` store) the figures; exit 1 unless zero-loss."""
    parser = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=("kill", "rollout", "mixed"), default="kill")
    parser.add_argument("--tasks", type=int, default=100)
    parser.add_argument("--kills", type=int, default=None, help="random SIGKILLs (default: 50; 20 in the mixed mode)")
    parser.add_argument("--rounds", type=int, default=2, help="rollout rounds (rollout and mixed modes)")
    parser.add_argument("--seed", type=int, default=14)
    parser.add_argument("--no-write", action="store_true", help="do not update docs/benchmarks.md")
    parser.add_argument("--no-broker-kill", action="store_true", help="kill Redis but not the broker")
    parser.add_argument("--tool-timeout-s", type=float, default=30.0,
                        help="the tool deadline (CONDUIT_TOOL_TIMEOUT_S; the CI form uses 60)")
    args = parser.parse_args(argv)
    kills = args.kills if args.kills is not None else (20 if args.mode == "mixed" else 50)
    chaos = Chaos(args.tasks, kills, args.seed, ("redis",) if args.no_broker_kill else ("redis", "tansu"),
                  tool_timeout_s=args.tool_timeout_s, mode=args.mode, rounds=args.rounds if args.mode != "kill" else 0)
    figures = chaos.run()
    print("\n".join(chaos.log))
    print(figures)
    if args.no_write:
        print(report(figures))
    else:
        write_section("chaos" if args.mode == "kill" else f"chaos-{args.mode}", report(figures))
    lossless = not (figures["not_one_terminal"] or figures["executions_not_one"] or figures["wrong_answers"])
    return 0 if lossless else 1


if __name__ == "__main__":
    raise SystemExit(main())
