"""The law's own references through the bus (rules K16, K17, A30; docs/retrieval.md "The law's own references").

Retriever, orchestrator and gateway as separate processes over the session's tansu and Redis, the real
劳动合同法 ingested, the shipped reference graph loaded by the retriever, and the scripted model over
real HTTP: it searches (kb_search), reads the passage 第八十七条 (赔偿金: 「依照本法第四十七条规定的经济补偿
标准的二倍」) with its 引用 line, follows the cited id (kb_follow), and cites the followed 第四十七条.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from ops.client import create_task, stream_task
from ops.stack import Stack
from testkit.scripted_model import Turn, evidence_number
from testkit.stack import start_stack

LAW = "中华人民共和国劳动合同法"
QUESTION = "用人单位违法解除劳动合同，赔偿金按什么标准计算？"


@pytest.fixture(scope="module")
def stack(infra_stack, tmp_path_factory, model) -> Iterator[Stack]:
    st = start_stack(infra_stack.bootstrap, infra_stack.redis_url, tmp_path_factory.mktemp("refs-data"),
                     ("retriever", "orchestrator", "gateway"),
                     {"OPENAI_BASE_URL": model.base_url, "OPENAI_API_KEY": "test", "CONDUIT_MODEL": "scripted",
                      "CONDUIT_TOOL_TIMEOUT_S": "20", "CONDUIT_RETRIEVAL_MODEL_REWRITE": "false",
                      "CONDUIT_RETRIEVAL_MODEL_RERANK": "false",
                      # rule K20 would put 第四十七条 in kb_search's own evidence (then kb_follow adds nothing new);
                      # off here so the agent's follow (K17) is what this shows
                      "CONDUIT_RETRIEVAL_FOLLOW_REFS": "0"},
                     laws=[LAW])
    yield st
    st.stop()


def _follow_article_47(body: dict) -> Turn:
    """Follow the id the evidence lists for 《劳动合同法》第47条 (what the passage 第八十七条 cites)."""
    tools = "\n".join(m.get("content") or "" for m in body["messages"] if m.get("role") == "tool")
    found = re.search(r"《劳动合同法》第47条 \[([0-9a-f]+:47)\]", tools)
    if found is None:
        return Turn(content="证据里没有引用第四十七条。")
    return Turn(tool_calls=[{"name": "kb_follow", "arguments": {"ref_ids": [found.group(1)],
                                                                "reason": "查看第八十七条引用的经济补偿标准"}}])


def _cite_article_47(body: dict) -> Turn:
    n = evidence_number(body["messages"], "劳动合同法", "第四十七条")
    m = evidence_number(body["messages"], "劳动合同法", "第八十七条")
    if n is None:
        return Turn(content="没有找到第四十七条。")
    return Turn(content=f"违法解除的赔偿金为经济补偿标准的二倍[{m}]；经济补偿按工作年限每满一年支付一个月工资[{n}]。")


def test_the_agent_follows_a_cited_article_and_cites_it(stack: Stack, model) -> None:
    model.push(Turn(tool_calls=[{"name": "kb_search", "arguments": {
        "query": "用人单位违法解除劳动合同 赔偿金", "reason": "查找违法解除的赔偿金"}}]),
        _follow_article_47, _cite_article_47)
    created = create_task(stack.gateway_url, QUESTION, api_key=stack.admin_key)
    events = list(stream_task(stack.gateway_url, created["task_id"], read_timeout_s=60, reconnects=0,
                              api_key=stack.admin_key))
    done = events[-1]
    assert done.event == "task.completed", done.data
    tools = [e.data["tool"] for e in events if e.event == "tool.requested"]
    assert tools == ["kb_search", "kb_follow"], tools
    items = [i for e in events if e.event == "evidence" for i in e.data["items"]]
    cited_by = [i for i in items if i["locator"] == "第八十七条"]
    assert cited_by and any(r["label"] == "《劳动合同法》第47条" for r in cited_by[0]["refs"]), "K16: refs on kb_search"
    followed = [i for i in items if i["locator"] == "第四十七条" and i["metadata"].get("followed")]
    assert followed, [(i["locator"], i["metadata"].get("followed")) for i in items]
    n = followed[0]["index"]
    assert f"[{n}]" in done.data["answer"] and any(c["index"] == n and c["locator"] == "第四十七条"
                                                   for c in done.data["citations"])
