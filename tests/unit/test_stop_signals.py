"""A stop signal that an asyncio callback swallows is still raised at the next ``check()``
(the CI run where ``conduit up`` ignored a SIGINT during start-up and ran on)."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from conduit.ops import stopsignals


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
