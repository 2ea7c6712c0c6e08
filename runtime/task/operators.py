"""Stream operators: what runs inside a task, batch by batch.

Each operator gets a batch (Arrow or Python rows), does its work, and hands
results to its ``Output`` (chained operators and record writers). Built-ins
that need no Python per record stay columnar; per-record functions see dicts.

Event time: a batch may come with its records' timestamps (``ts``, numpy int64,
or None), which operators pass on with what they emit; watermarks reach an
operator through ``process_watermark`` (from its task's valve, or from the
operator chained before it), fire its event-time timers and go on downstream.
Keyed operators keep timers as keyed state (``timers.InternalTimerService``);
processing-time timers fire when the task finds them due.

Failures inside an operator's own work become ``OperatorFailure`` naming the
operator; failures of operators downstream pass through untouched, so the job
reports the operator whose code raised.
"""

from __future__ import annotations

import copy
import datetime as _dt
import inspect
import traceback
from typing import Any, Callable

import numpy as np
import pyarrow as pa

from ..lazy import LazyModule
from ..api import transformations as T
from ..api.functions import OutputTag, RuntimeContext, as_callable
from ..api.types import Row
from ..batch import NO_TIMESTAMP, Batch, Stamped, extract_keys, num_rows, to_rows
from ..network.events import MAX_WATERMARK, MIN_WATERMARK, RuntimeEvent, Watermark, WatermarkStatus
from .committer import BackgroundCommitter
from .faults import maybe_kill
from .timers import InternalTimerService, TimeDomain, TimerService, processing_time_ms
from ..graph.job_graph import OperatorNode
from ..config import Configuration, Options
from ..state.backends import create_keyed_backend
from ..state.keygroups import key_group_range
from ..state.operator_state import OperatorStateStore
from ..state.snapshot import SnapshotFormatError, keyed_spans, read_keyed, read_operator
from ..state.tables import AccumulatorTable
from ..checkpoint.storage import StateLocation

pd = LazyModule("pandas")  # only keyed aggregations need it: not loaded by every worker



def _positional_arity(fn: Any) -> int:
    """How many positional arguments ``fn`` takes (a large number for *args; 1 when unknown)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return 1
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return 1 << 16
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty for p in params)

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
    """Fan-out of one operator: chained operators first, then channel edges; side outputs apart.

    Records go with their event timestamps (``ts``: numpy int64 per record, or None when the
    stream has none). Watermarks and watermark status go to every consumer, side outputs included.
    """

    def __init__(self) -> None:
        self.targets: list[Callable[[Batch, Any], None]] = []
        self.side: dict[str, list[Callable[[Batch, Any], None]]] = {}  # OutputTag name -> its consumers
        self.event_targets: list[Callable[[RuntimeEvent], None]] = []
        self.records_out = 0

    def connect(self, target: Callable[[Batch, Any], None], tag: str | None = None,
                events: Callable[[RuntimeEvent], None] | None = None) -> None:
        (self.targets if tag is None else self.side.setdefault(tag, [])).append(target)
        if events is not None:
            self.event_targets.append(events)

    def emit(self, batch: Batch, ts: Any = None) -> None:
        n = num_rows(batch)
        if not n:
            return
        self.records_out += n
        for t in self.targets:
            t(batch, ts)

    def emit_side(self, tagged: dict[str, list], tagged_ts: dict[str, list] | None = None) -> None:
        """Values sent to side outputs; a tag nobody reads drops them (as in Flink)."""
        for tag, rows in tagged.items():
            self.records_out += len(rows)
            ts = np.asarray(tagged_ts[tag], dtype=np.int64) if tagged_ts else None
            for t in self.side.get(tag, ()):
                t(rows, ts)

    def emit_event(self, event: RuntimeEvent) -> None:
        for t in self.event_targets:
            t(event)


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
        # Called in the snapshot writer's thread before the state is written: work the synchronous
        # phase left running (a FileSink's part files being completed); one raising declines the checkpoint.
        self.waits: list = []

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
        self.ts: Any = None  # event timestamps of the batch in progress (numpy int64), or None
        self.current_watermark = MIN_WATERMARK
        self.timers: InternalTimerService | None = None  # keyed operators that use timers
        self.batch = Configuration(ctx._job_parameters).is_batch()  # BATCH mode: timers fire at end of input
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
            where = f"{location.describe(handle)} of operator {self.name!r} (subtask {old + 1}/{len(handles)})"
            index = handle["index"]
            keyed = index.get("keyed") or {}
            native = index.get("rocksdb")  # rocksdb_snapshot.NATIVE (imported only to restore it: rocksdict)
            if (keyed or native) and backend is None:
                raise SnapshotFormatError(f"{where}: holds keyed state, but operator {self.name!r} is not keyed")
            if native is not None:
                lo, hi = native.get("key_groups", [0, 0])
                wanted = backend is not None and range(max(lo, backend.key_groups.start), min(hi, backend.key_groups.stop))
            else:
                wanted = backend is not None and any(
                    int(kg) in backend.key_groups for t in keyed.values() for kg in t.get("groups", {}))
            if wanted and native is None:  # only the key groups this subtask owns (and operator state)
                data = location.read_spans(handle, keyed_spans(index, backend.key_groups))  # type: ignore[union-attr]
            else:  # the readers check the checksum of each chunk they use, naming its key group
                data = location.read(handle, verify=False) if wanted or "operator" in index else b""
            if wanted and native is not None:
                from ..state.rocksdb_snapshot import restore_native

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

    def process_batch(self, batch: Batch, input_index: int = 0, ts: Any = None) -> None:
        self.records_in += num_rows(batch)
        self.ts = ts
        try:
            self.process(batch, input_index)
        except OperatorFailure:
            raise
        except Exception as e:
            raise self.failure(e) from e

    def push(self, batch: Batch, ts: Any = None) -> None:
        """From the operator chained before this one."""
        self.process_batch(batch, 0, ts)

    # event time ----------------------------------------------------------------
    def process_event(self, event: RuntimeEvent) -> None:
        """A watermark or watermark status from the operator chained before this one."""
        if isinstance(event, Watermark):
            self.process_watermark(event.timestamp_ms)
        elif isinstance(event, WatermarkStatus):
            self.output.emit_event(event)

    def process_watermark(self, watermark: int) -> None:
        """The operator's watermark advanced: fire what it makes due, then pass it on."""
        if watermark <= self.current_watermark:
            return
        self.current_watermark = watermark
        self._guard(lambda: self.on_event_time(watermark))
        self.output.emit_event(Watermark(watermark))

    def on_event_time(self, watermark: int) -> None:
        """Hook: event-time timers up to ``watermark`` are due."""

    def next_processing_time(self) -> int | None:
        """When (epoch ms) this operator next needs ``on_processing_time``; None: never."""
        return None

    def on_processing_time(self, now_ms: int) -> None:
        """Hook: processing time reached ``now_ms``."""

    def process(self, batch: Batch, input_index: int) -> None:
        raise NotImplementedError

    def end_input(self, input_index: int) -> None:
        """All channels of ``input_index`` delivered EndOfPartition."""

    def finish(self) -> None:
        """No more input: emit what is left (before downstream operators finish). In BATCH mode
        processing time jumps to the end too, so every processing-time timer fires (as Flink)."""
        if self.batch:
            self._guard(lambda: self.on_processing_time(MAX_WATERMARK))
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
        self.output.emit([fn(r) for r in to_rows(batch)], self.ts)


