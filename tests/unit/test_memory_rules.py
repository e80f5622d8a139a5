"""Rules O12 and O13 (docs/operations.md, "Memory"): what a service process holds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fresh import Started

from ops.services import MALLOC_ENV, settings_env


def test_service_processes_get_two_malloc_arenas(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    assert settings_env("k:9092", "redis://r", Path("/d"))["MALLOC_ARENA_MAX"] == MALLOC_ENV["MALLOC_ARENA_MAX"] == "2"


def test_the_operators_malloc_setting_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_ARENA_MAX", "8")
    assert "MALLOC_ARENA_MAX" not in settings_env("k:9092", "redis://r", Path("/d"))
    assert settings_env("k:9092", "redis://r", Path("/d"), MALLOC_ARENA_MAX="4")["MALLOC_ARENA_MAX"] == "4"


ABSENT = {  # what each service must not load at start (rule O13)
    "services.web.main": ("sklearn", "scipy"),
    "services.mcp.main": ("mcp", "a2a", "httpx2", "google.protobuf"),
    "services.gateway.main": ("mcp", "a2a", "grpc", "google.protobuf"),
}


LOADED = Started("import importlib, json, sys\n"
                 f"absent = {ABSENT!r}\n"
                 "found = {}\n"
                 "for module, names in absent.items():\n"
                 "    importlib.import_module(module)\n"
                 "    if module == 'services.web.main':\n"
                 "        from services.web import extract; extract.warm_up()\n"
                 "    found[module] = sorted(n for n in names if n in sys.modules)\n"
                 "print(json.dumps(found))", Path(__file__).resolve().parents[2])
"""Started at collection (``tests/unit/fresh.py``)."""


def test_a_service_loads_no_sdk_it_does_not_use_yet() -> None:
    out = LOADED.result()
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {module: [] for module in ABSENT}


def test_the_agent_card_path_is_the_sdks() -> None:
    from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH

    from services.gateway.agents import a2a_card, a2a_paths

    assert a2a_paths.CARD_PATH == AGENT_CARD_WELL_KNOWN_PATH
    assert a2a_card.PATH == a2a_paths.PATH == "/v1/a2a"
