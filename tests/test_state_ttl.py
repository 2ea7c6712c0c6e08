"""State TTL (``StateTtlConfig``, issue 14 item 6) on both keyed state backends: expiry per state
type (list elements and map entries one by one), visibility, update type, background and
full-snapshot cleanup, and savepoint restores that keep the age of every value.

Time is a clock the test moves (``backend.ttl_clock``), never a sleep; only the two jobs on Spark
at the end (a PyFlink documentation program, a savepoint hashmap -> rocksdb) run in real time."""

from __future__ import annotations

import pickle
import time
from pathlib import Path

import pytest

from streamjob.runtime import (AggregateFunction, Duration, KeyedBroadcastProcessFunction, KeyedProcessFunction,
                               ListStateDescriptor,
                               MapStateDescriptor, ReducingStateDescriptor, StateTtlConfig, StreamExecutionEnvironment,
                               Time, Types, ValueStateDescriptor)
from streamjob.runtime.api.state import AggregatingStateDescriptor
from streamjob.runtime.checkpoint.storage import CheckpointStorage, StateLocation, load_checkpoint
from streamjob.runtime.connectors import DataGenSource, DiscardingSink
from streamjob.runtime.state import codec
from streamjob.runtime.state.heap import HashMapKeyedStateBackend, HeapValueState, StateDefinitionError
from streamjob.runtime.state.rocksdb import RocksDBKeyedStateBackend, RocksDBOptions, RocksTtlCleanup
from streamjob.runtime.state.rocksdb_snapshot import restore_native, write_snapshot
from streamjob.runtime.state.snapshot import read_keyed, serialize
from streamjob.runtime.state.ttl import IncrementalCleanup, TtlPolicy, TtlValue, TtlValueState, drop_expired

JOBS = Path(__file__).parent / "jobs"
TTL = 1000  # ms
UT = StateTtlConfig.UpdateType
SV = StateTtlConfig.StateVisibility


class Clock:
    def __init__(self, now: int = 1_000_000):
        self.now = now

    def __call__(self) -> int:
        return self.now

    def at(self, t: int) -> "Clock":
        self.now = 1_000_000 + t
        return self


class Avg(AggregateFunction):
    def create_accumulator(self):
        return [0, 0]

    def add(self, value, acc):
        return [acc[0] + value, acc[1] + 1]

    def get_result(self, acc):
        return acc[0] / acc[1]

    def merge(self, a, b):
        return [a[0] + b[0], a[1] + b[1]]


def config(update=UT.OnCreateAndWrite, visibility=SV.NeverReturnExpired, full_snapshot=False, background=True):
    b = StateTtlConfig.new_builder(Time.milliseconds(TTL)).set_update_type(update).set_state_visibility(visibility)
    if full_snapshot:
        b = b.cleanup_full_snapshot()
    if not background:
        b = b.disable_cleanup_in_background()
    return b.build()


def ttl(descriptor, **kw):
    descriptor.enable_time_to_live(config(**kw))
    return descriptor


def heap(groups=range(128)):
    return HashMapKeyedStateBackend("op", 128, groups)


def rocks(tmp_path, groups=range(128), cache=4, incremental=False, sub="local"):
    # A tiny cache: most reads and writes go through RocksDB, not the Python cache.
    return RocksDBKeyedStateBackend("op", 128, groups, str(tmp_path / sub), RocksDBOptions(cache_size=cache),
                                    incremental=incremental)


@pytest.fixture(params=["hashmap", "rocksdb"])
def backend(request, tmp_path):
    b = heap() if request.param == "hashmap" else rocks(tmp_path)
    b.ttl_clock = Clock().at(0)
    yield b
    b.dispose()


def others(b, n=20):
    """Touch other keys, so a RocksDB backend's tiny cache evicts the key under test."""
    key = b.current_key
    for k in range(n):
        b.current_key = f"other-{k}"
        b.table("evict", "value").put(b.current_key, k)
    b.current_key = key


