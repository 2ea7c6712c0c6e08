"""Decoded parts of a state (``decode``) into Arrow record batches of a fixed schema: pure.

Columnar parts go to Arrow without a Python object per row (numpy arrays, no copy); row tuples
are gathered into batches of ``BATCH_ROWS`` and built column by column (``types.Column``).
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator

import pyarrow as pa

from . import decode
from .types import Column

BATCH_ROWS = 1 << 16
COLUMNAR_ROWS = 1 << 20  # a columnar part is sliced: one batch is one allocation in the JVM too


class ColumnMismatch(TypeError):
    """A value does not fit the column chosen for it (an inferred type met another one)."""


def record_batches(parts: Iterable[decode.Columns | decode.ColumnLists | list[tuple]], schema: pa.Schema,
                   columns: list[Column], what: str) -> Iterator[pa.RecordBatch]:
    """``parts`` as batches of ``schema``; ``columns[i]`` makes field i from Python values. Small
    parts (a key group of a few rows) are gathered up to ``BATCH_ROWS``; large ones go as they are."""
    pending: list[list] = [[] for _ in columns]
    count = 0
    for part in parts:
        if isinstance(part, decode.Columns):
            yield from _columnar(part, schema, columns, what)
            continue
        lists = part.columns if isinstance(part, decode.ColumnLists) else [list(c) for c in zip(*part)]
        if not lists or not lists[0]:
            continue
        if not count and len(lists[0]) >= BATCH_ROWS:
            yield _rows(lists, schema, columns, what)
            continue
        for into, values in zip(pending, lists):
            into.extend(values)
        count += len(lists[0])
        if count >= BATCH_ROWS:
            yield _rows(pending, schema, columns, what)
            pending, count = [[] for _ in columns], 0
    if count:
        yield _rows(pending, schema, columns, what)


def _rows(lists: list[list], schema: pa.Schema, columns: list[Column], what: str) -> pa.RecordBatch:
    arrays = []
    for field, column, values in zip(schema, columns, lists):
        try:
            arrays.append(column.array(values))
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as e:
            bad = _first_misfit(values, column)
            raise ColumnMismatch(
                f"{what}: column {field.name!r} is {field.type} ({column.how}), but a value does not fit it"
                + (f": {bad!r} ({type(bad).__name__})" if bad is not None else "") + f" ({e}). Declare the type "
                f"(value_type_info=Types...), or read the values as text (value_format='text') or pickled "
                f"bytes (value_format='pickle')") from None
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _first_misfit(values: list, column: Column) -> Any:
    for v in values:
        try:
            column.array([v])
        except Exception:  # noqa: BLE001 - looking for the one that fails, whatever the reason
            return v
    return None


def _columnar(part: decode.Columns, schema: pa.Schema, columns: list[Column], what: str) -> Iterator[pa.RecordBatch]:
    arrays = []
    for array, field, column in zip((part.keys, part.values), schema, columns):
        if column.prepare is not None and not pa.types.is_integer(field.type) and not pa.types.is_floating(field.type):
            arrays.append(column.array(array.tolist()))  # text or pickled: a Python object per value
            continue
        a = pa.array(array)
        if not a.type.equals(field.type):
            try:
                a = a.cast(field.type)  # a declared narrower or other numeric type; overflow raises
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                raise ColumnMismatch(f"{what}: column {field.name!r} is {field.type} ({column.how}); the state "
                                     f"holds {a.type} ({e})") from None
        arrays.append(a)
    n = len(part.keys)
    for start in range(0, n, COLUMNAR_ROWS):
        yield pa.RecordBatch.from_arrays([a.slice(start, COLUMNAR_ROWS) for a in arrays], schema=schema)
