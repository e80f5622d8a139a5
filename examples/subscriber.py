"""Read Conduit's public agent events as CloudEvents and print one JSON line per event.

    pip install aiokafka cloudevents
    python examples/subscriber.py --bootstrap localhost:9092 --group my-team-conduit-events
    python examples/subscriber.py --bootstrap localhost:9092 --from-beginning --task TASK_ID --until-terminal

Each record of ``conduit.agent.events`` is a CloudEvent 1.0 in the Kafka binding's binary mode
(``ce_*`` headers, the JSON envelope as the value; docs/events.md). This consumer commits an
offset only after it has handled the record (at least once) and skips an event it has already
seen (``ce_id``) and one whose ``schema_version`` it does not know. Output lines:
``{"id", "type", "source", "subject", "time", "tenant", "kind", "data"}``.
Standalone: it needs only aiokafka and the CloudEvents SDK, nothing of Conduit.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import uuid

from aiokafka import AIOKafkaConsumer
from cloudevents.core.bindings.kafka import KafkaMessage, from_binary
from cloudevents.core.formats.json import JSONFormat

TOPIC = "conduit.agent.events"
KNOWN_SCHEMA_VERSION = 1
TERMINAL = {"task.completed", "task.failed", "task.cancelled", "task.needs_input"}


def line_of(event) -> dict:  # a cloudevents.core.v1.event.CloudEvent
    """The printed summary of one CloudEvent."""
    data = event.get_data() or {}
    return {"id": event.get_id(), "type": event.get_type(), "source": event.get_source(),
            "subject": event.get_subject(), "time": event.get_time().isoformat() if event.get_time() else None,
            "tenant": event.get_extension("tenantid"), "kind": data.get("payload", {}).get("kind"), "data": data}


async def run(args: argparse.Namespace) -> int:
    """Consume until ``--until-terminal`` sees the task's end, ``--count`` events, or ``--timeout`` seconds."""
    consumer = AIOKafkaConsumer(
        TOPIC, bootstrap_servers=args.bootstrap, group_id=args.group or f"example-subscriber-{uuid.uuid4().hex[:8]}",
        auto_offset_reset="earliest" if args.from_beginning else "latest", enable_auto_commit=False,
        fetch_max_wait_ms=args.fetch_max_wait_ms)
    await consumer.start()
    seen: set[str] = set()
    printed = 0
    loop = asyncio.get_running_loop()
    deadline = loop.time() + args.timeout if args.timeout else None
    try:
        while deadline is None or loop.time() < deadline:
            batches = await consumer.getmany(timeout_ms=200)
            for records in batches.values():
                for record in records:
                    message = KafkaMessage(headers={k: v for k, v in record.headers}, key=record.key, value=record.value)
                    try:
                        event = from_binary(message, JSONFormat())
                    except Exception as exc:  # noqa: BLE001 - not a CloudEvent (an older producer): skip it
                        print(f"skipping a record that is not a CloudEvent: {exc}", file=sys.stderr)
                        continue
                    version = int(event.get_extension("schemaversion") or 1)
                    if event.get_id() in seen or version > KNOWN_SCHEMA_VERSION:
                        continue  # a redelivery, or a breaking change this consumer has not adopted
                    seen.add(event.get_id())
                    if args.task and event.get_subject() != args.task:
                        continue
                    out = line_of(event)
                    print(json.dumps(out, ensure_ascii=False), flush=True)
                    printed += 1
                    if (args.count and printed >= args.count) or (args.until_terminal and out["kind"] in TERMINAL):
                        await consumer.commit()
                        return 0
            if batches:
                await consumer.commit()  # after handling: at least once
        return 0 if printed else 1
    finally:
        await consumer.stop()


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run; exit code 0 when something was printed (or the end was seen)."""
    p = argparse.ArgumentParser(description="Print Conduit's public agent events (CloudEvents).")
    p.add_argument("--bootstrap", default="localhost:9092", help="Kafka bootstrap servers")
    p.add_argument("--group", help="consumer group id (your team's; never conduit-*); default: a new one")
    p.add_argument("--from-beginning", action="store_true", help="a new group starts at the oldest retained event")
    p.add_argument("--task", help="print only this task's events (the CloudEvents subject)")
    p.add_argument("--until-terminal", action="store_true", help="stop after the task's terminal event")
    p.add_argument("--count", type=int, default=0, help="stop after this many events (0: never)")
    p.add_argument("--timeout", type=float, default=0, help="stop after this many seconds (0: never)")
    p.add_argument("--fetch-max-wait-ms", type=int, default=500, help="10 for the embedded broker (tansu)")
    return asyncio.run(run(p.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
