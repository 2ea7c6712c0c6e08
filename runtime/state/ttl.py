"""State time-to-live (``StateTtlConfig``): keyed state whose values expire, on either backend.

As in Flink, a TTL state is a *decorator* over the backend's ordinary state: it stores each user
value together with the processing time (ms) it was last written (``TtlValue``), and on every access
decides whether the value is still alive. Per state type (Flink's units of expiry):

- value, reducing, aggregating: one timestamp per key;
- list: one per element (an element expires on its own);
- map: one per entry.

The decorators are chosen by ``KeyedStateBackend.get_*_state`` only when the descriptor has an
enabled TTL, so states without TTL keep their code path and cost unchanged. A TTL state's table has
its own *kind* (``"value+ttl"``, ...): its entries are ``(value, timestamp)`` pairs, and a
restore into a descriptor without TTL (or the other way round) is refused instead of misread.

Snapshots carry the pairs, so restored state keeps its age in either backend (canonical chunks hold
plain ``(value, timestamp)`` tuples). Expiry is measured on the wall clock, as Flink's
``TtlTimeCharacteristic.ProcessingTime``; the backend's ``ttl_clock`` can be replaced (tests).

Cleanup of expired values, besides dropping one when it is read:

- ``cleanup_full_snapshot()``: full snapshots leave expired values out (``drop_expired``);
- heap backend, ``cleanup_incrementally(n, ...)`` (by default n=5 while cleanup in background is on):
  ``n`` keys per access of the state, of a cursor going round the table, checked in batches
  (``IncrementalCleanup``). ``run_cleanup_for_every_record`` is accepted but the check runs on state
  access only: the operators do not tell the backend about records that touch no state.
- RocksDB backend, ``cleanup_in_rocksdb_compact_filter(...)`` (the default there): rocksdict exposes no
  compaction filter to Python, so it is done like the incremental cleanup, in batches over the column
  family every so many accesses (``rocksdb.RocksTtlCleanup``).
"""

from __future__ import annotations

import copy
import time
from typing import Any, Callable, Iterable

from ..api import state as api_state
from ..keygroups import group_entries

TTL_SUFFIX = "+ttl"


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class TtlValue(tuple):
    """``TtlValue((user value, last-access timestamp in ms))``. A tuple subclass so the RocksDB
    codec can give it a compact encoding (``codec.encode_value``: timestamp + the value's own
    encoding); it pickles as a plain tuple, so snapshots and savepoints do not depend on this
    class. Built from one tuple (no ``__new__`` of its own: construction stays in C, ~3x faster)."""

    __slots__ = ()

    def __reduce__(self) -> tuple:
        return tuple, (tuple(self),)

    def __deepcopy__(self, memo: dict) -> "TtlValue":
        return TtlValue((copy.deepcopy(self[0], memo), self[1]))


# -- kinds ---------------------------------------------------------------------------------------
def ttl_kind(kind: str) -> str:
    return kind + TTL_SUFFIX


def is_ttl_kind(kind: str) -> bool:
    return kind.endswith(TTL_SUFFIX)


def base_kind(kind: str) -> str:
    """``"list+ttl"`` -> ``"list"``: how a TTL table's entries are laid out is its base kind's way."""
    return kind[: -len(TTL_SUFFIX)] if kind.endswith(TTL_SUFFIX) else kind


def table_kind(descriptor: Any) -> str:
    """The kind of table a descriptor's state lives in (with or without TTL)."""
    get = getattr(descriptor, "get_ttl_config", None)
    return ttl_kind(descriptor.kind) if get is not None and get() is not None else descriptor.kind


