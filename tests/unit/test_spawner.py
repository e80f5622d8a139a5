"""The spawner thread (``ops.spawner``) and ``stopsignals.deferred``: a stop signal at any moment of a start
or stop leaves no thread or lock that hangs the exit (both once hung `conduit up` after a signal during start-up)."""

from __future__ import annotations

import signal
import subprocess
import time

import pytest

from ops import spawner


class Stop(BaseException):
    pass


def test_the_spawner_thread_is_a_daemon_and_returns_the_child():
    proc = spawner.spawn(lambda: subprocess.Popen(["true"]), signal.SIGTERM)
    assert proc.wait(10) == 0
    assert spawner._thread is not None and spawner._thread.daemon  # never joined at exit


def test_a_signal_during_a_spawn_sends_the_forked_child_its_death_signal():
    forked: list[subprocess.Popen] = []

    def slow_start() -> subprocess.Popen:
        time.sleep(0.3)  # the signal lands while the caller waits
        forked.append(subprocess.Popen(["sleep", "30"]))
        return forked[0]

    def on_alarm(_signum, _frame):
        raise Stop()

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, 0.05)
    try:
        with pytest.raises(Stop):
            spawner.spawn(slow_start, signal.SIGTERM)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert forked and forked[0].wait(10) == -signal.SIGTERM


def test_an_error_of_the_start_reaches_the_caller():
    def failing() -> subprocess.Popen:
        raise FileNotFoundError("no-such-binary")

    with pytest.raises(FileNotFoundError, match="no-such-binary"):
        spawner.spawn(failing, signal.SIGTERM)


def test_a_signal_inside_a_deferred_section_is_raised_as_it_ends():
    from ops import stopsignals

    previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    stopsignals.install(lambda _line: None)
    try:
        with pytest.raises(stopsignals.Interrupted):
            with stopsignals.deferred():
                signal.raise_signal(signal.SIGTERM)
                reached = True  # not interrupted inside the section
        assert reached
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        stopsignals._received.clear()
