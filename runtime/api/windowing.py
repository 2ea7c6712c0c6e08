"""Windows, as in PyFlink (``pyflink.datastream.window``): windows, assigners, triggers,
evictors and window functions.

Everything here is plain data and pure decisions; the window operator
(``task/windows.py``) keeps the state and the timers. A trigger answers each
element and each timer of a window with a ``TriggerResult``; the trigger
context it is given lets it set timers for that window and keep small state
per window (both are keyed state of the operator, checkpointed with it).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, Callable, Iterable

from .functions import Function, Subscriptable
from .time import Time

MAX_TIMESTAMP = (1 << 63) - 1


def _ms(size: Any, what: str) -> int:
    if isinstance(size, Time):
        return size.to_milliseconds()
    if isinstance(size, int) and not isinstance(size, bool):
        return size
    to_ms = getattr(size, "to_milliseconds", None)  # Duration
    if callable(to_ms):
        return int(to_ms())
    raise TypeError(f"{what} needs a Time (e.g. Time.seconds(5)) or milliseconds, got {size!r}")


# -- windows --------------------------------------------------------------------------------
class Window:
    def max_timestamp(self) -> int:
        raise NotImplementedError

    # Windows are immutable values: state tables copy what they hold while a snapshot is being
    # written (copy on read), and copying a window would only cost time.
    def __copy__(self) -> "Window":
        return self

    def __deepcopy__(self, memo: dict) -> "Window":
        return self


@dataclass(frozen=True, order=True)
class TimeWindow(Window):
    """``[start, end)`` in milliseconds."""

    start: int
    end: int

    def max_timestamp(self) -> int:
        return self.end - 1

    def intersects(self, other: "TimeWindow") -> bool:
        return self.start <= other.end and self.end >= other.start

    def cover(self, other: "TimeWindow") -> "TimeWindow":
        return TimeWindow(min(self.start, other.start), max(self.end, other.end))

    @staticmethod
    def get_window_start_with_offset(timestamp: int, offset: int, window_size: int) -> int:
        return timestamp - (timestamp - offset + window_size) % window_size

    def __repr__(self) -> str:
        return f"TimeWindow(start={self.start}, end={self.end})"

    def __reduce__(self) -> tuple:
        # pickled as a call with two ints, not as an object with a state dict: the per-record window
        # operator's snapshots hold one per key and window (~20% less time and size to pickle)
        return TimeWindow, (self.start, self.end)


@dataclass(frozen=True, order=True)
class CountWindow(Window):
    id: int

    def max_timestamp(self) -> int:
        return MAX_TIMESTAMP

    def __reduce__(self) -> tuple:
        return CountWindow, (self.id,)


@dataclass(frozen=True, order=True)
class GlobalWindow(Window):
    def max_timestamp(self) -> int:
        return MAX_TIMESTAMP

    @staticmethod
    def get() -> "GlobalWindow":
        return GlobalWindow()

    def __repr__(self) -> str:
        return "GlobalWindow"


# -- triggers ------------------------------------------------------------------------------
class TriggerResult(Enum):
    CONTINUE = (False, False)
    FIRE_AND_PURGE = (True, True)
    FIRE = (True, False)
    PURGE = (False, True)

    def is_fire(self) -> bool:
        return self.value[0]

    def is_purge(self) -> bool:
        return self.value[1]


class Trigger(Subscriptable):
    """When a window's function runs (FIRE) and when its contents go (PURGE)."""

    class TriggerContext(Subscriptable):  # what the operator hands in; documented here for users
        def get_current_processing_time(self) -> int: ...
        def get_current_watermark(self) -> int: ...
        def register_processing_time_timer(self, time: int) -> None: ...
        def register_event_time_timer(self, time: int) -> None: ...
        def delete_processing_time_timer(self, time: int) -> None: ...
        def delete_event_time_timer(self, time: int) -> None: ...
        def get_partitioned_state(self, state_descriptor: Any) -> Any: ...

    class OnMergeContext(TriggerContext):
        def merge_partitioned_state(self, state_descriptor: Any) -> None: ...

    def on_element(self, element: Any, timestamp: int, window: Window, ctx: Any) -> TriggerResult:
        raise NotImplementedError

    def on_processing_time(self, time: int, window: Window, ctx: Any) -> TriggerResult:
        raise NotImplementedError

    def on_event_time(self, time: int, window: Window, ctx: Any) -> TriggerResult:
        raise NotImplementedError

    def can_merge(self) -> bool:
        return False

    def on_merge(self, window: Window, ctx: Any) -> None:
        raise NotImplementedError(f"{type(self).__name__} cannot be used with merging (session) windows")

    def clear(self, window: Window, ctx: Any) -> None:
        pass


