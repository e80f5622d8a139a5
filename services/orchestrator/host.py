"""What the sweeper (``sweeper.py``) uses of the ``Orchestrator``.

``runtime.Orchestrator`` hands itself to the sweeper, which sees it through this protocol, so it does
not import ``runtime`` and the two modules form no import cycle (docs/architecture.md, "Layers"). The
model steps (``steps.py``) see only the interpreter and its ports.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from redis.asyncio import Redis

from conduit.records.taskstream import TaskEventLog
from conduit.runtime.settings import Settings
from contracts.events import QuestionAsked
from services.orchestrator.agent.deps import Deps
from services.orchestrator.agent.effects import Step
from services.orchestrator.agent.state import TaskState
from conduit.runtime.llm.model import Model
from services.orchestrator.outputs import Outputs
from services.orchestrator.checkpointing import Transition
from services.orchestrator.store import StateStore


class StepRunner(Protocol):
    """The model steps of this replica (``steps.ModelSteps``): ``running`` by task id, ``spawn`` starts one."""

    running: dict[str, asyncio.Task[None]]

    def spawn(self, task_id: str, resumed: bool = False, state: TaskState | None = None) -> None:
        """Start a model step for ``task_id`` in the background."""


class OrchestratorView(Protocol):
    """The parts of ``runtime.Orchestrator`` that the sweeper calls (same names, same shapes)."""

    settings: Settings
    redis: Redis
    events: TaskEventLog
    store: StateStore
    model: Model | None
    deps: Deps
    out: Outputs
    steps: StepRunner
    timers_from: float
    """``time.monotonic()`` seconds before which the sweeper fires no tool deadline."""
    owner: str | None
    """This process's owner name (``conduit.runtime.owners``; rule A24)."""
    runs_started: dict[str, float]
    """Idempotency key -> epoch seconds its run began, of the tool calls live processes run now (rule A36)."""

    @property
    def running(self) -> dict[str, asyncio.Task[None]]:
        """Model steps running on this replica, by task id."""

    async def apply(self, task_id: str, fn: Transition, *, loaded: TaskState | None = None,
                    attempts: int = ..., new_task: bool = False) -> Step | None:
        """Apply transition ``fn`` to ``task_id`` and carry out its effects (``runtime.Orchestrator.apply``)."""

    async def on_question(self, event: QuestionAsked) -> None:
        """Start a task (idempotent)."""

    async def on_control(self, event: Any) -> None:
        """Handle a control event (cancel, approval decision)."""

    async def wake(self, task_id: str) -> None:
        """Fire a task's due timers."""

    async def rescue(self, task_id: str, idempotency_key: str, owner: str) -> None:
        """Rule A23: send a call again now; the process running it (``owner``) is gone."""
