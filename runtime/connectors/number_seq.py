"""NumberSequenceSource: the numbers ``start .. end`` (both included), as PyFlink's
(``pyflink.datastream.connectors.number_seq``). Bounded, replayable."""

from __future__ import annotations

from typing import Any

from ..api.types import Types
from .base import END, Source, SourceReader, batch_size_of, share


class NumberSequenceSource(Source):
    """As Flink's: the range is cut into one contiguous split per subtask (sizes differing by at
    most one), each produced in order; a split's position is its next number, so a restored reader
    (at any parallelism: splits move whole) continues exactly there. The records are ints
    (Flink's longs: the stream's type is ``Types.LONG()``)."""

    default_name = "NumberSequenceSource"
    produced_type = Types.LONG()

    def __init__(self, start: int, end: int):
        for what, v in (("start", start), ("end", end)):
            if isinstance(v, bool) or not isinstance(v, int):
                raise TypeError(f"NumberSequenceSource needs int bounds, got {what}={v!r}")
        if start > end:
            raise ValueError(f"NumberSequenceSource: start ({start}) must not be greater than end ({end})")
        self.start, self.end = start, end

    def is_bounded(self) -> bool:
        return True

    def create_reader(self, ctx: Any) -> "NumberSequenceReader":
        k, p = share(ctx)
        return NumberSequenceReader(self.splits(p)[k], batch_size_of(ctx))

    def splits(self, parallelism: int) -> list[list[int]]:
        """[next, last] of each of ``parallelism`` contiguous splits (Flink's splitNumberRange)."""
        total = self.end - self.start + 1
        out, first = [], self.start
        for i in range(parallelism):
            size = total // parallelism + (1 if i < total % parallelism else 0)
            out.append([first, first + size - 1])
            first += size
        return out

    def __repr__(self) -> str:
        return f"NumberSequenceSource({self.start}, {self.end})"


class NumberSequenceReader(SourceReader):
    def __init__(self, split: list[int], batch_size: int):
        self.splits = [list(split)] if split[0] <= split[1] else []
        self.batch_size = batch_size

    def poll(self) -> Any:
        while self.splits and self.splits[0][0] > self.splits[0][1]:
            self.splits.pop(0)
        if not self.splits:
            return END
        split = self.splits[0]
        stop = min(split[0] + self.batch_size, split[1] + 1)
        batch = list(range(split[0], stop))
        split[0] = stop
        return batch

    def current_split(self) -> Any:
        return None if not self.splits else self.splits[0][1]  # the split's last number names it

    def open_splits(self) -> list | None:
        return [s[1] for s in self.splits if s[0] <= s[1]]

    def snapshot_state(self) -> list:
        return [list(s) for s in self.splits]

    def restore_state(self, splits: list) -> None:
        self.splits = [[int(a), int(b)] for a, b in splits]


__all__ = ["NumberSequenceSource"]
