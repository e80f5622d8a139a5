"""One way to open Redis for every service."""

from __future__ import annotations

import asyncio
from typing import Any

from redis.asyncio import BlockingConnectionPool, Connection, Redis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from conduit.records import slots
from conduit.runtime.settings import StoreSettings


class InlineSendConnection(Connection):
    """redis-py's TCP ``Connection``, sending each command inline under ``asyncio.timeout``.

    With ``socket_timeout`` set, redis-py 8 sends through ``asyncio.wait_for``, which on
    Python 3.11 wraps the write in a new Task: the bytes leave only when the event loop
    next gets to that task, after whatever else is ready. On the orchestrator's first
    ``answer.delta`` that put ~1.5 ms between the append and Redis (docs/benchmarks.md,
    "Where the time goes"). Here the same send runs in the caller's task, bounded by the
    same ``socket_timeout`` (seconds); a send that times out raises redis-py's
    ``TimeoutError`` as before, and redis-py's own handling (disconnect on failure) is kept.
    """

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        """Send ``command`` (bytes or chunks) within ``socket_timeout`` seconds.

        Raises ``redis.exceptions.TimeoutError`` when the send (health check included)
        takes longer, ``ConnectionError`` as redis-py does.
        """
        timeout = self.socket_timeout
        if not timeout:
            return await super().send_packed_command(command, check_health)
        self.socket_timeout = None  # redis-py then writes inline; the timeout is ours
        try:
            async with asyncio.timeout(timeout):
                await super().send_packed_command(command, check_health)
        except TimeoutError:
            await self.disconnect(nowait=True)
            raise RedisTimeoutError("Timeout writing to socket") from None
        finally:
            self.socket_timeout = timeout


def make_redis(store: StoreSettings, client_name: str | None = None) -> Redis:
    """Return an asyncio Redis client for ``store.url()`` (bytes responses).

    ``client_name``: the ``CLIENT SETNAME`` of every connection of the pool (a tool service's
    owner name: its connections are its liveness, rule T8, ``conduit.runtime.owners``).

    The pool is bounded (``redis_max_connections``) and blocking: when every connection
    is busy a command waits for one (up to ``redis_socket_timeout_s`` seconds) instead of
    opening more. SSE streams do not hold connections (the gateway's ``StreamHub``
    reads every stream on its own client), so a burst of requests no longer grows a
    pool that never shrinks (bench/sse_fanout.py saw 783 connections unbounded).
    """
    if store.redis_cluster:
        return make_cluster(store, client_name)  # type: ignore[return-value]
    # redis-py 8 times socket reads out after 5 s by default, which cut the hub's blocking
    # XREAD: the read timeout is a setting, kept above the SSE poll block
    url = store.url()
    # plain TCP only: unix:// and rediss:// keep redis-py's own connection classes
    inline: dict[str, Any] = {"connection_class": InlineSendConnection} if url.startswith("redis://") else {}
    pool = BlockingConnectionPool.from_url(url, decode_responses=False, health_check_interval=30, **inline,
                                           max_connections=store.redis_max_connections,
                                           **({"client_name": client_name} if client_name else {}),
                                           timeout=store.redis_socket_timeout_s,
                                           socket_timeout=store.redis_socket_timeout_s)
    return Redis.from_pool(pool)  # closing the client closes its pool


class ClusterConnection(Connection):
    """redis-py's asyncio ``Connection`` for Redis Cluster nodes: a send on a connection that another task closed
    meanwhile raises ``redis.exceptions.ConnectionError`` (which callers handle, rule A16) instead of
    ``AttributeError`` ('NoneType' object has no attribute 'writelines'), seen in the chaos run on a cluster when
    redis-py closed a failed master's connections while a command was connecting on one of them."""

    async def _send_packed_command(self, command: Any) -> None:
        if self._writer is None:
            raise RedisConnectionError("connection closed while sending")
        await super()._send_packed_command(command)


