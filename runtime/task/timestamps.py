"""Timestamps and watermarks: the operator of ``assign_timestamps_and_watermarks`` (and of
``from_source`` with a watermark strategy)."""

from __future__ import annotations

import datetime as _dt
import inspect
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from ..batch import NO_TIMESTAMP, Batch, num_rows, numbers, to_rows
from ..config import Configuration, Options
from ..network.events import MAX_WATERMARK, MIN_WATERMARK, RuntimeEvent, Watermark, WatermarkStatus
from .base import StreamOperator
from .timers import processing_time_ms

if TYPE_CHECKING:
    from .source import SourceOperator


def _positional_arity(fn: Any) -> int:
    """How many positional arguments ``fn`` takes (a large number for *args; 1 when unknown)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return 1
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return 1 << 16
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty for p in params)


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
        return numbers(col).astype(np.int64, copy=False)
    try:
        return np.fromiter((_millis(r[column]) for r in batch), dtype=np.int64, count=len(batch))
    except (KeyError, IndexError, TypeError) as e:
        raise KeyError(f"cannot read timestamp field {column!r} from a record: {type(e).__name__}: {e}") from e
