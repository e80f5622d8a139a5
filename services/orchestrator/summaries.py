"""The model's rolling summary of a session (rule M7, docs/agent-rules.md), run off the task's path.

``planning.start`` folds older turns by extraction at once and, when a model is configured, asks for
a ``Summarise`` effect; this runs that call in the background (the task's first token never waits
for it), bounded by ``context_summary_timeout_s``, and writes the model's text over the extracted
lines only while no later fold came first (``context.with_model_summary``, atomically). Fail-open:
a failed, empty or late call leaves the extracted summary, and the next fold asks again for every
turn the model has not summarised. A replica that dies mid-call loses only that call.
"""

from __future__ import annotations

import asyncio

import structlog
from redis.asyncio import Redis

from conduit.records import sessions
from conduit.runtime.settings import Settings
from services.orchestrator.agent import context as context_rules
from services.orchestrator.agent.effects import Summarise
from conduit.runtime.llm.model import Model

log = structlog.get_logger("conduit.orchestrator.summaries")


async def _ignore(_text: str) -> None:
    return None


class SessionSummaries:
    """Runs ``Summarise`` effects as background tasks (``spawn``); ``close`` cancels what still runs."""

    def __init__(self, settings: Settings, redis: Redis, model: Model | None) -> None:
        self.settings, self.redis, self.model = settings, redis, model
        self.running: set[asyncio.Task[bool]] = set()

    def spawn(self, effect: Summarise) -> None:
        """Start the summary call of ``effect`` (nothing without a model)."""
        if self.model is None:
            return
        task = asyncio.create_task(self.run(effect))
        self.running.add(task)
        task.add_done_callback(self.running.discard)

    async def run(self, effect: Summarise) -> bool:
        """One summary call and its write; True when the model's summary was stored (never raises)."""
        assert self.model is not None
        try:
            reply = await asyncio.wait_for(
                self.model.stream(effect.messages, None, _ignore, max_tokens=context_rules.SUMMARY_MAX_TOKENS,
                                  model=effect.model),
                self.settings.agent.context_summary_timeout_s)
            written = await sessions.update_context(
                self.redis, effect.session_id,
                lambda ctx: context_rules.with_model_summary(ctx, effect.upto, reply.content),
                self.settings.gateway.task_events_ttl_s)
        except Exception:  # noqa: BLE001 - fail-open: the extracted summary stays
            log.warning("session summary failed", session_id=effect.session_id, exc_info=True)
            return False
        log.info("session summary", session_id=effect.session_id, written=written)
        return written

    async def close(self) -> None:
        """Cancel the calls still running (a stopping replica)."""
        for task in list(self.running):
            task.cancel()
        await asyncio.gather(*self.running, return_exceptions=True)
