"""Stream operators: what runs inside a task, batch by batch.

Each operator gets a batch (Arrow or Python rows), does its work, and hands
results to its ``Output`` (chained operators and record writers). Built-ins
that need no Python per record stay columnar; per-record functions see dicts.

Failures inside an operator's own work become ``OperatorFailure`` naming the
operator; failures of operators downstream pass through untouched, so the job
reports the operator whose code raised.
"""

from __future__ import annotations

import copy
import traceback
from typing import Any, Callable

import numpy as np
import pandas as pd
import pyarrow as pa

from ..api import transformations as T
from ..api.functions import OutputTag, RuntimeContext, as_callable
from ..api.types import Row
from ..batch import Batch, extract_keys, num_rows, to_rows
from ..graph.job_graph import OperatorNode
from ..config import Configuration
from ..state.backends import create_keyed_backend
from ..state.keygroups import key_group_range
from ..state.operator_state import OperatorStateStore
from ..state.rocksdb_snapshot import NATIVE, restore_native
from ..state.snapshot import SnapshotFormatError, read_keyed, read_operator
from ..state.tables import AccumulatorTable
from ..checkpoint.storage import StateLocation


class OperatorFailure(Exception):
    """An exception raised by an operator (usually by user code), with its name and traceback."""

    def __init__(self, operator: str, subtask: int, parallelism: int, error: BaseException):
        self.operator = operator
        self.subtask = subtask
        self.parallelism = parallelism
        self.error_type = type(error).__name__
        self.error = str(error)
        self.traceback = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        super().__init__(f"operator {operator!r} (subtask {subtask + 1}/{parallelism}) raised {self.error_type}: {error}")


class Output:
    """Fan-out of one operator: chained operators first, then channel edges; side outputs apart."""

    def __init__(self) -> None:
        self.targets: list[Callable[[Batch], None]] = []
        self.side: dict[str, list[Callable[[Batch], None]]] = {}  # OutputTag name -> its consumers
        self.records_out = 0

    def connect(self, target: Callable[[Batch], None], tag: str | None = None) -> None:
        (self.targets if tag is None else self.side.setdefault(tag, [])).append(target)

    def emit(self, batch: Batch) -> None:
        n = num_rows(batch)
        if not n:
            return
        self.records_out += n
        for t in self.targets:
            t(batch)

    def emit_side(self, tagged: dict[str, list]) -> None:
        """Values sent to side outputs; a tag nobody reads drops them (as in Flink)."""
        for tag, rows in tagged.items():
            self.records_out += len(rows)
            for t in self.side.get(tag, ()):
                t(rows)


class OperatorSnapshot:
    """What the synchronous phase captured of one operator subtask: frozen keyed tables
    and a copy of its operator state. Written by the snapshot writer thread."""

    def __init__(self, operator: "StreamOperator", keyed: dict | None, operator_state: dict | None):
        self.operator = operator
        self.key = operator.key
        self.keyed = keyed
        self.backend = operator.keyed_backend if keyed else None
        self.operator_state = operator_state
        self.max_parallelism = operator.ctx.get_max_number_of_parallel_subtasks()

    def done(self) -> None:
        """Back on the task's loop after the write: fold copy-on-write layers into the tables."""
        if self.backend is not None:
            self.backend.thaw()
        self.operator.snapshot_in_flight = False


