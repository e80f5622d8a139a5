"""OpenTelemetry tracing: one question is one trace, across the gateway and every consumer.

The W3C ``traceparent`` (``00-<32 hex trace id>-<16 hex span id>-<2 hex flags>``)
travels in the envelope (``Envelope.traceparent``) and in the Kafka message's
``traceparent`` header (``conduit.runtime.bus.publish``). The gateway makes one per task
when the client sent none (``task_span``); each publish is a PRODUCER span and
each consumer's handling a CONSUMER span (``conduit.runtime.bus``), children of it.

Export: ``setup_tracing(service, settings)`` installs an SDK ``TracerProvider``
with an OTLP/HTTP exporter (``opentelemetry-exporter-otlp-proto-http``) only when
``CONDUIT_OTLP_ENDPOINT`` is set (e.g. ``http://otel-collector:4318``; spans are
posted to ``<endpoint>/v1/traces``). Otherwise the API's no-op provider stays:
spans are non-recording and cost a few microseconds, and trace ids are still
made and propagated (logs carry them). Tests install their own provider
(e.g. with an ``InMemorySpanExporter``) with ``use_provider`` and remove it after.
"""

from __future__ import annotations

import contextlib
import logging
import re
import secrets
from collections.abc import Iterator
from typing import Any

import structlog
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, TraceFlags

log = logging.getLogger("conduit.runtime.tracing")

_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")
tracer = trace.get_tracer("conduit")
"""The tracer spans come from: a proxy of the global provider, unless ``use_provider`` set one."""


def use_provider(provider: Any | None) -> None:
    """Make Conduit's spans come from ``provider`` (an SDK ``TracerProvider``), or from the
    global provider again with None. For tests: the global provider can be set only once."""
    global tracer
    tracer = provider.get_tracer("conduit") if provider is not None else trace.get_tracer("conduit")


def new_traceparent() -> str:
    """A fresh random, sampled W3C traceparent (new trace id, new span id)."""
    return f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01"


def parse(traceparent: str | None) -> SpanContext | None:
    """The remote ``SpanContext`` of a well-formed traceparent, else None (all-zero ids are invalid)."""
    m = _TRACEPARENT.match((traceparent or "").strip().lower())
    if not m:
        return None
    ctx = SpanContext(int(m.group(1), 16), int(m.group(2), 16), is_remote=True, trace_flags=TraceFlags(int(m.group(3), 16)))
    return ctx if ctx.is_valid else None


def trace_id_of(traceparent: str | None) -> str | None:
    """The 32-hex trace id of a traceparent, or None."""
    m = _TRACEPARENT.match((traceparent or "").strip().lower())
    return m.group(1) if m else None


def format_span(ctx: SpanContext) -> str:
    """The traceparent of ``ctx``."""
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def current_traceparent(fallback: str | None = None) -> str | None:
    """The traceparent of the active span when it is valid and of the same trace as
    ``fallback`` (or ``fallback`` is None); else ``fallback``."""
    ctx = trace.get_current_span().get_span_context()
    if ctx.is_valid and (fallback is None or trace_id_of(fallback) == f"{ctx.trace_id:032x}"):
        return format_span(ctx)
    return fallback


@contextlib.contextmanager
def span(name: str, parent: str | None, kind: SpanKind = SpanKind.INTERNAL, task_id: str | None = None,
         **attributes: Any) -> Iterator[str]:
    """Run a block in a span that continues ``parent`` (a traceparent; None = a new trace).

    Yields the traceparent to propagate from inside the block: the span's own
    when recording, else ``parent`` (or a new random one when ``parent`` is None),
    so ids flow even with tracing off. While the block runs, structlog's context
    has ``trace_id`` (and ``task_id`` when given), so every log line carries them.
    """
    remote = parse(parent)
    ctx = trace.set_span_in_context(NonRecordingSpan(remote)) if remote else otel_context.Context()
    attrs = {k: v for k, v in attributes.items() if v is not None}
    if task_id:
        attrs["conduit.task_id"] = task_id
    with tracer.start_as_current_span(name, context=ctx, kind=kind, attributes=attrs) as sp:
        sc = sp.get_span_context()
        propagated = format_span(sc) if sc.is_valid else (parent if remote else new_traceparent())
        bind: dict[str, str] = {"trace_id": trace_id_of(propagated) or ""}
        if task_id:
            bind["task_id"] = task_id
        with structlog.contextvars.bound_contextvars(**bind):
            yield propagated


def setup_tracing(service: str, endpoint: str | None) -> bool:
    """Install an OTLP-exporting ``TracerProvider`` for ``service`` when ``endpoint`` is set.

    Returns True when tracing exports. Without an endpoint nothing is installed
    (no-op provider). Spans are batched (``BatchSpanProcessor``) and flushed at exit.
    """
    if not endpoint:
        return False
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": f"conduit-{service}"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint.rstrip("/") + "/v1/traces")))
    trace.set_tracer_provider(provider)
    log.info("tracing to %s", endpoint)
    return True