# -- the API -------------------------------------------------------------------------------------
def test_state_ttl_config_is_pyflinks_builder_with_flinks_defaults():
    c = StateTtlConfig.new_builder(Time.seconds(1)).build()
    assert c.get_ttl() == Time.seconds(1) and c.is_enabled()
    assert c.get_update_type() is UT.OnCreateAndWrite
    assert c.get_state_visibility() is SV.NeverReturnExpired
    assert c.get_ttl_time_characteristic() is StateTtlConfig.TtlTimeCharacteristic.ProcessingTime
    s = c.get_cleanup_strategies()
    assert s.is_cleanup_in_background() and not s.in_full_snapshot()
    assert s.get_incremental_cleanup_strategy().get_cleanup_size() == 5
    assert s.get_rocksdb_compact_filter_cleanup_strategy().get_query_time_after_num_entries() == 1000

    c = (StateTtlConfig.new_builder(Time.seconds(1)).set_ttl(Time.minutes(2)).update_ttl_on_read_and_write()
         .return_expired_if_not_cleaned_up().use_processing_time().cleanup_full_snapshot()
         .cleanup_incrementally(10, True).cleanup_in_rocksdb_compact_filter(500).disable_cleanup_in_background()
         .build())
    assert c.ttl_milliseconds() == 120_000 and c.get_update_type() is UT.OnReadAndWrite
    assert c.get_state_visibility() is SV.ReturnExpiredIfNotCleanedUp
    s = c.get_cleanup_strategies()
    assert s.in_full_snapshot() and not s.is_cleanup_in_background()
    inc = s.get_incremental_cleanup_strategy()
    assert inc.get_cleanup_size() == 10 and inc.run_cleanup_for_every_record()
    assert s.get_rocksdb_compact_filter_cleanup_strategy().get_query_time_after_num_entries() == 500
    # explicit strategies only, once background cleanup is off
    s = StateTtlConfig.new_builder(Duration.of_seconds(3)).disable_cleanup_in_background().build().get_cleanup_strategies()
    assert s.get_incremental_cleanup_strategy() is None and s.get_rocksdb_compact_filter_cleanup_strategy() is None

    with pytest.raises(ValueError, match=r"StateTtlConfig.new_builder\(\) needs a positive Time"):
        StateTtlConfig.new_builder(Time.seconds(0))
    with pytest.raises(TypeError, match=r"update_type must be a StateTtlConfig.UpdateType"):
        StateTtlConfig.new_builder(Time.seconds(1)).set_update_type("OnReadAndWrite").build()
    d = ValueStateDescriptor("text state", Types.STRING())
    with pytest.raises(TypeError, match=r"ValueStateDescriptor\('text state'\).enable_time_to_live\(\) needs a StateTtlConfig"):
        d.enable_time_to_live(Time.seconds(1))
    assert d.get_ttl_config() is None
    d.enable_time_to_live(c)
    assert d.get_ttl_config() is c


def test_ttl_policy_is_the_config_in_the_decorators_terms_and_expires_at_last_access_plus_ttl():
    p = TtlPolicy.of(config(update=UT.OnReadAndWrite, visibility=SV.ReturnExpiredIfNotCleanedUp, full_snapshot=True))
    assert (p.ttl, p.update_on_read, p.return_expired, p.in_full_snapshot, p.incremental_size, p.rocksdb_cleanup) == (
        TTL, True, True, True, 5, True)
    p = TtlPolicy.of(config(background=False))
    assert (p.update_on_read, p.return_expired, p.in_full_snapshot, p.incremental_size, p.rocksdb_cleanup) == (
        False, False, False, 0, False)
    assert not p.expired(5, 5 + TTL - 1) and p.expired(5, 5 + TTL)
    chunk = {"a": (1, 0), "b": (2, 1)}
    assert drop_expired("value+ttl", chunk, TTL, TTL) == {"b": (2, 1)}
    assert drop_expired("list+ttl", {"k": [(1, 0), (2, 1)], "gone": [(3, 0)]}, TTL, TTL) == {"k": [(2, 1)]}
    assert drop_expired("map+ttl", {"k": {"x": (1, 0), "y": (2, 1)}}, TTL, TTL) == {"k": {"y": (2, 1)}}


def test_without_ttl_or_with_update_type_disabled_the_state_is_the_plain_one(backend):
    """No TTL, no cost: the ordinary state classes (the heap fast path) and tables."""
    plain = backend.get_state(ValueStateDescriptor("plain"))
    disabled = ValueStateDescriptor("disabled")
    disabled.enable_time_to_live(StateTtlConfig.new_builder(Time.seconds(1)).set_update_type(UT.Disabled).build())
    off = backend.get_state(disabled)
    with_ttl = backend.get_state(ttl(ValueStateDescriptor("ttl")))
    assert type(plain) is type(off) and not isinstance(plain, TtlValueState) and isinstance(with_ttl, TtlValueState)
    if isinstance(backend, HashMapKeyedStateBackend):
        assert type(plain) is HeapValueState
    assert backend.kinds == {"plain": "value", "disabled": "value", "ttl": "value+ttl"}