class StreamOperator:
    keyed = False  # operators on a keyed stream get a keyed state backend

    def __init__(self, node: OperatorNode, ctx: RuntimeContext):
        self.node = node
        self.name = node.name
        self.ctx = ctx
        self.output = Output()
        self.records_in = 0
        self.key = node.state_key
        self.operator_state = OperatorStateStore()
        self.keyed_backend: Any = None  # HashMapKeyedStateBackend or RocksDBKeyedStateBackend
        self.snapshot_in_flight = False  # its tables are frozen until the snapshot writer is done
        if self.keyed:
            i, p, maxp = ctx.get_index_of_this_subtask(), ctx.get_number_of_parallel_subtasks(), ctx.get_max_number_of_parallel_subtasks()
            self.keyed_backend = create_keyed_backend(
                Configuration(ctx._job_parameters), node.name, maxp, key_group_range(maxp, p, i),
                getattr(ctx, "_state_root", None))
            ctx._keyed_backend = self.keyed_backend

    # state --------------------------------------------------------------------
    def snapshot_state(self, checkpoint_id: int, full: bool = False) -> OperatorSnapshot | None:
        """Synchronous phase: capture state as of the barrier (cheap: freeze, copy small lists).
        ``full``: a canonical snapshot of everything (savepoints), never incremental."""
        self._guard(lambda: self.prepare_snapshot(checkpoint_id))
        keyed = None
        backend = self.keyed_backend
        if backend is not None and backend.tables:
            keyed = backend.snapshot(checkpoint_id, full)
        operator = self.operator_state.snapshot()
        if not keyed and not operator:
            return None
        self.snapshot_in_flight = True
        return OperatorSnapshot(self, keyed, operator or None)

    def prepare_snapshot(self, checkpoint_id: int) -> None:
        """Hook: put positions / pending commits into operator state before it is copied."""

    def initialize_state(self, handles: list[dict | None], location: StateLocation,
                         checkpoint_id: int | None = None) -> None:
        """Restore from the handles of every subtask of the snapshot (any parallelism, either backend)."""
        i, p = self.ctx.get_index_of_this_subtask(), self.ctx.get_number_of_parallel_subtasks()
        backend = self.keyed_backend
        per_subtask: list[dict] = []
        first_keyed = True
        for old, handle in enumerate(handles):
            if handle is None:
                per_subtask.append({})
                continue
            where = f"state of operator {self.name!r} (subtask {old + 1}/{len(handles)}) in {location.url}"
            index = handle["index"]
            keyed = index.get("keyed") or {}
            native = index.get(NATIVE)
            if (keyed or native) and backend is None:
                raise SnapshotFormatError(f"{where}: holds keyed state, but operator {self.name!r} is not keyed")
            if native is not None:
                lo, hi = native.get("key_groups", [0, 0])
                wanted = backend is not None and range(max(lo, backend.key_groups.start), min(hi, backend.key_groups.stop))
            else:
                wanted = backend is not None and any(
                    int(kg) in backend.key_groups for t in keyed.values() for kg in t.get("groups", {}))
            data = location.read(handle) if wanted or "operator" in index else b""
            if wanted and native is not None:
                restore_native(backend, handle, data, location, checkpoint_id, where, first_keyed)
                first_keyed = False
            elif wanted:
                for name, kind, chunk in read_keyed(data, index, backend.key_groups, where):  # type: ignore[union-attr]
                    backend.restore_chunk(name, kind, chunk)  # type: ignore[union-attr]
                first_keyed = False
            per_subtask.append(read_operator(data, index, where) if "operator" in index else {})
        self.operator_state.restore(per_subtask, i, p)

    def dispose(self) -> None:
        """Always, also after a failure: release the state backend (RocksDB: close, delete its directory)."""
        if self.keyed_backend is not None:
            self.keyed_backend.dispose()

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """Hook: checkpoint n is complete (its _metadata is durable)."""

    # lifecycle --------------------------------------------------------------
    def open(self) -> None:
        self._guard(self.setup)

    def setup(self) -> None:
        fn = self.node.fn
        if hasattr(fn, "open") and callable(fn.open):
            fn.open(self.ctx)

    def process_batch(self, batch: Batch, input_index: int = 0) -> None:
        self.records_in += num_rows(batch)
        try:
            self.process(batch, input_index)
        except OperatorFailure:
            raise
        except Exception as e:
            raise self.failure(e) from e

    def process(self, batch: Batch, input_index: int) -> None:
        raise NotImplementedError

    def end_input(self, input_index: int) -> None:
        """All channels of ``input_index`` delivered EndOfPartition."""

    def finish(self) -> None:
        """No more input: emit what is left (before downstream operators finish)."""
        self._guard(self.on_finish)

    def on_finish(self) -> None:
        pass

    def close(self) -> None:
        fn = self.node.fn
        if hasattr(fn, "close") and callable(fn.close):
            self._guard(fn.close)

    # helpers ----------------------------------------------------------------
    def failure(self, e: BaseException) -> OperatorFailure:
        return OperatorFailure(self.name, self.ctx.get_index_of_this_subtask(), self.ctx.get_number_of_parallel_subtasks(), e)

    def _guard(self, fn: Callable[[], Any]) -> None:
        try:
            fn()
        except OperatorFailure:
            raise
        except Exception as e:
            raise self.failure(e) from e


