"""Where a Kafka partition starts and stops (PyFlink's ``KafkaOffsetsInitializer``), and which
source subtask owns it.

An initializer is a picklable description; ``resolve`` turns it into a concrete offset per
partition, asking the broker through a consumer. A reader resolves when it takes a partition, so
a checkpoint always records offsets, never "latest" (a restore must not re-resolve it later).
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Iterable

# librdkafka's logical offsets
OFFSET_BEGINNING = -2
OFFSET_END = -1

TopicPartitionId = tuple[str, int]


class KafkaOffsetResetStrategy(Enum):
    """Where to start a partition that has no committed offset (or an offset out of range)."""

    LATEST = "latest"
    EARLIEST = "earliest"
    NONE = "none"  # fail instead


class KafkaOffsetsInitializer:
    EARLIEST = "earliest"
    LATEST = "latest"
    COMMITTED = "committed"
    TIMESTAMP = "timestamp"
    SPECIFIC = "specific"

    def __init__(self, kind: str, reset: KafkaOffsetResetStrategy = KafkaOffsetResetStrategy.NONE,
                 timestamp: int | None = None, offsets: dict[TopicPartitionId, int] | None = None):
        self.kind = kind
        self.reset = reset
        self.timestamp = timestamp
        self.offsets = offsets or {}

    @staticmethod
    def earliest() -> "KafkaOffsetsInitializer":
        return KafkaOffsetsInitializer(KafkaOffsetsInitializer.EARLIEST)

    @staticmethod
    def latest() -> "KafkaOffsetsInitializer":
        return KafkaOffsetsInitializer(KafkaOffsetsInitializer.LATEST)

    @staticmethod
    def committed_offsets(
            offset_reset_strategy: KafkaOffsetResetStrategy = KafkaOffsetResetStrategy.NONE) -> "KafkaOffsetsInitializer":
        """The consumer group's committed offsets (needs ``set_group_id``); partitions without one start
        by ``offset_reset_strategy`` (NONE: the job fails naming the partition)."""
        return KafkaOffsetsInitializer(KafkaOffsetsInitializer.COMMITTED, _reset(offset_reset_strategy))

    @staticmethod
    def timestamp(timestamp: int) -> "KafkaOffsetsInitializer":
        """The first record with a timestamp >= ``timestamp`` (ms); the end where there is none."""
        if not isinstance(timestamp, int) or isinstance(timestamp, bool):
            raise TypeError(f"KafkaOffsetsInitializer.timestamp needs integer milliseconds, got {timestamp!r}")
        return KafkaOffsetsInitializer(KafkaOffsetsInitializer.TIMESTAMP, timestamp=timestamp)

    @staticmethod
    def offsets(offsets: dict, offset_reset_strategy: KafkaOffsetResetStrategy = KafkaOffsetResetStrategy.EARLIEST
                ) -> "KafkaOffsetsInitializer":
        """Given offsets, keyed by ``KafkaTopicPartition(topic, p)`` or ``(topic, p)``; other partitions
        start by ``offset_reset_strategy``."""
        parsed: dict[TopicPartitionId, int] = {}
        for tp, off in dict(offsets).items():
            parsed[_tp(tp)] = int(off)
        return KafkaOffsetsInitializer(KafkaOffsetsInitializer.SPECIFIC, _reset(offset_reset_strategy),
                                       offsets=parsed)

    def auto_offset_reset(self) -> str:
        """The consumer's ``auto.offset.reset`` for offsets that fall out of range (records deleted by retention)."""
        if self.kind == self.LATEST:
            return "latest"
        if self.reset == KafkaOffsetResetStrategy.LATEST:
            return "latest"
        return "earliest"

    def __repr__(self) -> str:
        extra = {self.TIMESTAMP: f"({self.timestamp})", self.SPECIFIC: f"({self.offsets})",
                 self.COMMITTED: f"({self.reset.name})"}.get(self.kind, "()")
        return f"KafkaOffsetsInitializer.{self.kind}{extra}"