class FlatMapOperator(StreamOperator):
    def setup(self) -> None:
        super().setup()
        self._fn = as_callable(self.node.fn, "flat_map", "flat_map")

    def process(self, batch: Batch, input_index: int) -> None:
        fn = self._fn
        out: list = []
        extend = out.extend
        ts = self.ts
        if ts is None:
            for r in to_rows(batch):
                result = fn(r)
                if result is not None:
                    extend(result)
            self.output.emit(out)
            return
        out_ts: list = []
        for r, t in zip(to_rows(batch), ts.tolist()):
            result = fn(r)
            if result is not None:
                before = len(out)
                extend(result)
                out_ts.extend([t] * (len(out) - before))
        self.output.emit(out, np.asarray(out_ts, dtype=np.int64))


class FilterOperator(StreamOperator):
    def setup(self) -> None:
        super().setup()
        self._fn = as_callable(self.node.fn, "filter", "filter")

    def process(self, batch: Batch, input_index: int) -> None:
        fn = self._fn
        if isinstance(batch, pa.RecordBatch):
            # Keep the columnar form: only the predicate sees rows.
            mask = [bool(fn(r)) for r in batch.to_pylist()]
            self.output.emit(batch.filter(pa.array(mask, type=pa.bool_())),
                             None if self.ts is None else self.ts[np.asarray(mask, dtype=bool)])
        elif self.ts is None:
            self.output.emit([r for r in batch if fn(r)])
        else:
            mask = [bool(fn(r)) for r in batch]
            self.output.emit([r for r, keep in zip(batch, mask) if keep], self.ts[np.asarray(mask, dtype=bool)])


class ProjectOperator(StreamOperator):
    def setup(self) -> None:
        self._fields = self.node.params["fields"]

    def process(self, batch: Batch, input_index: int) -> None:
        fields = self._fields
        if isinstance(batch, pa.RecordBatch):
            missing = [f for f in fields if f not in batch.schema.names]
            if missing:
                raise KeyError(f"project: no column {missing[0]!r}; columns: {batch.schema.names}")
            self.output.emit(batch.select(list(fields)), self.ts)
        elif isinstance(fields[0], str):
            self.output.emit([{f: r[f] for f in fields} for r in batch], self.ts)
        else:
            self.output.emit([tuple(r[f] for f in fields) for r in batch], self.ts)


