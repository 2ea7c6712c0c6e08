"""Rows and type information, as PyFlink names them (``pyflink.common``).

``Row`` behaves as PyFlink's: positional or named fields (in the order given: PyFlink's
docstring says named fields are sorted, its code keeps them as given, and so does this),
``row.name``, ``row[0]``, ``row["name"]``, ``as_dict``, a ``RowKind``, equality that includes
the kind (named rows compare by name, whatever the order), and the same ``repr``.

``print()`` shows what a PyFlink job's ``print()`` shows (``print_string``): a stream with no
declared type holds pickled Python objects, printed as ``str(value)`` (a Row as its repr); a
stream of a row type is printed by PyFlink itself as ``+I[Alice,11]`` (``str`` of each field,
no spaces); any other declared type is printed by Java: the value converted to that Java type,
then its ``toString`` (``true``, ``1.0E7``, ``(1,a)`` for a tuple, ``{a=1}`` for a map).

``Types`` builds type information. The engine does not need it to run (records are Python
values or Arrow batches), so it is accepted wherever PyFlink takes ``output_type`` /
``type_info``; where it helps it is used: a named row type gives a collection its Arrow schema.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Iterator, Sequence

import datetime as _dt
import decimal
import struct

import pyarrow as pa


class RowKind(Enum):
    INSERT = 0
    UPDATE_BEFORE = 1
    UPDATE_AFTER = 2
    DELETE = 3

    def short_string(self) -> str:
        return _SHORT[self]


_SHORT = {RowKind.INSERT: "+I", RowKind.UPDATE_BEFORE: "-U", RowKind.UPDATE_AFTER: "+U", RowKind.DELETE: "-D"}
_SLOTS = ("_values", "_fields", "_row_kind")


def _make_row(fields: list | None, values: Sequence, kind: RowKind) -> "Row":
    row = Row(*values)
    if fields is not None:
        object.__setattr__(row, "_fields", list(fields))
    object.__setattr__(row, "_row_kind", kind)
    return row


class Row:
    """``Row(1, "a")``, ``Row(name="Alice", age=11)``, or a row "class":
    ``Person = Row("name", "age"); Person("Alice", 11)``."""

    __slots__ = _SLOTS

    def __init__(self, *args: Any, **kwargs: Any):
        if args and kwargs:
            raise ValueError("a Row takes positional values or named values, not both")
        if kwargs:
            names = list(kwargs)
            object.__setattr__(self, "_fields", names)
            object.__setattr__(self, "_values", [kwargs[n] for n in names])
        else:
            object.__setattr__(self, "_fields", None)
            object.__setattr__(self, "_values", list(args))
        object.__setattr__(self, "_row_kind", RowKind.INSERT)

    # -- kind and names --
    def get_row_kind(self) -> RowKind:
        return self._row_kind

    def set_row_kind(self, row_kind: RowKind) -> None:
        if not isinstance(row_kind, RowKind):
            raise TypeError(f"set_row_kind needs a RowKind, got {row_kind!r}")
        object.__setattr__(self, "_row_kind", row_kind)

    def set_field_names(self, field_names: Sequence[str]) -> None:
        object.__setattr__(self, "_fields", list(field_names))

    def get_fields_by_names(self, names: Sequence[str]) -> list:
        """The values of fields ``names``, in that order (PyFlink's; a row without names: its values)."""
        names = list(names)
        if self._fields is None or names == self._fields:
            return list(self._values)
        missing = [n for n in names if n not in self._fields]
        if missing:
            raise KeyError(f"fields {missing} are not in the Row; fields: {self._fields}")
        return [self._values[self._fields.index(n)] for n in names]

    def field_names(self) -> list[str] | None:
        """The field names (None: a positional row)."""
        return None if self._fields is None else list(self._fields)

    @staticmethod
    def of_kind(row_kind: RowKind, *args: Any, **kwargs: Any) -> "Row":
        row = Row(*args, **kwargs)
        row.set_row_kind(row_kind)
        return row

    def as_dict(self, recursive: bool = False) -> dict:
        if self._fields is None:
            raise TypeError("a Row without field names has no dict form (name its fields: Row(name=...))")

        def convert(v: Any) -> Any:
            if not recursive:
                return v
            if isinstance(v, Row):
                return v.as_dict(True)
            if isinstance(v, list):
                return [convert(x) for x in v]
            if isinstance(v, dict):
                return {k: convert(x) for k, x in v.items()}
            return v

        return {k: convert(v) for k, v in zip(self._fields, self._values)}

    # -- a row "class" makes rows --
    def __call__(self, *values: Any) -> "Row":
        if len(values) > len(self._values):
            raise ValueError(f"{self!r} has {len(self._values)} fields, got {len(values)} values")
        return _make_row([str(f) for f in self._values], values, self._row_kind)

    # -- access --
    def _index(self, name: str) -> int:
        if self._fields is None:
            raise KeyError(f"{name!r}: this Row has no field names")
        try:
            return self._fields.index(name)
        except ValueError:
            raise KeyError(f"{name!r} is not a field of the Row; fields: {self._fields}") from None

    def __getitem__(self, item: Any) -> Any:
        if isinstance(item, (int, slice)):
            return self._values[item]
        return self._values[self._index(item)]

    def __setitem__(self, item: Any, value: Any) -> None:
        if isinstance(item, (int, slice)):
            self._values[item] = value
        else:
            self._values[self._index(item)] = value

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self[self._index(name)]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"Row fields are set by index or name (row[{name!r}] = ...), not as attributes")

    def __contains__(self, item: Any) -> bool:
        return item in self._values

    def __iter__(self) -> Iterator[Any]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Row) or self._row_kind != other._row_kind:
            return False
        if self._fields is None or other._fields is None:
            return self._fields is other._fields and self._values == other._values
        if self._fields == other._fields:
            return self._values == other._values
        return sorted(self._fields) == sorted(other._fields) and all(self[n] == other[n] for n in self._fields)

    def __hash__(self) -> int:
        if self._fields is None:
            return hash(tuple(self._values))
        return hash(tuple(v for _, v in sorted(zip(self._fields, self._values), key=lambda f: f[0])))

    def __reduce__(self) -> tuple:
        return _make_row, (self._fields, tuple(self._values), self._row_kind)

    def __repr__(self) -> str:
        if self._fields is not None:
            return "Row(%s)" % ", ".join(f"{k}={v!r}" for k, v in zip(self._fields, self._values))
        return "<Row(%s)>" % ", ".join(repr(v) for v in self._values)

    def to_flink_string(self) -> str:
        """Flink's Java ``Row.toString``: what ``print()`` shows for a row, e.g. ``+I[Alice, 11]``."""
        return f"{self._row_kind.short_string()}[{', '.join(_java_string(v) for v in self._values)}]"


