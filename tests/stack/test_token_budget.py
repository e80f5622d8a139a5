"""Rule G6 over the real stack: a tenant over its daily token budget gets 429 ``token_budget_exceeded``.

Orchestrator and gateway processes over the session broker and Redis; the scripted model reports usage
(about half a token per character sent and answered). Tenant ``metered`` has a budget of 50 tokens: its
first question is accepted (nothing used yet) and, once it ended, the orchestrator has counted its tokens
for the UTC day, so the next one is refused; tenant ``default`` (no budget) is not.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime

import httpx
import pytest
import redis as redis_sync

from conduit.records import keys, tokenbudget
from ops.stack import Stack
from testkit.scripted_model import Turn
from testkit.stack import admin_client, auth, model_env, new_key, start_stack
from testkit.waits import wait_until

BUDGET = 50


@pytest.fixture(scope="module")
def stack(infra_stack, tmp_path_factory, model) -> Iterator[Stack]:
    env = model_env(model.base_url) | {"CONDUIT_TENANTS": json.dumps({"metered": {"daily_token_budget": BUDGET}})}
    st = start_stack(infra_stack.bootstrap, infra_stack.redis_url, tmp_path_factory.mktemp("budget-data"),
                     ("orchestrator", "gateway"), env)
    yield st
    st.stop()


def test_a_tenant_over_its_daily_token_budget_gets_429(stack: Stack, model, infra_stack) -> None:
    key = new_key(infra_stack.redis_url, tenant="metered", user="u1", role="member")
    model.push(Turn(content="增值税的标准税率是百分之十三。"))
    with httpx.Client(base_url=stack.gateway_url, timeout=30, headers=auth(key)) as client:
        first = client.post("/v1/tasks", json={"question": "增值税的标准税率是多少？"})
        assert first.status_code == 202, first.text
        task_id = first.json()["task_id"]
        assert wait_until(lambda: client.get(f"/v1/tasks/{task_id}").json()["status"] == "completed", 60)
        used = client.get(f"/v1/tasks/{task_id}").json()["usage"]["total_tokens"]
        assert used > BUDGET, "the scripted model's usage is what the task reports"
        day = tokenbudget.day_of(datetime.now(UTC))
        counted = redis_sync.Redis.from_url(infra_stack.redis_url)
        try:
            assert wait_until(lambda: int(counted.get(keys.tokens_used("metered", day)) or 0) == used, 10)
        finally:
            counted.close()

        refused = client.post("/v1/tasks", json={"question": "个人所得税的起征点是多少？"})
        assert refused.status_code == 429, refused.text
        error = refused.json()["error"]
        assert error["code"] == "token_budget_exceeded"
        assert error["details"] == {"budget_tokens": BUDGET, "used_tokens": used, "day": day}
        assert 1 <= int(refused.headers["Retry-After"]) <= 86_400

    with admin_client(stack) as other:  # tenant "default": no budget
        assert other.post("/v1/tasks", json={"question": "增值税的标准税率是多少？"}).status_code == 202
