"""Team mode rules D1-D9 (docs/agent-rules.md), in process: a supervisor, workers as child tasks,
the tree's one budget, limits, cancel cascade, failing children, evidence renumbering and the
finalizer. The bus between the tasks is ``teamsim.Team``; the real stack is tests/stack/test_team.py."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from agentsim import T0, Reply, Sim, ok, passage, settings
from contracts.evidence import EvidenceItem
from services.orchestrator.agent import finalizer, prompt, team, workers
from services.orchestrator.agent.deps import Deps
from services.orchestrator.testmodel import FunctionModel
from teamsim import Team

QUESTION = "个人所得税和增值税对小规模纳税人分别有什么规定？"
CORPUS = {  # kb_search query -> passages (p2 is found by both workers: one number in the parent)
    "个人所得税": [passage("p1", "个人所得税条文。"), passage("p2", "小规模纳税人条文。")],
    "增值税": [passage("p2", "小规模纳税人条文。"), passage("p3", "增值税征收率条文。")],
}


def kb_tool(call: Any):
    return ok(call, *CORPUS.get(call.arguments["query"], []))


def delegate(worker: str, task: str) -> dict[str, Any]:
    return {"name": "delegate", "arguments": {"worker": worker, "task": task, "reason": "分头研究"}}


def role(messages: list[dict[str, Any]]) -> str:
    system = messages[0]["content"]
    if system.startswith(finalizer.FINALIZER_PROMPT[:20]):
        return "finalizer"
    return "supervisor" if system.startswith(team.SUPERVISOR_PROMPT[:20]) else "worker"


def numbers_in(texts: list[str]) -> list[str]:
    return sorted(set(re.findall(r"\[(\d+)\]", "\n".join(texts))), key=int)


def draft_of(messages: list[dict[str, Any]]) -> str:
    return re.search(rf"{prompt.OPEN}\n(.*)\n{prompt.CLOSE}", messages[-1]["content"], re.S).group(1)


def brain(plan: list[dict[str, Any]] | None = None, final=None, worker_answer=None):
    """A model playing every role: the supervisor delegates ``plan`` (default: one kb researcher per
    tax) and then cites every number it was shown; a worker searches its sub-question and cites
    what it found; the finalizer returns ``final(draft)`` (default: the draft, reworded)."""
    plan = plan if plan is not None else [delegate("kb_researcher", "个人所得税"), delegate("kb_researcher", "增值税")]

    def reply(messages: list[dict[str, Any]], tools: Any) -> Reply:
        tool_texts = [m["content"] for m in messages if m["role"] == "tool"]
        who = role(messages)
        if who == "finalizer":
            draft = draft_of(messages)
            return Reply(content=final(draft) if final else "总结：" + draft)
        if who == "supervisor":
            if not tool_texts:
                return Reply(tool_calls=plan)
            return Reply(content="规定如下" + "".join(f"[{n}]" for n in numbers_in(tool_texts)) + "。")
        task = next(m["content"] for m in messages if m["role"] == "user")
        if not tool_texts:
            return Reply(tool_calls=[{"name": "kb_search", "arguments": {"query": task, "reason": "查法条"}}])
        if worker_answer:
            return Reply(content=worker_answer(task, tool_texts))
        return Reply(content=f"{task}的规定" + "".join(f"[{n}]" for n in numbers_in(tool_texts)) + "。")
    return reply


async def run_team(plan=None, final=None, worker_answer=None, **kw: Any) -> Team:
    t = Team(FunctionModel(brain(plan, final, worker_answer)), tools={"kb_search": kb_tool}, **kw)
    await t.ask(QUESTION)
    return t


# ------------------------------------------------------------------ D1 mode, D6 worker kinds
async def test_team_mode_is_chosen_per_request_and_per_tenant():
    t = Team(FunctionModel(brain()), tools={"kb_search": kb_tool})
    state = await t.ask(QUESTION, mode=None)
    assert not state.team and t.children() == []  # default: one agent
    tenant = Team(FunctionModel(brain()), tools={"kb_search": kb_tool}, tenants={"acme": {"mode": "team"}})
    state = await tenant.ask(QUESTION, mode=None, tenant="acme")
    assert state.team and len(tenant.children()) == 2
    state = await Team(FunctionModel(brain()), tools={"kb_search": kb_tool},
                       tenants={"acme": {"mode": "team"}}).ask(QUESTION, mode="agent", tenant="acme")
    assert not state.team  # the request's mode wins


async def test_auto_mode_teams_up_when_the_question_names_several_topics():
    state = await Team(FunctionModel(brain()), tools={"kb_search": kb_tool}).ask(QUESTION, mode="auto")
    assert state.team  # 个人所得税 and 增值税
    state = await Team(FunctionModel(brain()), tools={"kb_search": kb_tool}).ask("增值税的征收率是多少？", mode="auto")
    assert not state.team


def test_worker_kinds_are_configuration_and_the_web_researcher_needs_web_search():
    s = settings()
    assert [k.name for k in workers.offered(s, ["kb_search", "code_exec"])] == ["kb_researcher", "analyst"]
    assert "web_researcher" in [k.name for k in workers.offered(s, ["kb_search", "web_search", "web_fetch"])]
    own = settings(team_workers=[{"name": "statute_reader", "description": "d", "prompt": "p", "tools": ["kb_search"]}])
    assert [k.name for k in workers.offered(own, ["kb_search"])] == ["statute_reader"]


async def test_supervisor_is_offered_only_delegate_with_the_worker_kinds():
    t = await run_team()
    tools = t.model.calls[0][1]
    assert [x["function"]["name"] for x in tools] == ["delegate"]
    assert tools[0]["function"]["parameters"]["properties"]["worker"]["enum"] == ["kb_researcher", "analyst"]
    worker_tools = next(c[1] for c in t.model.calls if role(c[0]) == "worker")
    assert [x["function"]["name"] for x in worker_tools] == ["kb_search"]


async def test_the_requests_tools_hold_for_the_whole_tree():
    t = await run_team(plan=[delegate("analyst", "算一下")], allowed=["kb_search"])
    (kid,) = t.children()
    assert kid.state.allowed_tools == ["kb_search"]  # the analyst's code_exec is not the request's


async def test_a_supervisor_whose_model_fails_answers_from_the_knowledge_base():
    t = Team(FunctionModel(lambda m, tools: Reply(error="model down")), tools={"kb_search": lambda c: ok(c, passage("p1"))})
    root = await t.ask(QUESTION)
    assert root.mode == "retrieval_only" and root.status == "completed" and root.evidence
    assert Sim(None).deps.model_configured is False
    no_model = Team(None, tools={"kb_search": kb_tool})  # type: ignore[arg-type]
    assert not (await no_model.ask(QUESTION)).team  # without a model there is no team (rule A13)


# ------------------------------------------------------------------ D2 fan-out, D7 renumbering
async def test_fan_out_renumbers_evidence_so_every_final_citation_resolves():
    t = await run_team()
    root = t.root.state
    kids = t.children()
    assert len(kids) == 2 and all(k.state.status == "completed" for k in kids)
    assert {k.state.task_id for k in kids} == {e.task_id for e in t.root.of("worker.started")}
    # each child numbers its own evidence 1..2; the parent numbers p1, p2, p3 once each
    assert [e.chunk_id for e in root.evidence] == ["p1", "p2", "p3"]
    supervisor_view = [c for c in t.model.calls if role(c[0]) == "supervisor"][-1][0]
    tool_texts = [m["content"] for m in supervisor_view if m["role"] == "tool"]
    assert "[1]" in tool_texts[0] and "[2]" in tool_texts[0] and "[3]" in tool_texts[1]
    assert root.status == "completed" and root.answer.startswith("总结：规定如下[1][2][3]")
    final = t.root.of("task.completed")[0]
    assert [c.index for c in final.citations] == [1, 2, 3]
    assert all(root.evidence[c.index - 1].chunk_id == c.chunk_id for c in final.citations)
    done = t.root.of("worker.completed")
    assert [d.outcome for d in done] == ["ok", "ok"] and "[" not in done[0].summary


async def test_children_are_real_tasks_with_their_own_budget_and_deadline():
    t = await run_team(max_tool_calls=12, max_tokens=100_000, task_deadline_s=300)
    for kid in t.children():
        c = kid.state.child
        assert c.parent_task_id == t.root.state.task_id and c.depth == 1
        assert c.max_tool_calls == 4  # its kind's budget (12 - 2 left, split in two, is more)
        assert c.max_tokens == int((100_000 - 10) * team.CHILD_SHARE) // 2  # the supervisor's first call cost 10
        assert (c.deadline_at - T0).total_seconds() == 120.0  # its kind's deadline_s
        assert kid.state.messages[0]["content"].endswith(workers.kind(settings(), "kb_researcher").prompt)
    # the tree's spend: the supervisor's own calls, the two children's, and their tool calls
    assert t.root.state.tool_calls_used == 2 + 2


async def test_supervisor_draft_is_not_streamed_only_the_final_answer():
    t = await run_team()
    types = t.root.types()
    first_delta = types.index("answer.delta")
    assert types[first_delta - 1] == "step.started" and t.root.events[first_delta - 1].phase == "final"
    assert "".join(e.text for e in t.root.of("answer.delta")) == t.root.state.answer


# ------------------------------------------------------------------ D3 limits
async def test_fan_out_limit_refuses_the_extra_calls():
    plan = [delegate("kb_researcher", f"问题{i}") for i in range(5)]
    t = await run_team(plan=plan, team_max_fan_out=4)
    assert len(t.children()) == 4
    refused = [e for e in t.root.of("tool.completed") if e.error_code == "fan_out_limit"]
    assert len(refused) == 1 and len(t.root.of("worker.started")) == 4


def test_depth_limit_withholds_delegate_and_refuses_deeper_calls():
    kind = workers.WorkerKind(name="planner", description="d", prompt="p", tools=["kb_search", "delegate"])
    assert workers.tools_of(kind, ["kb_search"], depth=1, max_depth=2) == ["kb_search", "delegate"]
    assert workers.tools_of(kind, ["kb_search"], depth=2, max_depth=2) == ["kb_search"]
    sim = Sim(allowed=["kb_search"])
    from services.orchestrator.agent.state import TaskState
    from contracts.events import ChildSpec
    state = TaskState(task_id="t", session_id="s", tenant_id="default", question="q", allowed_tools=["delegate"],
                      team=True, workers=["planner"],
                      child=ChildSpec(parent_task_id="p", root_task_id="p", parent_call_id="c", parent_key="k", worker="planner", depth=2,
                                      deadline_at=T0 + timedelta(seconds=60), max_tool_calls=4, max_tokens=9000))
    refusal = team.check_delegate(sim.deps, state, {"worker": "planner", "task": "x"}, 1)
    assert refusal is not None and refusal.error.error_code == "depth_limit"
    unknown = team.check_delegate(sim.deps, state.model_copy(update={"child": None}), {"worker": "ghost"}, 1)
    assert unknown.error.error_code == "unknown_worker"


async def test_a_worker_kind_with_delegate_runs_a_second_level():
    kinds = [{"name": "planner", "description": "splits", "prompt": "p", "tools": ["delegate"]},
             {"name": "kb_researcher", "description": "kb", "prompt": "p", "tools": ["kb_search"]}]

    def answer(messages, tools):
        system, tool_texts = messages[0]["content"], [m["content"] for m in messages if m["role"] == "tool"]
        if role(messages) == "finalizer":
            return Reply(content=draft_of(messages))
        if tools and tools[0]["function"]["name"] == "delegate" and not tool_texts:
            who = "planner" if system.startswith(team.SUPERVISOR_PROMPT[:20]) else "kb_researcher"
            return Reply(tool_calls=[delegate(who, "增值税")])
        if tools and tools[0]["function"]["name"] == "kb_search" and not tool_texts:
            return Reply(tool_calls=[{"name": "kb_search", "arguments": {"query": "增值税", "reason": "r"}}])
        return Reply(content="增值税规定" + "".join(f"[{n}]" for n in numbers_in(tool_texts)) + "。")

    t = Team(FunctionModel(answer), tools={"kb_search": kb_tool}, team_workers=kinds)
    root = await t.ask(QUESTION)
    depths = sorted(k.state.child.depth for k in t.children())
    assert depths == [1, 2] and root.status == "completed" and root.answer == "增值税规定[1][2]。"


# ------------------------------------------------------------------ D4 one budget
async def test_a_budget_too_small_for_children_refuses_the_delegation():
    t = await run_team(max_tool_calls=3)  # 2 delegate calls leave 1 call for 2 children
    assert t.children() == []
    assert [e.error_code for e in t.root.of("tool.completed")] == ["tree_budget_exhausted"] * 2
    assert t.root.state.tool_calls_used == 0


async def test_the_shared_budget_running_out_mid_tree():
    """Each child's share of 10,000 tokens is 80 % of what is left, split in two (3,996); a first call
    of 3,000 tokens leaves a child too little for its next step: it wraps up with what it found, the
    supervisor answers from the wrap-ups, and the tree's spend is counted on the parent."""
    def reply(messages, tools):
        r = brain()(messages, tools)
        if role(messages) == "worker" and r.tool_calls:
            r.tokens = 3000
        return r
    t = Team(FunctionModel(reply), tools={"kb_search": kb_tool}, max_tokens=10_000)
    root = await t.ask(QUESTION)
    kids = t.children()
    assert [k.state.child.max_tokens for k in kids] == [3996, 3996]
    assert [k.state.stop_reason for k in kids] == ["max_tokens", "max_tokens"]
    assert root.status == "completed" and root.answer.startswith("总结：规定如下[1][2][3]")
    assert root.usage.total_tokens >= sum(k.state.usage.total_tokens for k in kids) == 6000


