"""A2A push notifications (rule T12, docs/a2a.md "Push notifications"): a client-given URL per task, POSTed the
``a2a-sdk``'s push payload when the task's state changes.

- ``RedisPushStore``: the SDK's ``PushNotificationConfigStore`` over Redis (``keys.a2a_push(task_id)``: config id ->
  ``TaskPushNotificationConfig`` JSON, kept ``task_events_ttl_s``), so any gateway replica reads and lists what
  another stored. Who may touch a task's configs is decided before (the task is the caller's: scope rule 1).
- ``check_url``: a push URL is http(s), without user info, and its host resolves only to addresses the SSRF guard
  allows (rule T11; ``a2a_allow_private`` for tests and local deployments); else ``InvalidParamsError``
  ``push_url_forbidden`` / ``push_url_invalid``.
- ``start_pushing``: one process sends a task's pushes (``keys.a2a_pushing``, taken with ``SET NX``, renewed while it
  follows): it reads the task's log as ``a2a_events.TaskProjection`` does, pushes the task's state as of then, and
  each time the A2A state changes after it sends with the SDK's ``BasePushNotificationSender`` (headers ``X-A2A-Notification-Token``, ``Authorization`` from
  the config; body ``{"statusUpdate": ...}``, and ``{"task": ...}`` with the answer artifact once the task ended) over
  an httpx client whose connections pass the SSRF guard and which follows no redirect. Delivery is best effort, as the
  SDK's sender is: a refused or failing URL is logged, the task goes on.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from typing import Any
from urllib.parse import urlsplit

import httpx
from a2a.server.context import ServerCallContext
from a2a.server.tasks.base_push_notification_sender import BasePushNotificationSender
from a2a.server.tasks.push_notification_config_store import (PushNotificationConfigStore,
                                                             normalize_push_notification_config)
from a2a.types.a2a_pb2 import TaskPushNotificationConfig, TaskStatusUpdateEvent
from a2a.utils import errors as a2a_errors
from google.protobuf.json_format import MessageToJson, Parse
from redis.asyncio import Redis

from conduit.records import keys
from conduit.runtime.ssrf import AddressPolicy, BlockedAddress, check_host, guarded_transport
from contracts.api import TaskView
from services.gateway.agents.a2a_events import TaskProjection
from services.gateway.state import GatewayState
from services.gateway.streaming.sse import follow, logged

log = logging.getLogger("conduit.gateway.a2a_push")

PUSH_TIMEOUT_S = 10.0
"""Seconds one push POST may take."""
PUSHING_TTL_S = 30
"""Seconds the sender's hold on a task lives unless renewed (renewed at every batch and idle wait of the log)."""
_running: set[asyncio.Task[None]] = set()
"""This process's senders (a strong reference each until it ends)."""


class RedisPushStore(PushNotificationConfigStore):
    """The SDK's config store over Redis (module doc); ``ttl_s``: how long a task's configs are kept (seconds)."""

    def __init__(self, redis: Redis, ttl_s: int) -> None:
        self.redis, self.ttl_s = redis, ttl_s

    async def set_info(self, task_id: str, notification_config: TaskPushNotificationConfig,
                       context: ServerCallContext) -> TaskPushNotificationConfig:
        """Store (or replace) one config of ``task_id``; returns it as stored (task id set, id defaulted)."""
        stored = normalize_push_notification_config(task_id, notification_config)
        key = keys.a2a_push(task_id)
        await self.redis.hset(key, stored.id, MessageToJson(stored))
        await self.redis.expire(key, self.ttl_s)
        return stored

    async def get_info(self, task_id: str, context: ServerCallContext) -> list[TaskPushNotificationConfig]:
        """Every config of ``task_id``, by id."""
        return await self.get_info_for_dispatch(task_id)

    async def get_info_for_dispatch(self, task_id: str) -> list[TaskPushNotificationConfig]:
        """Every config of ``task_id`` (the sender's read; the same as ``get_info``)."""
        raw = await self.redis.hgetall(keys.a2a_push(task_id))
        return [Parse(v, TaskPushNotificationConfig()) for _, v in sorted(raw.items())]

    async def delete_info(self, task_id: str, context: ServerCallContext, config_id: str | None = None) -> None:
        """Delete one config (``config_id``) or, without one, every config of ``task_id``."""
        if config_id:
            await self.redis.hdel(keys.a2a_push(task_id), config_id)
        else:
            await self.redis.delete(keys.a2a_push(task_id))


