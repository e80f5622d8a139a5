"""Process-tree accounting from ``/proc``: who descends from a pid, and how much memory they hold.

Rule S2 (docs/rules.md): memory is watched as resident set size (RSS), not limited with an
address-space rlimit (``prlimit --as`` makes numpy fail at import). The kernel here
has no ``/proc/PID/task/TID/children``, so the tree is rebuilt from every
``/proc/PID/stat`` parent field; a scan costs about a millisecond per few hundred processes.
"""

from __future__ import annotations

import os
import signal
from collections import defaultdict

PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


def _parent_map() -> dict[int, list[int]]:
    """``{ppid: [pid, ...]}`` for every process visible in ``/proc``."""
    children: dict[int, list[int]] = defaultdict(list)
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:  # exited meanwhile
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 1:
            children[int(fields[1])].append(int(name))
    return children


def process_tree(root: int) -> list[int]:
    """``root`` and all its living descendants (pids in the host's namespace)."""
    children = _parent_map()
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, ()))
    return tree


def rss_bytes(pids: list[int]) -> int:
    """Sum of the resident set sizes of ``pids`` in bytes (vanished pids count 0)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm", "rb") as f:
                total += int(f.read().split()[1]) * PAGE_BYTES
        except (OSError, IndexError, ValueError):
            continue
    return total


def kill_all(pids: list[int]) -> None:
    """SIGKILL every pid in ``pids`` (ignoring ones already gone)."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