async def test_a_silent_child_counts_as_its_whole_share():
    t = await run_team(silent={"增值税"}, max_tokens=100_000)
    call = next(c for c in t.root.state.pending if c.result is None)
    share = call.child.max_tokens
    before = t.root.state.usage.total_tokens
    await t.root.wake((call.deadline_at - t.root.now).total_seconds() + 0.1)
    kid = next(k for k in t.children() if k.state.question == "个人所得税")
    assert t.root.state.usage.total_tokens >= before + share + kid.state.usage.total_tokens


# ------------------------------------------------------------------ D5 failures, D8 cancel
async def test_a_failing_child_is_a_result_the_supervisor_reasons_about():
    t = await run_team(failing={"增值税"})
    root = t.root.state
    assert root.status == "completed"
    done = {e.worker + ":" + e.outcome for e in t.root.of("worker.completed")}
    assert done == {"kb_researcher:ok", "kb_researcher:error"}
    supervisor_view = [c for c in t.model.calls if role(c[0]) == "supervisor"][-1][0]
    assert any("worker_failed" in m["content"] for m in supervisor_view if m["role"] == "tool")
    assert [e.chunk_id for e in root.evidence] == ["p1", "p2"]


async def test_a_silent_child_times_out_is_cancelled_and_never_started_twice():
    t = await run_team(silent={"增值税"}, task_deadline_s=100)
    call = next(c for c in t.root.state.pending if c.result is None)
    await t.root.wake((call.deadline_at - t.root.now).total_seconds() + 0.1)
    await t.settle()
    assert t.root.state.status == "completed"
    assert [e.outcome for e in t.root.of("worker.completed")] == ["ok", "timeout"]
    assert len([r for r in t.root.requests if r.name == "delegate"]) == 2  # no retry of a worker
    silent = next(k for k in t.children() if k.state.question == "增值税")
    assert silent.state.status == "completed"  # it had ended; its report was lost


