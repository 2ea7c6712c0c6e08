"""The base of every stream operator: what runs inside a task, batch by batch.

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

The operators live in small modules that build on this one and never on each other's
importers: ``context`` (the ``ctx`` of process functions, timer firing), ``stateless``,
``keyed``, ``co_input``, ``timestamps``, ``source``, ``sink``, ``windows``,
``window_columnar``, ``broadcast``; ``factory`` maps a job graph node to its operator.
"""

from __future__ import annotations

import traceback
from typing import Any, Callable

import numpy as np

from ..api.functions import RuntimeContext
from ..batch import Batch, num_rows
from ..network.events import MAX_WATERMARK, MIN_WATERMARK, RuntimeEvent, Watermark, WatermarkStatus
from .timers import InternalTimerService
from ..graph.job_graph import OperatorNode
from ..config import Configuration
from ..state.backends import create_keyed_backend
from ..keygroups import key_group_range
from ..state.operator_state import OperatorStateStore
from ..state.snapshot import SnapshotFormatError, keyed_spans, read_keyed, read_operator
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
        per_subtask: list[dict] = [{} for _ in handles]
        first_keyed = True
        for old in _restore_order(handles, backend.key_groups if backend is not None else None):
            handle = handles[old]
            if handle is None:
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
            per_subtask[old] = read_operator(data, index, where) if "operator" in index else {}
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


def _restore_order(handles: list[dict | None], key_groups: range | None) -> list[int]:
    """The order to restore old subtasks' handles in: a native RocksDB handle overlapping this subtask's key
    groups most first (it becomes the base database, clipped: rocksdb_snapshot.restore_native), the rest as
    they come. The overlap is read from the handle's index (no data)."""
    def overlap(i: int) -> int:
        native = ((handles[i] or {}).get("index") or {}).get("rocksdb")
        if native is None or key_groups is None:
            return 0
        try:
            lo, hi = (int(x) for x in native.get("key_groups", [0, 0]))
        except (TypeError, ValueError):
            return 0  # malformed: restore_native names what is wrong with it, in its turn
        return max(0, min(hi, key_groups.stop) - max(lo, key_groups.start))

    order = list(range(len(handles)))
    best = max(order, key=overlap, default=None)
    if best is not None and overlap(best) > 0:
        order.remove(best)
        order.insert(0, best)
    return order
