"""The HashMap state backend: keyed state in Python dicts, scoped to the current key.

The operator sets ``current_key`` before handing a record to user code; every
state object reads and writes the entry of that key in its table. Tables are
copy-on-write (``tables.StateTable``), so a snapshot freezes them in O(1) and
is written by another thread while processing goes on.
"""

from __future__ import annotations

import pickle
from typing import Any, Iterable

from ..api import state as api_state
from ..api.state import StateDescriptor
from . import ttl
from .tables import AccumulatorTable, StateTable


class StateDefinitionError(ValueError):
    pass


class UnpicklableStateError(TypeError):
    """A value that could never be checkpointed, refused where the user's code stores it."""


# Value types every checkpoint can write; anything else is pickled once per state and type when first
# stored, so that a value which cannot be checkpointed (a lock, a generator, a lambda, an open file) fails
# at update(), naming the state, not at the next checkpoint far from the code that stored it. (A later
# value of an already checked type is not checked again: the checkpoint still names its state then.)
_PLAIN = frozenset({int, float, str, bytes, bool})


class _KeyedState:
    __slots__ = ("backend", "table", "name", "_types")

    def __init__(self, backend: "HashMapKeyedStateBackend", table: StateTable, name: str):
        self.backend = backend
        self.table = table
        self.name = name
        self._types = set(_PLAIN)

    def clear(self) -> None:
        self.table.remove(self.backend.current_key)

    def _check_all(self, values: Iterable[Any]) -> None:
        types = self._types
        for value in values:
            if type(value) not in types:
                self._check(value)

    def _check(self, value: Any) -> None:
        try:
            pickle.dumps(value, protocol=5)
        except Exception as e:  # noqa: BLE001 - pickle raises many kinds
            raise UnpicklableStateError(
                f"state {self.name!r}: a {type(value).__name__} value cannot be pickled, so no checkpoint could "
                f"hold it ({type(e).__name__}: {e}); store plain data (numbers, strings, lists, dicts, "
                f"dataclasses) instead") from None
        self._types.add(type(value))


class ValueState(_KeyedState):
    __slots__ = ("default",)

    def __init__(self, backend, table, name, default):
        super().__init__(backend, table, name)
        self.default = default

    def value(self) -> Any:
        return self.table.get(self.backend.current_key, self.default)

    def update(self, value: Any) -> None:
        if value is None:
            self.table.remove(self.backend.current_key)
        else:
            if type(value) not in self._types:
                self._check(value)
            self.table.put(self.backend.current_key, value)


class HeapValueState(ValueState):
    """ValueState over a copy-on-write ``StateTable``: reads and writes go to the table's dicts
    directly while no snapshot is in flight (one Python call per access instead of two: the
    per-record path of a KeyedProcessFunction does little else)."""

    __slots__ = ()

    def value(self) -> Any:
        table = self.table
        if table.delta is None:
            return table.base.get(self.backend.current_key, self.default)
        return table.get(self.backend.current_key, self.default)

    def update(self, value: Any) -> None:
        table = self.table
        if type(value) not in self._types and value is not None:
            self._check(value)
        if value is None:
            table.remove(self.backend.current_key)
        elif table.delta is None:
            table.base[self.backend.current_key] = value
        else:
            table.delta[self.backend.current_key] = value


class ListState(_KeyedState):
    __slots__ = ()

    def get(self) -> list:
        return self.table.get(self.backend.current_key) or []

    def add(self, value: Any) -> None:
        if value is None:
            raise ValueError(f"list state {self.name!r}: cannot add None")
        if type(value) not in self._types:
            self._check(value)
        key = self.backend.current_key
        current = self.table.get(key)
        if current is None:
            self.table.put(key, [value])
        else:
            current.append(value)

    def add_all(self, values: Iterable[Any]) -> None:
        values = list(values)
        if any(v is None for v in values):
            raise ValueError(f"list state {self.name!r}: cannot add None")
        self._check_all(values)
        if not values:
            return
        key = self.backend.current_key
        current = self.table.get(key)
        if current is None:
            self.table.put(key, values)
        else:
            current.extend(values)

    def update(self, values: Iterable[Any] | None) -> None:
        values = list(values or [])
        if any(v is None for v in values):
            raise ValueError(f"list state {self.name!r}: cannot add None")
        self._check_all(values)
        if values:
            self.table.put(self.backend.current_key, values)
        else:
            self.clear()


