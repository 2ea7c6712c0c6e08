"""Batches: the unit records travel in.

A batch is either a ``pyarrow.RecordBatch`` (the columnar fast path, for dict
rows) or a Python ``list`` of records (any picklable values). Operators that
need no Python per record work on the Arrow form; per-record functions see
dicts (``to_rows``).
"""

from __future__ import annotations

from typing import Any, NamedTuple, Union

import numpy as np
import pyarrow as pa

Batch = Union[pa.RecordBatch, list]

# Flink's Long.MIN_VALUE: the timestamp of a record that has none (in a batch where others have one).
NO_TIMESTAMP = int(np.iinfo(np.int64).min)


class Stamped(NamedTuple):
    """A batch whose records carry event-time timestamps (ms since the epoch, one int64 per record),
    as it travels on a channel. Batches without timestamps travel bare: no cost when event time is unused."""

    batch: Batch
    ts: np.ndarray

_FLAT = (
    pa.types.is_integer,
    pa.types.is_floating,
    pa.types.is_string,
    pa.types.is_large_string,
    pa.types.is_boolean,
    pa.types.is_binary,
    pa.types.is_large_binary,
    pa.types.is_timestamp,
    pa.types.is_date,
    pa.types.is_time,
    pa.types.is_duration,
    pa.types.is_decimal,
    pa.types.is_null,
)


def num_rows(batch: Batch) -> int:
    return batch.num_rows if isinstance(batch, pa.RecordBatch) else len(batch)


def is_columnar(batch: Batch) -> bool:
    return isinstance(batch, pa.RecordBatch)


def to_rows(batch: Batch) -> list:
    """Records as Python values: Arrow rows become dicts (what ``to_pylist`` gives)."""
    if not isinstance(batch, pa.RecordBatch):
        return batch
    names = tuple(batch.schema.names)
    make = _row_makers.get(names, False)
    if make is False:  # a schema not seen yet
        if len(_row_makers) >= _MAX_ROW_MAKERS:  # records of ever new fields: do not keep them all
            _row_makers.clear()
        # None: no dict display for these names (none, too many, or one twice: to_pylist's last wins)
        usable = 0 < len(names) <= _MAX_ROW_FIELDS and len(set(names)) == len(names)
        make = _row_makers[names] = _row_maker(names) if usable else None
    if make is None:
        return batch.to_pylist()
    return make(*[column.to_pylist() for column in batch.columns])


# Dicts from whole columns: each column converted by Arrow at once, then one dict display per row
# with the names as constants. pyarrow's to_pylist indexes every column at every row: ~20% slower.
_MAX_ROW_FIELDS = 64
_MAX_ROW_MAKERS = 256
_row_makers: dict[tuple, Any] = {}  # names -> their row maker, or None


def _row_maker(names: tuple) -> Any:
    n = len(names)
    columns = ", ".join(f"c{i}" for i in range(n))
    values = ", ".join(f"v{i}" for i in range(n)) + ("," if n == 1 else "")
    # The names as literals: the display builds each dict from one constant tuple of keys
    # (BUILD_CONST_KEY_MAP), ~6% faster than loading each name.
    fields = ", ".join(f"{name!r}: v{i}" for i, name in enumerate(names))
    namespace: dict[str, Any] = {}
    exec(f"def make({columns}):\n    return [{{{fields}}} for {values} in zip({columns})]\n", namespace)
    return namespace["make"]


# The Arrow type pyarrow infers for a list of Python values all of one of these classes (None among them).
_INFERRED = {int: pa.int64(), float: pa.float64(), str: pa.string(), bool: pa.bool_(), bytes: pa.binary()}


def to_array(values: list, arrow_type: pa.DataType | None = None) -> pa.Array:
    """``pa.array(values, arrow_type)``. Without a type: when every value is a Python int, float, str,
    bool or bytes (of one class, or None), named here as pyarrow would infer it; pyarrow's own
    inference loads pandas the first time it runs (arrow_pandas), in jobs that never use it."""
    if arrow_type is None:
        classes = set(map(type, values))
        classes.discard(type(None))
        if len(classes) == 1:
            known = _INFERRED.get(classes.pop())
            if known is not None:
                try:
                    return pa.array(values, type=known)
                except (pa.ArrowInvalid, OverflowError):
                    pass  # an int beyond int64: as pyarrow decides (its error, or another type)
    return pa.array(values, type=arrow_type)


_NUMPY_OF = {pa.int8(): np.dtype(np.int8), pa.int16(): np.dtype(np.int16), pa.int32(): np.dtype(np.int32),
             pa.int64(): np.dtype(np.int64), pa.uint8(): np.dtype(np.uint8), pa.uint16(): np.dtype(np.uint16),
             pa.uint32(): np.dtype(np.uint32), pa.uint64(): np.dtype(np.uint64),
             pa.float32(): np.dtype(np.float32), pa.float64(): np.dtype(np.float64)}


