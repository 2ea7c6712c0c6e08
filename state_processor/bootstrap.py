"""``KeyedStateBootstrapFunction``, and writing one subtask's keyed state from rows: no Spark here.

    class Counts(KeyedStateBootstrapFunction):
        def open(self, ctx):
            self.count = ctx.get_state(ValueStateDescriptor("count", Types.LONG()))

        def process_element(self, row, ctx):
            self.count.update(row["count"])

A bootstrap task owns one subtask's key-group range of the savepoint it writes (``bootstrap_subtask``):
it makes the runtime's own keyed state backend for that range (heap or RocksDB, as a running subtask
makes it), hands ``open`` the runtime's ``RuntimeContext`` on it, sets the current key of each row
(the key a job's ``key_by`` gives: the same ``keygroups`` hash) and calls ``process_element``, then
takes a full snapshot and writes it with the runtime's own writer (``snapshot.serialize``, or the
RocksDB backend's canonical writer) through ``SavepointTarget``. So the bytes, index, checksums and
the columnar fast path are exactly a savepoint's; what comes back is the small handle.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

import pyarrow as pa

from streamjob.runtime.api.functions import RuntimeContext
from streamjob.runtime.api.types import Row
from streamjob.runtime.checkpoint.storage import SavepointTarget
from streamjob.runtime.keygroups import assign_to_key_group, key_group_range

BACKENDS = ("hashmap", "rocksdb")
SNAPSHOT_ID = 0  # the id state files are written under (savepoint files are named by uid and subtask, not id)


class KeyedStateBootstrapFunction:
    """Flink's ``KeyedStateBootstrapFunction``: ``open(ctx)`` registers states (``ctx.get_state(...)``,
    ``get_list_state``, ``get_map_state``, ``get_reducing_state``, ``get_aggregating_state``; also
    ``self.get_runtime_context()``), ``process_element(value, ctx)`` writes them for ``ctx.get_current_key()``,
    and may set timers (``ctx.timer_service().register_event_time_timer(ts)``) the restored job fires."""

    def open(self, runtime_context: RuntimeContext) -> None:
        pass

    def process_element(self, value: Any, ctx: "BootstrapContext") -> None:
        raise NotImplementedError("KeyedStateBootstrapFunction.process_element(value, ctx) writes the state of "
                                  "one element's key")

    def close(self) -> None:
        pass

    def get_runtime_context(self) -> RuntimeContext:
        ctx = self.__dict__.get("_runtime_context")
        if ctx is None:
            raise RuntimeError(f"{type(self).__name__}.get_runtime_context(): only while the bootstrap runs "
                               f"(from open() on)")
        return ctx


class _NoWatermark:
    current_watermark = -(1 << 63)  # a bootstrap has seen no event time


class BootstrapContext:
    """The ``ctx`` of ``process_element``: the current key and a timer service (timers become state)."""

    __slots__ = ("_backend", "_timers")

    def __init__(self, backend: Any):
        self._backend = backend
        self._timers: Any = None

    def get_current_key(self) -> Any:
        return self._backend.current_key

    def timer_service(self) -> Any:
        if self._timers is None:  # made on first use: a bootstrap without timers writes no timer tables
            from streamjob.runtime.task.timers import InternalTimerService, TimerService

            self._timers = TimerService(InternalTimerService(self._backend), _NoWatermark(),
                                        self.get_current_key)
        return self._timers


@dataclass(frozen=True)
class SubtaskSpec:
    """What one bootstrap task needs (pickled to the executor with the function)."""

    uid: str
    subtask: int
    parallelism: int
    max_parallelism: int
    backend: str  # "hashmap" or "rocksdb": the working state of the bootstrap
    target: str  # the new savepoint's directory URL
    storage_options: dict | None = None

    @property
    def key_groups(self) -> range:
        return key_group_range(self.max_parallelism, self.parallelism, self.subtask)

    @property
    def owner(self) -> str:
        g = self.key_groups
        return (f"operator {self.uid!r} (subtask {self.subtask + 1}/{self.parallelism}, key groups "
                f"{g.start}-{g.stop - 1})")

    def file_name(self) -> str:
        """As a running job names its savepoint files (``slot._write_snapshot``)."""
        return re.sub(r"[^A-Za-z0-9_.-]", "_", self.uid)[:80] + f"-{self.subtask}"


class BootstrapError(RuntimeError):
    """The bootstrap function or a key failed; the message names the operator uid, subtask and key."""


def key_getter(names: list[str], column: str | None, position: int | None, fn: Callable | None,
               ) -> Callable[[list[list], int, Any], Any]:
    """How a row's key is taken: a column's value (as a job's ``key_by("col")`` takes it), a
    position, or the function given (over the row)."""
    if column is not None:
        if column not in names:
            raise KeyError(f"key_by({column!r}): the DataFrame has no column {column!r}; its columns: "
                           f"{', '.join(names)}")
        at = names.index(column)
        return lambda columns, i, row: columns[at][i]
    if position is not None:
        return lambda columns, i, row: row[position]
    assert fn is not None
    return lambda columns, i, row: fn(row)


def elements(batches: Iterable[pa.RecordBatch], key: Callable[[list[list], int, Any], Any],
             ) -> Iterator[tuple[Any, Row]]:
    """(key, row) of every row: a ``Row`` with the DataFrame's field names (structs as dicts)."""
    for batch in batches:
        names = batch.schema.names
        columns = [c.to_pylist() for c in batch.columns]
        for i, values in enumerate(zip(*columns)):
            row = Row.__new__(Row)
            object.__setattr__(row, "_values", list(values))
            object.__setattr__(row, "_fields", names)
            object.__setattr__(row, "_row_kind", _INSERT)
            yield key(columns, i, row), row


_INSERT = Row().get_row_kind()


def new_backend(spec: SubtaskSpec) -> Any:
    """The runtime's keyed state backend for this subtask's key groups, as a running subtask makes it."""
    if spec.backend == "hashmap":
        from streamjob.runtime.state.heap import HashMapKeyedStateBackend

        return HashMapKeyedStateBackend(spec.uid, spec.max_parallelism, spec.key_groups)
    if spec.backend == "rocksdb":
        from streamjob.runtime.state.rocksdb import RocksDBKeyedStateBackend, default_local_dir

        return RocksDBKeyedStateBackend(spec.uid, spec.max_parallelism, spec.key_groups,
                                        default_local_dir(None))
    raise ValueError(f"state backend must be one of {', '.join(BACKENDS)}, got {spec.backend!r}")


def bootstrap_subtask(spec: SubtaskSpec, fn: KeyedStateBootstrapFunction,
                      rows: Iterable[tuple[Any, Any]]) -> dict | None:
    """Run ``fn`` over ``rows`` ((key, element), every key in this subtask's key groups) and write the
    state; returns its handle (None: ``fn`` registered no state)."""
    backend = new_backend(spec)
    try:
        ctx = RuntimeContext(spec.uid, spec.subtask, spec.parallelism, spec.max_parallelism)
        ctx._keyed_backend = backend  # what get_state & co. use, as a keyed operator's context
        fn.__dict__["_runtime_context"] = ctx
        try:
            fn.open(ctx)
        except Exception as e:
            raise BootstrapError(f"{type(fn).__name__}.open() of {spec.owner} failed: {type(e).__name__}: "
                                 f"{e}") from e
        element_ctx = BootstrapContext(backend)
        groups, maxp = spec.key_groups, spec.max_parallelism
        process = fn.process_element
        key = None
        try:
            for key, element in rows:
                backend.current_key = key
                process(element, element_ctx)
        except Exception as e:
            kg = _key_group(key, maxp)
            if kg is not None and kg not in groups:  # the partitioning is ours: never the user's fault
                raise BootstrapError(f"{spec.owner}: key {key!r} (key group {kg}) reached the wrong "
                                     f"subtask") from e
            raise BootstrapError(f"{type(fn).__name__}.process_element() of {spec.owner} failed at key "
                                 f"{key!r}: {type(e).__name__}: {e}") from e
        fn.close()
        if not backend.tables:
            return None
        return _write(spec, backend)
    finally:
        backend.dispose()


def _key_group(key: Any, maxp: int) -> int | None:
    try:
        return assign_to_key_group(key, maxp)
    except TypeError:
        return None


def _write(spec: SubtaskSpec, backend: Any) -> dict:
    """A full (canonical) snapshot through the runtime's writers, as a savepoint of a running job."""
    target = SavepointTarget(spec.target, storage_options=spec.storage_options)
    snap = backend.snapshot(SNAPSHOT_ID, full=True)
    if spec.backend == "rocksdb":
        from streamjob.runtime.state.rocksdb_snapshot import write_snapshot

        handle, _, _ = write_snapshot(snap, target, spec.file_name(), None)
        return handle
    from streamjob.runtime.state.snapshot import serialize

    data, index = serialize(snap, spec.max_parallelism, None)
    return target.write_state(SNAPSHOT_ID, spec.file_name(), data, index)
