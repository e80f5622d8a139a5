"""The chaos suite's short form (bench/chaos.py): 20 tasks, 10 SIGKILLs over the orchestrator
replicas, the web service and the gateway, plus one Redis kill and one broker kill, through a
supervised embedded stack. Zero loss: one terminal event per task, one tool execution per
idempotency key, the script's answer every time."""

from __future__ import annotations

import pytest

from bench.chaos import Chaos


@pytest.mark.slow
def test_chaos_short_form_loses_nothing():
    chaos = Chaos(tasks=20, kills=10, seed=14)
    f = chaos.run()
    log = "\n".join(chaos.log)
    assert f["kills"] >= 12, f  # 10 spread over the services, Redis and the broker
    assert f["not_one_terminal"] == [], (f, log)
    assert f["executions_not_one"] == [], (f, log)
    assert f["wrong_answers"] == [], (f, log)
    assert f["replayed_duplicates"] == 0 and f["restarts"] >= f["kills"], (f, log)
