"""Built-in window aggregations on Arrow batches: ``key_by(column).window(tumbling or sliding
event-time windows).sum / min / max / min_by / max_by(column)`` and ``.aggregate(Aggregations(...))``
of columns (api/aggregations.py), with no Python per record.

Each open window (by its end) keeps one accumulator table per column in the operator's keyed
state backend (``_wagg-<end>-<column index>``): the aggregated column accumulates, every other
column keeps its key's first value in the window, as Flink's ``sum`` keeps the first record's
other fields (min_by / max_by: the columns of the best record; Aggregations: one table per
accumulator - first, sum, min, max, count; an avg is a sum and a count). Tables are keyed by the record key, so they are checkpointed, restored and
rescaled by key group like any keyed state; open windows are found again from the table names
after a restore. When the watermark passes a window's last millisecond the whole window is
emitted as one Arrow batch (timestamps: that millisecond) and its tables are dropped. Records
for windows that already fired are late: they go to the late side output, or are counted and
dropped.

Heap backend: the same keys recur in every window, so the operator keeps ONE key -> slot index
(``state.key_index.KeyIndex``) for all its windows and looks each batch's keys up once; a window
is a numpy array per column indexed by slot plus a bitmap of the slots it holds, updated with
``add.at`` / ``minimum.at`` / ``maximum.at``. Its tables in the backend are views over those
arrays (``_WindowColumn``) whose frozen form is a ``FrozenAccumulators`` over the shared index
with the window's bitmap (written as int64 key and value blocks: ``state.snapshot``); restored
tables are adopted into the index. RocksDB: one multi-get
and multi-put per table and batch.

The per-record window operator (``windows.py``) covers everything else: other windows,
triggers, evictors, allowed lateness, functions.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from ..api.types import Row
from ..batch import Batch, extract_keys, try_columnar
from ..state.heap import HashMapKeyedStateBackend
from ..state.key_index import KeyIndex
from ..state.tables import AccumulatorTable, FrozenAccumulators
from .base import StreamOperator
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
        self.how, self.field = p["how"], p["field"]  # how: sum / min / max of field, or "aggregate" (outputs)
        self.outputs: list[tuple[str, str, Any]] = p.get("outputs") or []  # (name, how, field) of Aggregations
        self.label = (f"{self.how}({self.field!r})" if self.how != "aggregate"
                      else ", ".join(f"{n}={h}({f!r})" for n, h, f in self.outputs))
        self.key_column = p["key"].column
        self.late_tag = p.get("late_tag")
        self.late_records_dropped = 0
        self.schema: pa.Schema | None = None
        if self.operator_state.is_restored():
            saved = self.operator_state.get_union_list_state(_SCHEMA).get()
            if saved:
                self.schema = pa.ipc.read_schema(pa.py_buffer(saved[0]))
                self._layout()
        backend = self.keyed_backend
        self.heap = isinstance(backend, HashMapKeyedStateBackend)
        self.index = KeyIndex()  # heap: the slot of every key, shared by all windows and columns
        self.windows: dict[int, _Window] = {}  # heap: the open windows by end
        self._scratch = np.zeros(0, dtype=np.int64)  # heap: first occurrence of each key in a batch
        self.open_windows: set[int] = {int(m.group(1)) for name in list(backend.kinds)  # type: ignore[union-attr]
                                       if (m := _TABLE.match(name))}
        if self.heap and self.open_windows:
            self._adopt()

    def prepare_snapshot(self, checkpoint_id: int) -> None:
        if self.schema is not None:
            self.operator_state.get_union_list_state(_SCHEMA).update([self.schema.serialize().to_pybytes()])

    # -- records ----------------------------------------------------------------------------
    def process(self, batch: Batch, input_index: int) -> None:
        if not isinstance(batch, pa.RecordBatch):
            if batch and isinstance(batch[0], Row) and batch[0].field_names() is not None:
                batch = [r.as_dict() if isinstance(r, Row) else r for r in batch]
            converted = try_columnar(batch)
            if converted is None:
                raise TypeError(f"window {self.describe} {self.label} by column {self.key_column!r} "
                                "needs dict (or named Row) records with flat values; use reduce(...) for other records")
            batch = converted
        if self.ts is None:
            raise NoTimestampError(
                f"window {self.describe}: the records have no event timestamps. Add assign_timestamps_and_"
                "watermarks(WatermarkStrategy...with_timestamp_assigner(...)) before the window")
        self._check_schema(batch)
        keys = extract_keys(batch, self.node.params["key"])
        groups, late_rows = self._assign(self.ts)
        if groups:
            if self.heap:
                slots = self.index.slots(keys)  # once per batch, whatever the number of windows
                columns = {i: _numeric(batch.column(i)) for i in self._used}
                for end, rows in groups:
                    self._add_heap(self._window(end), slots, columns, rows)
            else:
                for end, rows in groups:
                    self._add(end, batch, keys, np.arange(batch.num_rows) if rows is None else rows)
        if late_rows is not None:
            late = batch.filter(pa.array(late_rows))
            if self.late_tag is not None:
                self.output.emit_side({self.late_tag.tag_id: late.to_pylist()},
                                      {self.late_tag.tag_id: self.ts[late_rows].tolist()})
            else:
                self.late_records_dropped += late.num_rows

    def _assign(self, ts: np.ndarray) -> tuple[list[tuple[int, np.ndarray | None]], np.ndarray | None]:
        """The windows the rows go to: (end, rows; None: every row) in order of end, and the late
        rows (None: none) - those whose every window has fired."""
        groups: list[tuple[int, np.ndarray | None]] = []
        if not len(ts):
            return groups, None
        last_start = ts - np.mod(ts - self.offset + self.slide, self.slide)
        covered = None
        for j in range((self.size + self.slide - 1) // self.slide):
            start = last_start - j * self.slide if j else last_start
            end = start + self.size
            ok = end - 1 > self.current_watermark
            if j:  # the last window that starts at or before ts always holds it; earlier ones may not
                ok &= start > ts - self.size
            covered = ok if covered is None else covered | ok
            if not ok.any():
                continue
            lo, hi = int(end.min()), int(end.max())
            if lo == hi and ok.all():  # the common case: the batch lies in one window
                groups.append((lo, None))
                continue
            ends = range(lo, hi + 1, self.slide) if (hi - lo) // self.slide < 16 else np.unique(end[ok]).tolist()
            for e in ends:
                rows = np.flatnonzero(ok & (end == e))
                if len(rows):
                    groups.append((int(e), rows))
        if len(groups) > 1:
            # a sliding window gets rows from several passes: merge them back into batch order, so
            # "the first record of the window" is the first in the batch (as record by record)
            by_end: dict[int, list] = {}
            for e, rows in groups:
                by_end.setdefault(e, []).append(rows)
            groups = [(e, parts[0] if len(parts) == 1 else np.sort(np.concatenate(parts)))
                      for e, parts in sorted(by_end.items())]
        return groups, (None if covered.all() else ~covered)  # type: ignore[union-attr]

    def _check_schema(self, batch: pa.RecordBatch) -> None:
        if self.schema is None:
            self.schema = batch.schema
            try:
                self._layout()
            except Exception:
                self.schema = None
                raise
        elif not batch.schema.equals(self.schema):
            raise TypeError(f"window {self.label}: records changed shape: {batch.schema.names} "
                            f"after {self.schema.names}")

    def _layout(self) -> None:
        """The accumulators (index j -> (how, column index; -1: none)), the numpy type of each, and
        the output columns. For sum / min / max(field) accumulator j is column j: the field is
        aggregated, every other column keeps its first value (Flink's sum keeps the first
        record's other fields); for Aggregations, j counts the accumulators (an avg takes two)."""
        schema = self.schema
        names = schema.names  # type: ignore[union-attr]
        self._key_i = schema.get_field_index(self.key_column)  # type: ignore[union-attr]
        accs: dict[int, tuple[str, int]] = {}
        outs: list[tuple[str, str, Any]] = []  # (name, "key" / "acc" / "avg", accumulator index(es))

        def column(field: Any, what: str) -> int:
            i = schema.get_field_index(field) if isinstance(field, str) else -1  # type: ignore[union-attr]
            if i < 0:
                raise KeyError(f"window {self.label}: no column {field!r} for {what}; columns: {names}")
            t = schema.field(i).type  # type: ignore[union-attr]
            if not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)):
                raise TypeError(f"window {self.label}: column {field!r} is {t}; the columnar window aggregation "
                                "takes numeric columns only (project it away, or use reduce / a function of your own)")
            return i

        if self.how != "aggregate":
            column(self.field, self.how)
            for i, name in enumerate(names):
                if i == self._key_i:
                    outs.append((name, "key", None))
                    continue
                column(name, "carrying it")
                carried = "carry" if self.how in ("min_by", "max_by") else "first"
                accs[i] = (self.how if name == self.field else carried, i)
                outs.append((name, "acc", i))
        else:
            for name, how, field in self.outputs:
                if how == "first" and field == self.key_column:
                    outs.append((name, "key", None))
                elif how == "count":
                    accs[len(accs)] = ("count", -1)
                    outs.append((name, "acc", len(accs) - 1))
                elif how == "avg":
                    i = column(field, how)
                    accs[len(accs)] = ("fsum", i)
                    accs[len(accs)] = ("count", -1)
                    outs.append((name, "avg", (len(accs) - 2, len(accs) - 1)))
                else:
                    accs[len(accs)] = (how, column(field, how))
                    outs.append((name, "acc", len(accs) - 1))
            if not accs:  # only the key asked for: a count still says which keys a window holds
                accs[0] = ("count", -1)
        self._accs = accs
        self._by = self.how in ("min_by", "max_by")
        self._field_j = next((j for j, (how, _) in accs.items() if how in ("min_by", "max_by")), -1)
        self._outs = outs
        self._used = sorted({i for _, i in accs.values() if i >= 0})
        self._dtypes = {j: np.dtype(np.float64 if how == "fsum" or (i >= 0 and pa.types.is_floating(schema.field(i).type))
                                    else np.int64) for j, (how, i) in accs.items()}  # type: ignore[union-attr]

    def _output(self, end: int, keys: Any, values: dict[int, np.ndarray]) -> None:
        """One Arrow batch for a fired window: its keys, and each accumulator's values by key."""
        schema = self.schema
        cols = []
        for name, kind, j in self._outs:
            if kind == "key":
                cols.append(pa.array(keys).cast(schema.field(self._key_i).type))  # type: ignore[union-attr]
            elif kind == "avg":
                cols.append(pa.array(values[j[0]] / values[j[1]]))
            else:
                how, i = self._accs[j]
                data = pa.array(values[j])
                source = schema.field(i).type if i >= 0 else None  # type: ignore[union-attr]
                # first / min / max are values of the column: its type. A sum keeps int64 (or the
                # column's float type, for sum(field)); Aggregations keep what Python's sum would give.
                if how in ("first", "min", "max", "min_by", "max_by", "carry") or (how == "sum" and self.how == "sum"
                                                      and pa.types.is_floating(source)):
                    data = data.cast(source)
                cols.append(data)
        out = pa.RecordBatch.from_arrays(cols, names=[n for n, _, _ in self._outs])
        self.output.emit(out, np.full(out.num_rows, end - 1, dtype=np.int64))

    # -- heap: one key index, a window is arrays by slot --------------------------------------
    def _window(self, end: int) -> "_Window":
        w = self.windows.get(end)
        if w is None:
            w = self.windows[end] = _Window(end, self._dtypes, len(self.index))
            self.open_windows.add(end)
            for i in self._dtypes:
                self.keyed_backend.register_table(f"_wagg-{end}-{i}", "accumulators", _WindowColumn(self, w, i))
        return w

    def _add_heap(self, w: "_Window", slots: np.ndarray, columns: dict, rows: np.ndarray | None) -> None:
        """Rows (None: all) of one batch into window ``w``; ``slots``, ``columns``: the whole batch's."""
        s = slots if rows is None else slots[rows]
        w.grow(len(self.index))
        w.frozen = None
        present = w.present
        if self._by:
            field = self._accs[self._field_j]
            best, bs = self._best_rows(s, columns[field[1]] if rows is None else columns[field[1]][rows])
            values = columns[field[1]][best if rows is None else rows[best]]
            current = w.arrays[self._field_j][bs]
            better = ~present[bs] | (values < current if self.how == "min_by" else values > current)
            win, ws = best[better], bs[better]
            present[ws] = True
            src = win if rows is None else rows[win]
            for j, (how, i) in self._accs.items():
                w.arrays[j][ws] = columns[i][src]
            return
        fresh = ~present[s]
        all_new = False
        if fresh.any():
            # keys new to the window: their first row in the batch sets first values (and min / max)
            at = np.flatnonzero(fresh)
            ns = s[at]
            first = self._first_occurrence(ns)
            if first is not None:
                at, ns = at[first], ns[first]
            present[ns] = True
            src = at if rows is None else rows[at]
            for j, (how, i) in self._accs.items():
                w.arrays[j][ns] = columns[i][src] if how in ("first", "min", "max") else 0
            all_new = first is None and len(at) == len(s)  # every row a new key, each once
        for j, (how, i) in self._accs.items():
            if how == "first" or (all_new and how in ("min", "max")):
                continue
            arr = w.arrays[j]
            if how == "count":
                if all_new:
                    arr[s] = 1
                else:
                    np.add.at(arr, s, 1)
                continue
            values = columns[i] if rows is None else columns[i][rows]
            if all_new:  # sum: nothing to add up
                arr[s] = values
            else:
                _UFUNC[how].at(arr, s, values)

    def _best_rows(self, keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """min_by / max_by: per distinct key (slot or code) the position of its row with the smallest
        (largest) value, the first of equal ones; and those keys."""
        pos = np.arange(len(keys))
        if self.how == "min_by":
            order = np.lexsort((pos, values, keys))  # by key, then value, then position: a key's first row wins
            k = keys[order]
            pick = np.flatnonzero(np.r_[True, k[1:] != k[:-1]])
        else:
            order = np.lexsort((-pos, values, keys))  # the largest value, the earliest row among equal ones: last
            k = keys[order]
            pick = np.flatnonzero(np.r_[k[1:] != k[:-1], True])
        best = order[pick]
        return best, keys[best]

    def _first_occurrence(self, s: np.ndarray) -> np.ndarray | None:
        """Positions of the first occurrence of each slot in ``s``; None if no slot repeats."""
        if len(self._scratch) < len(self.index):
            self._scratch = np.zeros(max(len(self.index), 2 * len(self._scratch), 1024), dtype=np.int64)
        scratch = self._scratch
        pos = np.arange(len(s), dtype=np.int64)
        scratch[s] = len(s)
        np.minimum.at(scratch, s, pos)
        keep = scratch[s] == pos
        return None if keep.all() else np.flatnonzero(keep)

    def _adopt(self) -> None:
        """After a restore the backend holds each window column as a plain AccumulatorTable: move
        their keys into the shared index and their values into the windows' arrays."""
        backend = self.keyed_backend
        # all first: creating a window replaces all its restored tables with views
        restored = [(name, backend.tables.get(name)) for name in sorted(backend.kinds)  # type: ignore[union-attr]
                    if _TABLE.match(name)]
        for name, table in restored:
            m = _TABLE.match(name)
            end, i = int(m.group(1)), int(m.group(2))  # type: ignore[union-attr]
            if self.schema is None or i not in self._dtypes:
                raise ValueError(f"window {self.describe} {self.label}: restored state {name!r} "
                                 f"has no accumulator {i} for the saved record schema {self.schema}")
            w = self._window(end)  # registers its views, replacing the restored tables
            if isinstance(table, AccumulatorTable) and len(table):
                n = len(table)
                ints = table.keys_by_slot.array(n)  # int keys: the int64 array, not n Python ints
                slots = self.index.slots(ints if ints is not None else table.keys_by_slot)
                w.grow(len(self.index))
                w.arrays[i][slots] = table.acc[:n]
                w.present[slots] = True

    def _fire_heap(self, end: int) -> None:
        w = self.windows.pop(end, None)
        if w is None:
            return
        held = np.flatnonzero(w.present)
        if len(held):
            keys = self.index.keys_at(held)
            self._output(end, keys if keys.dtype != object else keys.tolist(),
                         {j: arr[held] for j, arr in w.arrays.items()})
        self._maybe_compact(len(held))

    def _maybe_compact(self, fired: int) -> None:
        """Keys that stopped coming would otherwise keep their slot (and a place in every window's
        arrays) for ever: when the index is far larger than the windows need, rebuild it from the
        keys of the open windows. Keys that recur in every window keep the index at window size."""
        live_mask = None
        for w in self.windows.values():
            w.grow(len(self.index))
            p = w.present[: len(self.index)]
            live_mask = p.copy() if live_mask is None else live_mask | p
        live = 0 if live_mask is None else int(np.count_nonzero(live_mask))
        if len(self.index) <= 4 * max(live, fired) + 65536:
            return
        keep = np.flatnonzero(live_mask) if live_mask is not None else np.zeros(0, dtype=np.int64)
        index = KeyIndex()
        if len(keep):
            index.slots(self.index.key_list(keep))  # slots 0..len(keep)-1 in the same order
        for w in self.windows.values():
            w.remap(keep)
        self.index = index

    # -- RocksDB: a table per accumulator, multi-get / multi-put per batch ------------------------
    def _add(self, end: int, batch: pa.RecordBatch, keys: Any, rows: np.ndarray) -> None:
        """RocksDB: one multi-get and one multi-put per table and batch."""
        backend = self.keyed_backend
        self.open_windows.add(end)
        keys = keys[rows] if isinstance(keys, np.ndarray) else [keys[i] for i in rows.tolist()]
        columns = {i: _numeric(batch.column(i).take(pa.array(rows))) for i in self._used}
        codes, uniques = pd.factorize(keys if isinstance(keys, np.ndarray) else pd.Series(keys, dtype=object))
        uniques = uniques.tolist()  # Python values: key groups hash those
        if self._by:
            self._add_store_by(end, codes, uniques, columns)
            return
        first_rows = np.unique(codes, return_index=True)[1]
        for j, (how, i) in self._accs.items():
            table = backend.accumulators(f"_wagg-{end}-{j}")  # type: ignore[union-attr]
            stored = table.get_many(uniques)
            values = columns[i] if i >= 0 else None
            if how == "first":
                missing = [k for k, v in enumerate(stored) if v is None]
                if missing:
                    table.put_many([uniques[k] for k in missing], values[first_rows[missing]].tolist())
                continue
            if how in ("sum", "fsum", "count"):
                agg = np.zeros(len(uniques), dtype=self._dtypes[j])
                np.add.at(agg, codes, 1 if how == "count" else values)  # exact for int64 (no float detour)
                result = [a if v is None else v + a for v, a in zip(stored, agg.tolist())]
            else:
                ser = pd.Series(values).groupby(codes, sort=True)
                agg = (ser.min() if how == "min" else ser.max()).to_numpy().tolist()
                pick = min if how == "min" else max
                result = [a if v is None else pick(v, a) for v, a in zip(stored, agg)]
            table.put_many(uniques, result)

    def _add_store_by(self, end: int, codes: np.ndarray, uniques: list, columns: dict) -> None:
        """min_by / max_by on RocksDB: the batch's best row per key replaces the stored record if better."""
        backend = self.keyed_backend
        field_i = self._accs[self._field_j][1]
        best, bk = self._best_rows(codes, columns[field_i])
        values = columns[field_i][best]
        stored = backend.accumulators(f"_wagg-{end}-{self._field_j}").get_many([uniques[k] for k in bk.tolist()])  # type: ignore[union-attr]
        pick = (lambda b, v: b < v) if self.how == "min_by" else (lambda b, v: b > v)
        better = [v is None or pick(b, v) for b, v in zip(values.tolist(), stored)]
        win = best[np.asarray(better, dtype=bool)]
        if not len(win):
            return
        keys = [uniques[k] for k in codes[win].tolist()]
        for j, (how, i) in self._accs.items():
            backend.accumulators(f"_wagg-{end}-{j}").put_many(keys, columns[i][win].tolist())  # type: ignore[union-attr]

    # -- firing -----------------------------------------------------------------------------
    def on_event_time(self, watermark: int) -> None:
        for end in sorted(e for e in self.open_windows if e - 1 <= watermark):
            self._fire(end)

    def _fire(self, end: int) -> None:
        backend = self.keyed_backend
        names = [f"_wagg-{end}-{j}" for j in self._accs] if self.schema is not None else []
        self.open_windows.discard(end)
        if self.schema is None:
            return
        if self.heap:
            self._fire_heap(end)
        else:
            self._fire_store(end, names)
        for nm in names:
            backend.drop_table(nm)  # type: ignore[union-attr]

    def _fire_store(self, end: int, names: list[str]) -> None:
        backend = self.keyed_backend
        entries = [dict(backend.accumulators(nm).items()) for nm in names]  # type: ignore[union-attr]
        keys = list(entries[0])
        if not keys:
            return
        self._output(end, keys, {j: np.asarray([e[k] for k in keys]) for j, e in zip(self._accs, entries)})


_UFUNC = {"sum": np.add, "fsum": np.add, "min": np.minimum, "max": np.maximum}


def _numeric(column: pa.Array) -> np.ndarray:
    values = column.to_numpy(zero_copy_only=False)
    return values.astype(np.int64) if values.dtype.kind == "b" else values


class _Window:
    """One open window on the heap backend: per column a value array by key slot, and which slots it holds."""

    __slots__ = ("end", "present", "arrays", "frozen")

    def __init__(self, end: int, dtypes: dict[int, np.dtype], n: int):
        cap = max(n, 1024)
        self.end = end
        self.present = np.zeros(cap, dtype=bool)
        self.arrays = {i: np.zeros(cap, dtype=dt) for i, dt in dtypes.items()}
        self.frozen: tuple | None = None  # (index, n, presence copy) of the last freeze, until a change

    def grow(self, n: int) -> None:
        cap = len(self.present)
        if n <= cap:
            return
        cap = max(n, 2 * cap)
        present = np.zeros(cap, dtype=bool)
        present[: len(self.present)] = self.present
        self.present = present
        for i, arr in self.arrays.items():
            grown = np.zeros(cap, dtype=arr.dtype)
            grown[: len(arr)] = arr
            self.arrays[i] = grown

    def remap(self, keep: np.ndarray) -> None:
        """The index was rebuilt from the slots ``keep`` (new slot j = old slot keep[j])."""
        cap = max(len(keep), 1024)
        present = np.zeros(cap, dtype=bool)
        present[: len(keep)] = self.present[keep]
        self.present = present
        for i, arr in self.arrays.items():
            moved = np.zeros(cap, dtype=arr.dtype)
            moved[: len(keep)] = arr[keep]
            self.arrays[i] = moved
        self.frozen = None

    def freeze(self, i: int, index: KeyIndex) -> FrozenAccumulators:
        """Column ``i`` as of now, for the snapshot writer: the shared index's first n keys (a view:
        slots are append-only), this window's values by slot and which slots it holds (copies).
        No Python object per key at the barrier. The columns of one window frozen together share
        one presence copy, so the writer writes their keys once; every window shares the index's
        key-group layout (``state.snapshot.KeyLayout``, cached on the index, extended by new keys)."""
        n = len(index)
        if self.frozen is None or self.frozen[0] is not index or self.frozen[1] != n:
            self.grow(n)
            self.frozen = (index, n, self.present[:n].copy())
        _, _, present = self.frozen
        keys = index._keys  # the array of this moment: a grown index copies into a new one
        return FrozenAccumulators(keys, n, self.arrays[i][:n].copy(), key_array=keys[:n] if index.ints else None,
                                  present=present, layout_source=index)


class _WindowColumn:
    """Column ``i`` of a heap window as a keyed state table of kind "accumulators" (what the backend
    snapshots), a view over the window's arrays and the operator's key index."""

    kind = "accumulators"

    def __init__(self, op: ColumnarWindowAggregateOperator, window: _Window, i: int):
        self.op, self.window, self.i = op, window, i

    def __len__(self) -> int:
        return int(np.count_nonzero(self.window.present))

    def freeze(self) -> FrozenAccumulators:
        return self.window.freeze(self.i, self.op.index)

    def thaw(self) -> None:
        pass  # the frozen form holds copies

    def load(self, chunk: tuple) -> None:
        keys, values = chunk
        if not len(keys):
            return
        slots = self.op.index.slots(keys if isinstance(keys, np.ndarray) else list(keys))  # int64 arrays as they are
        w = self.window
        w.grow(len(self.op.index))
        w.arrays[self.i][slots] = values
        w.present[slots] = True
        w.frozen = None


__all__ = ["ColumnarWindowAggregateOperator"]
