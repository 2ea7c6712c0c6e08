"""How many reconcile passes run at once, and which goes next.

Every StreamJob has its own loop, so a burst (500 resources edited at once, an operator starting
on a full cluster) would otherwise put 500 passes on one event loop together: each pass then
takes as long as all of them, and a user's edit waits behind every periodic look. Like
controller-runtime's MaxConcurrentReconciles, a fixed number of passes run at a time; the rest
wait in line, a resource that changed (or has something in progress) ahead of a periodic look,
each class in arrival order. A pass measured inside its slot is the operator's own latency;
the wait for a slot is measured apart (the queue), as controller-runtime does.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
from typing import AsyncIterator

URGENT = 0  # the resource changed, or a step is in progress
ROUTINE = 1  # a periodic look at a job with nothing in progress


class ReconcileSlots:
    def __init__(self, size: int):
        if size < 1:
            raise ValueError(f"reconcile slots must be at least 1, not {size}")
        self.size = size
        self._free = size
        self._waiting: list[tuple[int, int, asyncio.Future]] = []  # heap of (priority, arrival, future)
        self._arrivals = itertools.count()

    @property
    def waiting(self) -> int:
        return sum(1 for _, _, f in self._waiting if not f.done())

    @contextlib.asynccontextmanager
    async def slot(self, priority: int = ROUTINE) -> AsyncIterator[None]:
        if self._free > 0 and not self.waiting:
            self._free -= 1
        else:
            handed = asyncio.get_running_loop().create_future()
            heapq.heappush(self._waiting, (priority, next(self._arrivals), handed))
            try:
                await handed
            except asyncio.CancelledError:
                # Cancelled after the slot was handed over but before running: pass it on.
                if handed.done() and not handed.cancelled():
                    self._release()
                raise
        try:
            yield
        finally:
            self._release()

    def _release(self) -> None:
        while self._waiting:
            _, _, handed = heapq.heappop(self._waiting)
            if not handed.done():  # a cancelled waiter stays in the heap until it comes up
                handed.set_result(None)
                return
        self._free += 1