class KafkaTopicPartition:
    """PyFlink's ``KafkaTopicPartition(topic, partition)``: a key of ``KafkaOffsetsInitializer.offsets``."""

    def __init__(self, topic: str, partition: int):
        self.topic = topic
        self.partition = int(partition)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, KafkaTopicPartition) and (self.topic, self.partition) == (other.topic, other.partition)

    def __hash__(self) -> int:
        return hash((self.topic, self.partition))

    def __repr__(self) -> str:
        return f"KafkaTopicPartition({self.topic!r}, {self.partition})"


def _tp(tp: Any) -> TopicPartitionId:
    if isinstance(tp, KafkaTopicPartition):
        return (tp.topic, tp.partition)
    topic, partition = tp
    return (str(topic), int(partition))


def _reset(strategy: Any) -> KafkaOffsetResetStrategy:
    if isinstance(strategy, KafkaOffsetResetStrategy):
        return strategy
    return KafkaOffsetResetStrategy[str(strategy).upper()]


class OffsetResolutionError(RuntimeError):
    pass


def resolve(init: KafkaOffsetsInitializer, partitions: Iterable[TopicPartitionId], consumer: Any,
            group_id: str | None, timeout: float) -> dict[TopicPartitionId, int]:
    """Concrete offsets of ``partitions`` (a list of (topic, partition)) by ``init``."""
    from confluent_kafka import TopicPartition

    parts = sorted(partitions)
    if not parts:
        return {}

    def bounds(tp: TopicPartitionId) -> tuple[int, int]:
        low, high = consumer.get_watermark_offsets(TopicPartition(*tp), timeout=timeout, cached=False)
        return low, high

    def by_reset(tp: TopicPartitionId, strategy: KafkaOffsetResetStrategy, why: str) -> int:
        if strategy == KafkaOffsetResetStrategy.EARLIEST:
            return bounds(tp)[0]
        if strategy == KafkaOffsetResetStrategy.LATEST:
            return bounds(tp)[1]
        raise OffsetResolutionError(f"topic {tp[0]} partition {tp[1]}: {why}, and the offset reset strategy is "
                                    "NONE (give committed_offsets(KafkaOffsetResetStrategy.EARLIEST) or LATEST)")

    kind = init.kind
    if kind == KafkaOffsetsInitializer.EARLIEST:
        return {tp: bounds(tp)[0] for tp in parts}
    if kind == KafkaOffsetsInitializer.LATEST:
        return {tp: bounds(tp)[1] for tp in parts}
    if kind == KafkaOffsetsInitializer.SPECIFIC:
        return {tp: init.offsets[tp] if tp in init.offsets else by_reset(tp, init.reset, "no offset given")
                for tp in parts}
    if kind == KafkaOffsetsInitializer.TIMESTAMP:
        found = consumer.offsets_for_times([TopicPartition(t, p, init.timestamp) for t, p in parts], timeout=timeout)
        out = {}
        for tp in found:
            key = (tp.topic, tp.partition)
            # No record at or after the timestamp: start at the end (as Flink does).
            out[key] = tp.offset if tp.offset >= 0 else bounds(key)[1]
        return out
    if kind == KafkaOffsetsInitializer.COMMITTED:
        if not group_id:
            raise OffsetResolutionError("KafkaOffsetsInitializer.committed_offsets() needs a consumer group: "
                                        "KafkaSource.builder().set_group_id(...)")
        committed = consumer.committed([TopicPartition(t, p) for t, p in parts], timeout=timeout)
        out = {}
        for tp in committed:
            key = (tp.topic, tp.partition)
            out[key] = tp.offset if tp.offset >= 0 else by_reset(key, init.reset, f"group {group_id} has no committed offset")
        return out
    raise ValueError(f"unknown offsets initializer {init!r}")


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units, 32-bit wrap-around)."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def split_owner(topic: str, partition: int, parallelism: int) -> int:
    """The subtask that reads a partition: Flink's ``KafkaSourceEnumerator.getSplitOwner``, so the
    partitions of a topic go round-robin from a start that depends on the topic. Every subtask
    computes it alike, so none has to ask the others: at start, for partitions found later, and
    for restored partitions at a new parallelism."""
    start = ((java_string_hash(topic) * 31) & 0x7FFFFFFF) % parallelism
    return (start + partition) % parallelism
