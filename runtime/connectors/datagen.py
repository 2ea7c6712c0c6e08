"""DataGenSource: row ``i`` is ``fn(i)``; deterministic, split across subtasks, replayable."""

from __future__ import annotations

import time
from typing import Any, Callable

from .base import END, Source, SourceReader, batch_size_of, share


class DataGenSource(Source):
    """Rows ``fn(0), fn(1), ...`` (``count`` of them, or without end).

    Split ``k`` of ``p`` is the indices ``k, k + p, k + 2p, ...``; subtask ``k``
    starts with split ``k``. Its position is the next index, so a restored
    reader continues exactly where the checkpoint was taken.
    ``rows_per_second`` limits the rate of the whole source (shared evenly).
    """

    default_name = "DataGen"

    def __init__(self, fn: Callable[[int], Any], count: int | None = None, rows_per_second: float | None = None):
        if not callable(fn):
            raise TypeError(f"DataGenSource needs a function of the row index, got {fn!r}")
        if count is not None and (not isinstance(count, int) or count < 0):
            raise ValueError(f"DataGenSource count must be a non-negative int or None, got {count!r}")
        if rows_per_second is not None and rows_per_second <= 0:
            raise ValueError(f"DataGenSource rows_per_second must be > 0, got {rows_per_second!r}")
        self.fn = fn
        self.count = count
        self.rows_per_second = rows_per_second

    def is_bounded(self) -> bool:
        return self.count is not None

    def create_reader(self, ctx) -> "DataGenReader":
        k, p = share(ctx)
        return DataGenReader(self, k, p, batch_size_of(ctx))


class DataGenReader(SourceReader):
    def __init__(self, source: DataGenSource, subtask: int, parallelism: int, batch_size: int):
        self.fn = source.fn
        self.splits: list[list[int]] = [[subtask, parallelism]]  # [next index, stride]
        self.turn = 0
        self.stop = source.count
        self.batch_size = batch_size
        self.rate = source.rows_per_second / parallelism if source.rows_per_second else None
        self.emitted = 0
        self.started = time.monotonic()

    def _due(self, now: float) -> int:
        return int((now - self.started) * self.rate) - self.emitted + 1

    def poll(self):
        n = self.batch_size
        if self.rate is not None:
            n = min(n, self._due(time.monotonic()))
            if n <= 0:
                return None
        if self.stop is not None:
            self.splits = [s for s in self.splits if s[0] < self.stop]
        if not self.splits:
            return END
        self.turn = (self.turn + 1) % len(self.splits)
        split = self.splits[self.turn]
        start, stride = split
        stop = start + n * stride
        if self.stop is not None:
            stop = min(stop, self.stop)
        fn = self.fn
        rows = [fn(i) for i in range(start, stop, stride)]
        split[0] = start + len(rows) * stride
        self.emitted += len(rows)
        return rows

    def current_split(self) -> Any:
        if not self.splits:
            return None
        start, stride = self.splits[self.turn % len(self.splits)]
        return (start % stride, stride)  # the split's residue: constant while it advances

    def open_splits(self) -> list | None:
        live = [s for s in self.splits if self.stop is None or s[0] < self.stop]
        return [(s[0] % s[1], s[1]) for s in live]

    def wakeup_at(self, now: float) -> float:
        if self.rate is None:
            return now
        return self.started + self.emitted / self.rate

    def snapshot_state(self) -> list:
        return [list(s) for s in self.splits]

    def restore_state(self, splits: list) -> None:
        self.splits = [[int(s[0]), int(s[1])] for s in splits]
        self.turn = 0
