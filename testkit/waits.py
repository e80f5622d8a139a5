"""Waits on conditions for tests, instead of sleeping a guessed time.

For events only visible as state (a process started, a record changed, a reader blocked):
the condition is polled every ``every_s`` seconds until it holds or ``timeout_s`` passed, so a
busy machine only makes the wait longer, never the test wrong.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


def wait_until(condition: Callable[[], object], timeout_s: float, every_s: float = 0.05) -> bool:
    """Poll ``condition()`` until it is truthy (True) or ``timeout_s`` seconds passed (False)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(every_s)
    return True


async def until(condition: Callable[[], object], timeout_s: float, every_s: float = 0.01) -> bool:
    """Async ``wait_until``: poll ``condition()`` on the running loop (other tasks keep running)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        if loop.time() > deadline:
            return False
        await asyncio.sleep(every_s)
    return True