class EventTimeTrigger(Trigger):
    """Fires when the watermark passes the end of the window (and on every late element within
    the allowed lateness)."""

    @staticmethod
    def create() -> "EventTimeTrigger":
        return EventTimeTrigger()

    def on_element(self, element: Any, timestamp: int, window: Window, ctx: Any) -> TriggerResult:
        if window.max_timestamp() <= ctx.get_current_watermark():
            return TriggerResult.FIRE
        ctx.register_event_time_timer(window.max_timestamp())
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: Window, ctx: Any) -> TriggerResult:
        return TriggerResult.FIRE if time == window.max_timestamp() else TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: Window, ctx: Any) -> TriggerResult:
        return TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: Window, ctx: Any) -> None:
        if window.max_timestamp() > ctx.get_current_watermark():
            ctx.register_event_time_timer(window.max_timestamp())

    def clear(self, window: Window, ctx: Any) -> None:
        ctx.delete_event_time_timer(window.max_timestamp())


class ProcessingTimeTrigger(Trigger):
    """Fires when the clock passes the end of the window."""

    @staticmethod
    def create() -> "ProcessingTimeTrigger":
        return ProcessingTimeTrigger()

    def on_element(self, element: Any, timestamp: int, window: Window, ctx: Any) -> TriggerResult:
        ctx.register_processing_time_timer(window.max_timestamp())
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: Window, ctx: Any) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: Window, ctx: Any) -> TriggerResult:
        return TriggerResult.FIRE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: Window, ctx: Any) -> None:
        if window.max_timestamp() > ctx.get_current_processing_time():
            ctx.register_processing_time_timer(window.max_timestamp())

    def clear(self, window: Window, ctx: Any) -> None:
        ctx.delete_processing_time_timer(window.max_timestamp())


class CountTrigger(Trigger):
    """Fires every ``count`` elements of a window."""

    COUNT = "count"

    def __init__(self, window_size: int):
        count = window_size
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise ValueError(f"CountTrigger needs a positive count, got {count!r}")
        self.count = count

    @staticmethod
    def of(window_size: int) -> "CountTrigger":
        return CountTrigger(window_size)

    def on_element(self, element: Any, timestamp: int, window: Window, ctx: Any) -> TriggerResult:
        state = ctx.get_partitioned_state(_COUNT)
        n = (state.value() or 0) + 1
        if n >= self.count:
            state.clear()
            return TriggerResult.FIRE
        state.update(n)
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: Window, ctx: Any) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: Window, ctx: Any) -> TriggerResult:
        return TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: Window, ctx: Any) -> None:
        ctx.merge_partitioned_state(_COUNT)

    def clear(self, window: Window, ctx: Any) -> None:
        ctx.get_partitioned_state(_COUNT).clear()


class PurgingTrigger(Trigger):
    """Another trigger whose every FIRE also purges the window."""

    def __init__(self, nested_trigger: Trigger):
        if not isinstance(nested_trigger, Trigger):
            raise TypeError(f"PurgingTrigger.of needs a Trigger, got {nested_trigger!r}")
        self.nested = nested_trigger

    @staticmethod
    def of(nested_trigger: Trigger) -> "PurgingTrigger":
        return PurgingTrigger(nested_trigger)

    @staticmethod
    def _purging(r: TriggerResult) -> TriggerResult:
        return TriggerResult.FIRE_AND_PURGE if r.is_fire() else r

    def on_element(self, element: Any, timestamp: int, window: Window, ctx: Any) -> TriggerResult:
        return self._purging(self.nested.on_element(element, timestamp, window, ctx))

    def on_event_time(self, time: int, window: Window, ctx: Any) -> TriggerResult:
        return self._purging(self.nested.on_event_time(time, window, ctx))

    def on_processing_time(self, time: int, window: Window, ctx: Any) -> TriggerResult:
        return self._purging(self.nested.on_processing_time(time, window, ctx))

    def can_merge(self) -> bool:
        return self.nested.can_merge()

    def on_merge(self, window: Window, ctx: Any) -> None:
        self.nested.on_merge(window, ctx)

    def clear(self, window: Window, ctx: Any) -> None:
        self.nested.clear(window, ctx)