def cluster_nodes(url: str) -> list[tuple[str, int]]:
    """The ``(host, port)`` startup nodes of a cluster URL: ``redis://h1:p1,h2:p2/0`` (one or more, port 6379
    when left out). Raises ``ValueError`` for a URL without a host."""
    rest = url.split("://", 1)[-1].split("/", 1)[0].rsplit("@", 1)[-1]
    out = []
    for part in filter(None, rest.split(",")):
        host, _, port = part.rpartition(":") if ":" in part else (part, "", "6379")
        out.append((host, int(port)))
    if not out:
        raise ValueError(f"no Redis Cluster node in {url!r}")
    return out


def node_url(url: str, index: int = 0) -> str:
    """``url`` naming only its node ``index`` (modulo their count), user and password kept
    (``redis://u:p@h1:p1,h2:p2/0`` -> ``redis://u:p@h1:p1/0`` for 0, ``redis://u:p@h2:p2/0`` for 1)."""
    nodes = cluster_nodes(url)
    host, port = nodes[index % len(nodes)]
    scheme, _, rest = url.partition("://")
    netloc, _, path = rest.partition("/")
    auth = netloc.rsplit("@", 1)[0] + "@" if "@" in netloc else ""
    return f"{scheme}://{auth}{host}:{port}/{path}"


def make_cluster(store: StoreSettings, client_name: str | None = None) -> RedisCluster:
    """Return an asyncio ``RedisCluster`` client for ``store.url()`` (``CONDUIT_REDIS_CLUSTER=true``).

    ``REDIS_URL`` names one or more startup nodes (``redis://h1:p1,h2:p2``; user and password as usual);
    the client finds the others and follows slot moves and failovers. Keys are named with hash tags
    from then on in this process (rule O8, ``conduit.records.slots.configure``). ``client_name`` names
    every connection on every node (rule T8, ``conduit.runtime.owners``). ``max_connections`` is per node.
    """
    slots.configure(store.redis_cluster_shards)
    url = store.url()
    starts = cluster_nodes(url)
    first = node_url(url)
    extra: dict[str, Any] = {"client_name": client_name} if client_name else {}
    client = RedisCluster.from_url(first, decode_responses=False, startup_nodes=[ClusterNode(h, p) for h, p in starts],
                                   max_connections=store.redis_max_connections,
                                   socket_timeout=store.redis_socket_timeout_s, **extra)
    # redis-py's cluster client takes no connection class: its node arguments (shared with the nodes it finds
    # later) and its startup nodes get ours
    client.connection_kwargs["connection_class"] = ClusterConnection
    for node in client.startup_nodes:
        node.connection_class = ClusterConnection
    return client


def not_a_cluster(store: StoreSettings, exc: Exception) -> str:
    """The one-line message for ``CONDUIT_REDIS_CLUSTER=true`` against a Redis that is no cluster (``exc``:
    redis-py's ``RedisClusterException``), for the CLI."""
    return (f"CONDUIT_REDIS_CLUSTER=true but {store.url()} is not a Redis Cluster ({exc}); "
            "unset it for a single Redis node (the embedded redis-server is one)")


def make_sync(store: StoreSettings, timeout_s: float | None = None) -> Any:
    """A synchronous client for ``store.url()``: ``redis.RedisCluster`` when ``CONDUIT_REDIS_CLUSTER``
    is on (keys named for it, rule O8), else ``redis.Redis``; for the CLI, the stack and benches.
    ``timeout_s``: socket connect and read timeout (seconds; None: none). Raises ``SystemExit`` with one line
    when cluster mode is on and the URL is no cluster."""
    import redis as redis_sync

    timeouts = {"socket_timeout": timeout_s, "socket_connect_timeout": timeout_s}
    if not store.redis_cluster:
        return redis_sync.Redis.from_url(store.url(), **timeouts)
    slots.configure(store.redis_cluster_shards)
    nodes = [redis_sync.cluster.ClusterNode(h, p) for h, p in cluster_nodes(store.url())]
    try:
        return redis_sync.RedisCluster.from_url(node_url(store.url()), startup_nodes=nodes, **timeouts)
    except redis_sync.exceptions.RedisClusterException as exc:  # a configuration error: say it in one line
        raise SystemExit(not_a_cluster(store, exc)) from None