async def test_cancelling_the_parent_cancels_its_children():
    t = Team(FunctionModel(brain()), tools={"kb_search": lambda c: None})  # the workers' searches never answer
    root = await t.ask(QUESTION)
    assert root.status == "waiting_tool" and all(k.state.status == "waiting_tool" for k in t.children())
    from services.orchestrator.agent import endings
    await t.root.run(endings.on_cancel(root, "cancelled by user", t.root.now))
    assert len(t.root.cancels) == 2
    await t.settle()
    assert all(k.state.status == "cancelled" for k in t.children())
    assert t.root.state.status == "cancelled" and t.root.types().count("task.cancelled") == 1


async def test_wait_for_the_first_n_cancels_the_rest():
    t = await run_team(silent={"增值税"}, team_wait_for=1)
    assert t.root.state.status == "completed"
    assert [e.error_code for e in t.root.of("worker.completed")] == [None, "not_waited_for"]


def test_child_result_cuts_the_summary_and_renumbers_its_citations():
    deps = Deps.from_settings(settings(team_summary_max_chars=100), model_configured=True)
    from contracts.events import ChildSpec
    from contracts.evidence import NumberedEvidence
    from services.orchestrator.agent.state import TaskState
    items = [NumberedEvidence(**passage(f"p{i}").model_dump(), index=i) for i in (1, 2, 3)]
    state = TaskState(task_id="t", session_id="s", tenant_id="default", question="q", allowed_tools=[], status="completed",
                      evidence=items, answer="甲[3]。乙[1][低置信度]。" + "丙" * 200 + "[2]。", created_at=T0, finished_at=T0,
                      child=ChildSpec(parent_task_id="p", root_task_id="p", parent_call_id="c1", parent_key="p:1:c1", worker="kb_researcher",
                                      depth=1, deadline_at=T0, max_tool_calls=1, max_tokens=2000))
    r = team.child_result(deps, state)
    assert r.output.startswith("甲[1]。乙[2]。丙") and r.output.endswith("……") and len(r.output) <= 102
    assert [e.chunk_id for e in r.evidence] == ["p3", "p1"]  # [2] was cut away with its sentence
    assert r.idempotency_key == "p:1:c1" and r.tool == "delegate" and r.outcome == "ok"