class MapOperator(StreamOperator):
    def setup(self) -> None:
        super().setup()
        self._fn = as_callable(self.node.fn, "map", "map")

    def process(self, batch: Batch, input_index: int) -> None:
        fn = self._fn
        self.output.emit([fn(r) for r in to_rows(batch)])


class FlatMapOperator(StreamOperator):
    def setup(self) -> None:
        super().setup()
        self._fn = as_callable(self.node.fn, "flat_map", "flat_map")

    def process(self, batch: Batch, input_index: int) -> None:
        fn = self._fn
        out: list = []
        extend = out.extend
        for r in to_rows(batch):
            result = fn(r)
            if result is not None:
                extend(result)
        self.output.emit(out)


class FilterOperator(StreamOperator):
    def setup(self) -> None:
        super().setup()
        self._fn = as_callable(self.node.fn, "filter", "filter")

    def process(self, batch: Batch, input_index: int) -> None:
        fn = self._fn
        if isinstance(batch, pa.RecordBatch):
            # Keep the columnar form: only the predicate sees rows.
            mask = [bool(fn(r)) for r in batch.to_pylist()]
            self.output.emit(batch.filter(pa.array(mask, type=pa.bool_())))
        else:
            self.output.emit([r for r in batch if fn(r)])


class ProjectOperator(StreamOperator):
    def setup(self) -> None:
        self._fields = self.node.params["fields"]

    def process(self, batch: Batch, input_index: int) -> None:
        fields = self._fields
        if isinstance(batch, pa.RecordBatch):
            missing = [f for f in fields if f not in batch.schema.names]
            if missing:
                raise KeyError(f"project: no column {missing[0]!r}; columns: {batch.schema.names}")
            self.output.emit(batch.select(list(fields)))
        elif isinstance(fields[0], str):
            self.output.emit([{f: r[f] for f in fields} for r in batch])
        else:
            self.output.emit([tuple(r[f] for f in fields) for r in batch])


class _Context:
    """The ``ctx`` handed to process functions."""

    __slots__ = ("current_key", "side")

    def __init__(self) -> None:
        self.current_key = None
        self.side: dict[str, list] = {}  # side output values of the batch in progress

    def get_current_key(self) -> Any:
        return self.current_key

    def timestamp(self) -> None:
        return None

    def output(self, output_tag: OutputTag, value: Any) -> None:
        if not isinstance(output_tag, OutputTag):
            raise TypeError(f"ctx.output needs an OutputTag, got {output_tag!r}")
        self.side.setdefault(output_tag.tag_id, []).append(value)


def _split(results: list, ctx: _Context) -> list:
    """``yield tag, value`` (PyFlink's way) goes to the side output ``tag``, never the main output."""
    if tuple not in set(map(type, results)):
        return results  # no (tag, value) pairs: skip the per-record loop (a C-speed scan instead)
    main = []
    for r in results:
        if type(r) is tuple and len(r) == 2 and type(r[0]) is OutputTag:
            ctx.side.setdefault(r[0].tag_id, []).append(r[1])
        else:
            main.append(r)
    return main


def _emit_process_results(op: "StreamOperator", out: list, ctx: _Context) -> None:
    op.output.emit(_split(out, ctx))
    if ctx.side:
        side, ctx.side = ctx.side, {}
        op.output.emit_side(side)


class ProcessOperator(StreamOperator):
    def setup(self) -> None:
        super().setup()
        self._fn = as_callable(self.node.fn, "process_element", "process")
        self._ctx = _Context()

    def process(self, batch: Batch, input_index: int) -> None:
        fn, ctx = self._fn, self._ctx
        out: list = []
        extend = out.extend
        for r in to_rows(batch):
            result = fn(r, ctx)
            if result is not None:
                extend(result)
        _emit_process_results(self, out, ctx)


class KeyedProcessOperator(StreamOperator):
    keyed = True

    def setup(self) -> None:
        super().setup()
        self._fn = as_callable(self.node.fn, "process_element", "process")
        self._ctx = _Context()

    def process(self, batch: Batch, input_index: int) -> None:
        fn, ctx, backend = self._fn, self._ctx, self.keyed_backend
        keys = extract_keys(batch, self.node.params["key"])
        if isinstance(keys, np.ndarray):
            keys = keys.tolist()
        out: list = []
        extend = out.extend
        for key, r in zip(keys, to_rows(batch)):
            ctx.current_key = backend.current_key = key  # type: ignore[union-attr]
            result = fn(r, ctx)
            if result is not None:
                extend(result)
        _emit_process_results(self, out, ctx)


