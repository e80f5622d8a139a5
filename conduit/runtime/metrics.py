"""Prometheus metrics of every Conduit service (prometheus-client, default registry).

Names follow Prometheus conventions: ``conduit_`` prefix, counters end in
``_total``, durations are ``_seconds`` histograms (base units).

| metric | type | labels | recorded by |
| --- | --- | --- | --- |
| ``conduit_http_requests_total`` | counter | method, route, status | gateway ASGI middleware (``instrument_app``) |
| ``conduit_http_request_duration_seconds`` | histogram | method, route | same; time to the response *start* (an SSE stream counts until its headers) |
| ``conduit_sse_streams_open`` | gauge | | same; responses of type ``text/event-stream`` in flight |
| ``conduit_tasks_total`` | counter | outcome, mode | ``task_finished`` (orchestrator, once per terminal event) |
| ``conduit_model_time_to_first_token_seconds`` | histogram | | ``observe_model_call`` |
| ``conduit_model_call_duration_seconds`` | histogram | outcome | ``observe_model_call`` |
| ``conduit_model_tokens_total`` | counter | tenant, model, kind (input/output) | ``observe_model_call``; tenant: a ``CONDUIT_TENANTS`` key or ``default``, else ``other``; model: the configured endpoint |
| ``conduit_model_failures_total`` | counter | code, kind | ``model_failed`` (rules A17-A19) |
| ``conduit_circuit_breaker_open`` | gauge | kind (model/tool), name | read at scrape time from the breakers ``watch_breakers`` was given (1: open or half-open); MCP tools are one ``name="mcp"``, remote A2A agents one ``name="a2a"`` |
| ``conduit_tool_calls_total`` | counter | tool, outcome | ``tool_call`` (``conduit.runtime.toolservice``) |
| ``conduit_tool_call_duration_seconds`` | histogram | tool | ``tool_call`` |
| ``conduit_consumer_handling_seconds`` | histogram | consumer, outcome | ``conduit.runtime.bus.subscribe`` (outcome ok/error/invalid/dead_letter) |
| ``conduit_dead_letters_total`` | counter | consumer, reason | ``conduit.runtime.bus.subscribe`` (reason invalid/failed; both start at 0 when the consumer subscribes, ``consumer_middlewares``) |
| ``conduit_consumer_lag_messages`` | gauge | consumer, topic, partition | ``consumer_lag``: the partition's high watermark minus the handled offset minus 1, after each message |
| ``conduit_redis_used_memory_bytes`` / ``conduit_redis_maxmemory_bytes`` | gauge | | the gateway, from Redis ``INFO memory`` when ``/metrics`` is scraped (maxmemory 0: no limit) |
| ``conduit_sandbox_runnable_processes`` | gauge | | the gateway, from the sandboxes' fresh statuses (``conduit.records.sandboxstatus``) when ``/metrics`` is scraped |
| ``conduit_approvals_pending`` | gauge | | ``set_approvals_pending`` / ``approval_requested`` / ``approval_decided`` |
| ``conduit_retrieval_stage_total`` | counter | stage (rerank/model_rewrite/model_rerank), outcome | ``services.retriever.assist`` (rules K11-K13; outcome ok/timeout/unavailable/server_error/rejected/malformed/open) |
| ``conduit_retrieval_stage_duration_seconds`` | histogram | stage | same; the wait for the call, bounded by its timeout |

Exposure: the gateway serves ``GET /metrics`` (``instrument_app``); the other
services, which have no HTTP server, call ``start_metrics_server(port)`` from
``conduit serve`` when ``CONDUIT_METRICS_PORT`` is non-zero (default 0 = off, so
the embedded stack's processes never clash on one port).
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, Counter, Gauge, Histogram, generate_latest, start_http_server
from prometheus_client.core import GaugeMetricFamily

from conduit.records import keys, sandboxstatus, slots

log = logging.getLogger("conduit.runtime.metrics")

# seconds: 1 ms .. 60 s, fine at the low end where bus hops live
_FAST = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_SLOW = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)

HTTP_REQUESTS = Counter("conduit_http_requests_total", "HTTP requests answered", ["method", "route", "status"])
HTTP_LATENCY = Histogram("conduit_http_request_duration_seconds", "Time from request to response start",
                         ["method", "route"], buckets=_FAST)
SSE_OPEN = Gauge("conduit_sse_streams_open", "Server-Sent Event streams currently open")
TASKS = Counter("conduit_tasks_total", "Tasks finished, by outcome (completed/failed/cancelled) and mode", ["outcome", "mode"])
MODEL_TTFT = Histogram("conduit_model_time_to_first_token_seconds", "Model call start to first streamed token", buckets=_SLOW)
MODEL_TOTAL = Histogram("conduit_model_call_duration_seconds", "Model call start to end of stream", ["outcome"], buckets=_SLOW)
MODEL_FAILURES = Counter("conduit_model_failures_total", "Model calls that failed or whose reply could not be used, "
                         "by code and kind (configuration, protocol, provider, timeout; rules A17-A19)", ["code", "kind"])
MODEL_TOKENS = Counter("conduit_model_tokens_total", "Model tokens by tenant, configured model and kind (input: prompt, "
                       "output: completion)", ["tenant", "model", "kind"])
TOOL_CALLS = Counter("conduit_tool_calls_total", "Tool calls executed by tool services", ["tool", "outcome"])
TOOL_LATENCY = Histogram("conduit_tool_call_duration_seconds", "Tool execution time in the tool service", ["tool"], buckets=_FAST)
CONSUMER_HANDLING = Histogram("conduit_consumer_handling_seconds", "Bus message handling time per consumer",
                              ["consumer", "outcome"], buckets=_FAST)
DEAD_LETTERS = Counter("conduit_dead_letters_total", "Messages sent to the dead-letter topic", ["consumer", "reason"])
GROUP_RESCUES = Counter("conduit_consumer_group_rescues_total", "Rescues of a consumer group that kept rebalancing past "
                        "kafka_group_rescue_after_s (rule B5), by outcome (taken_over, refused, error)", ["group", "outcome"])
TOOL_REQUESTS_RUNNING = Gauge("conduit_tool_requests_running", "Requests a tool service handles now (rule T7)", ["service"])
TOOL_REQUEST_WAIT = Histogram("conduit_tool_request_slot_wait_seconds",
                              "Time a tool service's consumer waited for a free slot before starting a request",
                              ["service"], buckets=_FAST)
RETRIEVAL_STAGE = Counter("conduit_retrieval_stage_total",
                          "kb_search helper calls (rerank endpoint, model rewrite, model rerank) by outcome", ["stage", "outcome"])
RETRIEVAL_STAGE_LATENCY = Histogram("conduit_retrieval_stage_duration_seconds",
                                    "Wait for a kb_search helper call (bounded by its timeout)", ["stage"], buckets=_FAST)
APPROVALS_PENDING = Gauge("conduit_approvals_pending", "Tool calls waiting for a human approval")
CONSUMER_LAG = Gauge("conduit_consumer_lag_messages", "Messages after the one a consumer just handled in its partition",
                     ["consumer", "topic", "partition"])
REDIS_USED = Gauge("conduit_redis_used_memory_bytes", "Redis used_memory (INFO memory), read when /metrics is scraped")
REDIS_MAX = Gauge("conduit_redis_maxmemory_bytes", "Redis maxmemory (0: no limit), read when /metrics is scraped")
SANDBOX_RUNNABLE = Gauge("conduit_sandbox_runnable_processes", "Sandbox processes whose fresh status says they can "
                         "run code (isolated by bubblewrap, or unsafe mode allowed)")
TASK_OUTCOMES = ("completed", "failed", "cancelled", "needs_input")
"""The ``outcome`` values of ``conduit_tasks_total`` (their series start at 0, ``watch_breakers``)."""


# ---------------------------------------------------------------- orchestrator-facing API
def observe_model_call(ttft_s: float | None, total_s: float, tokens_in: int, tokens_out: int, outcome: str = "ok",
                       tenant: str = "default", model: str = "default") -> None:
    """Record one model call.

    Args:
        ttft_s: seconds from call start to the first streamed token (None: no token came).
        total_s: seconds from call start to the end of the stream (or the failure).
        tokens_in / tokens_out: prompt and completion tokens reported by the endpoint.
        outcome: ``ok`` or a short failure class (``error``, ``timeout``, ``cancelled``).
        tenant: a bounded tenant label (``tenant_label``); model: the configured endpoint's name.
    """
    if ttft_s is not None:
        MODEL_TTFT.observe(ttft_s)
    MODEL_TOTAL.labels(outcome).observe(total_s)
    if tokens_in:
        MODEL_TOKENS.labels(tenant, model, "input").inc(tokens_in)
    if tokens_out:
        MODEL_TOKENS.labels(tenant, model, "output").inc(tokens_out)


def tenant_label(tenant_id: str, configured: Iterable[str]) -> str:
    """``tenant_id`` when it is ``default`` or among ``configured`` (``CONDUIT_TENANTS``' keys), else ``other``:
    a label value is never taken from unbounded input."""
    return tenant_id if tenant_id == "default" or tenant_id in configured else "other"


def task_finished(outcome: str, mode: str = "agent") -> None:
    """Count one finished task; ``outcome`` is completed/failed/cancelled, ``mode`` agent/retrieval_only."""
    TASKS.labels(outcome, mode or "agent").inc()


def tool_call(tool: str, outcome: str, seconds: float) -> None:
    """Count one executed tool call (``outcome`` ok/error/timeout) taking ``seconds``."""
    TOOL_CALLS.labels(tool, outcome).inc()
    TOOL_LATENCY.labels(tool).observe(seconds)


def tool_request_admitted(service: str, waited_s: float, running: int) -> None:
    """A tool service started one request after waiting ``waited_s`` seconds for a slot; ``running`` now."""
    TOOL_REQUEST_WAIT.labels(service).observe(waited_s)
    TOOL_REQUESTS_RUNNING.labels(service).set(running)


def tool_requests_running(service: str, running: int) -> None:
    """Set the number of requests ``service`` handles now."""
    TOOL_REQUESTS_RUNNING.labels(service).set(running)


def set_approvals_pending(n: int) -> None:
    """Set the number of tool calls waiting for approval (e.g. from a Redis count)."""
    APPROVALS_PENDING.set(n)


def approval_requested() -> None:
    """One more tool call waits for approval."""
    APPROVALS_PENDING.inc()


def model_failed(code: str, kind: str) -> None:
    """One model call failed with ``code`` (``ModelError.code``) of ``kind`` (``model.failure_kind``)."""
    MODEL_FAILURES.labels(code, kind).inc()


def approval_decided() -> None:
    """One approval was decided (approved, denied or expired)."""
    APPROVALS_PENDING.dec()


class _Breakers:
    """Collector of ``conduit_circuit_breaker_open``: reads the watched breakers' state at scrape time.

    A watched object has ``model_breaker``, ``model_breakers`` (name -> breaker) and ``tool_breakers``
    (name -> breaker), each breaker with ``state(now_s) -> "closed" | "open" | "half_open"`` on the wall
    clock (``conduit.policy.breaker.CircuitBreaker``, as the orchestrator's ``Deps``). Held weakly.
    """

    def __init__(self) -> None:
        self.watched: list[weakref.ref] = []

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """One sample per (kind, name): 1 when any breaker of that name is not closed, else 0."""
        family = GaugeMetricFamily("conduit_circuit_breaker_open", "Circuit breakers open or half-open (1) or "
                                   "closed (0), by kind (model/tool) and name", labels=["kind", "name"])
        now, states = time.time(), {}
        self.watched = [ref for ref in self.watched if ref() is not None]
        for deps in filter(None, (ref() for ref in self.watched)):
            models = {"default": deps.model_breaker, **deps.model_breakers}
            for kind, named in (("model", models), ("tool", deps.tool_breakers)):
                for name, breaker in named.items():
                    key = (kind, "mcp" if name.startswith("mcp.") else "a2a" if name.startswith("a2a.") else name)
                    states[key] = max(states.get(key, 0), int(breaker.state(now) != "closed"))
        for (kind, name), value in sorted(states.items()):
            family.add_metric([kind, name], value)
        yield family


_BREAKERS = _Breakers()
REGISTRY.register(_BREAKERS)


def watch_breakers(deps: Any) -> None:
    """Export the breakers of ``deps`` (the orchestrator's ``Deps``) as ``conduit_circuit_breaker_open`` and
    start the series of every task outcome (``conduit_tasks_total``) and model call outcome (``ok``, ``error``:
    ``conduit_model_call_duration_seconds``) at 0, so a first failure is an increase the alert rules see."""
    _BREAKERS.watched.append(weakref.ref(deps))
    for outcome in TASK_OUTCOMES:
        TASKS.labels(outcome, "agent")
    for outcome in ("ok", "error"):
        MODEL_TOTAL.labels(outcome)


# ---------------------------------------------------------------- bus-facing API
def consumer_handled(consumer: str, outcome: str, seconds: float) -> None:
    """Record one bus message handled by ``consumer`` (outcome ok/error/invalid/dead_letter)."""
    CONSUMER_HANDLING.labels(consumer, outcome).observe(seconds)


def consumer_subscribed(consumer: str) -> None:
    """Start ``consumer``'s dead-letter series at 0, so the first dead letter is an increase."""
    for reason in ("invalid", "failed"):
        DEAD_LETTERS.labels(consumer, reason)


def consumer_lag(consumer: str, topic: str, partition: int, highwater: int | None, offset: int) -> None:
    """Set the lag of ``consumer`` on ``topic``/``partition`` after handling ``offset``: ``highwater - offset - 1``
    messages (None: the consumer knows no high watermark yet, nothing is set)."""
    if highwater is not None:
        CONSUMER_LAG.labels(consumer, topic, str(partition)).set(max(0, highwater - offset - 1))


def dead_lettered(consumer: str, reason: str) -> None:
    """Count one message ``consumer`` sent to the dead-letter topic (reason invalid/failed)."""
    DEAD_LETTERS.labels(consumer, reason).inc()


# ---------------------------------------------------------------- exposure
def render() -> tuple[bytes, str]:
    """The default registry in Prometheus text format: ``(body, content_type)``."""
    return generate_latest(), CONTENT_TYPE_LATEST


def start_metrics_server(port: int, addr: str = "0.0.0.0") -> bool:
    """Serve ``/metrics`` on ``addr:port`` from a daemon thread; ``port`` 0 = off.

    Returns True when serving. A busy port is logged and ignored (a service must
    not die because two processes on one host were given the same port).
    """
    if not port:
        return False
    try:
        start_http_server(port, addr=addr)
    except OSError as exc:
        log.warning("metrics server not started on %s:%s: %s", addr, port, exc)
        return False
    log.info("metrics on http://%s:%s/metrics", addr, port)
    return True


class _HttpMetrics:
    """Pure ASGI middleware (streams pass through untouched, unlike BaseHTTPMiddleware).

    Labels use the matched route template (``/v1/tasks/{task_id}``), never the raw path,
    so label cardinality stays bounded; unmatched requests are ``route="unmatched"``.
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = [500]
        streaming = [False]

        async def send_wrapper(message: dict) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
                route = scope.get("route")
                path = getattr(route, "path", None) or "unmatched"
                HTTP_LATENCY.labels(scope["method"], path).observe(time.perf_counter() - started)
                ctype = dict(message.get("headers") or []).get(b"content-type", b"")
                if ctype.startswith(b"text/event-stream"):
                    streaming[0] = True
                    SSE_OPEN.inc()
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            if streaming[0]:
                SSE_OPEN.dec()
            path = getattr(scope.get("route"), "path", None) or "unmatched"
            HTTP_REQUESTS.labels(scope["method"], path, str(status[0])).inc()


SCRAPE_SAMPLE_TIMEOUT_S = 2.0
"""Seconds ``GET /metrics`` waits for ``before_scrape`` before answering with the last values."""


async def sample_redis(redis: Any) -> None:
    """Set the Redis memory gauges from ``INFO memory`` and ``conduit_sandbox_runnable_processes`` from the
    sandboxes' statuses (one ``HGETALL``: two cheap commands, no keyspace scan, whatever the number of tasks)."""
    if slots.clustered():  # the fullest primary (rule O9): its memory is what runs out first
        infos = [await redis.info("memory", target_nodes=node) for node in redis.get_primaries()]
        info = max(infos, key=lambda i: float(i.get("used_memory", 0)) / (float(i.get("maxmemory", 0)) or 1e18))
    else:
        info = await redis.info("memory")
    REDIS_USED.set(float(info.get("used_memory", 0)))
    REDIS_MAX.set(float(info.get("maxmemory", 0)))
    statuses = sandboxstatus.fresh(await redis.hgetall(keys.SANDBOX_STATUSES), time.time())
    SANDBOX_RUNNABLE.set(sum(1 for s in statuses if s.get("isolated") or s.get("unsafe")))


def instrument_app(app: Any, before_scrape: Callable[[], Awaitable[None]] | None = None) -> None:
    """Add HTTP metrics middleware and a ``GET /metrics`` route to a FastAPI ``app``.

    ``before_scrape`` (e.g. ``sample_redis``) runs before each scrape, bounded by ``SCRAPE_SAMPLE_TIMEOUT_S``
    seconds; when it fails the scrape still answers, with the values it set last time.
    """
    from fastapi import Response

    app.add_middleware(_HttpMetrics)

    @app.get("/metrics", include_in_schema=False)
    async def metrics_endpoint() -> Response:
        if before_scrape is not None:
            try:
                await asyncio.wait_for(before_scrape(), SCRAPE_SAMPLE_TIMEOUT_S)
            except Exception as exc:  # noqa: BLE001 - Redis away or slow: the rest of the scrape still counts
                log.warning("metrics sample before scrape failed: %r", exc)
        body, ctype = render()
        return Response(body, media_type=ctype)
