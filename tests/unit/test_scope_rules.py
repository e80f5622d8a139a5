"""A question's scope (rules Q1-Q4, docs/rules.md; ``contracts.scope``), in process: the bodies'
validation and their error codes, how the gateway reads a client's document ids, the store filter
(both backends: an embedded Qdrant Edge shard and qdrant-client's local mode), and the agent core
holding the scope for every ``kb_search`` of a task and of its team workers. Over the real stack
(the gateway's checks against Redis, a scoped task's evidence): tests/stack/test_scope.py."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from agentsim import Reply, Sim, TestModel, kb, ok, passage, question
from contracts.api import TaskCreate
from contracts.chat import ChatCompletionRequest
from contracts.documents import DocumentCreate, SearchFilters
from contracts.events import QuestionAsked, QuestionPayload
from contracts.scope import MAX_SCOPE_DOCUMENTS, Scope
from services.gateway.documents import scope as gateway_scope
from services.orchestrator.agent import cache, endings
from services.orchestrator.agent.cache import Recalled
from services.orchestrator.testmodel import FunctionModel
from services.retriever.sparse import SparseVec
from services.retriever.store import PUBLIC_TENANT, ChunkPoint, ClientVectorStore, EdgeVectorStore, SearchFilter
from services.retriever.store.points import COLLECTION
from teamsim import Team
from test_rule_team import brain, kb_tool  # the team's scripted roles and corpus

SCOPE = Scope(document_ids=["doc:default:policy"], collections=["hr"])


# ------------------------------------------------------------------ Q1: the bodies and their error codes
def errors_of(model: type, body: dict[str, Any]) -> list[dict[str, Any]]:
    with pytest.raises(ValidationError) as info:
        model.model_validate(body)
    return info.value.errors(include_url=False, include_input=False)


@pytest.mark.parametrize("model, body", [
    (TaskCreate, {"question": "q", "document_ids": [f"d{i}" for i in range(MAX_SCOPE_DOCUMENTS + 1)]}),
    (TaskCreate, {"question": "q", "collections": [f"c{i}" for i in range(11)]}),
    (ChatCompletionRequest, {"model": "conduit", "messages": [{"role": "user", "content": "q"}],
                             "conduit": {"document_ids": [f"d{i}" for i in range(51)]}}),
    (SearchFilters, {"collections": [f"c{i}" for i in range(11)]}),
])
def test_too_many_ids_or_collections_is_scope_too_large(model: type, body: dict[str, Any]) -> None:
    refused = gateway_scope.too_large(errors_of(model, body))
    assert refused is not None and (refused.status, refused.code) == (422, "scope_too_large")
    assert refused.details["max_document_ids"] == MAX_SCOPE_DOCUMENTS


def test_other_bad_scope_fields_are_plain_invalid_requests() -> None:
    for body in ({"question": "q", "document_ids": [""]}, {"question": "q", "collections": ["x" * 65]},
                 {"question": "q", "scope": {"document_ids": ["a"]}}):
        assert gateway_scope.too_large(errors_of(TaskCreate, body)) is None
    assert errors_of(ChatCompletionRequest, {"model": "conduit", "messages": [{"role": "user", "content": "q"}],
                                             "conduit": {"documents": ["a"]}})[0]["type"] == "extra_forbidden"
    ok_body = TaskCreate(question="q", document_ids=[" policy "], collections=["law"])
    assert ok_body.document_ids == ["policy"] and ok_body.collections == ["law"]


def test_a_document_joins_a_named_collection_never_a_built_in_one() -> None:
    assert DocumentCreate(title="t", text="x", collection="hr-2026").collection == "hr-2026"
    for name in ("law", "documents", "HR", "-x", "a" * 65, "人事"):
        errors_of(DocumentCreate, {"title": "t", "text": "x", "collection": name})


def test_the_gateway_reads_client_ids_as_the_tenants_store_ids() -> None:
    read = gateway_scope._store_id
    assert read("acme", "policy") == ("doc:acme:policy", "policy")  # an id POST /v1/documents returned
    assert read("acme", "doc:acme:policy") == ("doc:acme:policy", "policy")  # its store id: the record is checked
    assert read("acme", "law:abc123") == ("law:abc123", None)  # the public corpus: nothing to check
    assert read("acme", "file:acme:0123abcd") == ("file:acme:0123abcd", None)  # conduit ingest: no record
    for theirs in ("doc:other:policy", "file:other:0123", "file:acme:", "doc:acme:a:b", "other:x", "a b"):
        assert read("acme", theirs) == (None, None), theirs  # refused like a missing one (document_not_found)


# ------------------------------------------------------------------ Q3: the filter
def test_a_scope_narrows_the_tenant_filter_to_a_union() -> None:
    assert SearchFilter.scoped("acme") == SearchFilter.for_tenant("acme")
    assert SearchFilter.scoped("acme", collections=["law"]) == SearchFilter(tenant_ids=(PUBLIC_TENANT,))
    assert SearchFilter.scoped("acme", collections=["documents", "hr"]) == SearchFilter(tenant_ids=("acme",))
    only = SearchFilter.scoped("acme", ["doc:acme:a", "doc:acme:a"])
    assert only == SearchFilter(tenant_ids=("acme",), document_ids=("doc:acme:a",))
    mixed = SearchFilter.scoped("acme", ["doc:acme:a"], ["law", "hr"])
    assert mixed.tenant_ids == ("acme", PUBLIC_TENANT)
    assert mixed.scope_conditions() == [("document_id", ("doc:acme:a",)), (COLLECTION, ("hr",)),
                                        ("tenant_id", (PUBLIC_TENANT,))]
    assert [p.scope_conditions() for p in mixed.dense_parts()] == [mixed.scope_conditions()] * 2
    assert SearchFilter.scoped("acme", ["law:x"]).tenant_ids == (PUBLIC_TENANT,)


def _point(n: int, tenant: str, document: str, collection: str | None = None) -> ChunkPoint:
    import uuid

    vec = np.zeros(4, dtype=np.float32)
    vec[n % 4] = 1.0
    payload = {"tenant_id": tenant, "document_id": document, "position": 0, "text": document}
    if collection:
        payload[COLLECTION] = collection
    return ChunkPoint(str(uuid.UUID(int=n + 1)), vec + 0.1, SparseVec([7], [1.0]), payload)


POINTS = [_point(0, PUBLIC_TENANT, "law:vat"), _point(1, "acme", "doc:acme:policy"),
          _point(2, "acme", "doc:acme:handbook", "hr"), _point(3, "acme", "file:acme:notes"),
          _point(4, "other", "doc:other:policy", "hr")]


@pytest.fixture(params=["edge", "client"], scope="module")  # the searches only read: one store per backend
def store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    s = EdgeVectorStore(tmp_path_factory.mktemp("edge") / "edge", 4, 60) if request.param == "edge" else ClientVectorStore(
        "scope-test", 4, 60, location=":memory:")
    s.upsert(POINTS)
    yield s
    s.close()


@pytest.mark.parametrize("ids, collections, expected", [
    (None, None, {"law:vat", "doc:acme:policy", "doc:acme:handbook", "file:acme:notes"}),
    (["doc:acme:policy"], None, {"doc:acme:policy"}),
    (None, ["hr"], {"doc:acme:handbook"}),  # another tenant's "hr" never
    (None, ["law"], {"law:vat"}),
    (None, ["documents"], {"doc:acme:policy", "doc:acme:handbook", "file:acme:notes"}),
    (["doc:acme:policy"], ["law", "hr"], {"law:vat", "doc:acme:policy", "doc:acme:handbook"}),
    (["doc:other:policy"], None, set()),  # the tenant filter holds
])
def test_both_backends_search_only_the_scope(store, ids, collections, expected) -> None:
    flt = SearchFilter.scoped("acme", ids, collections)
    hits = store.hybrid_query(np.eye(4, dtype=np.float32), SparseVec([7], [1.0]), flt, limit=10)
    assert {h.payload["document_id"] for h in hits} == expected
    assert store.count(flt) == len(expected)


# ------------------------------------------------------------------ Q2: held for every kb_search
def scoped_question(limited: Scope | None = SCOPE) -> QuestionAsked:
    q = question("差旅住宿标准是多少？")
    return q.model_copy(update={"payload": q.payload.model_copy(update={"scope": limited})})


async def test_a_scoped_task_holds_its_scope_for_every_kb_search() -> None:
    sim = Sim(TestModel(Reply(tool_calls=[kb("住宿")]), Reply(tool_calls=[kb("住宿 标准")]), Reply(content="见[1]。")))
    state = await sim.ask(scoped_question())
    assert state.status == "completed" and state.scope == SCOPE
    assert [r.name for r in sim.requests] == ["kb_search", "kb_search"]
    assert all(state.scope_of(r.name) == SCOPE for r in sim.requests)  # what the request's payload carries
    assert [e.scope for e in sim.of("tool.requested")] == [SCOPE, SCOPE]
    assert [t["scope"] for t in state.trace if t.get("phase") == "tool"] == [SCOPE.model_dump()] * 2
    assert endings.record_view(state).scope == SCOPE  # GET /v1/tasks/{id}


async def test_the_model_cannot_widen_the_scope() -> None:
    wide = {"name": "kb_search", "arguments": {"query": "住宿", "reason": "查", "document_ids": ["doc:default:all"]}}
    sim = Sim(TestModel(Reply(tool_calls=[wide]), Reply(content="无法检索。")))
    state = await sim.ask(scoped_question())
    assert not sim.requests  # refused before it ran: kb_search takes no scope from the model
    assert [e.error_code for e in sim.of("tool.completed")] == ["bad_arguments"]
    assert state.scope == SCOPE


async def test_unscoped_tasks_and_other_tools_carry_no_scope() -> None:
    sim = Sim(TestModel(Reply(tool_calls=[kb("住宿")]), Reply(content="见[1]。")))
    state = await sim.ask(scoped_question(None))
    assert state.scope is None and [e.scope for e in sim.of("tool.requested")] == [None]
    assert "scope" not in next(t for t in state.trace if t.get("phase") == "tool")
    assert state.model_copy(update={"scope": SCOPE}).scope_of("code_exec") is None


async def test_a_team_workers_search_within_their_supervisors_scope() -> None:
    team = Team(FunctionModel(brain()), tools={"kb_search": kb_tool})
    q = QuestionAsked(task_id="root-task", session_id="s", payload=QuestionPayload(
        question="个人所得税和增值税对小规模纳税人分别有什么规定？", mode="team", scope=SCOPE))
    team.sims[q.task_id] = team.root
    await team.root.ask(q)
    await team.settle()
    workers = team.children()
    assert len(workers) == 2 and all(w.state is not None and w.state.scope == SCOPE for w in workers)
    assert all(e.scope == SCOPE for w in workers for e in w.of("tool.requested"))
    assert team.root.state is not None and team.root.state.status == "completed"


# ------------------------------------------------------------------ Q4: no semantic cache
def test_a_scoped_question_neither_reads_nor_writes_the_cache() -> None:
    assert cache.lookup_outcome(True, True, True) == "miss"
    assert cache.lookup_outcome(True, True, True, scoped=True) == "off"
    assert cache.lookup_outcome(True, True, False, scoped=True) == "off"  # not even bypass: off is never stored


async def test_a_scoped_answer_is_no_cache_entry() -> None:
    sim = Sim(TestModel(Reply(tool_calls=[kb("住宿")]), Reply(content="见[1]。")),
              tools={"kb_search": lambda c: ok(c, passage("p1"))})
    state = await sim.ask(scoped_question(), recalled=Recalled(outcome=cache.lookup_outcome(True, True, True, True)))
    assert state.status == "completed" and state.cache == "off"
    assert cache.entry_for(state, endings.citations_of(state), sim.now) is None
