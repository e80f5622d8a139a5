"""MCP tools in, in process: naming (rule X1), configuration digests (rule X2), the approval default
(rule X3), and the agent offering, vetting and citing a tenant's MCP tool (docs/mcp.md)."""

from __future__ import annotations

import pytest
from agentsim import Reply, Sim, TestModel, ok
from pydantic import ValidationError

from contracts.evidence import EvidenceItem
from contracts.mcp import (
    OPENAI_FUNCTION_NAME,
    McpServerConfig,
    McpTool,
    canonical_name,
    function_name,
    is_mcp,
)
from contracts.tools import request_topic
from contracts import topics
from services.orchestrator.agent import policies

SCHEMA = {"type": "object", "properties": {"title": {"type": "string"}, "text": {"type": "string"}},
          "required": ["title", "text"]}


LOOKUP = {"type": "object", "properties": {"category": {"type": "string"}}, "required": ["category"]}


def tool(name: str = "file_note", read_only: bool = False, server: str = "casefile", schema: dict = SCHEMA,
         **hints: bool) -> McpTool:
    return McpTool(name=canonical_name(server, name), function=function_name(server, name), server=server,
                   tool=name, description="File a note.", input_schema=schema, read_only=read_only, **hints)


def test_names_are_namespaced_and_fit_openai_function_names():
    assert canonical_name("casefile", "file_note") == "mcp.casefile.file_note"
    assert is_mcp("mcp.casefile.file_note") and not is_mcp("kb_search") and not is_mcp("mcp.Bad Server.x")
    assert function_name("casefile", "file_note") == "mcp__casefile__file_note"
    odd = [("files", "notes.create"), ("files", "notes/create"), ("files", "x" * 120), ("a" * 32, "b" * 60)]
    names = [function_name(s, t) for s, t in odd]
    assert all(OPENAI_FUNCTION_NAME.fullmatch(n) for n in names), names
    assert len(set(names)) == len(names)
    assert function_name("files", "notes.create") != function_name("files", "notes_create")  # no collision by mapping
    assert request_topic("mcp.casefile.file_note") == topics.TOOL_REQUESTS_MCP
    assert request_topic("kb_search") == topics.TOOL_REQUESTS_KB


def test_the_offered_schema_adds_a_required_reason_and_the_call_drops_it():
    schema = tool().openai_schema()
    assert schema["function"]["name"] == "mcp__casefile__file_note"
    params = schema["function"]["parameters"]
    assert params["required"] == ["title", "text", "reason"] and "reason" in params["properties"]
    assert SCHEMA["required"] == ["title", "text"], "the listed schema is not changed"
    assert tool().call_arguments({"title": "t", "text": "x", "reason": "r"}) == {"title": "t", "text": "x"}


def test_config_digest_changes_with_the_config_only():
    a = McpServerConfig(name="casefile", command=["python", "-m", "srv"])
    assert a.digest() == McpServerConfig(name="casefile", command=["python", "-m", "srv"]).digest()
    assert a.digest() != McpServerConfig(name="casefile", command=["python", "-m", "srv", "--v2"]).digest()
    assert a.digest() != McpServerConfig(name="casefile", command=["python", "-m", "srv"], env={"K": "v"}).digest()
    assert a.transport == "stdio" and McpServerConfig(name="h", url="http://x/mcp").transport == "http"
    for bad in ({"name": "x"}, {"name": "x", "command": ["a"], "url": "http://x"}, {"name": "Bad Name", "url": "http://x"},
                {"name": "x", "url": "ftp://x"}):
        with pytest.raises(ValidationError):
            McpServerConfig.model_validate(bad)
    shown = McpServerConfig(name="h", url="http://x/mcp", headers={"Authorization": "Bearer s3cret"}).public()
    assert shown["headers"] == {"Authorization": "***"}


def test_approval_default_asks_for_tools_not_marked_read_only():
    """Rules X3 and T9: an MCP tool's tier follows its annotations (MCP's defaults when absent)."""
    assert tool(read_only=False).risk == "external" and tool(read_only=True).risk == "read_only"
    assert tool(read_only=False, open_world=False).risk == "irreversible"
    assert tool(read_only=False, open_world=False, destructive=False).risk == "reversible"
    assert policies.default_approval(policies.risk_of("mcp.x.y", tool(read_only=False))) == "always"
    assert policies.default_approval(policies.risk_of("mcp.x.y", tool(read_only=True))) == "never"
    assert policies.default_approval(policies.risk_of("mcp.x.y", tool(read_only=False, open_world=False,
                                                                      destructive=False))) == "never"
    assert policies.default_approval(policies.risk_of("kb_search", None)) == "never"
    assert policies.default_approval(policies.risk_of("code_exec", None)) == "always"
    assert policies.default_approval("sandboxed", {"sandboxed": "never"}) == "never"  # a tenant's tier policy
    args = {"title": "t", "text": "x"}
    assert policies.needs_approval({}, "mcp.casefile.file_note", args, default="always")
    assert not policies.needs_approval({"mcp.casefile.file_note": "never"}, "mcp.casefile.file_note", args, default="always")
    assert not policies.needs_approval({"mcp.casefile.*": "never"}, "mcp.casefile.file_note", args, default="always")
    assert policies.needs_approval({"mcp.casefile.*": "always"}, "mcp.casefile.lookup", args, default="never")


