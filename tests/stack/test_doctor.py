"""``conduit doctor`` against the scripted model server over real HTTP (issue 29): the shapes it names,
the verdict and exit status, a configured model by name (``CONDUIT_MODELS``) and an auth error."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from ops.cli import app
from conduit.runtime.settings import get_settings
from testkit.scripted_model import ScriptedModel, Turn

CALL = Turn(tool_calls=[{"name": "kb_search", "arguments": {"query": "增值税 征收率"}}])


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["doctor", *args], env={"COLUMNS": "220"})
    return result.exit_code, result.output


@pytest.mark.parametrize("shape,seen", [
    ("openai", ["split over 2 chunks", "sent once", "a usage-only last chunk"]),
    ("repeated_names", ["repeated in every chunk (3 times)", "rule A17: a repeated name is taken once"]),
    ("no_index", ["absent (pieces found by id or order)"]),
    ("whole_calls", ["whole in one chunk"]),
    ("usage_in_choice", ["inside the finishing choice"]),
    ("non_streamed", ["one JSON body (not streamed)"]),
])
def test_doctor_names_each_shape_and_says_it_is_usable(shape: str, seen: list[str]) -> None:
    model = ScriptedModel(shape=shape).start()
    try:
        model.push(CALL, Turn(content="OK"))
        code, output = run("--base-url", model.base_url, "--api-key", "k", "--model", "scripted")
    finally:
        model.stop()
    assert code == 0, output
    assert 'kb_search {"query": "增值税 征收率"}' in output and "usable" in output
    for words in seen:
        assert words in output, (words, output)
    body = model.requests[0]
    assert body["stream"] is True and body["tools"][0]["function"]["name"] == "kb_search"
    assert model.requests[1].get("tools") is None


def test_doctor_probes_a_configured_model_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    model = ScriptedModel(shape="think_tags").start()
    monkeypatch.setenv("CONDUIT_MODELS", json.dumps([{"name": "local-qwen", "base_url": model.base_url,
                                                     "api_key_env": "DOCTOR_TEST_KEY", "model": "qwen3"}]))
    monkeypatch.setenv("DOCTOR_TEST_KEY", "secret-k")
    get_settings.cache_clear()
    try:
        model.push(Turn(reasoning="先查。", tool_calls=CALL.tool_calls), Turn(content="OK"))
        code, output = run("--model", "local-qwen")
        unknown, said = run("--model", "nope")
    finally:
        model.stop()
        get_settings.cache_clear()
    assert code == 0, output
    assert "local-qwen (qwen3" in output and "<think>…</think> at the start of the content" in output
    assert model.requests[0]["model"] == "qwen3"
    assert unknown == 2 and "unknown model 'nope'" in said and "local-qwen" in said


def test_doctor_reports_an_auth_error_and_exits_1() -> None:
    model = ScriptedModel().start()
    err = {"message": "Incorrect API key provided", "type": "invalid_request_error", "code": "invalid_api_key"}
    try:
        model.push(Turn(status=401, error=err), Turn(status=401, error=err))
        code, output = run("--base-url", model.base_url, "--api-key", "wrong", "--model", "scripted")
    finally:
        model.stop()
    assert code == 1, output
    assert "HTTP 401" in output and "error model_auth_failed" in output and "check OPENAI_API_KEY" in output
    assert "not usable" in output


def test_doctor_reports_a_refused_connection() -> None:
    code, output = run("--base-url", "http://127.0.0.1:9/v1", "--model", "x", "--timeout", "3")
    assert code == 1 and "model_unavailable" in output