def store(state: GatewayState) -> RedisPushStore:
    """The gateway's push config store."""
    return RedisPushStore(state.redis, state.settings.gateway.task_events_ttl_s)


async def check_url(url: str, policy: AddressPolicy) -> None:
    """Rule T11 for a push URL (module doc); raises ``InvalidParamsError`` with ``data.code``."""
    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        parts, port = None, 0
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname or parts.username or parts.password:
        raise a2a_errors.InvalidParamsError("the push URL must be an http(s) URL without user info",
                                            {"code": "push_url_invalid"})
    try:
        await check_host(parts.hostname, port, policy)
    except BlockedAddress as exc:
        raise a2a_errors.InvalidParamsError(f"push URLs may not point at {exc.ip}: {exc.reason}",
                                            {"code": "push_url_forbidden"}) from None
    except (OSError, TimeoutError) as exc:
        raise a2a_errors.InvalidParamsError(f"the push URL's host does not resolve: {exc}",
                                            {"code": "push_url_invalid"}) from None


def policy(state: GatewayState) -> AddressPolicy:
    """The SSRF policy of push URLs (rule T11: ``a2a_allow_private`` lets loopback and private ones through)."""
    return AddressPolicy(allow_private=state.settings.mcp.a2a_allow_private)


async def start_pushing(state: GatewayState, view: TaskView) -> None:
    """Send ``view``'s pushes from this process unless another one already does (module doc)."""
    owner = f"{socket.gethostname()}:{os.getpid()}"
    if not await state.redis.set(keys.a2a_pushing(view.task_id), owner, nx=True, ex=PUSHING_TTL_S):
        return
    job = asyncio.create_task(_push(state, view), name=f"a2a-push-{view.task_id}")
    _running.add(job)
    job.add_done_callback(_running.discard)


async def _push(state: GatewayState, view: TaskView) -> None:
    """Follow the task's log and push each change of its A2A state (module doc); never raises."""
    key = keys.a2a_pushing(view.task_id)
    http = httpx.AsyncClient(transport=guarded_transport(policy(state), max_connections=4), follow_redirects=False,
                             trust_env=False, timeout=httpx.Timeout(PUSH_TIMEOUT_S, connect=5.0))
    sender = BasePushNotificationSender(http, store(state))
    proj = TaskProjection(view.task_id, view.session_id, view.question)
    try:
        async for ev in logged(state, view.task_id, 0):
            proj.apply(ev)
        if proj.final:
            await sender.send_notification(view.task_id, proj.task())
            return
        last = proj.state  # the state as the config was set is pushed first, then each change
        await sender.send_notification(view.task_id, TaskStatusUpdateEvent(
            task_id=view.task_id, context_id=view.session_id, status=proj.task(history=False).status))
        async for batch in follow(state, view.task_id, proj.seq):
            if batch is None:
                return  # the gateway is stopping
            await state.redis.expire(key, PUSHING_TTL_S)
            for ev in batch:
                for update in proj.apply(ev):
                    if isinstance(update, TaskStatusUpdateEvent) and update.status.state != last:
                        last = update.status.state
                        event: Any = proj.task() if proj.final else update
                        await sender.send_notification(view.task_id, event)
            if proj.final:
                return
    except Exception:  # noqa: BLE001 - pushes are best effort; the task goes on
        log.exception("push notifications of task %s stopped", view.task_id)
    finally:
        await http.aclose()
        await state.redis.delete(key)
