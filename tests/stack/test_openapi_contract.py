"""The OpenAPI document is exact: schemathesis (every check) against the running gateway with a
valid key finds no failure and no 5xx. Real retriever, orchestrator (no model: retrieval-only
answers, so every stream ends) and gateway processes over tansu and Redis."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ops.stack import Stack
from testkit.stack import new_key, start_stack

VAT_LAW = "中华人民共和国增值税法"
CONFIG = Path(__file__).with_name("schemathesis.toml")


@pytest.fixture(scope="module")
def stack(infra_stack, tmp_path_factory) -> Iterator[Stack]:
    st = start_stack(infra_stack.bootstrap, infra_stack.redis_url, tmp_path_factory.mktemp("openapi"),
                     ("retriever", "orchestrator", "gateway"),
                     {"CONDUIT_TOOL_TIMEOUT_S": "20", "CONDUIT_RATE_LIMIT_KEY_PER_MINUTE": "0",
                      "CONDUIT_RATE_LIMIT_TENANT_PER_MINUTE": "0", "CONDUIT_LOG_LEVEL": "WARNING"}, laws=[VAT_LAW])
    yield st
    st.stop()


def test_schemathesis_finds_nothing(stack: Stack, infra_stack, tmp_path: Path) -> None:
    key = new_key(infra_stack.redis_url, tenant=f"fuzz-{uuid.uuid4().hex[:8]}")  # its own tenant: other tests' data stays apart
    run = subprocess.run(
        [str(Path(sys.executable).parent / "schemathesis"), "--config-file", str(CONFIG), "run",
         f"{stack.gateway_url}/openapi.json",
         "--checks", "all", "--header", f"Authorization: Bearer {key}", "--seed", "13",
         "--max-examples", "15", "--workers", "1", "--request-timeout", "60", "--no-color",
         "--report-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=900, cwd=tmp_path)  # its cache stays out of the checkout
    (tmp_path / "out.txt").write_text(run.stdout + run.stderr)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