def _mcp_result(call, text: str = "Note filed as receipt R-0001."):
    item = EvidenceItem(chunk_id="mcp:abc", kind="tool", title=call.name, text=text)
    return ok(call, item).model_copy(update={"tool": call.name})


async def test_agent_offers_the_tool_asks_approval_and_cites_its_result():
    def cite(messages, tools):
        assert "外部工具结果" in messages[-1]["content"] and "<untrusted_content>" in messages[-1]["content"]
        return Reply(content="已登记，回执号 R-0001 [1]。")

    note = {"name": "mcp__casefile__file_note", "arguments": {"title": "t", "text": "x", "reason": "登记"}}
    lookup = {"name": "mcp__casefile__lookup_rate", "arguments": {"category": "books", "reason": "查税率"}}
    model = TestModel(Reply(tool_calls=[note, lookup]), default=cite)
    sim = Sim(model, tools={"mcp.casefile.file_note": _mcp_result, "mcp.casefile.lookup_rate": _mcp_result},
              mcp_tools=[tool(), tool("lookup_rate", read_only=True, schema=LOOKUP)])
    state = await sim.ask()
    offered = {t["function"]["name"] for t in model.calls[0][1]}
    assert {"mcp__casefile__file_note", "mcp__casefile__lookup_rate", "kb_search"} <= offered
    [held] = state.pending_approvals()
    assert held.name == held.tool == "mcp.casefile.file_note"
    assert [r.name for r in sim.requests] == ["mcp.casefile.lookup_rate"], "the read-only tool runs at once"
    assert sim.of("tool.approval_required")[0].tool == "mcp.casefile.file_note"
    from contracts.events import ApprovalDecisionPayload
    from services.orchestrator.agent import approvals
    await sim.run(approvals.decide(sim.deps, state, ApprovalDecisionPayload(
        call_id=held.call_id, decision="approve", arguments_digest=held.arguments_digest), sim.now))
    assert sim.state.status == "completed" and "[1]" in (sim.state.answer or "")
    assert sim.of("task.completed")[0].citations[0].title in ("mcp.casefile.file_note", "mcp.casefile.lookup_rate")


async def test_bad_arguments_are_refused_and_an_unknown_server_is_a_protocol_error_before_anything_runs():
    bad = {"name": "mcp__casefile__file_note", "arguments": {"title": 3, "reason": "r"}}
    sim = Sim(TestModel(Reply(tool_calls=[bad])), tools={}, mcp_tools=[tool()])
    await sim.ask()
    assert [e.error_code for e in sim.of("tool.completed")][:1] == ["bad_arguments"] and sim.requests == []
    other = {"name": "mcp__elsewhere__file_note", "arguments": {"reason": "r"}}
    sim = Sim(TestModel(Reply(tool_calls=[other])), tools={}, mcp_tools=[tool()])
    state = await sim.ask()  # rule A19: no server of the tenant has it, so no catalog knows the name
    assert state.fallback_reason.startswith("unknown_tool_name") and state.mode == "retrieval_only"
    assert [e.tool for e in sim.of("tool.requested")] == [r.name for r in sim.requests] == ["kb_search"]  # rule A13


def test_a_failing_server_is_tried_again_with_a_doubling_back_off():
    from services.mcp.connections import Connection, Pool

    conn = Connection(McpServerConfig(name="dead", command=["false"]))
    waits = []
    for failures in range(1, 8):
        conn.failures = failures
        waits.append(conn.retry_after_s(5.0, 300.0))
    assert waits == [5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 300.0]
    pool = Pool()
    a = McpServerConfig(name="s", url="http://x/mcp")
    assert pool.get(a) is pool.get(McpServerConfig(name="s", url="http://x/mcp")), "one connection per digest"
    assert pool.get(a) is not pool.get(McpServerConfig(name="s", url="http://x/mcp", headers={"A": "b"}))
