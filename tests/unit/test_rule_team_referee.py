"""Team mode, complete (rules A31-A33, docs/agent-rules.md), in process over ``teamsim.Team``: the tenant's
MCP tools reach workers, and when two workers' findings give different values for one quantity the final
answer names the disagreement and its sources."""

from __future__ import annotations

from typing import Any

import pytest

from agentsim import Reply, ok, passage, settings
from contracts.evidence import EvidenceItem
from contracts.mcp import McpTool, canonical_name, function_name
from services.orchestrator.agent import referee, workers
from services.orchestrator.testmodel import FunctionModel
from teamsim import Team
from test_rule_team import QUESTION, delegate, draft_of, numbers_in, role

LOOKUP = {"type": "object", "properties": {"client": {"type": "string"}}, "required": ["client"]}


def mcp(name: str = "lookup_client", server: str = "crm") -> McpTool:
    return McpTool(name=canonical_name(server, name), function=function_name(server, name), server=server, tool=name,
                   description="Look a client up.", input_schema=LOOKUP, read_only=True)


def crm_result(call: Any):
    item = EvidenceItem(chunk_id="crm:c-1", kind="tool", title="mcp.crm.lookup_client", text="客户 ACME：小规模纳税人。")
    return ok(call, item).model_copy(update={"tool": call.name})


# ------------------------------------------------------------------ A31 MCP tools for workers
def test_rule_a31_kinds_name_mcp_tools_by_name_or_pattern():
    tools = ["kb_search", "mcp.crm.lookup_client", "mcp.files.read"]
    operator = workers.kind(settings(), "tool_operator")
    assert workers.tools_of(operator, tools, 1, 2) == ["mcp.crm.lookup_client", "mcp.files.read"]
    assert "tool_operator" not in [k.name for k in workers.offered(settings(), ["kb_search"])]  # no MCP tool: not offered
    own = settings(team_workers=[{"name": "crm_reader", "description": "d", "prompt": "p",
                                  "tools": ["kb_search", "mcp.crm.*"]}])
    assert workers.tools_of(workers.kind(own, "crm_reader"), tools, 1, 2) == ["kb_search", "mcp.crm.lookup_client"]
    with pytest.raises(ValueError):
        workers.kinds(settings(team_workers=[{"name": "x", "description": "d", "prompt": "p", "tools": ["crm.*"]}]))


async def test_rule_a31_a_worker_calls_the_tenants_mcp_tool_and_its_evidence_reaches_the_answer():
    def brain(messages: list[dict[str, Any]], tools: Any) -> Reply:
        tool_texts = [m["content"] for m in messages if m["role"] == "tool"]
        who = role(messages)
        if who == "finalizer":
            return Reply(content=draft_of(messages))
        if who == "supervisor":
            if not tool_texts:
                return Reply(tool_calls=[delegate("tool_operator", "查客户 ACME 的纳税人类型")])
            return Reply(content="ACME 是小规模纳税人" + "".join(f"[{n}]" for n in numbers_in(tool_texts)) + "。")
        if not tool_texts:
            return Reply(tool_calls=[{"name": "mcp__crm__lookup_client", "arguments": {"client": "ACME", "reason": "查"}}])
        return Reply(content="ACME 是小规模纳税人[1]。")

    t = Team(FunctionModel(brain), tools={"mcp.crm.lookup_client": crm_result}, mcp_tools=[mcp()])
    root = await t.ask("ACME 是什么纳税人？")
    assert "tool_operator" in root.workers
    (kid,) = t.children()
    assert kid.state.allowed_tools == ["mcp.crm.lookup_client"] and kid.state.status == "completed"
    assert [r.name for r in kid.requests] == ["mcp.crm.lookup_client"]
    assert root.status == "completed" and root.answer == "ACME 是小规模纳税人[1]。"
    assert [e.chunk_id for e in root.evidence] == ["crm:c-1"]
    worker_tools = next(c[1] for c in t.model.calls if role(c[0]) == "worker")
    assert [x["function"]["name"] for x in worker_tools] == ["mcp__crm__lookup_client"]


