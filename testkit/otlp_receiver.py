"""A local OTLP/HTTP trace receiver for tests: ``POST /v1/traces`` with a protobuf
``ExportTraceServiceRequest`` (``opentelemetry-proto``), decoded into ``ReceivedSpan`` rows.

Point a stack at it with ``OTEL_EXPORTER_OTLP_ENDPOINT=receiver.base_url``; read ``spans()``.
"""

from __future__ import annotations

import gzip
import threading
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from testkit.threadserver import ThreadedServer

PROTOBUF = "application/x-protobuf"


@dataclass(frozen=True)
class ReceivedSpan:
    """One exported span: ids as lower-case hex (``parent_id`` None for a root), the exporting
    process's ``service.name``, its name, kind (``SPAN_KIND_*`` number), attributes (plain values;
    arrays as tuples) and its start and end (nanoseconds since the Unix epoch)."""

    trace_id: str
    span_id: str
    parent_id: str | None
    service: str
    name: str
    kind: int
    attributes: dict[str, Any] = field(default_factory=dict)
    links: tuple[str, ...] = ()
    error: bool = False
    start_ns: int = 0
    end_ns: int = 0


def _value(v: Any) -> Any:
    which = v.WhichOneof("value")
    if which == "array_value":
        return tuple(_value(x) for x in v.array_value.values)
    return getattr(v, which) if which else None


def decode(body: bytes) -> list[ReceivedSpan]:
    """The spans of one ``ExportTraceServiceRequest`` body."""
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    spans: list[ReceivedSpan] = []
    for rs in request.resource_spans:
        service = next((_value(a.value) for a in rs.resource.attributes if a.key == "service.name"), "")
        for ss in rs.scope_spans:
            for sp in ss.spans:
                spans.append(ReceivedSpan(
                    trace_id=sp.trace_id.hex(), span_id=sp.span_id.hex(), parent_id=sp.parent_span_id.hex() or None,
                    service=service, name=sp.name, kind=sp.kind,
                    attributes={a.key: _value(a.value) for a in sp.attributes},
                    links=tuple(link.span_id.hex() for link in sp.links), error=sp.status.code == 2,
                    start_ns=sp.start_time_unix_nano, end_ns=sp.end_time_unix_nano))
    return spans


class OtlpReceiver(ThreadedServer):
    """An OTLP/HTTP (protobuf) trace receiver on a free loopback port; ``base_url`` is what
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` takes (spans are posted to ``<base_url>/v1/traces``)."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._spans: list[ReceivedSpan] = []
        self.requests = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def spans(self, trace_id: str | None = None) -> list[ReceivedSpan]:
        """Every span received so far (only ``trace_id``'s when given)."""
        with self._lock:
            return [s for s in self._spans if trace_id is None or s.trace_id == trace_id]

    async def _traces(self, request: Request) -> Response:
        body = await request.body()
        if request.headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        if request.headers.get("content-type", "").split(";")[0] != PROTOBUF:
            return Response(status_code=415)
        spans = decode(body)
        with self._lock:
            self._spans.extend(spans)
            self.requests += 1
        return Response(ExportTraceServiceResponse().SerializeToString(), media_type=PROTOBUF)

    def start(self) -> "OtlpReceiver":
        """Serve ``POST /v1/traces`` in a daemon thread."""
        self.serve([Route("/v1/traces", self._traces, methods=["POST"])])
        return self
