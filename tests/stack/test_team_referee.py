"""Team mode, complete, over the real stack (rules A31-A33, docs/agent-rules.md).

- A31: the tenant's MCP server (``testkit.mcp_server``, stdio) reaches a worker: the supervisor delegates
  to ``tool_operator``, which is offered only the MCP tools, calls ``lookup_rate`` through the mcp
  service, and the final answer cites what it returned.
- A32, A33: two workers of one supervisor report different values for the same quantity, the
  supervisor's draft carries one of them and the finalizer keeps it; the answer on the person's stream
  still names the disagreement with both values and their citations, and the trace lists it.

Real tansu, Redis, Qdrant Edge with one law, the mcp service, the scripted model over HTTP; the rules
alone are tests/unit/test_rule_team_referee.py."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from ops.client import create_task, stream_task
from ops.stack import Stack
from testkit.scripted_model import ScriptedModel, Turn
from testkit.stack import auth, model_env, start_stack
from testkit.waits import wait_until
from services.orchestrator.agent import finalizer, team

QUESTION = "小规模纳税人的增值税征收率是多少？有没有优惠？"
MCP_QUESTION = "图书的增值税税率是多少？请用外部工具查。"
SAID = {"小规模纳税人 增值税 征收率": "征收率为3%", "小规模纳税人 增值税 征收率 优惠": "征收率为1%"}


def role(body: dict[str, Any]) -> str:
    system = body["messages"][0]["content"]
    if system.startswith(finalizer.FINALIZER_PROMPT[:20]):
        return "finalizer"
    return "supervisor" if system.startswith(team.SUPERVISOR_PROMPT[:20]) else "worker"


def turn(body: dict[str, Any]) -> Turn:
    """The supervisor delegates two sub-questions and drafts with the first worker's value only; each
    worker searches, then states its value citing what it found; the finalizer returns the draft."""
    tool_texts = [m["content"] for m in body["messages"] if m["role"] == "tool"]
    who = role(body)
    users = [m["content"] for m in body["messages"] if m["role"] == "user"]
    if MCP_QUESTION in users or "查图书税率" in users:
        return mcp_turn(who, body, tool_texts)
    if who == "finalizer":
        draft = re.search(r"<untrusted_content>\n(.*)\n</untrusted_content>", body["messages"][-1]["content"], re.S)
        return Turn(content=draft.group(1))
    if who == "supervisor":
        if not tool_texts:
            return Turn(tool_calls=[{"name": "delegate", "arguments": {"worker": "kb_researcher", "task": t, "reason": "分头"}}
                                    for t in SAID])
        first = re.search(r"征收率为3%(\[\d+\])", "\n".join(tool_texts))
        return Turn(content=f"小规模纳税人的征收率为3%{first.group(1) if first else ''}。")
    task = next(m["content"] for m in body["messages"] if m["role"] == "user")
    if not tool_texts:
        return Turn(tool_calls=[{"name": "kb_search", "arguments": {"query": task, "reason": "查法条"}}])
    return Turn(content=f"{SAID[task]}[1]。")


def mcp_turn(who: str, body: dict[str, Any], tool_texts: list[str]) -> Turn:
    """Rule A31's script: the supervisor delegates to ``tool_operator``; the worker calls the MCP tool
    (when offered) and cites it; the supervisor cites its result; the finalizer returns the draft."""
    if who == "finalizer":
        draft = re.search(r"<untrusted_content>\n(.*)\n</untrusted_content>", body["messages"][-1]["content"], re.S)
        return Turn(content=draft.group(1))
    if who == "supervisor":
        if not tool_texts:
            return Turn(tool_calls=[{"name": "delegate", "arguments": {"worker": "tool_operator", "task": "查图书税率",
                                                                        "reason": "外部工具"}}])
        cites = sorted(set(re.findall(r"\[(\d+)\]", "\n".join(tool_texts))))
        return Turn(content="图书的税率见外部工具结果" + "".join(f"[{n}]" for n in cites) + "。")
    offered = [t["function"]["name"] for t in body.get("tools") or []]
    if not tool_texts and "mcp__casefile__lookup_rate" in offered:
        return Turn(tool_calls=[{"name": "mcp__casefile__lookup_rate", "arguments": {"category": "books", "reason": "查税率"}}])
    return Turn(content=f"查询结果[1]（offered: {','.join(offered)}）。")


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedModel]:
    m = ScriptedModel(default=turn).start()  # type: ignore[arg-type]
    yield m
    m.stop()


@pytest.fixture(scope="module")
def stack(infra_stack, tmp_path_factory, model) -> Iterator[Stack]:
    st = start_stack(infra_stack.bootstrap, infra_stack.redis_url, tmp_path_factory.mktemp("referee"),
                     ("retriever", "mcp", "orchestrator", "gateway"),
                     model_env(model.base_url, tool_timeout_s=30) | {"CONDUIT_MCP_REFRESH_S": "1",
                      "CONDUIT_MCP_SERVERS": json.dumps({"default": [
                          {"name": "casefile", "command": [sys.executable, "-m", "testkit.mcp_server", "--notes",
                                                           str(tmp_path_factory.mktemp("notes") / "notes.jsonl")]}]})},
                     laws=["中华人民共和国增值税法"])
    yield st
    st.stop()


def test_the_final_answer_names_the_workers_disagreement_and_its_sources(stack):
    created = create_task(stack.gateway_url, QUESTION, mode="team", api_key=stack.admin_key)
    events = list(stream_task(stack.gateway_url, created["task_id"], read_timeout_s=180, api_key=stack.admin_key))
    done = events[-1]
    assert done.event == "task.completed", [e.event for e in events]
    answer = done.data["answer"]
    assert answer.startswith("小规模纳税人的征收率为3%"), answer
    note = re.search(r"说法不一致：3%((?:\[\d+\])+)；1%((?:\[\d+\])+)", answer)
    assert note, answer
    cited = {int(n) for n in re.findall(r"\[(\d+)\]", answer)}
    assert cited == {c["index"] for c in done.data["citations"]}, (answer, done.data["citations"])
    trace = httpx.get(f"{stack.gateway_url}/v1/tasks/{created['task_id']}/trace", headers=auth(stack.admin_key),
                      timeout=10).json()["trace"]
    final = next(t for t in trace if t.get("phase") == "finalizer")
    assert final["disagreements"] == [{"quantity": "征收率", "values": ["3%", "1%"]}], final


def test_a_worker_uses_the_tenants_mcp_tool(stack, model):
    def catalog_listed() -> bool:
        r = httpx.get(f"{stack.gateway_url}/v1/mcp-servers", headers=auth(stack.admin_key), timeout=10)
        return any((s.get("status") or {}).get("tools") for s in r.json()["servers"])
    assert wait_until(catalog_listed, 60), "the mcp service never listed the casefile server"
    created = create_task(stack.gateway_url, MCP_QUESTION, mode="team", api_key=stack.admin_key)
    events = list(stream_task(stack.gateway_url, created["task_id"], read_timeout_s=180, api_key=stack.admin_key))
    done = events[-1]
    assert done.event == "task.completed", [e.event for e in events]
    worker_calls = [b for b in list(model.requests) if role(b) == "worker"
                    and any(m["role"] == "user" and m["content"] == "查图书税率" for m in b["messages"])]
    assert worker_calls, "no worker call"
    offered = [t["function"]["name"] for t in worker_calls[0]["tools"]]
    assert "mcp__casefile__lookup_rate" in offered and all(n.startswith("mcp__casefile__") for n in offered), offered
    evidence = [item for e in events if e.event == "evidence" for item in e.data["items"]]
    seen = [m["content"] for b in worker_calls for m in b["messages"] if m["role"] == "tool"]
    assert any(item["kind"] == "tool" and "books" in item["text"] for item in evidence), (evidence, seen)
    assert done.data["citations"] and "[1]" in done.data["answer"], done.data