class NeverTrigger(Trigger):
    """The default of GlobalWindows: never fires (set a trigger)."""

    def on_element(self, element: Any, timestamp: int, window: Window, ctx: Any) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: Window, ctx: Any) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: Window, ctx: Any) -> TriggerResult:
        return TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: Window, ctx: Any) -> None:
        pass


def _earliest(a: int, b: int) -> int:
    return a if a <= b else b


class _Continuous(Trigger):
    """PyFlink's ContinuousEventTimeTrigger / ContinuousProcessingTimeTrigger: fire every
    ``interval`` (aligned to multiples of it) while the window is open, and at its end."""

    def __init__(self, interval: Any):
        self.interval = _ms(interval, f"{type(self).__name__}.of")
        if self.interval <= 0:
            raise ValueError(f"{type(self).__name__}: the interval must be positive, got {self.interval} ms")
        from .state import ReducingStateDescriptor

        self.state_desc = ReducingStateDescriptor("fire-time", _earliest)

    def _register_next(self, time: int, window: Window, ctx: Any, state: Any) -> None:
        next_fire = min(time + self.interval, window.max_timestamp())
        state.add(next_fire)
        self._register(ctx, next_fire)

    def _register(self, ctx: Any, time: int) -> None:
        raise NotImplementedError

    def _delete(self, ctx: Any, time: int) -> None:
        raise NotImplementedError

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: Window, ctx: Any) -> None:
        ctx.merge_partitioned_state(self.state_desc)
        next_fire = ctx.get_partitioned_state(self.state_desc).get()
        if next_fire is not None:
            self._register(ctx, next_fire)

    def clear(self, window: Window, ctx: Any) -> None:
        state = ctx.get_partitioned_state(self.state_desc)
        t = state.get()
        if t is not None:
            self._delete(ctx, t)
            state.clear()


class ContinuousEventTimeTrigger(_Continuous):
    @staticmethod
    def of(interval: Any) -> "ContinuousEventTimeTrigger":
        return ContinuousEventTimeTrigger(interval)

    def _register(self, ctx: Any, time: int) -> None:
        ctx.register_event_time_timer(time)

    def _delete(self, ctx: Any, time: int) -> None:
        ctx.delete_event_time_timer(time)

    def on_element(self, element: Any, timestamp: int, window: Window, ctx: Any) -> TriggerResult:
        if window.max_timestamp() <= ctx.get_current_watermark():
            return TriggerResult.FIRE  # the watermark is past the window already
        ctx.register_event_time_timer(window.max_timestamp())
        state = ctx.get_partitioned_state(self.state_desc)
        if state.get() is None:
            self._register_next(timestamp - timestamp % self.interval, window, ctx, state)
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: Window, ctx: Any) -> TriggerResult:
        if time == window.max_timestamp():
            return TriggerResult.FIRE
        state = ctx.get_partitioned_state(self.state_desc)
        if state.get() == time:
            state.clear()
            self._register_next(time, window, ctx, state)
            return TriggerResult.FIRE
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: Window, ctx: Any) -> TriggerResult:
        return TriggerResult.CONTINUE


class ContinuousProcessingTimeTrigger(_Continuous):
    @staticmethod
    def of(interval: Any) -> "ContinuousProcessingTimeTrigger":
        return ContinuousProcessingTimeTrigger(interval)

    def _register(self, ctx: Any, time: int) -> None:
        ctx.register_processing_time_timer(time)

    def _delete(self, ctx: Any, time: int) -> None:
        ctx.delete_processing_time_timer(time)

    def on_element(self, element: Any, timestamp: int, window: Window, ctx: Any) -> TriggerResult:
        state = ctx.get_partitioned_state(self.state_desc)
        now = ctx.get_current_processing_time()
        if state.get() is None:
            self._register_next(now - now % self.interval, window, ctx, state)
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: Window, ctx: Any) -> TriggerResult:
        state = ctx.get_partitioned_state(self.state_desc)
        if state.get() == time:
            state.clear()
            self._register_next(time, window, ctx, state)
            return TriggerResult.FIRE
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: Window, ctx: Any) -> TriggerResult:
        return TriggerResult.CONTINUE


