"""What process functions see: their ``ctx`` (key, timestamp, timer service, side outputs),
the per-record loops that run them over a batch, and the timer firing of keyed operators."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..api.functions import OutputTag
from ..batch import NO_TIMESTAMP, Batch, extract_keys
from .base import StreamOperator
from .timers import InternalTimerService, TimeDomain, TimerService


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


class _KeyedContext(_Context):
    """The ``ctx`` of a keyed function: its current key is the keyed backend's, which the operator
    sets once per record (storing it in both was ~1% of a per-record job's CPU)."""

    __slots__ = ("_backend",)

    def __init__(self, backend: Any, timer_service: TimerService | None = None) -> None:
        self._backend = backend
        super().__init__(timer_service)

    @property  # type: ignore[override]
    def current_key(self) -> Any:
        return self._backend.current_key

    @current_key.setter
    def current_key(self, key: Any) -> None:
        self._backend.current_key = key


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


class _TimerFiring:
    """Keyed operators whose function has ``on_timer``: fire due timers with the key in scope."""

    def _init_timers(self: Any, ctx: _Context) -> None:
        self.timers = InternalTimerService(self.keyed_backend)
        self.timers.restore()
        ctx._timer_service = TimerService(self.timers, self, lambda: ctx.current_key)
        self._on_timer = getattr(self.node.fn, "on_timer", None)
        ctx_t = self._timer_ctx = _KeyedContext(self.keyed_backend)
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