def _java_string(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, Row):
        return v.to_flink_string()
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_java_string(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_java_string(k)}={_java_string(x)}" for k, x in v.items()) + "}"
    return str(v)


# -- type information ------------------------------------------------------------------------------
class TypeInformation:
    """A PyFlink type; ``arrow`` is its Arrow type where it has one (None: a Python object)."""

    def __init__(self, name: str, arrow: pa.DataType | None = None):
        self._name = name
        self._arrow = arrow

    def to_arrow(self) -> pa.DataType | None:
        return self._arrow

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and repr(other) == repr(self)

    def __hash__(self) -> int:
        return hash(repr(self))

    def __repr__(self) -> str:
        return self._name


class RowTypeInfo(TypeInformation):
    def __init__(self, field_types: Sequence[TypeInformation], field_names: Sequence[str] | None = None):
        field_types = list(field_types)
        for t in field_types:
            if not isinstance(t, TypeInformation):
                raise TypeError(f"a row type needs TypeInformation fields (Types.INT(), ...), got {t!r}")
        if field_names is None:
            field_names = [f"f{i}" for i in range(len(field_types))]
        elif len(field_names) != len(field_types):
            raise ValueError(f"ROW_NAMED: {len(field_names)} names for {len(field_types)} types")
        self.field_names, self.field_types = list(field_names), field_types
        arrow_fields = [t.to_arrow() for t in field_types]
        arrow = None if any(a is None for a in arrow_fields) else pa.struct(
            [pa.field(n, a) for n, a in zip(self.field_names, arrow_fields)])
        super().__init__(f"Row({', '.join(f'{n}: {t!r}' for n, t in zip(self.field_names, field_types))})", arrow)

    def get_field_names(self) -> list[str]:
        return list(self.field_names)

    def get_field_types(self) -> list[TypeInformation]:
        return list(self.field_types)

    def get_field_index(self, name: str) -> int:
        return self.field_names.index(name) if name in self.field_names else -1

    def arrow_schema(self) -> pa.Schema | None:
        return None if self._arrow is None else pa.schema(list(self._arrow))


