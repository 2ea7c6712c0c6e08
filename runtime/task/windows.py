"""The window operator (Flink's WindowOperator / EvictingWindowOperator), keyed.

Per key the operator keeps, in its keyed state backend:
* ``_window-contents``: window -> contents: the running value (``reduce``), the
  accumulator (``aggregate``), or the elements with their timestamps (window
  functions that see every element, and any window with an evictor);
* ``_window-trigger-state``: (window, state name) -> value, the triggers' state;
* timers, namespaced by window (``timers.InternalTimerService``): the trigger's
  and the cleanup timer that drops a window's state once the watermark passed
  its end plus the allowed lateness.
All of it is checkpointed with the operator and moves with its key group.

Session windows merge on arrival: a new element's window swallows every
window of the key it overlaps, with their contents, trigger state and timers.
Output records carry the window's last timestamp (``max_timestamp``), as in Flink.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ..api.functions import OutputTag, as_callable
from ..api.windowing import (
    MAX_TIMESTAMP,
    EventTimeTrigger,
    ProcessingTimeTrigger,
    TimestampedValue,
    TimeWindow,
    Window,
    WindowAssigner,
    window_function,
)
from ..batch import NO_TIMESTAMP, Batch, extract_keys, to_rows
from .base import StreamOperator
from .context import _Context, _emit_process_results
from .timers import InternalTimerService, TimeDomain, processing_time_ms

_EMPTY = object()
EVENT_TIME, PROCESSING_TIME = TimeDomain.EVENT_TIME, TimeDomain.PROCESSING_TIME


class NoTimestampError(RuntimeError):
    pass


class WindowOperator(StreamOperator):
    keyed = True

    def setup(self) -> None:
        p = self.node.params
        self.assigner = p["assigner"]
        # PyFlink passes the environment; a task has none (None): the built-in assigners do not use it
        self.trigger = p["trigger"] if p.get("trigger") is not None else self.assigner.get_default_trigger(None)
        self.evictor = p.get("evictor")
        self.lateness = p.get("allowed_lateness", 0)
        self.late_tag: OutputTag | None = p.get("late_tag")
        self.mode = p["mode"]  # "reduce" | "aggregate" | "elements"
        self.keep_elements = self.mode == "elements" or self.evictor is not None
        self.event_time = bool(self.assigner.is_event_time())
        self._assigner_ctx = _AssignerContext(self.ctx)
        # The default triggers set exactly the timer the cleanup needs (with no lateness) and keep no
        # state: the operator can skip registering, deleting and clearing what they already do.
        self.plain_trigger = type(self.trigger) in (EventTimeTrigger, ProcessingTimeTrigger)
        self.cleanup_is_trigger_timer = self.plain_trigger and (self.lateness == 0 or not self.event_time) and (
            isinstance(self.trigger, EventTimeTrigger) == self.event_time)
        self._reduce = as_callable(p["reduce"], "reduce", "reduce") if self.mode == "reduce" else None
        self._agg = p.get("aggregate")
        self._window_fn = window_function(p.get("window_function"), p.get("all_windows", False))
        for fn in (p.get("reduce"), self._agg, p.get("window_function")):
            if fn is not None and callable(getattr(fn, "open", None)):
                fn.open(self.ctx)
        backend = self.keyed_backend
        self.contents = backend.raw_table("_window-contents")  # type: ignore[union-attr]
        self.trigger_state = backend.raw_table("_window-trigger-state")  # type: ignore[union-attr]
        self.timers = InternalTimerService(backend)
        self.timers.restore()
        # Count window assigners (PyFlink's count_window) number each key's elements: its count so far.
        self.counts = backend.raw_table("_window-assigner-count") if self.assigner.counts_elements else None  # type: ignore[union-attr]
        self.late_records_dropped = 0  # Flink's numLateRecordsDropped
        self._side = _Context()  # side outputs of process window functions
        self._side.side_ts = {}

    def close(self) -> None:
        p = self.node.params
        for fn in (p.get("reduce"), self._agg, p.get("window_function")):
            if fn is not None and callable(getattr(fn, "close", None)):
                self._guard(fn.close)

    # -- elements --------------------------------------------------------------------------
    def process(self, batch: Batch, input_index: int) -> None:
        keys = extract_keys(batch, self.node.params["key"])
        if isinstance(keys, np.ndarray):
            keys = keys.tolist()
        rows = to_rows(batch)
        if self.event_time and self.ts is None:
            raise NoTimestampError(
                f"window {self.assigner.describe()}: the records have no event timestamps. Add "
                "assign_timestamps_and_watermarks(WatermarkStrategy...with_timestamp_assigner(...)) before the "
                "window, or pass a WatermarkStrategy to from_source, or use a processing-time window")
        stamps = self.ts.tolist() if self.ts is not None else [None] * len(rows)
        now = processing_time_ms()
        out: list = []
        out_ts: list = []
        late: list = []
        late_ts: list = []
        backend, assigner, trigger = self.keyed_backend, self.assigner, self.trigger
        assigner_ctx = self._assigner_ctx
        assigner_ctx.now = now
        for key, r, t in zip(keys, rows, stamps):
            if self.event_time and t == NO_TIMESTAMP:
                raise NoTimestampError(f"window {assigner.describe()}: a record has no event timestamp: {r!r}")
            backend.current_key = key  # type: ignore[union-attr]
            state = self.contents.get(key) or {}
            if self.counts is None:
                windows = assigner.assign_windows(r, t, assigner_ctx)
            else:
                n = self.counts.get(key) or 0
                self.counts.put(key, n + 1)
                windows = assigner.assign_count_windows(n)
            if assigner.merging:
                windows = [self._merge(key, state, w) for w in windows]
            skipped = True
            for w in windows:
                if self._window_late(w):
                    continue
                skipped = False
                state[w] = self._add(state.get(w, _EMPTY), r, t)
                result = trigger.on_element(r, t, w, _TriggerContext(self, key, w))
                if result.is_fire():
                    self._emit(key, w, state, out, out_ts)
                if result.is_purge():
                    state.pop(w, None)
                self._register_cleanup(key, w)
            self._store(key, state)
            if skipped and self._element_late(t):
                if self.late_tag is not None:
                    late.append(r)
                    late_ts.append(t)
                else:
                    self.late_records_dropped += 1
        self._flush(out, out_ts, late, late_ts)

    def _add(self, contents: Any, value: Any, ts: int | None) -> Any:
        if self.keep_elements:
            elements = [] if contents is _EMPTY else contents
            elements.append((ts, value))
            return elements
        if self.mode == "reduce":
            return value if contents is _EMPTY else self._reduce(contents, value)  # type: ignore[misc]
        acc = self._agg.create_accumulator() if contents is _EMPTY else contents  # type: ignore[union-attr]
        return self._agg.add(value, acc)  # type: ignore[union-attr]

    def _merge_contents(self, a: Any, b: Any) -> Any:
        if a is _EMPTY:
            return b
        if b is _EMPTY:
            return a
        if self.keep_elements:
            return sorted(a + b, key=lambda e: (e[0] is None, e[0]))
        if self.mode == "reduce":
            return self._reduce(a, b)  # type: ignore[misc]
        merge = getattr(self._agg, "merge", None)
        try:
            return merge(a, b)  # type: ignore[misc]
        except NotImplementedError:
            raise NotImplementedError(f"session windows merge accumulators: {type(self._agg).__name__} "
                                      "needs a merge(acc_a, acc_b) method") from None

    # -- session windows -------------------------------------------------------------------
    def _merge(self, key: Any, state: dict, new: Window) -> Window:
        overlapping = [w for w in state if isinstance(w, TimeWindow) and w.intersects(new)]  # type: ignore[arg-type]
        if not overlapping:
            return new
        merged = new
        for w in overlapping:
            merged = merged.cover(w)  # type: ignore[attr-defined]
        if overlapping == [merged]:
            return merged  # the element falls inside a window the key already has
        acc = _EMPTY
        for w in sorted(overlapping):
            acc = self._merge_contents(acc, state.pop(w))
        if acc is not _EMPTY:
            state[merged] = acc
        self.trigger.on_merge(merged, _TriggerContext(self, key, merged, [w for w in overlapping if w != merged]))
        for w in overlapping:
            if w != merged:
                self.trigger.clear(w, _TriggerContext(self, key, w))
                self._clear_trigger_state(key, w)
                self._delete_cleanup(key, w)
        return merged

    # -- timers ------------------------------------------------------------------------------
    def _cleanup_time(self, w: Window) -> int:
        if not self.event_time:
            return w.max_timestamp()
        end = w.max_timestamp() + self.lateness
        return MAX_TIMESTAMP if end < w.max_timestamp() else end  # overflow

    def _register_cleanup(self, key: Any, w: Window) -> None:
        if self.cleanup_is_trigger_timer:
            return  # the trigger registered this very timer
        t = self._cleanup_time(w)
        if t == MAX_TIMESTAMP:
            return  # global windows live as long as the job
        if self.event_time:
            self.timers.register(TimeDomain.EVENT_TIME, key, t, w)
        else:
            self.timers.register(TimeDomain.PROCESSING_TIME, key, t, w)

    def _delete_cleanup(self, key: Any, w: Window) -> None:
        domain = TimeDomain.EVENT_TIME if self.event_time else TimeDomain.PROCESSING_TIME
        self.timers.delete(domain, key, self._cleanup_time(w), w)

    def _window_late(self, w: Window) -> bool:
        return self.event_time and self._cleanup_time(w) <= self.current_watermark

    def _element_late(self, ts: int | None) -> bool:
        return self.event_time and ts is not None and ts + self.lateness <= self.current_watermark

    def on_event_time(self, watermark: int) -> None:
        self._fire(TimeDomain.EVENT_TIME, watermark)

    def next_processing_time(self) -> int | None:
        return self.timers.next_timestamp(TimeDomain.PROCESSING_TIME)

    def on_processing_time(self, now_ms: int) -> None:
        self._guard(lambda: self._fire(TimeDomain.PROCESSING_TIME, now_ms))

    def _fire(self, domain: TimeDomain, up_to: int) -> None:
        out: list = []
        out_ts: list = []
        backend, trigger = self.keyed_backend, self.trigger
        for key, ts, w in self.timers.pop_due(domain, up_to):
            backend.current_key = key  # type: ignore[union-attr]
            state = self.contents.get(key) or {}
            ctx = _TriggerContext(self, key, w)
            if domain is TimeDomain.EVENT_TIME:
                result = trigger.on_event_time(ts, w, ctx)
            else:
                result = trigger.on_processing_time(ts, w, ctx)
            if result.is_fire() and w in state:
                self._emit(key, w, state, out, out_ts)
            if result.is_purge():
                state.pop(w, None)
            if ts == self._cleanup_time(w) and (domain is EVENT_TIME) == self.event_time:
                state.pop(w, None)
                if not self.cleanup_is_trigger_timer:  # else its only timer just fired
                    trigger.clear(w, ctx)
                if not self.plain_trigger:
                    self._clear_trigger_state(key, w)
                clear = getattr(self.node.params.get("window_function"), "clear", None)
                if callable(clear):
                    clear(_WindowContext(self, w))
            self._store(key, state)
        self._flush(out, out_ts, [], [])

    # -- output ------------------------------------------------------------------------------
    def _emit(self, key: Any, w: Window, state: dict, out: list, out_ts: list) -> None:
        contents = state[w]
        wctx = _WindowContext(self, w)
        if self.keep_elements:
            elements = [TimestampedValue(v, t) for t, v in contents]
            if self.evictor is not None:
                self.evictor.evict_before(elements, len(elements), w, wctx)
            values = [e.value for e in elements]
            if self.mode == "reduce":
                values = [functools.reduce(self._reduce, values)] if values else []  # type: ignore[arg-type]
            elif self.mode == "aggregate":
                acc = self._agg.create_accumulator()  # type: ignore[union-attr]
                for v in values:
                    acc = self._agg.add(v, acc)  # type: ignore[union-attr]
                values = [self._agg.get_result(acc)]  # type: ignore[union-attr]
        elif self.mode == "reduce":
            values = [contents]
        else:
            values = [self._agg.get_result(contents)]  # type: ignore[union-attr]
        result = self._window_fn(key, w, wctx, values)
        before = len(out)
        if result is not None:
            out.extend(result)
        out_ts.extend([w.max_timestamp()] * (len(out) - before))
        if self.evictor is not None:
            self.evictor.evict_after(elements, len(elements), w, wctx)
            state[w] = [(e.timestamp, e.value) for e in elements]

    def _flush(self, out: list, out_ts: list, late: list, late_ts: list) -> None:
        side = self._side
        if late:
            side.side.setdefault(self.late_tag.tag_id, []).extend(late)  # type: ignore[union-attr]
            side.side_ts.setdefault(self.late_tag.tag_id, []).extend(late_ts)  # type: ignore[union-attr]
        if out or side.side:
            _emit_process_results(self, out, side, out_ts)
        side.side, side.side_ts = {}, {}

    # -- state -------------------------------------------------------------------------------
    def _store(self, key: Any, state: dict) -> None:
        if state:
            self.contents.put(key, state)
        else:
            self.contents.remove(key)

    def _clear_trigger_state(self, key: Any, w: Window) -> None:
        states = self.trigger_state.get(key)
        if states:
            rest = {k: v for k, v in states.items() if k[0] != w}
            if len(rest) != len(states):
                if rest:
                    self.trigger_state.put(key, rest)
                else:
                    self.trigger_state.remove(key)


class _TriggerContext:
    """What a trigger sees for one (key, window): timers in that window's namespace, and state."""

    __slots__ = ("op", "key", "window", "merged")

    def __init__(self, op: WindowOperator, key: Any, window: Window, merged: list | None = None):
        self.op, self.key, self.window, self.merged = op, key, window, merged or []

    def get_current_processing_time(self) -> int:
        return processing_time_ms()

    def get_current_watermark(self) -> int:
        return self.op.current_watermark

    def register_event_time_timer(self, time: int) -> None:
        self.op.timers.register(TimeDomain.EVENT_TIME, self.key, int(time), self.window)

    def register_processing_time_timer(self, time: int) -> None:
        self.op.timers.register(TimeDomain.PROCESSING_TIME, self.key, int(time), self.window)

    def delete_event_time_timer(self, time: int) -> None:
        self.op.timers.delete(TimeDomain.EVENT_TIME, self.key, int(time), self.window)

    def delete_processing_time_timer(self, time: int) -> None:
        self.op.timers.delete(TimeDomain.PROCESSING_TIME, self.key, int(time), self.window)

    def get_partitioned_state(self, state_descriptor: Any) -> "_TriggerState":
        return _TriggerState(self.op, self.key, self.window, state_descriptor)

    def merge_partitioned_state(self, state_descriptor: Any) -> None:
        """In ``on_merge``: fold the state of the windows merged away into this window's."""
        target = _TriggerState(self.op, self.key, self.window, state_descriptor)
        merge = _merge_function(state_descriptor)
        value = target.value()
        for w in self.merged:
            other = _TriggerState(self.op, self.key, w, state_descriptor).value()
            if other is not None:
                value = other if value is None else merge(value, other)
        if value is not None:
            target.update(value)


