"""Built-in window aggregations on Arrow batches: ``key_by(column).window(tumbling or sliding
event-time windows).sum / min / max(column)`` with no Python per record.

Each open window (by its end) keeps one accumulator table per column in the operator's keyed
state backend (``_wagg-<end>-<column index>``): the aggregated column accumulates (numpy
``add.at`` / ``minimum.at`` / ``maximum.at`` on the heap backend, one multi-get and multi-put per
batch on RocksDB), every other column keeps its key's first value in the window, as Flink's
``sum`` keeps the first record's other fields. Tables are keyed by the record key, so they are
checkpointed, restored and rescaled by key group like any keyed state; open windows are found
again from the table names after a restore. When the watermark passes a window's last
millisecond the whole window is emitted as one Arrow batch (timestamps: that millisecond) and
its tables are dropped. Records for windows that already fired are late: they go to the late
side output, or are counted and dropped.

The per-record window operator (``windows.py``) covers everything else: other windows,
triggers, evictors, allowed lateness, functions.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from ..batch import Batch, extract_keys, try_columnar
from ..state.tables import AccumulatorTable
from .operators import StreamOperator
from .windows import NoTimestampError

_TABLE = re.compile(r"^_wagg-(-?\d+)-(\d+)$")
_SCHEMA = "window-aggregate-schema"


class ColumnarWindowAggregateOperator(StreamOperator):
    keyed = True

    def setup(self) -> None:
        p = self.node.params
        a = p["assigner"]
        self.size, self.slide, self.offset = a.size, getattr(a, "slide", a.size), a.offset
        self.describe = a.describe()
        self.how, self.field = p["how"], p["field"]
        self.key_column = p["key"].column
        self.late_tag = p.get("late_tag")
        self.late_records_dropped = 0
        self.schema: pa.Schema | None = None
        if self.operator_state.is_restored():
            saved = self.operator_state.get_union_list_state(_SCHEMA).get()
            if saved:
                self.schema = pa.ipc.read_schema(pa.py_buffer(saved[0]))
        backend = self.keyed_backend
        self.open_windows: set[int] = {int(m.group(1)) for name in list(backend.kinds)  # type: ignore[union-attr]
                                       if (m := _TABLE.match(name))}

    def prepare_snapshot(self, checkpoint_id: int) -> None:
        if self.schema is not None:
            self.operator_state.get_union_list_state(_SCHEMA).update([self.schema.serialize().to_pybytes()])

    # -- records ----------------------------------------------------------------------------
    def process(self, batch: Batch, input_index: int) -> None:
        if not isinstance(batch, pa.RecordBatch):
            converted = try_columnar(batch)
            if converted is None:
                raise TypeError(f"window {self.describe} {self.how}({self.field!r}) by column {self.key_column!r} "
                                "needs dict records with flat values; use reduce(...) for other records")
            batch = converted
        if self.ts is None:
            raise NoTimestampError(
                f"window {self.describe}: the records have no event timestamps. Add assign_timestamps_and_"
                "watermarks(WatermarkStrategy...with_timestamp_assigner(...)) before the window")
        self._check_schema(batch)
        keys = extract_keys(batch, self.node.params["key"])
        ts = self.ts
        last_start = ts - np.mod(ts - self.offset + self.slide, self.slide)
        late_rows = np.ones(len(ts), dtype=bool)
        for j in range((self.size + self.slide - 1) // self.slide):
            start = last_start - j * self.slide
            member = start > ts - self.size
            end = start + self.size
            on_time = member & (end - 1 > self.current_watermark)
            late_rows &= ~on_time | ~member
            if not on_time.any():
                continue
            for e in np.unique(end[on_time]).tolist():
                rows = np.flatnonzero(on_time & (end == e))
                self._add(int(e), batch, keys, rows)
        if late_rows.any():
            late = batch.filter(pa.array(late_rows))
            if self.late_tag is not None:
                self.output.emit_side({self.late_tag.tag_id: late.to_pylist()},
                                      {self.late_tag.tag_id: ts[late_rows].tolist()})
            else:
                self.late_records_dropped += late.num_rows

    def _check_schema(self, batch: pa.RecordBatch) -> None:
        if self.schema is None:
            names = batch.schema.names
            if self.field not in names:
                raise KeyError(f"window {self.how}({self.field!r}): no such column; columns: {names}")
            for f in batch.schema:
                numeric = pa.types.is_integer(f.type) or pa.types.is_floating(f.type) or pa.types.is_boolean(f.type)
                if f.name != self.key_column and not numeric:
                    raise TypeError(f"window {self.how}({self.field!r}): column {f.name!r} is {f.type}; the columnar "
                                    "window aggregation carries numeric columns only (project it away, or use reduce)")
            self.schema = batch.schema
        elif not batch.schema.equals(self.schema):
            raise TypeError(f"window {self.how}({self.field!r}): records changed shape: {batch.schema.names} "
                            f"after {self.schema.names}")

    def _tables(self, end: int) -> list[Any]:
        backend = self.keyed_backend
        self.open_windows.add(end)
        key_index = self.schema.get_field_index(self.key_column)  # type: ignore[union-attr]
        field = self.schema.get_field_index(self.field)  # type: ignore[union-attr]
        # the key column needs no table: the tables' keys are its values
        tables = [None if i == key_index else backend.accumulators(f"_wagg-{end}-{i}")  # type: ignore[union-attr]
                  for i in range(len(self.schema))]  # type: ignore[arg-type]
        if isinstance(tables[field], AccumulatorTable):
            _share_slots([tables[field]] + [t for i, t in enumerate(tables) if t is not None and i != field])
        return tables

    def _add(self, end: int, batch: pa.RecordBatch, keys: Any, rows: np.ndarray) -> None:
        tables = self._tables(end)
        sub_keys = keys[rows] if isinstance(keys, np.ndarray) else [keys[i] for i in rows.tolist()]
        columns = [batch.column(i).take(pa.array(rows)).to_numpy(zero_copy_only=False)
                   for i in range(batch.num_columns)]
        field = self.schema.get_field_index(self.field)  # type: ignore[union-attr]
        key_index = self.schema.get_field_index(self.key_column)  # type: ignore[union-attr]
        if isinstance(tables[field], AccumulatorTable):
            self._add_heap(tables, sub_keys, columns, field, key_index)
        else:
            self._add_store(tables, sub_keys, columns, field, key_index)

    def _add_heap(self, tables: list, keys: Any, columns: list, field: int, key_index: int) -> None:
        key_list = keys.tolist() if isinstance(keys, np.ndarray) else keys
        first = tables[field]
        before = len(first)
        s = first.slots(key_list)
        n = len(first)
        new = s >= before
        if new.any():
            new_slots, first_rows = np.unique(s[new], return_index=True)
            rows = np.flatnonzero(new)[first_rows]
        for i, (table, values) in enumerate(zip(tables, columns)):
            if i == key_index:
                continue
            values = values.astype(np.int64) if values.dtype.kind == "b" else values
            table.ensure_capacity(n, values.dtype.kind)
            acc = table.acc
            if new.any():
                acc[new_slots] = values[rows]  # the first value of each new key
            if i == field:
                if self.how == "sum":
                    if new.any():
                        acc[new_slots] = 0
                    np.add.at(acc, s, values)
                elif self.how == "min":
                    np.minimum.at(acc, s, values)
                else:
                    np.maximum.at(acc, s, values)

    def _add_store(self, tables: list, keys: Any, columns: list, field: int, key_index: int) -> None:
        """RocksDB: one multi-get and one multi-put per table and batch."""
        codes, uniques = pd.factorize(keys if isinstance(keys, np.ndarray) else pd.Series(keys, dtype=object))
        uniques = list(uniques)
        first_rows = np.unique(codes, return_index=True)[1]
        for i, (table, values) in enumerate(zip(tables, columns)):
            if i == key_index:
                continue
            values = values.astype(np.int64) if values.dtype.kind == "b" else values
            stored = table.get_many(uniques)
            if i != field:
                missing = [j for j, v in enumerate(stored) if v is None]
                if missing:
                    table.put_many([uniques[j] for j in missing], values[first_rows[missing]].tolist())
                continue
            if self.how == "sum":
                total = np.bincount(codes, weights=values, minlength=len(uniques))
                if values.dtype.kind in "iu":
                    total = np.rint(total).astype(np.int64)
                result = [t if v is None else v + t for v, t in zip(stored, total.tolist())]
            else:
                ser = pd.Series(values).groupby(codes, sort=True)
                agg = (ser.min() if self.how == "min" else ser.max()).to_numpy().tolist()
                pick = min if self.how == "min" else max
                result = [a if v is None else pick(v, a) for v, a in zip(stored, agg)]
            table.put_many(uniques, result)

    # -- firing -----------------------------------------------------------------------------
    def on_event_time(self, watermark: int) -> None:
        for end in sorted(e for e in self.open_windows if e - 1 <= watermark):
            self._fire(end)

    def _fire(self, end: int) -> None:
        backend = self.keyed_backend
        names = [f"_wagg-{end}-{i}" for i in range(len(self.schema))] if self.schema is not None else []  # type: ignore[arg-type]
        self.open_windows.discard(end)
        if self.schema is None:
            return
        key_index = self.schema.get_field_index(self.key_column)
        field = self.schema.get_field_index(self.field)
        ref = backend.accumulators(names[field])  # type: ignore[union-attr]
        if isinstance(ref, AccumulatorTable):
            keys = ref.keys_by_slot
            n = len(keys)
            arrays = [None if i == key_index else backend.accumulators(nm).acc[:n]  # type: ignore[union-attr]
                      for i, nm in enumerate(names)]
        else:
            entries = dict(ref.items())
            keys = list(entries)
            arrays = []
            for i, nm in enumerate(names):
                if i == key_index:
                    arrays.append(None)
                    continue
                vals = entries if i == field else dict(backend.accumulators(nm).items())  # type: ignore[union-attr]
                arrays.append(np.asarray([vals[k] for k in keys]))
        if keys:
            cols = []
            for i, f in enumerate(self.schema):
                data = keys if i == key_index else arrays[i]
                cols.append(pa.array(data).cast(f.type) if not (i == field and self.how == "sum") or
                            pa.types.is_floating(f.type) else pa.array(data))
            out = pa.RecordBatch.from_arrays(cols, names=self.schema.names)
            self.output.emit(out, np.full(out.num_rows, end - 1, dtype=np.int64))
        for nm in names:
            backend.drop_table(nm)  # type: ignore[union-attr]


def _share_slots(tables: list[AccumulatorTable]) -> None:
    """The tables of one window map each key to one slot: the key lookup is done once per record.
    Tables restored one by one got mappings of their own: re-seat their values first."""
    first = tables[0]
    for t in tables[1:]:
        if t.slot_of is first.slot_of:
            continue
        n = len(t.keys_by_slot)
        values = t.acc[:n]
        s = first.slots(t.keys_by_slot) if n else np.zeros(0, dtype=np.int64)
        t.slot_of, t.keys_by_slot = first.slot_of, first.keys_by_slot
        t.acc = np.zeros(max(len(first.keys_by_slot), 1024), dtype=values.dtype)
        t.acc[s] = values


__all__ = ["ColumnarWindowAggregateOperator"]