def as_row(value: Any, row_type: RowTypeInfo, where: Any = None) -> Row:
    """``value`` (a tuple, list, dict, Row, or an object with the fields as attributes) as a Row of
    ``row_type``'s field names."""
    names = row_type.field_names
    if isinstance(value, Row):
        values = list(value) if value._fields is None else [value[n] for n in names]
    elif isinstance(value, dict):
        missing = [n for n in names if n not in value]
        if missing:
            raise ValueError(f"element {where}: {value!r} has no field(s) {missing} of {row_type!r}")
        values = [value[n] for n in names]
    elif isinstance(value, (tuple, list)):
        values = list(value)
    elif hasattr(value, "__dict__") and not callable(value):
        # As PyFlink's RowTypeInfo.to_internal_type: an object's attributes by the row's field names
        # (vars(obj).get(name), None for one it does not have).
        attrs = vars(value)
        values = [attrs.get(n) for n in names]
    else:
        raise TypeError(f"element {where}: {value!r} cannot be a row of {row_type!r} "
                        f"(a tuple, list, dict, Row or object with the fields as attributes is needed)")
    if len(values) != len(names):
        raise ValueError(f"element {where}: {len(values)} values for the {len(names)} fields of {row_type!r}")
    return _make_row(names, values, RowKind.INSERT if not isinstance(value, Row) else value.get_row_kind())


class Types:
    """PyFlink's ``Types`` constructors."""

    @staticmethod
    def STRING() -> TypeInformation:
        return TypeInformation("String", pa.string())

    @staticmethod
    def BYTE() -> TypeInformation:
        return TypeInformation("Byte", pa.int8())

    @staticmethod
    def BOOLEAN() -> TypeInformation:
        return TypeInformation("Boolean", pa.bool_())

    @staticmethod
    def SHORT() -> TypeInformation:
        return TypeInformation("Short", pa.int16())

    @staticmethod
    def INT() -> TypeInformation:
        return TypeInformation("Integer", pa.int32())

    @staticmethod
    def LONG() -> TypeInformation:
        return TypeInformation("Long", pa.int64())

    @staticmethod
    def FLOAT() -> TypeInformation:
        return TypeInformation("Float", pa.float32())

    @staticmethod
    def DOUBLE() -> TypeInformation:
        return TypeInformation("Double", pa.float64())

    @staticmethod
    def CHAR() -> TypeInformation:
        return TypeInformation("Character", pa.string())

    @staticmethod
    def BIG_INT() -> TypeInformation:
        return TypeInformation("BigInteger", None)

    @staticmethod
    def BIG_DEC() -> TypeInformation:
        return TypeInformation("BigDecimal", None)  # Python Decimal of any precision: no fixed Arrow type

    @staticmethod
    def INSTANT() -> TypeInformation:
        return TypeInformation("Instant", pa.timestamp("us", tz="UTC"))

    @staticmethod
    def SQL_DATE() -> TypeInformation:
        return TypeInformation("Date", pa.date32())

    @staticmethod
    def SQL_TIME() -> TypeInformation:
        return TypeInformation("Time", pa.time64("us"))

    @staticmethod
    def SQL_TIMESTAMP() -> TypeInformation:
        return TypeInformation("Timestamp", pa.timestamp("us"))

    @staticmethod
    def PICKLED_BYTE_ARRAY() -> TypeInformation:
        return TypeInformation("PickledByteArray", None)

    @staticmethod
    def ROW(field_types: Sequence[TypeInformation]) -> RowTypeInfo:
        return RowTypeInfo(field_types)

    @staticmethod
    def ROW_NAMED(field_names: Sequence[str], field_types: Sequence[TypeInformation]) -> RowTypeInfo:
        return RowTypeInfo(field_types, field_names)

    @staticmethod
    def TUPLE(field_types: Sequence[TypeInformation]) -> TypeInformation:
        return _Composite(f"Tuple[{', '.join(map(repr, field_types))}]", None, "tuple", list(field_types))

    @staticmethod
    def PRIMITIVE_ARRAY(element_type: TypeInformation) -> TypeInformation:
        return Types._list("PrimitiveArray", element_type)

    @staticmethod
    def BASIC_ARRAY(element_type: TypeInformation) -> TypeInformation:
        return Types._list("BasicArray", element_type)

    @staticmethod
    def OBJECT_ARRAY(element_type: TypeInformation) -> TypeInformation:
        return Types._list("ObjectArray", element_type)

    @staticmethod
    def LIST(element_type_info: TypeInformation) -> TypeInformation:
        return Types._list("List", element_type_info)

    @staticmethod
    def MAP(key_type_info: TypeInformation, value_type_info: TypeInformation) -> TypeInformation:
        k, v = key_type_info.to_arrow(), value_type_info.to_arrow()
        return _Composite(f"Map<{key_type_info!r}, {value_type_info!r}>",
                          None if k is None or v is None else pa.map_(k, v), "map", [key_type_info, value_type_info])

    @staticmethod
    def _list(kind: str, element_type: TypeInformation) -> TypeInformation:
        if not isinstance(element_type, TypeInformation):
            raise TypeError(f"{kind} needs an element TypeInformation, got {element_type!r}")
        e = element_type.to_arrow()
        return _Composite(f"{kind}<{element_type!r}>", None if e is None else pa.list_(e),
                          "list" if kind == "List" else "array", [element_type])


