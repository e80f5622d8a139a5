"""Pure rules of the supervisor and the stack launcher: restart backoff, exit descriptions, --scale."""

from __future__ import annotations

import random

import pytest

from ops.services import STOP_MARGIN_S, shutdown_budget_s
from ops.stack import parse_scale
from ops.supervisor import backoff_s, describe_exit
from conduit.runtime.settings import Settings


def test_backoff_doubles_per_recent_restart_with_equal_jitter_and_a_cap():
    rng = random.Random(7)
    for recent in range(8):
        d = min(30.0, 0.5 * 2 ** recent)
        delays = [backoff_s(recent, 0.5, 30.0, rng) for _ in range(200)]
        assert all(d / 2 <= x <= d for x in delays)
        assert len({round(x, 6) for x in delays}) > 100  # jittered, not in step
    assert backoff_s(20, 0.5, 30.0, rng) <= 30.0


def test_exits_are_described_by_status_or_signal_name():
    assert describe_exit(-9) == "killed by SIGKILL"
    assert describe_exit(-15) == "killed by SIGTERM"
    assert describe_exit(1) == "exit status 1"
    assert describe_exit(0) == "exit status 0"


def test_scale_parses_replicas_and_rejects_unknown_services():
    assert parse_scale("orchestrator=2,retriever=2") == {"orchestrator": 2, "retriever": 2}
    assert parse_scale(None) == {} and parse_scale("") == {}
    assert parse_scale("gateway=1") == {"gateway": 1}
    for bad in ("orchestrator", "orchestrator=0", "nosuch=2", "web=x", "gateway=2"):
        with pytest.raises(ValueError, match="bad --scale item"):
            parse_scale(bad)


def test_each_services_stop_budget_covers_what_it_waits_for():
    s = Settings()
    assert shutdown_budget_s("gateway", s) >= s.gateway.gateway_shutdown_grace_s
    assert shutdown_budget_s("orchestrator", s) >= s.agent.shutdown_grace_s
    for tool in ("retriever", "web"):
        assert shutdown_budget_s(tool, s) >= s.tools.tool_timeout_s + 5  # FastStream's handler deadline
    assert shutdown_budget_s("sandbox", s) >= s.sandbox.sandbox_timeout_s + 5
    assert STOP_MARGIN_S > 0
