"""The RocksDB state backend on real RocksDB (rocksdict), without Spark: state semantics,
the write-back cache, snapshots (incremental and canonical) and restores."""

from __future__ import annotations

import os

import numpy as np
import pytest

from streamjob.runtime import (AggregateFunction, ListStateDescriptor, MapStateDescriptor, ReducingStateDescriptor,
                               ValueStateDescriptor)
from streamjob.runtime.api.state import AggregatingStateDescriptor
from streamjob.runtime.checkpoint.metadata import shared_files
from streamjob.runtime.checkpoint.shared import SharedStateRegistry, uploaded_for
from streamjob.runtime.checkpoint.storage import CheckpointStorage
from streamjob.runtime.state import codec
from streamjob.runtime.state.heap import HashMapKeyedStateBackend
from streamjob.runtime.keygroups import key_group_range
from streamjob.runtime.state.rocksdb import RocksDBKeyedStateBackend, RocksDBOptions, sweep_stale
from streamjob.runtime.state.rocksdb_snapshot import restore_native, write_snapshot
from streamjob.runtime.state.snapshot import SnapshotFormatError, read_keyed, serialize


class Avg(AggregateFunction):
    def create_accumulator(self):
        return [0, 0]

    def add(self, value, acc):
        return [acc[0] + value, acc[1] + 1]

    def get_result(self, acc):
        return acc[0] / acc[1]

    def merge(self, a, b):
        return [a[0] + b[0], a[1] + b[1]]


def rocks(tmp_path, groups=range(0, 128), cache=4, incremental=True, root=None):
    return RocksDBKeyedStateBackend("op", 128, groups, str(tmp_path / "local"), RocksDBOptions(cache_size=cache),
                                    incremental=incremental, state_root=root)


def fill(backend, keys):
    """Every state kind, driven through the public state objects."""
    v = backend.get_state(ValueStateDescriptor("v", default=0))
    lst = backend.get_list_state(ListStateDescriptor("l"))
    m = backend.get_map_state(MapStateDescriptor("m"))
    r = backend.get_reducing_state(ReducingStateDescriptor("r", lambda a, b: a + b))
    a = backend.get_aggregating_state(AggregatingStateDescriptor("a", Avg()))
    for i, k in enumerate(keys):
        backend.current_key = k
        v.update(v.value() + 1)
        lst.add(i)
        m.put(i % 3, m.get(i % 3) or 0 + i)
        r.add(i)
        a.add(i)
    return v, lst, m, r, a


def read_all(backend, keys):
    v, lst, m, r, a = (backend.get_state(ValueStateDescriptor("v", default=0)),
                       backend.get_list_state(ListStateDescriptor("l")), backend.get_map_state(MapStateDescriptor("m")),
                       backend.get_reducing_state(ReducingStateDescriptor("r", lambda a, b: a + b)),
                       backend.get_aggregating_state(AggregatingStateDescriptor("a", Avg())))
    out = {}
    for k in sorted(set(keys), key=repr):
        backend.current_key = k
        out[k] = (v.value(), lst.get(), sorted(m.items()), r.get(), a.get())
    return out


KEYS = [i % 40 for i in range(300)] + ["a", "b", ("t", 1), None, 2.5, b"raw"]


def test_every_state_kind_behaves_as_on_the_heap_backend_with_a_tiny_cache(tmp_path):
    rdb, heap = rocks(tmp_path, cache=3), HashMapKeyedStateBackend("op", 128, range(128))
    fill(rdb, KEYS)
    fill(heap, KEYS)
    assert read_all(rdb, KEYS) == read_all(heap, KEYS)
    v = rdb.get_state(ValueStateDescriptor("v"))
    rdb.current_key = 7
    v.clear()
    assert v.value() is None
    m = rdb.get_map_state(MapStateDescriptor("m"))
    rdb.current_key = 8
    m.remove(0)
    assert not m.contains(0) and m.contains(1) and not m.is_empty()
    m.clear()
    assert m.is_empty() and m.keys() == []
    rdb.dispose()
    assert not os.path.exists(rdb.home)


