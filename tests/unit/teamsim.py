"""An in-memory driver of a team (rules D1-D9): one ``agentsim.Sim`` per task, no broker or Redis.

``Team`` plays the bus between tasks: a supervisor's delegate request starts a child ``Sim`` with
the ``question.asked`` the orchestrator would publish (``team.child_question``); an ended child's
``team.child_result`` is recorded on its parent as the ``tool.result`` it would send; a
``CancelChild`` effect cancels the child. Children run one after the other (time does not move),
which is what the rules see of a parallel fan-out.
"""

from __future__ import annotations

import uuid
from typing import Any

from contracts.events import QuestionAsked, QuestionPayload
from services.orchestrator.agent import endings, planning, recording, team
from services.orchestrator.agent.state import TaskState
from services.orchestrator.testmodel import FunctionModel
from agentsim import T0, Sim, ToolFn


class Team:
    """A supervisor and its workers driven through the core in memory.

    Args:
        model: the one model every task calls (a ``FunctionModel`` telling the roles apart).
        tools: tool answers of every task (``agentsim.Sim``).
        silent: sub-questions whose worker never reports back (its result is lost).
        failing: sub-questions whose worker fails at once (``internal_error``).
        fields: settings (``agentsim.settings``).
    """

    def __init__(self, model: FunctionModel, tools: dict[str, ToolFn] | None = None, silent: set[str] = frozenset(),
                 failing: set[str] = frozenset(), allowed: list[str] | None = None, mcp_tools: list | None = None,
                 **fields: Any) -> None:
        self.model, self.tools, self.fields, self.allowed = model, tools, fields, allowed
        self.mcp_tools = list(mcp_tools or [])  # the tenant's MCP catalog (every task of the tree reads it)
        self.root = Sim(model, tools, allowed=allowed, mcp_tools=self.mcp_tools, **fields)
        self.sims: dict[str, Sim] = {}
        self.silent, self.failing = set(silent), set(failing)
        self.reported: set[str] = set()

    async def ask(self, text: str, mode: str | None = "team", tenant: str = "default") -> TaskState:
        """Ask ``text`` in ``mode`` and run the whole tree until nothing moves."""
        q = QuestionAsked(task_id=uuid.uuid4().hex, session_id="s", tenant_id=tenant, occurred_at=T0,
                          payload=QuestionPayload(question=text, mode=mode))  # type: ignore[arg-type]
        self.sims[q.task_id] = self.root
        await self.root.ask(q)
        await self.settle()
        assert self.root.state is not None
        return self.root.state

    def children(self) -> list[Sim]:
        """The workers' sims, in start order."""
        return [s for s in self.sims.values() if s is not self.root]

    async def settle(self) -> None:
        """Start requested children, deliver ended children's results, carry out cancels, until quiet."""
        moved = True
        while moved:
            moved = False
            for sim in list(self.sims.values()):
                moved |= await self._start_children(sim)
                moved |= await self._cancel(sim)
            for task_id, sim in list(self.sims.items()):
                moved |= await self._report(task_id, sim)

    async def _start_children(self, parent: Sim) -> bool:
        moved = False
        for call in parent.requests:
            if call.name != "delegate" or call.child is None:
                continue
            child_id = team.child_task_id(call.idempotency_key)
            if child_id in self.sims:
                continue
            assert parent.state is not None
            q = team.child_question(parent.state, call)
            sim = Sim(self.model, self.tools, **self.fields)  # every tool is configured; the question narrows them
            sim.now = parent.now
            self.sims[child_id] = sim
            allowed = q.payload.allowed_tools
            mcp = [t for t in self.mcp_tools if allowed is None or t.name in allowed]  # as runtime.on_question
            step = planning.start(sim.deps, q, [t for t in sim.allowed if allowed is None or t in allowed], [],
                                  mcp_tools=mcp)
            if q.payload.question in self.failing:
                step = endings.fail(step.state, "internal_error", "the worker crashed", sim.now)
            await sim.run(step)
            moved = True
        return moved

    async def _cancel(self, sim: Sim) -> bool:
        moved = False
        while sim.cancels:
            cancel = sim.cancels.pop(0)
            child = self.sims.get(cancel.task_id)
            if child is not None and child.state is not None and not child.state.terminal:
                await child.run(endings.on_cancel(child.state, cancel.reason, child.now))
                moved = True
        return moved

    async def _report(self, task_id: str, sim: Sim) -> bool:
        state = sim.state
        if state is None or state.child is None or not state.terminal or task_id in self.reported:
            return False
        self.reported.add(task_id)
        if state.question in self.silent:
            return False
        parent = self.sims[state.child.parent_task_id]
        assert parent.state is not None
        result = team.child_result(sim.deps, state)
        await parent.run(recording.record_results(parent.deps, parent.state, [result], parent.now))
        return True
