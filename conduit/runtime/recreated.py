"""Rule B3: a consumer whose partition's log became shorter than its position reads it again from the start.

The embedded broker (tansu) keeps topics in memory. When it restarts, every topic comes back empty
and new messages start again at offset 0, but a consumer that lived through the restart keeps its
fetch position (say 20), and a message it was handling when the broker died commits that old
offset into the new broker. tansu answers a fetch past the log's end with no records and no
``OFFSET_OUT_OF_RANGE`` (Apache Kafka answers that error, and the consumer resets by its
``auto_offset_reset``), so the partition's consumers waited until the new log grew past 20: tool
requests sent after a broker restart reached no tool service until their deadline (found by the
full chaos run, docs/benchmarks.md). A consumer now compares each assigned partition's position
with the high watermark of its last fetch every ``CHECK_S`` seconds and, when the position is
past it, seeks to the beginning: what the new log holds is read (tool services and the
orchestrator are idempotent, so a message read twice is harmless).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from typing import Any

from conduit.runtime import idlefetch

log = logging.getLogger("conduit.runtime.recreated")

CHECK_S = 1.0
"""Seconds between two comparisons of positions with high watermarks (no request is sent)."""


def past_the_end(consumer: Any) -> list[tuple[Any, int, int]]:
    """``[(TopicPartition, position, high watermark)]`` of an aiokafka ``consumer``'s assigned partitions
    whose position is past the high watermark its last fetch saw (a log recreated shorter)."""
    return [(tp, position, highwater) for tp, position, highwater in idlefetch.positions(consumer)
            if position > highwater]


async def rewind(consumers: Iterable[Any]) -> int:
    """Seek every partition past its log's end to its beginning; returns how many were rewound."""
    rewound = 0
    for consumer in consumers:
        for tp, position, highwater in past_the_end(consumer):
            log.warning("%s[%d]: position %d is past the log's end %d (the broker lost the topic in a restart); "
                        "reading it again from the start (rule B3)", tp.topic, tp.partition, position, highwater)
            with contextlib.suppress(Exception):
                await consumer.seek_to_beginning(tp)
                rewound += 1
    return rewound


async def watch(consumers: Callable[[], Iterable[Any]], every_s: float = CHECK_S) -> None:
    """Run ``rewind(consumers())`` every ``every_s`` seconds until cancelled."""
    while True:
        await asyncio.sleep(every_s)
        await rewind(consumers())
