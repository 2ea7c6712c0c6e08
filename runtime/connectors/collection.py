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
        return CollectionReader(self.items[k::p], batch_size_of(ctx))


class CollectionReader(SourceReader):
    def __init__(self, items: list[Any], batch_size: int):
        self.items = items
        self.offset = 0
        self.batch_size = batch_size

    def poll(self):
        if self.offset >= len(self.items):
            return END
        batch = self.items[self.offset : self.offset + self.batch_size]
        self.offset += len(batch)
        return batch