# -- the decision logic (pure) --------------------------------------------------------------------
class TtlPolicy:
    """What a ``StateTtlConfig`` means for one state, in the terms the decorators use."""

    __slots__ = ("ttl", "update_on_read", "return_expired", "in_full_snapshot", "incremental_size",
                 "rocksdb_cleanup")

    def __init__(self, ttl: int, update_on_read: bool = False, return_expired: bool = False,
                 in_full_snapshot: bool = False, incremental_size: int = 0, rocksdb_cleanup: bool = False):
        self.ttl = ttl
        self.update_on_read = update_on_read
        self.return_expired = return_expired
        self.in_full_snapshot = in_full_snapshot
        self.incremental_size = incremental_size  # heap: keys checked per state access (0: none)
        self.rocksdb_cleanup = rocksdb_cleanup  # RocksDB: background cleanup on

    @classmethod
    def of(cls, config: Any) -> "TtlPolicy":
        from ..api.state import StateTtlConfig

        strategies = config.get_cleanup_strategies()
        incremental = strategies.get_incremental_cleanup_strategy()
        return cls(
            ttl=config.ttl_milliseconds(),
            update_on_read=config.get_update_type() is StateTtlConfig.UpdateType.OnReadAndWrite,
            return_expired=(config.get_state_visibility()
                            is StateTtlConfig.StateVisibility.ReturnExpiredIfNotCleanedUp),
            in_full_snapshot=strategies.in_full_snapshot(),
            incremental_size=incremental.get_cleanup_size() if incremental is not None else 0,
            rocksdb_cleanup=strategies.get_rocksdb_compact_filter_cleanup_strategy() is not None,
        )

    def expired(self, timestamp: int, now: int) -> bool:
        """Flink's rule: a value written at ``t`` is expired from ``t + ttl`` on. (The decorators and
        cleanups below inline it as ``timestamp + ttl <= now`` / ``timestamp > now - ttl``: per record.)"""
        return timestamp + self.ttl <= now


def drop_expired(kind: str, chunk: dict, ttl: int, now: int) -> dict:
    """A canonical chunk (key -> stored entry) without what has expired at ``now``: keys whose
    value expired, list elements and map entries one by one; keys left with nothing go too."""
    base = base_kind(kind)
    limit = now - ttl  # alive: timestamp > now - ttl
    out: dict = {}
    if base == "list":
        for k, pairs in chunk.items():
            alive = [p for p in pairs if p[1] > limit]
            if alive:
                out[k] = alive if len(alive) < len(pairs) else pairs
    elif base == "map":
        for k, entries in chunk.items():
            alive = {uk: p for uk, p in entries.items() if p[1] > limit}
            if alive:
                out[k] = alive if len(alive) < len(entries) else entries
    else:
        for k, p in chunk.items():
            if p[1] > limit:
                out[k] = p
    return out


class FrozenTtlView:
    """A frozen heap table seen through ``drop_expired`` (for ``cleanup_full_snapshot``): the
    snapshot writer asks for keys, then chunks of them. Filtered once, in the writer's thread."""

    def __init__(self, frozen: Any, kind: str, ttl: int, now: int):
        self.frozen = frozen
        self.kind = kind
        self.ttl = ttl
        self.now = now
        self._alive: dict | None = None

    def _data(self) -> dict:
        if self._alive is None:
            self._alive = drop_expired(self.kind, self.frozen.chunk(self.frozen.keys()), self.ttl, self.now)
        return self._alive

    def keys(self) -> list:
        return list(self._data().keys())

    def chunk(self, keys: list) -> dict:
        data = self._data()
        return {k: data[k] for k in keys}

    def grouped(self, max_parallelism: int) -> Any:
        return group_entries(self._data(), max_parallelism)