def test_absorb_maps_duplicates_to_their_existing_number():
    from services.orchestrator.agent.evidence import EvidencePool
    from services.orchestrator.agent.state import PendingCall, TaskState
    from contracts.events import ToolResultPayload
    pool_items: list = []
    pool = EvidencePool(pool_items)
    pool.add([passage("p9"), passage("p2")])
    state = TaskState(task_id="t", session_id="s", tenant_id="default", question="q", allowed_tools=[])
    call = PendingCall(call_id="c", name="delegate", tool="delegate", arguments={}, step=1, idempotency_key="k",
                       deadline_at=T0)
    call.result = ToolResultPayload(call_id="c", tool="delegate", idempotency_key="k", outcome="ok",
                                    evidence=[passage("p2"), EvidenceItem(**passage("p5").model_dump())], output="A[1]B[2]C[7]")
    in_context, new, content = team.absorb(state, pool, call)
    assert [e.index for e in in_context] == [2, 3] and [e.chunk_id for e in new] == ["p5"]
    assert "A[2]B[3]C" in content


async def test_a_workers_approval_request_reaches_the_persons_stream():
    def worker_answer(task, tool_texts):
        return "算好了（沙箱计算）。"

    def reply(messages, tools):
        if role(messages) == "worker" and not any(m["role"] == "tool" for m in messages):
            return Reply(tool_calls=[{"name": "code_exec", "arguments": {"code": "print(1)", "reason": "算"}}])
        return brain(plan=[delegate("analyst", "算一下")], worker_answer=worker_answer)(messages, tools)
    t = Team(FunctionModel(reply), tools={"kb_search": kb_tool})
    await t.ask(QUESTION)
    (kid,) = t.children()
    assert kid.state.status == "waiting_approval"
    (notice,) = kid.notices
    assert notice.task_id == t.root.state.task_id and notice.event.type == "tool.approval_required"
    assert notice.event.task_id == kid.state.task_id and notice.event.tool == "code_exec"


