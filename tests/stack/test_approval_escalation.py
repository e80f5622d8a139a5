"""Rule A26 through the stack: an approval its owner did not decide in time is escalated to a tenant
admin; the owner's late decision is refused with 403 ``approval_escalated``, the admin's runs the call."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from ops.client import stream_task
from ops.stack import Stack
from testkit.scripted_model import Turn
from testkit.stack import auth, model_env, new_key, start_stack


@pytest.fixture(scope="module")
def stack(infra_stack, tmp_path_factory, model) -> Iterator[Stack]:
    st = start_stack(infra_stack.bootstrap, infra_stack.redis_url, tmp_path_factory.mktemp("escalation-data"),
                     ("retriever", "sandbox", "orchestrator", "gateway"),
                     {**model_env(model.base_url), "CONDUIT_APPROVAL_TTL_S": "2", "CONDUIT_APPROVAL_TIMEOUT": "escalate"})
    yield st
    st.stop()


def test_an_undecided_approval_goes_to_an_admin(stack: Stack, model, infra_stack) -> None:
    member = new_key(infra_stack.redis_url, "default", "erika", "member")
    model.push(Turn(tool_calls=[{"name": "code_exec", "arguments": {"code": "print(6*7)", "reason": "计算"}}]),
               Turn(content="结果是 42（沙箱计算）。"))
    created = httpx.post(f"{stack.gateway_url}/v1/tasks", json={"question": "6 乘 7 等于几？"}, headers=auth(member),
                         timeout=30).json()
    answers: list[httpx.Response] = []
    events = []
    for ev in stream_task(stack.gateway_url, created["task_id"], read_timeout_s=60, api_key=member):
        events.append(ev)
        if ev.event == "approval.escalated":
            url = f"{stack.gateway_url}/v1/tasks/{created['task_id']}/approvals/{ev.data['call_id']}"
            answers.append(httpx.post(url, json={"decision": "approve"}, headers=auth(member), timeout=10))
            answers.append(httpx.post(url, json={"decision": "approve"}, headers=auth(stack.admin_key), timeout=10))
    assert [a.status_code for a in answers] == [403, 202], [a.text for a in answers]
    assert answers[0].json()["error"]["code"] == "approval_escalated"
    done = events[-1]
    assert done.event == "task.completed" and "42" in done.data["answer"]
    ran = [e.data for e in events if e.event == "tool.completed"]
    assert ran and ran[0]["outcome"] == "ok"
