"""The columnar window aggregation restored from savepoints taken with windows open, at another
parallelism and into the other backend: the output must be the output of one uninterrupted run,
row for row. The heap backend keeps its windows as arrays over one shared key index
(task/window_columnar.py); its snapshots must still be the per-column keyed tables any backend
and parallelism restores."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from streamjob.runtime import SlidingEventTimeWindows, StreamExecutionEnvironment, Time, TumblingEventTimeWindows
from streamjob.runtime.api.functions import RuntimeContext
from streamjob.runtime.checkpoint.storage import CheckpointStorage
from streamjob.runtime.connectors import DiscardingSink
from streamjob.runtime.graph.job_graph import build_job_graph
from streamjob.runtime.network.events import MAX_WATERMARK
from streamjob.runtime.keygroups import assign_to_key_group, operator_index_for_key_group
from streamjob.runtime.state.rocksdb_snapshot import RocksDBSnapshot, write_snapshot
from streamjob.runtime.state.snapshot import serialize
from streamjob.runtime.task.operators import create_operator

MAXP = 128


class Subtasks:
    """One columnar window operator at parallelism p: batches are split by key group as a keyed
    exchange would, every subtask gets every watermark."""

    def __init__(self, assigner, how: str, backend: str, p: int, tmp_path, handles=None, storage=None):
        env = StreamExecutionEnvironment.get_execution_environment()
        env.get_config().set("state.backend.type", backend)
        env.get_config().set("state.backend.rocksdb.localdir", str(tmp_path))
        stream = getattr(env.from_collection([0]).key_by("k").window(assigner), how)("v")
        stream.sink_to(DiscardingSink())
        g = build_job_graph(env._transformations, env.get_config(), "t")
        node = g.operators[stream._t.id]
        self.p = p
        self.out: list = []
        self.ops = []
        for i in range(p):
            op = create_operator(node, RuntimeContext(node.name, i, p, MAXP, job_parameters=g.config))
            assert type(op).__name__ == "ColumnarWindowAggregateOperator"
            op.output.connect(lambda b, ts: self.out.extend(
                tuple(r.values()) + (t,) for r, t in zip(b.to_pylist(), ts.tolist())), None, lambda e: None)
            if handles is not None:
                op.initialize_state(handles, storage, 1)
            op.open()
            self.ops.append(op)

    def feed(self, rows: list[dict], stamps: list[int]) -> None:
        owner = [operator_index_for_key_group(MAXP, self.p, assign_to_key_group(r["k"], MAXP)) for r in rows]
        for i, op in enumerate(self.ops):
            mine = [j for j, o in enumerate(owner) if o == i]
            if mine:
                op.process_batch(pa.RecordBatch.from_pylist([rows[j] for j in mine]), 0,
                                 np.array([stamps[j] for j in mine], dtype=np.int64))

    def watermark(self, wm: int) -> None:
        for op in self.ops:
            op.process_watermark(wm)

    def savepoint(self, storage: CheckpointStorage) -> list[dict]:
        """Each subtask's savepoint, written as the snapshot writer writes it."""
        handles = []
        for i, op in enumerate(self.ops):
            snap = op.snapshot_state(1, full=True)
            if isinstance(snap.keyed, RocksDBSnapshot):
                handle = write_snapshot(snap.keyed, storage, f"window-{i}", snap.operator_state)[0]
            else:
                data, index = serialize(snap.keyed, snap.max_parallelism, snap.operator_state)
                handle = storage.write_state(1, f"window-{i}", data, index)
            snap.done()
            handles.append(handle)
            op.dispose()
        return handles


