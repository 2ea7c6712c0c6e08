"""One state of one state file, decoded into rows: pure, no I/O and no Spark.

Snapshots hold chunks per (state, key group) in the heap backend's format (``runtime/state/
snapshot.py``); RocksDB's native handles are read into the same format (``canonical_chunks``).
A chunk becomes rows by the state's kind, as Flink's State Processor API shapes them:

- value, reducing, aggregating (and the built-in aggregations' ``accumulators``): ``(key, value)``,
  one row per key;
- list: ``(key, value)``, one row per element;
- map: ``(key, map_key, value)``, one row per entry.

A state with a TTL (kind ``...+ttl``) stores ``(value, last-access ms)`` pairs: rows carry the value
and, last, that timestamp; values expired at ``drop=(ttl ms, now ms)`` are left out (the caller knows
the TTL from a descriptor: the savepoint does not record it).

Columnar tables (int64 keys, int or float values: ``snapshot.py``) are not turned into Python
objects at all: they come out as ``Columns`` (two numpy arrays), which become Arrow arrays without a
copy. That is the fast path of a ValueState of counts or sums.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np

from streamjob.runtime.state import ttl
from streamjob.runtime.state.snapshot import SnapshotFormatError, _load_keyed, _read_columnar, check_magic

SINGLE = ("value", "reducing", "aggregating", "accumulators")
KINDS = SINGLE + ("list", "map")


@dataclass
class Columns:
    """Rows of a columnar table: keys and values, equal length."""

    keys: np.ndarray
    values: np.ndarray


@dataclass
class ColumnLists:
    """Rows of a pickled chunk, column by column (one Python list per column, equal lengths): built
    straight from the chunk's dicts (``list(d.keys())`` runs in C), never as a tuple per row."""

    columns: list[list]

    def __len__(self) -> int:
        return len(self.columns[0]) if self.columns else 0

    def rows(self) -> list[tuple]:
        return list(zip(*self.columns))


def shape(kind: str) -> str:
    """``single``, ``list`` or ``map``: the rows a state of this kind gives."""
    base = ttl.base_kind(kind)
    if base in SINGLE:
        return "single"
    if base in ("list", "map"):
        return base
    raise SnapshotFormatError(f"unknown state kind {kind!r}")


def state_parts(data: Any, index: dict, name: str, key_groups: range, where: str,
                drop: tuple[int, int] | None = None) -> Iterator[Columns | ColumnLists]:
    """The rows of state ``name`` in a state file's bytes (``data``, with its handle's ``index``),
    key groups ``key_groups`` only: ``Columns`` for a columnar table, else ``ColumnLists`` (one per
    key group). Chunk checksums are checked as a restore checks them."""
    table = (index.get("keyed") or {}).get(name)
    if table is None:
        return
    check_magic(data, where)
    kind = str(table.get("kind"))
    where = f"{where} (state {name!r})"
    if "columnar" in table:
        for keys, values in _read_columnar(data, table["columnar"], table.get("groups") or {}, key_groups, where):
            yield Columns(keys, values)
        return
    for kg, span in (table.get("groups") or {}).items():
        if int(kg) in key_groups:
            chunk = _load_keyed(data, span, kind, f"{where}, key group {kg}")
            yield chunk_columns(kind, chunk, drop)


def chunk_columns(kind: str, chunk: Any, drop: tuple[int, int] | None = None) -> ColumnLists:
    """One chunk (key -> entry, or an accumulator table's (keys, values)) as columns: key, [map key,]
    value[, TTL timestamp]."""
    base = ttl.base_kind(kind)
    timed = ttl.is_ttl_kind(kind)
    if base == "accumulators":
        keys, values = chunk
        return ColumnLists([list(keys), np.asarray(values).tolist()])
    if timed and drop is not None:
        chunk = ttl.drop_expired(kind, chunk, *drop)
    if base == "list":
        rows = [(k, *(e if timed else (e,))) for k, elements in chunk.items() for e in elements]
        return _transposed(rows, 3 if timed else 2)
    if base == "map":
        rows = [(k, uk, *(v if timed else (v,))) for k, entries in chunk.items() for uk, v in entries.items()]
        return _transposed(rows, 4 if timed else 3)
    if base in SINGLE:
        if timed:
            return _transposed([(k, v, t) for k, (v, t) in chunk.items()], 3)
        return ColumnLists([list(chunk.keys()), list(chunk.values())])  # the common case: no Python per key
    raise SnapshotFormatError(f"unknown state kind {kind!r}")


def _transposed(rows: list[tuple], width: int) -> ColumnLists:
    return ColumnLists([list(c) for c in zip(*rows)] if rows else [[] for _ in range(width)])


def table_kind(index: dict, name: str) -> str | None:
    """The kind a state file records for state ``name`` (heap format or native RocksDB); None: absent."""
    table = (index.get("keyed") or {}).get(name)
    if table is not None:
        return str(table.get("kind"))
    native = index.get("rocksdb") or {}
    kind = (native.get("states") or {}).get(name)
    return None if kind is None else str(kind)


def columnar_dtypes(index: dict, name: str) -> tuple[str, str] | None:
    """(key dtype, value dtype) of a columnar table, None when the table is not columnar."""
    table = (index.get("keyed") or {}).get(name) or {}
    col = table.get("columnar")
    if col is None:
        return None
    return "<i8", str(col["dtype"])