class _Composite(TypeInformation):
    """A tuple, list, array or map type: it knows its element types (``print`` formats by them)."""

    def __init__(self, name: str, arrow: pa.DataType | None, kind: str, elements: list):
        super().__init__(name, arrow)
        self.kind = kind
        self.elements = elements


# -- what print() shows, as PyFlink ------------------------------------------------------------------
def print_string(value: Any, type_info: TypeInformation | None) -> str:
    """The line PyFlink's ``print()`` writes for ``value`` of a stream of type ``type_info``
    (PyFlink's ``DataStream._align_output_type``, then Java's PrintSinkFunction)."""
    if type_info is None or type_info._name == "PickledByteArray":
        return value if isinstance(value, str) else str(value)
    if isinstance(type_info, RowTypeInfo):
        # PyFlink formats rows itself, in Python, after the round trip through Java's row type (a named
        # Row's fields are taken by the type's names): str() of each field, joined by ',' without spaces
        row = as_row(value, type_info, "printed")
        values = [_through_java(v, t) for v, t in zip(row._values, type_info.field_types)]
        return f"{row.get_row_kind().short_string()}[{','.join(str(v) for v in values)}]"
    return _java_to_string(value, type_info)


def to_declared_type(value: Any, type_info: TypeInformation | None) -> Any:
    """``value`` as PyFlink hands a record of a stream of ``type_info`` back to Python (what
    ``execute_and_collect`` gives): a row type makes a Row with the type's field names."""
    if isinstance(type_info, RowTypeInfo):
        return as_row(value, type_info, "collected")
    return value


def _through_java(value: Any, t: TypeInformation) -> Any:
    """A Python value after its round trip through Java as type ``t`` (a FLOAT loses precision)."""
    if t._name == "Float" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return struct.unpack("f", struct.pack("f", value))[0]
    return value


