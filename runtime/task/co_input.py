"""Two-input operators of ``connect``: co-map, co-flat-map, co-process, and keyed co-process."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..api import transformations as T
from ..api.functions import as_callable
from ..batch import Batch, to_rows
from .base import StreamOperator
from .context import _Context, _emit_process_results, _keyed_records, _run_rows, _TimerFiring
from .timers import TimerService


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
