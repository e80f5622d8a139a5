"""The channel table (contracts/channels.py) and the Redis key module, in process.

- every topic has one row, in ``ALL_TOPICS`` order, with distinct event types;
- ``bus.publish`` refuses a (topic, event type) pair the table does not list, before
  anything is sent (the broker here is never started);
- each service group's subscription is what the table lists; every tool's request topic
  carries ``ToolRequested``;
- every Redis key is built under the ``conduit:`` prefix by ``conduit.records.keys``;
- every Kafka client waits at most ``kafka_request_timeout_ms`` for one answer (rule B4).
"""

from __future__ import annotations

import typing

import pytest
from faststream.kafka import KafkaBroker

from conduit.records import keys
from conduit.runtime import bus
from conduit.runtime.settings import Settings
from contracts import channels, topics
from contracts.events import AgentEvent, AgentEventPayload, QuestionAsked, QuestionPayload, ToolRequested, ToolResult
from contracts.tools import TOOL_SPECS


def test_every_topic_has_one_row_in_order() -> None:
    assert [c.topic for c in channels.CHANNELS] == list(topics.ALL_TOPICS)
    for channel in channels.CHANNELS:
        assert len(channel.types) == len(channel.events), channel.topic
        assert channel.key == "task_id"


def test_check_names_the_allowed_types() -> None:
    channels.check(topics.QUESTIONS, "question.asked")
    with pytest.raises(channels.UnknownChannel, match=r"does not carry 'tool.result'.*question.asked"):
        channels.check(topics.QUESTIONS, "tool.result")
    with pytest.raises(channels.UnknownChannel, match="not in contracts/channels.py"):
        channels.check("conduit.nowhere", "question.asked")


async def test_publish_refuses_a_pair_not_in_the_table_before_sending() -> None:
    broker = KafkaBroker("127.0.0.1:1")  # never started: a refused publish must not reach it
    event = AgentEvent(task_id="t1", session_id="s1", payload=AgentEventPayload(kind="task.started"))
    with pytest.raises(channels.UnknownChannel, match=topics.QUESTIONS):
        await bus.publish(broker, topics.QUESTIONS, event)
    asked = QuestionAsked(task_id="t1", session_id="s1", payload=QuestionPayload(question="q"))
    with pytest.raises(channels.UnknownChannel):
        await bus.publish(broker, topics.TOOL_RESULTS, asked)


def test_subscriptions_follow_the_table() -> None:
    read, model = channels.subscription(topics.GROUP_ORCHESTRATOR)
    assert read == (topics.QUESTIONS, topics.CONTROL, topics.TOOL_RESULTS)
    union = typing.get_args(typing.get_args(model)[0])
    assert {c.model_fields["type"].default for c in union} == {
        "question.asked", "task.cancelled", "approval.decided", "tool.result"}
    assert channels.subscription(topics.GROUP_RETRIEVER)[0] == (topics.TOOL_REQUESTS_KB, topics.RETRIEVER_REQUESTS,
                                                                topics.RETRIEVER_WRITES)
    assert channels.subscription(topics.GROUP_WEB) == ((topics.TOOL_REQUESTS_WEB,), ToolRequested)
    assert channels.subscription(topics.GROUP_SANDBOX) == ((topics.TOOL_REQUESTS_SANDBOX,), ToolRequested)
    assert channels.subscription(topics.GROUP_MCP) == ((topics.TOOL_REQUESTS_MCP,), ToolRequested)
    with pytest.raises(channels.UnknownChannel):
        channels.subscription("conduit-nobody")
    for spec in TOOL_SPECS.values():
        if spec.name == "delegate":  # a worker's task is a question (team mode, rule D2)
            assert spec.request_topic == topics.QUESTIONS
            continue
        assert channels.events_on(spec.request_topic) == (ToolRequested,)
    assert channels.events_on(topics.TOOL_RESULTS) == (ToolResult,)


def test_partition_key_is_the_task_id() -> None:
    event = AgentEvent(task_id="任务-1", session_id="s", payload=AgentEventPayload(kind="task.started"))
    assert channels.partition_key(event) == "任务-1".encode()


def test_every_key_has_the_prefix_and_its_parts() -> None:
    built = [keys.state("t"), keys.task("t"), keys.session_turns("s"), keys.events("t"), keys.events_seq("t"),
             keys.events_terminal("t"), keys.cancel("t"), keys.approval("t", "c"), keys.approval_decision("t", "c"), keys.fault("t"),
             keys.idempotency("ten", "d"), keys.hub_wake("h"), keys.reply("r"), keys.document("ten", "d"),
             keys.documents("ten"), keys.document_applied("ten", "d", "r"), keys.tool_result("k"), keys.attempts("c", "e"), keys.artifact("a"),
             keys.alive("web", "host", 7), keys.SANDBOX_STATUSES, keys.mcp_servers("ten"), keys.mcp_catalog("ten"), keys.LEASES, keys.TOOL_DEADLINES]
    assert all(k.startswith("conduit:") for k in built)
    assert len(set(built)) == len(built)
    assert keys.alive("web", "h", 7) == "conduit:alive:web:h:7"
    assert keys.events("t") == "conduit:events:t" and keys.events_seq("t") == "conduit:events:t:seq"


def test_kafka_clients_wait_at_most_the_request_timeout() -> None:
    """Rule B4: an unanswered group join or sync is dropped and sent again after 12 s (aiokafka's own
    default, 40 s, outlasted the 30 s tool deadline in a chaos run), above the 10 s rebalance timeout."""
    settings = Settings()
    broker = bus.make_broker(settings, "rule-b4")
    assert settings.bus.kafka_request_timeout_ms == 12_000
    assert broker.config.broker_config.builder.keywords["request_timeout_ms"] == 12_000
