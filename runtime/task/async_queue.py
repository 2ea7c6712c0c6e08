"""The element queues of the async wait operator (Flink's Ordered/UnorderedStreamElementQueue):
pure bookkeeping of which records are in flight and which results may leave, no I/O.

Both hold at most ``capacity`` entries: records (in flight, or completed and waiting to leave) and
the watermarks between them. Ordered: an entry leaves when it and everything before it completed.
Unordered: the queue is a list of segments, records between two watermarks in one segment; a
completed record of the first segment leaves at once, a watermark leaves when every record before
it did, and a record never leaves before a watermark that preceded it (so no result becomes late
that was not late on input).
"""

from __future__ import annotations

from collections import deque
from typing import Any, Iterator


class RecordEntry:
    """One input record: ``result`` (the list of outputs) once ``done``."""

    __slots__ = ("value", "ts", "done", "result", "segment")

    def __init__(self, value: Any, ts: Any):
        self.value = value
        self.ts = ts  # the record's event timestamp (ms) or None: its results carry it
        self.done = False
        self.result: list | None = None
        self.segment: Any = None  # unordered: the segment it belongs to


class WatermarkEntry:
    __slots__ = ("timestamp",)
    done = True

    def __init__(self, timestamp: int):
        self.timestamp = timestamp


Entry = RecordEntry | WatermarkEntry


class OrderedQueue:
    def __init__(self, capacity: int):
        self.capacity = capacity
        self.entries: deque[Entry] = deque()

    def __len__(self) -> int:
        return len(self.entries)

    def has_room(self) -> bool:
        return len(self.entries) < self.capacity

    def add(self, entry: Entry) -> None:
        assert self.has_room()
        self.entries.append(entry)

    def complete(self, entry: RecordEntry, result: list) -> None:
        entry.done, entry.result = True, result

    def pop_ready(self) -> list[Entry]:
        """The entries that may leave now, in the order they must be emitted."""
        out = []
        entries = self.entries
        while entries and entries[0].done:
            out.append(entries.popleft())
        return out

    def __iter__(self) -> Iterator[Entry]:
        """Every entry, in input order (what a snapshot stores)."""
        return iter(self.entries)


class _Segment:
    __slots__ = ("pending", "ready", "entries")

    def __init__(self) -> None:
        self.entries: list[RecordEntry] = []  # in input order, for snapshots
        self.pending = 0
        self.ready: deque[RecordEntry] = deque()


class UnorderedQueue:
    def __init__(self, capacity: int):
        self.capacity = capacity
        self.segments: deque[_Segment | WatermarkEntry] = deque()
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def has_room(self) -> bool:
        return self.size < self.capacity

    def add(self, entry: Entry) -> None:
        assert self.has_room()
        self.size += 1
        if isinstance(entry, WatermarkEntry):
            self.segments.append(entry)
            return
        last = self.segments[-1] if self.segments else None
        if not isinstance(last, _Segment):
            last = _Segment()
            self.segments.append(last)
        entry.segment = last
        last.entries.append(entry)
        if entry.done:  # restored with its result
            last.ready.append(entry)
        else:
            last.pending += 1

    def complete(self, entry: RecordEntry, result: list) -> None:
        entry.done, entry.result = True, result
        entry.segment.pending -= 1
        entry.segment.ready.append(entry)

    def pop_ready(self) -> list[Entry]:
        out: list[Entry] = []
        segments = self.segments
        while segments:
            head = segments[0]
            if isinstance(head, WatermarkEntry):
                out.append(segments.popleft())
                continue
            while head.ready:
                e = head.ready.popleft()
                e.segment = None  # emitted: no longer part of a snapshot
                out.append(e)
            if head.pending:
                if len(head.entries) > 2 * self.capacity:  # a slow request holds the segment open
                    head.entries = [e for e in head.entries if e.segment is head]
                break
            segments.popleft()
        self.size -= len(out)
        return out

    def __iter__(self) -> Iterator[Entry]:
        """Every entry not yet emitted, segment by segment (records keep their input order)."""
        for seg in self.segments:
            if isinstance(seg, WatermarkEntry):
                yield seg
            else:
                yield from (e for e in seg.entries if e.segment is seg)


def create_queue(ordered: bool, capacity: int) -> OrderedQueue | UnorderedQueue:
    return OrderedQueue(capacity) if ordered else UnorderedQueue(capacity)
