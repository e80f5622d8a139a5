"""A start against a Redis that is still loading its append-only file waits, then succeeds.

A private redis-server gets 20,000 keys in its AOF, is stopped, and started again with Redis's
``key-load-delay`` (microseconds per key while loading) so the load takes seconds: meanwhile
every command answers ``LOADING`` (redis-py ``BusyLoadingError``), as after an hour of use.
"""

from __future__ import annotations

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from ops import infra
from ops.stack import Stack
from conduit.runtime.settings import Settings

KEYS = 20_000


def test_stack_start_waits_for_a_loading_redis(infra_stack, tmp_path):
    port = infra.free_port()
    data, log = tmp_path / "redis", tmp_path / "redis.log"
    first = infra.start_redis(port, data, log)
    client = redis.Redis(port=port, retry=Retry(NoBackoff(), 0))
    try:
        pipe = client.pipeline(transaction=False)
        for i in range(KEYS):
            pipe.set(f"k{i}", "x")
        pipe.execute()
    finally:
        infra.stop(first)
    loading = infra.spawn_redis(port, data, log, True, "--key-load-delay", "500")
    stack = None
    try:
        infra.wait_port(port, proc=loading)
        try:
            client.get("k1")
            raise AssertionError("redis should still be loading its AOF")
        except redis.BusyLoadingError:
            pass
        settings = Settings(kafka_bootstrap_servers=infra_stack.bootstrap, redis_url=f"redis://127.0.0.1:{port}/0",
                            data_dir=tmp_path / "data")
        stack = Stack(settings, services=("web",)).start()
        assert client.get(f"k{KEYS - 1}") == b"x" and stack.procs["web"].running
    finally:
        if stack is not None:
            stack.stop()
        client.close()
        infra.stop(loading)