class _Context:
    """The ``ctx`` handed to process functions (and, with ``domain`` set, to ``on_timer``)."""

    __slots__ = ("current_key", "side", "side_ts", "ts", "domain", "_timer_service")

    def __init__(self, timer_service: TimerService | None = None) -> None:
        self.current_key = None
        self.side: dict[str, list] = {}  # side output values of the batch in progress
        self.side_ts: dict[str, list] | None = None  # ... their timestamps, when the stream has them
        self.ts: int | None = None  # the current record's event timestamp (the timer's in on_timer)
        self.domain: TimeDomain | None = None
        self._timer_service = timer_service

    def get_current_key(self) -> Any:
        return self.current_key

    def timestamp(self) -> int | None:
        return self.ts

    def timer_service(self) -> TimerService:
        return self._timer_service  # type: ignore[return-value]

    def time_domain(self) -> TimeDomain | None:
        """In ``on_timer``: whether an event-time or a processing-time timer fired."""
        return self.domain

    def output(self, output_tag: OutputTag, value: Any) -> None:
        if not isinstance(output_tag, OutputTag):
            raise TypeError(f"ctx.output needs an OutputTag, got {output_tag!r}")
        self.side.setdefault(output_tag.tag_id, []).append(value)
        if self.side_ts is not None:
            self.side_ts.setdefault(output_tag.tag_id, []).append(NO_TIMESTAMP if self.ts is None else self.ts)


def _stamp(t: int) -> int | None:
    return None if t == NO_TIMESTAMP else t


def _emit_process_results(op: "StreamOperator", out: list, ctx: _Context, out_ts: list | None = None) -> None:
    """``yield tag, value`` (PyFlink's way) goes to the side output ``tag``, never the main output."""
    if tuple not in set(map(type, out)):  # no (tag, value) pairs: skip the per-record loop (a C-speed scan)
        main, main_ts = out, out_ts
    else:
        main = []
        main_ts = None if out_ts is None else []
        for i, r in enumerate(out):
            if type(r) is tuple and len(r) == 2 and type(r[0]) is OutputTag:
                ctx.side.setdefault(r[0].tag_id, []).append(r[1])
                if out_ts is not None:
                    ctx.side_ts.setdefault(r[0].tag_id, []).append(out_ts[i])  # type: ignore[union-attr]
            else:
                main.append(r)
                if main_ts is not None:
                    main_ts.append(out_ts[i])  # type: ignore[index]
    op.output.emit(main, None if main_ts is None else np.asarray(main_ts, dtype=np.int64))
    if ctx.side:
        side, ctx.side = ctx.side, {}
        side_ts = ctx.side_ts
        ctx.side_ts = None
        op.output.emit_side(side, side_ts)


def _run_stamped(fn: Callable, rows: list, ts: np.ndarray, ctx: _Context, on_record: Any = None,
                 keys: list | None = None) -> tuple[list, list]:
    """The per-record loop of a process function over records with timestamps: each output
    record takes the timestamp of the input record it came from (as in Flink)."""
    out: list = []
    out_ts: list = []
    extend = out.extend
    ctx.side_ts = {}
    for i, (r, t) in enumerate(zip(rows, ts.tolist())):
        ctx.ts = _stamp(t)
        if on_record is not None:
            on_record(keys[i])  # type: ignore[index]
        result = fn(r, ctx)
        if result is not None:
            before = len(out)
            extend(result)
            out_ts.extend([t] * (len(out) - before))
    ctx.ts = None
    return out, out_ts


def _run_rows(fn: Callable, rows: list, ts: np.ndarray | None, ctx: _Context, on_record: Any = None,
              keys: list | None = None) -> tuple[list, list | None]:
    """The per-record loop of a (possibly keyed) function over a batch's rows: its outputs, and
    their timestamps when the batch carries them (``None`` when it does not)."""
    if ts is not None:
        return _run_stamped(fn, rows, ts, ctx, on_record, keys)
    out: list = []
    extend = out.extend
    for i, r in enumerate(rows):
        if on_record is not None:
            on_record(keys[i])  # type: ignore[index]
        result = fn(r, ctx)
        if result is not None:
            extend(result)
    return out, None


def _keyed_records(batch: Batch, key: Any, ctx: _Context, backend: Any) -> tuple[Callable[[Any], None], list]:
    """The keys of a batch's records, and the callback that puts one of them in scope (for
    keyed state and timers) before its record is processed."""
    keys = extract_keys(batch, key)
    if isinstance(keys, np.ndarray):
        keys = keys.tolist()

    def on_record(k: Any) -> None:
        ctx.current_key = backend.current_key = k
    return on_record, keys


