"""``conduit up`` as a process manager: restart what exits, give up on a crash loop.

Every ``TICK_S`` the supervisor looks at each process of the ``Stack`` (tansu, Redis,
every service replica). One that exited is logged with its exit status and started
again after a backoff: ``supervisor_backoff_base_s`` doubled per restart it had in the
last ``supervisor_restart_window_s`` seconds, capped at ``supervisor_backoff_max_s``,
with equal jitter (half fixed, half random) so replicas do not restart in step. A process
that exits again after ``supervisor_max_restarts`` restarts within the window is a
crash loop: ``CrashLoop`` is raised and the caller stops the stack. A restarted broker
gets its topics again (tansu keeps them in memory only).

The supervisor also keeps ``<data_dir>/stack.json`` (``STATE_FILE``) current for
``conduit status``: its own pid, the addresses, and per process its service, pid,
start time, restart count and last exit.
"""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ops.stack import Stack

TICK_S = 0.2
"""How often the supervisor looks at its processes (seconds)."""
STATE_FILE = "stack.json"
"""The state file's name in the data directory."""


class CrashLoop(RuntimeError):
    """A process kept exiting; the message names it, its last exit and its log."""


def describe_exit(returncode: int | None) -> str:
    """``-9`` -> ``"killed by SIGKILL"``, ``1`` -> ``"exit status 1"``."""
    if returncode is None:
        return "still running"
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit status {returncode}"


def backoff_s(recent: int, base_s: float, cap_s: float, rng: random.Random) -> float:
    """Delay before a restart after ``recent`` restarts in the window: ``d = min(cap, base * 2**recent)``,
    then ``d/2 + uniform(0, d/2)`` seconds (equal jitter)."""
    d = min(cap_s, base_s * 2 ** recent)
    return d / 2 + rng.uniform(0, d / 2)


@dataclass
class Track:
    """What the supervisor remembers of one process: restarts (total and recent), last exit,
    next start, and the thread of a start under way."""

    restarts: int = 0
    recent: deque[float] = field(default_factory=deque)
    last_exit: str | None = None
    due: float | None = None
    starting: threading.Thread | None = None


class Supervisor:
    """Watch and restart the processes of a started ``Stack``.

    A start runs in its own thread (a broker waits for its port, Redis loads its file), so
    the others are still watched meanwhile. Services are started again only while tansu and
    Redis run: a service that died with the broker waits for it instead of crash-looping.

    Args:
        stack: the started stack.
        log: where to say what happened (one line per event).
        rng: random source of the jitter.
    """

    def __init__(self, stack: Stack, log: Callable[[str], None] = print, rng: random.Random | None = None) -> None:
        self.stack = stack
        self.settings = stack.settings
        self.log = log
        self.rng = rng or random.Random()
        self.tracks: dict[str, Track] = {key: Track() for key in stack.children()}
        self.state_path = stack.data_dir / STATE_FILE
        self.started_at = time.time()

    def _infra_up(self) -> bool:
        return all(p.running and self.tracks[k].due is None and self.tracks[k].starting is None
                   for k, p in self.stack.infra.items())

    def step(self, now: float | None = None) -> None:
        """One look at every process: schedule restarts of those that exited, start those due.

        Raises ``CrashLoop`` when a process exits again after ``supervisor_max_restarts``
        restarts within ``supervisor_restart_window_s`` seconds.
        """
        s = self.settings.stack
        now = time.monotonic() if now is None else now
        changed = False
        for key, child in self.stack.children().items():
            track = self.tracks.setdefault(key, Track())
            if track.starting is not None:
                if track.starting.is_alive():
                    continue
                track.starting, changed = None, True
            while track.recent and now - track.recent[0] > s.supervisor_restart_window_s:
                track.recent.popleft()
            if track.due is None and not child.running:
                track.last_exit = describe_exit(child.proc.returncode if child.proc else None)
                if len(track.recent) >= s.supervisor_max_restarts:
                    raise CrashLoop(f"{key} exited ({track.last_exit}) after {len(track.recent)} restarts in "
                                    f"{s.supervisor_restart_window_s:g} s: giving up and stopping the stack; "
                                    f"see {child.log_path}")
                delay = backoff_s(len(track.recent), s.supervisor_backoff_base_s, s.supervisor_backoff_max_s, self.rng)
                track.due = now + delay
                self.log(f"{key} (pid {child.pid}) exited: {track.last_exit}; restarting in {delay:.1f} s "
                         f"(restart {track.restarts + 1}; log {child.log_path})")
            elif track.due is not None and now >= track.due and (key in self.stack.infra or self._infra_up()):
                track.due = None
                track.restarts += 1
                track.recent.append(now)
                track.starting = threading.Thread(target=self._restart, args=(key,), name=f"restart-{key}", daemon=True)
                track.starting.start()
        if changed:
            self.write_state()

    def _restart(self, key: str) -> None:
        child = self.stack.children()[key]
        try:
            child.start()
            if key == "tansu":
                self.stack.ensure_topics()
        except Exception as exc:  # noqa: BLE001 - a failed start counts as one more exit
            self.log(f"{key} did not start: {type(exc).__name__}: {exc}")
            return
        self.log(f"{key} restarted (pid {child.pid})")

    def run(self, should_stop: Callable[[], bool] = lambda: False) -> None:
        """Supervise until ``should_stop()`` is true; raises ``CrashLoop`` (see ``step``)."""
        self.write_state()
        try:
            while not should_stop():
                self.step()
                time.sleep(TICK_S)
        finally:
            self.state_path.unlink(missing_ok=True)
            for track in self.tracks.values():  # a start under way ends before the stack is stopped
                if track.starting is not None:
                    track.starting.join()

    def state(self) -> dict:
        """The ``stack.json`` content (see the module doc)."""
        s = self.settings
        children = {}
        for key, child in self.stack.children().items():
            track = self.tracks.get(key, Track())
            children[key] = {"service": child.name, "pid": child.pid, "started_at": child.started_at,
                             "restarts": track.restarts, "last_exit": track.last_exit}
        return {"pid": os.getpid(), "started_at": self.started_at, "gateway_url": self.stack.gateway_url,
                "redis_url": s.store.url(), "bootstrap_servers": s.bus.bootstrap_servers(),
                "data_dir": str(self.stack.data_dir), "children": children}

    def write_state(self) -> None:
        """Write ``stack.json`` atomically (a temporary file renamed over it)."""
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.state(), indent=1))
        tmp.replace(self.state_path)


def read_state(data_dir: Path) -> dict | None:
    """The running supervisor's ``stack.json`` in ``data_dir``, or None when no ``conduit up`` runs there."""
    path = Path(data_dir) / STATE_FILE
    try:
        state = json.loads(path.read_text())
        os.kill(state["pid"], 0)
    except (OSError, ValueError, KeyError):
        return None
    return state
