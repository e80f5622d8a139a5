"""``conduit status``: what the running ``conduit up`` supervises, and how each process is doing.

Reads the supervisor's ``<data_dir>/stack.json`` (``ops.supervisor``), then for
each process: pid, uptime, restarts, last exit, ready (a service: its own liveness key
``conduit:alive:SERVICE:HOST:PID`` is in Redis; tansu or Redis: its process lives and
its port answers) and the consumer lag of the service's group (messages not yet
committed, summed over partitions); a retriever replica on the embedded store also shows the
lag of its own writes group (rule K10). Also the size of the embedded Redis's files
(append-only file included).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

from conduit.records import keys
from conduit.runtime.liveness import alive_key
from conduit.runtime.settings import Settings
from contracts import topics

GROUPS = {"orchestrator": (topics.GROUP_ORCHESTRATOR, (topics.QUESTIONS, topics.TOOL_RESULTS, topics.CONTROL)),
          "retriever": (topics.GROUP_RETRIEVER, (topics.TOOL_REQUESTS_KB, topics.RETRIEVER_REQUESTS)),  # its reads:
          # the writes are read in this group or, by replicas on the embedded store, one group each (rule K10)
          "web": (topics.GROUP_WEB, (topics.TOOL_REQUESTS_WEB,)),
          "sandbox": (topics.GROUP_SANDBOX, (topics.TOOL_REQUESTS_SANDBOX,)),
          "mcp": (topics.GROUP_MCP, (topics.TOOL_REQUESTS_MCP,))}
"""Consumer group and input topics of each service that consumes (the gateway has none)."""


async def group_lag(bootstrap: str, group: str, names: tuple[str, ...]) -> int | None:
    """Messages on ``names`` past ``group``'s committed offsets (a partition never committed counts
    from its start); None when Kafka cannot tell. Reads offsets only: it does not join the group."""
    from aiokafka import AIOKafkaConsumer, TopicPartition  # noqa: PLC0415

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                                request_timeout_ms=3000, client_id="conduit-status")
    try:
        await consumer.start()
        parts = [TopicPartition(t, p) for t in names for p in sorted(consumer.partitions_for_topic(t) or ())]
        ends = await consumer.end_offsets(parts)
        starts = await consumer.beginning_offsets(parts)
        lag = 0
        for tp in parts:
            done = await consumer.committed(tp)
            lag += max(0, ends[tp] - (starts[tp] if done is None else done))
        return lag
    except Exception:  # noqa: BLE001 - status is best effort
        return None
    finally:
        await consumer.stop()


def dir_bytes(path: Path) -> int:
    """Total size of the files under ``path`` (0 when it does not exist)."""
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.exists() else 0


def _pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def collect(settings: Settings) -> dict | None:
    """The status report ``{"rows": [...], "redis_bytes", "gateway_url", "model"}``, or None when no stack runs
    (``model``: the model endpoint's last configuration error, ``conduit.records.modelhealth``, or None).

    Each row: ``key, service, pid, uptime_s, restarts, last_exit, ready, lag, writes_lag`` (lag None =
    no group; writes_lag None = no writes group of its own).
    """
    import redis  # noqa: PLC0415

    from ops import infra  # noqa: PLC0415
    from ops.supervisor import read_state  # noqa: PLC0415

    state = read_state(Path(settings.stack.data_dir).resolve())
    if state is None:
        return None
    r = redis.Redis.from_url(state["redis_url"], socket_connect_timeout=2, socket_timeout=2)
    now = time.time()
    rows = []
    try:
        for key, c in state["children"].items():
            alive = _pid_alive(c["pid"])
            if c["service"] in ("tansu", "redis"):
                port = settings.bus.embedded_kafka_port if c["service"] == "tansu" else settings.store.embedded_redis_port
                ready = alive and infra.port_open(port)
            else:
                try:
                    ready = alive and bool(r.exists(alive_key(c["service"], c["pid"])))
                except redis.RedisError:
                    ready = False
            group = c["service"] if c["service"] in GROUPS else None
            rows.append({"key": key, "service": c["service"], "pid": c["pid"], "restarts": c["restarts"],
                         "uptime_s": now - c["started_at"] if alive else None, "last_exit": c["last_exit"],
                         "ready": ready, "group": group})
        try:
            raw = r.get(keys.MODEL_HEALTH)
            model = json.loads(raw) if raw else None
        except redis.RedisError:
            model = None
    finally:
        r.close()
    asked = {row["group"]: GROUPS[row["group"]] for row in rows if row["group"]}
    writes = _writes_groups(settings, rows)
    asked |= {g: (g, (topics.RETRIEVER_WRITES,)) for g in writes.values()}
    lags = asyncio.run(_lags(state["bootstrap_servers"], asked))
    for row in rows:
        row["lag"] = lags.get(row.pop("group"))
        row["writes_lag"] = lags.get(writes.get(row["key"]))
    return {"rows": rows, "gateway_url": state["gateway_url"], "model": model,
            "redis_bytes": dir_bytes(Path(state["data_dir"]) / "redis")}


def _writes_groups(settings: Settings, rows: list[dict]) -> dict[str, str]:
    """``{row key: writes group}`` of retriever replicas on the embedded store (more than one retriever,
    no ``QDRANT_URL``): replica K (keyed ``retriever-K``, replica 1 ``retriever``) reads ``RETRIEVER_WRITES``
    in a group of its own (rule K10); {} otherwise."""
    keys = [row["key"] for row in rows if row["service"] == "retriever"]
    if len(keys) < 2 or settings.retrieval.qdrant_url:
        return {}
    return {k: topics.retriever_writes_group(1 if k == "retriever" else int(k.rpartition("-")[2])) for k in keys}


async def _lags(bootstrap: str, asked: dict[str, tuple[str, tuple[str, ...]]]) -> dict[str, int | None]:
    """``{name: group_lag(bootstrap, group, topics)}`` for ``asked = {name: (group, topics)}``, read at once."""
    values = await asyncio.gather(*(group_lag(bootstrap, group, names) for group, names in asked.values()))
    return dict(zip(asked, values))


def render(report: dict) -> str:
    """The report as a plain-text table."""
    lines = [f"{'process':16} {'pid':>7} {'uptime':>8} {'restarts':>8} {'ready':>5} {'lag':>6} {'writes':>6}  last exit"]
    for row in report["rows"]:
        up = f"{row['uptime_s']:.0f}s" if row["uptime_s"] is not None else "-"
        lag, writes = ("-" if row[k] is None else str(row[k]) for k in ("lag", "writes_lag"))
        lines.append(f"{row['key']:16} {row['pid'] or '-':>7} {up:>8} {row['restarts']:>8} "
                     f"{'yes' if row['ready'] else 'NO':>5} {lag:>6} {writes:>6}  {row['last_exit'] or '-'}")
    lines.append(f"gateway {report['gateway_url']} · embedded Redis files {report['redis_bytes'] / 1e6:.1f} MB")
    model = report.get("model")
    if model:  # rule A18: answers fall back to cited passages until the endpoint's configuration is fixed
        since = time.strftime("%H:%M:%S", time.localtime(model["at"]))
        lines.append(f"model: CONFIGURATION ERROR {model['code']} (last at {since}): {model['message']}")
    return "\n".join(lines)
