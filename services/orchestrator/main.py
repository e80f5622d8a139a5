"""Orchestrator process: one consumer (group ``conduit-orchestrator``) for questions,
tool results and control events; the agent runs in ``runtime.Orchestrator``."""

from __future__ import annotations

import asyncio
import signal
from typing import Annotated, Any, Union

from pydantic import Field

from conduit.runtime import bus, liveness
from conduit.runtime.redis_client import make_redis
from conduit.runtime.settings import Settings
from contracts import topics
from contracts.events import ApprovalDecided, QuestionAsked, TaskCancelled, ToolResult
from services.orchestrator.hooks import load_hooks
from services.orchestrator.runtime import Orchestrator

OrchestratorInput = Annotated[Union[QuestionAsked, ToolResult, TaskCancelled, ApprovalDecided], Field(discriminator="type")]
"""Every event the orchestrator consumes, told apart by ``type``."""

INPUT_TOPICS = (topics.QUESTIONS, topics.TOOL_RESULTS, topics.CONTROL)


async def serve(settings: Settings) -> None:
    """Run the orchestrator until SIGTERM/SIGINT; running steps are checkpointed, so stopping loses nothing."""
    redis = make_redis(settings)
    broker = bus.make_broker(settings, client_id="orchestrator")
    orch = Orchestrator(settings, redis, broker, hooks=load_hooks(redis))

    async def dispatch(event: Any) -> None:
        if isinstance(event, QuestionAsked):
            await orch.on_question(event)
        elif isinstance(event, ToolResult):
            await orch.on_tool_result(event)
        else:
            await orch.on_control(event)

    bus.subscribe(broker, settings, redis, topic=INPUT_TOPICS, model=OrchestratorInput, handler=dispatch,
                  group_id=topics.GROUP_ORCHESTRATOR, consumer_name="orchestrator")
    await bus.ensure_topics(settings)
    await broker.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    background = [asyncio.create_task(orch.run_sweeper()), asyncio.create_task(liveness.heartbeat(redis, "orchestrator"))]
    await stop.wait()
    background[1].cancel()  # stop announcing liveness first
    for sub in broker.subscribers:  # stop taking messages; in-flight handlers finish and commit
        await sub.stop()
    background[0].cancel()
    running = dict(orch.running)
    if running:  # let short model steps finish, then hand the rest over
        await asyncio.wait(running.values(), timeout=settings.shutdown_grace_s)
    for task_id, t in running.items():
        if not t.done():
            t.cancel()
    await asyncio.gather(*running.values(), return_exceptions=True)
    for task_id, t in running.items():
        if t.cancelled():  # checkpointed before the model call: another replica resumes it now, not after the lease
            await orch.store.expire_lease(task_id)
    await asyncio.gather(*list(orch.background_tasks), return_exceptions=True)  # public events still in flight
    await broker.stop()  # the producer closes last: finishing steps could still publish
    await redis.aclose()


def main(settings: Settings) -> None:
    """Blocking entry point for ``conduit serve orchestrator``."""
    asyncio.run(serve(settings))
