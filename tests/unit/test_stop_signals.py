"""A stop signal that an asyncio callback swallows is still raised at the next ``check()``
(the CI run where ``conduit up`` ignored a SIGINT during start-up and ran on)."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from ops import stopsignals


@pytest.fixture
def installed():
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    said: list[str] = []
    stopsignals.install(said.append)
    yield said
    for sig, handler in saved.items():
        signal.signal(sig, handler)
    stopsignals._received.clear()


def test_check_is_quiet_before_any_signal(installed):
    stopsignals.check()


def test_a_signal_swallowed_by_an_event_loop_callback_is_raised_by_check(installed):
    async def main() -> str:
        def callback() -> None:
            os.kill(os.getpid(), signal.SIGTERM)
            sum(range(10_000))  # the handler runs here, inside the loop's callback

        asyncio.get_running_loop().call_soon(callback)
        await asyncio.sleep(0.1)
        return "went on"

    assert asyncio.run(main()) == "went on"  # the event loop logged the exception and went on
    with pytest.raises(stopsignals.Interrupted) as caught:
        stopsignals.check()
    assert caught.value.signum == signal.SIGTERM


def test_the_second_signal_only_says_a_stop_is_under_way(installed):
    with pytest.raises(stopsignals.Interrupted):
        os.kill(os.getpid(), signal.SIGINT)
        sum(range(10_000))
    os.kill(os.getpid(), signal.SIGTERM)
    sum(range(10_000))
    assert installed == ["SIGTERM: already stopping"]
    with pytest.raises(stopsignals.Interrupted) as caught:
        stopsignals.check()
    assert caught.value.signum == signal.SIGINT


def test_a_swallowed_signal_ends_a_wait_that_would_never_end(installed):
    """The CI run where `conduit up` hung past 120 s after a SIGTERM during topic creation: the
    signal landed in a transport callback and the admin client waited for a reply forever."""
    cancelled: list[bool] = []

    async def forever() -> None:
        def callback() -> None:
            os.kill(os.getpid(), signal.SIGTERM)
            sum(range(10_000))

        asyncio.get_running_loop().call_soon(callback)
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    with pytest.raises(stopsignals.Interrupted):
        asyncio.run(asyncio.wait_for(stopsignals.watch(forever(), poll_s=0.01), timeout=5))
    assert cancelled == [True]


def test_watch_returns_the_result_when_no_signal_came(installed):
    async def work() -> int:
        await asyncio.sleep(0.01)
        return 7

    assert asyncio.run(stopsignals.watch(work(), poll_s=0.001)) == 7
