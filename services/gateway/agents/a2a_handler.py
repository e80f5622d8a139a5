"""The ``a2a-sdk`` ``RequestHandler`` that serves A2A over Conduit's tasks (docs/a2a.md).

Each call arrives with the caller (``Caller``: gateway state, authenticated ``Principal``, ``traceparent``) in
``context.state["conduit"]`` (put there by ``a2a_route``). A new message creates a Conduit task through
``services.gateway.api.tasks.create_task`` (the path of ``POST /v1/tasks``: record, ``task.accepted``,
``question.asked``); ``contextId`` is the session. Everything else reads the task's Redis event log through
``a2a_events.TaskProjection``: ``message/stream`` and ``tasks/resubscribe`` follow it with the SSE routes'
``follow`` (no event lost between creating and reading); ``message/send`` waits on it; ``tasks/get`` replays it.

Push notifications (rule T12): ``tasks/pushNotificationConfig/set|get|list|delete`` (and a message's
``configuration.taskPushNotificationConfig``) store a push URL for the caller's task (``a2a_push``).

A reply to an ``input-required`` task (its ``taskId`` on the message) decides the pending approval
(``services.gateway.api.approvals.decide_call``, rules G2 and A7) and goes on streaming the same task; after a
``needs_input`` question it asks the reply as a new task in the same context. Conduit's ``ApiError`` s become
A2A errors: 404 ``task_not_found`` -> ``TaskNotFoundError`` (another tenant's or user's task answers exactly
like a missing one), 409 on cancel -> ``TaskNotCancelableError``, other 4xx -> ``InvalidParamsError`` and 5xx ->
``InternalError``, each with ``data: {code, status, details}``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any

from fastapi.exceptions import RequestValidationError
from google.protobuf.json_format import MessageToDict
from pydantic import ValidationError

from a2a.server.context import ServerCallContext
from a2a.server.request_handlers.request_handler import RequestHandler
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse,
    ListTasksRequest,
    Message,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskPushNotificationConfig,
)
from a2a.utils import errors as a2a_errors

from contracts.api import ApprovalDecisionBody, TaskCreate, TaskView
from services.gateway.agents import a2a_push
from services.gateway.agents.a2a_events import TaskProjection, pauses
from services.gateway.api import approvals, inputs, tasks
from services.gateway.errors import ApiError
from services.gateway.identity.auth import Principal
from services.gateway.state import GatewayState
from services.gateway.streaming.sse import follow, logged

CANCEL_WAIT_S = 10.0
"""Seconds ``tasks/cancel`` waits for the task's terminal event before it returns the task as it is."""
DECISIONS = {"approve": "approve", "approved": "approve", "yes": "approve", "reject": "reject", "rejected": "reject",
             "no": "reject"}
"""A text reply to an approval, lower-cased, and the decision it means."""


@dataclass(frozen=True)
class Caller:
    """Who calls and with what: the gateway's ``state``, the authenticated ``who`` and the W3C ``traceparent``."""

    state: GatewayState
    who: Principal
    traceparent: str | None


def a2a_error(exc: ApiError) -> a2a_errors.A2AError:
    """The A2A error of a Conduit ``ApiError`` (see module doc)."""
    data = {"code": exc.code, "status": exc.status, "details": exc.details}
    if exc.code == "task_not_found":
        return a2a_errors.TaskNotFoundError(exc.message, data)
    if exc.status >= 500:
        return a2a_errors.InternalError(exc.message, data)
    return a2a_errors.InvalidParamsError(exc.message, data)


def _caller(context: ServerCallContext) -> Caller:
    caller = context.state.get("conduit")
    if not isinstance(caller, Caller):  # only reachable when the route is mounted without its authentication
        raise a2a_errors.InternalError("the A2A handler was called without an authenticated caller")
    return caller


def _texts(message: Message) -> str:
    return "\n".join(p.text for p in message.parts if p.HasField("text")).strip()


def _data(message: Message) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for part in message.parts:
        if part.HasField("data"):
            value = MessageToDict(part.data)
            if isinstance(value, dict):
                merged.update(value)
    return merged


async def projection(state: GatewayState, view: TaskView, upto: int | None = None) -> TaskProjection:
    """The task's A2A projection from its log, up to seq ``upto`` (None: everything logged so far)."""
    proj = TaskProjection(view.task_id, view.session_id, view.question)
    async for ev in logged(state, view.task_id, 0, upto):
        proj.apply(ev)
    return proj


async def updates(state: GatewayState, proj: TaskProjection) -> AsyncGenerator[Any]:
    """The A2A events of the task's log after ``proj.seq``, in order, until it ends or waits for input."""
    if proj.final or proj.needs_input:
        return
    async for batch in follow(state, proj.task_id, proj.seq):
        if batch is None:  # the gateway is shutting down: the client resubscribes with Last-Event-ID
            return
        for ev in batch:
            for update in proj.apply(ev):
                yield update
                if pauses(update, proj):
                    return


