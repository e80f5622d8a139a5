"""Redis Cluster URLs (rule O9, docs/operations.md "Redis Cluster"): the startup nodes of ``REDIS_URL`` and
one node's own URL, with the user and password every client must keep."""

from __future__ import annotations

import pytest

from conduit.runtime.redis_client import cluster_nodes, node_url

URL = "redis://app:s3cret@10.0.0.1:7000,10.0.0.2:7001,10.0.0.3/0"


def test_startup_nodes_leave_the_login_out_and_default_the_port() -> None:
    assert cluster_nodes(URL) == [("10.0.0.1", 7000), ("10.0.0.2", 7001), ("10.0.0.3", 6379)]
    with pytest.raises(ValueError):
        cluster_nodes("redis:///0")


def test_each_node_url_keeps_the_login_and_the_database() -> None:
    assert node_url(URL) == "redis://app:s3cret@10.0.0.1:7000/0"
    assert node_url(URL, 1) == "redis://app:s3cret@10.0.0.2:7001/0"
    assert node_url(URL, 5) == "redis://app:s3cret@10.0.0.3:6379/0"  # rotation: modulo the node count
    assert node_url("redis://h:1") == "redis://h:1/"
