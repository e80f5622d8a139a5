"""Rule A34 watched: a transition applied by the interpreter leaves the state it was given as it was.

``watch()`` wraps ``checkpointing.transition`` as the interpreter calls it: the state a transition starts
from (the caller's ``loaded`` one, or each one loaded from the store) is dumped (``model_dump``) before the
transition and compared right after it returns, before the save. tests/unit/conftest.py watches every unit
test this way (all the scenarios that drive the interpreter); tests/unit/test_rule_immutable.py checks that
the watch catches a transition that changes its input, and drives the rules' main paths under it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from services.orchestrator import checkpointing, interpreter
from services.orchestrator.agent.state import TaskState


class ChangedInput(AssertionError):
    """A transition changed the state it was given (rule A34); the message names the fields."""


def _changed(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    return sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))


class _Loading:
    """The checkpoints port, remembering (state, its dump) for every state it loads."""

    def __init__(self, port: Any, inputs: list[tuple[TaskState, dict[str, Any]]]) -> None:
        self._port, self._inputs = port, inputs

    def __getattr__(self, name: str) -> Any:
        return getattr(self._port, name)

    async def load(self, task_id: str) -> TaskState | None:
        state = await self._port.load(task_id)
        if state is not None:
            self._inputs.append((state, state.model_dump()))
        return state


async def watched_transition(checkpoints: Any, lease_ttl_s: float, task_id: str, fn: checkpointing.Transition,
                             *, loaded: TaskState | None = None, **kw: Any) -> Any:
    """``checkpointing.transition`` whose ``fn`` raises ``ChangedInput`` when the state it started from
    (``loaded`` or a loaded one) differs after it from its dump before it."""
    inputs: list[tuple[TaskState, dict[str, Any]]] = [] if loaded is None else [(loaded, loaded.model_dump())]

    def checked(state: TaskState) -> Any:
        original, before = inputs[-1]  # this attempt's: ``loaded`` first, then each state loaded after a lost race
        step = fn(state)
        after = original.model_dump()
        if after != before:
            raise ChangedInput(f"task {task_id}: the transition changed its input's {_changed(before, after)}")
        return step

    return await checkpointing.transition(_Loading(checkpoints, inputs), lease_ttl_s, task_id, checked,
                                          loaded=loaded, **kw)


@contextmanager
def watch() -> Iterator[None]:
    """Every transition the interpreter applies meanwhile is checked (``watched_transition``)."""
    real = interpreter.transition
    interpreter.transition = watched_transition
    try:
        yield
    finally:
        interpreter.transition = real
