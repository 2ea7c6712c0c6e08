"""Operators without keyed state: map, flat_map, filter, project, process."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ..api.functions import as_callable
from ..batch import Batch, to_rows
from .base import StreamOperator
from .context import _Context, _emit_process_results, _run_stamped
from .timers import TimerService


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