class IncrementalCleanup:
    """Flink's incremental cleanup for the heap backend: a cursor over the table's keys checks
    ``size`` keys per access of the state and removes what has expired. Run in batches: every
    ``EVERY`` accesses it checks ``EVERY * size`` keys (the same rate, a fraction of the Python
    calls). The cursor walks a list of the keys taken when it starts a round (a dict cannot be
    iterated while it changes); keys added since are seen in the next round."""

    EVERY = 32

    __slots__ = ("table", "kind", "policy", "clock", "size", "every", "keys", "pos")

    def __init__(self, table: Any, kind: str, policy: TtlPolicy, clock: Callable[[], int]):
        self.table = table
        self.kind = base_kind(kind)
        self.policy = policy
        self.clock = clock
        self.size = policy.incremental_size
        self.every = self.EVERY  # accesses between two runs (the states count them down)
        self.keys: list = []
        self.pos = 0

    def run(self) -> None:
        table, limit = self.table, self.clock() - self.policy.ttl
        todo = self.every * self.size
        restarted = False
        while todo > 0:
            if self.pos >= len(self.keys):
                if restarted:  # each key at most once per run
                    return
                self.keys, self.pos, restarted = list(table.keys()), 0, True
                if not self.keys:
                    return
            chunk = self.keys[self.pos : self.pos + todo]
            self.pos += len(chunk)
            todo -= len(chunk)
            if self.kind not in ("list", "map") and table.delta is None:  # the common case, in one pass
                base = table.base
                for key in [k for k in chunk if (p := base.get(k)) is not None and p[1] <= limit]:
                    del base[key]
                continue
            for key in chunk:
                self._check(key, limit)

    def _check(self, key: Any, limit: int) -> None:
        table = self.table
        stored = table.get(key)
        if stored is None:
            return
        if self.kind == "list":
            alive = [p for p in stored if p[1] > limit]
            if not alive:
                table.remove(key)
            elif len(alive) < len(stored):
                table.put(key, alive)
        elif self.kind == "map":
            alive = {uk: p for uk, p in stored.items() if p[1] > limit}
            if not alive:
                table.remove(key)
            elif len(alive) < len(stored):
                table.put(key, alive)
        elif stored[1] <= limit:
            table.remove(key)


# -- the state decorators ---------------------------------------------------------------------------
class _TtlState:
    """What every TTL state shares: the policy, the backend's clock, and the background cleanup,
    counted down on every access and run every ``cleanup.every`` accesses."""

    __slots__ = ("backend", "name", "ttl", "update_on_read", "return_expired", "cleanup", "countdown")

    def __init__(self, backend: Any, name: str, policy: TtlPolicy, cleanup: Any):
        self.backend = backend
        self.name = name
        self.ttl = policy.ttl
        self.update_on_read = policy.update_on_read
        self.return_expired = policy.return_expired
        self.cleanup = cleanup
        self.countdown = cleanup.every if cleanup is not None else 0

    def _accessed(self) -> None:
        """Every access: the background cleanup's turn every ``every`` accesses (Flink runs it on access)."""
        if self.cleanup is not None:
            self.countdown -= 1
            if self.countdown <= 0:
                self.countdown = self.cleanup.every
                self.cleanup.run()


class _TtlSingleValue(_TtlState):
    """Value, reducing and aggregating state: one ``TtlValue`` per key, on the table directly
    (both backends' tables have get / put / remove)."""

    __slots__ = ("table",)

    def __init__(self, backend, name, policy, cleanup, table):
        super().__init__(backend, name, policy, cleanup)
        self.table = table

    def _get(self) -> tuple[bool, Any]:
        """(visible, value) of the current key: an expired value is removed (and visible only with
        ReturnExpiredIfNotCleanedUp); OnReadAndWrite refreshes a live one."""
        self._accessed()
        key = self.backend.current_key
        stored = self.table.get(key)
        if stored is None:
            return False, None
        now = self.backend.ttl_clock()
        if stored[1] + self.ttl <= now:
            self.table.remove(key)
            return self.return_expired, stored[0]
        if self.update_on_read:
            self.table.put(key, TtlValue((stored[0], now)))
        return True, stored[0]

    def _live(self, now: int) -> Any:
        """The current key's value if alive (what an ``add`` merges into); None if absent or expired."""
        stored = self.table.get(self.backend.current_key)
        if stored is None or stored[1] + self.ttl <= now:
            return None
        return stored[0]

    def clear(self) -> None:
        self._accessed()
        self.table.remove(self.backend.current_key)


