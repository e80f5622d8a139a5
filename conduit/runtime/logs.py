"""Structured JSON logging (structlog) for every service.

Log lines are JSON objects with ``timestamp``, ``level``, ``logger``, ``event``
and any bound context such as ``task_id``. Standard-library loggers (FastStream,
uvicorn) are routed through the same renderer. Every string value of a log line has its
secrets redacted (``redact_secrets``; rule O3, docs/agent-rules.md).
"""

from __future__ import annotations

import logging
import sys

import structlog

from conduit.policy.redaction import redact


def redact_secrets(_logger: object, _method: str, event_dict: dict) -> dict:
    """structlog processor: API keys, tokens and passwords in any string value become ``[REDACTED]``."""
    return {k: redact(v) if isinstance(v, str) else v for k, v in event_dict.items()}


def configure_logging(service: str, level: str = "INFO", json_logs: bool = True) -> None:
    """Configure structlog and stdlib logging for ``service`` at ``level``."""
    shared = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.format_exc_info,
        redact_secrets,
    ]
    renderer = structlog.processors.JSONRenderer(ensure_ascii=False) if json_logs else structlog.dev.ConsoleRenderer()
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(foreign_pre_chain=shared, processors=[
        structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer]))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("aiokafka").setLevel(logging.WARNING)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    structlog.contextvars.bind_contextvars(service=service)