class MapState(api_state.MapProtocol, _KeyedState):
    __slots__ = ()

    def _map(self, create: bool = False) -> dict | None:
        key = self.backend.current_key
        m = self.table.get(key)
        if m is None and create:
            m = {}
            self.table.put(key, m)
        return m

    def get(self, key: Any) -> Any:
        m = self._map()
        return None if m is None else m.get(key)

    def put(self, key: Any, value: Any) -> None:
        if type(value) not in self._types or type(key) not in self._types:
            self._check_all((key, value))
        self._map(create=True)[key] = value  # type: ignore[index]

    def put_all(self, entries: dict) -> None:
        self._check_all(entries.keys())
        self._check_all(entries.values())
        self._map(create=True).update(entries)  # type: ignore[union-attr]

    def contains(self, key: Any) -> bool:
        m = self._map()
        return m is not None and key in m

    def remove(self, key: Any) -> None:
        m = self._map()
        if m is not None:
            m.pop(key, None)
            if not m:
                self.clear()

    def keys(self) -> list:
        m = self._map()
        return [] if m is None else list(m.keys())

    def values(self) -> list:
        m = self._map()
        return [] if m is None else list(m.values())

    def items(self) -> list:
        m = self._map()
        return [] if m is None else list(m.items())

    def is_empty(self) -> bool:
        m = self._map()
        return not m

    def __iter__(self):
        return iter(self.keys())


class ReducingState(_KeyedState):
    __slots__ = ("reduce",)

    def __init__(self, backend, table, name, reduce):
        super().__init__(backend, table, name)
        self.reduce = reduce

    def get(self) -> Any:
        return self.table.get(self.backend.current_key)

    def add(self, value: Any) -> None:
        key = self.backend.current_key
        current = self.table.get(key)
        value = value if current is None else self.reduce(current, value)
        if type(value) not in self._types:
            self._check(value)
        self.table.put(key, value)


class AggregatingState(_KeyedState):
    __slots__ = ("fn",)

    def __init__(self, backend, table, name, fn):
        super().__init__(backend, table, name)
        self.fn = fn

    def get(self) -> Any:
        acc = self.table.get(self.backend.current_key)
        return None if acc is None else self.fn.get_result(acc)

    def add(self, value: Any) -> None:
        key = self.backend.current_key
        acc = self.table.get(key)
        if acc is None:
            acc = self.fn.create_accumulator()
        acc = self.fn.add(value, acc)
        if type(acc) not in self._types:
            self._check(acc)
        self.table.put(key, acc)


class KeyedStateBackend:
    """What both keyed state backends share: one table per state name (one kind per name),
    and the PyFlink ``get_*_state`` calls. A backend says how to make a table and which
    list/map state classes it uses (the heap ones mutate in place; RocksDB's must not)."""

    value_state: Any = ValueState  # the ValueState / ListState / MapState classes of the backend
    list_state: Any = None
    map_state: Any = None

    def __init__(self, operator: str, max_parallelism: int, key_groups: range):
        self.operator = operator
        self.max_parallelism = max_parallelism
        self.key_groups = key_groups
        self.current_key: Any = None
        self.tables: dict[str, Any] = {}
        self.kinds: dict[str, str] = {}
        # State TTL (state/ttl.py): the clock TTL is measured on (processing time, ms; tests replace it),
        # the policy of each TTL state by name, and its background cleanup (one per table).
        self.ttl_clock = ttl.wall_clock_ms
        self.ttl_policies: dict[str, ttl.TtlPolicy] = {}
        self.ttl_cleanups: dict[str, Any] = {}
        # Queryable state (StateDescriptor.set_queryable): name -> its descriptor, registered when the
        # function creates the state; the slot reports new names to the job manager and answers lookups.
        self.queryable: dict[str, Any] = {}

    def get_current_key(self) -> Any:
        return self.current_key

    def new_table(self, name: str, kind: str) -> Any:
        raise NotImplementedError

    def table(self, name: str, kind: str) -> Any:
        """The table of state ``name``, created on first use; one name is one kind of state."""
        known = self.kinds.setdefault(name, kind)
        if known != kind and ttl.base_kind(known) == ttl.base_kind(kind):
            with_ttl = "with" if ttl.is_ttl_kind(known) else "without"
            raise StateDefinitionError(
                f"operator {self.operator!r}: {ttl.base_kind(kind)} state {name!r} was created {with_ttl} a TTL "
                f"and cannot be used {'without' if with_ttl == 'with' else 'with'} one: every descriptor of a "
                f"state needs the same enable_time_to_live setting, also across a restore (as in Flink)"
            )
        if known != kind:
            raise StateDefinitionError(
                f"operator {self.operator!r}: state {name!r} is a {known} state, cannot be used as a {kind} state"
            )
        table = self.tables.get(name)
        if table is None:
            table = self.tables[name] = self.new_table(name, kind)
        return table

    def _for(self, d: Any, kind: str) -> Any:
        self._check(d, kind)
        return self.table(d.name, kind)

    def _check(self, d: Any, kind: str) -> None:
        if not isinstance(d, StateDescriptor) or d.kind != kind:
            method = "get_state" if kind == "value" else f"get_{kind}_state"
            raise TypeError(f"operator {self.operator!r}: {method} needs a {kind.capitalize()}StateDescriptor, got {d!r}")

    def _ttl_state(self, d: Any, kind: str) -> Any:
        """The TTL decorator of the state if its descriptor has an enabled TTL, else None (then the
        ordinary state class is used: no TTL, no cost)."""
        self._check(d, kind)
        if d.queryable_state_name is not None:
            self.queryable.setdefault(d.queryable_state_name, d)
        config = d.get_ttl_config()
        return None if config is None else ttl.create_ttl_state(self, d, config)

    def get_state(self, d: Any) -> ValueState:
        state = self._ttl_state(d, "value")
        return state if state is not None else self.value_state(self, self._for(d, "value"), d.name, d.default)

    def get_list_state(self, d: Any) -> Any:
        state = self._ttl_state(d, "list")
        return state if state is not None else self.list_state(self, self._for(d, "list"), d.name)

    def get_map_state(self, d: Any) -> Any:
        state = self._ttl_state(d, "map")
        return state if state is not None else self.map_state(self, self._for(d, "map"), d.name)

    def get_reducing_state(self, d: Any) -> ReducingState:
        state = self._ttl_state(d, "reducing")
        return state if state is not None else ReducingState(self, self._for(d, "reducing"), d.name, d.reducer())

    def get_aggregating_state(self, d: Any) -> AggregatingState:
        state = self._ttl_state(d, "aggregating")
        if state is not None:
            return state
        return AggregatingState(self, self._for(d, "aggregating"), d.name, d.agg_function)

    def ttl_cleanup(self, name: str, table: Any, policy: "ttl.TtlPolicy") -> Any:
        """The background cleanup a TTL state runs on each access (None: none); one per table."""
        return None

    def accumulators(self, name: str) -> Any:
        """The table of a built-in rolling aggregation (sum/min/max)."""
        return self.table(name, "accumulators")

    def raw_table(self, name: str) -> Any:
        """A plain key -> value table for built-in operators (reduce, object aggregates)."""
        return self.table(name, "value")

    def drop_table(self, name: str) -> None:
        """Forget a state entirely (a fired window's tables). A snapshot in flight keeps its frozen copy."""
        self.tables.pop(name, None)
        self.kinds.pop(name, None)
        self.ttl_policies.pop(name, None)
        self.ttl_cleanups.pop(name, None)