def numbers(col: pa.Array) -> np.ndarray:
    """``col.to_numpy(zero_copy_only=False)``; a column of fixed-width numbers without nulls is viewed in
    place (read-only, as pyarrow's zero-copy view), without pyarrow's conversion, which loads pandas the
    first time it runs (arrow_pandas)."""
    dtype = _NUMPY_OF.get(col.type)
    if dtype is None or col.null_count or not isinstance(col, pa.Array):  # a ChunkedArray: pyarrow's way
        return col.to_numpy(zero_copy_only=False)
    view = np.frombuffer(col.buffers()[1], dtype=dtype, count=len(col), offset=col.offset * dtype.itemsize)
    view.flags.writeable = False  # Arrow's buffers are immutable (and shared)
    return view


def _is_flat(schema: pa.Schema) -> bool:
    return all(any(check(f.type) for check in _FLAT) for f in schema)


def try_columnar(rows: list) -> pa.RecordBatch | None:
    """The Arrow form of a list of dict rows, or None when it would not round-trip.

    Only rows that are all dicts with the same keys and flat values convert:
    nested values (tuples, lists, dicts) would come back as lists or dicts of a
    different shape, so they stay Python rows.
    """
    if not rows or type(rows[0]) is not dict:
        return None
    keys = rows[0].keys()
    for r in rows:
        if type(r) is not dict or r.keys() != keys:
            return None
    names = list(keys)
    try:  # a column at a time, as ``pa.RecordBatch.from_pylist`` does, with the type named where it can be
        batch = pa.RecordBatch.from_arrays([to_array([r[k] for r in rows]) for k in names], names=names)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        return None
    if not _is_flat(batch.schema):
        return None
    return batch


def concat(batches: list[Batch]) -> Batch:
    """One batch from several of the same form (and, for Arrow, the same schema)."""
    if len(batches) == 1:
        return batches[0]
    if isinstance(batches[0], pa.RecordBatch):
        return pa.concat_batches(batches)
    out: list = []
    for b in batches:
        out.extend(b)
    return out


def concat_timestamps(batches: list[Batch], timestamps: list) -> np.ndarray | None:
    """The timestamps of ``concat(batches)``: None when no part has any."""
    if all(t is None for t in timestamps):
        return None
    return np.concatenate([np.full(num_rows(b), NO_TIMESTAMP, dtype=np.int64) if t is None else t
                           for b, t in zip(batches, timestamps)])


def same_form(a: Batch, b: Batch) -> bool:
    if isinstance(a, pa.RecordBatch):
        return isinstance(b, pa.RecordBatch) and a.schema.equals(b.schema)
    return not isinstance(b, pa.RecordBatch)


def empty_like(batch: Batch) -> Batch:
    return batch.slice(0, 0) if isinstance(batch, pa.RecordBatch) else []


def describe(batch: Any) -> str:
    if isinstance(batch, pa.RecordBatch):
        return f"RecordBatch({batch.num_rows} rows, {batch.schema.names})"
    return f"list({len(batch)} records)"


class NullKeyError(ValueError):
    """A record's key is None. Flink refuses a null key ("Assigned key must not be null!"): all such records
    would share one key, which hides a bug in a key function and piles them onto one subtask."""


def extract_keys(batch: Batch, key: Any, allow_none: bool = False) -> Any:
    """The key of every record of ``batch`` under ``key`` (a ``KeySpec``).

    An integer key column without nulls comes back as a numpy array (for the
    vectorised hash); everything else as a list of Python values. A None key raises NullKeyError
    (unless ``allow_none``: a custom partitioner's key is the user's to interpret, as in Flink).
    """
    if isinstance(batch, pa.RecordBatch) and key.column is not None:
        idx = batch.schema.get_field_index(key.column)
        if idx < 0:
            raise KeyError(f"key column {key.column!r} is not in the records; columns: {batch.schema.names}")
        col = batch.column(idx)
        if col.null_count and not allow_none:
            _null_key(key, to_rows(batch)[col.is_null().to_numpy(zero_copy_only=False).argmax()])
        if pa.types.is_integer(col.type) and col.null_count == 0:
            return numbers(col)
        return col.to_pylist()
    rows = to_rows(batch)
    if key.fn is not None:
        fn = key.fn
        keys = [fn(r) for r in rows]
    else:
        field = key.column if key.column is not None else key.position
        try:
            keys = [r[field] for r in rows]
        except (KeyError, IndexError, TypeError) as e:
            raise KeyError(f"cannot take key {key.describe()} from a record: {type(e).__name__}: {e}") from e
    if not allow_none and None in keys:  # one pass in C: None compares by identity first
        _null_key(key, rows[keys.index(None)])
    return keys


def _null_key(key: Any, record: Any) -> None:
    shown = repr(record)
    shown = shown if len(shown) <= 300 else shown[:300] + "..."
    raise NullKeyError(f"key_by({key.describe()}) gave None for the record {shown}: a key must not be None (as in "
                       f"Flink); filter such records out before key_by, or give them a key of their own")