# -- expiry per state type --------------------------------------------------------------------------
def test_value_state_expires_ttl_after_its_last_write(backend):
    clock = backend.ttl_clock
    state = backend.get_state(ttl(ValueStateDescriptor("v", default="none")))
    backend.current_key = "a"
    state.update("x")
    clock.at(600)
    state.update("y")  # a write refreshes the timestamp
    others(backend)
    clock.at(1599)
    assert state.value() == "y"  # OnCreateAndWrite: this read does not refresh it
    backend.current_key = "b"
    assert state.value() == "none"
    backend.current_key = "a"
    clock.at(1600)
    assert state.value() == "none"
    clock.at(0)
    assert state.value() == "none"  # removed when found expired, not merely hidden
    state.update("z")
    state.update(None)  # None clears, as without TTL
    assert state.value() == "none"


def test_on_read_and_write_refreshes_on_every_read(backend):
    clock = backend.ttl_clock
    state = backend.get_state(ttl(ValueStateDescriptor("v"), update=UT.OnReadAndWrite))
    backend.current_key = 7
    state.update({"n": 1})
    for t in (900, 1800, 2700):
        clock.at(t)
        others(backend)
        assert state.value() == {"n": 1}
    clock.at(3700)
    assert state.value() is None


def test_return_expired_if_not_cleaned_up_returns_it_once_then_it_is_gone(backend):
    clock = backend.ttl_clock
    # (background cleanup off: it runs first on each access, as in Flink, and may take the value first)
    state = backend.get_state(ttl(ValueStateDescriptor("v"), visibility=SV.ReturnExpiredIfNotCleanedUp,
                                  background=False))
    backend.current_key = "a"
    state.update(41)
    clock.at(5000)
    assert state.value() == 41  # expired, but still there
    assert state.value() is None  # that read cleaned it up


def test_list_elements_expire_one_by_one(backend):
    clock = backend.ttl_clock
    state = backend.get_list_state(ttl(ListStateDescriptor("l", Types.INT())))
    backend.current_key = "a"
    state.add(1)
    state.add_all([2, 3])
    clock.at(500)
    state.add(4)
    others(backend)
    clock.at(999)
    assert state.get() == [1, 2, 3, 4] and list(state) == [1, 2, 3, 4]
    clock.at(1000)
    assert state.get() == [4]
    clock.at(1499)
    assert state.get() == [4]
    state.update([5, 6])  # new elements, new timestamps
    clock.at(1500)
    assert state.get() == [5, 6]
    clock.at(2499)
    state.add(7)
    clock.at(2500)
    assert state.get() == [7]
    clock.at(3500)
    assert state.get() == []
    with pytest.raises(ValueError, match="list state 'l': cannot add None"):
        state.add(None)


def test_list_return_expired_and_read_refresh(backend):
    clock = backend.ttl_clock
    shown = backend.get_list_state(ttl(ListStateDescriptor("shown"), visibility=SV.ReturnExpiredIfNotCleanedUp,
                                                background=False))
    refreshed = backend.get_list_state(ttl(ListStateDescriptor("refreshed"), update=UT.OnReadAndWrite))
    backend.current_key = "k"
    shown.add_all(["old", "older"])
    refreshed.add("kept alive")
    clock.at(600)
    shown.add("new")
    assert refreshed.get() == ["kept alive"]
    clock.at(1200)
    assert shown.get() == ["old", "older", "new"]  # expired ones returned while not cleaned up...
    assert shown.get() == ["new"]  # ... which that read did
    assert refreshed.get() == ["kept alive"]  # read at 600: alive until 1600, now until 2200
    clock.at(2199)
    assert refreshed.get() == ["kept alive"]