class HashMapKeyedStateBackend(KeyedStateBackend):
    """All keyed state of one operator subtask: one copy-on-write table per state name."""

    value_state = HeapValueState
    list_state = ListState
    map_state = MapState

    def new_table(self, name: str, kind: str) -> StateTable | AccumulatorTable:
        return AccumulatorTable() if kind == "accumulators" else StateTable()

    # -- snapshots (the sync part; see state.snapshot for the async part) -----------
    def snapshot(self, checkpoint_id: int, full: bool = False) -> dict[str, tuple[str, Any]]:
        return self.freeze()

    def freeze(self) -> dict[str, tuple[str, Any]]:
        frozen = {name: (self.kinds[name], table.freeze()) for name, table in self.tables.items()}
        if self.ttl_policies:  # cleanup_full_snapshot: the writer leaves out what has expired by now
            now = self.ttl_clock()
            for name, policy in self.ttl_policies.items():
                if policy.in_full_snapshot and name in frozen:
                    kind, table = frozen[name]
                    frozen[name] = (kind, ttl.FrozenTtlView(table, kind, policy.ttl, now))
        return frozen

    def ttl_cleanup(self, name: str, table: Any, policy: "ttl.TtlPolicy") -> Any:
        """``cleanup_incrementally``: a few keys per state access (Flink's heap backend does the same)."""
        if policy.incremental_size <= 0:
            return None
        cleanup = self.ttl_cleanups.get(name)
        if cleanup is None or cleanup.table is not table:
            cleanup = self.ttl_cleanups[name] = ttl.IncrementalCleanup(table, self.kinds[name], policy,
                                                                       lambda: self.ttl_clock())
        return cleanup

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        pass

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        pass

    def dispose(self) -> None:
        self.tables.clear()

    def thaw(self) -> None:
        for table in self.tables.values():
            table.thaw()

    def restore_chunk(self, name: str, kind: str, chunk: Any) -> None:
        self.table(name, kind).load(chunk)

    def register_table(self, name: str, kind: str, table: Any) -> None:
        """Put a table an operator laid out itself (a columnar window's column: a view over arrays
        the operator shares between tables) under ``name``, replacing what was there. It is
        snapshotted like any table: ``freeze()`` / ``thaw()``, and its frozen form is what
        ``state.snapshot`` writes for ``kind``."""
        self.kinds[name] = kind
        self.tables[name] = table


# The PyFlink state interfaces these classes implement (isinstance(state, ValueState) in user code).
api_state.ValueState.register(ValueState)
api_state.ListState.register(ListState)
api_state.MapState.register(MapState)
api_state.ReducingState.register(ReducingState)
api_state.AggregatingState.register(AggregatingState)