class _Count:  # the trigger state of CountTrigger
    name = "_count"

    @staticmethod
    def merge(a: int | None, b: int | None) -> int:
        return (a or 0) + (b or 0)


_COUNT = _Count()


# -- evictors ------------------------------------------------------------------------------
class Evictor(Subscriptable):
    """Removes elements of a window before and/or after its function runs. ``elements`` is a
    list of ``TimestampedValue`` (``.value``, ``.timestamp``); remove from it in place."""

    def evict_before(self, elements: list, size: int, window: Window, ctx: Any) -> None:
        pass

    def evict_after(self, elements: list, size: int, window: Window, ctx: Any) -> None:
        pass


@dataclass
class TimestampedValue:
    value: Any
    timestamp: int | None

    def get_value(self) -> Any:
        return self.value

    def get_timestamp(self) -> int | None:
        return self.timestamp


class CountEvictor(Evictor):
    """Keeps the last ``max_count`` elements."""

    def __init__(self, max_count: int, do_evict_after: bool = False):
        if not isinstance(max_count, int) or max_count < 1:
            raise ValueError(f"CountEvictor needs a positive count, got {max_count!r}")
        self.max_count = max_count
        self.after = do_evict_after

    @staticmethod
    def of(max_count: int, do_evict_after: bool = False) -> "CountEvictor":
        return CountEvictor(max_count, do_evict_after)

    def _evict(self, elements: list) -> None:
        if len(elements) > self.max_count:
            del elements[: len(elements) - self.max_count]

    def evict_before(self, elements: list, size: int, window: Window, ctx: Any) -> None:
        if not self.after:
            self._evict(elements)

    def evict_after(self, elements: list, size: int, window: Window, ctx: Any) -> None:
        if self.after:
            self._evict(elements)


class TimeEvictor(Evictor):
    """Keeps the elements within ``window_size`` of the newest element."""

    def __init__(self, window_size: Any, do_evict_after: bool = False):
        self.window_size = _ms(window_size, "TimeEvictor.of")
        self.after = do_evict_after

    @staticmethod
    def of(window_size: Any, do_evict_after: bool = False) -> "TimeEvictor":
        return TimeEvictor(window_size, do_evict_after)

    def _evict(self, elements: list) -> None:
        stamps = [e.timestamp for e in elements if e.timestamp is not None]
        if not stamps:
            return
        cutoff = max(stamps) - self.window_size
        elements[:] = [e for e in elements if e.timestamp is None or e.timestamp > cutoff]

    def evict_before(self, elements: list, size: int, window: Window, ctx: Any) -> None:
        if not self.after:
            self._evict(elements)

    def evict_after(self, elements: list, size: int, window: Window, ctx: Any) -> None:
        if self.after:
            self._evict(elements)


# -- assigners -----------------------------------------------------------------------------
def _processing_time(context: Any) -> int:
    """The processing time of an ``assign_windows`` context (a number: the time itself)."""
    return context if isinstance(context, (int, float)) else context.get_current_processing_time()


class WindowAssigner(Subscriptable):
    _event_time = True
    merging = False
    counts_elements = False  # assign_count_windows(n) by each key's element count instead of assign_windows

    def assign_windows(self, element: Any, timestamp: int, context: Any) -> list[Window]:
        raise NotImplementedError

    def get_default_trigger(self, env: Any = None) -> Trigger:
        return EventTimeTrigger() if self.is_event_time() else ProcessingTimeTrigger()

    def is_event_time(self) -> bool:
        """Whether the windows are in event time (PyFlink's method; a custom assigner overrides it)."""
        return self._event_time

    class WindowAssignerContext(Subscriptable):
        """What ``assign_windows`` is given as ``context``, as PyFlink's."""

        def get_current_processing_time(self) -> int:
            raise NotImplementedError

        def get_runtime_context(self) -> Any:
            raise NotImplementedError

    def describe(self) -> str:
        return type(self).__name__


