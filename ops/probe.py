"""Container health checks for the services that serve no HTTP, and wait-for steps for init containers.

Used by ``docker-compose.yml`` health checks and the Kubernetes exec probes and
init containers in ``k8s/base``. ``ready``/``live``/``topics`` import only ``redis``,
``aiokafka`` and the settings, not the service code, so one check costs well under a
second; ``corpus`` imports the retriever's ingest module.

Usage (exit status 0 = healthy)::

    python -m ops.probe ready SERVICE    # readiness
    python -m ops.probe live SERVICE     # liveness
    python -m ops.probe topics [--timeout SECONDS]   # init container
    python -m ops.probe corpus [--timeout SECONDS]   # init container of the retriever

- ``ready``: 0 when Redis (``REDIS_URL``) answers and a liveness key of this pod
  ``conduit:alive:SERVICE:HOST:*`` exists (HOST is this container's host name, the pod
  name in Kubernetes; ``conduit.runtime.liveness.heartbeat`` refreshes the key every 2 s
  with a 6 s TTL, from the service's event loop); else 1. Another replica's key does not
  count: a hung pod is not kept alive by a healthy one.
  For ``sandbox`` it also reads this pod's isolation status (fields ``HOST:*`` of ``conduit:sandbox:statuses``)
  (``services.sandbox.main.publish_status``) and fails with its message (why, and the
  command that turns isolation on) when it cannot isolate code and unsafe mode is off
  (``sandbox_not_isolated``).
- ``live``: 1 only when Redis answers and no such key of this pod exists (its loop
  stopped beating). When Redis itself is unreachable it answers 0: a Redis outage
  must not make Kubernetes restart every pod at once; ``ready`` reports it instead.
- ``topics``: waits until every topic of ``contracts.topics.ALL_TOPICS`` exists on
  ``KAFKA_BOOTSTRAP_SERVERS`` (0), or ``--timeout`` seconds pass (1). In Kubernetes
  the topics are ``KafkaTopic`` resources (12 partitions, replication 3) and this
  keeps a service from creating them first with its own defaults.
- ``corpus``: waits until the law corpus is in the knowledge base
  (``services.retriever.ingest.corpus_ready``; on Kubernetes the ``conduit-ingest-laws``
  Job loads it), so the retriever never starts on an empty store.

``--host`` overrides the host name (tests; a sidecar checking another container).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys
import time
from collections.abc import Callable

from conduit.records import keys, sandboxstatus
from conduit.runtime.settings import Settings

REDIS_TIMEOUT_S = 2.0
"""Connect and read timeout of one Redis check (seconds)."""



def _client(redis_url: str):  # noqa: ANN202 - redis.Redis or redis.RedisCluster
    """A synchronous client for one check: ``redis.RedisCluster`` (every primary's keys) when
    ``CONDUIT_REDIS_CLUSTER`` is on (rule O9), else ``redis.Redis``."""
    import redis  # noqa: PLC0415
    from redis.cluster import ClusterNode  # noqa: PLC0415

    from conduit.runtime.redis_client import cluster_nodes, node_url  # noqa: PLC0415

    timeouts = {"socket_connect_timeout": REDIS_TIMEOUT_S, "socket_timeout": REDIS_TIMEOUT_S}
    if os.environ.get("CONDUIT_REDIS_CLUSTER", "").lower() in ("1", "true", "yes"):
        return redis.RedisCluster.from_url(node_url(redis_url), startup_nodes=[ClusterNode(h, p) for h, p in
                                                                               cluster_nodes(redis_url)], **timeouts)
    return redis.Redis.from_url(redis_url, **timeouts)


def heartbeat_present(redis_url: str, service: str, host: str | None = None) -> bool:
    """True when a liveness key of ``service`` on ``host`` (default: this host) exists.

    Raises ``redis.RedisError`` when Redis is unreachable.
    """
    import redis  # noqa: PLC0415 - keep ``--help`` instant

    pattern = keys.alive_pattern(service, host or socket.gethostname())
    client = _client(redis_url)
    try:
        for _ in client.scan_iter(match=pattern, count=500):
            return True
        return False
    finally:
        client.close()


def sandbox_isolation(redis_url: str, host: str | None = None) -> tuple[int, str]:
    """``(0, how)`` when the sandbox on ``host`` (default: this host) isolates code (or runs in the
    logged unsafe mode), else ``(1, why not)``."""
    import redis  # noqa: PLC0415

    client = _client(redis_url)
    try:
        reasons = []
        for status in sandboxstatus.fresh(client.hgetall(keys.SANDBOX_STATUSES), time.time(),
                                          host or socket.gethostname()):
            if status.get("isolated"):
                return 0, f"sandbox ready: {status.get('reason')}"
            if status.get("unsafe"):
                return 0, f"sandbox UNSAFE (no isolation, CONDUIT_SANDBOX_UNSAFE=true): {status.get('reason')}"
            reasons.append(str(status.get("reason")))
    finally:
        client.close()
    if not reasons:
        return 1, "sandbox has not reported its isolation status yet"
    return 1, "sandbox_not_isolated: " + reasons[0]


def check(kind: str, service: str, redis_url: str, host: str | None = None) -> tuple[int, str]:
    """Run one ``ready`` or ``live`` check of this pod (``host``, default this host name);
    return ``(exit status, one-line reason)``."""
    import redis  # noqa: PLC0415

    host = host or socket.gethostname()
    try:
        present = heartbeat_present(redis_url, service, host)
    except redis.RedisError as exc:
        if kind == "live":
            return 0, f"redis unreachable ({type(exc).__name__}); not a reason to restart {service}"
        return 1, f"redis unreachable: {exc}"
    if present and kind == "ready" and service == "sandbox":
        return sandbox_isolation(redis_url, host)
    if present:
        return 0, f"{service} heartbeat present (host {host})"
    return 1, f"no heartbeat key {keys.alive_pattern(service, host)}"


async def missing_topics(bootstrap: str, wanted: tuple[str, ...]) -> list[str]:
    """Topics of ``wanted`` that the cluster at ``bootstrap`` does not list (raises on connection errors)."""
    from aiokafka.admin import AIOKafkaAdminClient  # noqa: PLC0415

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, client_id="conduit-probe", request_timeout_ms=5000)
    await admin.start()
    try:
        existing = set(await admin.list_topics())
    finally:
        await admin.close()
    return [t for t in wanted if t not in existing]


def wait_until(check: Callable[[], str | None], timeout_s: float, every_s: float = 3.0) -> tuple[int, str]:
    """Call ``check`` until it returns None (done: ``(0, "ok")``) or ``timeout_s`` passes (``(1, last reason)``).

    ``check`` returns the reason it is not done yet; an exception counts as not done.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            reason = check()
        except Exception as exc:  # noqa: BLE001 - a dependency not up yet: keep waiting
            reason = f"{type(exc).__name__}: {exc}"
        if reason is None:
            return 0, "ok"
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return 1, reason
        print(reason, file=sys.stderr, flush=True)
        time.sleep(min(every_s, remaining))


def wait_topics(bootstrap: str, timeout_s: float, every_s: float = 3.0) -> tuple[int, str]:
    """Wait until every topic of ``contracts.topics.ALL_TOPICS`` exists on ``bootstrap``."""
    from contracts.topics import ALL_TOPICS  # noqa: PLC0415

    def check() -> str | None:
        try:
            missing = asyncio.run(missing_topics(bootstrap, ALL_TOPICS))
        except Exception as exc:  # noqa: BLE001
            return f"kafka not reachable: {type(exc).__name__}: {exc}"
        return f"missing topics: {', '.join(missing)}" if missing else None

    status, reason = wait_until(check, timeout_s, every_s)
    return status, (f"all {len(ALL_TOPICS)} topics exist" if status == 0 else reason)


def wait_corpus(settings: Settings, timeout_s: float, every_s: float = 10.0) -> tuple[int, str]:
    """Wait until ``services.retriever.ingest.corpus_ready(settings)`` is true."""
    from services.retriever.ingest import corpus_ready  # noqa: PLC0415 - heavy, only for this check

    status, reason = wait_until(lambda: None if corpus_ready(settings) else "law corpus not ingested yet",
                                timeout_s, every_s)
    return status, ("law corpus is in the knowledge base" if status == 0 else reason)


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv``, run the check, print its reason, return the exit status."""
    parser = argparse.ArgumentParser(prog="python -m ops.probe", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="kind", required=True)
    for kind in ("ready", "live"):
        p = sub.add_parser(kind)
        p.add_argument("service", help="orchestrator | retriever | web | sandbox | gateway")
        p.add_argument("--host", default=None, help="host name of the pod to check (default: this one)")
    for kind in ("topics", "corpus"):
        p = sub.add_parser(kind)
        p.add_argument("--timeout", type=float, default=600.0, help="seconds to wait (default 600)")
    args = parser.parse_args(argv)

    settings = Settings()
    if args.kind == "topics":
        status, reason = wait_topics(settings.bus.bootstrap_servers(), args.timeout)
    elif args.kind == "corpus":
        status, reason = wait_corpus(settings, args.timeout)
    else:
        status, reason = check(args.kind, args.service, settings.store.url(), args.host)
    print(reason, file=sys.stderr if status else sys.stdout, flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
