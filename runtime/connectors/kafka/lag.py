"""How far a Kafka source subtask is behind: Flink's ``pendingRecords`` (FLIP-33), worked out
from librdkafka's statistics (pure functions: the reader does the I/O).

librdkafka's ``stats_cb`` (every ``statistics.interval.ms``, served by the reader's own polls)
carries, per assigned partition, the end its last fetch saw: the last stable offset (``ls_offset``)
under ``read_committed`` (records of open or aborted transactions are not pending: the reader
will never see them), the high watermark (``hi_offset``) under ``read_uncommitted``. Pending is
that end minus the reader's position (the next offset it hands out; records fetched but not yet
handed out count as pending). The end is as fresh as the last fetch: while librdkafka's prefetch
queue is full (``queued.min.messages``) it does not fetch, so pendingRecords is then a lower bound.
"""

from __future__ import annotations

import json
from typing import Any, Iterable

TopicPartitionId = tuple[str, int]


def partition_ends(statistics: str, read_committed: bool) -> dict[TopicPartitionId, int]:
    """topic-partition -> the end of its log the last fetch saw, for every partition that has one."""
    doc = json.loads(statistics)
    field = "ls_offset" if read_committed else "hi_offset"
    ends: dict[TopicPartitionId, int] = {}
    for topic, t in (doc.get("topics") or {}).items():
        for partition, p in (t.get("partitions") or {}).items():
            end = p.get(field)
            if partition != "-1" and isinstance(end, int) and end >= 0:  # -1: librdkafka's internal partition
                ends[(topic, int(partition))] = end  # -1001: not known yet
    return ends


def pending_records(splits: Iterable[tuple[TopicPartitionId, int, int | None, bool]],
                    ends: dict[TopicPartitionId, int]) -> int | None:
    """Records behind the end over ``splits`` (tp, position, stop or None, finished); a bounded split
    is pending up to its stop. None while no unfinished split has a known end."""
    total = 0
    known = False
    for tp, position, stop, finished in splits:
        if finished:
            known = True
            continue
        end = ends.get(tp)
        if end is None:
            continue
        if stop is not None:
            end = min(end, stop)
        total += max(0, end - position)
        known = True
    return total if known else None


def commit_results(partitions: Any) -> tuple[dict[TopicPartitionId, int], int]:
    """The offsets a commit callback reports committed, and how many partitions failed."""
    done: dict[TopicPartitionId, int] = {}
    failed = 0
    for tp in partitions or ():
        if tp.error is not None:
            failed += 1
        elif tp.offset >= 0:
            done[(tp.topic, tp.partition)] = tp.offset
    return done, failed
