"""Named models and a model per request (issue 29, rule A20): the registry, a tenant's chain and
choices, the request's model reaching every call of its task, and the routed client's endpoints."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from conduit.runtime import models
from contracts.events import QuestionAsked, QuestionPayload
from services.orchestrator.modelroute import RoutedModel
from services.orchestrator.testmodel import Reply, TestModel
from tests.unit.agentsim import T0, Sim, kb, settings

MODELS = [{"name": "deepseek", "base_url": "https://api.deepseek.com/v1", "api_key_env": "NAMED_MODELS_KEY",
           "model": "deepseek-chat"},
          {"name": "small", "base_url": "http://127.0.0.1:8000/v1", "model": "qwen3-0.6b", "tools": False}]


def test_the_single_endpoint_stays_default_and_named_models_join_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NAMED_MODELS_KEY", "sk-env")
    s = settings(openai_base_url="http://x/v1", openai_api_key="k", model="gpt-4o-mini", models=MODELS)
    known = models.registry(s.llm)
    assert list(known) == ["default", "deepseek", "small"]
    assert known["default"].model == "gpt-4o-mini" and known["default"].key() == "k"
    assert known["deepseek"].key() == "sk-env" and not known["small"].tools
    assert "base_url" not in known["deepseek"].public() and known["small"].public()["tools"] is False
    assert models.registry(settings().llm) == {}


def test_a_malformed_or_repeated_entry_is_an_error() -> None:
    with pytest.raises(ValidationError):
        models.registry(settings(models=[{"name": "x"}]).llm)
    with pytest.raises(ValueError, match="twice"):
        models.registry(settings(models=[MODELS[0], MODELS[0]]).llm)


def test_a_tenants_chain_and_what_it_may_name() -> None:
    s = settings(openai_base_url="http://x/v1", models=MODELS,
                 tenants={"acme": {"model": "deepseek", "models": ["small", "gone"]},
                          "plain": {"model": "gpt-4.1"}})
    assert models.chain(s, "acme") == ["deepseek"]
    assert models.chain(s, "plain") == ["default"], "a plain model name is sent to `default`"
    assert models.allowed(s, "acme") == ["small", "deepseek"]
    assert models.allowed(s, "other") == ["default", "deepseek", "small"]
    assert models.pick(s, "acme", None) is None and models.pick(s, "acme", "small") == "small"
    with pytest.raises(models.UnknownModel) as err:
        models.pick(s, "acme", "gpt-5")
    assert err.value.code == "unknown_model" and err.value.known == ["small", "deepseek"]


async def test_the_requests_model_is_asked_for_in_every_call_of_its_task() -> None:
    model = TestModel(Reply(tool_calls=[{"name": "kb_search", "arguments": kb("增值税")}]), Reply(content="答[1]。"))
    sim = Sim(model=model, openai_base_url="http://x/v1", models=MODELS, tenants={"t": {"model": "gpt-4.1"}})
    q = QuestionAsked(task_id="t1", session_id="s", tenant_id="t", occurred_at=T0,
                      payload=QuestionPayload(question="问题", model="deepseek"))
    state = await sim.ask(q)
    assert state.status == "completed" and state.model == "deepseek"
    assert model.models_seen == ["deepseek", "deepseek"]
    plain = TestModel(Reply(content="好。"))
    await Sim(model=plain, tenants={"t": {"model": "gpt-4.1"}}).ask(QuestionAsked(
        task_id="t2", session_id="s", tenant_id="t", occurred_at=T0, payload=QuestionPayload(question="问题")))
    assert plain.models_seen == ["gpt-4.1"], "no model named: the tenant's, as before"


def test_the_routed_client_gives_each_name_its_endpoint() -> None:
    routed = RoutedModel(settings(openai_base_url="http://x/v1", openai_api_key="k", models=MODELS).llm)
    assert str(routed.clients["deepseek"].client.base_url).startswith("https://api.deepseek.com/v1")
    assert routed.clients["small"].llm.model == "qwen3-0.6b"
    assert routed.clients["default"].llm.openai_base_url == "http://x/v1"
