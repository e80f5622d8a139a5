"""Settings of the infrastructure: the embedded stack, the Kafka bus, the Redis store, logs/metrics/traces.

Each class is one concern of ``conduit.runtime.settings.Settings``; every field is read from
``CONDUIT_<FIELD>`` (a few also from a plain name, see ``alias``).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings

from conduit.runtime.config.base import CONFIG, alias


class StackSettings(BaseSettings):
    """The embedded stack and its supervisor (`conduit up`)."""

    model_config = CONFIG

    data_dir: Path = Field(default=Path(".conduit"), description="data directory (Qdrant Edge shard, embedded Redis, logs)")
    stack_ready_timeout_s: float = Field(default=300.0, description="how long `conduit up`/`demo` wait for every service to check in (seconds)")
    supervisor_max_restarts: int = Field(default=5, ge=1, description="`conduit up` gives up on a process (and stops the stack) when it exits again after this many restarts within supervisor_restart_window_s")
    supervisor_restart_window_s: float = Field(default=60.0, description="window of the crash-loop count (seconds)")
    supervisor_backoff_base_s: float = Field(default=0.5, description="first restart delay of a process that exited; doubles per recent restart, with jitter (seconds)")
    supervisor_backoff_max_s: float = Field(default=30.0, description="cap of the restart delay (seconds)")


class BusSettings(BaseSettings):
    """The Kafka bus: the cluster's address (or the embedded tansu broker's port) and the clients' tuning."""

    model_config = CONFIG

    embedded_kafka_port: int = Field(default=19092, description="port of the embedded tansu broker")
    kafka_bootstrap_servers: str | None = Field(
        default=None, validation_alias=alias("kafka_bootstrap_servers", "KAFKA_BOOTSTRAP_SERVERS"),
        description="Kafka bootstrap servers; unset = embedded tansu broker",
    )
    kafka_fetch_max_wait_ms: int = Field(default=2, description="consumer fetch wait in ms: tansu answers a waiting fetch only when it ends, so each hop waits ~half of it; set 500 for real Kafka, which answers when data arrives (a wait ≥ 100 ms also turns the idle gate off; docs/benchmarks.md §1)")
    kafka_idle_after_s: float = Field(default=1.0, ge=0, description="with a short fetch wait (< 100 ms, tansu): a consumer with no message for this long pauses its fetches until a Redis doorbell rung by the publisher wakes it (0 = always poll; conduit/runtime/idlefetch.py)")
    kafka_idle_probe_s: float = Field(default=2.0, gt=0, description="a paused consumer fetches once this often anyway, so a message whose doorbell was lost (Redis down) waits at most about this long (seconds)")
    kafka_request_timeout_ms: int = Field(default=12_000, ge=1_000, description="how long a Kafka client waits for any one broker answer before it drops the connection and tries again (ms); above the consumers' 10 s rebalance timeout, which bounds a real coordinator's wait on a join or sync, and far below aiokafka's 40 s default, which a group join that tansu never answered waited out while its partitions' tool calls passed their deadline (rule B4)")
    kafka_group_rescue_after_s: float = Field(default=20.0, ge=0, description="a consumer still waiting for its group's assignment after this long (seconds, plus up to 25 % jitter) takes over the leader its coordinator names, finishes that round and leaves: tansu keeps the leader of a forming group after it left, and its group then never forms; above a normal rebalance (the 10 s rebalance timeout, 6 s session, tansu's 3 s join pause); on real Kafka the coordinator refuses the takeover (0 = off; rule B5)")
    kafka_partitions: int = Field(default=6, description="partitions per topic created by Conduit")
    kafka_idempotent_producer: bool = Field(
        default=False, description="idempotent producer; tansu 0.6.0 rejects InitProducerId, enable on real Kafka")

    def bootstrap_servers(self) -> str:
        """Kafka bootstrap servers: the configured cluster or the embedded broker."""
        return self.kafka_bootstrap_servers or f"127.0.0.1:{self.embedded_kafka_port}"


class StoreSettings(BaseSettings):
    """Redis (task state, event logs, records): its address (or the embedded server's port) and the client pools."""

    model_config = CONFIG

    embedded_redis_port: int = Field(default=16379, description="port of the private embedded redis-server")
    redis_url: str | None = Field(
        default=None, validation_alias=alias("redis_url", "REDIS_URL"),
        description="Redis URL; unset = private embedded redis-server",
    )
    redis_max_connections: int = Field(default=64, description="Redis connections per client pool; commands wait for a free one (SSE streams share the gateway's one stream reader)")
    redis_cluster: bool = Field(default=False, description="REDIS_URL names a Redis Cluster (any node, or several comma-separated host:port after redis://); keys get hash tags (rule O8, docs/operations.md)")
    redis_cluster_shards: int = Field(default=32, ge=1, le=16384, description="Redis Cluster: task shards (hash tags {s0}..); each is one slot: more shards spread tasks over more masters (rule O8)")
    redis_socket_timeout_s: float = Field(
        default=30.0, description="Redis socket read timeout (seconds); must exceed the SSE poll block (CONDUIT_GATEWAY_SSE_POLL_MS)")

    def url(self) -> str:
        """Redis URL: the configured one or the private embedded server."""
        return self.redis_url or f"redis://127.0.0.1:{self.embedded_redis_port}/0"


class ObservabilitySettings(BaseSettings):
    """Logs, metrics and traces (conduit.runtime.logs, conduit.runtime.metrics, conduit.runtime.tracing)."""

    model_config = CONFIG

    log_level: str = Field(default="INFO", description="log level")
    log_json: bool = Field(default=True, description="JSON log lines (structlog); false = console format")
    metrics_port: int = Field(default=0, description="port of /metrics for services without HTTP (not the gateway); 0 = off (embedded stack: set per process)")
    otlp_endpoint: str | None = Field(default=None, description="OTLP/HTTP collector base URL for traces (e.g. http://otel-collector:4318; spans go to <url>/v1/traces); wins over OTEL_EXPORTER_OTLP_ENDPOINT, loses to OTEL_EXPORTER_OTLP_TRACES_ENDPOINT; none of them = tracing off (rule O5)")