class TtlValueState(_TtlSingleValue):
    __slots__ = ("default",)

    def __init__(self, backend, name, policy, cleanup, table, default):
        super().__init__(backend, name, policy, cleanup, table)
        self.default = default

    def value(self) -> Any:
        visible, value = self._get()
        return value if visible else self.default

    def update(self, value: Any) -> None:
        self._accessed()
        if value is None:
            self.table.remove(self.backend.current_key)
        else:
            self.table.put(self.backend.current_key, TtlValue((value, self.backend.ttl_clock())))


class TtlReducingState(_TtlSingleValue):
    __slots__ = ("reduce",)

    def __init__(self, backend, name, policy, cleanup, table, reduce):
        super().__init__(backend, name, policy, cleanup, table)
        self.reduce = reduce

    def get(self) -> Any:
        visible, value = self._get()
        return value if visible else None

    def add(self, value: Any) -> None:
        self._accessed()
        now = self.backend.ttl_clock()
        current = self._live(now)  # an expired value is not merged into (Flink's TtlReduceFunction)
        merged = value if current is None else self.reduce(current, value)
        self.table.put(self.backend.current_key, TtlValue((merged, now)))


class TtlAggregatingState(_TtlSingleValue):
    __slots__ = ("fn",)

    def __init__(self, backend, name, policy, cleanup, table, fn):
        super().__init__(backend, name, policy, cleanup, table)
        self.fn = fn

    def get(self) -> Any:
        visible, acc = self._get()
        return self.fn.get_result(acc) if visible else None

    def add(self, value: Any) -> None:
        self._accessed()
        now = self.backend.ttl_clock()
        acc = self._live(now)
        if acc is None:
            acc = self.fn.create_accumulator()
        self.table.put(self.backend.current_key, TtlValue((self.fn.add(value, acc), now)))


class TtlListState(_TtlState):
    """ListState with TTL over the backend's list state of ``TtlValue`` elements: every element
    has its own timestamp and expires on its own."""

    __slots__ = ("original",)

    def __init__(self, backend, name, policy, cleanup, original):
        super().__init__(backend, name, policy, cleanup)
        self.original = original

    def get(self) -> list:
        self._accessed()
        stored = self.original.get()
        if not stored:
            return []
        now = self.backend.ttl_clock()
        limit = now - self.ttl
        alive = [p for p in stored if p[1] > limit]
        if self.update_on_read and alive:
            self.original.update([TtlValue((p[0], now)) for p in alive])
        elif len(alive) < len(stored):
            self.original.update(alive)  # an empty list clears the key
        return [p[0] for p in (stored if self.return_expired else alive)]

    def _wrap(self, values: Iterable[Any] | None) -> list:
        values = list(values or [])
        if any(v is None for v in values):
            raise ValueError(f"list state {self.name!r}: cannot add None")
        now = self.backend.ttl_clock()
        return [TtlValue((v, now)) for v in values]

    def add(self, value: Any) -> None:
        self._accessed()
        if value is None:
            raise ValueError(f"list state {self.name!r}: cannot add None")
        self.original.add(TtlValue((value, self.backend.ttl_clock())))

    def add_all(self, values: Iterable[Any]) -> None:
        self._accessed()
        self.original.add_all(self._wrap(values))

    def update(self, values: Iterable[Any] | None) -> None:
        self._accessed()
        self.original.update(self._wrap(values))

    def clear(self) -> None:
        self._accessed()
        self.original.clear()

    def __iter__(self):
        return iter(self.get())


