"""The one thread that forks every child of a stack (``spawn``), safe against a stop signal at any moment.

PR_SET_PDEATHSIG fires when the *thread* that forked a child ends, so children are not forked from
short-lived threads (a test's helper thread) but from one long-lived thread. It is a daemon thread of
our own rather than a ``ThreadPoolExecutor`` worker: a stop signal raises ``Interrupted`` in the main
thread wherever it is (``ops.stopsignals``), and one that landed inside the pool's first ``submit``,
after its worker started but before the pool registered it for the exit hook, left that worker waiting
for work forever and the interpreter's exit joining it forever (`conduit up` hung after SIGINT during
the broker's start, about one start in twenty). A daemon thread is never joined at exit.

A signal that lands while the main thread waits for a fork is handled too: the child that fork made is
sent its death signal before ``Interrupted`` goes on, so no untracked child outlives the stop.
"""

from __future__ import annotations

import queue
import subprocess
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

ORPHAN_WAIT_S = 10.0
"""How long ``spawn`` waits, after a signal interrupted it, for the fork under way to finish (seconds)."""

_jobs: "queue.SimpleQueue[tuple[Future, Callable[[], subprocess.Popen]]]" = queue.SimpleQueue()
_thread: threading.Thread | None = None
_thread_lock = threading.Lock()


def _serve() -> None:
    while True:
        future, start = _jobs.get()
        if not future.set_running_or_notify_cancel():
            continue
        try:
            future.set_result(start())
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting caller
            future.set_exception(exc)


def _ensure_thread() -> None:
    global _thread
    with _thread_lock:
        if _thread is None or not _thread.is_alive():
            thread = threading.Thread(target=_serve, name="conduit-spawner", daemon=True)
            thread.start()
            _thread = thread


def spawn(start: Callable[[], subprocess.Popen], death_signal: int) -> subprocess.Popen:
    """Run ``start()`` (which forks one child and returns its ``Popen``) on the spawner thread; return its result.

    Raises what ``start`` raised. When an exception (a stop signal's ``Interrupted``) interrupts the wait,
    the child that ``start`` forked gets ``death_signal`` (waiting up to ``ORPHAN_WAIT_S`` seconds for the
    fork) and the exception goes on.
    """
    _ensure_thread()
    future: Future = Future()
    _jobs.put((future, start))
    try:
        return future.result()
    except BaseException:
        try:
            future.result(timeout=ORPHAN_WAIT_S).send_signal(death_signal)
        except BaseException:  # noqa: BLE001 - the fork itself failed or never finished: nothing to stop
            pass
        raise
