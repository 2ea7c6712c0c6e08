"""Barrier handling for unaligned checkpoints (Flink's CheckpointBarrierUnaligner and the
alternating handler behind ``execution.checkpointing.aligned-checkpoint-timeout``).

Under backpressure an aligned barrier waits behind every batch queued before it, on
every hop, so a checkpoint takes as long as draining the pipeline. An unaligned
barrier overtakes them: the first barrier of checkpoint n on any input channel makes
the task snapshot its operators at once and forward the barrier to the front of its
output queues. The data the barrier jumped over is recorded as channel state
(``checkpoint.channel_state``): on the channel it came through, the batches queued
before it; on every other channel, what arrives until that channel's barrier.
Nothing is blocked, so records keep flowing while the checkpoint completes.
On restore the channel state is put back on its channels, or, at another
parallelism, redistributed to the new subtasks (``checkpoint.channel_rescale``).

With an aligned-checkpoint timeout a checkpoint starts aligned (barriers in order,
channels blocked as usual) and turns unaligned where its start delay (now minus the
barrier's trigger time) passes the timeout: at a task still aligning, at a barrier
still queued in an input channel, or at one waiting in an output queue (the slot
settles those). Savepoint barriers are never unaligned (as in Flink).
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from typing import Callable

from ..checkpoint.channel_state import ChannelStateCollector
from ..network.channels import InputGate
from ..network.events import CheckpointBarrier
from .checkpointing import BarrierHandler


def start_delay_ms(barrier: CheckpointBarrier, now_ms: float | None = None) -> float:
    """How long ago the coordinator triggered this barrier's checkpoint (Flink's checkpoint start delay)."""
    return (time.time() * 1000.0 if now_ms is None else now_ms) - barrier.timestamp_ms


def as_unaligned(barrier: CheckpointBarrier) -> CheckpointBarrier:
    return barrier if barrier.unaligned else dataclasses.replace(barrier, unaligned=True)


class UnalignedBarrierHandler(BarrierHandler):
    """EXACTLY_ONCE with unaligned checkpoints enabled.

    ``on_unaligned(barrier, alignment_ms)`` snapshots the task now, lets the barrier overtake its
    output queues and returns the checkpoint's ChannelStateCollector; this handler fills in the
    input side. ``timeout_ms``: 0 = every checkpoint unaligned from the start; > 0 = aligned first,
    unaligned once its start delay passes it."""

    def __init__(self, gate: InputGate,
                 on_aligned: Callable[[CheckpointBarrier, float], None],
                 on_abort: Callable[[int, str], None],
                 on_unaligned: Callable[[CheckpointBarrier, float], ChannelStateCollector],
                 timeout_ms: int = 0):
        super().__init__(gate, True, on_aligned, on_abort)
        self.on_unaligned = on_unaligned
        self.timeout_ms = timeout_ms
        self.collector: ChannelStateCollector | None = None  # the unaligned checkpoint still recording inputs
        self.recording = False  # batches taken from some channels belong to the channel state
        gate.enable_priority_events()

    # -- barriers ------------------------------------------------------------------------
    def on_priority(self) -> None:
        """Unaligned barriers that overtook queued data (see InputChannel.push)."""
        priority = self.gate.priority
        while priority:
            index, barrier, before = priority.popleft()
            self._arrive(index, barrier, before)

    def on_barrier(self, channel: int, barrier: CheckpointBarrier) -> None:
        """A barrier taken from the queue in order: nothing of its channel precedes it any more."""
        self._arrive(channel, barrier, None)

    def _arrive(self, channel: int, barrier: CheckpointBarrier, before: int | None) -> None:
        n = barrier.checkpoint_id
        collector = self.collector
        if collector is not None:
            if n == collector.checkpoint_id:
                if before:
                    collector.add_input(channel, itertools.islice(self.gate.channels[channel].queue, before))
                collector.input_done(channel)
                self._settle()
                return
            if n > collector.checkpoint_id:
                self._drop_collector()
                self.on_abort(collector.checkpoint_id, f"barrier {n} overtook checkpoint {collector.checkpoint_id}")
        if n <= self.latest and (self.pending is None or n < self.pending.checkpoint_id):
            return  # an old checkpoint's barrier (aborted or already taken)
        if before is None and (barrier.savepoint is not None or not self._expired(barrier)):
            super().on_barrier(channel, barrier)  # aligned: block this channel until all have it
            return
        if self.pending is None or n > self.pending.checkpoint_id:
            if self.pending is not None:
                self._cancel(f"barrier {n} overtook checkpoint {self.pending.checkpoint_id}")
            self.pending = barrier
            self.arrived = set()
            self.started = time.perf_counter()
        self._go_unaligned(channel, before or 0)

    def _go_unaligned(self, channel: int | None, before: int) -> None:
        """Snapshot now; the barrier overtakes what is queued. ``channel`` delivered it with
        ``before`` batches ahead of it (None: the alignment in progress timed out)."""
        barrier = self.pending
        assert barrier is not None
        alignment_ms = (time.perf_counter() - self.started) * 1000.0
        channels = self.gate.channels
        arrived = set(self.arrived)
        if channel is not None:
            arrived.add(channel)
        for i in self.arrived:  # blocked while aligning: what follows their barrier is after the snapshot
            if not channels[i].finished:
                self.gate.unblock(i)
        self.pending = None
        self.arrived = set()
        self.latest = barrier.checkpoint_id
        collector = self.on_unaligned(as_unaligned(barrier), alignment_ms)
        collector.unaligned = True
        collector.input_keys = [(ch.edge, ch.source_subtask) for ch in channels]
        # A loop head's back-edges are logged by its FeedbackLog (task/iteration.py), from its snapshot on.
        collector.waiting_inputs |= {i for i, ch in enumerate(channels)
                                     if i not in arrived and not ch.finished and not ch.feedback}
        if channel is not None and before:
            collector.add_input(channel, itertools.islice(channels[channel].queue, before))
        self.collector = collector
        self.recording = True
        # A channel whose barrier already waits in its queue, in order: it overtakes what is before it too.
        self._overtake_queued(barrier.checkpoint_id)
        self._settle()

    def _overtake_queued(self, n: int) -> None:
        collector = self.collector
        if collector is None:
            return
        for i in sorted(collector.waiting_inputs):
            if self.gate.channels[i].feedback:
                continue  # never holds a barrier (task/iteration.FeedbackLog)
            queue = self.gate.channels[i].queue
            for k, item in enumerate(queue):
                if type(item) is CheckpointBarrier and item.checkpoint_id == n:
                    collector.add_input(i, itertools.islice(queue, k))
                    del queue[k]
                    collector.input_done(i)
                    break

    def on_data(self, channel: int, batch: object) -> None:
        """A batch was taken from ``channel``: channel state if its barrier has not come through yet."""
        collector = self.collector
        if collector is not None and channel in collector.waiting_inputs and not self.gate.channels[channel].feedback:
            collector.add_input(channel, (batch,))

    def check(self) -> None:
        if self.collector is not None:
            for i in list(self.collector.waiting_inputs):
                if self.gate.channels[i].finished:  # its EndOfPartition came: everything before it is recorded
                    self.collector.input_done(i)
            self._settle()
        super().check()

    def _settle(self) -> None:
        """Every regular input brought its barrier (or ended): this handler's part of the channel state is
        complete. (A loop head's back-edges may still be logging; the snapshot waits for them.)"""
        collector = self.collector
        if collector is not None and all(self.gate.channels[i].feedback for i in collector.waiting_inputs):
            self.collector = None
            self.recording = False

    # -- aligned-checkpoint timeout ---------------------------------------------------------------
    def _expired(self, barrier: CheckpointBarrier) -> bool:
        return self.timeout_ms <= 0 or start_delay_ms(barrier) >= self.timeout_ms

    def poll_timeout(self) -> None:
        """Turn an aligned checkpoint unaligned where it passed the timeout: the alignment in
        progress, or a barrier still queued behind data in an input channel."""
        if self.pending is not None and self._expired(self.pending):
            self._go_unaligned(None, 0)
            return
        for i, ch in enumerate(self.gate.channels):
            for k, item in enumerate(ch.queue):
                if type(item) is CheckpointBarrier and item.savepoint is None and item.checkpoint_id > self.latest \
                        and self._expired(item):
                    del ch.queue[k]
                    self._arrive(i, item, k)
                    return

    # -- aborts -----------------------------------------------------------------------------------
    def abort(self, checkpoint_id: int) -> None:
        if self.collector is not None and self.collector.checkpoint_id <= checkpoint_id:
            self._drop_collector()
        super().abort(checkpoint_id)

    def _drop_collector(self) -> None:
        self.collector = None
        self.recording = False


__all__ = ["UnalignedBarrierHandler", "as_unaligned", "start_delay_ms"]
