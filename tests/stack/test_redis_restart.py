"""Rule A16 (docs/architecture.md): a model step that loses Redis does not fail its task.

A private redis-server (with its append-only file) behind an orchestrator and a gateway on the
session's broker; the scripted model streams its first answer slowly, and Redis is SIGKILLed and
started again on the same port and data while it streams. The step stops as if its replica had
crashed, and the task is resumed from its checkpoint (``answer.reset`` first) and completes with
the second answer, instead of ending with ``internal_error`` ("Connection closed by server").
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from ops import infra
from ops.client import create_task, stream_task
from ops.stack import Stack
from testkit.scripted_model import ScriptedModel, Turn
from testkit.stack import auth, start_stack
from testkit.waits import wait_until

SLOW = Turn(content="这是第一次回答，它会在 Redis 重启时中断。" * 3, chunks=30, chunk_delay_s=0.2)
RESUMED = "Redis 重启之后，任务从检查点继续并回答了。"
DOWN_S = 2.0
"""Seconds Redis stays down (the first answer streams for 6 s in all, 1 s of it before the kill)."""


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedModel]:
    m = ScriptedModel().start()
    yield m
    m.stop()


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory) -> Iterator[tuple[int, object]]:
    root = tmp_path_factory.mktemp("a16-redis")
    port = infra.free_port()
    box = {"proc": infra.start_redis(port, root / "data", root / "redis.log"), "root": root}
    yield port, box
    infra.stop(box["proc"])  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def stack(infra_stack, redis_server, tmp_path_factory, model) -> Iterator[Stack]:
    port, _ = redis_server
    st = start_stack(infra_stack.bootstrap, f"redis://127.0.0.1:{port}/0", tmp_path_factory.mktemp("a16-data"),
                     ("orchestrator", "gateway"),
                     {"OPENAI_BASE_URL": model.base_url, "OPENAI_API_KEY": "test", "CONDUIT_MODEL": "scripted",
                      "CONDUIT_LEASE_TTL_S": "3"})
    yield st
    st.stop()


def test_a_model_step_that_loses_redis_resumes_its_task_instead_of_failing_it(stack, redis_server, model):
    port, box = redis_server
    model.push(SLOW, Turn(content=RESUMED))
    created = create_task(stack.gateway_url, "Redis 重启测试：增值税的征收率是多少？", api_key=stack.admin_key)
    assert wait_until(lambda: len(model.requests) >= 1, 30), "the model was never called"
    time.sleep(1.0)  # the first answer is streaming (6 s in all) and its deltas are being appended
    box["proc"].kill()  # type: ignore[attr-defined]
    box["proc"].wait()  # type: ignore[attr-defined]
    # Redis stays down longer than the step's gap between commands (a delta every 0.2 s, lease renewals): a
    # restart quicker than the step's next command goes unnoticed and the step rightly streams on to the end
    # (seen once in a CI run: the first answer completed whole, no reset), which is not the path tested here
    time.sleep(DOWN_S)
    root = box["root"]
    box["proc"] = infra.start_redis(port, root / "data", root / "redis.log")  # type: ignore[operator]
    record = f"{stack.gateway_url}/v1/tasks/{created['task_id']}"
    assert wait_until(lambda: _status(record, stack.admin_key) == 200, 30), "the gateway never read Redis again"
    events = list(stream_task(stack.gateway_url, created["task_id"], read_timeout_s=90, reconnects=10,
                              api_key=stack.admin_key))
    assert events[-1].event == "task.completed", [e.event for e in events][-8:]
    assert events[-1].data["answer"].startswith(RESUMED.rstrip("。"))  # (uncited: marked low confidence)
    assert any(e.event == "answer.reset" for e in events)
    assert len(model.requests) == 2


def _status(url: str, key: str) -> int:
    try:
        return httpx.get(url, headers=auth(key), timeout=5).status_code
    except httpx.HTTPError:
        return 0