class KeyedReduceOperator(StreamOperator):
    keyed = True

    def setup(self) -> None:
        super().setup()
        self._fn = as_callable(self.node.fn, "reduce", "reduce")
        self._state = self.keyed_backend.raw_table("reduce")  # type: ignore[union-attr]

    def process(self, batch: Batch, input_index: int) -> None:
        fn, state = self._fn, self._state
        keys = extract_keys(batch, self.node.params["key"])
        if isinstance(keys, np.ndarray):
            keys = keys.tolist()
        out = []
        missing = object()
        for key, r in zip(keys, to_rows(batch)):
            current = state.get(key, missing)
            value = r if current is missing else fn(current, r)
            state.put(key, value)
            out.append(value)
        self.output.emit(out)


class RollingAggregator:
    """Per-key running sum/min/max over numpy arrays, kept in the state backend.

    Keys map to slots through a dict (one lookup per record, ~20M/s); the
    accumulators live in one numpy array indexed by slot (``AccumulatorTable``);
    within a batch the running values come from one grouped cumulative kernel.
    """

    def __init__(self, how: str, table: AccumulatorTable | None = None):
        self.how = how
        self.table = table if table is not None else AccumulatorTable()

    def update(self, keys: list, values: np.ndarray) -> np.ndarray:
        values = self._numeric(values)
        if not isinstance(self.table, AccumulatorTable):
            return self._update_keyed_store(keys, values)
        table = self.table
        before = len(table)
        s = table.slots(keys)
        n_slots = len(table)
        table.ensure_capacity(n_slots, values.dtype.kind)
        series = pd.Series(values, copy=False).groupby(s, sort=False)
        acc = table.acc
        if n_slots > before and self.how != "sum":
            # A new key starts from its first value (there is no identity for min/max).
            new = s >= before
            first_slots, first_idx = np.unique(s[new], return_index=True)
            acc[first_slots] = values[np.flatnonzero(new)[first_idx]]
        result = self._running(acc[s], series).astype(acc.dtype, copy=False)
        rev_slots, rev_idx = np.unique(s[::-1], return_index=True)
        acc[rev_slots] = result[len(s) - 1 - rev_idx]
        return result

    def _running(self, prior: np.ndarray, series: Any) -> np.ndarray:
        """Each record's running aggregate: its key's value before the batch, combined with the
        cumulative sum/min/max of the key's values in the batch up to the record."""
        if self.how == "sum":
            return prior + series.cumsum().to_numpy()
        if self.how == "min":
            return np.minimum(prior, series.cummin().to_numpy())
        return np.maximum(prior, series.cummax().to_numpy())

    def _numeric(self, values: np.ndarray) -> np.ndarray:
        if values.dtype.kind == "b":
            values = values.astype(np.int64)
        if values.dtype.kind not in "iuf":
            raise TypeError(f"{self.how}() needs numeric values, got {values.dtype}")
        if values.dtype.kind in "iu" and values.dtype != np.int64:
            values = values.astype(np.int64)
        return values

    def _update_keyed_store(self, keys: list, values: np.ndarray) -> np.ndarray:
        """The same kernel over a key-value store (RocksDB): one lookup and one write per distinct key."""
        codes, uniques = pd.factorize(pd.Series(keys, dtype=object) if not isinstance(keys, np.ndarray) else keys)
        uniques = list(uniques)
        stored = self.table.get_many(uniques)
        first_idx = np.unique(codes, return_index=True)[1]
        floating = values.dtype.kind == "f" or any(type(v) is float for v in stored)
        dtype = np.float64 if floating else np.int64
        identity = 0 if self.how == "sum" else None
        prior_u = np.array([(identity if identity is not None else values[first_idx[i]]) if v is None else v
                            for i, v in enumerate(stored)], dtype=dtype)
        series = pd.Series(values.astype(dtype, copy=False), copy=False).groupby(codes, sort=False)
        result = self._running(prior_u[codes], series)
        rev_codes, rev_idx = np.unique(codes[::-1], return_index=True)
        last = result[len(codes) - 1 - rev_idx]
        self.table.put_many([uniques[c] for c in rev_codes.tolist()], last.tolist())
        return result


