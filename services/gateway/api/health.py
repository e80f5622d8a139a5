"""Health endpoints.

- ``GET /healthz`` -> 200 ``{"status": "ok"}`` while the process serves HTTP (liveness).
- ``GET /readyz``  -> 200 ``{"status": "ready", "checks": {"redis": true, "kafka": true},
  "alive_services": {name: live process count}, "mcp": {"servers", "failing"}}`` when Redis answers PING and Kafka
  answers a metadata request (``DescribeCluster`` via ``broker.ping``), each within
  ``settings.gateway.gateway_ready_timeout_s`` seconds; else 503 ``ErrorBody`` with code
  ``not_ready`` and the same ``checks``/``alive_services`` in ``details``. ``mcp`` counts the
  tenants' MCP servers and those failing (their tools are withheld; which ones and why:
  ``GET /v1/mcp-servers``); a failing server does not make the gateway unready. ``model`` is the
  model endpoint's last configuration error ``{code, message, status, at}`` (rule A18,
  ``conduit.records.modelhealth``; null when none): answers fall back to cited passages meanwhile,
  so it does not make the gateway unready either.
"""

from __future__ import annotations

import asyncio
import logging

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse

from conduit.records import mcp as mcp_records
from conduit.records import modelhealth
from conduit.runtime.liveness import alive_services
from services.gateway.errors import error_response
from services.gateway.state import GatewayState, get_state

log = logging.getLogger("conduit.gateway.health")
router = APIRouter()


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """Liveness: the process is up and serving."""
    return {"status": "ok"}


async def _redis_ok(state: GatewayState) -> bool:
    try:
        return bool(await asyncio.wait_for(state.redis.ping(), state.settings.gateway.gateway_ready_timeout_s))
    except Exception as exc:  # noqa: BLE001 - any failure means not ready
        log.warning("readyz: redis check failed: %r", exc)
        return False


async def _kafka_ok(state: GatewayState) -> bool:
    try:
        return bool(await state.broker.ping(timeout=state.settings.gateway.gateway_ready_timeout_s))
    except Exception as exc:  # noqa: BLE001
        log.warning("readyz: kafka check failed: %r", exc)
        return False


@router.get("/readyz")
async def readyz(state: GatewayState = Depends(get_state)) -> JSONResponse:
    """Readiness: Redis and Kafka reachable; lists live services from the liveness keys."""
    redis_ok, kafka_ok = await asyncio.gather(_redis_ok(state), _kafka_ok(state))
    alive: dict[str, int] = {}
    mcp: dict[str, int] = {}
    model: dict | None = None
    if redis_ok:
        try:
            alive, mcp, model = await asyncio.wait_for(
                asyncio.gather(alive_services(state.redis), mcp_records.summary(state.redis), modelhealth.read(state.redis)),
                state.settings.gateway.gateway_ready_timeout_s)
        except Exception as exc:  # noqa: BLE001
            log.warning("readyz: alive_services failed: %r", exc)
    checks = {"redis": redis_ok, "kafka": kafka_ok}
    if redis_ok and kafka_ok:
        return JSONResponse({"status": "ready", "checks": checks, "alive_services": alive, "mcp": mcp, "model": model})
    down = ", ".join(k for k, ok in checks.items() if not ok)
    return error_response(503, "not_ready", f"not ready: {down} unreachable",
                          {"checks": checks, "alive_services": alive})
