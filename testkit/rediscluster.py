"""A local Redis Cluster for tests: ``masters`` primaries with ``replicas`` replicas each, on loopback.

``start_cluster(root)`` starts ``masters * (1 + replicas)`` ``redis-server --cluster-enabled yes``
processes (no persistence: a replica's copy is what survives a master's death), joins them with
``redis-cli --cluster create ... --cluster-replicas N --cluster-yes`` and waits for
``cluster_state:ok`` on every node. ``cluster-node-timeout`` (ms) decides how soon a replica takes
over a SIGKILLed master (``LocalCluster.kill_master`` then ``wait_failover``). ``LocalCluster.url``
is the ``REDIS_URL`` of every startup node for ``CONDUIT_REDIS_CLUSTER=true``
(``conduit.runtime.redis_client.make_cluster``). Raises ``RuntimeError`` when the cluster does not
form or fail over in time, ``FileNotFoundError`` without ``redis-cli``.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis

from ops import infra

BUS_OFFSET = 10000
"""A cluster node also listens on its port + 10000 (the cluster bus)."""


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def cluster_ports(n: int) -> list[int]:
    """``n`` loopback ports that are free, each with its cluster bus port (port + 10000) free too."""
    out: list[int] = []
    while len(out) < n:
        port = infra.free_port()
        if port + BUS_OFFSET < 65536 and port not in out and _free(port + BUS_OFFSET):
            out.append(port)
    return out


@dataclass
class LocalCluster:
    """A running local cluster: its node ``ports``, their processes (``procs`` by port) and files under ``root``."""

    ports: list[int]
    root: Path
    procs: dict[int, subprocess.Popen] = field(default_factory=dict)

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:p1,127.0.0.1:p2,.../0``: every node as a startup node."""
        return "redis://" + ",".join(f"127.0.0.1:{p}" for p in self.ports) + "/0"

    def live(self) -> list[int]:
        """Ports whose process still runs."""
        return [p for p, proc in self.procs.items() if proc.poll() is None]

    def _client(self, port: int) -> redis.Redis:
        return redis.Redis(port=port, socket_connect_timeout=1, socket_timeout=2)

    def masters(self) -> list[int]:
        """Ports of the live primaries that own slots, as a live node sees them."""
        for port in self.live():
            try:
                with self._client(port) as r:
                    nodes = r.execute_command("CLUSTER NODES")  # {"host:port@bus": {"flags", "slots", ...}}
            except redis.RedisError:
                continue
            out = [int(addr.split("@")[0].rsplit(":", 1)[1]) for addr, node in nodes.items()
                   if "master" in node["flags"] and "fail" not in node["flags"] and node["slots"]]
            return [p for p in out if p in self.live()]
        return []

    def ok(self) -> bool:
        """True when every live node says ``cluster_state:ok``."""
        for port in self.live():
            try:
                with self._client(port) as r:
                    if r.cluster("info").get("cluster_state") != "ok":
                        return False
            except redis.RedisError:
                return False
        return True

    def wait_ok(self, timeout_s: float = 30.0) -> None:
        """Wait until every live node reports ``cluster_state:ok``; raises RuntimeError after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.ok():
                return
            time.sleep(0.1)
        raise RuntimeError(f"redis cluster {self.ports} not ok after {timeout_s:.0f} s; logs in {self.root}")

    def kill_master(self, port: int | None = None) -> int:
        """SIGKILL one primary (``port``, else the first); return its port."""
        port = port if port is not None else self.masters()[0]
        self.procs[port].send_signal(signal.SIGKILL)
        self.procs[port].wait(10)
        return port

    def wait_failover(self, killed: int, timeout_s: float = 30.0) -> None:
        """Wait until a replica took over ``killed``'s slots (``masters()`` no longer lists it, the cluster is ok)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            masters = self.masters()
            if masters and killed not in masters and len(masters) >= len(self.ports) // 2 and self.ok():
                return
            time.sleep(0.1)
        raise RuntimeError(f"no replica took over {killed} within {timeout_s:.0f} s; logs in {self.root}")

    def stop(self) -> None:
        """Stop every node (SIGTERM, then SIGKILL)."""
        for proc in self.procs.values():
            infra.stop(proc, timeout_s=5)


def start_cluster(root: Path, masters: int = 3, replicas: int = 1, node_timeout_ms: int = 2000) -> LocalCluster:
    """Start and join a local cluster (see the module doc); the caller stops it (``LocalCluster.stop``)."""
    cli = shutil.which("redis-cli") or str(Path(str(infra.redis_server_binary())).with_name("redis-cli"))
    if not Path(cli).exists():
        raise FileNotFoundError("redis-cli not found (Debian: apt-get install redis-tools)")
    cluster = LocalCluster(cluster_ports(masters * (1 + replicas)), root)
    for port in cluster.ports:
        node_dir = root / f"node-{port}"
        cluster.procs[port] = infra.spawn_redis(
            port, node_dir, node_dir / "redis.log", False, "--cluster-enabled", "yes",
            "--cluster-config-file", str((node_dir / "nodes.conf").resolve()),
            "--cluster-node-timeout", str(node_timeout_ms))
    try:
        for port in cluster.ports:
            infra.wait_port(port, proc=cluster.procs[port])
        subprocess.run([cli, "--cluster", "create", *(f"127.0.0.1:{p}" for p in cluster.ports),
                        "--cluster-replicas", str(replicas), "--cluster-yes"],
                       check=True, capture_output=True, timeout=60)
        cluster.wait_ok()
        _wait_replicas(cluster, masters * replicas)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _wait_replicas(cluster: LocalCluster, n: int, timeout_s: float = 30.0) -> None:
    """Wait until ``n`` replicas report their link to their primary up (a failover needs a synced replica)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        up = 0
        for port in cluster.ports:
            with cluster._client(port) as r:
                info = r.info("replication")
            up += info.get("role") == "slave" and info.get("master_link_status") == "up"
        if up >= n:
            return
        time.sleep(0.1)
    raise RuntimeError(f"redis cluster replicas not in sync after {timeout_s:.0f} s")
