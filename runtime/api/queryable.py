"""Queryable state: what a lookup from outside the job converts, and ``KeyedStream.as_queryable_state``.

Keys arrive as JSON (a REST query string or body) and must become the very Python value the job keys
by, or they hash to another key group and the lookup misses: the job's key type
(``key_by(..., key_type=Types.INT())``) says how; without one, JSON's own types are taken (a string, an
integer, a number, a boolean; an array is a tuple). Values go back as JSON where their type allows
(rows as objects or arrays, tuples as arrays, maps as objects, dates as ISO strings, decimals as
strings, bytes as base64), else as their ``repr`` (``{"repr": ...}``). Pure functions: no I/O.
"""

from __future__ import annotations

import base64
import datetime as _dt
import decimal
import math
from typing import Any

from .functions import KeyedProcessFunction
from .state import ValueStateDescriptor
from .types import Row, RowTypeInfo, TypeInformation, _Composite

_INTS = {"Byte", "Short", "Integer", "Long", "BigInteger"}
_FLOATS = {"Float", "Double"}


class KeyTypeError(ValueError):
    """A key given from outside cannot be the job's key type; the message names the expected type."""


def convert_key(raw: Any, key_type: Any = None) -> Any:
    """The job's key for ``raw`` (decoded JSON), converted as ``key_type`` says."""
    if key_type is None or not isinstance(key_type, TypeInformation):
        return _plain(raw)
    name = repr(key_type)
    if isinstance(key_type, RowTypeInfo):
        names, types = key_type.field_names, key_type.field_types
        if isinstance(raw, dict):
            missing = [n for n in names if n not in raw]
            if missing or len(raw) != len(names):
                raise KeyTypeError(f"expected a key of type {name}: an object with the fields {names}, got {raw!r}")
            values = [raw[n] for n in names]
        elif isinstance(raw, list) and len(raw) == len(names):
            values = raw
        else:
            raise KeyTypeError(f"expected a key of type {name}: an object with the fields {names} or an array of "
                               f"{len(names)} values, got {raw!r}")
        row = Row(*[convert_key(v, t) for v, t in zip(values, types)])
        object.__setattr__(row, "_fields", list(names))
        return row
    if isinstance(key_type, _Composite) and key_type.kind == "tuple":
        if not isinstance(raw, list) or len(raw) != len(key_type.elements):
            raise KeyTypeError(f"expected a key of type {name}: an array of {len(key_type.elements)} values, "
                               f"got {raw!r}")
        return tuple(convert_key(v, t) for v, t in zip(raw, key_type.elements))
    kind = key_type._name
    if kind in ("String", "Character"):
        if not isinstance(raw, str):
            raise KeyTypeError(f"expected a key of type {name}: a JSON string, got {raw!r}")
        return raw
    if kind in _INTS:
        if isinstance(raw, bool) or not isinstance(raw, (int, str)):
            raise KeyTypeError(f"expected a key of type {name}: an integer, got {raw!r}")
        try:
            return int(raw)
        except ValueError:
            raise KeyTypeError(f"expected a key of type {name}: an integer, got {raw!r}") from None
    if kind in _FLOATS:
        if isinstance(raw, bool) or not isinstance(raw, (int, float)):
            raise KeyTypeError(f"expected a key of type {name}: a number, got {raw!r}")
        return float(raw)
    if kind == "Boolean":
        if not isinstance(raw, bool):
            raise KeyTypeError(f"expected a key of type {name}: true or false, got {raw!r}")
        return raw
    if kind == "BigDecimal":
        try:
            return decimal.Decimal(str(raw))
        except decimal.InvalidOperation:
            raise KeyTypeError(f"expected a key of type {name}: a decimal number, got {raw!r}") from None
    if kind == "Date":
        try:
            return _dt.date.fromisoformat(str(raw))
        except ValueError:
            raise KeyTypeError(f"expected a key of type {name}: an ISO date (2026-11-27), got {raw!r}") from None
    return _plain(raw)


def _plain(raw: Any) -> Any:
    if isinstance(raw, list):
        return tuple(_plain(v) for v in raw)
    if isinstance(raw, dict):
        raise KeyTypeError(f"a key given as a JSON object needs the job's key type (key_by(..., "
                           f"key_type=Types.ROW_NAMED(...))), got {raw!r}")
    return raw


def to_json(value: Any) -> Any:
    """``value`` as JSON: as itself where JSON has the type, else the nearest JSON shape."""
    if value is None or isinstance(value, (bool, str, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)  # JSON has no NaN or Infinity
    if isinstance(value, Row):
        fields = value._fields
        return {n: to_json(v) for n, v in zip(fields, value)} if fields is not None else [to_json(v) for v in value]
    if isinstance(value, (list, tuple, set, frozenset)):
        return [to_json(v) for v in value]
    if isinstance(value, dict):
        return {k if isinstance(k, str) else _key_text(k): to_json(v) for k, v in value.items()}
    if isinstance(value, (_dt.datetime, _dt.date, _dt.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"base64": base64.b64encode(bytes(value)).decode()}
    item = getattr(value, "item", None)  # numpy scalars
    if callable(item) and type(value).__module__ == "numpy":
        return to_json(item())
    if hasattr(value, "__dataclass_fields__"):
        return {f: to_json(getattr(value, f)) for f in value.__dataclass_fields__}
    return {"repr": repr(value)}


def _key_text(key: Any) -> str:
    converted = to_json(key)
    return converted if isinstance(converted, str) else repr(converted)


class QueryableStateStream:
    """What ``KeyedStream.as_queryable_state`` returns (Flink's QueryableStateStream)."""

    def __init__(self, queryable_state_name: str, state_descriptor: ValueStateDescriptor):
        self._name = queryable_state_name
        self._descriptor = state_descriptor

    def get_queryable_state_name(self) -> str:
        return self._name

    def get_state_descriptor(self) -> ValueStateDescriptor:
        return self._descriptor


class QueryableSink(KeyedProcessFunction):
    """Keeps each key's latest record in a queryable ValueState, or folds the records into a
    ReducingState (Flink's QueryableValueStateOperator / QueryableAppendingStateOperator)."""

    def __init__(self, descriptor: Any):
        self.descriptor = descriptor

    def open(self, runtime_context: Any) -> None:
        d = self.descriptor
        self.state = runtime_context.get_state(d) if d.kind == "value" else runtime_context.get_reducing_state(d)
        self.write = self.state.update if d.kind == "value" else self.state.add

    def process_element(self, value: Any, ctx: Any) -> None:
        self.write(value)
