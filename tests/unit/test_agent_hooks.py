"""Fault injection is owned by test code: without ``CONDUIT_TEST_HOOKS`` the orchestrator's
fault points do nothing; with it, the named module's hooks are installed (in process)."""

from __future__ import annotations

from testkit import faults
from services.orchestrator.hooks import HOOKS_ENV, NoHooks, load_hooks


async def test_fault_points_do_nothing_unless_a_test_names_a_hook_module(monkeypatch):
    monkeypatch.delenv(HOOKS_ENV, raising=False)
    hooks = load_hooks(redis=None)  # type: ignore[arg-type]
    assert isinstance(hooks, NoHooks)
    await hooks.reached("question", "t1")  # nothing happens


async def test_the_named_hook_module_is_installed_with_its_point(monkeypatch):
    monkeypatch.setenv(HOOKS_ENV, "testkit.faults")
    monkeypatch.setenv(faults.CRASH_ENV, "tool_result")
    hooks = load_hooks(redis=None)  # type: ignore[arg-type]
    assert isinstance(hooks, faults.CrashOnce) and hooks.point == "tool_result"
    await hooks.reached("question", "t1")  # another point: no crash, no Redis touched