class ProcessOperator(StreamOperator):
    def setup(self) -> None:
        super().setup()
        self._fn = as_callable(self.node.fn, "process_element", "process")
        self._ctx = _Context(TimerService(None, self, lambda: None))

    def process(self, batch: Batch, input_index: int) -> None:
        fn, ctx = self._fn, self._ctx
        if self.ts is not None:
            out, out_ts = _run_stamped(fn, to_rows(batch), self.ts, ctx)
            _emit_process_results(self, out, ctx, out_ts)
            return
        out: list = []
        extend = out.extend
        for r in to_rows(batch):
            result = fn(r, ctx)
            if result is not None:
                extend(result)
        _emit_process_results(self, out, ctx)


class _TimerFiring:
    """Keyed operators whose function has ``on_timer``: fire due timers with the key in scope."""

    def _init_timers(self: Any, ctx: _Context) -> None:
        self.timers = InternalTimerService(self.keyed_backend)
        self.timers.restore()
        ctx._timer_service = TimerService(self.timers, self, lambda: ctx.current_key)
        self._on_timer = getattr(self.node.fn, "on_timer", None)
        ctx_t = self._timer_ctx = _Context()
        ctx_t._timer_service = TimerService(self.timers, self, lambda: ctx_t.current_key)

    def on_event_time(self: Any, watermark: int) -> None:
        self._fire(TimeDomain.EVENT_TIME, watermark)

    def next_processing_time(self: Any) -> int | None:
        return self.timers.next_timestamp(TimeDomain.PROCESSING_TIME) if self.timers is not None else None

    def on_processing_time(self: Any, now_ms: int) -> None:
        self._guard(lambda: self._fire(TimeDomain.PROCESSING_TIME, now_ms))

    def _fire(self: Any, domain: TimeDomain, up_to: int) -> None:
        ctx, backend, on_timer = self._timer_ctx, self.keyed_backend, self._on_timer
        out: list = []
        out_ts: list = []
        ctx.domain = domain
        ctx.side_ts = {}
        # Output of an event-time timer carries the timer's timestamp; of a processing-time one, none.
        for key, ts, _ in self.timers.pop_due(domain, up_to):
            if on_timer is None:
                continue
            ctx.current_key = backend.current_key = key
            ctx.ts = ts if domain is TimeDomain.EVENT_TIME else None
            result = on_timer(ts, ctx)
            if result is not None:
                before = len(out)
                out.extend(result)
                out_ts.extend([ts if domain is TimeDomain.EVENT_TIME else NO_TIMESTAMP] * (len(out) - before))
        ctx.ts = None
        if out or ctx.side:
            _emit_process_results(self, out, ctx, out_ts if domain is TimeDomain.EVENT_TIME else None)
        ctx.side, ctx.side_ts = {}, None


class KeyedProcessOperator(_TimerFiring, StreamOperator):
    keyed = True

    def setup(self) -> None:
        super().setup()
        self._fn = as_callable(self.node.fn, "process_element", "process")
        self._ctx = _Context()
        self._init_timers(self._ctx)

    def process(self, batch: Batch, input_index: int) -> None:
        fn, ctx, backend = self._fn, self._ctx, self.keyed_backend
        if self.ts is not None:
            on_record, keys = _keyed_records(batch, self.node.params["key"], ctx, backend)
            out, out_ts = _run_stamped(fn, to_rows(batch), self.ts, ctx, on_record, keys)
            _emit_process_results(self, out, ctx, out_ts)
            return
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
        backend = self.keyed_backend
        for key, r in zip(keys, to_rows(batch)):
            current = state.get(key, missing)
            backend.current_key = key  # type: ignore[union-attr]  # for state the function opened
            value = r if current is missing else fn(current, r)
            state.put(key, value)
            out.append(value)
        if not self.batch:
            self.output.emit(out, self.ts)

    def on_finish(self) -> None:
        if self.batch:  # BATCH mode: a rolling reduce emits only its final value per key (as Flink)
            self.output.emit([v for _, v in self._state.items()])


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
                self._emit_rolling(batch.set_column(idx, field, pa.array(result)), keys)
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
        self._emit_rolling([_replace(r, field, v) for r, v in zip(rows, results)], keys)

    def _emit_rolling(self, out: Batch, keys: list) -> None:
        if not self.batch:
            self.output.emit(out, self.ts)
            return
        # BATCH mode: only each key's final value goes out, at the end (as Flink); keep the last
        last = {k: i for i, k in enumerate(keys)}
        rows = to_rows(out.take(pa.array(list(last.values())))) if isinstance(out, pa.RecordBatch) \
            else [out[i] for i in last.values()]
        table = self.keyed_backend.raw_table("_batch-final")  # type: ignore[union-attr]
        for k, r in zip(last, rows):
            table.put(k, r)

    def on_finish(self) -> None:
        if self.batch:
            self.output.emit([v for _, v in self.keyed_backend.raw_table("_batch-final").items()])  # type: ignore[union-attr]

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
        self._ctx = _Context(TimerService(None, self, lambda: None))

    def process(self, batch: Batch, input_index: int) -> None:
        fn, ctx = self._fns[input_index], self._ctx
        on_record, keys = self._set_key(input_index, batch)
        out, out_ts = _run_rows(fn, to_rows(batch), self.ts, ctx, on_record, keys)
        if self.node.kind in (T.CO_MAP, T.CO_FLAT_MAP):  # a map's values are records, whatever they look like
            self.output.emit(out, None if out_ts is None else np.asarray(out_ts, dtype=np.int64))
            ctx.side_ts = None
        else:
            _emit_process_results(self, out, ctx, out_ts)

    def _set_key(self, input_index: int, batch: Batch) -> tuple[Any, list | None]:
        """Keyed variants: a callback that puts a record's key in scope, and the batch's keys."""
        return None, None


