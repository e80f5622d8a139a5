"""Remote A2A agents as tools, in process (rules T10, T11; docs/a2a.md "Remote agents as tools"): names,
risk, the reply folded from the SDK's stream items, its evidence, the message id, the SSRF guard, the agent
offering, holding and citing a remote agent's call."""

from __future__ import annotations

import pytest
from a2a.types.a2a_pb2 import (
    Artifact,
    Message,
    Part,
    StreamResponse,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from agentsim import Reply as ModelReply, Sim, TestModel, ok
from google.protobuf.struct_pb2 import Value
from google.protobuf.json_format import ParseDict
from pydantic import ValidationError

from conduit.runtime.settings import Settings
from conduit.runtime.toolservice import ToolFailure
from contracts import topics
from contracts.a2a import A2aAgentConfig, agent_tool, from_settings, is_a2a
from contracts.events import ToolRequested, ToolRequestPayload
from contracts.tools import request_topic
from services.mcp import agentreply
from services.mcp.agents import RemoteAgents, message_id
from services.orchestrator.agent import policies

AGENT = A2aAgentConfig(name="lawyer", url="http://127.0.0.1:9/", headers={"Authorization": "Bearer k"})


def test_an_agent_is_one_tool_named_a2a_and_external_unless_read_only():
    tool = agent_tool(AGENT, "Answers law questions.")
    assert tool.name == "a2a.lawyer" and is_a2a(tool.name) and not is_a2a("mcp.x.y")
    schema = tool.openai_schema()["function"]
    assert schema["name"] == "a2a__lawyer" and schema["description"].startswith("[A2A agent lawyer] Answers law")
    assert schema["parameters"]["required"] == ["message", "reason"]
    assert tool.call_arguments({"message": "m", "reason": "r"}) == {"message": "m"}
    assert tool.risk == "external" and policies.default_approval(policies.risk_of(tool.name, tool)) == "always"
    ro = agent_tool(AGENT.model_copy(update={"read_only": True}))
    assert ro.risk == "read_only" and policies.default_approval(policies.risk_of(ro.name, ro)) == "never"
    assert request_topic("a2a.lawyer") == topics.TOOL_REQUESTS_MCP


def test_agents_come_from_the_settings_per_tenant_with_shared_ones():
    agents = {"acme": [{"name": "lawyer", "url": "https://a.example/"}], "*": [
        {"name": "lawyer", "url": "https://shared.example/"}, {"name": "tax", "url": "https://t.example/"}]}
    assert [(c.name, c.url) for c in from_settings(agents, "acme")] == [("lawyer", "https://a.example/"),
                                                                       ("tax", "https://t.example/")]
    assert [c.name for c in from_settings(agents, "other")] == ["lawyer", "tax"]
    with pytest.raises(ValidationError):
        A2aAgentConfig.model_validate({"name": "x", "url": "ftp://x"})
    assert AGENT.digest() != AGENT.model_copy(update={"headers": {}}).digest()


def _part(data: dict) -> Part:
    return Part(data=ParseDict(data, Value()))


def test_the_reply_folds_the_stream_and_becomes_one_cited_evidence_item():
    source = {"source": {"index": 1, "title": "《中华人民共和国增值税法》", "locator": "第十一条", "url": ""}}
    items = [
        StreamResponse(task=Task(id="t1", context_id="c1", status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED))),
        StreamResponse(status_update=TaskStatusUpdateEvent(task_id="t1", status=TaskStatus(state=TaskState.TASK_STATE_WORKING))),
        StreamResponse(artifact_update=TaskArtifactUpdateEvent(task_id="t1", artifact=Artifact(
            artifact_id="answer", parts=[Part(text="征收率为")]))),
        StreamResponse(artifact_update=TaskArtifactUpdateEvent(task_id="t1", append=True, artifact=Artifact(
            artifact_id="answer", parts=[Part(text="百分")]))),
        StreamResponse(artifact_update=TaskArtifactUpdateEvent(task_id="t1", last_chunk=True, artifact=Artifact(
            artifact_id="answer", parts=[Part(text="征收率为百分之三[1]。"), _part(source)]))),
        StreamResponse(status_update=TaskStatusUpdateEvent(task_id="t1", status=TaskStatus(state=TaskState.TASK_STATE_COMPLETED))),
    ]
    reply = agentreply.Reply()
    for item in items[:4]:
        agentreply.fold(reply, item)
    assert reply.text == "征收率为百分" and not reply.done
    for item in items[4:]:
        agentreply.fold(reply, item)
    assert reply.done and reply.text == "征收率为百分之三[1]。" and reply.sources == [source["source"]]
    item = agentreply.evidence("a2a.lawyer", AGENT.url, reply, 2000)
    assert item.kind == "tool" and item.title == "a2a.lawyer" and item.chunk_id.startswith("a2a:")
    assert item.text.startswith("征收率为百分之三[1]。") and "[1] 《中华人民共和国增值税法》 第十一条" in item.text
    assert item.metadata["remote_task_id"] == "t1" and item.metadata["state"] == "completed"


