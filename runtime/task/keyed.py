"""Operators on a keyed stream: keyed process, rolling reduce and sum/min/max, and the keyed
variants of map/flat_map/filter (functions with an ``open`` that may use keyed state)."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pyarrow as pa

from ..lazy import LazyModule
from ..api.functions import as_callable
from ..api.types import Row
from ..batch import Batch, extract_keys, to_rows
from ..state.tables import AccumulatorTable
from .base import StreamOperator
from .context import _KeyedContext, _emit_process_results, _keyed_records, _run_stamped, _TimerFiring
from .stateless import FilterOperator, FlatMapOperator, MapOperator

pd = LazyModule("pandas")  # only keyed aggregations need it: not loaded by every worker


class KeyedProcessOperator(_TimerFiring, StreamOperator):
    keyed = True

    def setup(self) -> None:
        super().setup()
        self._fn = as_callable(self.node.fn, "process_element", "process")
        self._ctx = _KeyedContext(self.keyed_backend)
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
            backend.current_key = key  # type: ignore[union-attr]  # ctx's current key too
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
        # Each key's first record: its other fields are what every output of the key carries (Flink's
        # and PyFlink's sum/min/max keep the first record's, only the aggregated field changes).
        self._firsts = backend.raw_table(f"{self._how}-first")  # type: ignore[union-attr]

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
                firsts = self._first_batch(batch, keys, idx)
                self._emit_rolling(firsts.set_column(idx, field, pa.array(result)), keys)
                return
            batch = batch.to_pylist()
        rows = batch
        if rows and not isinstance(rows[0], (dict, tuple, list, Row)):
            # A basic value (a number, or an object): as PyFlink, position 0 is the value itself.
            if field != 0:
                raise TypeError(f"{self._how}({field!r}): the {field!r} field selected on a basic type "
                                f"({type(rows[0]).__name__}); a field expression on a basic type can only "
                                f"select the 0th field, the entire value (as PyFlink); map the records to "
                                f"tuples or Rows first")
            rows = list(rows)
        try:
            values = [_field(r, field) for r in rows]
        except (KeyError, IndexError, TypeError) as e:
            raise KeyError(f"{self._how}({field!r}): cannot read {field!r} from a record: {type(e).__name__}: {e}") from e
        arr = np.asarray(values) if values else np.zeros(0, dtype=np.int64)
        if arr.dtype.kind in "biuf" and all(type(v) in (int, float, bool) for v in values[:1]):
            results = self._agg.update(keys, arr).tolist()
        else:
            results = self._object_update(keys, values)
        self._emit_rolling([_replace(r, field, v) for r, v in zip(self._first_rows(keys, rows), results)], keys)

    def _first_rows(self, keys: list, rows: list) -> list:
        """Each record's key's first record (stored when the key is new)."""
        firsts, out = self._firsts, []
        missing = object()
        for k, r in zip(keys, rows):
            first = firsts.get(k, missing)
            if first is missing:
                firsts.put(k, r)
                first = r
            out.append(first)
        return out

    def _first_batch(self, batch: pa.RecordBatch, keys: list, idx: int) -> pa.RecordBatch:
        """``batch`` with each row's fields (but the aggregated one) taken from its key's first record,
        with Python work per distinct key of the batch, not per record."""
        names = batch.schema.names
        if len(names) == 1 or (len(names) == 2 and self._key.column is not None and self._key.column in names
                               and names.index(self._key.column) != idx):
            return batch  # only the key and the field: nothing else a first record could differ in
        column = self._key.column
        key_col = batch.column(names.index(column)) if column is not None and column in names else None
        if key_col is not None and not key_col.null_count and (
                pa.types.is_integer(key_col.type) or pa.types.is_string(key_col.type)):
            # factorize the key column itself (no Python per record): its ints and strs are the keys
            codes, uniques = pd.factorize(key_col.to_numpy(zero_copy_only=False))
        else:
            codes, uniques = pd.factorize(pd.Series(keys, dtype=object), use_na_sentinel=False)
        uniques = uniques.tolist()
        firsts, missing = self._firsts, object()
        stored = [firsts.get(k, missing) for k in uniques]
        # the batch's first record of each unique key (scattered backwards: the first occurrence wins)
        first_idx = np.empty(len(uniques), dtype=np.int64)
        first_idx[codes[::-1]] = np.arange(len(codes) - 1, -1, -1)
        new = np.fromiter((v is missing for v in stored), dtype=bool, count=len(stored))
        if new.all():
            source, at = batch, first_idx
        else:
            old = np.flatnonzero(~new)
            try:
                old_batch = pa.RecordBatch.from_pylist([stored[i] for i in old.tolist()], schema=batch.schema)
            except (pa.ArrowException, TypeError, ValueError):  # the stored rows do not fit this batch's schema
                old_batch = None
            if old_batch is None:
                rows = batch.to_pylist()
                return pa.RecordBatch.from_pylist(self._first_rows(keys, rows))
            source = pa.Table.from_batches([batch, old_batch]).combine_chunks().to_batches()[0]
            at = first_idx.copy()
            at[old] = len(batch) + np.arange(len(old))
        if new.any():
            new_u = np.flatnonzero(new)
            for k, row in zip([uniques[i] for i in new_u.tolist()], batch.take(pa.array(first_idx[new_u])).to_pylist()):  # noqa: E501
                firsts.put(k, row)
        return source.take(pa.array(at[codes]))

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


def _field(record: Any, field: Any) -> Any:
    if isinstance(record, (dict, tuple, list, Row)):
        return record[field]
    return record  # a basic value: field 0 (checked) is the whole value


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
    return value  # a basic value (position 0): the aggregate is the record

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
