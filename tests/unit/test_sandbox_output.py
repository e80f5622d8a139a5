"""The sandbox's output formatting, in process (real runs: tests/stack/test_sandbox.py)."""

from __future__ import annotations

from services.sandbox.main import format_output
from services.sandbox.runner import Limits, RunResult


def test_format_output_sections() -> None:
    result = RunResult(stdout="1\n", stderr="Traceback\n", exit_code=1, timed_out=True, killed_reason="timeout",
                       truncated=False, duration_s=1.0)
    text = format_output(result, Limits(timeout_s=10))
    assert text.splitlines() == ["1", "[stderr]", "Traceback", "[exit code 1, 1.00 s]",
                                 "[stopped: wall-time limit of 10 s reached]"]
