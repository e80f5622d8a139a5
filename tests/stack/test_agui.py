"""``POST /v1/agui`` over the real stack (issue 32, docs/agui.md), one module-scoped stack: the AG-UI stream of a
tool-using question validates event by event against the ``ag-ui-protocol`` models (``testkit.agui_check``); a
run is resumed by its id after a dropped connection without losing a piece of the answer; an approval interrupts
the run and a resuming run answers it; a missing or foreign credential is rejected.

Real tansu broker, real Redis, Qdrant Edge with one real law, scripted OpenAI-compatible model.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from ops.stack import Stack
from testkit.agui_check import StreamChecker, sse_events
from testkit.page import VAT_LAW, evidence_number, kb
from testkit.page_fixtures import fresh_script  # noqa: F401 - autouse fixture: an empty script per test
from testkit.scripted_model import ScriptedModel, Turn
from testkit.stack import auth, new_key

WAIT_S = 90
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def stack(vat_agent_stack: Stack) -> Stack:
    return vat_agent_stack  # tests/conftest.py


def run_input(question: str, thread: str | None = None, run: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"threadId": thread or uuid.uuid4().hex, "runId": run or uuid.uuid4().hex,
            "messages": [{"id": uuid.uuid4().hex, "role": "user", "content": question}], **extra}


def post(stack: Stack, body: dict[str, Any], key: str | None, headers: dict[str, str] | None = None) -> httpx.Response:
    with httpx.Client(timeout=WAIT_S) as c:
        return c.post(f"{stack.gateway_url}/v1/agui", json=body, headers={**(auth(key) if key else {}), **(headers or {})})


def cite(body: dict) -> Turn:
    n = evidence_number(body, VAT_LAW, "第十一条")
    assert n is not None, "the article reached the model"
    return Turn(content=f"征收率为百分之三[{n}]。", chunks=5)


def test_a_tool_using_question_validates_event_by_event(stack: Stack, model: ScriptedModel) -> None:
    model.push(Turn(tool_calls=[kb()]), cite)
    reply = post(stack, run_input("小规模纳税人适用简易计税方法的征收率是多少？"), stack.admin_key)
    assert reply.status_code == 200 and reply.headers["content-type"].startswith("text/event-stream"), reply.text
    events = [data for _, data in sse_events(reply.text)]
    checker = StreamChecker()
    checker.check_all(events)
    kinds = checker.types
    start = next(e for e in events if e["type"] == "TOOL_CALL_START")
    assert start["toolCallName"] == "kb_search"
    assert {"TOOL_CALL_ARGS", "TOOL_CALL_END", "TOOL_CALL_RESULT", "STEP_STARTED", "STEP_FINISHED",
            "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END"} <= set(kinds)
    snapshots = [e["snapshot"] for e in events if e["type"] == "STATE_SNAPSHOT"]
    assert any(VAT_LAW in i["title"] for s in snapshots for i in s["evidence"]), "the evidence is in the state"
    end = events[-1]
    assert end["type"] == "RUN_FINISHED" and end["outcome"]["type"] == "success"
    assert "百分之三[" in end["result"]["answer"] and VAT_LAW in end["result"]["citations"][0]["title"]


def test_a_run_resumes_by_its_id_without_losing_a_piece(stack: Stack, model: ScriptedModel) -> None:
    words = "".join(f"第{i}句。" for i in range(1, 21))
    model.push(Turn(content=words, chunks=20, chunk_delay_s=0.15))
    body = run_input("请逐句回答")
    first: list[tuple[int | None, dict]] = []
    with httpx.Client(timeout=WAIT_S) as c, c.stream("POST", f"{stack.gateway_url}/v1/agui", json=body,
                                                     headers=auth(stack.admin_key)) as resp:
        block: list[str] = []
        for line in resp.iter_lines():
            if line:
                block.append(line)
                continue
            first += sse_events("\n".join(block) + "\n\n")
            block = []
            if sum(e["type"] == "TEXT_MESSAGE_CONTENT" for _, e in first) >= 4 and first and first[-1][0] is not None:
                break  # the connection drops here, right after an event with an id
    last = first[-1][0]
    again = post(stack, body, stack.admin_key, {"Last-Event-ID": str(last)})
    rest = sse_events(again.text)
    checker = StreamChecker()
    checker.check_all([e for _, e in rest])
    assert checker.types[:2] == ["RUN_STARTED", "STATE_SNAPSHOT"] and "TEXT_MESSAGE_START" in checker.types[:4]
    deltas = [e["delta"] for _, e in first + rest if e["type"] == "TEXT_MESSAGE_CONTENT"]
    assert "".join(deltas) == words, "every piece once, in order"
    ids = [i for i, _ in first + rest if i is not None]
    assert ids == sorted(set(ids)), "ids only grow"


def test_an_approval_interrupts_and_a_resuming_run_answers_it(stack: Stack, model: ScriptedModel) -> None:
    model.push(Turn(tool_calls=[{"name": "code_exec", "arguments": {"code": "print(3)", "reason": "计算"}}]),
               Turn(content="未运行代码，按3%计算约为3万元。"))
    body = run_input("含税销售额103万元的增值税是多少？")
    events = [e for _, e in sse_events(post(stack, body, stack.admin_key).text)]
    StreamChecker().check_all(events)
    outcome = events[-1]["outcome"]
    assert outcome["type"] == "interrupt", events[-1]
    waiting = outcome["interrupts"][0]
    assert waiting["reason"] == "tool_approval" and waiting["metadata"]["tool"] == "code_exec"
    resume = {**run_input("", thread=body["threadId"]), "messages": [],
              "resume": [{"interruptId": waiting["id"], "status": "resolved", "payload": {"decision": "reject"}}]}
    after = [e for _, e in sse_events(post(stack, resume, stack.admin_key).text)]
    checker = StreamChecker()
    checker.check_all(after)
    result = next(e for e in after if e["type"] == "TOOL_CALL_RESULT")
    assert result["toolCallId"] == waiting["toolCallId"] and "rejected" in result["content"]
    assert after[-1]["type"] == "RUN_FINISHED" and "3万元" in after[-1]["result"]["answer"]
    again = post(stack, resume, stack.admin_key)  # the same resuming run again: the same run, replayed
    replayed = [e for _, e in sse_events(again.text)]
    StreamChecker().check_all(replayed)
    assert replayed[-1] == after[-1] and [e["type"] for e in replayed] == [e["type"] for e in after]


def test_the_example_script_streams_a_cited_answer(stack: Stack, model: ScriptedModel) -> None:
    """``examples/agui_client.py`` (docs/agui.md) against the stack: every event fits its model, the answer cites."""
    model.push(Turn(tool_calls=[kb()]), cite)
    run = subprocess.run([sys.executable, str(ROOT / "examples" / "agui_client.py"), "--url", stack.gateway_url,
                          "--key", stack.admin_key, "小规模纳税人适用简易计税方法的征收率是多少？"],
                         capture_output=True, text=True, timeout=WAIT_S)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "[tool kb_search]" in run.stdout and "征收率为百分之三[" in run.stdout, run.stdout
    assert "增值税法》 第十一条" in run.stdout and "-- success" in run.stdout, run.stdout


def test_a_missing_or_foreign_credential_is_rejected(stack: Stack, infra_stack, model: ScriptedModel) -> None:
    body = run_input("你好")
    missing = post(stack, body, None)
    assert missing.status_code == 401 and missing.json()["error"]["code"] == "unauthenticated"
    assert post(stack, body, stack.admin_key).status_code == 200
    foreign = new_key(infra_stack.redis_url, tenant=f"x-{uuid.uuid4().hex[:6]}", user="eve", role="admin")
    taken = post(stack, body, foreign)  # the run's thread is another tenant's session
    assert taken.status_code == 404 and taken.json()["error"]["code"] == "session_not_found", taken.text
    member = new_key(infra_stack.redis_url, user="carol", role="member")
    replay = post(stack, body, member)  # the run id is the admin's: another user of the tenant cannot read it
    assert replay.status_code == 404 and replay.json()["error"]["code"] == "task_not_found", replay.text
    for bad in ({"runId": "r"}, {**body, "messages": []}, {**body, "threadId": "has spaces"}):
        r = post(stack, {**bad, "runId": uuid.uuid4().hex}, stack.admin_key)
        assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_request", r.text