class _Tumbling(WindowAssigner):
    def __init__(self, size: Any, offset: Any = 0):
        self.size = _ms(size, f"{type(self).__name__}.of")
        self.offset = _ms(0 if offset is None else offset, f"{type(self).__name__}.of")
        if self.size <= 0:
            raise ValueError(f"{type(self).__name__}: the window size must be positive, got {self.size} ms")
        if abs(self.offset) >= self.size:
            raise ValueError(f"{type(self).__name__}: the offset must be smaller than the size")

    def assign_windows(self, element: Any, timestamp: int, context: Any) -> list[Window]:
        t = timestamp if self._event_time else _processing_time(context)
        start = TimeWindow.get_window_start_with_offset(t, self.offset, self.size)
        return [TimeWindow(start, start + self.size)]

    def describe(self) -> str:
        return f"{type(self).__name__}({self.size} ms)"


class TumblingEventTimeWindows(_Tumbling):
    @staticmethod
    def of(size: Any, offset: Any = None) -> "TumblingEventTimeWindows":
        return TumblingEventTimeWindows(size, offset)


class TumblingProcessingTimeWindows(_Tumbling):
    _event_time = False

    @staticmethod
    def of(size: Any, offset: Any = None) -> "TumblingProcessingTimeWindows":
        return TumblingProcessingTimeWindows(size, offset)


class _Sliding(WindowAssigner):
    def __init__(self, size: Any, slide: Any, offset: Any = 0):
        self.size = _ms(size, f"{type(self).__name__}.of")
        self.slide = _ms(slide, f"{type(self).__name__}.of")
        self.offset = _ms(0 if offset is None else offset, f"{type(self).__name__}.of")
        if self.size <= 0 or self.slide <= 0:
            raise ValueError(f"{type(self).__name__}: size and slide must be positive, got {self.size} / {self.slide} ms")
        if abs(self.offset) >= self.slide:
            raise ValueError(f"{type(self).__name__}: the offset must be smaller than the slide")

    def assign_windows(self, element: Any, timestamp: int, context: Any) -> list[Window]:
        t = timestamp if self._event_time else _processing_time(context)
        last = TimeWindow.get_window_start_with_offset(t, self.offset, self.slide)
        out = []
        start = last
        while start > t - self.size:
            out.append(TimeWindow(start, start + self.size))
            start -= self.slide
        return out

    def describe(self) -> str:
        return f"{type(self).__name__}({self.size} ms, {self.slide} ms)"


class SlidingEventTimeWindows(_Sliding):
    @staticmethod
    def of(size: Any, slide: Any, offset: Any = None) -> "SlidingEventTimeWindows":
        return SlidingEventTimeWindows(size, slide, offset)


class SlidingProcessingTimeWindows(_Sliding):
    _event_time = False

    @staticmethod
    def of(size: Any, slide: Any, offset: Any = None) -> "SlidingProcessingTimeWindows":
        return SlidingProcessingTimeWindows(size, slide, offset)


class SessionWindowTimeGapExtractor:
    def extract(self, element: Any) -> int:
        raise NotImplementedError


class MergingWindowAssigner(WindowAssigner):
    """An assigner whose windows merge: here, time windows that overlap merge into the window
    covering them (session windows); the window operator does it. A subclass cannot change that
    rule (``merge_windows`` of its own is refused where the window is defined)."""

    merging = True

    class MergeCallback(Subscriptable):
        def merge(self, to_be_merged: Iterable[Window], merge_result: Window) -> None: ...

    def merge_windows(self, windows: Iterable[Window], callback: "MergingWindowAssigner.MergeCallback") -> None:
        """Overlapping time windows merge into the window covering them."""
        pending = sorted(w for w in windows if isinstance(w, TimeWindow))
        groups: list[list[TimeWindow]] = []
        for w in pending:
            if groups and groups[-1][-1].intersects(w):
                groups[-1].append(w)
            else:
                groups.append([w])
        for group in groups:
            if len(group) > 1:
                cover = group[0]
                for w in group[1:]:
                    cover = cover.cover(w)
                callback.merge(group, cover)


class _Session(MergingWindowAssigner):

    def __init__(self, session_gap: Any = None, extractor: Any = None):
        gap = session_gap
        self.gap = None if gap is None else _ms(gap, f"{type(self).__name__}.with_gap")
        if self.gap is not None and self.gap <= 0:
            raise ValueError(f"{type(self).__name__}: the session gap must be positive, got {self.gap} ms")
        self.extractor = extractor

    def assign_windows(self, element: Any, timestamp: int, context: Any) -> list[Window]:
        t = timestamp if self._event_time else _processing_time(context)
        if self.extractor is not None:
            fn = getattr(self.extractor, "extract", self.extractor)
            gap = int(fn(element))
            if gap <= 0:
                raise ValueError(f"{type(self).__name__}: the dynamic gap of {element!r} is {gap} ms; it must be positive")
        else:
            gap = self.gap  # type: ignore[assignment]
        return [TimeWindow(t, t + gap)]

    def describe(self) -> str:
        return f"{type(self).__name__}({'dynamic gap' if self.extractor else f'{self.gap} ms'})"


