"""Control events that travel on data channels, in order with the batches.

Events take no credit: they are small, and a barrier must never wait behind a
credit that only consuming the data before it can return. They still queue
behind the batches emitted before them, so order per channel is kept.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RuntimeEvent:
    pass


@dataclass(frozen=True)
class EndOfPartition(RuntimeEvent):
    """The sender's subtask has emitted its last record on this channel."""


@dataclass(frozen=True)
class CheckpointBarrier(RuntimeEvent):
    """Barrier ``checkpoint_id``: everything before it belongs to that snapshot."""

    checkpoint_id: int
    timestamp_ms: int
    unaligned: bool = False
    savepoint: str | None = None  # the savepoint's directory: snapshot in full, canonical, into it


@dataclass(frozen=True)
class Watermark(RuntimeEvent):
    timestamp_ms: int


# Flink's Long.MIN_VALUE / MAX_VALUE watermarks: nothing known yet / end of event time.
MIN_WATERMARK = -(1 << 63)
MAX_WATERMARK = (1 << 63) - 1


@dataclass(frozen=True)
class WatermarkStatus(RuntimeEvent):
    """The sender went idle (no records for the source's idleness timeout) or became active again.
    An idle channel's watermark does not hold back the receiver's (Flink's WatermarkStatus)."""

    idle: bool


@dataclass(frozen=True)
class IterationProbe(RuntimeEvent):
    """Round ``round`` of the termination check of loop ``iteration`` (task/iteration.py): sent by the
    loop's heads on the loop's edges, forwarded by each task of the body once it has come in on all of
    its loop inputs, back to the heads over the back-edges. Everything sent before it on a channel
    was processed before it passed, so a round in which no head received a fed-back record proves the
    loop empty. ``clean``: no task it passed still had an input from outside the loop open."""

    iteration: int
    round: int
    clean: bool = True
