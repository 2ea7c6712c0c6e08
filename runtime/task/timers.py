"""Timers of one keyed operator subtask: event time and processing time, as keyed state.

Each timer is (key, timestamp, namespace) in a time domain; the namespace is
None for a process function's timers and the window for a window operator's.
The timers of a key live in the operator's keyed state backend (one table per
domain: key -> tuple of (timestamp, namespace)), so they are part of every checkpoint and savepoint, move with
their key group on rescale, and work the same on the heap and RocksDB
backends. A min-heap over (timestamp, key) finds the due ones; it is an index
only, rebuilt from the tables on restore, and entries a deleted timer left
behind are skipped when they surface.

A timer fires once: it is removed from state before its callback runs, so a
checkpoint taken after the firing never holds it, and one taken before holds
it together with the state it was set against; a restore then fires it again
with that state, which is exactly once for the output.
"""

from __future__ import annotations

import heapq
import itertools
import time
from enum import Enum
from typing import Any, Callable, Iterator


class TimeDomain(Enum):
    EVENT_TIME = 0
    PROCESSING_TIME = 1


_TABLES = {TimeDomain.EVENT_TIME: "_timers-event-time", TimeDomain.PROCESSING_TIME: "_timers-processing-time"}


def processing_time_ms() -> int:
    return int(time.time() * 1000)


class InternalTimerService:
    def __init__(self, backend: Any):
        self.backend = backend
        self.tables = {d: backend.raw_table(name) for d, name in _TABLES.items()}
        self.heaps: dict[TimeDomain, list] = {d: [] for d in TimeDomain}
        self._seq = itertools.count()

    def restore(self) -> None:
        """Rebuild the index from the tables (after the backend restored its key groups)."""
        for domain, table in self.tables.items():
            heap = self.heaps[domain] = []
            for key, timers in table.items():
                for ts, ns in timers:
                    heap.append((ts, next(self._seq), key, ns))
            heapq.heapify(heap)

    def register(self, domain: TimeDomain, key: Any, timestamp: int, namespace: Any = None) -> None:
        table = self.tables[domain]
        timers = table.get(key, ())
        timer = (timestamp, namespace)
        if timer in timers:
            return
        table.put(key, timers + (timer,))
        heapq.heappush(self.heaps[domain], (timestamp, next(self._seq), key, namespace))

    def delete(self, domain: TimeDomain, key: Any, timestamp: int, namespace: Any = None) -> None:
        self._remove(self.tables[domain], key, (timestamp, namespace))

    @staticmethod
    def _remove(table: Any, key: Any, timer: tuple) -> bool:
        timers = table.get(key, ())
        if timer not in timers:
            return False
        rest = tuple(t for t in timers if t != timer)
        if rest:
            table.put(key, rest)
        else:
            table.remove(key)
        return True

    def next_timestamp(self, domain: TimeDomain) -> int | None:
        """The earliest timer of ``domain`` (it may be a deleted one: firing skips those)."""
        heap = self.heaps[domain]
        return heap[0][0] if heap else None

    def pop_due(self, domain: TimeDomain, up_to: int) -> Iterator[tuple[Any, int, Any]]:
        """(key, timestamp, namespace) of every timer at or before ``up_to``, earliest first, each
        removed from state before it is yielded; timers registered meanwhile for ``<= up_to`` come out too."""
        heap, table = self.heaps[domain], self.tables[domain]
        while heap and heap[0][0] <= up_to:
            ts, _, key, ns = heapq.heappop(heap)
            if self._remove(table, key, (ts, ns)):  # else deleted, or an index entry of one that fired
                yield key, ts, ns


class TimerService:
    """What a process function sees as ``ctx.timer_service()`` (PyFlink's names)."""

    __slots__ = ("_timers", "_operator", "_key")

    def __init__(self, timers: InternalTimerService | None, operator: Any, key: Callable[[], Any]):
        self._timers = timers
        self._operator = operator
        self._key = key

    def current_processing_time(self) -> int:
        return processing_time_ms()

    def current_watermark(self) -> int:
        return self._operator.current_watermark

    def _service(self, call: str) -> InternalTimerService:
        if self._timers is None:
            raise RuntimeError(f"{call}: setting timers is only supported on a keyed stream "
                               "(stream.key_by(...).process(KeyedProcessFunction))")
        return self._timers

    def register_event_time_timer(self, timestamp: int) -> None:
        self._service("register_event_time_timer").register(TimeDomain.EVENT_TIME, self._key(), int(timestamp))

    def register_processing_time_timer(self, timestamp: int) -> None:
        # the task asks its operators for their next processing-time timer every step
        self._service("register_processing_time_timer").register(TimeDomain.PROCESSING_TIME, self._key(), int(timestamp))

    def delete_event_time_timer(self, timestamp: int) -> None:
        self._service("delete_event_time_timer").delete(TimeDomain.EVENT_TIME, self._key(), int(timestamp))

    def delete_processing_time_timer(self, timestamp: int) -> None:
        self._service("delete_processing_time_timer").delete(TimeDomain.PROCESSING_TIME, self._key(), int(timestamp))


__all__ = ["InternalTimerService", "TimeDomain", "TimerService", "processing_time_ms"]