class EventTimeSessionWindows(_Session):
    @staticmethod
    def with_gap(size: Any) -> "EventTimeSessionWindows":
        return EventTimeSessionWindows(size)

    @staticmethod
    def with_dynamic_gap(extractor: Any) -> "EventTimeSessionWindows":
        return EventTimeSessionWindows(None, extractor)


class ProcessingTimeSessionWindows(_Session):
    _event_time = False

    @staticmethod
    def with_gap(size: Any) -> "ProcessingTimeSessionWindows":
        return ProcessingTimeSessionWindows(size)

    @staticmethod
    def with_dynamic_gap(extractor: Any) -> "ProcessingTimeSessionWindows":
        return ProcessingTimeSessionWindows(None, extractor)


class DynamicEventTimeSessionWindows(EventTimeSessionWindows):
    """Event-time sessions whose gap each element gives (a SessionWindowTimeGapExtractor or a function)."""

    def __init__(self, session_window_time_gap_extractor: Any):
        super().__init__(None, session_window_time_gap_extractor)

    @staticmethod
    def with_dynamic_gap(extractor: Any) -> "DynamicEventTimeSessionWindows":
        return DynamicEventTimeSessionWindows(extractor)


class DynamicProcessingTimeSessionWindows(ProcessingTimeSessionWindows):
    """Processing-time sessions whose gap each element gives."""

    def __init__(self, session_window_time_gap_extractor: Any):
        super().__init__(None, session_window_time_gap_extractor)

    @staticmethod
    def with_dynamic_gap(extractor: Any) -> "DynamicProcessingTimeSessionWindows":
        return DynamicProcessingTimeSessionWindows(extractor)


