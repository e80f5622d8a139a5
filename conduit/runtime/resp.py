"""Reading one Redis reply fast, next to the Redis client (``conduit.runtime.redis_client``).

redis-py's pure-Python RESP parser cost ~50 µs per stream entry, more than everything else the
gateway does per SSE event, and this module's own Python parser (before issue 17) still 12-17 µs
of CPU; ``hiredis``'s C reader parses one in about 2 (docs/benchmarks.md, "Issue 17, third stop").
Used by the gateway's stream hub for its shared ``XREAD``. (With hiredis installed redis-py
parses every other reply with it too.)

- ``bulk(b)``: one RESP bulk string, for packing a command by hand;
- ``read_reply(conn, command, timeout_s)``: send a packed command on a redis-py connection
  and parse its reply straight from the connection's stream;
- ``text(v)``: bytes -> str (None -> ``""``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import hiredis
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import InvalidResponse, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError


_PARTIAL = object()
"""hiredis' answer while the reply is incomplete."""


def bulk(b: bytes) -> bytes:
    """``b`` as a RESP bulk string: ``$<len>\\r\\n<b>\\r\\n``."""
    return b"$%d\r\n%s\r\n" % (len(b), b)


def text(v: bytes | str | None) -> str:
    """``v`` decoded as UTF-8; ``""`` for None."""
    if v is None:
        return ""
    return v.decode("utf-8") if isinstance(v, bytes) else v


async def read_reply(conn: AbstractConnection, command: bytes, timeout_s: float,
                     on_data: Callable[[], None] | None = None) -> object:
    """Send the packed ``command`` on ``conn`` and return its parsed reply; ``on_data()`` (if given) is called
    once, when the reply's first bytes arrive (after a blocking command's wait).

    Shapes (hiredis): arrays, sets and pushes -> ``list``; maps (RESP3) -> ``dict``; bulk and
    simple strings -> ``bytes``; integers -> ``int``; nulls -> ``None``.

    The reply is parsed from the connection's private ``_reader`` stream; without it (another
    redis-py) it falls back to ``read_response``. Raises ``RedisError`` (``TimeoutError`` after
    ``timeout_s`` seconds, ``ConnectionError``, ``ResponseError``); any failure drops the
    connection (redis-py reconnects on the next send).
    """
    await conn.send_packed_command(command, check_health=False)
    stream = getattr(conn, "_reader", None)
    if not isinstance(stream, asyncio.StreamReader):
        return await conn.read_response()
    parser = hiredis.Reader(protocolError=InvalidResponse, replyError=ResponseError, notEnoughData=_PARTIAL)
    try:
        async with asyncio.timeout(timeout_s):
            while (value := parser.gets()) is _PARTIAL:
                data = await stream.read(1 << 17)
                if not data:
                    raise RedisConnectionError("Connection closed by server.")
                if on_data is not None:
                    on_data()
                    on_data = None
                parser.feed(data)
    except BaseException as exc:
        await conn.disconnect(nowait=True)
        if isinstance(exc, TimeoutError):
            raise RedisTimeoutError("Timeout reading a reply from Redis") from exc
        if isinstance(exc, OSError):
            raise RedisConnectionError(f"Error while reading a reply from Redis: {exc!r}") from exc
        raise
    if isinstance(value, ResponseError):
        raise value
    return value