def test_map_entries_expire_one_by_one(backend):
    clock = backend.ttl_clock
    state = backend.get_map_state(ttl(MapStateDescriptor("m", Types.STRING(), Types.INT())))
    backend.current_key = "a"
    state.put("x", 1)
    state.put_all({"y": 2, "z": 3})
    clock.at(500)
    state.put("y", 20)
    state["w"] = 4
    others(backend)
    clock.at(1000)
    assert state.get("x") is None and not state.contains("z") and "x" not in state
    assert state.get("y") == 20 and state["w"] == 4
    assert sorted(state.items()) == [("w", 4), ("y", 20)]
    assert sorted(state.keys()) == ["w", "y"] and sorted(state.values()) == [4, 20] and sorted(state) == ["w", "y"]
    assert not state.is_empty()
    clock.at(1500)
    assert state.is_empty() and state.items() == []
    state.put("v", None)  # a None value is a value
    assert state.contains("v") and state.get("v") is None
    del state["v"]
    assert not state.contains("v")


def test_map_visibility_and_refresh_per_entry(backend):
    clock = backend.ttl_clock
    state = backend.get_map_state(ttl(MapStateDescriptor("m"), update=UT.OnReadAndWrite,
                                      visibility=SV.ReturnExpiredIfNotCleanedUp, background=False))
    backend.current_key = "a"
    state.put_all({"read": 1, "unread": 2})
    clock.at(900)
    assert state.get("read") == 1
    clock.at(1100)
    assert sorted(state.items()) == [("read", 1), ("unread", 2)]  # "unread" expired, returned once
    assert state.keys() == ["read"]  # refreshed at 1100 by the read above
    clock.at(2099)
    assert state.contains("read")


def test_reducing_and_aggregating_state_expire_and_restart_from_nothing(backend):
    clock = backend.ttl_clock
    total = backend.get_reducing_state(ttl(ReducingStateDescriptor("sum", lambda a, b: a + b, Types.INT())))
    avg = backend.get_aggregating_state(ttl(AggregatingStateDescriptor("avg", Avg(), Types.PICKLED_BYTE_ARRAY())))
    backend.current_key = "a"
    total.add(1)
    avg.add(1)
    clock.at(500)
    total.add(2)
    avg.add(3)
    others(backend)
    clock.at(1499)
    assert total.get() == 3 and avg.get() == 2.0
    clock.at(1500)
    assert total.get() is None and avg.get() is None
    clock.at(1600)
    total.add(10)  # an expired accumulator is not merged into
    clock.at(3000)
    avg.add(10)  # (here it expired before the add, unread)
    assert avg.get() == 10.0
    clock.at(2599)
    assert total.get() == 10
    total.clear()
    assert total.get() is None


# -- cleanup ------------------------------------------------------------------------------------------
def test_heap_incremental_cleanup_checks_a_few_keys_per_state_access():
    b = heap()
    clock = b.ttl_clock = Clock().at(0)
    d = ValueStateDescriptor("v")
    d.enable_time_to_live(StateTtlConfig.new_builder(Time.milliseconds(TTL)).cleanup_incrementally(2, False).build())
    state = b.get_state(d)
    for k in range(100):
        b.current_key = k
        state.update(k)
    clock.at(600)
    b.current_key = "fresh"
    state.update("fresh")
    clock.at(1000)
    table = b.tables["v"]
    assert len(table.base) == 101
    state = b.get_state(d)  # a new state object: its first batch comes after EVERY accesses
    for _ in range(IncrementalCleanup.EVERY - 1):
        state.value()
    assert len(table.base) == 101
    state.value()  # 2 keys per access, checked EVERY accesses at a time
    assert len(table.base) == 101 - 2 * IncrementalCleanup.EVERY
    for _ in range(2 * IncrementalCleanup.EVERY):
        state.value()
    assert list(table.base) == ["fresh"]
    # off: only an explicit strategy cleans in the background
    b2 = heap()
    b2.ttl_clock = Clock().at(0)
    quiet = b2.get_list_state(ttl(ListStateDescriptor("l"), background=False))
    for k in range(20):
        b2.current_key = k
        quiet.add(k)
    b2.ttl_clock.at(5000)
    for _ in range(2 * IncrementalCleanup.EVERY):
        quiet.get()
    assert len(b2.tables["l"].base) == 19  # only the key that was read


