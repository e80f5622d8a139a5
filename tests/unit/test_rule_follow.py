"""Rule A30 (docs/agent-rules.md "Following the law's own references"): kb_follow runs only for articles the
evidence cites, at most 2 hops from a searched passage; rule K16's refs reach the model. Driven through the
production interpreter (``agentsim``)."""

from __future__ import annotations

from agentsim import Sim, ok
from contracts.evidence import ArticleRef, EvidenceItem
from services.orchestrator.agent import follow
from services.orchestrator.testmodel import Reply, TestModel


def article(ref_id: str, cites: list[str], followed: bool = False) -> EvidenceItem:
    meta = {"law_id": ref_id.split(":")[0], "ref_id": ref_id, **({"followed": True} if followed else {})}
    return EvidenceItem(chunk_id=f"pt-{ref_id}", document_id="law:L", kind="original", title="《甲法》",
                        locator=f"第{ref_id.split(':')[1]}条", text=f"条文 {ref_id}", score=0.8, metadata=meta,
                        refs=[ArticleRef(id=c, label=f"《甲法》第{c.split(':')[1]}条") for c in cites])


def follow_call(*ids: str) -> dict:
    return {"name": "kb_follow", "arguments": {"ref_ids": list(ids), "reason": "查看被引用的条文"}}


GRAPH = {"L:1": ["L:2"], "L:2": ["L:3"], "L:3": ["L:4"], "L:4": []}


def kb_follow(call):
    return ok(call, *(article(r, GRAPH[r], followed=True) for r in call.arguments["ref_ids"]))


async def test_follow_runs_for_cited_articles_up_to_two_hops_and_is_refused_beyond():
    model = TestModel(
        Reply(tool_calls=[{"name": "kb_search", "arguments": {"query": "甲", "reason": "查法条"}}]),
        Reply(tool_calls=[follow_call("L:2")]),  # hop 1: cited by the searched passage
        Reply(tool_calls=[follow_call("L:3")]),  # hop 2: cited by the followed one
        Reply(tool_calls=[follow_call("L:4")]),  # hop 3: refused
        Reply(tool_calls=[follow_call("L:9")]),  # cited by nothing: refused
        Reply(content="依照第三条 [3]。"),
    )
    sim = Sim(model, tools={"kb_search": lambda c: ok(c, article("L:1", ["L:2"])), "kb_follow": kb_follow},
              allowed=["kb_search", "kb_follow"])
    state = await sim.ask()
    assert [r.arguments["ref_ids"] for r in sim.requests if r.name == "kb_follow"] == [["L:2"], ["L:3"]]
    refused = [e.error_code for e in sim.of("tool.completed") if e.error_code]
    assert refused == ["follow_depth_exceeded", "ref_not_in_evidence"]
    assert [(e.index, e.metadata.get("ref_id")) for e in state.evidence] == [(1, "L:1"), (2, "L:2"), (3, "L:3")]
    assert state.status == "completed" and sim.of("task.completed")[0].citations[0].locator == "第3条"
    second_call = model.calls[1][0]
    assert "引用（kb_follow 可查看）：《甲法》第2条 [L:2]" in second_call[-1]["content"], "K16: the model sees the refs"


def test_reach_counts_hops_from_searched_passages():
    from contracts.evidence import NumberedEvidence

    pool = [NumberedEvidence(**article("L:1", ["L:2", "L:5"]).model_dump(), index=1),
            NumberedEvidence(**article("L:2", ["L:3"], followed=True).model_dump(), index=2),
            NumberedEvidence(**article("L:7", ["L:3"]).model_dump(), index=3)]  # searched later: L:3 is hop 1
    assert follow.reach(pool) == {"L:2": 1, "L:5": 1, "L:3": 1}
    assert follow.check(pool, {"ref_ids": ["L:3", "L:5"]}) is None
    assert follow.check(pool, {"ref_ids": ["L:3", "L:8"]}).error.error_code == "ref_not_in_evidence"