# ------------------------------------------------------------------ D9 finalizer
async def test_finalizer_removes_tool_and_worker_names():
    t = await run_team(final=lambda d: "经 kb_researcher 用 `kb_search` 查明：" + d)
    assert "kb_search" not in t.root.state.answer and "kb_researcher" not in t.root.state.answer
    assert t.root.state.answer.startswith("经 用 查明：规定如下[1][2][3]")


def test_finalizer_keeps_the_draft_when_the_rewrite_changes_citations_or_adds_numbers():
    names = ["kb_search", "delegate"]
    assert finalizer.accept("税率3%[1]。", "税率 3%[1]，简述。", names) == ("税率 3%[1]，简述。", "rewritten")
    assert finalizer.accept("税率3%[1]。", "税率3%[1][2]。", names) == ("税率3%[1]。", "citations_changed")
    assert finalizer.accept("税率3%[1]。", "税率3%，起征点5000元[1]。", names)[1] == "new_numbers"
    assert finalizer.accept("用 kb_search 查到[1]。", "", names) == ("用 查到[1]。", "empty")


async def test_finalizer_failing_falls_back_to_the_draft():
    def final(draft):
        return draft + "另见[9]。"
    t = await run_team(final=final)
    assert t.root.state.answer == "规定如下[1][2][3]。"
    assert any(e.get("phase") == "finalizer" and e["reason"] == "citations_changed" for e in t.root.state.trace)
    assert "answer.reset" in t.root.types()