class KeyedCoProcessOperator(_TimerFiring, CoProcessOperator):
    """``KeyedCoProcessFunction`` on two keyed streams: keyed state and timers, shared by both inputs."""

    keyed = True

    def setup(self) -> None:
        super().setup()
        self._init_timers(self._ctx)

    def _set_key(self, input_index: int, batch: Batch) -> tuple[Any, list | None]:  # type: ignore[override]
        return _keyed_records(batch, self.node.params["keys"][input_index], self._ctx, self.keyed_backend)


class TimestampsAndWatermarksOperator(StreamOperator):
    """Gives each record its event timestamp and emits watermarks every
    ``pipeline.auto-watermark-interval`` (Flink's TimestampsAndWatermarksOperator).

    The watermark trails the largest timestamp seen by the strategy's bound (minus 1 ms, as
    Flink's generators). Watermarks from upstream are dropped, except the end of event time;
    with ``with_idleness`` the operator declares itself idle when no record came for that long.
    """

    source: "SourceOperator | None" = None  # the source it is chained to (from_source): split-aware watermarks

    def setup(self) -> None:
        from ..api.watermarks import WatermarkStrategy

        st: WatermarkStrategy = self.node.params["strategy"]
        self._generates = st.kind != WatermarkStrategy.NONE
        self._bound = st.out_of_orderness_ms
        a = st.assigner
        self._column = a if isinstance(a, str) else None
        extract = getattr(a, "extract_timestamp", None)
        if extract is None and callable(a) and not isinstance(a, str):
            # A function of the record, or of (record, record_timestamp) as Flink's TimestampAssigner.
            extract = a if _positional_arity(a) >= 2 else (lambda value, record_timestamp: a(value))
        self._extract = extract
        if a is not None and hasattr(a, "open") and callable(a.open):
            a.open(self.ctx)
        self._max_ts: int | None = None
        self._split_max: dict[Any, int] = {}  # per source split, when the chained source has several
        self._split_active: dict[Any, int] = {}  # with idleness: when each split last had a record
        self._interval = Configuration(self.ctx._job_parameters).get_int(Options.AUTO_WATERMARK_INTERVAL)
        now = processing_time_ms()
        # BATCH mode: no watermark until the end of input, which brings the last one
        periodic = self._generates and self._interval > 0 and not self.batch
        self._next_emit = now + self._interval if periodic else None
        self._idleness = None if self.batch else st.idleness_ms
        self._last_record = now
        self._idle = False

    def process(self, batch: Batch, input_index: int) -> None:
        ts = self._timestamps(batch)
        if ts is not None and len(ts):
            m = int(ts.max())
            if self._max_ts is None or m > self._max_ts:
                self._max_ts = m
            split = self.source.reader.current_split() if self.source is not None else None
            if split is not None:
                if m > self._split_max.get(split, MIN_WATERMARK):
                    self._split_max[split] = m
                if self._idleness is not None:
                    self._split_active[split] = processing_time_ms()
        if self._idleness is not None:
            self._last_record = processing_time_ms()
        if self._idle:
            self._idle = False
            self.output.emit_event(WatermarkStatus(False))
        self.output.emit(batch, ts)

    def _timestamps(self, batch: Batch) -> np.ndarray | None:
        if self._column is not None:
            return _timestamp_column(batch, self._column)
        if self._extract is None:
            return self.ts  # the timestamps the records already carry
        extract = self._extract
        prior = self.ts.tolist() if self.ts is not None else [NO_TIMESTAMP] * num_rows(batch)
        return np.fromiter((_millis(extract(r, p)) for r, p in zip(to_rows(batch), prior)), dtype=np.int64,
                           count=len(prior))

    def next_processing_time(self) -> int | None:
        due = self._next_emit
        if self._idleness is not None and not self._idle:
            idle_at = self._last_record + self._idleness
            due = idle_at if due is None else min(due, idle_at)
        return due

    def on_processing_time(self, now_ms: int) -> None:
        if self._next_emit is not None and now_ms >= self._next_emit:
            self._next_emit = now_ms + self._interval
            splits = self.source.reader.open_splits() if self.source is not None else None
            if splits is not None and not splits:
                # A reader without a split (more subtasks than Kafka partitions) holds nothing back.
                if not self._idle:
                    self._idle = True
                    self.output.emit_event(WatermarkStatus(True))
            else:
                high = self._high_water(splits, now_ms)
                if high is not None and self._emit_watermark(high - self._bound - 1) and self._idle:
                    self.output.emit_event(WatermarkStatus(True))  # a watermark made it active downstream
        if self._idleness is not None and not self._idle and now_ms - self._last_record >= self._idleness:
            self._idle = True
            self.output.emit_event(WatermarkStatus(True))

    def _high_water(self, splits: list | None, now_ms: int) -> int | None:
        """The largest timestamp the watermark may follow: of the whole stream, or with several
        source splits the smallest of their largest (a split with no record yet holds it back,
        unless it has been idle for the strategy's idleness, as Flink's per-split watermarks)."""
        if not splits or not self._split_max:
            return self._max_ts
        if self._idleness is not None:
            for s in splits:
                self._split_active.setdefault(s, now_ms)  # first seen: counts as active from now
            active = [s for s in splits if now_ms - self._split_active[s] < self._idleness]
            # Every split idle: the ones that had records keep their watermark (the last word
            # before the idle status; Flink's emits it while the empty split goes idle first).
            splits = active or [s for s in splits if s in self._split_max]
        seen = [self._split_max.get(s) for s in splits]
        if any(m is None for m in seen):
            return None
        return min(seen)  # type: ignore[type-var]

    def _emit_watermark(self, watermark: int) -> bool:
        if watermark > self.current_watermark:
            self.current_watermark = watermark
            self.output.emit_event(Watermark(watermark))
            return True
        return False

    def process_watermark(self, watermark: int) -> None:
        if watermark == MAX_WATERMARK:  # end of input: everything still open fires
            super().process_watermark(watermark)

    def process_event(self, event: RuntimeEvent) -> None:
        if isinstance(event, Watermark):
            self.process_watermark(event.timestamp_ms)
        # an upstream idle status is replaced by this operator's own

    def close(self) -> None:
        a = self.node.params["strategy"].assigner
        if a is not None and hasattr(a, "close") and callable(a.close):
            self._guard(a.close)


