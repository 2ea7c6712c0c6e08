"""Which Arrow (and so Spark) type a state's keys and values get, and turning values into it.

A savepoint does not record type information: values are Python objects (pickled in heap and
canonical snapshots, ``codec``-encoded in RocksDB). So a column's type comes from, in order:

1. the ``TypeInformation`` the caller gives (a descriptor's ``type_info``, or ``key_type_info``):
   ``Types.LONG()`` is a bigint column, ``Types.ROW_NAMED(...)`` a struct, and so on;
   ``Types.PICKLED_BYTE_ARRAY()`` (or any type without an Arrow type) is the pickled bytes;
2. the snapshot itself where it knows: a columnar table (int keys, int or float values) is
   ``bigint`` keys and ``bigint`` / ``double`` values, known from the index without reading;
3. inference from a sample of the values (``infer``), decoded on an executor: bool, int
   (int64), float, str, bytes, a Row with field names or a tuple (struct), a list (array),
   a dict (map), when the sample agrees on one; anything else, or a sample that mixes types,
   is a ``string`` column holding the value as JSON where it is JSON-able, else its ``repr``.

All of it pure: no Spark here (``schema`` in ``reader`` turns Arrow types into Spark's).
"""

from __future__ import annotations

import json
import pickle
from typing import Any, Callable, Iterable

import numpy as np
import pyarrow as pa

from streamjob.runtime.api.types import Row

TEXT = pa.string()
_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1


class Column:
    """How one column is made: its Arrow type, and what each Python value goes through first
    (None: nothing, pyarrow takes it as it is). ``how`` says where the type came from."""

    __slots__ = ("type", "prepare", "how")

    def __init__(self, type: pa.DataType, prepare: Callable[[Any], Any] | None, how: str):
        self.type = type
        self.prepare = prepare
        self.how = how

    def array(self, values: list) -> pa.Array:
        if self.prepare is not None:
            values = [None if v is None else self.prepare(v) for v in values]
        return pa.array(values, type=self.type)

    def __repr__(self) -> str:
        return f"Column({self.type}, {self.how})"


def as_text(value: Any) -> str:
    """A value of a ``string`` fallback column: JSON where the value is JSON-able, else its repr."""
    if isinstance(value, str):
        return value
    if isinstance(value, Row):
        value = value.as_dict(recursive=True) if value.field_names() is not None else list(value)
    try:
        return json.dumps(value, sort_keys=False, allow_nan=True)
    except (TypeError, ValueError):
        return repr(value)


def pickled(value: Any) -> bytes:
    return pickle.dumps(value, protocol=5)


def text_column(how: str = "fallback: JSON or repr") -> Column:
    return Column(TEXT, as_text, how)


def pickle_column() -> Column:
    return Column(pa.binary(), pickled, "pickled bytes")


def of_type_info(type_info: Any) -> Column:
    """The column a ``TypeInformation`` declares (no Arrow type: the pickled bytes)."""
    arrow = type_info.to_arrow() if hasattr(type_info, "to_arrow") else None
    if arrow is None:
        return pickle_column()
    return Column(arrow, _preparer(arrow), f"declared {type_info!r}")


def of_dtype(dtype: str) -> Column:
    """A columnar table's key or value block (``<i8``, ``<f8``, ...)."""
    return Column(pa.from_numpy_dtype(np.dtype(dtype)), None, f"columnar {dtype}")


# -- inference ---------------------------------------------------------------------------------
def type_of(value: Any) -> pa.DataType | None:
    """The Arrow type of one value; None: none fits (the column becomes text)."""
    t = type(value)
    if t is bool or isinstance(value, np.bool_):
        return pa.bool_()
    if t is int or isinstance(value, np.integer):
        return pa.int64() if _I64_MIN <= int(value) <= _I64_MAX else None
    if t is float or isinstance(value, np.floating):
        return pa.float64()
    if t is str:
        return pa.string()
    if t is bytes:
        return pa.binary()
    if isinstance(value, Row):
        names = value.field_names() or [f"f{i}" for i in range(len(value))]
        return _struct(names, list(value))
    if t is tuple:
        return _struct([f"f{i}" for i in range(len(value))], list(value))
    if t is list:
        element = merge(type_of(v) for v in value if v is not None) if value else pa.null()
        return None if element is None else pa.list_(element)
    if t is dict:
        if not value:
            return pa.map_(pa.string(), pa.null())
        k = merge(type_of(x) for x in value)
        v = merge(type_of(x) for x in value.values() if x is not None) if any(
            x is not None for x in value.values()) else pa.null()
        return None if k is None or v is None or pa.types.is_null(k) else pa.map_(k, v)
    return None


