"""``KeyedStateReaderFunction``: Flink's user-function form of reading keyed state.

    class ReadCounts(KeyedStateReaderFunction):
        def open(self, ctx):
            self.count = ctx.get_state(ValueStateDescriptor("count"))
            self.recent = ctx.get_list_state(ListStateDescriptor("recent"))

        def read_key(self, key, ctx, out):
            out.collect(Row(key=key, count=self.count.value(), recent=list(self.recent.get())))

    reader.read_keyed_state("count", ReadCounts(), output_type=Types.ROW_NAMED(...))

``open`` registers the states it reads (``ctx`` is the runtime context; ``get_runtime_context()``
returns it too), then ``read_key`` is called once per key that any of them holds, with those states
set to that key, and emits rows through ``out.collect``. Each Spark task runs the function over one
subtask's state: that subtask's registered states are loaded into memory together (they are joined
by key), so memory per task is about one subtask's share of those states.

States are read-only here; a descriptor with a TTL leaves values expired now out. ``ctx`` in
``read_key`` gives the key's registered timers (``registered_event_time_timers()``).
"""

from __future__ import annotations

import itertools
from typing import Any, Iterator

from streamjob.runtime.api.types import Row
from streamjob.runtime.state import ttl

from . import plan, source, types
from .plan import Split, StateNotFoundError

TIMER_TABLES = {"event": "_timers-event-time", "processing": "_timers-processing-time"}


class KeyedStateReaderFunction:
    """Override ``open`` (register states) and ``read_key`` (emit rows for one key)."""

    def open(self, ctx: "ReaderRuntimeContext") -> None:
        pass

    def read_key(self, key: Any, ctx: "ReaderContext", out: "Collector") -> None:
        raise NotImplementedError("KeyedStateReaderFunction.read_key(key, ctx, out) emits the rows of one key")

    def close(self) -> None:
        pass

    def get_runtime_context(self) -> "ReaderRuntimeContext":
        return self.__dict__["_runtime_context"]


class Collector:
    """``out.collect(row)`` (Flink's ``Collector``)."""

    __slots__ = ("rows",)

    def __init__(self) -> None:
        self.rows: list = []

    def collect(self, record: Any) -> None:
        self.rows.append(record)


class ReaderContext:
    """The ``ctx`` of ``read_key``: the current key's registered timers."""

    def __init__(self, runtime: "ReaderRuntimeContext"):
        self._runtime = runtime

    def registered_event_time_timers(self) -> set[int]:
        return self._runtime._timers("event")

    def registered_processing_time_timers(self) -> set[int]:
        return self._runtime._timers("processing")


# -- read-only state views ------------------------------------------------------------------
class _View:
    def __init__(self, ctx: "ReaderRuntimeContext", descriptor: Any):
        self._ctx = ctx
        self._name = descriptor.name
        self._descriptor = descriptor

    def _entry(self, default: Any = None) -> Any:
        return self._ctx._entry(self._name, default)

    def _refuse(self, *_: Any, **__: Any) -> Any:
        raise TypeError(f"state {self._name!r} is read-only in a KeyedStateReaderFunction")

    update = add = add_all = put = put_all = remove = clear = _refuse


class _ValueView(_View):
    def value(self) -> Any:
        return self._entry(getattr(self._descriptor, "default", None))


class _ReducingView(_View):
    def get(self) -> Any:
        return self._entry()


class _AggregatingView(_View):
    def get(self) -> Any:
        acc = self._entry(_MISSING)
        return None if acc is _MISSING else self._descriptor.agg_function.get_result(acc)


class _ListView(_View):
    def get(self) -> list:
        return list(self._entry(()) or ())

    def __iter__(self):
        return iter(self.get())


class _MapView(_View):
    def _map(self) -> dict:
        return self._entry({}) or {}

    def get(self, key: Any) -> Any:
        return self._map().get(key)

    def contains(self, key: Any) -> bool:
        return key in self._map()

    def keys(self) -> list:
        return list(self._map().keys())

    def values(self) -> list:
        return list(self._map().values())

    def items(self) -> list:
        return list(self._map().items())

    def is_empty(self) -> bool:
        return not self._map()

    def __iter__(self):
        return iter(self.keys())


_MISSING = object()
_VIEWS = {"value": _ValueView, "reducing": _ReducingView, "aggregating": _AggregatingView,
          "list": _ListView, "map": _MapView}


class ReaderRuntimeContext:
    """What ``open`` registers states with (``get_state``, ``get_list_state``, ``get_map_state``,
    ``get_reducing_state``, ``get_aggregating_state``)."""

    def __init__(self) -> None:
        self.descriptors: dict[str, Any] = {}
        self.data: dict[str, dict] = {}  # state -> key -> entry (TTL unwrapped), filled per split
        self.current_key: Any = None

    def _register(self, descriptor: Any, kind: str) -> Any:
        if descriptor.kind != kind:
            raise TypeError(f"get_{kind}_state needs a {kind.capitalize()}StateDescriptor, got {descriptor!r}")
        self.descriptors[descriptor.name] = descriptor
        return _VIEWS[kind](self, descriptor)

    def get_state(self, descriptor: Any) -> Any:
        return self._register(descriptor, "value")

    def get_list_state(self, descriptor: Any) -> Any:
        return self._register(descriptor, "list")

    def get_map_state(self, descriptor: Any) -> Any:
        return self._register(descriptor, "map")

    def get_reducing_state(self, descriptor: Any) -> Any:
        return self._register(descriptor, "reducing")

    def get_aggregating_state(self, descriptor: Any) -> Any:
        return self._register(descriptor, "aggregating")

    def _entry(self, name: str, default: Any) -> Any:
        return self.data.get(name, {}).get(self.current_key, default)

    def _timers(self, domain: str) -> set[int]:
        return {t[0] for t in self.data.get(TIMER_TABLES[domain], {}).get(self.current_key, ())}


