"""Loops at run time: the iteration head, termination by detection, and the rounds that prove it.

A loop's back-edges are ordinary channels into its head's task (graph/iterations.py), read apart:

* no watermark is taken from them (the head's output watermark is its regular input's: a loop whose
  watermark waited for its own feedback would never advance), no barrier is aligned on them;
* their credit goes back as batches arrive (``InputChannel.feedback``), so the feedback backlog
  queues at the head instead of stalling the tails: a loop cannot deadlock under back pressure;
* they never end the head: it ends when the loop is proven empty, or after ``max_wait_time_ms``
  without feedback once its regular input has ended (Flink's meaning).

Termination is detected in rounds (``IterationRounds``, run by the job manager; by the slot itself
without one). Once every head subtask has seen its regular inputs end (round 0), the coordinator
starts round 1: each head sends an ``IterationProbe`` on the loop's edges; a body task forwards it
once it came in on all its loop inputs (``ProbeForwarder``; channels are FIFO, so everything sent
before the probe was processed before it passed); the tails send it back over the back-edges. A head
reports the round when the probe has come back on all its back-edges, with the number of fed-back
records it received since its last report. A round in which no head received any (and no task of
the body had an input from outside the loop still open) proves that nothing is left anywhere in
the loop: every record in it at the round's start was ahead of a probe, and whatever it caused
would have come back ahead of the probe too. Then every head ends, and the end flows down the body
as usual. Otherwise the next round starts at once: one event per loop channel per lap.

Not seen by the check (documented): processing-time timers of the body that would emit later.

Snapshots of a loop (Carbone et al. 2015, section 4: the IterationHead logs its back-edges). The head
aligns only on its regular inputs; once it has snapshotted checkpoint n and forwarded barrier n into
the body, every fed-back record it takes is logged (``FeedbackLog``) until barrier n has come back
around the loop on that back-edge. A barrier arriving on a back-edge is taken at once, not behind the
backlog queued before it: what is queued there was sent before it and is logged at that moment (it
stays queued and is processed as usual). The log is the head's input channel state of checkpoint n
on its back-edges (``checkpoint.channel_state``): written with the snapshot, into checkpoint storage,
and on restore put back at the front of the back-edges, taken before any new input; at another
parallelism redistributed by key group where the back-edge is keyed, whole channels round-robin where
it is not (``checkpoint.channel_rescale``). The snapshot is acknowledged once every back-edge brought
its barrier back (or ended). Aligned, unaligned (the head's regular inputs may be overtaken as on any
task; its back-edges are logged the same way), at-least-once and savepoints alike: without the log a
record circulating at the failure would be lost, which even at-least-once does not allow.

The back-edge queue (credit on arrival) is bounded in memory and spills to local disk beyond
``iteration.feedback-buffer.memory`` (network/spill.py); a log takes a spilled batch as its reference
and the checkpoint's writer reads it from the spill file.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from ..batch import Batch
from ..checkpoint.channel_state import ChannelStateCollector
from ..network.events import CheckpointBarrier, IterationProbe, RuntimeEvent
from ..network.spill import rows_of
from .base import StreamOperator
from .iteration_rounds import END, REPORT, ROUND


class IterationHeadOperator(StreamOperator):
    """The head of ``stream.iterate()``: the input's records and the fed-back ones, passed on as they
    come (with their timestamps). The loop logic is its task's (``HeadLoop``), as for the two-input
    head of ``with_feedback_type``."""

    def process(self, batch: Batch, input_index: int) -> None:
        self.output.emit(batch, self.ts)


class HeadLoop:
    """One head subtask's part of its loop's termination check, driven by its task."""

    def __init__(self, iteration: Any, subtask: int, parallelism: int, back: set[int], writers: list[Any],
                 report: Callable[[dict], None]):
        self.iteration = iteration.id
        self.name = iteration.name
        self.max_wait_s = None if iteration.max_wait_time_ms is None else iteration.max_wait_time_ms / 1000.0
        self.subtask = subtask
        self.parallelism = parallelism
        self.back = back  # gate indexes of the back-edge channels
        self.writers = writers  # record writers of the loop's edges out of this task
        self.report = report
        self.input_ended = False
        self.ended = False
        self.round = 0  # the round in progress (its probe is out), 0: none
        self.arrived: set[int] = set()
        self.clean = True
        self.received = 0  # fed-back records since the last report
        self.last_feedback = 0.0  # monotonic: the last fed-back batch, or the end of the regular input
        self.rounds = 0  # rounds completed (a test and a metric look)

    def on_feedback(self, rows: int) -> None:
        self.received += rows
        self.last_feedback = time.monotonic()

    def on_input_ended(self) -> None:
        """Every regular input channel ended: from now on only the loop can bring records."""
        if self.input_ended:
            return
        self.input_ended = True
        self.last_feedback = time.monotonic()
        self._send(0, True)

    def start_round(self, n: int) -> None:
        if self.ended or n <= self.round:
            return
        self.round, self.arrived, self.clean = n, set(), True
        probe = IterationProbe(self.iteration, n)
        for w in self.writers:
            w.broadcast_event(probe)
        self._maybe_complete()

    def on_probe(self, channel: int, probe: IterationProbe, finished: Callable[[int], bool]) -> None:
        if probe.round != self.round:
            return  # a straggler of a round already given up (cannot happen while rounds run in turn)
        self.arrived.add(channel)
        self.clean = self.clean and probe.clean
        self._maybe_complete(finished)

    def _maybe_complete(self, finished: Callable[[int], bool] = lambda i: False) -> None:
        if not self.round or any(i not in self.arrived and not finished(i) for i in self.back):
            return
        n, self.round = self.round, 0
        self.rounds += 1
        self._send(n, self.clean and self.received == 0)

    def _send(self, n: int, clean: bool) -> None:
        self.report({"type": REPORT, "iteration": self.iteration, "subtask": self.subtask,
                     "heads": self.parallelism, "round": n, "clean": clean, "received": self.received})
        self.received = 0

    def wait_expired(self, now: float) -> bool:
        """``max_wait_time_ms`` passed without feedback since the regular input ended."""
        return (self.max_wait_s is not None and self.input_ended and not self.ended
                and now - self.last_feedback >= self.max_wait_s)

    def wait_deadline(self) -> float | None:
        if self.max_wait_s is None or not self.input_ended or self.ended:
            return None
        return self.last_feedback + self.max_wait_s

    def end(self, timed_out: bool = False) -> None:
        if self.ended:
            return
        self.ended = True
        if timed_out:  # the others go on without this subtask: it counts as clean in every round
            self.report({"type": REPORT, "iteration": self.iteration, "subtask": self.subtask,
                         "heads": self.parallelism, "round": -1, "clean": True, "ended": True})


class ProbeForwarder:
    """A body task's part: forward round n's probe once it came in on every loop input channel (or
    that channel ended); ``clean`` only if every input from outside the loop has ended."""

    def __init__(self, iteration: int, loop_inputs: set[int], outside_inputs: set[int], writers: list[Any]):
        self.iteration = iteration
        self.loop_inputs = loop_inputs
        self.outside_inputs = outside_inputs
        self.writers = writers
        self.round = 0
        self.arrived: set[int] = set()
        self.clean = True

    def on_probe(self, channel: int, probe: IterationProbe, finished: Callable[[int], bool]) -> None:
        if probe.round != self.round:
            self.round, self.arrived, self.clean = probe.round, set(), True
        self.arrived.add(channel)
        self.clean = self.clean and probe.clean
        self.check(finished)

    def check(self, finished: Callable[[int], bool]) -> None:
        """Also when a channel ends: an ended channel sends no probe."""
        if not self.round or any(i not in self.arrived and not finished(i) for i in self.loop_inputs):
            return
        clean = self.clean and all(finished(i) for i in self.outside_inputs)
        probe = IterationProbe(self.iteration, self.round, clean)
        self.round, self.arrived = 0, set()
        for w in self.writers:
            w.broadcast_event(probe)


class FeedbackLog:
    """A head task's logs of fed-back records, one per snapshot in progress (several with concurrent
    checkpoints): checkpoint n's log takes what comes in on each back-edge from the head's snapshot n
    until barrier n comes back on that back-edge."""

    def __init__(self, back: set[int], channels: list[Any], logged: Callable[[dict], None] | None = None):
        self.back = back  # gate indexes of the back-edges
        self.channels = channels  # the gate's input channels
        self.open: dict[int, ChannelStateCollector] = {}
        self.logged = logged  # tests only: called with {checkpoint: records logged} after each batch logged

    def start(self, collector: ChannelStateCollector) -> None:
        """The head snapshotted ``collector.checkpoint_id`` and forwarded its barrier: log from now."""
        collector.input_keys = [(ch.edge, ch.source_subtask) for ch in self.channels]
        waiting = {i for i in self.back if not self.channels[i].finished}
        if waiting:
            collector.waiting_inputs |= waiting
            self.open[collector.checkpoint_id] = collector

    def on_batch(self, index: int, batch: Any) -> None:
        """The head took a fed-back batch."""
        for collector in self.open.values():
            if index in collector.waiting_inputs:
                self._log(collector, index, (batch,))

    def on_barrier(self, index: int, barrier: CheckpointBarrier) -> bool:
        """Barrier n came back on back-edge ``index`` (it never waits in the queue): what is queued before
        it belongs to log n too. Returns whether a log completed. A barrier without a log (its checkpoint
        was aborted, or the head had ended) is dropped."""
        collector = self.open.get(barrier.checkpoint_id)
        if collector is None or index not in collector.waiting_inputs:
            return False
        queued = [item for item in self.channels[index].queue if not isinstance(item, RuntimeEvent)]
        self._log(collector, index, queued)
        collector.input_done(index)
        return self._close(collector)

    def on_end(self, index: int) -> bool:
        """Back-edge ``index`` ended: everything before its end was logged."""
        done = False
        for collector in list(self.open.values()):
            collector.input_done(index)
            done = self._close(collector) or done
        return done

    def drop(self, up_to: int) -> None:
        """Checkpoints up to ``up_to`` were given up: their logs end here."""
        for n in [n for n in self.open if n <= up_to]:
            del self.open[n]

    def _close(self, collector: ChannelStateCollector) -> bool:
        if any(i in collector.waiting_inputs for i in self.back):
            return False
        self.open.pop(collector.checkpoint_id, None)
        return True

    def _log(self, collector: ChannelStateCollector, index: int, batches: Any) -> None:
        before = collector.bytes_in
        batches = list(batches)
        collector.add_input(index, batches)
        collector.feedback_bytes += collector.bytes_in - before
        collector.feedback_records += sum(rows_of(b) for b in batches)
        if batches and self.logged is not None:
            self.logged({n: c.feedback_records for n, c in self.open.items()})


__all__ = ["FeedbackLog", "HeadLoop", "IterationHeadOperator", "ProbeForwarder"]