class KeyedAggregateOperator(StreamOperator):
    """Rolling sum/min/max: each input is emitted with ``field`` set to its key's aggregate."""

    keyed = True

    def setup(self) -> None:
        self._how = self.node.params["how"]
        self._field = self.node.params["field"]
        self._key = self.node.params["key"]
        backend = self.keyed_backend
        self._agg = RollingAggregator(self._how, backend.accumulators(f"{self._how}-numeric"))  # type: ignore[union-attr]
        # keys whose values are not numeric (min/max of str, Decimal...)
        self._objects = backend.raw_table(f"{self._how}-objects")  # type: ignore[union-attr]

    def process(self, batch: Batch, input_index: int) -> None:
        keys = extract_keys(batch, self._key)
        if isinstance(keys, np.ndarray):
            keys = keys.tolist()
        field = self._field
        if isinstance(batch, pa.RecordBatch):
            idx = batch.schema.get_field_index(field) if isinstance(field, str) else -1
            if idx < 0:
                raise KeyError(f"{self._how}({field!r}): no such column; columns: {batch.schema.names}")
            col = batch.column(idx)
            if col.null_count:
                raise ValueError(f"{self._how}({field!r}): a record has no value (null) in {field!r}")
            if pa.types.is_integer(col.type) or pa.types.is_floating(col.type) or pa.types.is_boolean(col.type):
                result = self._agg.update(keys, col.to_numpy(zero_copy_only=False))
                self.output.emit(batch.set_column(idx, field, pa.array(result)))
                return
            batch = batch.to_pylist()
        rows = batch
        try:
            values = [r[field] for r in rows]
        except (KeyError, IndexError, TypeError) as e:
            raise KeyError(f"{self._how}({field!r}): cannot read {field!r} from a record: {type(e).__name__}: {e}") from e
        arr = np.asarray(values) if values else np.zeros(0, dtype=np.int64)
        if arr.dtype.kind in "biuf" and all(type(v) in (int, float, bool) for v in values[:1]):
            results = self._agg.update(keys, arr).tolist()
        else:
            results = self._object_update(keys, values)
        self.output.emit([_replace(r, field, v) for r, v in zip(rows, results)])

    def _object_update(self, keys: list, values: list) -> list:
        state, how, out = self._objects, self._how, []
        missing = object()
        for k, v in zip(keys, values):
            if v is None:
                raise ValueError(f"{how}({self._field!r}): a record has no value (None)")
            cur = state.get(k, missing)
            if cur is missing:
                new = v
            elif how == "sum":
                new = cur + v
            elif how == "min":
                new = v if v < cur else cur
            else:
                new = v if v > cur else cur
            state.put(k, new)
            out.append(new)
        return out


def _replace(record: Any, field: Any, value: Any) -> Any:
    if type(record) is dict:
        out = dict(record)
        out[field] = value
        return out
    if isinstance(record, tuple):
        if hasattr(record, "_replace") and isinstance(field, str):  # namedtuple by name
            return record._replace(**{field: value})
        return record[:field] + (value,) + record[field + 1 :]
    if isinstance(record, list):
        out = list(record)
        out[field] = value
        return out
    if isinstance(record, dict):
        out = dict(record)
        out[field] = value
        return out
    if isinstance(record, Row):
        out = copy.copy(record)
        out[field] = value
        return out
    raise TypeError(f"rolling aggregation needs dict, tuple, list or Row records, got {type(record).__name__}")


class CoProcessOperator(StreamOperator):
    def setup(self) -> None:
        super().setup()
        fn = self.node.fn
        if self.node.kind == T.CO_MAP:
            m1, m2 = as_callable(fn, "map1", "map"), as_callable(fn, "map2", "map")
            self._fns = (lambda r, ctx: (m1(r),), lambda r, ctx: (m2(r),))
        elif self.node.kind == T.CO_FLAT_MAP:
            f1, f2 = as_callable(fn, "flat_map1", "flat_map"), as_callable(fn, "flat_map2", "flat_map")
            self._fns = (lambda r, ctx: f1(r), lambda r, ctx: f2(r))
        else:
            self._fns = (as_callable(fn, "process_element1", "process"), as_callable(fn, "process_element2", "process"))
        self._ctx = _Context()

    def process(self, batch: Batch, input_index: int) -> None:
        fn, ctx = self._fns[input_index], self._ctx
        out: list = []
        for r in to_rows(batch):
            result = fn(r, ctx)
            if result is not None:
                out.extend(result)
        if self.node.kind != T.CO_PROCESS:  # a map's values are records, whatever they look like
            self.output.emit(out)
        else:
            _emit_process_results(self, out, ctx)