class ConduitRequestHandler(RequestHandler):
    """A2A over Conduit tasks (module doc). Stateless: everything per call comes from the call's context."""

    async def _view(self, caller: Caller, task_id: str) -> TaskView:
        try:
            return await tasks.get_task(caller.state, caller.who, task_id)
        except ApiError as exc:
            raise a2a_error(exc) from None

    async def _create(self, caller: Caller, question: str, session_id: str | None, message_id: str) -> TaskProjection:
        """A new task for ``question``; a message sent again with the same ``messageId`` (and text and context) gets
        the task the first one created (its ``Idempotency-Key``, as on ``POST /v1/tasks``)."""
        try:
            inputs.check_question(question, caller.state.settings.gateway)
            body = TaskCreate(question=question, session_id=session_id)
            created, _ = await tasks.create_task(caller.state, caller.who, body, caller.traceparent,
                                                 f"a2a:{message_id}" if message_id else None)
        except ApiError as exc:
            raise a2a_error(exc) from None
        except ValidationError as exc:
            raise a2a_errors.InvalidParamsError("the message is not a valid question",
                                                {"details": exc.errors(include_url=False, include_input=False)}) from None
        except RequestValidationError:  # a blank question
            raise a2a_errors.InvalidParamsError("the message's text (the question) is blank",
                                                {"code": "invalid_request"}) from None
        return TaskProjection(created.task_id, created.session_id, question)

    async def _decide(self, caller: Caller, proj: TaskProjection, message: Message) -> None:
        awaiting = proj.awaiting or {}
        data = _data(message)
        decision = data.get("decision") or DECISIONS.get(_texts(message).lower().strip(" .!"))
        if decision not in ("approve", "reject", "edit"):
            raise a2a_errors.InvalidParamsError(
                "the task waits for an approval: reply with a data part {decision: approve|reject|edit, call_id} "
                "or the text approve / reject", {"code": "decision_required", "call_id": awaiting.get("call_id")})
        call_id = data.get("call_id") or awaiting.get("call_id")
        task_id = awaiting.get("task_id") or proj.task_id  # team mode: the worker's task holds the call
        try:
            body = ApprovalDecisionBody(decision=decision, arguments=data.get("arguments"),
                                        arguments_digest=data.get("arguments_digest"), comment=data.get("comment"))
            await approvals.decide_call(caller.state, caller.who, task_id, call_id, body, caller.traceparent)
        except ApiError as exc:
            raise a2a_error(exc) from None
        except ValidationError as exc:
            raise a2a_errors.InvalidParamsError("the decision is malformed",
                                                {"details": exc.errors(include_url=False, include_input=False)}) from None

    async def _start(self, params: SendMessageRequest, context: ServerCallContext) -> tuple[Caller, TaskProjection]:
        """Create the message's task, or answer the task it replies to; the projection to stream from."""
        caller = _caller(context)
        message = params.message
        if message.task_id:
            view = await self._view(caller, message.task_id)
            proj = await projection(caller.state, view)
            if proj.awaiting is not None and not proj.final:
                await self._decide(caller, proj, message)
                return caller, proj
            if proj.needs_input:
                return caller, await self._create(caller, _texts(message), view.session_id, message.message_id)
            raise a2a_errors.InvalidParamsError(
                f"task {view.task_id} is not waiting for input (state {proj.task().status.state}); send a new "
                "message with its contextId to ask a follow-up", {"code": "task_not_waiting"})
        if not _texts(message):
            raise a2a_errors.InvalidParamsError("the message has no text part (the question)",
                                                {"code": "invalid_request"})
        push = params.configuration.task_push_notification_config if params.configuration.HasField(
            "task_push_notification_config") else None
        if push is not None:  # rule T11 before the task exists: a refused URL creates nothing
            await a2a_push.check_url(push.url, a2a_push.policy(caller.state))
        proj = await self._create(caller, _texts(message), message.context_id or None, message.message_id)
        if push is not None:  # rule T12
            await self._push_to(caller, await self._view(caller, proj.task_id), push, checked=True)
        return caller, proj

    async def on_message_send(self, params: SendMessageRequest, context: ServerCallContext) -> Task:
        """``message/send``: the task once it ended or waits for input (``return_immediately``: at once)."""
        caller, proj = await self._start(params, context)
        if not params.configuration.return_immediately:
            async for _ in updates(caller.state, proj):
                pass
        return proj.task()

    async def on_message_send_stream(self, params: SendMessageRequest,
                                     context: ServerCallContext) -> AsyncGenerator[Any]:
        """``message/stream``: the ``Task``, then its status and artifact updates until it ends or waits."""
        caller, proj = await self._start(params, context)
        yield proj.task()
        async for update in updates(caller.state, proj):
            yield update

    async def on_get_task(self, params: GetTaskRequest, context: ServerCallContext) -> Task | None:
        """``tasks/get``: the task as its log tells it so far."""
        caller = _caller(context)
        proj = await projection(caller.state, await self._view(caller, params.id))
        return proj.task(history=params.history_length != 0 or not params.HasField("history_length"))

    async def on_cancel_task(self, params: CancelTaskRequest, context: ServerCallContext) -> Task | None:
        """``tasks/cancel``: request the cancel, wait up to ``CANCEL_WAIT_S`` for the task to end, return it."""
        caller = _caller(context)
        view = await self._view(caller, params.id)
        try:
            await tasks.cancel_task(caller.state, caller.who, params.id, caller.traceparent)
        except ApiError as exc:
            if exc.status == 409:
                raise a2a_errors.TaskNotCancelableError(exc.message, {"code": exc.code}) from None
            raise a2a_error(exc) from None
        proj = await projection(caller.state, view)
        try:
            async with asyncio.timeout(CANCEL_WAIT_S):
                async for _ in updates(caller.state, proj):
                    pass
        except TimeoutError:
            pass
        return proj.task()

    async def on_subscribe_to_task(self, params: SubscribeToTaskRequest,
                                   context: ServerCallContext) -> AsyncGenerator[Any]:
        """``tasks/resubscribe``: the ``Task`` as of the client's ``Last-Event-ID`` (its last event's
        ``metadata.conduit_event_id``; none: as of now), then every event after it until the task ends or waits."""
        caller = _caller(context)
        raw = context.state.get("headers", {}).get("last-event-id")
        try:
            upto = None if raw in (None, "") else int(raw)
            if upto is not None and upto < 0:
                raise ValueError(raw)
        except ValueError:
            raise a2a_errors.InvalidParamsError("Last-Event-ID must be a non-negative integer",
                                                {"code": "invalid_request"}) from None
        proj = await projection(caller.state, await self._view(caller, params.id), upto)
        if proj.final or proj.needs_input:
            raise a2a_errors.UnsupportedOperationError(f"task {params.id} has ended; tasks/get returns it",
                                                       {"code": "task_already_finished"})
        yield proj.task()
        async for update in updates(caller.state, proj):
            yield update

    async def on_list_tasks(self, params: ListTasksRequest, context: ServerCallContext) -> Any:
        """Not offered: ``GET /v1/sessions`` lists a caller's conversations."""
        raise a2a_errors.UnsupportedOperationError("tasks/list is not offered; GET /v1/sessions lists conversations")

    async def _push_to(self, caller: Caller, view: TaskView, config: TaskPushNotificationConfig,
                       checked: bool = False) -> TaskPushNotificationConfig:
        """Check ``config``'s URL (rule T11; ``checked``: the caller already did), store it for ``view``'s task and
        make sure its pushes are sent (rule T12)."""
        if not checked:
            await a2a_push.check_url(config.url, a2a_push.policy(caller.state))
        stored = await a2a_push.store(caller.state).set_info(view.task_id, config, ServerCallContext())
        await a2a_push.start_pushing(caller.state, view)
        return stored

    async def on_create_task_push_notification_config(self, params: TaskPushNotificationConfig,
                                                      context: ServerCallContext) -> TaskPushNotificationConfig:
        """``tasks/pushNotificationConfig/set``: store the caller's push URL for its task (rule T12; module
        ``a2a_push``); pushes follow each change of the task's state."""
        caller = _caller(context)
        return await self._push_to(caller, await self._view(caller, params.task_id), params)

    async def on_get_task_push_notification_config(self, params: GetTaskPushNotificationConfigRequest,
                                                   context: ServerCallContext) -> TaskPushNotificationConfig:
        """``tasks/pushNotificationConfig/get``: one config of the caller's task (id default: the task id)."""
        caller = _caller(context)
        view = await self._view(caller, params.task_id)
        wanted = params.id or view.task_id
        for config in await a2a_push.store(caller.state).get_info(view.task_id, context):
            if config.id == wanted:
                return config
        raise a2a_errors.TaskNotFoundError(f"task {view.task_id} has no push notification config {wanted!r}",
                                           {"code": "push_config_not_found"})

    async def on_list_task_push_notification_configs(self, params: ListTaskPushNotificationConfigsRequest,
                                                     context: ServerCallContext) -> ListTaskPushNotificationConfigsResponse:
        """``tasks/pushNotificationConfig/list``: every config of the caller's task."""
        caller = _caller(context)
        view = await self._view(caller, params.task_id)
        return ListTaskPushNotificationConfigsResponse(
            configs=await a2a_push.store(caller.state).get_info(view.task_id, context))

    async def on_delete_task_push_notification_config(self, params: DeleteTaskPushNotificationConfigRequest,
                                                      context: ServerCallContext) -> None:
        """``tasks/pushNotificationConfig/delete``: drop one config of the caller's task."""
        caller = _caller(context)
        view = await self._view(caller, params.task_id)
        await a2a_push.store(caller.state).delete_info(view.task_id, context, params.id or view.task_id)

    async def on_get_extended_agent_card(self, params: Any, context: ServerCallContext) -> Any:
        """There is no extended card: the public one says everything."""
        raise a2a_errors.ExtendedAgentCardNotConfiguredError
