"""Rule K10, in process: retriever replicas on the embedded store (``services/retriever/replicas.py``).

- the folders, groups and apply count each replica derives from its settings;
- ``copy_shards`` replaces every replica's copy with replica 1's (and drops a copy replica 1 lacks);
- the stack passes each retriever its index and the count, copies before the retrievers start, and
  refuses replicas on the embedded store with an external broker (message says why);
- the retriever's subscriptions: one consumer with the writes in the shared group, or a second
  consumer in a group of its own per replica;
- the topics: the reads and the writes of the old retriever topic are split in the channel table.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ops.stack import Stack, StackError, retriever_replicas_refusal
from conduit.runtime.settings import Settings
from conduit.runtime.toolservice import ToolService
from contracts import channels, topics
from services.retriever import replicas
from services.retriever.store import edge_path


def settings(tmp: Path, k: int = 1, n: int = 1, **more) -> Settings:
    return Settings(data_dir=tmp, retriever_replica=k, retriever_replicas=n, **more)


def test_each_replica_derives_its_folders_group_and_apply_count(tmp_path):
    one, two = settings(tmp_path, 1, 2), settings(tmp_path, 2, 2)
    assert edge_path(one) == tmp_path / "qdrant" and replicas.shard_dir(one, "memory") == tmp_path / "memory"
    assert edge_path(two) == tmp_path / "replicas" / "2" / "qdrant"
    assert replicas.shard_dir(two, "memory") == tmp_path / "replicas" / "2" / "memory"
    assert replicas.writes_group(one) == "conduit-retriever-writes-1"
    assert replicas.writes_group(two) == "conduit-retriever-writes-2"
    assert replicas.applies_needed(two) == 2 and replicas.replicated(two)
    single = settings(tmp_path)
    assert replicas.writes_group(single) is None and replicas.applies_needed(single) == 1
    server = settings(tmp_path, 2, 2, qdrant_url="http://127.0.0.1:6333")  # one shared store
    assert not replicas.replicated(server) and replicas.writes_group(server) is None
    assert replicas.applies_needed(server) == 1
    with pytest.raises(ValueError):
        replicas.replica_dir(tmp_path, 0)
    with pytest.raises(ValueError):
        topics.retriever_writes_group(0)


def test_each_memory_write_has_one_stable_owner():
    owners = [replicas.owner_replica(f"event-{i}", 2) for i in range(400)]
    assert set(owners) == {1, 2} and 150 < owners.count(1) < 250  # spread over the replicas
    assert owners == [replicas.owner_replica(f"event-{i}", 2) for i in range(400)]  # the same in every process
    assert {replicas.owner_replica(f"e{i}", 1) for i in range(20)} == {1}


def test_copy_shards_replaces_older_copies(tmp_path):
    (tmp_path / "qdrant" / "segments").mkdir(parents=True)
    (tmp_path / "qdrant" / "segments" / "a.bin").write_bytes(b"new")
    (tmp_path / "memory").mkdir()
    (tmp_path / "memory" / "m.bin").write_bytes(b"mem")
    old = tmp_path / "replicas" / "2" / "qdrant"
    old.mkdir(parents=True)
    (old / "stale.bin").write_bytes(b"old")
    written = replicas.copy_shards(tmp_path, 3)
    assert sorted(written) == sorted(tmp_path / "replicas" / k / n for k in ("2", "3") for n in ("qdrant", "memory"))
    for k in ("2", "3"):
        assert (tmp_path / "replicas" / k / "qdrant" / "segments" / "a.bin").read_bytes() == b"new"
        assert (tmp_path / "replicas" / k / "memory" / "m.bin").read_bytes() == b"mem"
    assert not (old / "stale.bin").exists()
    assert not list((tmp_path / "replicas" / "2").glob("*.copying"))

    import shutil
    shutil.rmtree(tmp_path / "memory")  # replica 1 has no memory shard: nor does any copy
    replicas.copy_shards(tmp_path, 2)
    assert not (tmp_path / "replicas" / "2" / "memory").exists()
    assert (tmp_path / "replicas" / "2" / "qdrant" / "segments" / "a.bin").exists()
    assert replicas.copy_shards(tmp_path, 1) == []


def test_stack_passes_the_replica_index_and_copies_before_the_retrievers(tmp_path):
    (tmp_path / "qdrant").mkdir()
    (tmp_path / "qdrant" / "edge_config.json").write_text("{}")
    stack = Stack(Settings(data_dir=tmp_path), scale={"retriever": 2, "orchestrator": 2})
    first, second = stack.new_process("retriever", 1), stack.new_process("retriever", 2)
    assert (first.env["CONDUIT_RETRIEVER_REPLICA"], first.env["CONDUIT_RETRIEVER_REPLICAS"]) == ("1", "2")
    assert (second.key, second.env["CONDUIT_RETRIEVER_REPLICA"]) == ("retriever-2", "2")
    assert "CONDUIT_RETRIEVER_REPLICA" not in stack.new_process("orchestrator", 2).env
    stack.copy_retriever_shards()
    assert (tmp_path / "replicas" / "2" / "qdrant" / "edge_config.json").exists()


def test_replicas_on_the_embedded_store_refuse_an_external_broker(tmp_path):
    external = Settings(data_dir=tmp_path, kafka_bootstrap_servers="kafka:9092")
    message = retriever_replicas_refusal(external, 2)
    assert message and "needs the embedded broker" in message and "committed offsets" in message
    assert "kafka:9092" in message and "QDRANT_URL" in message
    with pytest.raises(StackError, match="committed offsets of the writes groups"):
        Stack(external, scale={"retriever": 2})
    assert retriever_replicas_refusal(external, 1) is None
    assert retriever_replicas_refusal(Settings(data_dir=tmp_path), 2) is None  # embedded broker
    server = Settings(data_dir=tmp_path, kafka_bootstrap_servers="kafka:9092", qdrant_url="http://q:6333")
    assert retriever_replicas_refusal(server, 3) is None


async def _nothing(_event) -> None:
    return None


def _groups(service: ToolService) -> list[tuple[str, tuple[str, ...]]]:
    service.subscribe()
    return sorted((s.group_id, tuple(sorted(s.topic_names))) for s in service.broker.subscribers)


def test_the_retriever_reads_the_writes_in_the_shared_group_or_in_its_own(tmp_path):
    shared = ToolService("retriever", topics.TOOL_REQUESTS_KB, topics.GROUP_RETRIEVER, settings(tmp_path))
    shared.consume(topics.RETRIEVER_REQUESTS, _nothing)
    shared.consume(topics.RETRIEVER_WRITES, _nothing)
    assert _groups(shared) == [(topics.GROUP_RETRIEVER, tuple(sorted(
        (topics.TOOL_REQUESTS_KB, topics.RETRIEVER_REQUESTS, topics.RETRIEVER_WRITES))))]

    own = ToolService("retriever", topics.TOOL_REQUESTS_KB, topics.GROUP_RETRIEVER, settings(tmp_path, 2, 2))
    own.consume(topics.RETRIEVER_REQUESTS, _nothing)
    own.consume_apart(topics.RETRIEVER_WRITES, "conduit-retriever-writes-2", _nothing)
    assert _groups(own) == [
        (topics.GROUP_RETRIEVER, tuple(sorted((topics.TOOL_REQUESTS_KB, topics.RETRIEVER_REQUESTS)))),
        ("conduit-retriever-writes-2", (topics.RETRIEVER_WRITES,))]
    with pytest.raises(channels.UnknownChannel):
        own.consume_apart("conduit.nowhere", "g", _nothing)


def test_reads_and_writes_are_split():
    reads = {channels._type_of(e) for e in channels.events_on(topics.RETRIEVER_REQUESTS)}
    writes = {channels._type_of(e) for e in channels.events_on(topics.RETRIEVER_WRITES)}
    assert reads == {"search.requested", "memory.recall_requested"}
    assert writes == {"document.ingest_requested", "document.delete_requested", "memory.index_requested",
                      "memory.forget_requested", "memory.vectors_indexed"}
