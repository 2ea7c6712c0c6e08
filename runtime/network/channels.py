"""Channels between subtasks, with credit-based flow control.

An output channel batches records until ``batch_size`` records or the buffer
timeout, then delivers the batch when the receiver has granted a credit. A
receiver grants ``buffers_per_channel`` credits up front and one more each time
it consumes a batch, so every channel holds a bounded number of batches however
slow its consumer: a slow sink slows the sources instead of filling memory.
Because credit is per channel, one blocked channel (barrier alignment) stops
only its own sender while the other channels on the same connection flow.
"""

from __future__ import annotations

import time
from collections import deque
from typing import TYPE_CHECKING, Any, Callable

from ..batch import Batch, Stamped, concat, concat_timestamps, num_rows, same_form
from .events import CheckpointBarrier, EndOfPartition, RuntimeEvent

if TYPE_CHECKING:
    from .spill import FeedbackBuffer


class OutputChannel:
    def __init__(self, deliver: Callable[[Any, bool], None], batch_size: int, buffer_timeout_ms: int, max_pending: int = 1):
        self._deliver = deliver
        self.batch_size = max(1, batch_size)
        self.buffer_timeout = buffer_timeout_ms / 1000.0
        self.max_pending = max_pending
        self.credits = 0
        self._buf: list[Batch] = []
        self._buf_ts: list = []  # the event timestamps of each buffered batch, or None
        self._buf_rows = 0
        self._buf_since = 0.0
        self._pending: deque[tuple[Any, bool]] = deque()
        self.closed = False  # EndOfPartition sent
        self.batches_sent = 0

    def emit(self, batch: Batch, ts: Any = None) -> None:
        n = num_rows(batch)
        if n == 0:
            return
        if self._buf and not same_form(self._buf[0], batch):
            self._seal()
        if not self._buf:
            self._buf_since = time.monotonic()
        self._buf.append(batch)
        self._buf_ts.append(ts)
        self._buf_rows += n
        if self._buf_rows >= self.batch_size or self.buffer_timeout == 0:
            self._seal()

    def send_event(self, event: RuntimeEvent) -> None:
        self._seal()
        self._pending.append((event, False))
        self._drain()

    def flush(self) -> None:
        self._seal()

    def flush_if_due(self, now: float) -> float | None:
        """Seal a partly filled batch whose timeout passed; return the next deadline."""
        if not self._buf:
            return None
        deadline = self._buf_since + self.buffer_timeout
        if now >= deadline:
            self._seal()
            return None
        return deadline

    def overtake(self, barrier: CheckpointBarrier, replacing: CheckpointBarrier | None = None) -> list[Any]:
        """Unaligned checkpoint: put ``barrier`` at the front of the queue (instead of ``replacing``, an
        aligned barrier of the same checkpoint still waiting in it) and return the batches it overtook.
        They still go out, after the barrier; the caller persists them as this channel's output state
        (the receiver will not count them in its snapshot, since they arrive after the barrier)."""
        self._seal()  # records emitted before the snapshot belong before the barrier
        overtaken = []
        kept: deque[tuple[Any, bool]] = deque()
        for item, is_data in self._pending:
            if is_data:
                overtaken.append(item)
                kept.append((item, is_data))
            elif item is not barrier and item is not replacing:
                kept.append((item, is_data))
        kept.appendleft((barrier, False))
        self._pending = kept
        self._drain()
        return overtaken

    def holds(self, event: RuntimeEvent) -> bool:
        """``event`` still waits in the queue (behind batches without credit)."""
        return any(item is event for item, _ in self._pending)

    def resend(self, batch: Any) -> None:
        """Restore: send a batch of this channel's recovered output state, as it was cut."""
        self._seal()
        self._pending.append((batch, True))
        self._drain()

    def add_credits(self, n: int) -> None:
        self.credits += n
        self._drain()

    def is_available(self) -> bool:
        """True while the sender may produce more: few batches wait for credit."""
        return len(self._pending) <= self.max_pending

    def is_idle(self) -> bool:
        return not self._buf and not self._pending

    def _seal(self) -> None:
        if not self._buf:
            return
        batch: Any = concat(self._buf)
        ts = concat_timestamps(self._buf, self._buf_ts)
        if ts is not None:
            batch = Stamped(batch, ts)
        self._buf = []
        self._buf_ts = []
        self._buf_rows = 0
        self._pending.append((batch, True))
        self._drain()

    def _drain(self) -> None:
        pending = self._pending
        while pending:
            item, is_data = pending[0]
            if is_data:
                if self.credits <= 0:
                    return
                self.credits -= 1
                self.batches_sent += 1
            pending.popleft()
            self._deliver(item, is_data)