def test_a_direct_message_is_the_whole_answer_and_a_question_back_is_not_done_until_it_waits():
    reply = agentreply.fold(agentreply.Reply(), StreamResponse(message=Message(parts=[Part(text="hello")])))
    assert reply.done and reply.text == "hello"
    waiting = agentreply.fold(agentreply.Reply(), StreamResponse(task=Task(id="t", status=TaskStatus(
        state=TaskState.TASK_STATE_INPUT_REQUIRED, message=Message(parts=[Part(text="which year?")])))))
    assert waiting.done and waiting.status_text == "which year?"
    assert agentreply.state_name(waiting.state) == "input-required"


def test_the_message_id_follows_the_idempotency_key():
    """Rule T10: a run of the same call again sends the same A2A message id."""
    assert message_id("t:1:c") == message_id("t:1:c") != message_id("t:2:c")
    assert message_id("t:1:c").startswith("conduit-")


def _request(tool: str = "a2a.lawyer", message: str = "征收率？") -> ToolRequested:
    return ToolRequested(task_id="t", session_id="s", tenant_id="acme", user_id="u", payload=ToolRequestPayload(
        call_id="c", tool=tool, arguments={"message": message, "reason": "r"}, step=1, idempotency_key="t:1:c"))


async def test_loopback_is_refused_unless_private_addresses_are_allowed():
    """Rule T11: the SSRF guard refuses a remote agent on 127.0.0.1 before anything is sent."""
    agents = RemoteAgents(Settings(a2a_agents={"acme": [AGENT.model_dump()]}))
    with pytest.raises(ToolFailure) as refused:
        await agents.call({"message": "征收率？", "reason": "r"}, _request(), 5.0)
    assert refused.value.error.kind == "forbidden" and refused.value.error.error_code == "a2a_forbidden_address", refused.value.error
    status, tools = await agents.listed(AGENT)
    assert not status.ok and "loopback" in (status.error or "") and tools == []
    with pytest.raises(ToolFailure) as unknown:
        await agents.call({"message": "m"}, _request("a2a.nobody"), 5.0)
    assert unknown.value.error.kind == "forbidden"
    opened = RemoteAgents(Settings(a2a_agents={"acme": [AGENT.model_dump()]}, a2a_allow_private=True))
    with pytest.raises(ToolFailure) as down:  # allowed, and nothing listens on port 9: transient
        await opened.call({"message": "m", "reason": "r"}, _request(), 5.0)
    assert down.value.error.kind == "transient", down.value.error


async def test_the_agent_holds_a_remote_agents_call_for_approval_and_cites_its_answer():
    def cite(messages, tools):
        assert "<untrusted_content>" in messages[-1]["content"]
        return ModelReply(content="另一个智能体答复：百分之三[1]。")

    def answered(call):
        item = agentreply.evidence(call.name, AGENT.url, agentreply.Reply(texts={"answer": "百分之三"}), 2000)
        return ok(call, item).model_copy(update={"tool": call.name})

    ask = {"name": "a2a__lawyer", "arguments": {"message": "征收率？", "reason": "问法律智能体"}}
    model = TestModel(ModelReply(tool_calls=[ask]), default=cite)
    sim = Sim(model, tools={"a2a.lawyer": answered}, mcp_tools=[agent_tool(AGENT)])
    state = await sim.ask()
    [held] = state.pending_approvals()
    assert held.name == held.tool == "a2a.lawyer" and sim.requests == [], "nothing is sent before the approval"
    from contracts.events import ApprovalDecisionPayload
    from services.orchestrator.agent import approvals
    await sim.run(approvals.decide(sim.deps, state, ApprovalDecisionPayload(
        call_id=held.call_id, decision="approve", arguments_digest=held.arguments_digest), sim.now))
    assert [r.name for r in sim.requests] == ["a2a.lawyer"]
    assert sim.state.status == "completed" and sim.of("task.completed")[0].citations[0].title == "a2a.lawyer"


async def test_a_push_url_passes_the_ssrf_guard_when_it_is_set():
    """Rules T11, T12: a push URL on loopback is refused unless private addresses are allowed; metadata never."""
    from a2a.utils.errors import InvalidParamsError

    from conduit.runtime.ssrf import AddressPolicy
    from services.gateway.agents.a2a_push import check_url

    async def code(url: str, policy: AddressPolicy) -> str | None:
        try:
            await check_url(url, policy)
        except InvalidParamsError as exc:
            return exc.data["code"]
        return None

    closed, opened = AddressPolicy(), AddressPolicy(allow_private=True)
    assert await code("http://127.0.0.1:8080/push", closed) == "push_url_forbidden"
    assert await code("http://127.0.0.1:8080/push", opened) is None
    assert await code("http://169.254.169.254/latest", opened) == "push_url_forbidden"
    assert await code("http://[::ffff:10.0.0.1]/push", closed) == "push_url_forbidden"
    for bad in ("ftp://127.0.0.1/x", "http://user:pw@127.0.0.1/x", "not a url", "http://127.0.0.1:99999/x"):
        assert await code(bad, opened) == "push_url_invalid", bad