def _struct(names: list[str], values: list) -> pa.DataType | None:
    fields = []
    for n, v in zip(names, values):
        t = pa.null() if v is None else type_of(v)
        if t is None:
            return None
        fields.append(pa.field(str(n), t))
    return pa.struct(fields)


def merge(types: Iterable[pa.DataType | None]) -> pa.DataType | None:
    """One type for values of these types (null: no value seen); None: they do not agree."""
    out: pa.DataType = pa.null()
    for t in types:
        if t is None:
            return None
        out = _merge2(out, t)
        if out is None:
            return None
    return out


def _merge2(a: pa.DataType, b: pa.DataType) -> pa.DataType | None:
    if a.equals(b) or pa.types.is_null(b):
        return a
    if pa.types.is_null(a):
        return b
    numbers = {pa.int64(), pa.float64()}
    if a in numbers and b in numbers:
        return pa.float64()  # ints and floats together: doubles, as pandas and Spark infer
    if pa.types.is_list(a) and pa.types.is_list(b):
        e = _merge2(a.value_type, b.value_type)
        return None if e is None else pa.list_(e)
    if pa.types.is_map(a) and pa.types.is_map(b):
        k, v = _merge2(a.key_type, b.key_type), _merge2(a.item_type, b.item_type)
        return None if k is None or v is None or pa.types.is_null(k) else pa.map_(k, v)
    if pa.types.is_struct(a) and pa.types.is_struct(b) and [f.name for f in a] == [f.name for f in b]:
        fields = []
        for fa, fb in zip(a, b):
            t = _merge2(fa.type, fb.type)
            if t is None:
                return None
            fields.append(pa.field(fa.name, t))
        return pa.struct(fields)
    return None


def infer(values: list, what: str) -> Column:
    """The column for values like these (a sample); ``what`` names them in ``how``."""
    t = merge(type_of(v) for v in values if v is not None)
    if t is None or _has_null(t):
        # mixed or unknown types, or a part never seen with a value (an empty list): no type to trust
        return text_column(f"{what}: inferred text (JSON or repr) from {len(values)} sampled values")
    return Column(t, _preparer(t), f"{what}: inferred {t} from {len(values)} sampled values")


def _has_null(t: pa.DataType) -> bool:
    if pa.types.is_null(t):
        return True
    if pa.types.is_list(t):
        return _has_null(t.value_type)
    if pa.types.is_map(t):
        return _has_null(t.key_type) or _has_null(t.item_type)
    if pa.types.is_struct(t):
        return any(_has_null(f.type) for f in t)
    return False


# -- values into their column --------------------------------------------------------------------
def _preparer(t: pa.DataType) -> Callable[[Any], Any] | None:
    """What a Python value goes through before pyarrow builds ``t`` from it (None: nothing)."""
    if pa.types.is_struct(t):
        names = [f.name for f in t]
        inner = [_preparer(f.type) for f in t]

        def struct(v: Any) -> Any:
            if isinstance(v, dict):
                values = [v.get(n) for n in names]
            elif isinstance(v, Row) and v.field_names() is not None:
                values = [v[n] if n in v.field_names() else None for n in names]
            else:
                values = list(v)
            return {n: (x if p is None or x is None else p(x)) for n, x, p in zip(names, values, inner)}
        return struct
    if pa.types.is_list(t):
        p = _preparer(t.value_type)
        return None if p is None else (lambda v: [None if x is None else p(x) for x in v])
    if pa.types.is_map(t):
        pk, pv = _preparer(t.key_type), _preparer(t.item_type)

        def mapping(v: Any) -> Any:
            return [(k if pk is None else pk(k), x if pv is None or x is None else pv(x)) for k, x in v.items()]
        return mapping
    if pa.types.is_integer(t):
        return None if t == pa.int64() else int
    if pa.types.is_floating(t):
        return float
    if pa.types.is_string(t):
        return None
    return None
