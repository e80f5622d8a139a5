"""Counts each process's Redis round trips by caller, for ``bench.redis_trips`` only.

Python imports ``sitecustomize`` at start from ``sys.path``; the bench puts this folder on ``PYTHONPATH``
and sets ``CONDUIT_BENCH_TRIPS_DIR`` for the stack it starts, and nowhere else is either set. Every
``send_packed_command`` of redis-py's asyncio connection (one command, one pipeline or one script call:
one request the client waits for, a round trip) is counted under the first two frames of Conduit's own
code above it; a thread writes the counts to ``$CONDUIT_BENCH_TRIPS_DIR/<service>-<pid>.json`` every 0.2 s.
"""

from __future__ import annotations

import os

if os.environ.get("CONDUIT_BENCH_TRIPS_DIR"):
    import collections
    import json
    import sys
    import threading
    import time

    from redis.asyncio import connection as _conn

    _OUT = os.environ["CONDUIT_BENCH_TRIPS_DIR"]
    _counts: collections.Counter[str] = collections.Counter()
    _send = _conn.AbstractConnection.send_packed_command

    def _caller() -> str:
        frame, chain = sys._getframe(2), []
        while frame is not None and len(chain) < 2:
            name = frame.f_code.co_filename
            if ("site-packages" not in name and "redis_client.py" not in name
                    and ("/conduit/" in name or "/services/" in name)):
                chain.append(f"{name.rsplit('/', 2)[-2]}/{name.rsplit('/', 1)[-1]}:{frame.f_code.co_name}")
            frame = frame.f_back
        return " < ".join(chain) or "(other)"

    async def _counted(self, command, check_health=True):  # noqa: ANN001, ANN202 - redis-py's signature
        _counts[_caller()] += 1
        return await _send(self, command, check_health)

    _conn.AbstractConnection.send_packed_command = _counted

    def _dump() -> None:
        while True:
            time.sleep(0.2)
            service = sys.argv[-1] if len(sys.argv) > 1 else "main"
            path = os.path.join(_OUT, f"{service}-{os.getpid()}.json")
            with open(path + ".tmp", "w") as f:
                json.dump(dict(_counts), f)
            os.replace(path + ".tmp", path)

    threading.Thread(target=_dump, daemon=True, name="trip-count").start()
