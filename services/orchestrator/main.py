"""Orchestrator process: consume questions, tool results and control events; run the agent."""

from __future__ import annotations

import asyncio
import signal
from typing import Annotated, Union

from pydantic import Field

from conduit import bus, liveness
from conduit.redis_client import make_redis
from conduit.settings import Settings
from contracts import topics
from contracts.events import ApprovalDecided, QuestionAsked, TaskCancelled, ToolResult
from services.orchestrator.engine import Orchestrator

ControlEvent = Annotated[Union[TaskCancelled, ApprovalDecided], Field(discriminator="type")]


async def serve(settings: Settings) -> None:
    """Run the orchestrator until SIGTERM/SIGINT; running steps are checkpointed, so stopping loses nothing."""
    redis = make_redis(settings)
    broker = bus.make_broker(settings, client_id="orchestrator")
    orch = Orchestrator(settings, redis, broker)
    bus.subscribe(broker, settings, redis, topic=topics.QUESTIONS, model=QuestionAsked, handler=orch.on_question,
                  group_id=topics.GROUP_ORCHESTRATOR_QUESTIONS, consumer_name="orchestrator-questions")
    bus.subscribe(broker, settings, redis, topic=topics.TOOL_RESULTS, model=ToolResult, handler=orch.on_tool_result,
                  group_id=topics.GROUP_ORCHESTRATOR_RESULTS, consumer_name="orchestrator-results")
    bus.subscribe(broker, settings, redis, topic=topics.CONTROL, model=ControlEvent, handler=orch.on_control,
                  group_id=topics.GROUP_ORCHESTRATOR_CONTROL, consumer_name="orchestrator-control")
    await bus.ensure_topics(settings)
    await broker.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    background = [asyncio.create_task(orch.run_sweeper()), asyncio.create_task(liveness.heartbeat(redis, "orchestrator"))]
    await stop.wait()
    await broker.stop()
    for t in background:
        t.cancel()
    # running model steps are abandoned with their leases: another replica resumes them from the checkpoint
    for t in list(orch.running.values()):
        t.cancel()
    await asyncio.gather(*orch.running.values(), return_exceptions=True)
    await redis.aclose()


def main(settings: Settings) -> None:
    """Blocking entry point for ``conduit serve orchestrator``."""
    asyncio.run(serve(settings))