def _data(keys: str, n: int = 3000):
    rng = random.Random(11)
    pool = list(range(-40, 160)) + [1 << 40] if keys == "int" else [f"user-{i}" for i in range(200)]
    rows = [{"k": rng.choice(pool), "v": rng.randrange(-50, 1000), "x": rng.random(), "b": rng.random() < 0.5}
            for _ in range(n)]
    stamps = [i // 10 + rng.randrange(8) for i in range(n)]  # a little out of order, some late
    return rows, stamps


def _run(assigner, how, keys, phases, tmp_path) -> list:
    """Feed the data in 100-row batches; at each phase boundary take a savepoint and restore it
    into the next phase's backend and parallelism."""
    rows, stamps = _data(keys)
    cut = [len(rows) * (i + 1) // len(phases) for i in range(len(phases))]
    handles, out, lo, wm = None, [], 0, None
    storage = None
    for (backend, p), hi in zip(phases, cut):
        run = Subtasks(assigner, how, backend, p, tmp_path / f"{backend}-{p}-{lo}", handles, storage)
        if wm is not None:
            run.watermark(wm)  # event time goes on where it stopped (nothing fires: it all fired before)
        for b in range(lo, hi, 100):
            run.feed(rows[b:b + 100], stamps[b:b + 100])
            wm = stamps[b] - 5
            run.watermark(wm)  # windows fire along the way, not only at the end
        lo = hi
        if hi < len(rows):
            assert any(op.open_windows for op in run.ops), "the savepoint must be taken with windows open"
            storage = CheckpointStorage(f"file://{tmp_path}/savepoints", f"sp-{lo}", inline_threshold=0)
            handles = run.savepoint(storage)
            out += run.out
        else:
            run.watermark(MAX_WATERMARK)
            out += run.out
            for op in run.ops:
                op.dispose()
    return sorted(out)


@pytest.mark.parametrize("keys", ["int", "str"])
@pytest.mark.parametrize("phases", [
    [("hashmap", 2), ("hashmap", 3), ("hashmap", 1)],  # restored windows are snapshotted again
    [("hashmap", 1), ("rocksdb", 1)],
    [("hashmap", 3), ("rocksdb", 2), ("hashmap", 2)],  # what the RocksDB path left open, on the heap
], ids=["heap-2-3-1", "heap-rocksdb", "heap-rocksdb-heap"])
@pytest.mark.parametrize("assigner, how", [
    (TumblingEventTimeWindows.of(Time.milliseconds(20)), "sum"),
    (SlidingEventTimeWindows.of(Time.milliseconds(30), Time.milliseconds(10)), "min"),
], ids=["tumbling-sum", "sliding-min"])
def test_restored_windows_give_the_output_of_one_uninterrupted_run(keys, phases, assigner, how, tmp_path):
    expected = _run(assigner, how, keys, [("hashmap", 1)], tmp_path / "whole")
    got = _run(assigner, how, keys, phases, tmp_path / "phased")
    assert len(expected) > 500
    assert got == expected


def test_a_window_keeps_the_first_values_of_a_key_and_its_keys_share_one_index():
    """Flink's sum keeps the first record's other fields; a key seen in one batch twice, and in
    two windows, is looked up once per batch (one slot in the operator's index)."""
    run = Subtasks(TumblingEventTimeWindows.of(Time.milliseconds(10)), "sum", "hashmap", 1, None)
    rows = [{"k": 7, "v": 1, "x": 0.5, "b": True}, {"k": 7, "v": 2, "x": 0.25, "b": False},
            {"k": 8, "v": 3, "x": 1.5, "b": False}, {"k": 7, "v": 4, "x": 2.5, "b": False}]
    run.feed(rows, [1, 2, 3, 12])
    op = run.ops[0]
    assert len(op.index) == 2 and sorted(op.windows) == [10, 20]
    run.watermark(MAX_WATERMARK)
    assert sorted(run.out) == [(7, 3, 0.5, True, 9), (7, 4, 2.5, False, 19), (8, 3, 1.5, False, 9)]
    assert not op.windows and not [n for n in op.keyed_backend.tables if n.startswith("_wagg")]


def test_keys_that_stop_coming_leave_the_shared_key_index():
    """Every window brings new keys (session ids, say): the index is rebuilt from the open
    windows' keys once it is far larger than they need, and the results stay right."""
    run = Subtasks(TumblingEventTimeWindows.of(Time.milliseconds(10)), "sum", "hashmap", 1, None)
    op = run.ops[0]
    per_window, windows = 20_000, 24
    for w in range(windows):
        keys = np.arange(w * per_window, (w + 1) * per_window, dtype=np.int64)
        batch = pa.RecordBatch.from_arrays([pa.array(keys), pa.array(keys % 7), pa.array(keys * 0.5),
                                            pa.array(keys % 2 == 0)], names=["k", "v", "x", "b"])
        op.process_batch(batch, 0, np.full(per_window, w * 10 + 5, dtype=np.int64))
        op.process_batch(batch.slice(0, 100), 0, np.full(100, w * 10 + 6, dtype=np.int64))  # 100 keys twice
        run.watermark(w * 10 + 9)
        assert len(op.index) <= 4 * per_window + 65536 + per_window
    assert len(run.out) == per_window * windows
    got = {(k, t): v for k, v, x, b, t in run.out}
    assert got[(5, 9)] == 10 and got[(150, 9)] == 150 % 7 and got[(windows * per_window - 1, windows * 10 - 1)] == (
        (windows * per_window - 1) % 7)
    assert all(x == k * 0.5 and b == (k % 2 == 0) for k, v, x, b, t in run.out[-per_window:])
