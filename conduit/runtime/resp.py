"""A fast reader of one Redis reply, next to the Redis client (``conduit.runtime.redis_client``).

redis-py's pure-Python RESP parser costs ~50 µs per stream entry, more than everything
else the gateway does per SSE event; ``RespReader`` parses one in a few (docs/operations.md,
"Gateway / SSE"). Used by the gateway's stream hub for its shared ``XREAD``.

- ``bulk(b)``: one RESP bulk string, for packing a command by hand;
- ``read_reply(conn, command, timeout_s)``: send a packed command on a redis-py connection
  and parse its reply straight from the connection's stream;
- ``RespReader``: the incremental parser;
- ``text(v)``: bytes -> str (None -> ``""``).
"""

from __future__ import annotations

import asyncio

from redis.asyncio.connection import AbstractConnection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import InvalidResponse, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError


def bulk(b: bytes) -> bytes:
    """``b`` as a RESP bulk string: ``$<len>\\r\\n<b>\\r\\n``."""
    return b"$%d\r\n%s\r\n" % (len(b), b)


def text(v: bytes | str | None) -> str:
    """``v`` decoded as UTF-8; ``""`` for None."""
    if v is None:
        return ""
    return v.decode("utf-8") if isinstance(v, bytes) else v


async def read_reply(conn: AbstractConnection, command: bytes, timeout_s: float) -> object:
    """Send the packed ``command`` on ``conn`` and return its parsed reply (``RespReader`` shapes).

    The reply is parsed from the connection's private ``_reader`` stream; without it (another
    redis-py) it falls back to ``read_response``. Raises ``RedisError`` (``TimeoutError`` after
    ``timeout_s`` seconds, ``ConnectionError``, ``ResponseError``); any failure drops the
    connection (redis-py reconnects on the next send).
    """
    await conn.send_packed_command(command, check_health=False)
    stream = getattr(conn, "_reader", None)
    if not isinstance(stream, asyncio.StreamReader):
        return await conn.read_response()
    parser = RespReader()
    try:
        async with asyncio.timeout(timeout_s):
            while not parser.parse():
                data = await stream.read(1 << 17)
                if not data:
                    raise RedisConnectionError("Connection closed by server.")
                parser.feed(data)
    except BaseException as exc:
        await conn.disconnect(nowait=True)
        if isinstance(exc, TimeoutError):
            raise RedisTimeoutError("Timeout reading a reply from Redis") from exc
        if isinstance(exc, OSError):
            raise RedisConnectionError(f"Error while reading a reply from Redis: {exc!r}") from exc
        raise
    return parser.value


class RespReader:
    """Incremental parser of one RESP2/RESP3 reply held in memory.

    ``feed(bytes)`` appends received data; ``parse()`` returns True once a whole
    reply is parsed into ``value`` (resumable: a partial reply keeps its state).
    Shapes: arrays, sets and pushes -> ``list``; maps -> ``list`` of ``[key, value]``
    pairs (so ``XREAD`` has the same shape in both protocols); bulk and simple
    strings, doubles, big numbers and verbatim strings -> ``bytes``; integers ->
    ``int``; nulls -> ``None``. An error reply raises ``redis.exceptions.ResponseError``;
    an unknown type byte raises ``redis.exceptions.InvalidResponse``.
    """

    __slots__ = ("buf", "pos", "stack", "value")

    def __init__(self) -> None:
        self.buf = b""
        self.pos = 0
        self.stack: list[list] = []  # [items, remaining, is_map]
        self.value: object = None

    def feed(self, data: bytes) -> None:
        """Append received bytes (the part already parsed is dropped)."""
        self.buf = self.buf[self.pos:] + data if self.pos < len(self.buf) else data
        self.pos = 0

    def parse(self) -> bool:
        """Parse as far as the data goes; True when the reply is complete (in ``value``)."""
        buf, pos, stack = self.buf, self.pos, self.stack
        end = len(buf)
        while True:
            nl = buf.find(b"\r\n", pos)
            if nl < 0:
                break
            t = buf[pos]
            if t == 36 or t == 61 or t == 33:  # $ bulk, = verbatim, ! blob error
                n = int(buf[pos + 1:nl])
                if n < 0:
                    val: object = None
                    pos = nl + 2
                else:
                    stop = nl + 2 + n
                    if stop + 2 > end:
                        break
                    val = buf[nl + 2:stop]
                    pos = stop + 2
                    if t == 33:
                        raise ResponseError(text(val))
            elif t == 42 or t == 37 or t == 126 or t == 62:  # * array, % map, ~ set, > push
                n = int(buf[pos + 1:nl])
                pos = nl + 2
                if n > 0:
                    stack.append([[], n * 2 if t == 37 else n, t == 37])
                    continue
                val = None if n < 0 else []
            elif t == 58:  # : integer
                val = int(buf[pos + 1:nl])
                pos = nl + 2
            elif t == 43 or t == 44 or t == 40 or t == 35:  # + simple, , double, ( big number, # boolean
                val = buf[pos + 1:nl]
                pos = nl + 2
            elif t == 95:  # _ null
                val = None
                pos = nl + 2
            elif t == 45:  # - error
                raise ResponseError(buf[pos + 1:nl].decode("utf-8", "replace"))
            else:
                raise InvalidResponse(f"Protocol error, got {chr(t)!r} as reply type byte")
            while True:  # attach ``val`` to its container, closing the ones it completes
                if not stack:
                    self.value = val
                    self.pos = pos
                    return True
                top = stack[-1]
                top[0].append(val)
                top[1] -= 1
                if top[1]:
                    break
                stack.pop()
                items = top[0]
                val = [items[i:i + 2] for i in range(0, len(items), 2)] if top[2] else items
        self.pos = pos
        return False