def test_heap_incremental_cleanup_of_list_elements_and_map_entries_during_a_snapshot():
    b = heap()
    clock = b.ttl_clock = Clock().at(0)
    lst = b.get_list_state(ttl(ListStateDescriptor("l")))
    m = b.get_map_state(ttl(MapStateDescriptor("m")))
    for k in range(3):
        b.current_key = k
        lst.add("old")
        m.put("old", 1)
    clock.at(500)
    for k in range(3):
        b.current_key = k
        lst.add("new")
        m.put("new", 2)
    frozen = b.freeze()  # a snapshot in flight: cleanup writes go to the copy-on-write layer
    clock.at(1200)
    b.current_key = "x"
    for _ in range(IncrementalCleanup.EVERY):  # a batch: 5 keys per access (by default), 3 keys in all
        lst.get()
        m.get("nothing")
    assert {k: [p[0] for p in v] for k, v in b.tables["l"].items()} == {k: ["new"] for k in range(3)}
    assert {k: list(v) for k, v in b.tables["m"].items()} == {k: ["new"] for k in range(3)}
    data, index = serialize(frozen, 128, None)  # the snapshot still has what was there at the barrier
    chunks = {}
    for name, kind, chunk in read_keyed(data, index, range(128), "t"):
        chunks.setdefault(name, {}).update(chunk)
    assert all(len(v) == 2 for v in chunks["l"].values()) and all(len(v) == 2 for v in chunks["m"].values())
    b.thaw()


def test_rocksdb_background_cleanup_deletes_expired_entries_on_disk(tmp_path):
    b = rocks(tmp_path, cache=2)
    clock = b.ttl_clock = Clock().at(0)
    v = b.get_state(ttl(ValueStateDescriptor("v")))
    lst = b.get_list_state(ttl(ListStateDescriptor("l")))
    m = b.get_map_state(ttl(MapStateDescriptor("m")))
    for k in range(100):
        b.current_key = k
        v.update(k)
        lst.add_all(["old", "older"])
        m.put("old", k)
    clock.at(500)
    for k in range(50):
        b.current_key = k
        lst.add("new")
        m.put("new", k)
    for name in ("v", "l"):
        b.tables[name].evict_all()

    def on_disk(name):
        it = b.tables[name].cf.iter()
        it.seek_to_first()
        out = []
        while it.valid():
            out.append(codec.decode_value(it.value()) if name != "l" else codec.decode_list(it.value()))
            it.next()
        return out

    assert len(on_disk("v")) == 100 and len(on_disk("m")) == 150
    clock.at(1200)
    b.current_key = "someone else"
    for _ in range(RocksTtlCleanup.EVERY):  # one batch of EVERY entries per EVERY accesses
        v.value()
        lst.get()
        m.get("x")
    assert on_disk("v") == []
    assert 50 < len(on_disk("m")) <= 50 + (150 - RocksTtlCleanup.EVERY)  # a batch checked 128 of the 150 entries
    for _ in range(RocksTtlCleanup.EVERY):
        m.get("x")
    assert sorted(on_disk("m")) == [TtlValue((k, 1_000_500)) for k in range(50)]
    assert sorted(len(x) for x in on_disk("l")) == [1] * 50
    b.current_key = 3
    assert v.value() is None and lst.get() == ["new"] and m.items() == [("new", 3)]
    b.dispose()


def _chunks(data, index):
    out = {}
    for name, kind, chunk in read_keyed(data, index, range(128), "test"):
        out.setdefault((name, kind), {}).update(chunk)
    return out


def fill(b, clock, full_snapshot):
    """Keys 0..9 written at 0 (half of each list / map then topped up at 600), keys 10..19 at 600."""
    kw = dict(full_snapshot=full_snapshot, background=False)
    states = (b.get_state(ttl(ValueStateDescriptor("v"), **kw)), b.get_list_state(ttl(ListStateDescriptor("l"), **kw)),
              b.get_map_state(ttl(MapStateDescriptor("m"), **kw)),
              b.get_reducing_state(ttl(ReducingStateDescriptor("r", lambda x, y: x + y), **kw)),
              b.get_aggregating_state(ttl(AggregatingStateDescriptor("a", Avg()), **kw)))
    v, lst, m, r, a = states
    for t, keys in ((0, range(10)), (600, range(5, 20))):
        clock.at(t)
        for k in keys:
            b.current_key = k
            if k < 10 and t == 600:  # 5..9: only their lists and maps get a second, younger value
                lst.add(k * 10 + 1)
                m.put("second", k)
                continue
            v.update(k)
            lst.add(k * 10)
            m.put("first", k)
            r.add(k)
            a.add(k)
    return states


def read(b, states, keys):
    v, lst, m, r, a = states
    out = {}
    for k in keys:
        b.current_key = k
        out[k] = (v.value(), lst.get(), sorted(m.items()), r.get(), a.get())
    return out


