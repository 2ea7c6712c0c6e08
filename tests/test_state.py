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
from streamjob.runtime.state.keygroups import assign_to_key_group, key_group_range
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


def test_snapshot_is_frozen_at_the_barrier_while_processing_goes_on():
    b = backend()
    lst = b.get_list_state(ListStateDescriptor("l"))
    value = b.get_state(ValueStateDescriptor("v"))
    for k in range(100):
        b.current_key = k
        lst.add(k)
        value.update(k)
    frozen = b.freeze()  # the synchronous phase
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