def _open(fn: KeyedStateReaderFunction) -> ReaderRuntimeContext:
    ctx = ReaderRuntimeContext()
    fn.__dict__["_runtime_context"] = ctx
    fn.open(ctx)
    return ctx


def _unwrapped(kind: str, chunk: dict, drop: tuple[int, int] | None) -> dict:
    """A chunk with TTL pairs as plain values (expired ones out when ``drop``)."""
    if not ttl.is_ttl_kind(kind):
        return chunk
    if drop is not None:
        chunk = ttl.drop_expired(kind, chunk, *drop)
    base = ttl.base_kind(kind)
    if base == "list":
        return {k: [v for v, _ in pairs] for k, pairs in chunk.items()}
    if base == "map":
        return {k: {uk: v for uk, (v, _) in m.items()} for k, m in chunk.items()}
    return {k: v for k, (v, _) in chunk.items()}


def run_split(fn: KeyedStateReaderFunction, split: Split, drops: dict[str, tuple[int, int] | None],
              ) -> Iterator[Any]:
    """Every record ``fn`` emits for the keys of one split."""
    ctx = _open(fn)
    names = list(ctx.descriptors) + [t for t in TIMER_TABLES.values()]
    for name, kind, _, chunk in source.keyed_chunks(split, names):
        if ttl.base_kind(kind) == "accumulators":
            keys, values = chunk
            chunk = dict(zip(keys, values.tolist()))
        ctx.data.setdefault(name, {}).update(_unwrapped(kind, chunk, drops.get(name)))
    keys = dict.fromkeys(itertools.chain.from_iterable(ctx.data[n] for n in ctx.descriptors if n in ctx.data))
    read_ctx = ReaderContext(ctx)
    out = Collector()
    try:
        for key in keys:
            ctx.current_key = key
            fn.read_key(key, read_ctx, out)
            if out.rows:
                yield from out.rows
                out.rows = []
    finally:
        fn.close()


def _fields(record: Any) -> list[str]:
    if isinstance(record, Row) and record.field_names() is not None:
        return record.field_names()
    if isinstance(record, dict):
        return [str(k) for k in record]
    if isinstance(record, (tuple, Row)):
        return [f"f{i}" for i in range(len(record))]
    return ["value"]


def _as_tuple(record: Any, names: list[str]) -> tuple:
    if isinstance(record, Row) and record.field_names() is not None:
        d = dict(zip(record.field_names(), record))
        return tuple(d.get(n) for n in names)
    if isinstance(record, dict):
        return tuple(record.get(n) for n in names)
    if isinstance(record, (tuple, Row)):
        return tuple(record)
    return (record,)


def read_with_function(reader: Any, uid: str, fn: KeyedStateReaderFunction, key_type_info: Any,
                       output_type: Any) -> Any:
    """The DataFrame of what ``fn`` emits over every key of operator ``uid``."""
    ctx = _open(fn)  # on the driver too: which states, checked against the savepoint before any task runs
    if not ctx.descriptors:
        raise ValueError(f"{type(fn).__name__}.open(ctx) registered no state (ctx.get_state(...) and friends)")
    kinds = plan.keyed_state_kinds(reader.metadata, uid)
    for name, d in ctx.descriptors.items():
        kind = kinds.get(name)
        if kind is None:
            raise StateNotFoundError(f"operator {uid!r} has no keyed state {name!r}; its keyed states: "
                                     f"{', '.join(sorted(n for n in kinds if not n.startswith('_'))) or 'none'}")
        if ttl.base_kind(kind) not in (d.kind, "accumulators"):
            raise TypeError(f"state {name!r} of operator {uid!r} is {ttl.base_kind(kind)} state, registered "
                            f"with {type(d).__name__}")
    from .reader import _ttl_drop

    drops = {n: _ttl_drop(d) for n, d in ctx.descriptors.items()}
    splits = reader._keyed_splits(uid)
    if output_type is not None and hasattr(output_type, "get_field_names"):
        names = output_type.get_field_names()
        columns = [types.of_type_info(t) for t in output_type.get_field_types()]
    else:
        sample = reader._sample(splits, lambda s: run_split(fn, s, drops))
        names = _fields(sample[0]) if sample else ["value"]
        rows = [_as_tuple(r, names) for r in sample]
        if output_type is not None:  # one declared type for a single column
            columns = [types.of_type_info(output_type)]
        else:
            columns = [types.infer([r[i] for r in rows if i < len(r)], n) for i, n in enumerate(names)]

    def parts(split: Split) -> Iterator[list[tuple]]:
        chunk: list[tuple] = []
        for record in run_split(fn, split, drops):
            chunk.append(_as_tuple(record, names))
            if len(chunk) >= 4096:
                yield chunk
                chunk = []
        if chunk:
            yield chunk

    return reader._frame(splits, names, columns, f"{type(fn).__name__} over operator {uid!r}", parts)


__all__ = ["Collector", "KeyedStateReaderFunction", "ReaderContext", "ReaderRuntimeContext"]
