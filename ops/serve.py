"""``conduit serve NAME``: one service in the foreground until SIGTERM (what each process of the stack runs).

Apart from the Typer CLI (``ops.cli``) so that a service process does not load Typer and Rich (~3-4 MiB of
resident memory in each of the stack's processes, issue 33): ``ops.entry`` sends ``serve NAME`` here directly.
"""

from __future__ import annotations

import importlib
import os
import sys

from conduit.runtime.settings import get_settings


class UnknownService(ValueError):
    """A name that is not one of ``ops.services.SERVICES``."""


def run(name: str) -> None:
    """Configure logging, tracing (rule O5) and the metrics port, then run ``services.<name>.main.main(settings)``
    until it returns (SIGTERM). The gateway may first re-execute itself with jemalloc (``gateway_allocator``).

    Raises:
        UnknownService: ``name`` is not a service (nothing was started).
        SystemExit: code 2 when ``gateway_allocator`` is ``jemalloc`` and no library is installed.
    """
    from ops.services import SERVICES

    if name not in SERVICES:
        raise UnknownService(f"unknown service {name!r}; expected one of {', '.join(SERVICES)}")
    from conduit.runtime.logs import configure_logging

    settings = get_settings()
    if name == "gateway":
        apply_allocator(settings.gateway.gateway_allocator)
    configure_logging(name, settings.observability.log_level, settings.observability.log_json)
    from conduit.runtime import metrics, tracing

    tracing.setup_tracing(name, settings.observability.otlp_endpoint)  # rule O5: off unless an OTLP endpoint is set
    if name != "gateway":  # the gateway serves GET /metrics itself
        metrics.start_metrics_server(settings.observability.metrics_port)
    try:
        importlib.import_module(f"services.{name}.main").main(settings)
    finally:
        tracing.shutdown()  # the spans still batched go out before the process ends


def apply_allocator(choice: str) -> None:
    """Re-execute this process with jemalloc preloaded when ``choice`` asks for it (conduit/runtime/allocator.py).

    Returns without change when nothing is to change; exits 2 with a message on standard error when
    ``choice`` is ``jemalloc`` and no library is installed.
    """
    from conduit.runtime import allocator

    try:
        extra = allocator.reexec_env(choice)
    except allocator.AllocatorError as exc:
        print(exc, file=sys.stderr)
        raise SystemExit(2) from None
    if extra:
        os.execve(sys.executable, sys.orig_argv, {**os.environ, **extra})