class SinkOperator(StreamOperator):
    """Runs a sink's writer; with checkpointing, the two-phase commit around it.

    Committables prepared at barrier n wait in operator state until checkpoint n
    is complete; those prepared at the end of input wait for the final
    checkpoint. A restored subtask first commits what its checkpoint held.
    """

    PENDING = "pending-committables"
    WRITER = "writer"

    def setup(self) -> None:
        self._sink = self.node.fn
        self._checkpointing = self.ctx.is_checkpointing_enabled()
        self._writer = self._sink.create_writer(self.ctx)
        self._pending: list[tuple[int, Any]] = []  # (checkpoint id, committable)
        self._unassigned: list[Any] = []  # prepared at the end of input, before the final checkpoint
        if self.operator_state.is_restored():
            restored = self.operator_state.get_list_state(self.PENDING).get()
            if restored:
                self._sink.commit([c for _, c in restored])
            self._writer.restore_state(self.operator_state.get_union_list_state(self.WRITER).get())

    def process(self, batch: Batch, input_index: int) -> None:
        self._writer.write(batch)

    def prepare_snapshot(self, checkpoint_id: int) -> None:
        ready = self._unassigned + self._writer.prepare_commit()
        self._unassigned = []
        self._pending.extend((checkpoint_id, c) for c in ready)
        self.operator_state.get_list_state(self.PENDING).update([[n, c] for n, c in self._pending])
        # Union: after a rescale every subtask sees every old writer's state (e.g. FileSink's part
        # counters), so no new part file can take the name of one an old subtask committed.
        self.operator_state.get_union_list_state(self.WRITER).update(self._writer.snapshot_state())

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        ready = [c for n, c in self._pending if n <= checkpoint_id]
        if ready:
            self._guard(lambda: self._sink.commit(ready))
            self._pending = [(n, c) for n, c in self._pending if n > checkpoint_id]

    def on_finish(self) -> None:
        ready = self._writer.prepare_commit()
        if self._checkpointing:
            self._unassigned.extend(ready)  # committed once the final checkpoint completes
        else:
            self._sink.commit(ready)

    def close(self) -> None:
        self._guard(self._writer.close)


class SourceOperator(StreamOperator):
    """Head of a source task; the task polls its reader and calls ``emit``.

    Its splits and positions are operator list state, redistributed on restore.
    """

    SPLITS = "source-splits"

    def setup(self) -> None:
        self.reader = self.node.fn.create_reader(self.ctx)
        if self.operator_state.is_restored():
            self.reader.restore_state(self.operator_state.get_list_state(self.SPLITS).get())

    def prepare_snapshot(self, checkpoint_id: int) -> None:
        splits = self.reader.snapshot_state()
        if splits is not None:
            self.operator_state.get_list_state(self.SPLITS).update(splits)

    def poll(self) -> Any:
        """The reader's next batch, None (nothing yet) or END."""
        try:
            return self.reader.poll()
        except Exception as e:
            raise self.failure(e) from e

    def emit(self, batch: Batch) -> None:
        self.records_in += num_rows(batch)
        self.output.emit(batch)

    def process(self, batch: Batch, input_index: int) -> None:  # pragma: no cover - sources have no input
        raise RuntimeError("a source has no input")

    def close(self) -> None:
        self._guard(self.reader.close)


OPERATORS: dict[str, type[StreamOperator]] = {
    T.SOURCE: SourceOperator,
    T.MAP: MapOperator,
    T.FLAT_MAP: FlatMapOperator,
    T.FILTER: FilterOperator,
    T.PROJECT: ProjectOperator,
    T.PROCESS: ProcessOperator,
    T.KEYED_PROCESS: KeyedProcessOperator,
    T.KEYED_AGGREGATE: KeyedAggregateOperator,
    T.KEYED_REDUCE: KeyedReduceOperator,
    T.CO_PROCESS: CoProcessOperator,
    T.CO_MAP: CoProcessOperator,
    T.CO_FLAT_MAP: CoProcessOperator,
    T.SINK: SinkOperator,
}


def create_operator(node: OperatorNode, ctx: RuntimeContext) -> StreamOperator:
    return OPERATORS[node.kind](node, ctx)