def _millis(value: Any) -> int:
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, _dt.datetime):
        return int(value.timestamp() * 1000)
    if isinstance(value, float):
        return int(value)
    raise TypeError(f"a timestamp assigner returned {value!r}: event timestamps are integer milliseconds since the epoch")


def _timestamp_column(batch: Batch, column: str) -> np.ndarray:
    if isinstance(batch, pa.RecordBatch):
        idx = batch.schema.get_field_index(column)
        if idx < 0:
            raise KeyError(f"timestamp column {column!r} is not in the records; columns: {batch.schema.names}")
        col = batch.column(idx)
        if col.null_count:
            raise ValueError(f"timestamp column {column!r}: a record has no timestamp (null)")
        if pa.types.is_timestamp(col.type) or pa.types.is_date(col.type):
            col = col.cast(pa.timestamp("ms")).cast(pa.int64())
        elif not pa.types.is_integer(col.type):
            raise TypeError(f"timestamp column {column!r} is {col.type}: it needs integer milliseconds or a timestamp")
        return col.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    try:
        return np.fromiter((_millis(r[column]) for r in batch), dtype=np.int64, count=len(batch))
    except (KeyError, IndexError, TypeError) as e:
        raise KeyError(f"cannot read timestamp field {column!r} from a record: {type(e).__name__}: {e}") from e


