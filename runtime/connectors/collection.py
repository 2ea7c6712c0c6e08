"""A bounded source over an in-memory list (``env.from_collection``)."""

from __future__ import annotations

from typing import Any

from .base import END, Source, SourceReader, batch_size_of, share


class CollectionSource(Source):
    default_name = "Collection"

    def __init__(self, items: list[Any]):
        self.items = items

    def create_reader(self, ctx) -> "CollectionReader":
        k, p = share(ctx)
        return CollectionReader(self.items, k, p, batch_size_of(ctx))


class CollectionReader(SourceReader):
    """Split ``k`` of ``p`` is ``items[k::p]``; its position is the offset into that slice."""

    def __init__(self, items: list[Any], subtask: int, parallelism: int, batch_size: int):
        self.all_items = items
        self.splits: list[list[int]] = [[subtask, parallelism, 0]]  # [start, stride, offset]
        self.batch_size = batch_size

    def poll(self):
        while self.splits:
            start, stride, offset = self.splits[0]
            begin = start + offset * stride
            batch = self.all_items[begin : begin + self.batch_size * stride : stride]
            if batch:
                self.splits[0][2] += len(batch)
                return batch
            self.splits.pop(0)
        return END

    def snapshot_state(self) -> list:
        return [list(s) for s in self.splits]

    def restore_state(self, splits: list) -> None:
        self.splits = [[int(a), int(b), int(c)] for a, b, c in splits]
