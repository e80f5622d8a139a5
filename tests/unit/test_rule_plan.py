"""Rule A25, plan and replan (in process): a planned task writes a short plan first, is told it at
every step, ends a plan step with each round of tool calls and revises the plan once after a step
that found nothing; an unreadable plan or a failed planner leaves the task to go on without one."""

from __future__ import annotations

import json

from agentsim import Reply, Sim, TestModel, kb, ok, question
from contracts.stream import PlanCreated, PlanRevised, PlanStepDone, StepStarted, TaskCompleted
from services.orchestrator.agent import planner
from services.orchestrator.agent.routing import RouteDecision

ANSWER = "增值税的基本税率为百分之十三[1]。"


def plan(*steps: tuple[str, str]) -> Reply:
    return Reply(content=json.dumps({"steps": [{"goal": g, "tool": t} for g, t in steps]}, ensure_ascii=False))


async def test_a_planned_task_plans_first_and_works_to_its_plan():
    model = TestModel(plan(("查增值税税率", "kb_search"), ("作答", "none")), Reply(tool_calls=[kb("增值税 税率")]),
                      Reply(content=ANSWER))
    s = Sim(model, plan_mode="always")
    state = await s.ask()
    assert state.status == "completed" and state.answer == ANSWER
    assert [e.phase for e in s.of("step.started") if isinstance(e, StepStarted)][0] == "plan"
    created = s.of("plan.created")[0]
    assert isinstance(created, PlanCreated) and [p.goal for p in created.steps] == ["查增值税税率", "作答"]
    assert model.calls[0][1] is None  # the planner gets no tools
    note = [m["content"] for m in model.calls[1][0] if m["role"] == "system" and "执行计划" in m["content"]]
    assert note and "← 当前" in note[0]
    done = s.of("plan.step_done")
    assert [(e.index, e.status) for e in done if isinstance(e, PlanStepDone)] == [(0, "done")]
    assert state.rounds == 2  # the planning call is a step, not a round


async def test_a_step_that_finds_nothing_has_the_plan_revised_once():
    model = TestModel(plan(("查法条", "kb_search")), Reply(tool_calls=[kb("冷僻 问题")]),
                      plan(("换个说法再查", "kb_search")), Reply(tool_calls=[kb("另一种 说法")]),
                      Reply(content="没有找到相关规定。"))
    s = Sim(model, plan_mode="always", tools={"kb_search": lambda c: ok(c)})  # ok, but no evidence
    state = await s.ask()
    assert [(e.index, e.status) for e in s.of("plan.step_done")] == [(0, "failed"), (1, "failed")]
    revised = s.of("plan.revised")
    assert len(revised) == 1 and isinstance(revised[0], PlanRevised)
    assert [p.status for p in revised[0].steps] == ["failed", "pending"]
    assert "目前的计划与进展" in model.calls[2][0][1]["content"]  # the replanner saw the progress
    assert state.status == "completed" and state.replanned


async def test_an_unreadable_plan_leaves_the_task_to_go_on_without_one():
    s = Sim(TestModel(Reply(content="先查再答"), Reply(tool_calls=[kb("增值税")]), Reply(content=ANSWER)),
            plan_mode="always")
    state = await s.ask()
    assert state.status == "completed" and state.plan is None and not s.of("plan.created")
    assert {"phase": "plan", "error": "unreadable_plan"} in state.trace


async def test_off_by_default_and_auto_plans_a_question_that_needs_a_calculation():
    s = Sim(TestModel(Reply(content="好的。")))
    await s.ask()
    assert not s.of("plan.created") and len(s.model.calls) == 1
    auto = Sim(TestModel(plan(("查税率", "kb_search"), ("计算", "code_exec")), Reply(content=ANSWER)), plan_mode="auto")
    await auto.ask(question("月销售额十万元要交多少增值税？"), route=RouteDecision(route="agent", calc_hint=True))
    assert [p.tool for p in auto.of("plan.created")[0].steps] == ["kb_search", "code_exec"]
    plain = Sim(TestModel(Reply(content=ANSWER)), plan_mode="auto")
    await plain.ask(question("增值税的税率是多少？"), route=RouteDecision(route="agent"))
    assert not plain.of("plan.created")


def test_a_plan_keeps_five_steps_and_only_the_task_s_tools():
    reply = json.dumps({"steps": [{"goal": f"第{i}步", "tool": "web_search" if i == 0 else "kb_search"}
                                  for i in range(8)]})
    steps = planner.parse(reply, ["kb_search"])
    assert steps is not None and len(steps) == 5 and steps[0].tool == "none" and steps[1].tool == "kb_search"
    assert planner.parse('{"steps": []}', ["kb_search"]) is None


async def test_the_terminal_event_is_unchanged_by_a_plan():
    s = Sim(TestModel(plan(("作答", "none")), Reply(content=ANSWER)), plan_mode="always")
    await s.ask()
    assert isinstance(s.events[-1], TaskCompleted) and s.events[-1].answer.startswith("增值税的基本税率为百分之十三")