class SinkOperator(StreamOperator):
    """Runs a sink's writer; with checkpointing, the two-phase commit around it.

    Committables prepared at barrier n wait in operator state until checkpoint n
    is complete; those prepared at the end of input wait for the final
    checkpoint. A restored subtask first commits what its checkpoint held.
    A sink with ``commit_in_background`` commits in a thread of its own (see
    ``committer.py``): its committables leave the pending state only once committed.
    """

    PENDING = "pending-committables"
    WRITER = "writer"
    COMMIT_TIMEOUT_S = 600.0  # at the end, how long close waits for the last commits

    def setup(self) -> None:
        self._sink = self.node.fn
        self._checkpointing = self.ctx.is_checkpointing_enabled()
        # A writer may leave its pre-commit running (FileSink: Parquet part files completed in a thread):
        # it puts a wait here, and the checkpoint's snapshot waits for it before it is acknowledged.
        self._background: list = []
        self.ctx._sink_background = self._background
        self._writer = self._sink.create_writer(self.ctx)
        self._pending: list[tuple[int, Any]] = []  # (checkpoint id, committable)
        self._unassigned: list[Any] = []  # prepared at the end of input, before the final checkpoint
        self._committer: BackgroundCommitter | None = None
        self._submitted_up_to = 0  # the newest checkpoint whose committables went to the committer
        if self.operator_state.is_restored():
            restored = self.operator_state.get_list_state(self.PENDING).get()
            if restored:
                self._sink.commit([c for _, c in restored])
            self._writer.restore_state(self.operator_state.get_union_list_state(self.WRITER).get())
        start = getattr(self._writer, "start", None)  # writers that do not subclass SinkWriter have none
        if start is not None:
            start()
        if self._checkpointing and getattr(self._sink, "commit_in_background", False):
            self._committer = BackgroundCommitter(f"{self.name}-{self.ctx.get_index_of_this_subtask()}")

    def process(self, batch: Batch, input_index: int) -> None:
        if self._committer is not None and self._committer.error is not None:
            self._reap()
        self._writer.write(batch)

    def _reap(self) -> None:
        """Drop what the committer has committed from the pending state; its failure fails the task."""
        committer = self._committer
        if committer is None:
            return
        if committer.error is not None:
            raise self.failure(committer.error)
        done = committer.done_up_to
        if self._pending and self._pending[0][0] <= done:
            self._pending = [(n, c) for n, c in self._pending if n > done]

    def is_available(self) -> bool:
        """Whether the writer takes more now (a sink with ``throttles``: the collect sink)."""
        return self._writer.is_available()

    def snapshot_state(self, checkpoint_id: int, full: bool = False) -> OperatorSnapshot | None:
        snap = super().snapshot_state(checkpoint_id, full)
        if self._background:  # this checkpoint's pre-commits (and those of the end of input) still running
            if snap is None:
                snap = OperatorSnapshot(self, None, None)
                self.snapshot_in_flight = True
            snap.waits, self._background[:] = list(self._background), []
        return snap

    def prepare_snapshot(self, checkpoint_id: int) -> None:
        self._reap()
        ready = self._unassigned + self._writer.prepare_commit()
        self._unassigned = []
        self._pending.extend((checkpoint_id, c) for c in ready)
        self.operator_state.get_list_state(self.PENDING).update([[n, c] for n, c in self._pending])
        # Union: after a rescale every subtask sees every old writer's state (e.g. FileSink's part
        # counters), so no new part file can take the name of one an old subtask committed.
        self.operator_state.get_union_list_state(self.WRITER).update(self._writer.snapshot_state())

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        if self._committer is not None:
            self._reap()
            ready = [c for n, c in self._pending if self._submitted_up_to < n <= checkpoint_id]
            if ready:
                self._committer.submit(checkpoint_id, lambda: self._sink.commit(ready))
                self._submitted_up_to = checkpoint_id
            return
        ready = [c for n, c in self._pending if n <= checkpoint_id]
        if ready:
            maybe_kill(self.ctx, "sink-before-commit", ready)
            self._guard(lambda: self._sink.commit(ready))
            maybe_kill(self.ctx, "sink-after-commit", ready)
            self._pending = [(n, c) for n, c in self._pending if n > checkpoint_id]

    def on_finish(self) -> None:
        ready = self._writer.prepare_commit()
        if self._checkpointing:
            self._unassigned.extend(ready)  # committed once the final checkpoint completes
        else:
            self._sink.commit(ready)

    def close(self) -> None:
        if self._committer is not None:
            if not self._committer.wait(self.COMMIT_TIMEOUT_S):
                raise self.failure(TimeoutError(f"the sink's commits did not finish in {self.COMMIT_TIMEOUT_S:.0f} s"))
            self._reap()
        self._guard(self._writer.close)

    def dispose(self) -> None:
        if self._committer is not None:
            self._committer.close()  # after a failure nothing waits for it: the restore commits again
        super().dispose()


class SourceOperator(StreamOperator):
    """Head of a source task; the task polls its reader and calls ``emit``.

    Its splits and positions are operator list state, redistributed on restore.
    """

    SPLITS = "source-splits"

    def setup(self) -> None:
        self.reader = self.node.fn.create_reader(self.ctx)
        store = self.operator_state
        self._splits = (store.get_union_list_state if self.reader.union_state else store.get_list_state)(self.SPLITS)
        if store.is_restored():
            self.reader.restore_state(self._splits.get())
        self._snapshotted: dict[int, list] = {}  # checkpoint id -> the splits it holds, until it completes

    def prepare_snapshot(self, checkpoint_id: int) -> None:
        splits = self.reader.snapshot_state()
        if splits is not None:
            self._splits.update(splits)
            self._snapshotted[checkpoint_id] = splits

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        splits = self._snapshotted.pop(checkpoint_id, None)
        for older in [n for n in self._snapshotted if n < checkpoint_id]:  # aborted or subsumed
            del self._snapshotted[older]
        self._guard(lambda: self.reader.notify_checkpoint_complete(checkpoint_id, splits))

    def poll(self) -> Any:
        """The reader's next batch, None (nothing yet) or END."""
        try:
            return self.reader.poll()
        except Exception as e:
            raise self.failure(e) from e

    def emit(self, batch: Batch) -> None:
        if type(batch) is Stamped:  # records with event timestamps (e.g. Kafka's)
            self.records_in += num_rows(batch.batch)
            self.output.emit(batch.batch, batch.ts)
            return
        self.records_in += num_rows(batch)
        self.output.emit(batch)

    def process(self, batch: Batch, input_index: int) -> None:  # pragma: no cover - sources have no input
        raise RuntimeError("a source has no input")

    def close(self) -> None:
        self._guard(self.reader.close)


