"""A loop's back-edge queue, bounded in memory: fed-back batches beyond a budget wait on local disk.

A back-edge returns its credit as a batch arrives (``InputChannel.feedback``), so a loop never
deadlocks under back pressure: the backlog queues at the head instead. A body that emits more than it
takes for a while (each record fed back tenfold for a few rounds) would let that queue grow without
bound. The head task's back-edges share one ``FeedbackBuffer``: while the batches they hold in memory
stay within ``iteration.feedback-buffer.memory`` they queue as they are; beyond it a batch is encoded
(the wire's frames: Arrow IPC, or pickle for rows) and appended to a spill file in ``io.tmp.dirs``, and
the queue holds a ``Spilled`` reference in its place, so the channel's order is kept whatever is where.
The head reads a spilled batch back when it takes it.

A spill file is an unnamed temporary file (unlinked as it is created): nothing is left on disk when the
task dies, however it dies, and its space goes back when the last reference to it goes (the queue's and
those of a checkpoint's feedback log still being written: ``ChannelStateCollector`` keeps a ``Spilled``
as it is and reads its bytes in the writer thread). Files are rotated every ``SEGMENT_BYTES`` so that a
long backlog frees its disk as it is worked off.
"""

from __future__ import annotations

import os
import pickle
import tempfile
from typing import Any, NamedTuple

import pyarrow as pa

from ..batch import Stamped, num_rows
from .events import RuntimeEvent
from .wire import decode, encode_batch

SEGMENT_BYTES = 64 << 20
_SAMPLE = 8  # records pickled to estimate a row batch's size


class SpillSegment:
    """One spill file, appended to by the task thread, read by it and by checkpoint writer threads
    (``os.pread`` at an offset: no shared file position). Closed, and its space freed, when the last
    ``Spilled`` referring to it is gone."""

    def __init__(self, directory: str):
        self.file = tempfile.TemporaryFile(dir=directory, prefix="streamjob-feedback-")
        self.size = 0

    def append(self, payload: Any) -> int:
        offset = self.size
        view = memoryview(payload)
        while view:
            n = os.pwrite(self.file.fileno(), view, self.size)
            self.size += n
            view = view[n:]
        return offset


class Spilled(NamedTuple):
    """A batch in a spill file, in its place in the queue."""

    segment: SpillSegment
    offset: int
    length: int
    kind: int  # the wire's frame kind
    rows: int

    def payload(self) -> bytes:
        data = os.pread(self.segment.file.fileno(), self.length, self.offset)
        if len(data) != self.length:
            raise OSError(f"spill file {self.segment.file.name}: {len(data)} bytes at {self.offset}, "
                          f"expected {self.length}")
        return data

    def load(self) -> Any:
        return decode(self.kind, self.payload())


def estimated_bytes(batch: Any) -> int:
    """What a batch holds in memory: exact for Arrow, estimated for rows (a sample pickled)."""
    if isinstance(batch, Stamped):
        return estimated_bytes(batch.batch) + batch.ts.nbytes
    if isinstance(batch, pa.RecordBatch):
        return batch.nbytes
    n = len(batch)
    if n == 0:
        return 0
    sample = batch[:_SAMPLE]
    return len(pickle.dumps(sample, protocol=5)) * n // len(sample)


def rows_of(item: Any) -> int:
    if type(item) is Spilled:
        return item.rows
    return num_rows(item.batch if type(item) is Stamped else item)


class FeedbackBuffer:
    """The memory budget of a head task's back-edges and their spill files."""

    def __init__(self, budget: int, directory: str | None = None):
        self.budget = budget
        self.directory = directory or tempfile.gettempdir()
        self.in_memory = 0  # estimated bytes of the queued batches held as they are
        self.on_disk = 0  # bytes of queued batches in spill files
        self.peak_in_memory = 0
        self.spilled_batches = 0  # ever spilled
        self.spilled_bytes = 0  # ever spilled
        self._segment: SpillSegment | None = None
        self.counter: Any = None  # the task's numFeedbackBytesSpilled (api/metrics.Counter), if any

    def admit(self, batch: Any) -> Any:
        """What to queue for ``batch``: itself, or a ``Spilled`` once the budget is used up. The first
        batch is always kept, so that one larger than the budget still goes through memory once."""
        size = estimated_bytes(batch)
        if self.in_memory and self.in_memory + size > self.budget:
            return self._spill(batch)
        self.in_memory += size
        self.peak_in_memory = max(self.peak_in_memory, self.in_memory)
        return batch

    def take(self, item: Any) -> Any:
        """The batch for a queued item the head takes (read back if spilled)."""
        if type(item) is Spilled:
            self.on_disk -= item.length
            return item.load()
        self.in_memory -= estimated_bytes(item)
        return item

    def dropped(self, items: Any) -> None:
        """Queued items dropped unread (the head ended)."""
        for item in items:
            if type(item) is Spilled:
                self.on_disk -= item.length
            elif not isinstance(item, RuntimeEvent):
                self.in_memory -= estimated_bytes(item)

    def _spill(self, batch: Any) -> Spilled:
        kind, payload = encode_batch(batch)
        length = payload.size if isinstance(payload, pa.Buffer) else len(payload)
        segment = self._segment
        if segment is None or segment.size + length > SEGMENT_BYTES:
            # The previous file stays open while anything refers to it; its space goes back after that.
            segment = self._segment = SpillSegment(self.directory)
        offset = segment.append(payload)
        self.on_disk += length
        self.spilled_batches += 1
        self.spilled_bytes += length
        if self.counter is not None:
            self.counter.inc(length)
        return Spilled(segment, offset, length, kind, rows_of(batch))


__all__ = ["FeedbackBuffer", "SEGMENT_BYTES", "Spilled", "SpillSegment", "estimated_bytes", "rows_of"]