def test_equal_keys_are_one_key_and_changing_a_read_value_needs_update(tmp_path):
    rdb = rocks(tmp_path, cache=2)
    v = rdb.get_state(ValueStateDescriptor("v"))
    rdb.current_key = 1
    v.update({"n": [1]})
    rdb.current_key = 1.0  # 1 == 1.0 == True: one key, as in a dict and in the key hash
    assert v.value() == {"n": [1]}
    v.value()["n"].append(2)  # RocksDB semantics: the object read is a copy
    rdb.current_key = True
    assert v.value() == {"n": [1]}
    assert codec.encode_key(1) == codec.encode_key(1.0) == codec.encode_key(np.int64(1))
    for key in [0, -5, 2**62, "x", "", b"b", None, 1.5, ("a", (1, None)), 2**80]:
        assert codec.decode_key(codec.encode_key(key)) == key
    rdb.dispose()


def test_cache_bounded_by_memory_estimate(tmp_path):
    """Large values fill the cache's byte budget long before its entry count."""
    rdb = RocksDBKeyedStateBackend("op", 128, range(128), str(tmp_path / "local"),
                                   RocksDBOptions(cache_size=1_000_000, cache_memory=1 << 20))
    v = rdb.get_state(ValueStateDescriptor("v"))
    s = rdb.get_state(ValueStateDescriptor("s"))
    for k in range(2000):  # 2000 x 10 KB = 20 MB of values through a 1 MB cache
        rdb.current_key = k
        v.update("x" * 10_000 + str(k))
        s.update({"k": k, "pad": b"y" * 5_000})
    for name in ("v", "s"):
        t = rdb.table(name, "value")
        held = sum(len(x) if isinstance(x, str) else len(getattr(x, "data", b"")) for x in t.cache.values())
        held += sum(len(x) if isinstance(x, str) else len(getattr(x, "data", b"")) for x in t.old.values())
        assert 0 < held <= (1 << 20) + 20_000, (name, held)  # one generation may overshoot by an entry
    for k in range(2000):
        rdb.current_key = k
        assert v.value() == "x" * 10_000 + str(k)
        assert s.value()["k"] == k
    rdb.dispose()


def test_state_survives_cache_eviction_and_is_on_disk(tmp_path):
    rdb = rocks(tmp_path, cache=10)
    v = rdb.get_state(ValueStateDescriptor("v"))
    for k in range(1000):
        rdb.current_key = k
        v.update(k * 2)
    assert len(rdb.table("v", "value").cache) <= 10
    rdb.table("v", "value").flush()
    assert rdb.db.get_column_family("s:v").get(rdb.key_bytes(999)) == codec.encode_value(1998)
    for k in range(1000):
        rdb.current_key = k
        assert v.value() == k * 2
    rdb.dispose()


def snapshot(backend, storage, n, name="op-0"):
    snap = backend.snapshot(n)
    handle, full, uploaded = write_snapshot(snap, storage, name, None)
    assert not os.path.exists(snap.directory)  # the local checkpoint is removed after the upload
    return handle, full, uploaded


def test_incremental_snapshots_upload_only_new_sst_files_and_restore_exactly(tmp_path):
    storage = CheckpointStorage(str(tmp_path / "chk"), "job", inline_threshold=0)
    storage.initialize()
    rdb = rocks(tmp_path, root=storage.url)
    v = rdb.get_state(ValueStateDescriptor("v"))
    for k in range(5000):
        rdb.current_key = k
        v.update("x" * 50 + str(k))
    h1, full1, up1 = snapshot(rdb, storage, 1)
    rdb.notify_checkpoint_complete(1)
    for k in range(50):  # 1% changes
        rdb.current_key = k
        v.update("changed")
    h2, full2, up2 = snapshot(rdb, storage, 2)
    first, second = set(shared_files(h1)), set(shared_files(h2))
    assert first <= second and len(second - first) >= 1  # the old SSTs are referenced again
    assert all(uploaded_for(f) == 2 for f in second - first)
    assert up2 < up1 / 3 and full2 >= full1
    meta_bytes = up2 - sum(os.path.getsize(storage.path(f)) for f in second - first)
    assert meta_bytes == h2["size"]  # besides new SSTs only the small private files were written

    restored = rocks(tmp_path, root=storage.url)
    restore_native(restored, h2, storage.read(h2), storage, 2, "test", first=True)
    rv = restored.get_state(ValueStateDescriptor("v"))
    for k in (0, 49, 50, 4999):
        restored.current_key = k
        assert rv.value() == ("changed" if k < 50 else "x" * 50 + str(k))
    # same job directory: the restored files are the base of the next incremental checkpoint
    assert restored.last_completed == 2 and set(f["file"] for f in restored.uploaded[2].values()) == second
    rdb.dispose()
    restored.dispose()