class InputChannel:
    """Batches and events from one upstream subtask on one edge, in order."""

    def __init__(self, edge: int, source_subtask: int, input_index: int):
        self.edge = edge
        self.source_subtask = source_subtask
        self.input_index = input_index
        self.queue: deque[Any] = deque()
        self.recovered = 0  # batches at the queue's head restored from channel state: they used no credit
        self.finished = False  # EndOfPartition consumed
        self.return_credit: Callable[[int], None] = lambda n: None
        # Set by the gate when barriers may overtake: called with (barrier, number of items queued
        # before it) instead of queueing an unaligned barrier behind the data.
        self.on_priority: Callable[[CheckpointBarrier, int], None] | None = None
        # A loop's back-edge (graph/iterations.py): its credit goes back as a batch arrives, not as it is
        # consumed, so the tails never wait for the head, which may itself wait for the body, which
        # waits for the tails (the loop's deadlock under back pressure); the backlog queues here.
        self.feedback = False
        self.owed = 0  # credits of arrived feedback batches not yet returned (returned by the task's step)
        self.discarding = False  # the loop's head has ended: later feedback is dropped (max_wait_time_ms)
        # A back-edge's barriers go to the head's feedback log as they arrive, never into the queue: what is
        # queued before one is logged then, so a snapshot never waits for the head to work off its backlog.
        self.on_feedback_barrier: Callable[[CheckpointBarrier], None] | None = None
        # A back-edge's memory budget, shared by the head task's back-edges: beyond it batches queue on
        # local disk (network/spill.py).
        self.spill: FeedbackBuffer | None = None

    def push(self, item: Any) -> None:
        if self.feedback and type(item) is CheckpointBarrier:
            if self.on_feedback_barrier is not None and not self.discarding:
                self.on_feedback_barrier(item)
            return
        if self.on_priority is not None and type(item) is CheckpointBarrier and item.unaligned:
            self.on_priority(item, len(self.queue))
            return
        if self.feedback:
            if not isinstance(item, RuntimeEvent):
                self.owed += 1  # not returned here: a local channel would call back into its sender's drain
                if self.discarding:
                    return
                if self.spill is not None:
                    item = self.spill.admit(item)
            elif self.discarding:
                if type(item) is EndOfPartition:
                    self.finished = True
                return
        self.queue.append(item)

    def grant_owed(self) -> None:
        if self.owed:
            n, self.owed = self.owed, 0
            self.return_credit(n)

    def poll(self) -> Any:
        item = self.queue.popleft()
        if not isinstance(item, RuntimeEvent):
            if self.recovered:
                self.recovered -= 1
            elif not self.feedback:  # a back-edge returned its credit on arrival
                self.return_credit(1)
            if self.spill is not None:
                item = self.spill.take(item)
        return item

    def discard_queued(self) -> None:
        """Drop what is queued unread (a loop's head ended)."""
        if self.spill is not None:
            self.spill.dropped(self.queue)
        self.queue.clear()

    def prepend_recovered(self, batches: list[Any]) -> None:
        """Restored in-flight data of an unaligned checkpoint: it preceded everything the channel will
        receive, so it goes first, and the task processes it in its loop like any input (checkpoints go
        on meanwhile; a barrier that overtakes it records it again as channel state). Only batches
        count as recovered: an event (a watermark among them) took no credit, and poll returns none for it."""
        if self.spill is not None:  # a loop's logged feedback, as much of it in memory as the budget allows
            batches = [b if isinstance(b, RuntimeEvent) else self.spill.admit(b) for b in batches]
        self.queue.extendleft(reversed(batches))
        self.recovered += sum(1 for b in batches if not isinstance(b, RuntimeEvent))

    def __repr__(self) -> str:
        return f"InputChannel(edge={self.edge}, from={self.source_subtask}, queued={len(self.queue)})"


class InputGate:
    """All input channels of one task; any single channel can be blocked.

    ``poll`` takes the next item round-robin from the channels that are not
    blocked and have data, so a blocked channel (barrier alignment) never
    stalls the others.
    """

    def __init__(self, channels: list[InputChannel]):
        self.channels = channels
        self._blocked: set[int] = set()
        self._next = 0
        # Restored at another parallelism: the recovered in-flight data (at the head of some channels) is
        # taken before anything new on any channel, so a key's old records come before its new ones even
        # when its new records arrive on another channel than its recovered ones (see channel_rescale).
        self.recovering = False
        # Unaligned barriers that overtook queued data: (channel index, barrier, items before it).
        self.priority: deque[tuple[int, CheckpointBarrier, int]] = deque()

    def enable_priority_events(self) -> None:
        """Let unaligned barriers overtake the data queued in every channel (unaligned checkpoints)."""
        for i, ch in enumerate(self.channels):
            ch.on_priority = lambda barrier, before, i=i: self.priority.append((i, barrier, before))

    def poll(self) -> tuple[int, Any] | None:
        channels = self.channels
        n = len(channels)
        start = self._next
        if self.recovering:
            for k in range(n):
                i = (start + k) % n
                ch = channels[i]
                if ch.recovered and i not in self._blocked:
                    self._next = i + 1
                    return i, ch.poll()
            if any(ch.recovered for ch in channels):
                return None  # recovered data only behind a block: never happens (nothing precedes it)
            self.recovering = False
        for k in range(n):
            i = (start + k) % n
            ch = channels[i]
            if ch.queue and i not in self._blocked:
                self._next = i + 1
                return i, ch.poll()
        return None

    def block(self, index: int) -> None:
        self._blocked.add(index)

    def unblock(self, index: int) -> None:
        self._blocked.discard(index)

    def unblock_all(self) -> None:
        self._blocked.clear()

    def is_blocked(self, index: int) -> bool:
        return index in self._blocked

    def all_finished(self) -> bool:
        return all(ch.finished for ch in self.channels)

    def has_available(self) -> bool:
        if self.recovering and any(ch.recovered for ch in self.channels):
            return any(ch.recovered and i not in self._blocked for i, ch in enumerate(self.channels))
        return any(ch.queue and i not in self._blocked for i, ch in enumerate(self.channels))


def local_pair(edge: int, subtask: int, input_index: int, batch_size: int, buffer_timeout_ms: int, credits: int) -> tuple[OutputChannel, InputChannel]:
    """An in-process channel (same slot): objects are handed over, not serialised."""
    inp = InputChannel(edge, subtask, input_index)
    out = OutputChannel(lambda item, is_data: inp.push(item), batch_size, buffer_timeout_ms)
    inp.return_credit = out.add_credits
    out.add_credits(credits)
    return out, inp