def _keyed_rows(batch: Batch, key: Any) -> Any:
    keys = extract_keys(batch, key)
    if isinstance(keys, np.ndarray):
        keys = keys.tolist()
    return zip(keys, to_rows(batch))


class KeyedMapOperator(MapOperator):
    """``key_by(...).map(f)`` where ``f`` has an ``open``: as in Flink, its runtime context gives
    keyed state scoped to the key of the record in hand."""

    keyed = True

    def process(self, batch: Batch, input_index: int) -> None:
        fn, backend, out = self._fn, self.keyed_backend, []
        for key, r in _keyed_rows(batch, self.node.params["key"]):
            backend.current_key = key  # type: ignore[union-attr]
            out.append(fn(r))
        self.output.emit(out, self.ts)  # one output per input: the timestamps carry over


class KeyedFlatMapOperator(FlatMapOperator):
    keyed = True

    def process(self, batch: Batch, input_index: int) -> None:
        fn, backend, out = self._fn, self.keyed_backend, []
        ts = self.ts
        out_ts: list = []  # each output keeps the timestamp of the input it came from
        stamps = ts.tolist() if ts is not None else None
        for i, (key, r) in enumerate(_keyed_rows(batch, self.node.params["key"])):
            backend.current_key = key  # type: ignore[union-attr]
            result = fn(r)
            if result is not None:
                before = len(out)
                out.extend(result)
                if stamps is not None:
                    out_ts.extend([stamps[i]] * (len(out) - before))
        self.output.emit(out, None if ts is None else np.asarray(out_ts, dtype=np.int64))


class KeyedFilterOperator(FilterOperator):
    keyed = True

    def process(self, batch: Batch, input_index: int) -> None:
        fn, backend, mask = self._fn, self.keyed_backend, []
        rows = []
        for key, r in _keyed_rows(batch, self.node.params["key"]):
            backend.current_key = key  # type: ignore[union-attr]
            mask.append(bool(fn(r)))
            rows.append(r)
        kept_ts = None if self.ts is None else self.ts[np.asarray(mask, dtype=bool)]
        if isinstance(batch, pa.RecordBatch):  # keep the columnar form
            self.output.emit(batch.filter(pa.array(mask, type=pa.bool_())), kept_ts)
        else:
            self.output.emit([r for r, keep in zip(rows, mask) if keep], kept_ts)


KEYED_VARIANTS: dict[str, type[StreamOperator]] = {
    T.MAP: KeyedMapOperator,
    T.FLAT_MAP: KeyedFlatMapOperator,
    T.FILTER: KeyedFilterOperator,
}


def _opens_state(node: OperatorNode) -> bool:
    """A map/flat_map/filter on a keyed stream whose function has its own ``open``: only there can
    it reach keyed state (a lambda never can), so only it pays for a keyed backend and keys."""
    if node.params.get("key") is None or node.kind not in KEYED_VARIANTS:
        return False
    from ..api.functions import Function

    opener = getattr(type(node.fn), "open", None)
    return callable(opener) and opener is not Function.open


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
    T.KEYED_CO_PROCESS: KeyedCoProcessOperator,
    T.SINK: SinkOperator,
    T.TIMESTAMPS: TimestampsAndWatermarksOperator,
}


def create_operator(node: OperatorNode, ctx: RuntimeContext) -> StreamOperator:
    if node.kind == T.WINDOW:
        from .windows import WindowOperator  # it builds on this module

        return WindowOperator(node, ctx)
    if node.kind == T.WINDOW_AGGREGATE:
        from .window_columnar import ColumnarWindowAggregateOperator

        return ColumnarWindowAggregateOperator(node, ctx)
    if node.kind in T.BROADCAST_PROCESS_KINDS:
        from .broadcast import BroadcastProcessOperator, KeyedBroadcastProcessOperator  # it builds on this module

        return (KeyedBroadcastProcessOperator if node.kind == T.KEYED_BROADCAST_PROCESS else BroadcastProcessOperator)(node, ctx)
    if _opens_state(node):
        return KEYED_VARIANTS[node.kind](node, ctx)
    return OPERATORS[node.kind](node, ctx)