def test_full_snapshots_are_canonical_and_restore_into_the_heap_backend_and_at_other_parallelism(tmp_path):
    storage = CheckpointStorage(str(tmp_path / "chk"), "job", inline_threshold=0)
    rdb = rocks(tmp_path, incremental=False)
    fill(rdb, KEYS)
    expected = read_all(rdb, KEYS)
    handle, _, _ = snapshot(rdb, storage, 1)
    data = storage.read(handle)
    heap = HashMapKeyedStateBackend("op", 128, range(128))
    for name, kind, chunk in read_keyed(data, handle["index"], heap.key_groups, "test"):
        heap.restore_chunk(name, kind, chunk)
    assert read_all(heap, KEYS) == expected
    # and the heap backend's own snapshot restores into RocksDB split over two subtasks
    heap_data, heap_index = serialize(heap.freeze(), 128, None)
    parts = [rocks(tmp_path / str(i), groups=key_group_range(128, 2, i)) for i in range(2)]
    for part in parts:
        for name, kind, chunk in read_keyed(heap_data, heap_index, part.key_groups, "test"):
            part.restore_chunk(name, kind, chunk)
    merged = {}
    for part in parts:
        mine = [k for k in KEYS if rdb.key_bytes(k)[:2] and int.from_bytes(rdb.key_bytes(k)[:2], "big") in part.key_groups]
        merged.update(read_all(part, mine))
        part.dispose()
    assert merged == expected
    rdb.dispose()


def test_a_native_snapshot_restores_at_another_parallelism_by_key_group(tmp_path):
    storage = CheckpointStorage(str(tmp_path / "chk"), "job", inline_threshold=0)
    rdb = rocks(tmp_path)
    fill(rdb, KEYS)
    expected = read_all(rdb, KEYS)
    handle, _, _ = snapshot(rdb, storage, 1)
    data = storage.read(handle)
    merged = {}
    for i in range(3):
        part = rocks(tmp_path / f"p{i}", groups=key_group_range(128, 3, i))
        restore_native(part, handle, data, storage, 1, "test", first=True)
        mine = [k for k in KEYS if int.from_bytes(rdb.key_bytes(k)[:2], "big") in part.key_groups]
        merged.update(read_all(part, mine))
        other = [k for k in KEYS if k not in mine]
        assert all(v == (0, [], [], None, None) for v in read_all(part, other).values())  # nothing foreign copied
        # the part adopted the whole database and clipped it (delete-range): its own snapshot holds only its keys
        again, _, _ = snapshot(part, storage, 2, name=f"part-{i}")
        heap = HashMapKeyedStateBackend("op", 128, range(128))
        restore_native(heap, again, storage.read(again), storage, 2, "test", first=True)
        assert read_all(heap, mine) == read_all(part, mine)
        assert all(v == (0, [], [], None, None) for v in read_all(heap, other).values())
        part.dispose()
    assert merged == expected
    heap = HashMapKeyedStateBackend("op", 128, range(128))
    restore_native(heap, handle, data, storage, 1, "test", first=True)
    assert read_all(heap, KEYS) == expected
    rdb.dispose()


def test_a_missing_shared_file_is_a_clear_restore_error(tmp_path):
    storage = CheckpointStorage(str(tmp_path / "chk"), "job", inline_threshold=0)
    rdb = rocks(tmp_path)
    fill(rdb, KEYS)
    handle, _, _ = snapshot(rdb, storage, 1)
    os.remove(storage.path(shared_files(handle)[0]))
    fresh = rocks(tmp_path / "fresh")
    with pytest.raises(SnapshotFormatError, match="shared state file .* is missing"):
        restore_native(fresh, handle, storage.read(handle), storage, 1, "state of operator 'op'", first=True)
    rdb.dispose()
    fresh.dispose()


def test_shared_state_registry_counts_references():
    reg = SharedStateRegistry()
    reg.register(1, ["shared/1-a.sst", "shared/1-b.sst"])
    reg.register(2, ["shared/1-a.sst", "shared/2-c.sst"])
    assert reg.unregister(1, ["shared/1-a.sst", "shared/1-b.sst"]) == ["shared/1-b.sst"]
    assert reg.dangling(3, ["shared/1-a.sst", "shared/1-b.sst", "shared/3-d.sst"]) == ["shared/1-b.sst"]
    listing = ["shared/1-a.sst", "shared/2-c.sst", "shared/3-d.sst", "shared/4-e.sst", "shared/README"]
    assert reg.orphans(listing, in_progress={4}) == ["shared/3-d.sst"]
    assert sorted(reg.unregister(2, ["shared/1-a.sst", "shared/2-c.sst"])) == ["shared/1-a.sst", "shared/2-c.sst"]