def _java_to_string(v: Any, t: TypeInformation | None) -> str:
    """Java's ``toString`` of ``v`` converted to the Java class of type ``t``."""
    if v is None:
        return "null"
    name = t._name if t is not None else ""
    if isinstance(t, RowTypeInfo) or isinstance(v, Row):
        values = v._values if isinstance(v, Row) else list(v)
        kind = v.get_row_kind() if isinstance(v, Row) else RowKind.INSERT
        types = t.field_types if isinstance(t, RowTypeInfo) else [None] * len(values)
        return f"{kind.short_string()}[{', '.join(_java_to_string(x, ft) for x, ft in zip(values, types))}]"
    if isinstance(t, _Composite):
        if t.kind == "tuple":  # Flink's Tuple.toString: (f0,f1) without spaces
            return "(" + ",".join(_java_to_string(x, ft) for x, ft in zip(v, t.elements)) + ")"
        if t.kind == "map":
            k, vt = t.elements
            return "{" + ", ".join(f"{_java_to_string(a, k)}={_java_to_string(b, vt)}"
                                   for a, b in _hash_map_order(v)) + "}"
        # a java.util.List (ArrayList) prints its elements; a Java array would print its identity
        # hash (``[I@1b6d3586``), which nobody can rely on: printed as a list too
        return "[" + ", ".join(_java_to_string(x, t.elements[0]) for x in v) + "]"
    if isinstance(v, bool):
        return "true" if v else "false"
    if name == "Float" and isinstance(v, (int, float)):
        return _java_float(float(v), single=True)
    if name == "Double" or isinstance(v, float):
        return _java_float(float(v), single=False)
    if name == "Timestamp" and isinstance(v, _dt.datetime):  # java.sql.Timestamp: at least one fraction digit
        frac = f"{v.microsecond:06d}".rstrip("0") or "0"
        return f"{v:%Y-%m-%d %H:%M:%S}.{frac}"
    if name == "Instant" and isinstance(v, _dt.datetime):
        return v.astimezone(_dt.timezone.utc).replace(tzinfo=None).isoformat() + "Z"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_java_to_string(x, None) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_java_to_string(a, None)}={_java_to_string(b, None)}" for a, b in v.items()) + "}"
    return str(v)


def _java_float(d: float, single: bool) -> str:
    """Java's Double.toString / Float.toString: shortest digits; plain from 10^-3 up to 10^7,
    otherwise computerized scientific notation (``1.0E7``, ``1.5E-4``)."""
    if d != d:
        return "NaN"
    if d in (float("inf"), float("-inf")):
        return "Infinity" if d > 0 else "-Infinity"
    if d == 0:
        return "-0.0" if str(d).startswith("-") else "0.0"
    if single:
        import numpy as np

        digits = np.format_float_scientific(np.float32(d), unique=True, trim="-")  # shortest for float32
    else:
        digits = repr(d)
    sign, digit_tuple, exp = decimal.Decimal(digits).normalize().as_tuple()  # no trailing zeros
    ds = "".join(map(str, digit_tuple))
    point = len(ds) + int(exp)  # where the decimal point is, counted in digits
    a = abs(d)
    if 1e-3 <= a < 1e7:
        if point <= 0:
            text = "0." + "0" * -point + ds
        elif point >= len(ds):
            text = ds + "0" * (point - len(ds)) + ".0"
        else:
            text = ds[:point] + "." + ds[point:]
    else:
        text = f"{ds[0]}.{ds[1:] or '0'}E{point - 1}"
    return ("-" if sign else "") + text


def _java_hash(key: Any) -> int | None:
    """Java's hashCode of a String, Integer, Long or Boolean key (None: unknown)."""
    if isinstance(key, bool):
        return 1231 if key else 1237
    if isinstance(key, int):
        if -(1 << 31) <= key < (1 << 31):
            return key
        x = key & 0xFFFFFFFFFFFFFFFF
        h = (x ^ (x >> 32)) & 0xFFFFFFFF
        return h - (1 << 32) if h >= (1 << 31) else h
    if isinstance(key, str):
        h = 0
        for unit in struct.unpack(f"<{len(key.encode('utf-16-le')) // 2}H", key.encode("utf-16-le")):
            h = (31 * h + unit) & 0xFFFFFFFF
        return h - (1 << 32) if h >= (1 << 31) else h
    return None


def _hash_map_order(m: dict) -> list:
    """The entries of ``m`` in the order a java.util.HashMap filled from it iterates them (Flink's
    MapSerializer builds ``new HashMap<>(size)`` and puts the entries in the order they come)."""
    items = list(m.items())
    hashes = [_java_hash(k) for k, _ in items]
    if not items or any(h is None for h in hashes):
        return items
    cap = 1
    while cap < len(items):
        cap <<= 1
    while len(items) > cap * 0.75:
        cap <<= 1

    def bucket(h: int) -> int:
        h &= 0xFFFFFFFF
        return (h ^ (h >> 16)) & (cap - 1)

    order = sorted(range(len(items)), key=lambda i: (bucket(hashes[i]), i))  # type: ignore[arg-type]
    return [items[i] for i in order]


__all__ = ["Row", "RowKind", "RowTypeInfo", "TypeInformation", "Types", "print_string", "to_declared_type"]