def _merge_function(descriptor: Any) -> Any:
    merge = getattr(descriptor, "merge", None)
    if callable(merge):
        return merge
    reducer = getattr(descriptor, "reducer", None)
    if callable(reducer):
        return reducer()
    raise TypeError(f"trigger state {getattr(descriptor, 'name', descriptor)!r} cannot merge: use a ReducingStateDescriptor")


class _TriggerState:
    """Value / reducing state of a trigger, scoped to (key, window)."""

    __slots__ = ("table", "key", "slot", "descriptor")

    def __init__(self, op: WindowOperator, key: Any, window: Window, descriptor: Any):
        self.table, self.key, self.descriptor = op.trigger_state, key, descriptor
        self.slot = (window, getattr(descriptor, "name", None) or str(descriptor))

    def value(self) -> Any:
        return (self.table.get(self.key) or {}).get(self.slot)

    get = value

    def update(self, value: Any) -> None:
        states = self.table.get(self.key) or {}
        states[self.slot] = value
        self.table.put(self.key, states)

    def add(self, value: Any) -> None:
        current = self.value()
        self.update(value if current is None else _merge_function(self.descriptor)(current, value))

    def clear(self) -> None:
        states = self.table.get(self.key)
        if states and self.slot in states:
            del states[self.slot]
            if states:
                self.table.put(self.key, states)
            else:
                self.table.remove(self.key)


class _WindowContext:
    """``ProcessWindowFunction.Context``."""

    __slots__ = ("op", "_window")

    def __init__(self, op: WindowOperator, window: Window):
        self.op, self._window = op, window

    def window(self) -> Window:
        return self._window

    def current_processing_time(self) -> int:
        return processing_time_ms()

    def current_watermark(self) -> int:
        return self.op.current_watermark

    def output(self, output_tag: OutputTag, value: Any) -> None:
        side = self.op._side
        side.side.setdefault(output_tag.tag_id, []).append(value)
        side.side_ts.setdefault(output_tag.tag_id, []).append(self._window.max_timestamp())  # type: ignore[union-attr]


__all__ = ["WindowOperator", "NoTimestampError"]


class _AssignerContext(WindowAssigner.WindowAssignerContext):
    """``assign_windows``' context (PyFlink's WindowAssignerContext): the batch's processing time."""

    __slots__ = ("now", "_runtime_context")

    def __init__(self, runtime_context: Any):
        self.now = 0
        self._runtime_context = runtime_context

    def get_current_processing_time(self) -> int:
        return self.now

    def get_runtime_context(self) -> Any:
        return self._runtime_context