@pytest.mark.parametrize("source", ["hashmap", "rocksdb"])
def test_cleanup_full_snapshot_leaves_expired_values_out_of_full_snapshots(tmp_path, source):
    storage = CheckpointStorage(str(tmp_path / "chk"), "job", inline_threshold=0)
    for full_snapshot in (False, True):
        b = heap() if source == "hashmap" else rocks(tmp_path, sub=f"l{full_snapshot}")
        clock = b.ttl_clock = Clock()
        fill(b, clock, full_snapshot)
        clock.at(1300)  # what was written at 0 has expired, what was written at 600 has not
        if source == "hashmap":
            data, index = serialize(b.freeze(), 128, None)
            b.thaw()
        else:
            handle, _, _ = write_snapshot(b.snapshot(1, full=True), storage, f"op-{full_snapshot}", None)
            data, index = storage.read(handle), handle["index"]
        chunks = _chunks(data, index)
        assert {kind for _, kind in chunks} == {"value+ttl", "list+ttl", "map+ttl", "reducing+ttl", "aggregating+ttl"}
        values = chunks[("v", "value+ttl")]
        lists = chunks[("l", "list+ttl")]
        maps = chunks[("m", "map+ttl")]
        if full_snapshot:
            assert sorted(values) == list(range(10, 20)) and sorted(chunks[("r", "reducing+ttl")]) == list(range(10, 20))
            assert {k: [p[0] for p in ps] for k, ps in lists.items()} == {
                **{k: [k * 10 + 1] for k in range(5, 10)}, **{k: [k * 10] for k in range(10, 20)}}
            assert {k: sorted(e) for k, e in maps.items()} == {
                **{k: ["second"] for k in range(5, 10)}, **{k: ["first"] for k in range(10, 20)}}
        else:
            assert sorted(values) == list(range(20)) and len(lists) == len(maps) == 20
        # the working state is untouched by a snapshot: what it left out is still there
        b.ttl_clock.at(900)
        assert read(b, fill_states(b), [0, 7]) == {0: (0, [0], [("first", 0)], 0, 0.0),
                                                   7: (7, [70, 71], [("first", 7), ("second", 7)], 7, 7.0)}
        b.dispose()


def test_ttl_state_restores_from_a_savepoint_into_the_other_backend_keeping_its_age(tmp_path):
    """hashmap -> savepoint -> rocksdb (split over two subtasks) -> savepoint -> hashmap: every value
    keeps the time it was written, so it expires when it would have without the restores."""
    src = heap()
    clock = src.ttl_clock = Clock()
    states = fill(src, clock, full_snapshot=False)
    clock.at(900)
    expected = read(src, states, range(20))
    assert expected[0] == (0, [0], [("first", 0)], 0, 0.0) and expected[7][1] == [70, 71]
    data, index = serialize(src.freeze(), 128, None)  # canonical, as a savepoint
    src.thaw()

    parts = [rocks(tmp_path, groups=g, sub=f"p{i}") for i, g in enumerate((range(0, 64), range(64, 128)))]
    storage = CheckpointStorage(str(tmp_path / "chk"), "job", inline_threshold=0)
    heap_data = []
    for i, part in enumerate(parts):
        part.ttl_clock = clock
        for name, kind, chunk in read_keyed(data, index, part.key_groups, "savepoint"):
            part.restore_chunk(name, kind, chunk)
        handle, _, _ = write_snapshot(part.snapshot(2, full=True), storage, f"op-{i}", None)
        heap_data.append((storage.read(handle), handle["index"]))

    def owned(part):
        return [k for k in range(20) if int.from_bytes(part.key_bytes(k)[:2], "big") in part.key_groups]

    clock.at(900)
    got = {}
    for part in parts:
        got.update(read(part, fill_states(part), owned(part)))
    assert got == expected

    back = heap()
    back.ttl_clock = clock
    for d, i in heap_data:
        for name, kind, chunk in read_keyed(d, i, back.key_groups, "savepoint 2"):
            back.restore_chunk(name, kind, chunk)
    states = fill_states(back)
    clock.at(1000)  # the values written at 0 expire now, in every restored copy
    after = read(back, states, range(20))
    assert after[0] == (None, [], [], None, None)
    assert after[7] == (None, [71], [("second", 7)], None, None)
    assert after[15] == (15, [150], [("first", 15)], 15, 15.0)
    clock.at(1600)
    for part in parts:
        assert all(x in (None, [], []) for row in read(part, fill_states(part), owned(part)).values() for x in row)
        part.dispose()


