"""conduit.runtime.redis_client: commands go out inline in the caller's task, still bounded by the socket timeout."""

from __future__ import annotations

import os
import signal
import time

import pytest
from redis.exceptions import TimeoutError as RedisTimeoutError

from ops import infra
from conduit.runtime.redis_client import InlineSendConnection, make_redis
from conduit.runtime.settings import StoreSettings


async def test_commands_scripts_and_pipelines_use_the_inline_connection(settings):
    client = make_redis(settings.store)
    try:
        assert client.connection_pool.connection_class is InlineSendConnection
        await client.set("conduit:test:inline", b"v", ex=30)
        assert await client.get("conduit:test:inline") == b"v"
        incr = client.register_script("return redis.call('INCRBY', KEYS[1], ARGV[1])")
        assert await incr(keys=["conduit:test:inline:n"], args=[2]) == 2
        async with client.pipeline(transaction=False) as pipe:
            pipe.exists("conduit:test:inline").delete("conduit:test:inline", "conduit:test:inline:n")
            assert await pipe.execute() == [1, 2]
    finally:
        await client.aclose()


async def test_a_send_to_a_hung_redis_times_out_and_drops_the_connection(tmp_path):
    """A real redis-server stopped with SIGSTOP: the kernel buffers fill, the send must give up after the timeout."""
    port = infra.free_port()
    proc = infra.start_redis(port, tmp_path / "redis", tmp_path / "redis.log", persist=False)
    client = make_redis(StoreSettings(redis_url=f"redis://127.0.0.1:{port}/0", redis_socket_timeout_s=0.5))
    try:
        assert await client.ping()
        os.kill(proc.pid, signal.SIGSTOP)
        started = time.monotonic()
        with pytest.raises(RedisTimeoutError):
            await client.set("conduit:test:big", b"x" * (64 << 20))  # 64 MiB: more than loopback buffers hold
        assert time.monotonic() - started < 5
        os.kill(proc.pid, signal.SIGCONT)
        assert await client.ping()  # a fresh connection replaces the dropped one
    finally:
        os.kill(proc.pid, signal.SIGCONT)
        await client.aclose()
        infra.stop(proc)