def test_working_directories_of_dead_tasks_are_swept(tmp_path):
    local = tmp_path / "local"
    dead = local / "op-dead"
    dead.mkdir(parents=True)
    (dead / "OWNER").write_text("999999999")
    rdb = rocks(tmp_path)
    assert not dead.exists() and os.path.exists(rdb.home)
    sweep_stale(str(local))
    assert os.path.exists(rdb.home)  # a live owner's directory stays
    rdb.dispose()


def test_a_working_directory_whose_owner_is_being_written_is_not_swept(tmp_path):
    """Two subtasks start in one local directory: the second's sweep found the first's owner file
    just created, still empty, took it for pid 0 (which psutil says does not exist) and removed the
    directory under the first (RocksDB: "While mkdir if missing: ... No such file or directory")."""
    local = tmp_path / "local"
    starting, unowned = local / "op-starting", local / "op-unowned"
    starting.mkdir(parents=True)
    unowned.mkdir()
    (starting / "OWNER").write_text("")
    sweep_stale(str(local))
    assert starting.exists() and unowned.exists()
    rdb = rocks(tmp_path)
    assert sorted(os.listdir(rdb.home)) == ["OWNER", "db"]  # written whole, then renamed into place
    rdb.dispose()


def test_a_dropped_state_leaves_its_column_family_to_the_next_one_through_snapshots_and_restores(tmp_path):
    """The columnar window operator makes and drops a table per window: a new table reuses a dropped
    table's column family (emptied), and every kind of restore reads each state from its own one."""
    storage = CheckpointStorage(str(tmp_path / "chk"), "job", inline_threshold=0)
    storage.initialize()
    for incremental in (True, False):
        rdb = rocks(tmp_path / f"src-{incremental}", incremental=incremental, root=storage.url)
        old = rdb.accumulators("_wagg-1000-1")
        old.put_many(list(range(100)), [1] * 100)
        old.flush()
        rdb.drop_table("_wagg-1000-1")
        new = rdb.accumulators("_wagg-2000-1")
        other = rdb.accumulators("_wagg-2000-2")
        assert len(rdb.column_families) == 2  # the second window's first table took the dropped one's
        assert dict(new.items()) == {}  # nothing of the dropped state shows through
        new.put_many([5, 7], [50, 70])
        other.put_many([5], [-5])
        handle, _, _ = snapshot(rdb, storage, 1 if incremental else 2)
        data = storage.read(handle)
        expected = {"_wagg-2000-1": {5: 50, 7: 70}, "_wagg-2000-2": {5: -5}}

        def states(backend):
            tables = {n: backend.accumulators(n) for n in sorted(backend.kinds)}
            return {n: dict(t.items()) if hasattr(t, "items") else dict(zip(t.keys_by_slot, t.acc[:len(t)].tolist()))
                    for n, t in tables.items()}

        if incremental:  # native: the same key groups adopt the files; others copy their range
            same = rocks(tmp_path / "same", root=storage.url)
            restore_native(same, handle, data, storage, 1, "test", first=True)
            assert states(same) == expected
            families = set(same.column_families)
            same.drop_table("_wagg-2000-2")
            same.accumulators("_wagg-3000-1").put_many([1], [1])  # takes the family just emptied
            assert same.column_families == families and dict(same.accumulators("_wagg-3000-1").items()) == {1: 1}
            same.dispose()
            parts = [rocks(tmp_path / f"part{i}", groups=key_group_range(128, 2, i)) for i in range(2)]
            merged = {n: {} for n in expected}
            for part in parts:
                restore_native(part, handle, data, storage, 1, "test", first=True)
                for n, entries in states(part).items():
                    merged[n].update(entries)
                part.dispose()
            assert merged == expected
            heap = HashMapKeyedStateBackend("op", 128, range(128))
            restore_native(heap, handle, data, storage, 1, "test", first=True)
        else:  # canonical: the heap backend's format
            heap = HashMapKeyedStateBackend("op", 128, range(128))
            for name, kind, chunk in read_keyed(data, handle["index"], heap.key_groups, "test"):
                heap.restore_chunk(name, kind, chunk)
        assert {n: {k: int(v) for k, v in entries.items()} for n, entries in states(heap).items()} == expected
        rdb.dispose()


