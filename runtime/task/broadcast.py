"""Broadcast state: the two-input operators of ``stream.connect(broadcast_stream).process(f)``.

Input 0 is the non-broadcast stream (forward, or hash-partitioned when keyed); input 1 is the
broadcast stream, whose every record reaches every subtask. ``process_broadcast_element`` sees
the broadcast records and may change the broadcast state (one map per ``MapStateDescriptor``
given to ``broadcast``); ``process_element`` sees the other stream with that state read-only,
so every subtask's copy stays the same (Flink's contract: the broadcast side must change it
the same way everywhere). The maps are operator state of mode ``broadcast``: every subtask
snapshots its copy, and a restored subtask takes one whole copy at any parallelism
(``state/operator_state.py``).

The keyed variant adds keyed state and timers on input 0 (``KeyedCoProcessOperator``'s way)
and ``ctx.apply_to_keyed_state`` on input 1.
"""

from __future__ import annotations

from typing import Any, Callable

from ..api.state import MapStateDescriptor, StateDescriptor
from ..batch import Batch, to_rows
from ..state.operator_state import BroadcastState
from ..state.ttl import table_kind
from .base import StreamOperator
from .context import _Context, _emit_process_results, _keyed_records, _run_rows, _TimerFiring
from .timers import TimerService, processing_time_ms

# state descriptor kind -> the backend call that gives that state for the current key
_STATE_GETTERS = {
    "value": "get_state",
    "list": "get_list_state",
    "map": "get_map_state",
    "reducing": "get_reducing_state",
    "aggregating": "get_aggregating_state",
}


class _BroadcastContextBase(_Context):
    __slots__ = ("_op",)

    def __init__(self, op: "BroadcastProcessOperator", timer_service: TimerService | None = None) -> None:
        super().__init__(timer_service)
        self._op = op

    def current_processing_time(self) -> int:
        return processing_time_ms()

    def current_watermark(self) -> int:
        return self._op.current_watermark

    def _state(self, state_descriptor: Any) -> BroadcastState:
        return self._op.broadcast_state(state_descriptor)


class ReadOnlyContext(_BroadcastContextBase):
    """``ctx`` of ``process_element`` and ``on_timer``: broadcast state read-only; on a keyed
    stream also the current key and the timer service."""

    __slots__ = ()

    def get_broadcast_state(self, state_descriptor: Any) -> Any:
        return self._state(state_descriptor).read_only()


class BroadcastContext(_BroadcastContextBase):
    """``ctx`` of ``process_broadcast_element``: writable broadcast state; no key (a broadcast
    record belongs to no key), so no keyed state or timers but ``apply_to_keyed_state``."""

    __slots__ = ()

    def get_broadcast_state(self, state_descriptor: Any) -> Any:
        return self._state(state_descriptor)

    def get_current_key(self) -> Any:
        raise RuntimeError("get_current_key(): process_broadcast_element has no current key (a broadcast record "
                           "goes to every key); use ctx.apply_to_keyed_state(descriptor, function) to reach keyed "
                           "state")

    def timer_service(self) -> Any:
        raise RuntimeError("timer_service(): timers can be set in process_element and on_timer only (a broadcast "
                           "record has no key to set them for)")

    def apply_to_keyed_state(self, state_descriptor: Any, function: Callable[[Any, Any], None]) -> None:
        self._op.apply_to_keyed_state(state_descriptor, function)


class BroadcastProcessOperator(StreamOperator):
    """``stream.connect(broadcast_stream).process(BroadcastProcessFunction)``."""

    def setup(self) -> None:
        super().setup()
        fn = self.node.fn
        self._fns = (fn.process_element, fn.process_broadcast_element)
        self._descriptors: dict[str, MapStateDescriptor] = {d.name: d for d in self.node.params["descriptors"]}
        # Every declared state exists from the start: restored ones come back, and each is in every
        # snapshot even before its first broadcast record.
        self._states = {name: self.operator_state.get_broadcast_state(name) for name in self._descriptors}
        self._ctxs = (ReadOnlyContext(self, TimerService(None, self, lambda: None)), BroadcastContext(self))

    def broadcast_state(self, state_descriptor: Any) -> BroadcastState:
        name = state_descriptor.name if isinstance(state_descriptor, StateDescriptor) else state_descriptor
        state = self._states.get(name)
        if state is None or not isinstance(state_descriptor, (MapStateDescriptor, str)):
            raise ValueError(f"get_broadcast_state({state_descriptor!r}): the broadcast stream has no such state; "
                             f"declared: {sorted(self._states)}. Pass its MapStateDescriptor to "
                             f"stream.broadcast(...) (as in Flink)")
        return state

    def apply_to_keyed_state(self, state_descriptor: Any, function: Callable[[Any, Any], None]) -> None:
        raise RuntimeError("apply_to_keyed_state: there is no keyed state here; connect a keyed stream "
                           "(stream.key_by(...).connect(broadcast_stream)) and use a KeyedBroadcastProcessFunction")

    def process(self, batch: Batch, input_index: int) -> None:
        fn, ctx = self._fns[input_index], self._ctxs[input_index]
        on_record, keys = self._set_key(input_index, batch)
        out, out_ts = _run_rows(fn, to_rows(batch), self.ts, ctx, on_record, keys)
        _emit_process_results(self, out, ctx, out_ts)

    def _set_key(self, input_index: int, batch: Batch) -> tuple[Any, list | None]:
        """Keyed variant: a callback that puts a record's key in scope, and the batch's keys."""
        return None, None


class KeyedBroadcastProcessOperator(_TimerFiring, BroadcastProcessOperator):
    """``keyed.connect(broadcast_stream).process(KeyedBroadcastProcessFunction)``."""

    keyed = True

    def setup(self) -> None:
        super().setup()
        ctx = self._ctxs[0]
        self._init_timers(ctx)
        # on_timer gets the read-only broadcast state too (Flink's OnTimerContext)
        timer_ctx = self._timer_ctx = ReadOnlyContext(self)
        timer_ctx._timer_service = TimerService(self.timers, self, lambda: timer_ctx.current_key)

    def _set_key(self, input_index: int, batch: Batch) -> tuple[Any, list | None]:
        backend = self.keyed_backend
        if input_index == 1:
            backend.current_key = None  # type: ignore[union-attr]  # keyed state needs apply_to_keyed_state here
            return None, None
        return _keyed_records(batch, self.node.params["key"], self._ctxs[0], backend)

    def apply_to_keyed_state(self, state_descriptor: Any, function: Callable[[Any, Any], None]) -> None:
        """``function(key, state)`` for every key of this subtask with state ``state_descriptor``
        (Flink's applyToKeyedState): e.g. a rule change rewrites every key's state."""
        getter = _STATE_GETTERS.get(getattr(state_descriptor, "kind", None))  # type: ignore[arg-type]
        if not isinstance(state_descriptor, StateDescriptor) or getter is None:
            raise TypeError(f"apply_to_keyed_state needs a keyed state descriptor (ValueStateDescriptor, "
                            f"ListStateDescriptor, MapStateDescriptor, ...), got {state_descriptor!r}")
        backend = self.keyed_backend
        table = backend.table(state_descriptor.name, table_kind(state_descriptor))  # type: ignore[union-attr]
        state = getattr(backend, getter)(state_descriptor)  # scoped to backend.current_key on every call
        try:
            for key in list(table.keys()):  # a list: the function may clear the state it is given
                backend.current_key = key  # type: ignore[union-attr]
                function(key, state)
        finally:
            backend.current_key = None  # type: ignore[union-attr]