# ------------------------------------------------------------------ A32 detection
@pytest.mark.parametrize("a, b, disputed", [
    ("小规模纳税人的征收率为3%[1]。", "增值税征收率是1%[2]。", [("征收率", ["3%", "1%"])]),
    ("年休假5天[1]。", "年休假5天[2]，满十年的年休假10天[2]。", []),   # a value in common: a tiered rule
    ("征收率为3%[1]。", "起征点为5000元[2]。", []),                     # different quantities
    ("征收率为3%[1]。", "征收率为3％[2]。", []),                          # the same value, full-width %
    ("保管期限为10年[1]。", "保管期限为30年[2]。", [("保管期限", ["10年", "30年"])]),
])
def test_rule_a32_workers_dispute_a_quantity_when_their_values_share_nothing(a, b, disputed):
    found = referee.disagreements([{"worker": "kb_researcher", "text": a}, {"worker": "web_researcher", "text": b}])
    assert [(d.quantity, d.values()) for d in found] == disputed


def test_rule_a32_one_workers_own_values_never_dispute_each_other():
    assert referee.disagreements([{"worker": "kb_researcher", "text": "征收率为3%[1]，减按征收率为1%[1]。"}]) == []


# ------------------------------------------------------------------ A33 the finalizer names it
CORPUS = {"增值税征收率": [passage("p1", "征收率为百分之三。")], "增值税征收率优惠": [passage("p2", "减按百分之一。")]}


def disputing_brain(final):
    said = {"增值税征收率": "征收率为3%[1]。", "增值税征收率优惠": "征收率为1%[1]。"}

    def brain(messages: list[dict[str, Any]], tools: Any) -> Reply:
        tool_texts = [m["content"] for m in messages if m["role"] == "tool"]
        who = role(messages)
        if who == "finalizer":
            return Reply(content=final(messages))
        if who == "supervisor":
            if not tool_texts:
                return Reply(tool_calls=[delegate("kb_researcher", "增值税征收率"),
                                         delegate("kb_researcher", "增值税征收率优惠")])
            return Reply(content="小规模纳税人的征收率为3%[1]。")  # picks one silently
        task = next(m["content"] for m in messages if m["role"] == "user")
        if not tool_texts:
            return Reply(tool_calls=[{"name": "kb_search", "arguments": {"query": task, "reason": "查"}}])
        return Reply(content=said[task])
    return brain


async def test_rule_a33_a_draft_that_picks_one_value_gets_a_note_naming_both_with_their_sources():
    t = Team(FunctionModel(disputing_brain(lambda m: "小规模纳税人的征收率为3%[1]。")), tools={"kb_search": lambda c: ok(
        c, *CORPUS[c.arguments["query"]])})
    root = await t.ask(QUESTION)
    final_call = next(c[0] for c in t.model.calls if role(c[0]) == "finalizer")
    assert "来源之间的分歧" in final_call[-1]["content"] and "3%[1]；1%[2]" in final_call[-1]["content"]
    assert root.answer.startswith("小规模纳税人的征收率为3%[1]。")
    assert "说法不一致：3%[1]；1%[2]" in root.answer
    assert [c.index for c in t.root.of("task.completed")[0].citations] == [1, 2]
    trace = next(e for e in root.trace if e.get("phase") == "finalizer")
    assert trace["disagreements"] == [{"quantity": "征收率", "values": ["3%", "1%"]}]


async def test_rule_a33_a_rewrite_that_names_the_disagreement_is_kept_with_the_new_citation():
    text = "关于征收率，来源不一致：一处为3%[1]，另一处为1%[2]。"
    t = Team(FunctionModel(disputing_brain(lambda m: text)),
             tools={"kb_search": lambda c: ok(c, *CORPUS[c.arguments["query"]])})
    root = await t.ask(QUESTION)
    assert root.answer == text
    assert next(e for e in root.trace if e.get("phase") == "finalizer")["reason"] == "rewritten"
