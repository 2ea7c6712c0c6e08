"""Checksums of state and metadata files, and what a restore does when the newest checkpoint is damaged:
no Spark. Real files (file:// in a temp dir), real RocksDB; a "bit flip" is one bit of a real file changed.
(With Spark, at resume and at failover: tests/test_damaged_checkpoints.py.)"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from streamjob.runtime import ValueStateDescriptor
from streamjob.runtime.checkpoint import checksums, recovery
from streamjob.runtime.checkpoint.channel_state import ChannelStateCollector, read as read_channel_state
from streamjob.runtime.checkpoint.metadata import CheckpointFormatError, CheckpointMetadata, parse
from streamjob.runtime.checkpoint.storage import CheckpointStorage, StateLocation
from streamjob.runtime.state.heap import HashMapKeyedStateBackend
from streamjob.runtime.keygroups import assign_to_key_group, key_group_range
from streamjob.runtime.state.snapshot import SnapshotFormatError, keyed_spans, read_keyed, read_operator, serialize
from streamjob.runtime.state.rocksdb_snapshot import restore_native
from streamjob.runtime.task.operators import RollingAggregator
from test_rocksdb_backend import KEYS, fill, read_all, rocks, snapshot

Found = recovery.Found


def flip(data: bytes, at: int) -> bytes:
    b = bytearray(data)
    b[at] ^= 0x10
    return bytes(b)


def flip_file(path, at: int) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)[0]
        f.seek(at)
        f.write(bytes([byte ^ 0x10]))


# -- the decision -------------------------------------------------------------------------------

def test_the_newest_readable_checkpoint_is_restored():
    choice = recovery.choose([Found(7, "u7"), Found(6, "u6")], allow_older=False)
    assert choice.restore.checkpoint_id == 7 and choice.refusal is None and not choice.notes
    assert recovery.choose([], allow_older=False) == recovery.Choice(None, None, ())  # nothing yet: the beginning


def test_a_damaged_newest_checkpoint_is_refused_unless_older_ones_are_allowed():
    found = [Found(7, "u7", "state file u7/x is missing"), Found(6, "u6")]
    refused = recovery.choose(found, allow_older=False)
    assert refused.restore is None
    assert refused.refusal == (
        "cannot restore checkpoint 7: state file u7/x is missing. Checkpoint 7 completed, so sinks may have "
        "committed output with it, and restoring an older checkpoint would write that output again; to accept that, "
        "set execution.state-recovery.allow-older-checkpoint=true (--conf execution.state-recovery.allow-older-"
        "checkpoint=true, or --allow-older-checkpoint)")
    allowed = recovery.choose(found, allow_older=True)
    assert allowed.restore.checkpoint_id == 6 and allowed.refusal is None
    assert allowed.notes == ("Not restoring checkpoint 7: state file u7/x is missing; restoring an older checkpoint, "
                             "which writes again the output checkpoint 7 committed "
                             "(execution.state-recovery.allow-older-checkpoint is true)",)


def test_a_named_checkpoint_is_never_replaced_and_nothing_is_restarted_from_scratch():
    named = [Found(7, "u7", "u7/_metadata is truncated", explicit=True), Found(6, "u6")]
    for allow in (False, True):
        choice = recovery.choose(named, allow_older=allow)
        assert choice.restore is None and "named explicitly" in choice.refusal
    all_bad = [Found(7, "u7", "bad 7"), Found(6, "u6", "bad 6")]
    choice = recovery.choose(all_bad, allow_older=True)
    assert choice.restore is None and choice.refusal.startswith("cannot restore checkpoint 7: bad 7; no older")
    assert "starting from the beginning would write again" in choice.refusal
    # Never announced (no sink committed with it): skipped with a note, whatever the setting.
    quiet = recovery.choose([Found(7, "u7", "bad 7", committed=False), Found(6, "u6")], allow_older=False)
    assert quiet.restore.checkpoint_id == 6 and "never announced" in quiet.notes[0]


# -- state files --------------------------------------------------------------------------------

def heap_snapshot(checksummed: bool = True, value=lambda k: f"v{k * 10}"):
    """A heap ValueState of 500 keys. Its values are strings by default, so each key group is a
    pickled chunk; int values make the table columnar (see the columnar tests below)."""
    b = HashMapKeyedStateBackend("op", 128, range(128))
    st = b.get_state(ValueStateDescriptor("v"))
    for k in range(500):
        b.current_key = k
        st.update(value(k))
    return serialize(b.freeze(), 128, {"positions": ("split", [1, 2])}, checksums=checksummed)


def restored_values(data, index, key_groups=range(128)) -> dict:
    b = HashMapKeyedStateBackend("op", 128, key_groups)
    for name, kind, chunk in read_keyed(data, index, key_groups, "state.bin"):
        b.restore_chunk(name, kind, chunk)
    st = b.get_state(ValueStateDescriptor("v"))
    out = {}
    for k in range(500):
        if assign_to_key_group(k, 128) in key_groups:
            b.current_key = k
            out[k] = st.value()
    return out


def test_a_flipped_bit_in_a_key_group_chunk_names_the_state_and_key_group():
    data, index = heap_snapshot()
    assert restored_values(data, index) == {k: f"v{k * 10}" for k in range(500)}
    kg, (offset, length, crc) = sorted(index["keyed"]["v"]["groups"].items(), key=lambda g: int(g[0]))[5]
    assert crc == checksums.checksum(data[offset : offset + length])
    damaged = flip(data, offset + length // 2)
    with pytest.raises(SnapshotFormatError, match=rf"state.bin \(state 'v', key group {kg}\): checksum mismatch "
                                                  rf"\(crc32c 0x\w{{8}}, recorded {crc:#010x}\) in bytes "
                                                  rf"\[{offset}, {offset + length}\): the file is damaged"):
        restored_values(damaged, index)
    # A restore that does not own that key group does not read it, and restores the rest.
    others = [g for g in range(128) if g != int(kg)]
    assert len(list(read_keyed(damaged, index, range(int(kg) + 1, 128), "state.bin"))) == len(
        [g for g in index["keyed"]["v"]["groups"] if int(g) in others and int(g) > int(kg)])
    o, n, _ = index["operator"]
    with pytest.raises(SnapshotFormatError, match=r"state.bin \(operator state\): checksum mismatch"):
        read_operator(flip(data, o + n - 1), index, "state.bin")


def test_a_flipped_bit_in_a_columnar_value_state_names_the_state_and_key_group():
    """A heap ValueState of int keys and int values is written as a key block and a value block (the
    rolling aggregations' layout), each key group's rows with their own checksums."""
    data, index = heap_snapshot(value=lambda k: k * 10)
    table = index["keyed"]["v"]
    assert "columnar" in table
    restored = restored_values(data, index)
    assert restored == {k: k * 10 for k in range(500)} and all(type(v) is int for v in restored.values())
    kg, (start, stop, _, _) = sorted(((g, span) for g, span in table["groups"].items() if span[1] > span[0]),
                                     key=lambda g: int(g[0]))[5]
    offset, length = table["columnar"]["values"]
    width = length // max(span[1] for span in table["groups"].values())
    with pytest.raises(SnapshotFormatError, match=rf"state.bin \(state 'v'\), key group {kg}: checksum mismatch "
                                                  r"\(crc32c .*\) in its rows of the value block"):
        restored_values(flip(data, offset + start * width), index)


def test_snapshots_written_before_checksums_still_restore():
    data, index = heap_snapshot(checksummed=False)
    assert all(len(span) == 2 for span in index["keyed"]["v"]["groups"].values())
    assert restored_values(data, index) == {k: f"v{k * 10}" for k in range(500)}
    assert read_operator(data, index, "old") == {"positions": ("split", [1, 2])}


def test_columnar_tables_are_checked_per_key_group_also_when_only_some_are_read(tmp_path):
    b = HashMapKeyedStateBackend("op", 128, range(128))
    agg = RollingAggregator("sum", b.accumulators("sum-numeric"))
    agg.update(list(range(2000)), np.arange(2000, dtype=np.int64))
    data, index = serialize(b.freeze(), 128, None)
    storage = CheckpointStorage(f"file://{tmp_path}", "job", inline_threshold=0)
    handle = storage.write_state(1, "sum-0", data, index)
    assert handle["crc32c"] == checksums.checksum(data)
    col = index["keyed"]["sum-numeric"]["columnar"]
    groups = index["keyed"]["sum-numeric"]["groups"]
    # one value of key group 100 (owned by subtask 4 of 4) damaged in the file
    start = groups["100"][0]
    width = np.dtype(col["values_for"][1]).itemsize if "values_for" in col else 8
    flip_file(storage.path(handle["file"]), col["values"][0] + start * width)
    location = StateLocation(storage.url)
    for i in range(4):
        owned = key_group_range(128, 4, i)
        spans = keyed_spans(index, owned)
        part = location.read_spans(handle, spans)  # a quarter of the file: read by byte ranges
        if 100 in owned:
            with pytest.raises(SnapshotFormatError, match=r"\(state 'sum-numeric'\), key group 100: checksum mismatch "
                                                          r"\(crc32c .*\) in its rows of the value block"):
                list(read_keyed(part, index, owned, f"subtask {i}"))
        else:
            assert sum(len(k) for _, _, (k, _) in read_keyed(part, index, owned, f"subtask {i}")) > 0
    with pytest.raises(CheckpointFormatError, match=r"chk-1/sum-0-\w+: checksum mismatch .*: the file is damaged"):
        location.read(handle)  # the whole file, checked as a whole


def test_rocksdb_uploads_are_checked_after_download(tmp_path):
    storage = CheckpointStorage(str(tmp_path / "chk"), "job", inline_threshold=0)
    storage.initialize()
    rdb = rocks(tmp_path, root=storage.url)
    fill(rdb, KEYS)
    expected = read_all(rdb, KEYS)
    handle, _, _ = snapshot(rdb, storage, 1)
    sst = handle["index"]["rocksdb"]["sst"]
    ref = next(iter(sst.values()))
    with open(storage.path(ref["file"]), "rb") as f:
        assert ref["crc32c"] == checksums.checksum(f.read())
    fresh = rocks(tmp_path / "ok")
    restore_native(fresh, handle, storage.read(handle), storage, 1, "op 'x'", first=True)
    assert read_all(fresh, KEYS) == expected
    fresh.dispose()
    flip_file(storage.path(ref["file"]), os.path.getsize(storage.path(ref["file"])) // 2)
    for i, target in enumerate([rocks(tmp_path / "again"), HashMapKeyedStateBackend("op", 128, range(128))]):
        with pytest.raises(SnapshotFormatError, match=rf"op 'x': shared state file .*{ref['file']} \(SST \S+ of key "
                                                      rf"groups 0-127\): checksum mismatch"):
            restore_native(target, handle, storage.read(handle), storage, 1, "op 'x'", first=True)
        target.dispose()
    flip_file(storage.path(ref["file"]), os.path.getsize(storage.path(ref["file"])) // 2)  # repaired
    # the private files (MANIFEST, CURRENT, OPTIONS) ride in the state file, each checked
    data = storage.read(handle)
    name, (o, n, _) = max(handle["index"]["files"].items(), key=lambda f: f[1][1])  # the largest
    with pytest.raises(SnapshotFormatError, match=rf"RocksDB file {name!r}\): checksum mismatch"):
        restore_native(rocks(tmp_path / "third"), handle, flip(data, o + n // 2), storage, 1, "op", first=True)
    rdb.dispose()


def test_full_rocksdb_snapshots_are_checked_per_key_group(tmp_path):
    storage = CheckpointStorage(str(tmp_path / "chk"), "job", inline_threshold=0)
    rdb = rocks(tmp_path, incremental=False)
    fill(rdb, KEYS)
    handle, _, _ = snapshot(rdb, storage, 1)
    data = storage.read(handle)
    kg, (o, n, _) = next(iter(handle["index"]["keyed"]["l"]["groups"].items()))
    with pytest.raises(SnapshotFormatError, match=rf"\(state 'l', key group {kg}\): checksum mismatch"):
        list(read_keyed(flip(data, o + n // 2), handle["index"], range(128), "full"))
    rdb.dispose()


def test_channel_state_files_are_checked(tmp_path):
    storage = CheckpointStorage(f"file://{tmp_path}", "job", inline_threshold=0)
    c = ChannelStateCollector(3, None, input_keys=[(1, 0)], waiting_inputs={0})
    c.add_input(0, [[{"i": i} for i in range(100)]])
    handle = storage.write_state(3, "channels-0", c.to_bytes(), {})
    assert read_channel_state(storage.read(handle), "x").inputs[(1, 0)]
    flip_file(storage.path(handle["file"]), handle["size"] - 20)
    with pytest.raises(CheckpointFormatError, match=r"state file .*/chk-3/channels-0-\w+: checksum mismatch"):
        storage.read(handle)


# -- _metadata and the job manager's check ---------------------------------------------------------

def metadata() -> CheckpointMetadata:
    handle = {"file": "chk-4/op-0-abc", "size": 10, "index": {"keyed": {"v": {"kind": "value", "groups": {"3": [8, 2, 1]}}}},
              "crc32c": 5}
    return CheckpointMetadata(4, "job", "j", 1, 1, 128, {"op": {"name": "Count", "subtasks": [handle]}})


def test_metadata_carries_its_own_checksum_and_says_when_it_is_truncated():
    data = metadata().to_json()
    doc = json.loads(data)  # still plain JSON
    assert doc["version"] == 2 and doc["crc32c"] == checksums.checksum(data[: data.rindex(b',"crc32c":')])
    assert parse(data, "m").checkpoint_id == 4
    at = data.index(b'"timestamp_ms":1') + len(b'"timestamp_ms":')
    with pytest.raises(CheckpointFormatError, match=r"^m: checksum mismatch \(crc32c .*\): the file is damaged$"):
        parse(data[:at] + b"3" + data[at + 1 :], "m")  # one digit changed: still valid JSON
    for cut in (0, 30, len(data) - 1):
        with pytest.raises(CheckpointFormatError, match="m (is empty|is truncated)"):
            parse(data[:cut], "m")
    no_sum = json.loads(data)
    no_sum["operators"]["op"]["subtasks"][0].pop("crc32c")
    with pytest.raises(CheckpointFormatError, match=r"subtasks\[0\] has no crc32c checksum"):
        parse(CheckpointMetadata(**{**metadata().__dict__, "operators": no_sum["operators"]}).to_json(), "m")


def test_the_job_manager_names_a_missing_or_cut_file_with_its_operator_and_key_groups(tmp_path):
    meta = metadata()
    location = StateLocation(f"file://{tmp_path}")
    assert location.find_damage(meta.file_refs()) == (f"state file file://{tmp_path}/chk-4/op-0-abc of operator "
                                                      f"'Count' (subtask 1/1, key groups 0-127) is missing")
    os.makedirs(tmp_path / "chk-4")
    (tmp_path / "chk-4" / "op-0-abc").write_bytes(b"x" * 9)
    assert location.find_damage(meta.file_refs()).endswith("has 9 bytes, the checkpoint recorded 10 (truncated or "
                                                           "overwritten)")
    (tmp_path / "chk-4" / "op-0-abc").write_bytes(b"x" * 10)
    assert location.find_damage(meta.file_refs()) is None


def test_uploads_to_s3_carry_their_checksum_and_are_checked_after_download(tmp_path, monkeypatch):
    """The object-store path of uploads and downloads (put_file / get_file), on moto's S3 server."""
    import fsspec

    from s3server import CREDENTIALS, MotoServer
    from streamjob.runtime.checkpoint import filesystems
    from streamjob.runtime.config import Configuration

    server = MotoServer()
    try:
        for k, v in CREDENTIALS.items():
            monkeypatch.setenv(k, v)
        client = server.client()
        client.create_bucket(Bucket="checkpoints")
        monkeypatch.setitem(fsspec.config.conf, "s3", {})
        filesystems.configure(Configuration({"s3.endpoint": server.url}))
        storage = CheckpointStorage("s3://checkpoints/jobs", "job", inline_threshold=0)
        rdb = rocks(tmp_path, root=storage.url)
        fill(rdb, KEYS)
        handle, _, _ = snapshot(rdb, storage, 1)
        ref = max(handle["index"]["rocksdb"]["sst"].values(), key=lambda r: r["size"])
        key = f"jobs/job/{ref['file']}"
        body = client.get_object(Bucket="checkpoints", Key=key)["Body"].read()
        assert ref["crc32c"] == checksums.checksum(body) and ref["size"] == len(body)
        meta = CheckpointMetadata(1, "job", "j", 1, 1, 128, {"op": {"name": "Count", "subtasks": [handle]}})
        assert StateLocation(storage.url).find_damage(meta.file_refs()) is None
        client.put_object(Bucket="checkpoints", Key=key, Body=flip(body, len(body) // 2))
        with pytest.raises(SnapshotFormatError, match=rf"shared state file s3://checkpoints/jobs/job/{ref['file']} "
                                                      r"\(SST \S+ of key groups 0-127\): checksum mismatch"):
            restore_native(rocks(tmp_path / "fresh"), handle, storage.read(handle), storage, 1, "op", first=True)
        client.delete_object(Bucket="checkpoints", Key=key)
        assert StateLocation(storage.url).find_damage(meta.file_refs()) == (
            f"state file s3://checkpoints/jobs/job/{ref['file']} of operator 'Count' (subtask 1/1, key groups "
            f"0-127) is missing")
        rdb.dispose()
    finally:
        server.close()
