"""State descriptors, named as in PyFlink: a name, and what the state needs to be created.

A descriptor says *which* state a function wants; the state backend of the
running task creates (or restores) it. Names are unique per operator: two
descriptors with one name but different kinds are a job definition error.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from enum import Enum
from typing import Any, Callable, Generic, Iterable


class StateDescriptor:
    kind = "state"

    def __init__(self, name: str, type_info: Any = None):
        if not isinstance(name, str) or not name:
            raise ValueError(f"{type(self).__name__} needs a non-empty name, got {name!r}")
        self.name = name
        self.type_info = type_info  # accepted for PyFlink compatibility; values are pickled either way
        self._ttl_config: StateTtlConfig | None = None
        self.queryable_state_name: str | None = None

    def get_name(self) -> str:
        return self.name

    def set_queryable(self, queryable_state_name: str) -> "StateDescriptor":
        """Flink's ``setQueryable``: the job manager's REST API answers lookups of this keyed state by
        key while the job runs (``GET /v1/state/<queryable_state_name>?key=...``; see
        ``QueryableStateClient``). Names are unique per job."""
        if not isinstance(queryable_state_name, str) or not queryable_state_name.strip():
            raise ValueError(f"{type(self).__name__}({self.name!r}).set_queryable() needs a non-empty name, "
                             f"got {queryable_state_name!r}")
        if not all(c.isalnum() or c in "-_." for c in queryable_state_name):
            raise ValueError(f"{type(self).__name__}({self.name!r}).set_queryable({queryable_state_name!r}): a "
                             f"queryable state name is a URL path segment: letters, digits, '-', '_' and '.'")
        self.queryable_state_name = queryable_state_name
        return self

    def is_queryable(self) -> bool:
        return self.queryable_state_name is not None

    def get_queryable_state_name(self) -> str | None:
        return self.queryable_state_name

    def enable_time_to_live(self, ttl_config: "StateTtlConfig") -> None:
        """State time-to-live (PyFlink's call): values not written (or read, with ``OnReadAndWrite``)
        for ``ttl`` of processing time expire; see ``StateTtlConfig``."""
        if not isinstance(ttl_config, StateTtlConfig):
            raise TypeError(f"{type(self).__name__}({self.name!r}).enable_time_to_live() needs a StateTtlConfig "
                            f"(StateTtlConfig.new_builder(Time.seconds(...)).build()), got {ttl_config!r}")
        self._ttl_config = ttl_config

    def get_ttl_config(self) -> "StateTtlConfig | None":
        """The TTL the state is created with, None without one (or with ``UpdateType.Disabled``)."""
        c = self._ttl_config
        return c if c is not None and c.is_enabled() else None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class ValueStateDescriptor(StateDescriptor):
    kind = "value"

    def __init__(self, name: str, value_type_info: Any = None, default: Any = None):
        super().__init__(name, value_type_info)
        self.default = default


class ListStateDescriptor(StateDescriptor):
    kind = "list"

    def __init__(self, name: str, elem_type_info: Any = None):
        super().__init__(name, elem_type_info)


class MapStateDescriptor(StateDescriptor):
    kind = "map"

    def __init__(self, name: str, key_type_info: Any = None, value_type_info: Any = None):
        super().__init__(name, (key_type_info, value_type_info))


class ReducingStateDescriptor(StateDescriptor):
    kind = "reducing"

    def __init__(self, name: str, reduce_function: Any, type_info: Any = None):
        super().__init__(name, type_info)
        fn = getattr(reduce_function, "reduce", reduce_function)
        if not callable(fn):
            raise TypeError(f"ReducingStateDescriptor({name!r}) needs a ReduceFunction or a callable, got {reduce_function!r}")
        self.reduce_function = reduce_function

    def reducer(self) -> Callable[[Any, Any], Any]:
        return getattr(self.reduce_function, "reduce", self.reduce_function)


class AggregatingStateDescriptor(StateDescriptor):
    kind = "aggregating"

    def __init__(self, name: str, agg_function: Any, state_type_info: Any = None):
        super().__init__(name, state_type_info)
        for method in ("create_accumulator", "add", "get_result"):
            if not callable(getattr(agg_function, method, None)):
                raise TypeError(
                    f"AggregatingStateDescriptor({name!r}) needs an AggregateFunction with {method}(), got {agg_function!r}"
                )
        self.agg_function = agg_function


def _milliseconds(ttl: Any, call: str) -> int:
    """A TTL as whole milliseconds: PyFlink passes ``Time`` (Flink 1.x) or ``Duration`` (2.x)."""
    to_ms = getattr(ttl, "to_milliseconds", None)
    ms = to_ms() if callable(to_ms) else ttl
    if isinstance(ms, bool) or not isinstance(ms, int) or ms <= 0:
        raise ValueError(f"{call} needs a positive Time (e.g. Time.seconds(10)), got {ttl!r}")
    return ms


class StateTtlConfig:
    """Time-to-live of keyed state, as PyFlink's ``pyflink.datastream.state.StateTtlConfig``::

        ttl_config = StateTtlConfig.new_builder(Time.seconds(1)) \\
            .set_update_type(StateTtlConfig.UpdateType.OnCreateAndWrite) \\
            .set_state_visibility(StateTtlConfig.StateVisibility.NeverReturnExpired) \\
            .build()
        descriptor.enable_time_to_live(ttl_config)

    Each value (each list element, each map entry) carries the processing time (wall clock, ms)
    it was last written (or read, with ``OnReadAndWrite``); it expires ``ttl`` after that. An
    expired value is removed when it is next accessed, from full snapshots with
    ``cleanup_full_snapshot()``, and in the background (a few entries per state access) unless
    ``disable_cleanup_in_background()``. The timestamps are part of checkpoints and savepoints, so
    restored state keeps its age."""

    class UpdateType(Enum):
        """When the last-access timestamp of a value is refreshed (which prolongs its life)."""

        Disabled = 0  # no TTL: the state never expires
        OnCreateAndWrite = 1  # when the value is created and on every write
        OnReadAndWrite = 2  # also on every read

    class StateVisibility(Enum):
        """Whether a read may still see a value that has expired but is not cleaned up yet."""

        ReturnExpiredIfNotCleanedUp = 0
        NeverReturnExpired = 1

    class TtlTimeCharacteristic(Enum):
        """The time TTL is measured in: processing time only, as in Flink."""

        ProcessingTime = 0

    def __init__(self, update_type: "StateTtlConfig.UpdateType", state_visibility: "StateTtlConfig.StateVisibility",
                 ttl_time_characteristic: "StateTtlConfig.TtlTimeCharacteristic", ttl: Any,
                 cleanup_strategies: "StateTtlConfig.CleanupStrategies"):
        for value, enum, what in ((update_type, StateTtlConfig.UpdateType, "update_type"),
                                  (state_visibility, StateTtlConfig.StateVisibility, "state_visibility"),
                                  (ttl_time_characteristic, StateTtlConfig.TtlTimeCharacteristic,
                                   "ttl_time_characteristic")):
            if not isinstance(value, enum):
                raise TypeError(f"StateTtlConfig: {what} must be a StateTtlConfig.{enum.__name__}, got {value!r}")
        _milliseconds(ttl, "StateTtlConfig.new_builder()")
        self._update_type = update_type
        self._state_visibility = state_visibility
        self._ttl_time_characteristic = ttl_time_characteristic
        self._ttl = ttl
        self._cleanup_strategies = cleanup_strategies

    @staticmethod
    def new_builder(ttl: Any) -> "StateTtlConfig.Builder":
        return StateTtlConfig.Builder(ttl)

    def get_update_type(self) -> "StateTtlConfig.UpdateType":
        return self._update_type

    def get_state_visibility(self) -> "StateTtlConfig.StateVisibility":
        return self._state_visibility

    def get_ttl(self) -> Any:
        return self._ttl

    def get_ttl_time_characteristic(self) -> "StateTtlConfig.TtlTimeCharacteristic":
        return self._ttl_time_characteristic

    def is_enabled(self) -> bool:
        return self._update_type is not StateTtlConfig.UpdateType.Disabled

    def get_cleanup_strategies(self) -> "StateTtlConfig.CleanupStrategies":
        return self._cleanup_strategies

    def ttl_milliseconds(self) -> int:
        return _milliseconds(self._ttl, "StateTtlConfig")

    def __repr__(self) -> str:
        return (f"StateTtlConfig<update_type={self._update_type}, state_visibility={self._state_visibility}, "
                f"ttl_time_characteristic={self._ttl_time_characteristic}, ttl={self._ttl}>")

    class Builder:
        """``StateTtlConfig.new_builder(ttl)``: OnCreateAndWrite, NeverReturnExpired, processing time and
        cleanup in the background unless told otherwise (Flink's defaults)."""

        def __init__(self, ttl: Any):
            _milliseconds(ttl, "StateTtlConfig.new_builder()")
            self._ttl = ttl
            self._update_type = StateTtlConfig.UpdateType.OnCreateAndWrite
            self._state_visibility = StateTtlConfig.StateVisibility.NeverReturnExpired
            self._ttl_time_characteristic = StateTtlConfig.TtlTimeCharacteristic.ProcessingTime
            self._is_cleanup_in_background = True
            self._strategies: dict = {}

        def set_update_type(self, update_type: "StateTtlConfig.UpdateType") -> "StateTtlConfig.Builder":
            self._update_type = update_type
            return self

        def update_ttl_on_create_and_write(self) -> "StateTtlConfig.Builder":
            return self.set_update_type(StateTtlConfig.UpdateType.OnCreateAndWrite)

        def update_ttl_on_read_and_write(self) -> "StateTtlConfig.Builder":
            return self.set_update_type(StateTtlConfig.UpdateType.OnReadAndWrite)

        def set_state_visibility(self, state_visibility: "StateTtlConfig.StateVisibility") -> "StateTtlConfig.Builder":
            self._state_visibility = state_visibility
            return self

        def return_expired_if_not_cleaned_up(self) -> "StateTtlConfig.Builder":
            return self.set_state_visibility(StateTtlConfig.StateVisibility.ReturnExpiredIfNotCleanedUp)

        def never_return_expired(self) -> "StateTtlConfig.Builder":
            return self.set_state_visibility(StateTtlConfig.StateVisibility.NeverReturnExpired)

        def set_ttl_time_characteristic(self, ttl_time_characteristic: "StateTtlConfig.TtlTimeCharacteristic",
                                        ) -> "StateTtlConfig.Builder":
            self._ttl_time_characteristic = ttl_time_characteristic
            return self

        def use_processing_time(self) -> "StateTtlConfig.Builder":
            return self.set_ttl_time_characteristic(StateTtlConfig.TtlTimeCharacteristic.ProcessingTime)

        def cleanup_full_snapshot(self) -> "StateTtlConfig.Builder":
            """Leave expired values out of full snapshots (savepoints, heap checkpoints, non-incremental
            RocksDB checkpoints); the working state is not touched."""
            S = StateTtlConfig.CleanupStrategies
            self._strategies[S.Strategies.FULL_STATE_SCAN_SNAPSHOT] = S.EMPTY_STRATEGY
            return self

        def cleanup_incrementally(self, cleanup_size: int, run_cleanup_for_every_record: bool,
                                  ) -> "StateTtlConfig.Builder":
            """HashMap backend: on every access of the state, check ``cleanup_size`` more keys (a
            cursor going round all keys) and remove what has expired."""
            if isinstance(cleanup_size, bool) or not isinstance(cleanup_size, int) or cleanup_size < 0:
                raise ValueError(f"StateTtlConfig.Builder.cleanup_incrementally(): cleanup_size must be an int >= 0, "
                                 f"got {cleanup_size!r}")
            S = StateTtlConfig.CleanupStrategies
            self._strategies[S.Strategies.INCREMENTAL_CLEANUP] = S.IncrementalCleanupStrategy(
                cleanup_size, bool(run_cleanup_for_every_record))
            return self

        def cleanup_in_rocksdb_compact_filter(self, query_time_after_num_entries: int,
                                              periodic_compaction_time: Any = None) -> "StateTtlConfig.Builder":
            """RocksDB backend: remove expired entries in the background (see ``state/ttl.py``: done as
            a scan of a slice of the state every so many accesses, not in RocksDB's compaction)."""
            if (isinstance(query_time_after_num_entries, bool) or not isinstance(query_time_after_num_entries, int)
                    or query_time_after_num_entries < 0):
                raise ValueError("StateTtlConfig.Builder.cleanup_in_rocksdb_compact_filter(): "
                                 f"query_time_after_num_entries must be an int >= 0, got {query_time_after_num_entries!r}")
            S = StateTtlConfig.CleanupStrategies
            self._strategies[S.Strategies.ROCKSDB_COMPACTION_FILTER] = S.RocksdbCompactFilterCleanupStrategy(
                query_time_after_num_entries, periodic_compaction_time)
            return self

        def disable_cleanup_in_background(self) -> "StateTtlConfig.Builder":
            """No default background cleanup; a strategy set explicitly still runs (as in Flink)."""
            self._is_cleanup_in_background = False
            return self

        def set_ttl(self, ttl: Any) -> "StateTtlConfig.Builder":
            _milliseconds(ttl, "StateTtlConfig.Builder.set_ttl()")
            self._ttl = ttl
            return self

        def build(self) -> "StateTtlConfig":
            return StateTtlConfig(self._update_type, self._state_visibility, self._ttl_time_characteristic, self._ttl,
                                  StateTtlConfig.CleanupStrategies(dict(self._strategies),
                                                                   self._is_cleanup_in_background))

    class CleanupStrategies:
        """Which background cleanups run besides the removal of an expired value when it is read."""

        class Strategies(Enum):
            FULL_STATE_SCAN_SNAPSHOT = 0
            INCREMENTAL_CLEANUP = 1
            ROCKSDB_COMPACTION_FILTER = 2

        class CleanupStrategy:
            pass

        class EmptyCleanupStrategy(CleanupStrategy):
            pass

        class IncrementalCleanupStrategy(CleanupStrategy):
            def __init__(self, cleanup_size: int, run_cleanup_for_every_record: bool):
                self._cleanup_size = cleanup_size
                self._run_cleanup_for_every_record = run_cleanup_for_every_record

            def get_cleanup_size(self) -> int:
                return self._cleanup_size

            def run_cleanup_for_every_record(self) -> bool:
                return self._run_cleanup_for_every_record

        class RocksdbCompactFilterCleanupStrategy(CleanupStrategy):
            def __init__(self, query_time_after_num_entries: int, periodic_compaction_time: Any = None):
                self._query_time_after_num_entries = query_time_after_num_entries
                self._periodic_compaction_time = periodic_compaction_time

            def get_query_time_after_num_entries(self) -> int:
                return self._query_time_after_num_entries

            def get_periodic_compaction_time(self) -> Any:
                return self._periodic_compaction_time

        EMPTY_STRATEGY = EmptyCleanupStrategy()

        def __init__(self, strategies: dict, is_cleanup_in_background: bool):
            self._strategies = strategies
            self._is_cleanup_in_background = is_cleanup_in_background

        def is_cleanup_in_background(self) -> bool:
            return self._is_cleanup_in_background

        def in_full_snapshot(self) -> bool:
            return StateTtlConfig.CleanupStrategies.Strategies.FULL_STATE_SCAN_SNAPSHOT in self._strategies

        def get_incremental_cleanup_strategy(self) -> "StateTtlConfig.CleanupStrategies.IncrementalCleanupStrategy | None":
            """The explicit one, else Flink's default (5 keys per access) while cleanup in background is on."""
            S = StateTtlConfig.CleanupStrategies
            default = S.IncrementalCleanupStrategy(5, False) if self._is_cleanup_in_background else None
            return self._strategies.get(S.Strategies.INCREMENTAL_CLEANUP, default)

        def get_rocksdb_compact_filter_cleanup_strategy(
                self) -> "StateTtlConfig.CleanupStrategies.RocksdbCompactFilterCleanupStrategy | None":
            S = StateTtlConfig.CleanupStrategies
            default = S.RocksdbCompactFilterCleanupStrategy(1000) if self._is_cleanup_in_background else None
            return self._strategies.get(S.Strategies.ROCKSDB_COMPACTION_FILTER, default)


# -- the state interfaces (PyFlink's pyflink.datastream.state) -----------------------------------------
# What get_state / get_list_state / ... return. Programs use these names in annotations and casts
# (``self.count: ValueState = None``, ``cast(ReducingState, ...)``); each backend's classes (heap,
# RocksDB, TTL) are registered as their implementations, so isinstance works on every backend.
from .typevars import IN, K, OUT, T, V  # noqa: E402  (PyFlink's type variables, shared)


class State(ABC):
    @abstractmethod
    def clear(self) -> None:
        """Remove the value of the current key."""


class ValueState(State, Generic[T]):
    @abstractmethod
    def value(self) -> T: ...

    @abstractmethod
    def update(self, value: T) -> None: ...


class AppendingState(State, Generic[IN, OUT]):
    @abstractmethod
    def get(self) -> OUT: ...

    @abstractmethod
    def add(self, value: IN) -> None: ...


class MergingState(AppendingState[IN, OUT]):
    pass


class ReducingState(MergingState[T, T]):
    """``add`` folds the value in with the descriptor's reduce function; ``get`` is the result."""


class AggregatingState(MergingState[IN, OUT]):
    """``add`` feeds the descriptor's AggregateFunction; ``get`` is its ``get_result``."""


class ListState(MergingState[T, Iterable[T]]):
    @abstractmethod
    def update(self, values: list) -> None: ...

    @abstractmethod
    def add_all(self, values: list) -> None: ...


class MapProtocol:
    """PyFlink's MapState dunders over ``get``/``put``/``remove``/``contains``/``keys``:
    ``state[k]``, ``state[k] = v``, ``del state[k]``, ``k in state``, ``iter(state)`` (its keys).
    As in PyFlink there is no ``len``; ``state[k]`` of a missing key is None (``get``)."""

    __slots__ = ()

    def __getitem__(self, key: Any) -> Any:
        return self.get(key)  # type: ignore[attr-defined]

    def __setitem__(self, key: Any, value: Any) -> None:
        self.put(key, value)  # type: ignore[attr-defined]

    def __delitem__(self, key: Any) -> None:
        self.remove(key)  # type: ignore[attr-defined]

    def __contains__(self, key: Any) -> bool:
        return self.contains(key)  # type: ignore[attr-defined]

    def __iter__(self) -> Any:
        return iter(self.keys())  # type: ignore[attr-defined]


class MapState(MapProtocol, State, Generic[K, V]):
    @abstractmethod
    def get(self, key: K) -> V: ...

    @abstractmethod
    def put(self, key: K, value: V) -> None: ...

    @abstractmethod
    def put_all(self, dict_value: dict) -> None: ...

    @abstractmethod
    def remove(self, key: K) -> None: ...

    @abstractmethod
    def contains(self, key: K) -> bool: ...

    @abstractmethod
    def items(self) -> Iterable: ...

    @abstractmethod
    def keys(self) -> Iterable[K]: ...

    @abstractmethod
    def values(self) -> Iterable[V]: ...

    @abstractmethod
    def is_empty(self) -> bool: ...


__all__ = [
    "AggregatingState",
    "AppendingState",
    "ListState",
    "MapState",
    "MergingState",
    "ReducingState",
    "State",
    "ValueState",
    "AggregatingStateDescriptor",
    "ListStateDescriptor",
    "MapStateDescriptor",
    "ReducingStateDescriptor",
    "StateDescriptor",
    "StateTtlConfig",
    "ValueStateDescriptor",
]
