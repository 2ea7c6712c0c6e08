"""Keyed and operator state, copy-on-write snapshots, the snapshot format: no Spark, no sockets."""

from __future__ import annotations

import numpy as np
import pytest

from streamjob.runtime import (
    AggregateFunction,
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from streamjob.runtime.state.heap import HashMapKeyedStateBackend, StateDefinitionError
from streamjob.runtime.keygroups import assign_to_key_group, key_group_range
from streamjob.runtime.state.operator_state import OperatorStateStore, redistribute
from streamjob.runtime.state.snapshot import SnapshotFormatError, read_keyed, read_operator, serialize
from streamjob.runtime.task.operators import RollingAggregator


def backend(p: int = 1, i: int = 0, maxp: int = 128) -> HashMapKeyedStateBackend:
    return HashMapKeyedStateBackend("op", maxp, key_group_range(maxp, p, i))


class Avg(AggregateFunction):
    def create_accumulator(self):
        return (0, 0)

    def add(self, value, acc):
        return acc[0] + value, acc[1] + 1

    def get_result(self, acc):
        return acc[0] / acc[1]


def test_keyed_state_is_scoped_to_the_current_key():
    b = backend()
    value = b.get_state(ValueStateDescriptor("v", default=0))
    lst = b.get_list_state(ListStateDescriptor("l"))
    mp = b.get_map_state(MapStateDescriptor("m"))
    red = b.get_reducing_state(ReducingStateDescriptor("r", lambda a, c: a + c))
    agg = b.get_aggregating_state(AggregatingStateDescriptor("a", Avg()))
    for key, x in [("a", 1), ("b", 10), ("a", 2)]:
        b.current_key = key
        value.update(value.value() + x)
        lst.add(x)
        mp.put(x, str(x))
        red.add(x)
        agg.add(x)
    b.current_key = "a"
    assert value.value() == 3 and lst.get() == [1, 2] and red.get() == 3 and agg.get() == 1.5
    assert mp.get(2) == "2" and mp.contains(1) and not mp.contains(10) and sorted(mp.keys()) == [1, 2]
    assert sorted(mp.values()) == ["1", "2"] and sorted(mp.items()) == [(1, "1"), (2, "2")]
    mp.remove(1)
    assert sorted(mp.keys()) == [2] and not mp.is_empty()
    lst.add_all([5, 6])
    assert lst.get() == [1, 2, 5, 6]
    lst.update([7])
    assert lst.get() == [7]
    b.current_key = "b"
    assert value.value() == 10 and lst.get() == [10] and agg.get() == 10
    value.clear(), lst.clear(), mp.clear()
    assert value.value() == 0 and lst.get() == [] and mp.is_empty()
    b.current_key = "zzz"
    assert value.value() == 0 and red.get() is None and agg.get() is None


def test_one_state_name_cannot_change_kind_and_descriptors_are_checked():
    b = backend()
    b.get_state(ValueStateDescriptor("x"))
    with pytest.raises(StateDefinitionError, match="'x' is a value state"):
        b.get_list_state(ListStateDescriptor("x"))
    with pytest.raises(TypeError, match="MapStateDescriptor"):
        b.get_map_state(ValueStateDescriptor("y"))
    with pytest.raises(TypeError, match="create_accumulator"):
        AggregatingStateDescriptor("a", object())


@pytest.mark.parametrize("copy_max", [None, 0], ids=["small-int-table-copied", "copy-on-write"])
def test_snapshot_is_frozen_at_the_barrier_while_processing_goes_on(copy_max, monkeypatch):
    from streamjob.runtime.state import tables

    if copy_max is not None:  # a table bigger than the copy limit: frozen copy-on-write
        monkeypatch.setattr(tables, "COPY_MAX_ENTRIES", copy_max)
    b = backend()
    lst = b.get_list_state(ListStateDescriptor("l"))
    value = b.get_state(ValueStateDescriptor("v"))
    for k in range(100):
        b.current_key = k
        lst.add(k)
        value.update(k)
    frozen = b.freeze()  # the synchronous phase
    # ints within the limit are copied (no delta); lists always go copy-on-write
    assert (b.tables["v"].delta is None) == (copy_max is None) and b.tables["l"].delta is not None
    for k in range(100):  # records after the barrier: appends, updates, deletes, new keys
        b.current_key = k
        lst.add(-k)
        if k % 2:
            value.clear()
        else:
            value.update(k * 10)
    b.current_key = 1000
    value.update(1)
    data, index = serialize(frozen, 128, None)
    restored = backend()
    for name, kind, chunk in read_keyed(data, index, range(128), "test"):
        restored.restore_chunk(name, kind, chunk)
    rv = restored.get_state(ValueStateDescriptor("v"))
    rl = restored.get_list_state(ListStateDescriptor("l"))
    for k in range(100):
        restored.current_key = k
        assert rv.value() == k and rl.get() == [k]  # nothing written after the barrier leaked in
    restored.current_key = 1000
    assert rv.value() is None
    b.thaw()  # the snapshot is written: fold the delta back
    b.current_key = 3
    assert value.value() is None and lst.get() == [3, -3]
    b.current_key = 4
    assert value.value() == 40
    b.current_key = 1000
    assert value.value() == 1


def test_key_groups_land_in_the_subtask_that_owns_them_at_any_parallelism():
    b = backend()
    st = b.get_state(ValueStateDescriptor("v"))
    keys = [f"k{i}" for i in range(2000)] + list(range(2000))
    for k in keys:
        b.current_key = k
        st.update(str(k))
    data, index = serialize(b.freeze(), 128, None)
    seen = []
    for i in range(3):  # restore the p=1 snapshot at p=3
        sub = backend(3, i)
        for name, kind, chunk in read_keyed(data, index, sub.key_groups, "test"):
            sub.restore_chunk(name, kind, chunk)
        for k in sub.tables["v"].keys():
            assert assign_to_key_group(k, 128) in sub.key_groups
            seen.append(k)
    assert sorted(map(str, seen)) == sorted(map(str, keys))


def test_rolling_aggregation_state_lives_in_the_backend_and_snapshots_cheaply():
    b = backend()
    agg = RollingAggregator("sum", b.accumulators("sum-numeric"))
    keys = [i % 1000 for i in range(5000)]
    agg.update(keys, np.ones(5000, dtype=np.int64))
    frozen = b.freeze()
    agg.update([1, 2], np.array([100, 100]))  # after the barrier
    data, index = serialize(frozen, 128, None)
    restored = backend()
    for name, kind, chunk in read_keyed(data, index, range(128), "test"):
        restored.restore_chunk(name, kind, chunk)
    again = RollingAggregator("sum", restored.accumulators("sum-numeric"))
    assert again.update([1, 2, 999], np.array([1, 1, 1])).tolist() == [6, 6, 6]


def test_a_corrupt_snapshot_is_rejected_with_where_and_what():
    b = backend()
    st = b.get_state(ValueStateDescriptor("v"))
    b.current_key = "k"
    st.update(1)
    data, index = serialize(b.freeze(), 128, {"positions": ("split", [1, 2])})
    with pytest.raises(SnapshotFormatError, match="state.bin: not a streamjob state file"):
        list(read_keyed(b"garbage" + data, index, range(128), "state.bin"))
    truncated = data[: len(data) - 10]
    with pytest.raises(SnapshotFormatError, match="state.bin.*outside"):
        read_operator(truncated, index, "state.bin")
    assert read_operator(data, index, "state.bin") == {"positions": ("split", [1, 2])}


def test_operator_state_is_kept_per_subtask_or_redistributed():
    snaps = []
    for i in range(3):
        store = OperatorStateStore()
        store.get_list_state("splits").update([f"s{i}a", f"s{i}b"])
        store.get_union_list_state("seen").update([i])
        snaps.append(store.snapshot())
    same = OperatorStateStore()
    same.restore(snaps, 1, 3)
    assert same.get_list_state("splits").get() == ["s1a", "s1b"]
    assert same.get_union_list_state("seen").get() == [0, 1, 2]
    shares = []
    for i in range(2):
        store = OperatorStateStore()
        store.restore(snaps, i, 2)
        shares.append(store.get_list_state("splits").get())
    assert shares == [["s0a", "s0b", "s1a"], ["s1b", "s2a", "s2b"]]
    assert redistribute(list(range(5)), 4, 5) == [4] and redistribute([], 0, 2) == []


def test_every_name_of_the_fault_tolerance_api_is_importable_from_streamjob_runtime():
    import streamjob.runtime as rt

    names = ["ValueStateDescriptor", "ListStateDescriptor", "MapStateDescriptor", "ReducingStateDescriptor",
             "AggregatingStateDescriptor", "AggregateFunction", "KeyedProcessFunction", "HashMapStateBackend",
             "CheckpointingMode", "CheckpointConfig", "ExternalizedCheckpointRetention", "RestartStrategies",
             "FileSink", "StreamExecutionEnvironment", "JobClient", "StateTtlConfig"]
    missing = [n for n in names if not hasattr(rt, n)]
    assert not missing and set(names) <= set(rt.__all__)
    assert rt.ExternalizedCheckpointRetention.RETAIN_ON_CANCELLATION.value == "RETAIN_ON_CANCELLATION"
    assert {m.name for m in rt.CheckpointingMode} == {"EXACTLY_ONCE", "AT_LEAST_ONCE"}
    env = rt.StreamExecutionEnvironment.get_execution_environment()
    env.set_state_backend(rt.HashMapStateBackend())
    env.enable_checkpointing(1000, rt.CheckpointingMode.AT_LEAST_ONCE)
    config = env.get_checkpoint_config()
    config.set_checkpoint_timeout(5000)
    config.set_min_pause_between_checkpoints(100)
    config.set_max_concurrent_checkpoints(2)
    config.set_tolerable_checkpoint_failure_number(3)
    config.set_num_retained_checkpoints(4)
    config.set_externalized_checkpoint_retention(rt.ExternalizedCheckpointRetention.DELETE_ON_CANCELLATION)
    config.set_checkpoint_storage("/tmp/some/dir")
    assert (config.get_checkpoint_interval(), env.get_checkpointing_mode(), config.get_checkpoint_timeout(),
            config.get_min_pause_between_checkpoints(), config.get_max_concurrent_checkpoints(),
            config.get_tolerable_checkpoint_failure_number(), config.get_num_retained_checkpoints(),
            config.get_externalized_checkpoint_retention(), config.get_checkpoint_storage(), env.get_state_backend()) == (
        1000, rt.CheckpointingMode.AT_LEAST_ONCE, 5000, 100, 2, 3, 4,
        rt.ExternalizedCheckpointRetention.DELETE_ON_CANCELLATION, "file:///tmp/some/dir", "hashmap")
    with pytest.raises(ValueError, match="at least 10 ms"):
        env.enable_checkpointing(1)
    with pytest.raises(ValueError, match="no filesystem for nosuch://"):
        config.set_checkpoint_storage("nosuch://x")


# -- columnar snapshots of accumulator tables --------------------------------------------------

def restore_all(data: bytes, index: dict, b: HashMapKeyedStateBackend) -> HashMapKeyedStateBackend:
    for name, kind, chunk in read_keyed(data, index, b.key_groups, "state.bin"):
        b.restore_chunk(name, kind, chunk)
    return b


def contents(table) -> dict:
    return dict(zip(list(table.keys_by_slot), table.acc[: len(table)].tolist()))


@pytest.mark.parametrize("values", ["int", "float", "mixed", "one-str-last", "one-beyond-int64-last"])
def test_a_large_value_table_frozen_copy_on_write_snapshots_columnar_when_its_types_allow(values):
    """Beyond COPY_MAX_ENTRIES a table is frozen copy-on-write (no copy at the barrier); the writer still
    finds it columnar when every key is an int and every value an int (or every one a float), and the
    restore at another parallelism gets the same entries; writes during the snapshot stay out of it."""
    from streamjob.runtime.state.tables import COPY_MAX_ENTRIES

    n = COPY_MAX_ENTRIES + 1000
    # The writer looks at the types and converts a slice at a time: an odd one in the last slice counts too.
    make = {"int": lambda k: k * 3, "float": lambda k: k * 0.5, "mixed": lambda k: k if k % 2 else str(k),
            "one-str-last": lambda k: str(k) if k == n - 1 else k,
            "one-beyond-int64-last": lambda k: 1 << 70 if k == n - 1 else k}[values]
    entries = {k: make(k) for k in range(n)}
    b = HashMapKeyedStateBackend("op", 128, key_group_range(128, 1, 0))
    b.restore_chunk("v", "value", dict(entries))
    frozen = b.snapshot(1, full=True)
    b.current_key = n + 5  # a write while the snapshot is being written: copy-on-write keeps it out
    b.get_state(ValueStateDescriptor("v")).update(make(1))
    data, index = serialize(frozen, 128, None)
    b.thaw()
    assert ("columnar" in index["keyed"]["v"]) is (values in ("int", "float"))
    for half in (0, 1):  # restored at parallelism 2
        groups = key_group_range(128, 2, half)
        got: dict = {}
        for name, kind, chunk in read_keyed(data, index, groups, "state.bin"):
            got.update(chunk)
        assert got == {k: v for k, v in entries.items() if assign_to_key_group(k, 128) in groups}
        assert all(type(v) is type(entries[k]) for k, v in got.items())


def test_int_key_accumulators_snapshot_columnar_and_rescale_by_key_group():
    b = backend()
    agg = RollingAggregator("sum", b.accumulators("sum-numeric"))
    keys = [k * 7919 - 50_000 for k in range(3000)] + [2**62, -(2**63)]
    agg.update(keys, np.arange(len(keys), dtype=np.int64))
    frozen = b.freeze()
    agg.update([1, 2, 3], np.array([5, 5, 5]))  # after the barrier: a new key, not in the snapshot
    data, index = serialize(frozen, 128, None)
    entry = index["keyed"]["sum-numeric"]
    assert entry["columnar"]["dtype"] == "<i8"  # raw int64 blocks, not pickled key lists
    assert len(data) < 3100 * 16 + 100
    want = dict(zip(keys, range(len(keys))))
    seen: dict = {}
    for i in range(3):  # restore the p=1 snapshot at p=3: each subtask gets exactly its key groups
        sub = restore_all(data, index, backend(3, i))
        got = contents(sub.accumulators("sum-numeric"))
        assert all(type(k) is int and assign_to_key_group(k, 128) in sub.key_groups for k in got)
        seen.update(got)
    assert seen == want
    again = RollingAggregator("sum", restore_all(data, index, backend()).accumulators("sum-numeric"))
    assert again.update([keys[5], 2**62], np.array([1, 1])).tolist() == [6, 3001]


def test_str_and_mixed_key_accumulators_round_trip_pickled():
    b = backend()
    strs = RollingAggregator("max", b.accumulators("max-numeric"))
    strs.update([f"user-{i}" for i in range(500)], np.arange(500, dtype=np.float64))
    mixed = RollingAggregator("sum", b.accumulators("sum-numeric"))
    mixed.update([1, "1", True, 2**70, 3], np.array([1, 2, 3, 4, 5]))  # True == 1: one key, as in a dict
    data, index = serialize(b.freeze(), 128, None)
    assert "columnar" not in index["keyed"]["max-numeric"] and "columnar" not in index["keyed"]["sum-numeric"]
    restored = restore_all(data, index, backend())
    assert contents(restored.accumulators("max-numeric")) == {f"user-{i}": float(i) for i in range(500)}
    assert contents(restored.accumulators("sum-numeric")) == {1: 4, "1": 2, 2**70: 4, 3: 5}


def test_a_windows_column_tables_share_one_key_block_and_layouts_grow_with_new_keys():
    from streamjob.runtime.state.snapshot import _group_positions

    b = backend()
    first, other = b.accumulators("_wagg-1000-1"), b.accumulators("_wagg-1000-2")
    other.slot_of, other.keys_by_slot = first.slot_of, first.keys_by_slot  # one key -> slot mapping
    for step, keys in enumerate([list(range(0, 4000, 3)), list(range(1, 9000, 5)), [10**15, 7]]):
        s = first.slots(keys)
        for t, scale in ((first, 1), (other, 10)):
            t.ensure_capacity(len(first), "i")
            t.acc[s] = np.asarray(keys, dtype=np.int64) * scale
        data, index = serialize(b.freeze(), 128, None)
        a, c = index["keyed"]["_wagg-1000-1"], index["keyed"]["_wagg-1000-2"]
        assert a["columnar"]["keys"] == c["columnar"]["keys"]  # written once
        layout = first.keys_by_slot.key_layout
        assert layout.n == len(first)  # cached on the shared key list, extended by the new keys only
        order, groups = layout.groups()
        want = [(g, p.tolist()) for g, p in _group_positions(list(first.keys_by_slot), 128)]
        assert [(g, order[x:y].tolist()) for g, x, y in groups] == want
        restored = restore_all(data, index, backend())
        assert contents(restored.accumulators("_wagg-1000-1")) == {k: k for k in first.keys_by_slot}
        assert contents(restored.accumulators("_wagg-1000-2")) == {k: 10 * k for k in first.keys_by_slot}


def test_accumulator_chunks_of_earlier_versions_still_load():
    from streamjob.runtime.state.snapshot import SnapshotBuilder

    old = SnapshotBuilder()  # before columnar tables: one pickled (key list, values) per key group
    for kg in range(128):
        keys = [k for k in range(1000) if assign_to_key_group(k, 128) == kg]
        old.add_keyed("sum-numeric", "accumulators", kg, (keys, np.asarray(keys, dtype=np.int64) * 2))
    data, index = old.finish()
    assert contents(restore_all(data, index, backend()).accumulators("sum-numeric")) == {k: 2 * k for k in range(1000)}
    sub = restore_all(data, index, backend(2, 1))
    assert set(contents(sub.accumulators("sum-numeric"))) == {k for k in range(1000)
                                                                if assign_to_key_group(k, 128) in sub.key_groups}


def test_malformed_accumulator_chunks_name_the_state_and_key_group():
    import copy

    b = backend()
    RollingAggregator("sum", b.accumulators("sum-numeric")).update(list(range(100)), np.ones(100, dtype=np.int64))
    data, index = serialize(b.freeze(), 128, None)
    entry = index["keyed"]["sum-numeric"]
    kg = next(iter(entry["groups"]))

    def broken(change):
        bad = copy.deepcopy(index)
        change(bad["keyed"]["sum-numeric"])
        return bad

    with pytest.raises(SnapshotFormatError, match=rf"state.bin \(state 'sum-numeric'\), key group {kg}: keys \[0, 101\)"):
        list(read_keyed(data, broken(lambda e: e["groups"].__setitem__(kg, [0, 101])), range(128), "state.bin"))
    with pytest.raises(SnapshotFormatError, match=r"'sum-numeric'.*do not hold the same number of keys"):
        list(read_keyed(data, broken(lambda e: e["columnar"]["values"].__setitem__(1, e["columnar"]["values"][1] - 1)),
                        range(128), "state.bin"))
    with pytest.raises(SnapshotFormatError, match=r"'sum-numeric'.*keys block.*outside"):
        list(read_keyed(data[:entry["columnar"]["keys"][0] + 10], index, range(128), "state.bin"))
    with pytest.raises(SnapshotFormatError, match=r"'sum-numeric'\): malformed columnar table entry"):
        list(read_keyed(data, broken(lambda e: e["columnar"].__setitem__("keys_for", [0, "<c16"])), range(128), "state.bin"))
    with pytest.raises(SnapshotFormatError, match=r"'sum-numeric'.*malformed columnar"):
        list(read_keyed(data, broken(lambda e: e["columnar"].__setitem__("dtype", "<U3")), range(128), "state.bin"))
    from streamjob.runtime.state.snapshot import SnapshotBuilder

    old = SnapshotBuilder()
    old.add_keyed("sum-numeric", "accumulators", 5, {"not": "a (keys, values) tuple"})
    data, index = old.finish()
    with pytest.raises(SnapshotFormatError, match=r"state 'sum-numeric', key group 5\).*expected \(keys, values\)"):
        list(read_keyed(data, index, range(128), "state.bin"))


def test_columnar_accumulator_snapshots_restore_into_rocksdb(tmp_path):
    from streamjob.runtime.state.rocksdb import RocksDBKeyedStateBackend

    b = backend()
    keys = list(range(-500, 500))
    RollingAggregator("sum", b.accumulators("sum-numeric")).update(keys, np.asarray(keys, dtype=np.int64))
    data, index = serialize(b.freeze(), 128, None)
    rdb = RocksDBKeyedStateBackend("op", 128, key_group_range(128, 2, 0), str(tmp_path / "local"))
    try:
        for name, kind, chunk in read_keyed(data, index, rdb.key_groups, "state.bin"):
            rdb.restore_chunk(name, kind, chunk)
        mine = [k for k in keys if assign_to_key_group(k, 128) in rdb.key_groups]
        assert rdb.accumulators("sum-numeric").get_many(mine) == mine  # Python-int keys: the same key bytes
    finally:
        rdb.dispose()


def test_a_restore_reads_only_the_bytes_of_the_key_groups_it_owns(tmp_path):
    from streamjob.runtime.checkpoint.storage import CheckpointStorage
    from streamjob.runtime.state.snapshot import keyed_spans

    b = backend()
    RollingAggregator("sum", b.accumulators("sum-numeric")).update(list(range(20_000)), np.ones(20_000, dtype=np.int64))
    RollingAggregator("sum", b.accumulators("by-name")).update([f"k{i}" for i in range(2000)], np.ones(2000))
    data, index = serialize(b.freeze(), 128, {"positions": ("split", [1, 2])})
    storage = CheckpointStorage(f"file://{tmp_path}", "job", inline_threshold=0)
    handle = storage.write_state(1, "op-0", data, index)
    seen: dict = {}
    for i in range(4):
        sub = backend(4, i)
        part = storage.read_spans(handle, keyed_spans(index, sub.key_groups))
        assert len(part) == len(data) and 0 < np.count_nonzero(np.frombuffer(part, np.uint8)) < len(data) // 3
        restore_all(part, index, sub)
        got = contents(sub.accumulators("sum-numeric"))
        assert all(assign_to_key_group(k, 128) in sub.key_groups for k in got)
        seen.update(got)
        assert len(contents(sub.accumulators("by-name"))) == sum(assign_to_key_group(f"k{j}", 128) in sub.key_groups
                                                                 for j in range(2000))
        assert read_operator(part, index, "state.bin") == {"positions": ("split", [1, 2])}
    assert seen == {k: 1 for k in range(20_000)}


def test_views_over_a_shared_key_list_write_only_their_present_keys():
    """The writer's interface for window columns over one key index shared by all open windows: each
    view gives the shared key list as ``layout_source`` (one layout for all) and a ``present`` mask."""
    from streamjob.runtime.state.tables import AccumulatorTable, FrozenAccumulators

    shared = AccumulatorTable()
    keys = list(range(0, 30_000, 7))
    shared.slots(keys)
    n = len(shared)
    views = {}
    for w, mask in ((1000, np.arange(n) % 2 == 0), (2000, np.arange(n) % 3 == 0)):
        view = FrozenAccumulators(shared.keys_by_slot, n, np.arange(n, dtype=np.int64) * w)
        view.present = mask
        views[f"_wagg-{w}-1"] = ("accumulators", view)
    data, index = serialize(views, 128, None)
    assert shared.keys_by_slot.key_layout.n == n  # hashed once for both views
    restored = restore_all(data, index, backend())
    for w, step in ((1000, 2), (2000, 3)):
        assert contents(restored.accumulators(f"_wagg-{w}-1")) == {keys[i]: i * w for i in range(0, n, step)}


def test_columnar_windows_freeze_as_views_over_the_shared_key_index():
    """The heap window operator's columns: frozen with no Python object per key, one key block per
    window, one key-group layout for all windows (on the shared KeyIndex), restored per key group."""
    from streamjob.runtime.state.key_index import KeyIndex
    from streamjob.runtime.task.window_columnar import _Window

    index = KeyIndex()
    dtypes = {1: np.dtype(np.int64), 2: np.dtype(np.float64)}
    windows = {end: _Window(end, dtypes, 0) for end in (1000, 2000)}
    want: dict = {}
    for end, keys in ((1000, np.arange(0, 50_000, 3)), (2000, np.arange(10_000, 60_000, 2))):
        w = windows[end]
        s = index.slots(keys)
        w.grow(len(index))
        w.present[s] = True
        w.arrays[1][s] = keys * 2
        w.arrays[2][s] = keys / 4
        want[end] = keys.tolist()
    frozen = {f"_wagg-{end}-{i}": ("accumulators", w.freeze(i, index)) for end, w in windows.items() for i in dtypes}
    assert all(f.key_array() is not None for _, f in frozen.values())  # int64 keys: no key list
    data, index_json = serialize(frozen, 128, None)
    entries = index_json["keyed"]
    assert entries["_wagg-1000-1"]["columnar"]["keys"] == entries["_wagg-1000-2"]["columnar"]["keys"]
    assert entries["_wagg-1000-1"]["columnar"]["keys"] != entries["_wagg-2000-1"]["columnar"]["keys"]
    assert index.key_layout.n == len(index)  # hashed once, for all windows
    for p in (1, 2):
        for i in range(p):
            sub = restore_all(data, index_json, backend(p, i))
            for end, keys in want.items():
                mine = [k for k in keys if assign_to_key_group(k, 128) in sub.key_groups]
                assert contents(sub.accumulators(f"_wagg-{end}-1")) == {k: 2 * k for k in mine}
                assert contents(sub.accumulators(f"_wagg-{end}-2")) == {k: k / 4 for k in mine}


@pytest.mark.parametrize("values, stored", [
    (np.array([5, 300, 7], dtype=np.int64), "<u2"),
    (np.array([-(1 << 40), -(1 << 40) + 200], dtype=np.int64), "|u1"),
    (np.array([-(1 << 63), (1 << 63) - 1], dtype=np.int64), None),  # the whole range: written as is
    (np.array([0, (1 << 64) - 1], dtype=np.uint64), None),
    (np.array([(1 << 64) - 70_000, (1 << 64) - 1], dtype=np.uint64), "<u4"),
    (np.array([-5, 5], dtype=np.int32), "|u1"),
    (np.array([1.5, -2.0]), None),
])
def test_integer_blocks_are_stored_as_offsets_in_the_narrowest_type_and_read_back_exactly(values, stored):
    from streamjob.runtime.state import snapshot as snap

    narrowed, frame = snap._narrow(values)
    assert (frame and frame[1]) == stored
    back = snap._widen(narrowed, frame, values.dtype)
    assert back.dtype == values.dtype and back.tolist() == values.tolist()


def test_a_snapshot_of_narrow_keys_and_values_restores_them_exactly():
    b = backend()
    keys = [7 * i - 50_000 for i in range(10_000)]
    RollingAggregator("sum", b.accumulators("sum-numeric")).update(keys, np.arange(10_000, dtype=np.int64) % 300)
    data, index = serialize(b.freeze(), 128, None)
    col = index["keyed"]["sum-numeric"]["columnar"]
    assert col["keys_for"][1] == "<u4" and col["values_for"][1] == "<u2"
    assert col["keys"][1] == 4 * 10_000 and col["values"][1] == 2 * 10_000
    restored = {}
    for _, _, (k, v) in read_keyed(data, index, range(128), "state.bin"):
        assert k.dtype == np.int64 and v.dtype == np.int64
        restored.update(zip(k.tolist(), v.tolist()))
    assert restored == {k: i % 300 for i, k in enumerate(keys)}


class Collect(AggregateFunction):
    def create_accumulator(self):
        return []

    def add(self, value, acc):
        return [*acc, value]

    def get_result(self, acc):
        return acc


@pytest.mark.parametrize("store", ["value", "list", "list_all", "map_value", "map_key", "reducing", "aggregating"])
def test_a_value_no_checkpoint_could_hold_is_refused_where_it_is_stored_naming_the_state(store):
    import threading

    lock = threading.Lock()  # cannot be pickled
    b = backend()
    b.current_key = "k"
    value = b.get_state(ValueStateDescriptor("session"))
    value.update({"n": 1})  # plain data is fine (its type is checked once)
    reducing = ReducingStateDescriptor("session", lambda a, c: (a, lock))
    store_it = {
        "value": lambda: value.update(lock),
        "list": lambda: b.get_list_state(ListStateDescriptor("session")).add(lock),
        "list_all": lambda: b.get_list_state(ListStateDescriptor("session")).add_all([1, lock]),
        "map_value": lambda: b.get_map_state(MapStateDescriptor("session")).put("x", lock),
        "map_key": lambda: b.get_map_state(MapStateDescriptor("session")).put(lock, 1),
        # the first value is stored as it is; the reduced one holds the lock
        "reducing": lambda: [b.get_reducing_state(reducing).add(n) for n in (1, 2)],
        "aggregating": lambda: b.get_aggregating_state(AggregatingStateDescriptor("session", Collect())).add(lock),
    }[store]
    if store != "value":
        b = backend()  # a fresh backend: a state name keeps its kind
        b.current_key = "k"
    with pytest.raises(TypeError, match=r"state 'session': a (lock|tuple|list) value cannot be pickled"):
        store_it()


def _restore_values(data: bytes, index: dict, b: HashMapKeyedStateBackend, name: str = "v") -> dict:
    for n, kind, chunk in read_keyed(data, index, b.key_groups, "state.bin"):
        b.restore_chunk(n, kind, chunk)
    return dict(b.tables[name].base) if name in b.tables else {}


@pytest.mark.parametrize("values", [
    [i * 7 - 300 for i in range(1000)],  # ints: stored narrowed, read back as Python ints
    [i / 3 for i in range(999)] + [-0.0],  # floats, exactly (bits)
])
def test_a_heap_value_state_of_int_keys_and_plain_numbers_snapshots_columnar_and_rescales(values):
    b = backend()
    st = b.get_state(ValueStateDescriptor("v"))
    keys = [(i * 2654435761) % 100000 for i in range(len(values))]
    for k, v in zip(keys, values):
        b.current_key = k
        st.update(v)
    data, index = serialize(b.freeze(), 128, None)
    entry = index["keyed"]["v"]
    assert entry["kind"] == "value" and "columnar" in entry  # no pickled chunk per key group
    seen = {}
    for i in range(3):  # at another parallelism: each subtask its own key groups, as the dict it was
        got = _restore_values(data, index, backend(3, i))
        assert all(assign_to_key_group(k, 128) in key_group_range(128, 3, i) for k in got)
        assert all(type(v) is type(values[0]) for v in got.values())
        seen.update(got)
    assert seen == dict(zip(keys, values))
    assert [str(seen[k]) for k in keys] == [str(v) for v in values]  # -0.0 stays -0.0


@pytest.mark.parametrize("values", [
    [True, False] * 50,  # bools are ints to numpy: pickled, so they come back as bools
    [1, 2.5] * 50,  # two types
    [1 << 70] * 100,  # beyond int64
    ["a"] * 100,
])
def test_heap_values_numpy_cannot_hold_exactly_are_pickled_and_restore_as_they_were(values):
    b = backend()
    st = b.get_state(ValueStateDescriptor("v"))
    for k, v in enumerate(values):
        b.current_key = k
        st.update(v)
    data, index = serialize(b.freeze(), 128, None)
    assert "columnar" not in index["keyed"]["v"]
    got = _restore_values(data, index, backend())
    assert got == dict(enumerate(values)) and [type(got[k]) for k in range(len(values))] == list(map(type, values))


def test_str_keys_of_a_heap_value_state_are_pickled():
    b = backend()
    st = b.get_state(ValueStateDescriptor("v"))
    for k in range(100):
        b.current_key = f"k{k}"
        st.update(k)
    data, index = serialize(b.freeze(), 128, None)
    assert "columnar" not in index["keyed"]["v"]
    assert _restore_values(data, index, backend()) == {f"k{k}": k for k in range(100)}


def test_successive_columnar_heap_snapshots_follow_new_deleted_and_reinserted_keys():
    """The writer reuses the key layout of the last snapshot while its keys are still the table's
    first ones; a deletion (which moves every key after it) must not leave a stale layout."""
    b = backend()
    st = b.get_state(ValueStateDescriptor("v"))
    expected: dict = {}

    def put(k, v):
        b.current_key = k
        if v is None:
            st.clear()
            expected.pop(k, None)
        else:
            st.update(v)
            expected[k] = v

    rounds = [
        lambda: [put(k, k) for k in range(500)],  # first snapshot: every key new
        lambda: [put(7, None), put(7, 70), put(1000, 1)],  # a key moved to the end, one more: as many keys after 7
        lambda: [put(k, k + 1) for k in range(0, 500, 3)],  # updates only: the layout as it was
        lambda: [put(k, k) for k in range(500, 800)],  # new keys appended
        lambda: [put(k, None) for k in range(100, 110)],  # deletions
        lambda: [put(k, -k) for k in range(100, 105)] + [put(7, None), put(7, 70)],  # re-inserted at the end
        lambda: [put(k, None) for k in range(795, 800)],  # the last keys deleted
        lambda: [put(k, 1) for k in range(900, 905)],
    ]
    for step in rounds:
        step()
        data, index = serialize(b.freeze(), 128, None)
        assert "columnar" in index["keyed"]["v"]
        assert _restore_values(data, index, backend()) == expected
        for i in range(2):
            part = _restore_values(data, index, backend(2, i))
            assert part == {k: v for k, v in expected.items() if assign_to_key_group(k, 128) in key_group_range(128, 2, i)}


def test_columnar_heap_value_snapshots_restore_into_rocksdb(tmp_path):
    from streamjob.runtime.state.rocksdb import RocksDBKeyedStateBackend

    b = backend()
    st = b.get_state(ValueStateDescriptor("v"))
    for k in range(-300, 300):
        b.current_key = k
        st.update(k * 2)
    data, index = serialize(b.freeze(), 128, None)
    assert "columnar" in index["keyed"]["v"]
    rdb = RocksDBKeyedStateBackend("op", 128, key_group_range(128, 2, 1), str(tmp_path / "local"))
    try:
        for name, kind, chunk in read_keyed(data, index, rdb.key_groups, "state.bin"):
            rdb.restore_chunk(name, kind, chunk)
        rv = rdb.get_state(ValueStateDescriptor("v"))
        for k in range(-300, 300):
            rdb.current_key = k
            assert rv.value() == (k * 2 if assign_to_key_group(k, 128) in rdb.key_groups else None)
    finally:
        rdb.dispose()


@pytest.mark.parametrize("kind", ["heap", "rocksdb", "heap-ttl"])
def test_map_state_has_pyflinks_mapping_dunders_on_every_backend(kind, tmp_path):
    # PyFlink's MapState (pyflink/datastream/state.py) defines __getitem__, __setitem__, __delitem__,
    # __contains__ and __iter__ (over the keys), on top of get/put/remove/contains/keys; no __len__.
    from streamjob.runtime import MapState, StateTtlConfig, Time
    from streamjob.runtime.state.rocksdb import RocksDBKeyedStateBackend

    b = (RocksDBKeyedStateBackend("op", 128, key_group_range(128, 1, 0), str(tmp_path / "local"))
         if kind == "rocksdb" else backend())
    try:
        d = MapStateDescriptor("m")
        if kind == "heap-ttl":
            d.enable_time_to_live(StateTtlConfig.new_builder(Time.hours(1)).build())
        b.current_key = "k1"
        m = b.get_map_state(d)
        assert isinstance(m, MapState)
        m["a"] = 1
        m["b"] = 2
        assert m["a"] == 1 and m["missing"] is None  # as PyFlink's get: None for a missing key
        assert "a" in m and "z" not in m
        del m["a"]
        assert "a" not in m and list(m) == ["b"] and sorted(iter(m)) == ["b"]
        b.current_key = "k2"
        assert list(m) == [] and "b" not in m
        m["c"] = 3
        b.current_key = "k1"
        assert [k for k in m] == ["b"] and m.get("b") == 2
        assert not hasattr(m, "__len__")
    finally:
        if kind == "rocksdb":
            b.dispose()
