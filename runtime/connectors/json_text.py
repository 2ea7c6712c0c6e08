"""JSON text of records, exactly as Python's ``json`` encoder writes each: for Python rows by its C
encoder called directly (``row_encoder``), for Arrow batches a column at a time by Arrow's kernels
(``json_objects``), at a tenth of the encoder's cost or less.

``json_objects`` is only for the column types whose text Arrow writes as Python's json does:
integers, booleans and strings, nulls among them (and columns of nulls only). Floats are not (Arrow
writes 1.0 as "1", json as "1.0"), nor are strings holding a character the encoder would escape
other than ``\\`` and ``"``: such a batch gets None, and its rows go through the encoder one at a
time as before.
"""

from __future__ import annotations

import json
from json import encoder as _encoder
from typing import Any, Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# The characters json.dumps escapes besides \\ and ": with ensure_ascii, all but printable ASCII;
# without, the control characters only.
_ESCAPED = {True: r"[^\x20-\x7e]", False: r"[\x00-\x1f]"}


def json_objects(batch: pa.RecordBatch, item_separator: str = ", ", key_separator: str = ": ",
                 ensure_ascii: bool = True, end: str = "") -> pa.Array | None:
    """Each row as a JSON object followed by ``end``, as one string array; None when a column's
    type or content is one Arrow cannot write as Python's json does."""
    if batch.num_columns == 0:
        return pa.array(["{}" + end] * batch.num_rows, pa.string())
    if batch.num_rows == 0:
        return pa.array([], pa.string())
    parts: list = []
    for i, field in enumerate(batch.schema):
        t = field.type
        col = batch.column(i)
        if pa.types.is_integer(t) or pa.types.is_null(t):
            text = pc.cast(col, pa.string())
        elif pa.types.is_boolean(t):
            text = pc.if_else(col, "true", "false")
        elif pa.types.is_string(t) or pa.types.is_large_string(t):
            if pc.any(pc.match_substring_regex(col, _ESCAPED[ensure_ascii])).as_py():
                return None
            text = pc.replace_substring(pc.replace_substring(col, "\\", "\\\\"), '"', '\\"')
            text = pc.binary_join_element_wise('"', text, '"', "")
        else:
            return None
        name = json.dumps(field.name, ensure_ascii=ensure_ascii)
        parts.append(("{" if i == 0 else item_separator) + name + key_separator)
        parts.append(pc.fill_null(text, "null") if col.null_count else text)
    parts.append("}" + end)
    objects = pc.binary_join_element_wise(*parts, "")
    return objects.combine_chunks() if isinstance(objects, pa.ChunkedArray) else objects


def json_bytes(objects: pa.Array) -> bytes:
    """The text of all the array's strings, one after another (its data buffer, without copying
    each string)."""
    offsets = np.frombuffer(objects.buffers()[1], dtype=np.int64 if pa.types.is_large_string(objects.type) else np.int32)
    start, stop = offsets[objects.offset], offsets[objects.offset + len(objects)]
    return objects.buffers()[2].slice(int(start), int(stop - start)).to_pybytes()


def row_encoder(item_separator: str = ", ", key_separator: str = ": ", ensure_ascii: bool = True,
                default: Callable[[Any], Any] | None = None) -> Callable[[Any], str]:
    """What ``json.JSONEncoder(separators=..., ensure_ascii=..., default=...).encode`` returns, about
    twice as fast for a small record: ``encode`` makes a new C encoder at every call (half of its
    cost for a row of four ints); this one is made once. Without the check for circular references
    (its table would outlive a failed call): a record that contains itself raises ValueError from
    the RecursionError instead."""
    c_make_encoder = getattr(_encoder, "c_make_encoder", None)
    if c_make_encoder is None:  # an interpreter without json's C accelerator
        return json.JSONEncoder(separators=(item_separator, key_separator), ensure_ascii=ensure_ascii,
                                default=default).encode
    strings = _encoder.encode_basestring_ascii if ensure_ascii else _encoder.encode_basestring
    make = c_make_encoder(None, default or json.JSONEncoder().default, strings, None, key_separator, item_separator,
                          False, False, True)
    join = "".join

    def encode(record: Any) -> str:
        if isinstance(record, str):  # the C encoder wants a container at the top
            return strings(record)
        try:
            return join(make(record, 0))
        except RecursionError:
            raise ValueError("a record that contains itself (a circular reference) or nests too deep") from None

    return encode
