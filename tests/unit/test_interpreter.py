"""The interpreter is one table (effect type -> handler), every effect of the ``Effect`` union has a
handler and a row in docs/architecture.md's effect table, and a lost race re-applies a transition on
the reloaded checkpoint (in memory, over the fakes of ``ports``)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import get_args

import pytest

from agentsim import Reply, Sim, TestModel, kb
from services.orchestrator.agent.effects import Effect, Step
from services.orchestrator.interpreter import HANDLERS, unhandled
from services.orchestrator.checkpointing import StaleState
from contracts.stream import StepStarted

ROOT = Path(__file__).resolve().parents[2]


def test_every_effect_has_a_handler():
    assert unhandled() == set()
    assert set(HANDLERS) == set(get_args(Effect))


def test_the_architecture_doc_names_every_effect_in_its_table():
    doc = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    table = doc[doc.index("## Effects and their order"):]
    table = table[:table.index("\n\n", table.index("| stage |"))]
    named = set(re.findall(r"`([A-Z][A-Za-z]+)`", table))
    assert {t.__name__ for t in get_args(Effect)} <= named


async def test_a_lost_race_applies_the_transition_again_on_the_reloaded_checkpoint():
    sim = Sim(TestModel(Reply(tool_calls=[kb("增值税")])), tools={})  # the tool never answers: the task waits
    await sim.ask()
    stale = sim.state.model_copy(deep=True)
    stale.version -= 1
    seen: list[int] = []

    def fn(state):
        seen.append(state.version)
        return Step(state).emit(StepStarted(step=99, phase="model"))

    await sim.interp.apply(sim.state.task_id, fn, loaded=stale)
    assert seen == [stale.version, sim.state.version - 1]  # the stale copy, then the stored one
    assert sim.events[-1] == StepStarted(step=99, phase="model")
    with pytest.raises(StaleState):
        await sim.interp.apply(sim.state.task_id, fn, loaded=stale, attempts=1)
