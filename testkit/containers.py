"""Full-fidelity infrastructure for the test suites: Apache Kafka (KRaft), Qdrant and Redis in
Docker containers (testcontainers), used instead of tansu, Qdrant Edge and a local redis-server
when pytest runs with ``--containers`` (``tests/conftest.py``; docs/operations.md).

``engine_missing()`` says why no Docker engine can be used (None: one answers). ``start()``
starts the three containers and returns ``Containers``: addresses, and ``restart_kafka()``
(stop and start the same container: its topics and offsets live in the container's log
directory, so they survive, which tansu's memory storage cannot show). Kafka's host port is
fixed at start, so its advertised listener stays right across the restart.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Any

from ops.infra import free_port, wait_port

KAFKA_IMAGE = "apache/kafka:3.9.1"
QDRANT_IMAGE = "qdrant/qdrant:v1.16.2"
REDIS_IMAGE = "redis:7.4"
START_TIMEOUT_S = 180.0
"""Longest wait for a container to answer after its start (seconds; first pulls take longer)."""


def engine_missing() -> str | None:
    """None when a Docker engine answers a ping, else a one-line reason (no client, no daemon)."""
    try:
        import docker

        docker.from_env(timeout=5).ping()
    except ImportError:
        return "the docker client library is not installed (dev dependency testcontainers)"
    except Exception as exc:  # noqa: BLE001 - DockerException, connection refused, missing socket
        return f"no Docker engine answers ({type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''})"
    return None


def _kafka(port: int) -> Any:
    """A single-node KRaft Apache Kafka container advertising ``localhost:port`` (not started)."""
    from testcontainers.core.container import DockerContainer

    env = {
        "KAFKA_NODE_ID": "1", "KAFKA_PROCESS_ROLES": "broker,controller",
        "KAFKA_LISTENERS": "PLAINTEXT://:9092,CONTROLLER://:9093",
        "KAFKA_ADVERTISED_LISTENERS": f"PLAINTEXT://localhost:{port}",
        "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
        "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "KAFKA_CONTROLLER_QUORUM_VOTERS": "1@localhost:9093",
        "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "1", "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "1", "KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
        "KAFKA_NUM_PARTITIONS": "4", "KAFKA_LOG_DIRS": "/var/lib/kafka/data",
    }
    container = DockerContainer(KAFKA_IMAGE).with_bind_ports(9092, port)
    for key, value in env.items():
        container = container.with_env(key, value)
    return container


def wait_kafka(bootstrap: str, timeout_s: float = START_TIMEOUT_S) -> None:
    """Wait until the broker at ``bootstrap`` answers a metadata request. Raises TimeoutError."""
    import asyncio

    from aiokafka.admin import AIOKafkaAdminClient

    async def ask() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000)
        await admin.start()
        try:
            await admin.list_topics()
        finally:
            await admin.close()

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            asyncio.run(ask())
            return
        except Exception:  # noqa: BLE001 - not up yet
            if time.monotonic() > deadline:
                raise TimeoutError(f"Kafka at {bootstrap} did not answer within {timeout_s} s") from None
            time.sleep(1.0)


@dataclass
class Containers:
    """The running containers: ``kafka_port`` (fixed host port), ``redis_port``, ``qdrant_url``."""

    kafka: Any
    redis: Any
    qdrant: Any
    kafka_port: int
    redis_port: int
    qdrant_url: str

    @property
    def bootstrap(self) -> str:
        """Kafka bootstrap servers."""
        return f"localhost:{self.kafka_port}"

    def restart_kafka(self) -> None:
        """Stop the Kafka container (SIGTERM, clean shutdown) and start it again; waits until it answers."""
        wrapped = self.kafka.get_wrapped_container()
        wrapped.stop(timeout=30)
        wrapped.start()
        wait_kafka(self.bootstrap)

    def stop(self) -> None:
        """Remove all three containers."""
        for c in (self.kafka, self.redis, self.qdrant):
            with contextlib.suppress(Exception):
                c.stop()


def start() -> Containers:
    """Start Kafka (KRaft), Redis and Qdrant containers and wait until each answers.

    Raises docker.errors.DockerException without an engine, TimeoutError when one never answers.
    """
    from testcontainers.community.qdrant import QdrantContainer
    from testcontainers.community.redis import RedisContainer

    port = free_port()
    kafka, redis, qdrant = _kafka(port), RedisContainer(REDIS_IMAGE), QdrantContainer(QDRANT_IMAGE)
    started: list[Any] = []
    try:
        for c in (kafka, redis, qdrant):
            c.start()
            started.append(c)
        redis_port = int(redis.get_exposed_port(6379))
        wait_port(redis_port, timeout_s=START_TIMEOUT_S)
        wait_kafka(f"localhost:{port}")
        return Containers(kafka, redis, qdrant, port, redis_port, f"http://{qdrant.rest_host_address}")
    except BaseException:
        for c in started:
            with contextlib.suppress(Exception):
                c.stop()
        raise