def _positive_count(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{what} needs a positive number of elements, got {value!r}")
    return value


class CountTumblingWindowAssigner(WindowAssigner):
    """PyFlink's ``count_window(size)``: each key's elements n*size .. n*size+size-1 form
    ``CountWindow(n)``, which fires once it is full; a window never filled never fires."""

    _event_time = False
    counts_elements = True

    def __init__(self, window_size: int):
        self.window_size = _positive_count(window_size, "CountTumblingWindowAssigner")

    @staticmethod
    def of(window_size: int) -> "CountTumblingWindowAssigner":
        return CountTumblingWindowAssigner(window_size)

    def assign_count_windows(self, count: int) -> list[Window]:
        """The windows of a key's element number ``count`` (0 for its first)."""
        return [CountWindow(count // self.window_size)]

    def get_default_trigger(self, env: Any = None) -> Trigger:
        # PyFlink's is CountTrigger(size): a full window fires once and is never assigned to again.
        # Purging it then gives the same output and does not keep every window forever.
        return PurgingTrigger.of(CountTrigger.of(self.window_size))

    def describe(self) -> str:
        return f"CountTumblingWindowAssigner({self.window_size})"

    def __repr__(self) -> str:
        return self.describe()


class CountSlidingWindowAssigner(WindowAssigner):
    """PyFlink's ``count_window(size, slide)``: ``CountWindow(n)`` holds each key's elements
    n*slide .. n*slide+size-1 and fires once it is full (so, unlike Java Flink's evictor-based
    sliding count window, never with fewer than ``size`` elements)."""

    _event_time = False
    counts_elements = True

    def __init__(self, window_size: int, window_slide: int):
        self.window_size = _positive_count(window_size, "CountSlidingWindowAssigner")
        self.window_slide = _positive_count(window_slide, "CountSlidingWindowAssigner")

    @staticmethod
    def of(window_size: int, window_slide: int) -> "CountSlidingWindowAssigner":
        return CountSlidingWindowAssigner(window_size, window_slide)

    def assign_count_windows(self, count: int) -> list[Window]:
        # PyFlink's assign_windows: the windows [id*slide, id*slide+size-1] holding ``count``, newest first
        last_id = count // self.window_slide
        out = []
        while last_id >= 0 and last_id * self.window_slide <= count <= last_id * self.window_slide + self.window_size - 1:
            out.append(CountWindow(last_id))
            last_id -= 1
        return out

    def get_default_trigger(self, env: Any = None) -> Trigger:
        return PurgingTrigger.of(CountTrigger.of(self.window_size))  # see CountTumblingWindowAssigner

    def describe(self) -> str:
        return f"CountSlidingWindowAssigner({self.window_size}, {self.window_slide})"

    def __repr__(self) -> str:
        return self.describe()


class GlobalWindows(WindowAssigner):
    """One window per key that never ends; it fires only by a trigger you set."""

    _event_time = False

    @staticmethod
    def create() -> "GlobalWindows":
        return GlobalWindows()

    def assign_windows(self, element: Any, timestamp: int, context: Any) -> list[Window]:
        return [GlobalWindow()]

    def get_default_trigger(self, env: Any = None) -> Trigger:
        return NeverTrigger()


# -- window functions ----------------------------------------------------------------------
class WindowFunction(Function):
    def apply(self, key: Any, window: Window, inputs: Iterable[Any]) -> Iterable[Any]:
        raise NotImplementedError


class AllWindowFunction(Function):
    def apply(self, window: Window, inputs: Iterable[Any]) -> Iterable[Any]:
        raise NotImplementedError


class ProcessWindowFunction(Function):
    class Context(Subscriptable):
        def window(self) -> Window: ...
        def current_processing_time(self) -> int: ...
        def current_watermark(self) -> int: ...

    def process(self, key: Any, context: "ProcessWindowFunction.Context", elements: Iterable[Any]) -> Iterable[Any]:
        raise NotImplementedError

    def clear(self, context: "ProcessWindowFunction.Context") -> None:
        pass


class ProcessAllWindowFunction(Function):
    Context = ProcessWindowFunction.Context

    def process(self, context: Any, elements: Iterable[Any]) -> Iterable[Any]:
        raise NotImplementedError

    def clear(self, context: Any) -> None:
        pass


def window_function(fn: Any, all_windows: bool) -> Callable[[Any, Window, Any, list], Any]:
    """Every kind of window function as one call: ``(key, window, context, elements) -> iterable``."""
    if fn is None:
        return lambda key, window, ctx, elements: elements
    if isinstance(fn, (ProcessWindowFunction, ProcessAllWindowFunction)) or (
            callable(getattr(fn, "process", None)) and not callable(getattr(fn, "apply", None))):
        if all_windows:
            return lambda key, window, ctx, elements: fn.process(ctx, elements)
        return lambda key, window, ctx, elements: fn.process(key, ctx, elements)
    apply = getattr(fn, "apply", None)
    if callable(apply):
        if all_windows:
            return lambda key, window, ctx, elements: apply(window, elements)
        return lambda key, window, ctx, elements: apply(key, window, elements)
    if callable(fn):
        if all_windows:
            return lambda key, window, ctx, elements: fn(window, elements)
        return lambda key, window, ctx, elements: fn(key, window, elements)
    raise TypeError(f"a window function needs apply(...) or process(...), got {fn!r}")


__all__ = [
    "AllWindowFunction", "ContinuousEventTimeTrigger", "ContinuousProcessingTimeTrigger", "CountEvictor",
    "CountSlidingWindowAssigner", "CountTrigger", "CountTumblingWindowAssigner", "CountWindow",
    "DynamicEventTimeSessionWindows", "DynamicProcessingTimeSessionWindows", "EventTimeSessionWindows",
    "MergingWindowAssigner",
    "EventTimeTrigger", "Evictor", "GlobalWindow", "GlobalWindows", "NeverTrigger", "ProcessAllWindowFunction",
    "ProcessWindowFunction", "ProcessingTimeSessionWindows", "ProcessingTimeTrigger", "PurgingTrigger",
    "SessionWindowTimeGapExtractor", "SlidingEventTimeWindows", "SlidingProcessingTimeWindows", "TimeEvictor",
    "TimeWindow", "TimestampedValue", "Trigger", "TriggerResult", "TumblingEventTimeWindows",
    "TumblingProcessingTimeWindows", "Window", "WindowAssigner", "WindowFunction",
]