def test_a_write_back_of_many_chunks_and_the_memtables_flushed_before_the_checkpoint_restore_exactly(tmp_path):
    """The cache is written back in batches of _FLUSH_CHUNK entries (a lookup on the task thread waits for one
    batch, not all), and the memtables are flushed in RocksDB's threads before the native checkpoint: every
    put and every removal of a write-back three chunks long is in the restored state."""
    from streamjob.runtime.state import rocksdb as rocks_module

    storage = CheckpointStorage(str(tmp_path / "chk"), "job", inline_threshold=0)
    storage.initialize()
    n = 3 * rocks_module._FLUSH_CHUNK + 17
    rdb = RocksDBKeyedStateBackend("op", 128, range(0, 128), str(tmp_path / "local"),
                                   RocksDBOptions(cache_size=4 * n), incremental=True, state_root=storage.url)
    v = rdb.get_state(ValueStateDescriptor("v"))
    for k in range(n):
        rdb.current_key = k
        v.update(k * 2)
    for k in range(0, n, 5):
        rdb.current_key = k
        v.clear()
    table = rdb.tables["v"]
    assert len(table.dirty) == n  # one write-back of every entry, at the checkpoint
    handle, _full, _uploaded = snapshot(rdb, storage, 1)
    assert not table.dirty
    assert all(cf.property_int_value("rocksdb.num-immutable-mem-table") == 0
               and cf.property_int_value("rocksdb.cur-size-active-mem-table") < 4096  # an empty memtable
               for cf, _h in rdb._cf_objects.values())
    restored = rocks(tmp_path, root=storage.url)
    restore_native(restored, handle, storage.read(handle), storage, 1, "test", first=True)
    rv = restored.get_state(ValueStateDescriptor("v"))
    for k in range(n):
        restored.current_key = k
        assert rv.value() == (None if k % 5 == 0 else k * 2), k
    rdb.dispose()
    restored.dispose()


def test_a_full_snapshot_writes_value_states_of_int_keys_and_numbers_columnar_and_restores_them_exactly(tmp_path):
    """As the heap backend writes them: a ValueState whose keys are ints and values all ints or all
    floats is two blocks in the state file, not a pickled dict per key group; any other ValueState
    (a value of another type in any key group, an int beyond int64, bools) stays pickled. Each comes
    back with the same values of the same types, on either backend, at another parallelism."""
    storage = CheckpointStorage(str(tmp_path / "chk"), "job", inline_threshold=0)
    rdb = rocks(tmp_path, incremental=False)
    keys = list(range(-500, 3000, 7))
    # the key of the last key group: a float there comes after chunks of ints, which go back to dicts
    last = max(keys, key=lambda k: rdb.key_bytes(k)[:2])
    values = {
        "counts": {k: k * 3 for k in keys},
        "means": {k: k / 4 for k in keys},
        "mixed": {k: (k * 2 if k != last else 0.5) for k in keys},
        "big": {k: (1 << 70 if k == keys[1] else k) for k in keys},
        "flags": {k: k % 2 == 0 for k in keys},
    }
    for name, table in values.items():
        state = rdb.get_state(ValueStateDescriptor(name))
        for k, v in table.items():
            rdb.current_key = k
            state.update(v)
    handle, _, _ = snapshot(rdb, storage, 1)
    tables = handle["index"]["keyed"]
    assert {n for n, t in tables.items() if "columnar" in t} == {"counts", "means"}
    data = storage.read(handle)

    def restored(backend):
        out = {}
        for name in values:
            state = backend.get_state(ValueStateDescriptor(name))
            for k in keys:
                backend.current_key = k
                if backend.key_groups.start <= int.from_bytes(rdb.key_bytes(k)[:2], "big") < backend.key_groups.stop:
                    out.setdefault(name, {})[k] = state.value()
        return out

    heap = HashMapKeyedStateBackend("op", 128, range(128))
    for name, kind, chunk in read_keyed(data, handle["index"], heap.key_groups, "test"):
        heap.restore_chunk(name, kind, chunk)
    assert restored(heap) == values
    assert {type(v) for v in restored(heap)["means"].values()} == {float}
    merged: dict = {}
    for i in range(2):
        part = rocks(tmp_path / str(i), groups=key_group_range(128, 2, i))
        for name, kind, chunk in read_keyed(data, handle["index"], part.key_groups, "test"):
            part.restore_chunk(name, kind, chunk)
        for name, table in restored(part).items():
            merged.setdefault(name, {}).update(table)
        part.dispose()
    assert merged == values
    assert [type(merged["flags"][k]) for k in keys[:2]] == [bool, bool]
    rdb.dispose()
