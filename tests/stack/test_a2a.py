"""A2A on the gateway through the ``a2a-sdk``'s own client (issue 32, docs/a2a.md), one module-scoped stack.

The client discovers the card at the well-known URL, streams a cited answer (the answer artifact's text with its
sources as data parts), cancels a running task, resubscribes after a dropped connection with ``Last-Event-ID``
and loses no event, and answers an ``input-required`` approval by replying to the task; a missing or foreign
credential and bad JSON-RPC get clear errors.

Real tansu broker, real Redis, Qdrant Edge with one real law, scripted OpenAI-compatible model.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import uuid
from pathlib import Path
from collections.abc import AsyncIterator

import httpx
import pytest
from a2a.client import Client, ClientCallContext, ClientConfig, ClientFactory
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    TaskState,
)
from a2a.utils.errors import InvalidParamsError, TaskNotCancelableError, TaskNotFoundError
from google.protobuf.json_format import MessageToDict

from ops.stack import Stack
from testkit.page import VAT_LAW, evidence_number, kb
from testkit.page_fixtures import fresh_script  # noqa: F401 - autouse fixture: an empty script per test
from testkit.scripted_model import ScriptedModel, Turn
from testkit.stack import auth, make_key

QUESTION = "小规模纳税人适用简易计税方法的征收率是多少？"
WAIT_S = 90
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def stack(vat_agent_stack: Stack) -> Stack:
    return vat_agent_stack  # tests/conftest.py


@contextlib.asynccontextmanager
async def client_for(stack: Stack, key: str | None) -> AsyncIterator[Client]:
    """The SDK's client for the gateway, from its card, sending ``key`` as the bearer credential."""
    http = httpx.AsyncClient(headers=auth(key) if key else {}, timeout=WAIT_S)
    try:
        yield await ClientFactory(ClientConfig(httpx_client=http)).create_from_url(stack.gateway_url)
    finally:
        await http.aclose()


def ask(text: str, task_id: str = "") -> SendMessageRequest:
    return SendMessageRequest(message=Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER, task_id=task_id,
                                              parts=[Part(text=text)]))


def seq(item: StreamResponse) -> int:
    """The log seq (``metadata.conduit_event_id``) of a streamed item."""
    kind = item.WhichOneof("payload")
    return int(getattr(item, kind).metadata["conduit_event_id"])


def answer_text(items: list[StreamResponse], start: str = "") -> str:
    """The answer artifact as the client builds it: appended chunks, a non-append chunk replaces it."""
    text = start
    for item in items:
        if item.HasField("artifact_update"):
            update = item.artifact_update
            chunk = update.artifact.parts[0].text if update.artifact.parts else ""
            text = text + chunk if update.append else chunk
    return text


def cite(body: dict) -> Turn:
    n = evidence_number(body, VAT_LAW, "第十一条")
    assert n is not None, "the article reached the model"
    return Turn(content=f"征收率为百分之三[{n}]。", chunks=6)


async def collect(stream: AsyncIterator[StreamResponse]) -> list[StreamResponse]:
    return [item async for item in stream]


async def test_the_card_is_discovered_and_a_cited_answer_streams(stack: Stack, model: ScriptedModel) -> None:
    card = httpx.get(f"{stack.gateway_url}/.well-known/agent-card.json", timeout=10).json()  # public
    assert {s["id"] for s in card["skills"]} >= {"law_tax_qa", "document_qa"}
    assert card["supportedInterfaces"][0]["url"] == f"{stack.gateway_url}/v1/a2a" and card["capabilities"]["streaming"]
    assert "apiKey" in card["securitySchemes"]
    model.push(Turn(tool_calls=[kb()]), cite)
    async with client_for(stack, stack.admin_key) as client:
        items = await collect(client.send_message(ask(QUESTION)))
        assert items[0].HasField("task") and items[0].task.status.state == TaskState.TASK_STATE_SUBMITTED
        last = items[-1].status_update
        assert last.status.state == TaskState.TASK_STATE_COMPLETED, items[-1]
        final = [i.artifact_update for i in items if i.HasField("artifact_update")][-1]
        assert final.last_chunk and "百分之三[" in final.artifact.parts[0].text
        sources = [MessageToDict(p)["data"]["source"] for p in final.artifact.parts[1:]]
        assert sources and VAT_LAW in sources[0]["title"] and sources[0]["locator"].startswith("第十一条"), sources
        assert answer_text(items) == final.artifact.parts[0].text
        progress = [MessageToDict(i.status_update.status.message)["parts"][0]["data"]["event"]
                    for i in items if i.HasField("status_update") and i.status_update.status.message.parts]
        assert "tool.requested" in progress and "tool.completed" in progress
        seqs = [seq(i) for i in items[1:]]
        assert seqs == sorted(seqs), "in the log's order"
        same = SendMessageRequest(message=Message(message_id="m-" + items[0].task.id, role=Role.ROLE_USER,
                                                  parts=[Part(text="再问一次")]))
        sent = []
        for _ in range(2):  # sent twice (a retry): the first item of each stream is the task
            stream = client.send_message(same)
            sent.append(await anext(stream))
            await stream.aclose()
        assert sent[0].task.id == sent[1].task.id, "one messageId, one task"
        got = await client.get_task(GetTaskRequest(id=items[0].task.id))
        assert got.status.state == TaskState.TASK_STATE_COMPLETED and got.artifacts[0].parts[0].text == final.artifact.parts[0].text
        assert got.history[0].parts[0].text == QUESTION


