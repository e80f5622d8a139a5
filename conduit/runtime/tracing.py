"""OpenTelemetry tracing: one question is one trace, across the gateway and every consumer.

The W3C ``traceparent`` (``00-<32 hex trace id>-<16 hex span id>-<2 hex flags>``)
travels in the envelope (``Envelope.traceparent``) and in every Kafka message's
``traceparent`` header (and ``tracestate`` when the context has one; ``conduit.runtime.bus.publish``).
The gateway makes one per task when the client sent none (``services.gateway.api.tasks``); each publish is a
PRODUCER span and each consumer's handling a CONSUMER span (``conduit.runtime.middlewares``),
children of it. A task runs over many messages: its own span's context is reserved at its start
(``reserve``), kept in the checkpoint, and the span is recorded once at its terminal event
(``record_span``; rule O6, docs/operations.md "Tracing").

Export (rule O5): ``setup_tracing(service, endpoint)`` installs an SDK ``TracerProvider``
(``service.name`` = ``conduit-<service>``) with a batching OTLP/HTTP exporter
(``opentelemetry-exporter-otlp-proto-http``) only when ``traces_endpoint`` finds one
(``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, ``CONDUIT_OTLP_ENDPOINT``, ``OTEL_EXPORTER_OTLP_ENDPOINT``).
Otherwise nothing is installed and ``enabled()`` is False: ``span`` then makes no OpenTelemetry
span at all (ids are still made and propagated, and logs carry them). Tests install their own
provider (``make_provider`` with an in-memory exporter) with ``use_provider`` and remove it after.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import secrets
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from datetime import datetime
from typing import Any

import structlog
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState

log = logging.getLogger("conduit.runtime.tracing")

__all__ = ["SpanKind", "annotate", "current_traceparent", "current_tracestate", "enabled", "fail", "format_span",
           "make_provider", "new_traceparent", "parse", "record_span", "reserve", "setup_tracing", "shutdown",
           "span", "trace_id_of", "traces_endpoint", "use_provider"]

_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")
tracer = trace.get_tracer("conduit")
"""The tracer spans come from: a proxy of the global provider, unless ``use_provider`` set one."""
_on = False
"""A provider records spans (``setup_tracing`` or ``use_provider``); False: ``span`` makes none (rule O5)."""
_provider: Any = None
"""The provider ``setup_tracing`` installed (flushed by ``shutdown``)."""
_preset: ContextVar[tuple[int, int] | None] = ContextVar("conduit_preset_span_ids", default=None)
"""(trace id, span id) the next span takes: set by ``record_span`` only."""


def enabled() -> bool:
    """Whether spans are recorded in this process (an endpoint is configured or a test provider installed)."""
    return _on


def use_provider(provider: Any | None) -> None:
    """Make Conduit's spans come from ``provider`` (an SDK ``TracerProvider``, best made by
    ``make_provider``), or from the global provider again with None (tracing off). For tests: the
    global provider can be set only once."""
    global tracer, _on
    tracer = provider.get_tracer("conduit") if provider is not None else trace.get_tracer("conduit")
    _on = provider is not None


def new_traceparent() -> str:
    """A fresh random, sampled W3C traceparent (new trace id, new span id)."""
    return f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01"


def parse(traceparent: str | None, tracestate: str | None = None) -> SpanContext | None:
    """The remote ``SpanContext`` of a well-formed traceparent (with ``tracestate``'s entries),
    else None (all-zero ids are invalid)."""
    m = _TRACEPARENT.match((traceparent or "").strip().lower())
    if not m:
        return None
    state = TraceState.from_header([tracestate]) if tracestate else None
    ctx = SpanContext(int(m.group(1), 16), int(m.group(2), 16), is_remote=True,
                      trace_flags=TraceFlags(int(m.group(3), 16)), trace_state=state)
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
    if not _on:
        return fallback
    ctx = trace.get_current_span().get_span_context()
    if ctx.is_valid and (fallback is None or trace_id_of(fallback) == f"{ctx.trace_id:032x}"):
        return format_span(ctx)
    return fallback


def current_tracestate() -> str | None:
    """The active span's W3C ``tracestate`` header value, or None when it has no entries (or tracing is off)."""
    if not _on:
        return None
    state = trace.get_current_span().get_span_context().trace_state
    return state.to_header() if state else None


def _context(parent: str | None, tracestate: str | None = None) -> otel_context.Context:
    remote = parse(parent, tracestate)
    return trace.set_span_in_context(NonRecordingSpan(remote)) if remote else otel_context.Context()


@contextlib.contextmanager
def span(name: str, parent: str | None, kind: SpanKind = SpanKind.INTERNAL, task_id: str | None = None,
         links: Sequence[str | None] = (), tracestate: str | None = None, **attributes: Any) -> Iterator[str]:
    """Run a block in a span that continues ``parent`` (a traceparent; None = a new trace).

    Yields the traceparent to propagate from inside the block: the span's own
    when recording, else ``parent`` (or a new random one when ``parent`` is None or malformed),
    so ids flow even with tracing off. ``links``: traceparents of spans this one follows from
    (e.g. the message that woke a step); ``tracestate``: the W3C entries that came with ``parent``.
    While the block runs, structlog's context has ``trace_id`` (and ``task_id`` when given), so
    every log line carries them. With tracing off (rule O5) no OpenTelemetry object is made.
    """
    if not _on:
        propagated = parent if parse(parent) else new_traceparent()
        with _bound(propagated, task_id):
            yield propagated
        return
    attrs = {k: v for k, v in attributes.items() if v is not None}
    if task_id:
        attrs["conduit.task_id"] = task_id
    linked = [Link(c) for c in (parse(tp) for tp in links) if c is not None]
    with tracer.start_as_current_span(name, context=_context(parent, tracestate), kind=kind, attributes=attrs,
                                      links=linked) as sp:
        sc = sp.get_span_context()
        propagated = format_span(sc) if sc.is_valid else (parent if parse(parent) else new_traceparent())
        with _bound(propagated, task_id):
            yield propagated


def _bound(traceparent: str, task_id: str | None) -> contextlib.AbstractContextManager[Any]:
    bind: dict[str, str] = {"trace_id": trace_id_of(traceparent) or ""}
    if task_id:
        bind["task_id"] = task_id
    return structlog.contextvars.bound_contextvars(**bind)


def annotate(**attributes: Any) -> None:
    """Set ``attributes`` (None values left out) on the active span; nothing when it does not record."""
    if not _on:
        return
    sp = trace.get_current_span()
    if sp.is_recording():
        sp.set_attributes({k: v for k, v in attributes.items() if v is not None})


def fail(error_type: str, message: str | None = None) -> None:
    """Mark the active span failed: status ERROR (``message``) and ``error.type`` = ``error_type``."""
    if not _on:
        return
    sp = trace.get_current_span()
    if sp.is_recording():
        sp.set_attribute("error.type", error_type)
        sp.set_status(Status(StatusCode.ERROR, message))


def reserve(parent: str | None) -> str | None:
    """A traceparent for a span of ``parent``'s trace that ``record_span`` records later (a new span
    id; rule O6). None when tracing is off or ``parent`` is not a valid traceparent."""
    ctx = parse(parent) if _on else None
    if ctx is None:
        return None
    return format_span(SpanContext(ctx.trace_id, int(secrets.token_hex(8), 16) or 1, False, ctx.trace_flags))


def record_span(name: str, own: str, parent: str | None, start: datetime, end: datetime,
                kind: SpanKind = SpanKind.INTERNAL, error: str | None = None, **attributes: Any) -> None:
    """Record, now, a span that ran from ``start`` to ``end`` (UTC) with the ids of ``own`` (from
    ``reserve``) as a child of ``parent``; ``error``: its ``error.type`` (status ERROR). Its ids hold
    only with a provider from ``make_provider`` (``PresetIds``); nothing when tracing is off."""
    ctx = parse(own) if _on else None
    if ctx is None:
        return
    token = _preset.set((ctx.trace_id, ctx.span_id))
    try:
        sp = tracer.start_span(name, context=_context(parent), kind=kind, start_time=_ns(start),
                               attributes={k: v for k, v in attributes.items() if v is not None})
    finally:
        _preset.reset(token)
    if error:
        sp.set_attribute("error.type", error)
        sp.set_status(Status(StatusCode.ERROR, error))
    sp.end(end_time=max(_ns(end), _ns(start)))


def _ns(moment: datetime) -> int:
    return int(moment.timestamp() * 1e9)


def traces_endpoint(conduit_endpoint: str | None, env: Mapping[str, str] = os.environ) -> str | None:
    """Rule O5: the OTLP/HTTP URL spans are posted to, or None (tracing off).

    ``OTEL_SDK_DISABLED=true`` or ``OTEL_TRACES_EXPORTER=none``: None. Else, the first set of
    ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` (used as is, the OpenTelemetry rule for a per-signal URL),
    ``CONDUIT_OTLP_ENDPOINT`` (``conduit_endpoint``) and ``OTEL_EXPORTER_OTLP_ENDPOINT`` (both bases:
    ``/v1/traces`` is appended).
    """
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true" \
            or env.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return None
    if env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip():
        return env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"].strip()
    base = (conduit_endpoint or "").strip() or env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    return base.rstrip("/") + "/v1/traces" if base else None


def make_provider(service: str, *processors: Any) -> Any:
    """An SDK ``TracerProvider`` whose resource is ``service.name`` = ``service`` (plus what
    ``OTEL_RESOURCE_ATTRIBUTES`` adds), with ``PresetIds`` (``record_span``'s ids) and ``processors``."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

    class PresetIds(RandomIdGenerator):
        """Random ids, except for the span ``record_span`` starts: the ids ``reserve`` gave it."""

        def generate_span_id(self) -> int:
            preset = _preset.get()
            return preset[1] if preset else super().generate_span_id()

        def generate_trace_id(self) -> int:
            preset = _preset.get()
            return preset[0] if preset else super().generate_trace_id()

    provider = TracerProvider(resource=Resource.create({"service.name": service}), id_generator=PresetIds())
    for processor in processors:
        provider.add_span_processor(processor)
    return provider


def setup_tracing(service: str, endpoint: str | None) -> bool:
    """Install an OTLP-exporting ``TracerProvider`` for ``service`` when ``traces_endpoint(endpoint)``
    finds a URL (rule O5); its ``service.name`` is ``conduit-<service>``.

    Returns True when tracing exports. Without a URL nothing is installed (tracing off). Spans are
    batched (``BatchSpanProcessor``: ``OTEL_BSP_SCHEDULE_DELAY`` ms, 5000 by default) and flushed by
    ``shutdown`` (and at exit); ``OTEL_EXPORTER_OTLP_HEADERS`` / ``..._TRACES_HEADERS`` are sent.
    """
    global _provider
    url = traces_endpoint(endpoint)
    if not url:
        return False
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    _provider = make_provider(f"conduit-{service}", BatchSpanProcessor(OTLPSpanExporter(endpoint=url)))
    trace.set_tracer_provider(_provider)
    use_provider(_provider)
    log.info("tracing to %s", url)
    return True


def shutdown() -> None:
    """Export the spans still batched and stop the exporter (a no-op when ``setup_tracing`` installed nothing)."""
    if _provider is not None:
        _provider.shutdown()