def test_ttl_state_in_incremental_rocksdb_checkpoints_restores_natively_and_into_the_heap(tmp_path):
    """Native (SST) checkpoints hold the TTL entries as they are: adopted as the working database of
    the same key groups, or read key group by key group into the heap backend, ages kept."""
    storage = CheckpointStorage(str(tmp_path / "chk"), "job", inline_threshold=0)
    storage.initialize()
    src = rocks(tmp_path, incremental=True, sub="src")
    clock = src.ttl_clock = Clock()
    states = fill(src, clock, full_snapshot=True)  # full-snapshot cleanup does not apply to incremental ones
    clock.at(1300)
    handle, _, _ = write_snapshot(src.snapshot(1), storage, "op-0", None)
    assert "rocksdb" in handle["index"]
    clock.at(900)
    expected = read(src, states, range(20))
    native = rocks(tmp_path, incremental=True, sub="native")
    on_heap = heap()
    for b in (native, on_heap):
        b.ttl_clock = clock
        restore_native(b, handle, storage.read(handle), storage, 1, "test", first=True)
        assert read(b, fill_states(b), range(20)) == expected
    clock.at(1000)
    assert read(native, fill_states(native), [0, 7]) == read(on_heap, fill_states(on_heap), [0, 7]) == {
        0: (None, [], [], None, None), 7: (None, [71], [("second", 7)], None, None)}
    for b in (src, native):
        b.dispose()


def fill_states(b):
    kw = dict(background=False)
    return (b.get_state(ttl(ValueStateDescriptor("v"), **kw)), b.get_list_state(ttl(ListStateDescriptor("l"), **kw)),
            b.get_map_state(ttl(MapStateDescriptor("m"), **kw)),
            b.get_reducing_state(ttl(ReducingStateDescriptor("r", lambda x, y: x + y), **kw)),
            b.get_aggregating_state(ttl(AggregatingStateDescriptor("a", Avg()), **kw)))


def test_ttl_cannot_be_switched_on_or_off_across_a_restore(backend):
    backend.restore_chunk("with", "value+ttl", {"a": (1, 0)})
    backend.restore_chunk("without", "list", {"a": [1]})
    with pytest.raises(StateDefinitionError, match=r"value state 'with' was created with a TTL and cannot be used "
                                                   r"without one"):
        backend.get_state(ValueStateDescriptor("with"))
    with pytest.raises(StateDefinitionError, match=r"list state 'without' was created without a TTL and cannot be "
                                                   r"used with one"):
        backend.get_list_state(ttl(ListStateDescriptor("without")))
    with pytest.raises(StateDefinitionError, match=r"state 'with' is a value\+ttl state, cannot be used as a map"):
        backend.get_map_state(ttl(MapStateDescriptor("with")))


class CountsSeenByRules(KeyedBroadcastProcessFunction):
    """Counts per key in TTL state; every rule lists each key's count (apply_to_keyed_state)."""

    COUNT = ttl(ValueStateDescriptor("count", Types.INT()), background=False)

    def open(self, ctx):
        self.count = ctx.get_state(self.COUNT)

    def process_element(self, value, ctx):
        self.count.update((self.count.value() or 0) + 1)

    def process_broadcast_element(self, value, ctx):
        seen = []
        ctx.apply_to_keyed_state(self.COUNT, lambda key, state: seen.append((key, state.value())))
        yield from sorted(seen)


@pytest.mark.parametrize("backend_name", ["hashmap", "rocksdb"])
def test_apply_to_keyed_state_reaches_ttl_state_and_sees_expired_values_as_gone(backend_name, tmp_path):
    from test_broadcast_state import Harness

    h = Harness(CountsSeenByRules(), keyed=True, backend=backend_name, state_root=str(tmp_path)).open()
    clock = h.op.keyed_backend.ttl_clock = Clock().at(0)
    h.element(("a", 1), ("b", 1))
    clock.at(600)
    h.element(("b", 1))
    clock.at(1200)
    h.rule(1)
    assert h.take() == [("a", None), ("b", 2)]  # a's count expired at 1000, b's lives until 1600
    h.op.dispose()


