"""Orchestrator process: one consumer (group ``conduit-orchestrator``) for questions,
tool results and control events; the agent runs in ``runtime.Orchestrator``.

Rule B2 (docs/rules.md): the consumer handles up to ``orchestrator_concurrency`` messages at once
(``conduit.runtime.lanes``), each task's in the order they were read. A question's or tool result's
offset is committed when its job starts (a crash loses it from the topic, not from the task: the
gateway's record restarts a question, rule G4, and a request without result is sent again, rule A14);
a control event (cancel, approval decision) is handled before its offset is committed, as with
``orchestrator_concurrency`` 1, where every message is.
"""

from __future__ import annotations

import asyncio
from typing import Any

from conduit.runtime import bus, owners
from conduit.runtime.lanes import KeyedLanes
from conduit.runtime.process import serve_process
from conduit.runtime.redis_client import make_redis
from conduit.runtime.settings import Settings
from conduit.records import keys
from contracts import topics
from contracts.events import QuestionAsked, ToolResult
from services.orchestrator.hooks import load_hooks
from services.orchestrator.public import PublicRelay
from services.orchestrator.runtime import Orchestrator


async def serve(settings: Settings, stop: asyncio.Event | None = None) -> None:
    """Run the orchestrator until SIGTERM/SIGINT (or ``stop``); running steps are checkpointed,
    so stopping loses nothing (``conduit.runtime.process.serve_process`` orders the shutdown)."""
    owner = owners.owner_id("orchestrator")  # its connections' name: its liveness (rules T8, A24)
    redis = make_redis(settings.store, client_name=owners.connection_name(owner))
    broker = bus.make_broker(settings, client_id="orchestrator", redis=redis)
    orch = Orchestrator(settings, redis, broker, hooks=load_hooks(redis))
    orch.owner = owner

    lanes = KeyedLanes(settings.agent.orchestrator_concurrency, "orchestrator")

    async def handle(event: Any) -> None:
        if isinstance(event, QuestionAsked):
            await orch.on_question(event)
        elif isinstance(event, ToolResult):
            await orch.on_tool_result(event)
        else:
            await orch.on_control(event)

    async def dispatch(event: Any) -> None:
        """Rule B2: a job per message, each task's in order; a control event is awaited (see the module doc)."""
        if lanes.limit <= 1:
            await handle(event)
            return
        control = not isinstance(event, (QuestionAsked, ToolResult))
        job = await lanes.submit(event.task_id, handle, event, propagate=control)
        if control:
            await job

    async def drain() -> None:
        """Let the consumed messages' jobs and short model steps finish, then hand the rest over to another replica."""
        await lanes.drain(settings.agent.shutdown_grace_s)
        running = dict(orch.running)
        if running:
            await asyncio.wait(running.values(), timeout=settings.agent.shutdown_grace_s)
        for t in running.values():
            if not t.done():
                t.cancel()
        await asyncio.gather(*running.values(), return_exceptions=True)
        for task_id, t in running.items():
            if t.cancelled():  # checkpointed before the model call: another replica resumes it now, not after the lease
                await orch.store.expire_lease(task_id)
        await orch.summaries.close()  # a summary call lost here is asked again at the session's next fold
        await redis.hdel(keys.STEPS, owner)  # nothing runs here any more (rule A24)

    # topics and message model: what contracts.channels says the orchestrator's group reads
    bus.subscribe(broker, settings.bus, redis, handler=dispatch, group_id=topics.GROUP_ORCHESTRATOR,
                  consumer_name="orchestrator")
    relay = PublicRelay(redis, broker)  # the public agent events' outbox -> conduit.agent.events
    await serve_process("orchestrator", settings, broker, redis,
                        background=[orch.run_sweeper, orch.watch_tool_availability, relay.run], drain=drain, stop=stop)


def main(settings: Settings) -> None:
    """Blocking entry point for ``conduit serve orchestrator``."""
    asyncio.run(serve(settings))