class TtlMapState(api_state.MapProtocol, _TtlState):
    """MapState with TTL over the backend's map state of ``TtlValue`` values: every entry has its
    own timestamp and expires on its own."""

    __slots__ = ("original",)

    def __init__(self, backend, name, policy, cleanup, original):
        super().__init__(backend, name, policy, cleanup)
        self.original = original

    def _read(self, key: Any, stored: Any, now: int) -> bool:
        """Whether one stored entry is visible; removes it if expired, refreshes it on read if asked."""
        if stored[1] + self.ttl <= now:
            self.original.remove(key)
            return self.return_expired
        if self.update_on_read:
            self.original.put(key, TtlValue((stored[0], now)))
        return True

    def get(self, key: Any) -> Any:
        self._accessed()
        stored = self.original.get(key)
        if stored is None or not self._read(key, stored, self.backend.ttl_clock()):
            return None
        return stored[0]

    def contains(self, key: Any) -> bool:
        self._accessed()
        stored = self.original.get(key)
        return stored is not None and self._read(key, stored, self.backend.ttl_clock())

    def put(self, key: Any, value: Any) -> None:
        self._accessed()
        self.original.put(key, TtlValue((value, self.backend.ttl_clock())))

    def put_all(self, entries: dict) -> None:
        self._accessed()
        now = self.backend.ttl_clock()
        self.original.put_all({k: TtlValue((v, now)) for k, v in entries.items()})

    def remove(self, key: Any) -> None:
        self._accessed()
        self.original.remove(key)

    def items(self) -> list:
        self._accessed()
        now = self.backend.ttl_clock()
        return [(key, stored[0]) for key, stored in self.original.items() if self._read(key, stored, now)]

    def keys(self) -> list:
        return [k for k, _ in self.items()]

    def values(self) -> list:
        return [v for _, v in self.items()]

    def is_empty(self) -> bool:
        self._accessed()
        now = self.backend.ttl_clock()
        visible = False
        for key, stored in self.original.items():
            if stored[1] + self.ttl <= now:
                self.original.remove(key)
                visible = visible or self.return_expired
            else:
                visible = True  # is_empty reads no value: no refresh on read
        return not visible

    def clear(self) -> None:
        self._accessed()
        self.original.clear()

    def __iter__(self):
        return iter(self.keys())

    def __getitem__(self, key: Any) -> Any:
        return self.get(key)

    def __setitem__(self, key: Any, value: Any) -> None:
        self.put(key, value)

    def __delitem__(self, key: Any) -> None:
        self.remove(key)

    def __contains__(self, key: Any) -> bool:
        return self.contains(key)


def create_ttl_state(backend: Any, descriptor: Any, config: Any) -> Any:
    """The TTL decorator of ``descriptor``'s state on ``backend`` (``get_*_state`` with a TTL)."""
    kind = descriptor.kind
    name = descriptor.name
    policy = TtlPolicy.of(config)
    table = backend.table(name, ttl_kind(kind))
    backend.ttl_policies[name] = policy
    cleanup = backend.ttl_cleanup(name, table, policy)
    if kind == "value":
        return TtlValueState(backend, name, policy, cleanup, table, descriptor.default)
    if kind == "list":
        return TtlListState(backend, name, policy, cleanup, backend.list_state(backend, table, name))
    if kind == "map":
        return TtlMapState(backend, name, policy, cleanup, backend.map_state(backend, table, name))
    if kind == "reducing":
        return TtlReducingState(backend, name, policy, cleanup, table, descriptor.reducer())
    if kind == "aggregating":
        return TtlAggregatingState(backend, name, policy, cleanup, table, descriptor.agg_function)
    raise TypeError(f"operator {backend.operator!r}: state {name!r} of kind {kind!r} cannot have a TTL")


# The PyFlink state interfaces the TTL decorators implement (see heap.py).
api_state.ValueState.register(TtlValueState)
api_state.ListState.register(TtlListState)
api_state.MapState.register(TtlMapState)
api_state.ReducingState.register(TtlReducingState)
api_state.AggregatingState.register(TtlAggregatingState)