def test_ttl_values_are_compact_in_rocksdb_and_pickle_as_plain_tuples():
    v = TtlValue(("abc", 1_700_000_000_000))
    raw = codec.encode_value(v)
    assert raw == b"T" + (1_700_000_000_000).to_bytes(8, "big") + b"sabc"
    back = codec.decode_value(raw)
    assert type(back) is TtlValue and back == ("abc", 1_700_000_000_000)
    assert codec.decode_list(codec.encode_list([v, TtlValue(([1], 5))])) == [v, ([1], 5)]
    plain = pickle.loads(pickle.dumps(v))
    assert type(plain) is tuple and plain == ("abc", 1_700_000_000_000)
    assert b"TtlValue" not in pickle.dumps(v)  # savepoints do not name the class


# -- on Spark -------------------------------------------------------------------------------------------
def test_pyflink_documentation_program_with_state_ttl_prints_what_pyflink_prints():
    """tests/jobs/state_ttl.py: PyFlink's TTL configuration on its CountWindowAverage example, once per
    backend; the state written before a 1.5 s pause has expired after it (TTL 1 s)."""
    from conftest import run_cli

    r = run_cli("run", str(JOBS / "state_ttl.py"), "hashmap", "rocksdb", "--no-progress")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    for backend in ("hashmap", "rocksdb"):
        assert [x.removeprefix(f"{backend}> ") for x in lines if x.startswith(f"{backend}> ")] == [
            "(1, 4, [3, 5])", "(2, 5, [4, 6])", "(1, 2, [1, 3])", "(2, 3, [4, 2])"], r.stdout


class FirstSeen(KeyedProcessFunction):
    """Remembers each key's first row in TTL state, written once: its timestamp is its first sighting."""

    def open(self, ctx):
        config = StateTtlConfig.new_builder(Time.hours(1)).cleanup_full_snapshot().build()
        first = ValueStateDescriptor("first", Types.INT())
        first.enable_time_to_live(config)
        seen = MapStateDescriptor("seen", Types.INT(), Types.INT())
        seen.enable_time_to_live(config)
        self.first = ctx.get_state(first)
        self.seen = ctx.get_map_state(seen)

    def process_element(self, row, ctx):
        if self.first.value() is None:
            self.first.update(row["i"])
            self.seen.put(row["i"], row["key"])
        yield row


def _ttl_job(tmp_path, backend, parallelism, restore=None):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    if restore:
        env.configure({"execution.state-recovery.path": restore})
    env.enable_checkpointing(200)
    env.set_state_backend(backend)
    env.get_checkpoint_config().set_checkpoint_storage(str(tmp_path / "checkpoints"))
    rows = env.from_source(DataGenSource(lambda i: {"key": i % 10, "i": i}, rows_per_second=200), name="rows")
    rows.uid("rows").key_by("key").process(FirstSeen()).uid("first-seen").sink_to(DiscardingSink()).uid("out")
    client = env.execute_async("ttl")
    assert client.wait_until_running(60)
    deadline = time.monotonic() + 60
    while client.job_manager.coordinator.counts["COMPLETED"] < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)  # 100 rows after the first checkpoint: every key seen
    path = client.stop_with_savepoint(False, str(tmp_path / "savepoints"), timeout=120)
    client.get_job_execution_result(120)
    return path


def _keyed_state(path):
    root, meta = load_checkpoint(path)
    location = StateLocation(root)
    out: dict = {}
    for op in meta.operators.values():
        for handle in op["subtasks"]:
            if handle and handle["index"].get("keyed"):
                for name, kind, chunk in read_keyed(location.read(handle), handle["index"], range(128), path):
                    out.setdefault((name, kind), {}).update(chunk)
    return out


def test_ttl_state_keeps_its_timestamps_through_savepoints_from_hashmap_into_rocksdb(spark_slots, tmp_path):
    first = _ttl_job(tmp_path, "hashmap", 2)
    before = _keyed_state(first)
    assert set(before) == {("first", "value+ttl"), ("seen", "map+ttl")}
    values = before[("first", "value+ttl")]
    assert sorted(values) == list(range(10)) and all(v[0] % 10 == k for k, v in values.items())
    stamps = {ts for _, ts in values.values()}
    assert all(abs(ts - time.time() * 1000) < 120_000 for ts in stamps)  # wall-clock ms
    second = _ttl_job(tmp_path, "rocksdb", 3, restore=first)  # rescaled, other backend: same state, same ages
    after = _keyed_state(second)
    assert after[("first", "value+ttl")] == values
    assert after[("seen", "map+ttl")] == before[("seen", "map+ttl")]
