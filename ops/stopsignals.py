"""SIGTERM and SIGINT for the commands that start a stack (``conduit up``, ``conduit demo``).

``install()`` makes the first of them raise ``Interrupted`` in the main thread, wherever it is;
later ones only print that a stop is under way (every stop is bounded by the processes' stop
budgets). A raise can be swallowed: a signal that lands inside an asyncio callback (a transport's
``data_received`` during ``ensure_topics``, say) is logged by the event loop as "Exception in
callback" and the code goes on. So the signal is also recorded, and ``check()`` raises it again:
the stack calls it between start-up steps and the supervisor on every tick, and a swallowed signal
still stops everything within one step.

A raise can also strand a lock: Popen takes its waitpid lock without a ``with`` (``acquire(False)``,
then ``try``), and a signal raised between the two leaves it taken, so every later wait of that
child hangs forever (`conduit up` did, in its stop after a SIGTERM during the broker's start).
Code that polls, waits for or signals a child runs inside ``deferred()``: a first signal there is
recorded and raised as the section ends.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

T = TypeVar("T")

POLL_S = 0.1
"""How often ``watch`` looks for a recorded stop signal (seconds)."""

_received: list[int] = []
"""The first stop signal's number once one arrived (at most one item)."""

_deferring: list[bool] = []
"""One item per ``deferred()`` section the main thread is in."""

_held: list[int] = []
"""The first stop signal's number when it arrived inside a ``deferred()`` section, until the section ends."""


class Interrupted(BaseException):
    """SIGTERM or SIGINT arrived (``signum``); raised in the main thread wherever it was."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def install(say: Callable[[str], None] = print) -> None:
    """Make SIGTERM and SIGINT raise ``Interrupted`` once and be recorded for ``check()``; later
    ones call ``say`` with a line that a stop is under way. Call it in the main thread."""
    _received.clear()

    def again(signum: int, _frame: object) -> None:
        say(f"{signal.Signals(signum).name}: already stopping")

    def first(signum: int, _frame: object) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, again)
        _received.append(signum)
        if _deferring:
            _held.append(signum)
            return
        raise Interrupted(signum)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, first)


@contextmanager
def deferred() -> Iterator[None]:
    """A section a first stop signal does not interrupt: it is recorded and ``Interrupted`` is raised
    when the outermost section ends. Nests. Only the main thread's sections count (signal handlers run
    there); in another thread (a supervisor's start) it does nothing, so a signal is never held for, or
    raised in, a thread that is not the one it interrupts."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _deferring.append(True)
    try:
        yield
    finally:
        _deferring.pop()
    if not _deferring and _held:
        raise Interrupted(_held.pop())


def check() -> None:
    """Raise ``Interrupted`` again if a stop signal arrived since ``install()``; else return
    (also when ``install`` was never called)."""
    if _received:
        raise Interrupted(_received[0])


async def watch(work: Awaitable[T], poll_s: float = POLL_S, cancel_wait_s: float = 5.0) -> T:
    """Await ``work`` and return its result, but raise ``Interrupted`` within ``poll_s`` seconds of a
    recorded stop signal, cancelling ``work`` (waiting at most ``cancel_wait_s`` seconds for it).

    A signal that lands inside an asyncio callback is swallowed there, and the awaited client can be
    left waiting for a reply its transport already dropped; without this, such a wait hangs.
    """
    task = asyncio.ensure_future(work)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=poll_s)
            if done:
                return task.result()
            check()
    finally:
        if not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=cancel_wait_s)
