"""The gateway's memory allocator: jemalloc for every Python object when the library is there.

Why (docs/benchmarks.md §3, docs/operations.md "Gateway / SSE"): CPython's own small-object
allocator (pymalloc) frees a 1 MiB arena only when every block in it is free. After a burst
of 1,000 SSE streams a few hundred objects outlive it (the event loop's cancelled timers,
the Redis pool's connection state), pinning the burst's arenas: the gateway stayed ~34 MiB
over its baseline for good. With ``PYTHONMALLOC=malloc`` every object goes to ``malloc``;
jemalloc (Debian ``libjemalloc2``) preloaded under it hands freed pages back to the OS
within ``dirty_decay_ms`` (``MALLOC_CONF``): the same burst ends within 3-4 MiB of the
baseline, at the same CPU per event (measured side by side in bench/sse_fanout.py).

Both must be set before the interpreter starts, so ``conduit serve gateway`` re-executes
itself once with ``reexec_env()`` added to its environment (the process keeps its pid,
so PID 1 in a container stays PID 1). Setting ``gateway_allocator``:
``auto`` (jemalloc when found, else pymalloc), ``jemalloc`` (required: an error without
it), ``pymalloc`` (CPython's default, nothing changed).

``release_memory()`` hands freed heap pages back to the OS on either allocator
(``gc.collect()`` then glibc ``malloc_trim(0)``); the gateway's stream hub calls it when its
last SSE subscriber leaves after a burst.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import gc
import os
from collections.abc import Mapping
from pathlib import Path

JEMALLOC_PATHS = (
    "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2",  # Debian/Ubuntu libjemalloc2, amd64
    "/usr/lib/aarch64-linux-gnu/libjemalloc.so.2",  # arm64
    "/usr/lib64/libjemalloc.so.2",  # Fedora/RHEL
    "/usr/lib/libjemalloc.so.2",  # Alpine, Arch
)
"""Where ``find_jemalloc`` looks (first hit wins)."""

MALLOC_CONF = "background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0"
"""jemalloc options used unless ``MALLOC_CONF`` is already set: freed pages go back to the OS
over about 1 s (seconds-scale decay keeps the CPU cost of purging out of the hot path), purged by
jemalloc's background thread, so an idle gateway gives them back too (without it, purging waits
for the next allocations: a 1,000-stream burst stayed +31 MiB until the next requests came)."""


class AllocatorError(RuntimeError):
    """``gateway_allocator=jemalloc`` but no jemalloc library was found."""


def find_jemalloc(paths: tuple[str, ...] = JEMALLOC_PATHS) -> str | None:
    """The first existing jemalloc shared library in ``paths``, or None."""
    return next((p for p in paths if Path(p).is_file()), None)


def in_use(env: Mapping[str, str] = os.environ) -> str:
    """``"jemalloc"`` when this process was started with it preloaded under ``PYTHONMALLOC=malloc``, else ``"pymalloc"``."""
    preloaded = "jemalloc" in env.get("LD_PRELOAD", "")
    return "jemalloc" if preloaded and env.get("PYTHONMALLOC") == "malloc" else "pymalloc"


def reexec_env(choice: str, env: Mapping[str, str] = os.environ,
               paths: tuple[str, ...] = JEMALLOC_PATHS) -> dict[str, str] | None:
    """The variables to add before re-executing, or None when nothing is to change.

    Args:
        choice: ``auto`` | ``jemalloc`` | ``pymalloc`` (setting ``gateway_allocator``).
        env: the current environment; None is returned when jemalloc is already in use
            (so the re-executed process does not loop).
        paths: where to look for the library.

    Raises:
        AllocatorError: ``choice`` is ``jemalloc`` and no library was found.
        ValueError: unknown ``choice``.
    """
    if choice not in ("auto", "jemalloc", "pymalloc"):
        raise ValueError(f"gateway_allocator must be auto, jemalloc or pymalloc, not {choice!r}")
    if choice == "pymalloc" or in_use(env) == "jemalloc":
        return None
    lib = find_jemalloc(paths)
    if lib is None:
        if choice == "jemalloc":
            raise AllocatorError(f"gateway_allocator=jemalloc but none of {', '.join(paths)} exists "
                                 "(install Debian's libjemalloc2, or set CONDUIT_GATEWAY_ALLOCATOR=auto)")
        return None
    preload = " ".join(p for p in (lib, env.get("LD_PRELOAD", "")) if p)
    return {"LD_PRELOAD": preload, "PYTHONMALLOC": "malloc",
            "MALLOC_CONF": env.get("MALLOC_CONF") or MALLOC_CONF}


_malloc_trim = None
with contextlib.suppress(OSError, AttributeError, TypeError):
    _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    _malloc_trim = _libc.malloc_trim  # glibc only; musl and macOS have none
    _malloc_trim.argtypes = [ctypes.c_size_t]
    _malloc_trim.restype = ctypes.c_int


def release_memory() -> bool:
    """Return freed memory to the OS: ``gc.collect()`` then glibc ``malloc_trim(0)``.

    Returns True when ``malloc_trim`` ran (glibc), False when only the collection did.
    Takes a few to tens of milliseconds on the event loop; the hub calls it only
    when its subscriber count has dropped to 0.
    """
    gc.collect()
    if _malloc_trim is None:
        return False
    _malloc_trim(0)
    return True