async def test_a_running_task_is_cancelled(stack: Stack, model: ScriptedModel) -> None:
    # every call is slow, not just the next one: a late call of another task cannot take a scripted turn
    model.default = Turn(content="这个回答来得很慢。", delay_s=30)
    async with client_for(stack, stack.admin_key) as client:
        task_id = ""
        async for item in client.send_message(ask("请慢慢回答这个问题")):
            if item.HasField("task"):
                task_id = item.task.id
            if item.HasField("status_update") and item.status_update.status.state == TaskState.TASK_STATE_WORKING:
                break  # the model step started
        state = (await client.cancel_task(CancelTaskRequest(id=task_id))).status.state
        for _ in range(60):  # it waits up to 10 s for the end; on a loaded machine the end may come later
            if state == TaskState.TASK_STATE_CANCELED:
                break
            await asyncio.sleep(0.5)
            state = (await client.get_task(GetTaskRequest(id=task_id))).status.state
        assert state == TaskState.TASK_STATE_CANCELED, TaskState.Name(state)
        with pytest.raises(TaskNotCancelableError):  # a finished task cannot be cancelled again
            await client.cancel_task(CancelTaskRequest(id=task_id))


async def test_a_dropped_stream_resumes_without_losing_an_event(stack: Stack, model: ScriptedModel) -> None:
    words = "".join(f"第{i}段。" for i in range(1, 25))
    model.push(Turn(content=words, chunks=24, chunk_delay_s=0.15))
    async with client_for(stack, stack.admin_key) as client:
        first: list[StreamResponse] = []
        async for item in client.send_message(ask("请分段回答")):
            first.append(item)
            if sum(i.HasField("artifact_update") for i in first) == 5:
                break  # the connection drops here
        task_id, last = first[0].task.id, seq(first[-1])
        context = ClientCallContext(service_parameters={"Last-Event-ID": str(last)})
        rest = await collect(client.subscribe(SubscribeToTaskRequest(id=task_id), context=context))
        snapshot = rest[0].task
        assert int(snapshot.metadata["conduit_event_id"]) == last
        assert snapshot.artifacts[0].parts[0].text == answer_text(first), "the task as of the last event received"
        assert seq(rest[1]) > last and rest[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
        assert answer_text(first + rest[1:]) == words
        keys = [(seq(i), i.WhichOneof("payload")) for i in first[1:] + rest[1:]]  # task.completed: artifact + status
        assert len(keys) == len(set(keys)) and keys == sorted(keys), "nothing twice, in order"
        whole = await collect(client.subscribe(SubscribeToTaskRequest(id=task_id),
                                               context=ClientCallContext(service_parameters={"Last-Event-ID": "0"})))
        assert [(seq(i), i.WhichOneof("payload")) for i in whole[1:]] == keys, "a replay has exactly what both had"


async def test_an_approval_is_input_required_and_answered_by_a_reply(stack: Stack, model: ScriptedModel) -> None:
    model.push(Turn(tool_calls=[{"name": "code_exec", "arguments": {"code": "print(103/1.03*0.03)",
                                                                    "reason": "计算税额"}}]),
               Turn(content="未获批准运行代码：税额约为3万元。"))
    async with client_for(stack, stack.admin_key) as client:
        items = await collect(client.send_message(ask("含税销售额103万元，按3%征收率，增值税是多少？")))
        waiting = items[-1].status_update
        assert waiting.status.state == TaskState.TASK_STATE_INPUT_REQUIRED, items[-1]
        data = MessageToDict(waiting.status.message)["parts"][1]["data"]
        assert data["tool"] == "code_exec" and data["call_id"]
        task_id = items[0].task.id
        reply = await collect(client.send_message(ask("reject", task_id=task_id)))
        assert reply[0].task.id == task_id and reply[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
        done = [MessageToDict(i.status_update.status.message)["parts"][0]["data"] for i in reply
                if i.HasField("status_update") and i.status_update.status.message.parts
                and "data" in MessageToDict(i.status_update.status.message)["parts"][0]]
        assert any(d.get("event") == "tool.completed" and d.get("approval") == "rejected" for d in done), done
        with pytest.raises(InvalidParamsError, match="not waiting for input"):  # a second reply is refused
            await collect(client.send_message(ask("approve", task_id=task_id)))


async def test_a_question_back_is_input_required_and_the_reply_continues_the_context(stack: Stack,
                                                                                    model: ScriptedModel) -> None:
    model.push(Turn(content="NEEDS_INPUT: 您问的是哪一年的税率？"), Turn(content="2024年的征收率为3%。"))
    async with client_for(stack, stack.admin_key) as client:
        items = await collect(client.send_message(ask("小规模纳税人的征收率是多少？")))
        asked = items[-1].status_update
        assert asked.status.state == TaskState.TASK_STATE_INPUT_REQUIRED, items[-1]
        assert "哪一年" in asked.status.message.parts[0].text
        first = items[0].task
        reply = await collect(client.send_message(ask("2024年", task_id=first.id)))
        task = reply[0].task
        assert task.id != first.id and task.context_id == first.context_id, "a new task in the same conversation"
        assert reply[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
        assert "2024年" in answer_text(reply)


def test_the_example_client_streams_resumes_and_prints_the_sources(stack: Stack, model: ScriptedModel) -> None:
    """``examples/a2a_client.py`` (the README's and docs/a2a.md's client) against the stack, dropping its stream once."""
    model.push(Turn(tool_calls=[kb()]), cite)
    run = subprocess.run([sys.executable, str(ROOT / "examples" / "a2a_client.py"), "--url", stack.gateway_url,
                          "--key", stack.admin_key, "--resume-after", "4", QUESTION],
                         capture_output=True, text=True, timeout=WAIT_S)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "resubscribing" in run.stdout and "TASK_STATE_COMPLETED" in run.stdout, run.stdout
    assert "征收率为百分之三[" in run.stdout and "增值税法》 第十一条" in run.stdout, run.stdout


async def test_credentials_and_bad_input(stack: Stack, infra_stack) -> None:
    model_free = {"jsonrpc": "2.0", "id": 3}
    url = f"{stack.gateway_url}/v1/a2a"
    body = {**model_free, "method": "tasks/get", "params": {"id": "x"}}
    assert httpx.post(url, json=body, timeout=10).status_code == 401
    created = httpx.post(f"{stack.gateway_url}/v1/tasks", json={"question": "你好"}, headers=auth(stack.admin_key),
                         timeout=10).json()
    foreign = await make_key(infra_stack.redis_url, f"x-{uuid.uuid4().hex[:6]}", "eve", "admin")
    async with client_for(stack, foreign) as stranger:
        with pytest.raises(TaskNotFoundError):
            await stranger.get_task(GetTaskRequest(id=created["task_id"]))
    h = auth(stack.admin_key)
    cases = [(b"{not json", -32700), (b'{"jsonrpc": "2.0", "id": 1, "method": "tasks/fly", "params": {}}', -32601),
             (b'{"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": {"role": "user", '
              b'"messageId": "m", "parts": [{"kind": "data", "data": {"a": 1}}]}}}', -32602),
             (b'{"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"id": "nope"}}', -32001)]
    huge = httpx.post(url, content=b" " * (1024 * 1024 + 1), headers={**h, "content-type": "application/json"}, timeout=10)
    assert huge.status_code == 413 and huge.json()["error"]["code"] == "question_too_large"
    for raw, code in cases:
        r = httpx.post(url, content=raw, headers={**h, "content-type": "application/json"}, timeout=10)
        assert r.status_code == 200 and r.json()["error"]["code"] == code, (raw, r.text)
