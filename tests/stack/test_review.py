"""Plan and replan (rule A25) and the reviewer pass (rule A22) through the whole stack: the question is
planned first (``plan.created``, a step ended by its round of tool calls), and the cited answer is checked
by one more call of the scripted model before ``task.completed``; an unsupported claim is revised away
and the terminal event and the task's trace say so."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from ops.client import create_task, stream_task
from ops.stack import Stack
from testkit.scripted_model import ScriptedModel, Turn, evidence_number
from testkit.stack import model_env, start_stack

VAT_LAW = "中华人民共和国增值税法"


@pytest.fixture(scope="module")
def stack(infra_stack, tmp_path_factory, model) -> Iterator[Stack]:
    st = start_stack(infra_stack.bootstrap, infra_stack.redis_url, tmp_path_factory.mktemp("review-data"),
                     ("retriever", "orchestrator", "gateway"),
                     {**model_env(model.base_url), "CONDUIT_REVIEW_ENABLED": "true", "CONDUIT_PLAN_MODE": "always"}, laws=[VAT_LAW])
    yield st
    st.stop()


def test_an_unsupported_claim_is_revised_away_before_the_answer_completes(stack: Stack, model: ScriptedModel) -> None:
    cited: list[int] = []

    def answer(body: dict) -> Turn:
        n = evidence_number(body["messages"], "增值税法", "第十一条") or 1
        cited.append(n)
        return Turn(content=f"小规模纳税人的征收率为百分之三[{n}]。这一征收率自二零二零年起一直不变[{n}]。")

    def verdicts(body: dict) -> Turn:
        assert body.get("tools") is None and "事实核查员" in body["messages"][0]["content"]
        n = cited[-1]
        return Turn(content=json.dumps({"verdicts": ["supported", "unsupported"],
                                        "revision": f"小规模纳税人的征收率为百分之三[{n}]。"}, ensure_ascii=False))

    plan = {"steps": [{"goal": "查找小规模纳税人的征收率", "tool": "kb_search"}, {"goal": "作答", "tool": "none"}]}
    model.push(Turn(content=json.dumps(plan, ensure_ascii=False)), Turn(tool_calls=[{"name": "kb_search", "arguments": {"query": "小规模纳税人 征收率", "reason": "查法条"}}]),
               answer, verdicts)
    created = create_task(stack.gateway_url, "小规模纳税人的征收率是多少？", api_key=stack.admin_key)
    events = list(stream_task(stack.gateway_url, created["task_id"], read_timeout_s=60, reconnects=0,
                              api_key=stack.admin_key))
    phases = [e.data["phase"] for e in events if e.event == "step.started"]
    assert phases[0] == "plan" and phases[-1] == "review"
    planned = [e.data for e in events if e.event == "plan.created"]
    assert [s["tool"] for s in planned[0]["steps"]] == ["kb_search", "none"]
    assert [(e.data["index"], e.data["status"]) for e in events if e.event == "plan.step_done"] == [(0, "done")]
    done = events[-1]
    assert done.event == "task.completed" and done.data["review"]["revised"] is True
    assert done.data["review"]["checked"] == 2 and done.data["review"]["unsupported"] == 1
    assert done.data["answer"].startswith("小规模纳税人的征收率为百分之三[") and "二零二零" not in done.data["answer"]
    assert any(e.event == "answer.reset" for e in events)
    view = httpx.get(f"{stack.gateway_url}/v1/tasks/{created['task_id']}",
                     headers={"Authorization": f"Bearer {stack.admin_key}"}, timeout=10).json()
    assert any(t.get("phase") == "review" and t.get("revised") for t in view["trace"])
