"""What a broker restart must not lose (rule G4, docs/rules.md): tansu keeps topics in memory,
so a question it held that no orchestrator had read is gone with it; the orchestrator's sweeper
starts it from the gateway's record.

Real tansu (a private one: the test kills it), the session's Redis, the scripted model.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from conduit.ops import infra
from conduit.ops.client import create_task, stream_task
from conduit.ops.services import ServiceProcess
from conduit.ops.stack import Stack
from conduit.testing.scripted_model import Turn
from conduit.testing.stack import start_stack


class Broker:
    """A private tansu that the test can restart on the same port."""

    def __init__(self, root: Path) -> None:
        self.root, self.port = root, infra.free_port()
        self.proc = infra.start_tansu(self.port, root / "tansu.log")

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def restart(self) -> None:
        """SIGKILL tansu (its topics are gone) and start a new one on the same port."""
        self.proc.kill()
        self.proc.wait(10)
        self.proc = infra.start_tansu(self.port, self.root / "tansu.log")


@pytest.fixture(scope="module")
def broker(tmp_path_factory) -> Iterator[Broker]:
    b = Broker(tmp_path_factory.mktemp("broker"))
    yield b
    infra.stop(b.proc)


@pytest.fixture(scope="module")
def stack(broker, infra_stack, tmp_path_factory, model) -> Iterator[Stack]:
    st = start_stack(broker.bootstrap, infra_stack.redis_url, tmp_path_factory.mktemp("restart-data"),
                     ("orchestrator", "gateway"),
                     {"OPENAI_BASE_URL": model.base_url, "OPENAI_API_KEY": "test", "CONDUIT_MODEL": "scripted",
                      "CONDUIT_LEASE_TTL_S": "3"})
    yield st
    st.stop()


def test_a_question_the_broker_lost_unread_is_started_anyway(stack, broker, model):
    model.script.clear()
    model.default = Turn(content="重启后的答案。")
    orch = stack.procs["orchestrator"]
    orch.stop()  # nobody reads the question: it waits in tansu's memory
    created = create_task(stack.gateway_url, "中断之后还能回答吗？", api_key=stack.admin_key)
    broker.restart()  # ... and is lost with it
    stack.procs["orchestrator"] = ServiceProcess("orchestrator", orch.env, stack.log_dir).start()
    stack.wait_ready(90)
    events = list(stream_task(stack.gateway_url, created["task_id"], read_timeout_s=60, reconnects=0,
                              api_key=stack.admin_key))
    assert [e.event for e in events].count("task.completed") == 1, [e.event for e in events]
    assert events[-1].data["answer"].startswith("重启后的答案")
