"""Rule B3 on a stack of its own (the other broker-restart tests leave the web tool's breaker
counting their timeouts): services that live through a broker restart read its new topics from
their start."""

from __future__ import annotations

import asyncio
import time

from ops.client import create_task, stream_task
from conduit.runtime import bus
from testkit.waits import wait_until
from test_broker_restart import answer_from_tool, broker, fetch_turn, site, stack  # noqa: F401 - fixtures of this module too


def test_services_that_live_through_a_broker_restart_read_its_new_topics_from_the_start(stack, broker, model, site):
    """Rule B3: the web service and the orchestrator keep running while tansu restarts with empty
    topics; their positions (past the new logs' ends) rewind, so the next tool request is read at
    once instead of after enough re-sends to pass the old position."""
    model.script.clear()
    model.default = answer_from_tool
    for i in range(12):  # positions past 0 on (nearly) every partition of the web requests topic
        model.push(fetch_turn(f"{site}/rate{i}"))
        created = create_task(stack.gateway_url, f"网上查征收率 {i}", api_key=stack.admin_key)
        events = list(stream_task(stack.gateway_url, created["task_id"], read_timeout_s=60, reconnects=0,
                                  api_key=stack.admin_key))
        assert events[-1].event == "task.completed", [e.event for e in events]
    broker.restart()
    asyncio.run(bus.ensure_topics(stack.settings.bus))  # as `conduit up`'s supervisor does after a broker restart
    stack.wait_ready(90)
    web_log = stack.log_dir / "web.log"
    assert wait_until(lambda: "rule B3" in web_log.read_text(errors="replace"), 60), "the web service never rewound"
    time.sleep(3)  # the consumers' group rejoins after the broker restart (one rebalance, up to the 3 s join)
    model.push(fetch_turn(f"{site}/after"))
    created = create_task(stack.gateway_url, "重启之后网上查征收率", api_key=stack.admin_key)
    seen = list(stream_task(stack.gateway_url, created["task_id"], read_timeout_s=90, reconnects=3,
                            api_key=stack.admin_key))
    completed = [e.data for e in seen if e.event == "tool.completed"]
    assert [c["outcome"] for c in completed] == ["ok"], completed
    assert seen[-1].event == "task.completed" and seen[-1].data["answer"] == "百分之三[1]。"
