"""The State Processor API's reader (``streamjob.state``) on real local Spark and real files.

A real keyed job (``tests/jobs/counting.py``: a count per key kept as value, reducing and map state,
a list of recent rows, a ballast map of deterministic bytes) is stopped with a savepoint on each
backend; the savepoint read back as DataFrames must equal the job's own committed output, key for
key. A RocksDB incremental checkpoint (SST files in ``shared/``) is read natively and checked
against the source offsets the same checkpoint holds. Damaged and missing files are named; s3://
through moto's S3 server; the command line through click's runner on the same Spark.
"""

from __future__ import annotations

import glob
import json
import os
import random
import shutil
import time
from collections import defaultdict

import pytest

from jobs import counting
from streamjob.runtime.api.environment import execution_context
from streamjob.runtime.checkpoint.storage import load_checkpoint
from streamjob.runtime.cluster.executor import JobExecutionError
from test_checkpointing import committed_rows

pytestmark = pytest.mark.spark

BALLAST = 16  # bytes of hex per row in the "ballast" map state: the state files are files, not inline


@pytest.fixture(scope="module")
def spark(spark_slots):
    from pyspark.sql import SparkSession

    return SparkSession.builder.getOrCreate()  # on the session's SparkContext


@pytest.fixture(scope="module")
def savepoints(spark_slots, tmp_path_factory):
    """backend -> (savepoint path, committed output rows), one stop-with-savepoint run each (lazily)."""
    made: dict[str, tuple[str, list]] = {}

    def get(backend: str) -> tuple[str, list]:
        if backend not in made:
            base = tmp_path_factory.mktemp(f"sp-{backend}")
            execution_context.reset()
            execution_context.show_progress = False
            env = counting.build(str(base / "out"), str(base / "chk"), 200_000, 3000, interval_ms=200,
                                 backend=backend, parallelism=2, ballast=BALLAST * 2)
            client = env.execute_async("counting")
            assert client.wait_until_running(60)
            deadline = time.monotonic() + 60
            while client.job_manager.coordinator.counts["COMPLETED"] < 1 and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(1.0)
            path = client.stop_with_savepoint(False, str(base / "sp"), timeout=120)
            client.get_job_execution_result(120)
            made[backend] = path, committed_rows(str(base / "out"))
        return made[backend]
    return get


def by_key(rows) -> dict:
    """The job's output rows (key, i, count, prev) -> per key: the rows' indexes, in order."""
    seen: dict = defaultdict(list)
    for key, i, count, prev in sorted(rows, key=lambda r: r[1]):
        seen[key].append(i)
    return seen


def expected_state(indexes: dict) -> dict:
    """What counting.Count holds per key after these rows."""
    return {
        "count": {k: len(v) for k, v in indexes.items()},
        "recent": {k: v[-3:] for k, v in indexes.items()},
        "by-parity": {k: {p: sum(1 for i in v if i % 2 == p) for p in (0, 1) if any(i % 2 == p for i in v)}
                      for k, v in indexes.items()},
        "ballast": {k: {i: random.Random(i).randbytes(BALLAST).hex() for i in v} for k, v in indexes.items()},
    }


def assert_state_is(reader, uid: str, expected: dict) -> None:
    count = reader.read_keyed_state(uid, "count")
    assert count.columns == ["key", "value"]
    assert {r.key: r.value for r in count.collect()} == expected["count"]
    assert {r.key: r.value for r in reader.read_keyed_state(uid, "total").collect()} == expected["count"]
    recent = defaultdict(list)
    for r in reader.read_keyed_state(uid, "recent").collect():  # one row per element, in list order
        recent[r.key].append(r.value)
    assert dict(recent) == expected["recent"]
    parity = reader.read_keyed_state(uid, "by-parity")
    assert parity.columns == ["key", "map_key", "value"]
    got: dict = defaultdict(dict)
    for r in parity.collect():
        got[r.key][r.map_key] = r.value
    assert dict(got) == expected["by-parity"]
    ballast: dict = defaultdict(dict)
    for r in reader.read_keyed_state(uid, "ballast").collect():
        ballast[r.key][r.map_key] = r.value
    assert dict(ballast) == expected["ballast"]


@pytest.mark.parametrize("backend", ["hashmap", "rocksdb"])
def test_a_savepoint_read_back_equals_the_jobs_own_output_per_key(spark, savepoints, backend):
    from streamjob.state import SavepointReader

    path, output = savepoints(backend)
    reader = SavepointReader.read(spark, path)
    assert reader.metadata.kind == "savepoint"
    final = {}
    for key, i, count, prev in output:  # the job's own last word per key
        final[key] = max(final.get(key, 0), count)
    indexes = by_key(output)
    assert {k: len(v) for k, v in indexes.items()} == final
    assert_state_is(reader, "count", expected_state(indexes))
    # the read is distributed: a Spark task per key-group range, as many as Spark has slots (local[4]:
    # each of the 2 subtask handles cut in 2; the reads above went that way), or as asked
    assert reader.read_keyed_state("count", "count").rdd.getNumPartitions() == 4
    reader.tasks = 2
    assert reader.read_keyed_state("count", "count").rdd.getNumPartitions() == 2

    ops = {o.uid: o for o in reader.operators()}
    assert set(ops) == {"numbers", "count", "files"}
    states = {s.name: s for s in ops["count"].keyed_states}
    assert (states["count"].kind, states["count"].keys) == ("value", len(final))
    assert (states["recent"].kind, states["recent"].entries) == ("list", sum(len(v) for v in expected_state(
        indexes)["recent"].values()))
    assert states["ballast"].entries == len(output) and states["ballast"].bytes > 0
    assert {(s.name, s.mode) for s in ops["files"].operator_states} == {("pending-committables", "split"),
                                                                         ("writer", "union")}


def test_operator_state_list_and_union_shapes(spark, savepoints):
    from streamjob.state import SavepointReader, StateNotFoundError

    path, output = savepoints("hashmap")
    reader = SavepointReader.read(spark, path)
    splits = [tuple(r.value) for r in reader.read_list_state("numbers", "source-splits").collect()]
    assert len(splits) == 2  # a list element per source subtask: its next index and step
    # the source positions are where the output stops: every row before them was counted
    emitted = {i for nxt, step in splits for i in range(nxt % step, nxt, step)}
    assert emitted == {i for _, i, _, _ in output}
    writers = reader.read_union_state("files", "writer")
    # dicts of str keys and values of mixed types (int, str) have no one Spark type: JSON text
    assert writers.schema.simpleString() == "struct<value:string>"
    assert sorted(json.loads(w.value)["subtask"] for w in writers.collect()) == [0, 1]
    with pytest.raises(Exception, match="union state: read it with read_union_state"):
        reader.read_list_state("files", "writer").collect()
    with pytest.raises(StateNotFoundError, match="no operator with uid 'nope'; its operators: count, files, numbers"):
        reader.read_keyed_state("nope", "count")
    with pytest.raises(StateNotFoundError, match="no keyed state 'cnt'; its keyed states: ballast, by-parity, count"):
        reader.read_keyed_state("count", "cnt")


def test_a_keyed_state_reader_function_reads_several_states_of_one_operator(spark, savepoints):
    from streamjob.runtime import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor
    from streamjob.runtime.api.types import Row, Types
    from streamjob.state import KeyedStateReaderFunction, SavepointReader

    class ReadCounts(KeyedStateReaderFunction):
        def open(self, ctx):
            self.count = ctx.get_state(ValueStateDescriptor("count", Types.LONG()))
            self.recent = ctx.get_list_state(ListStateDescriptor("recent"))
            self.parity = self.get_runtime_context().get_map_state(MapStateDescriptor("by-parity"))

        def read_key(self, key, ctx, out):
            out.collect(Row(key=key, count=self.count.value(), last=self.recent.get()[-1],
                            even=self.parity.get(0) or 0))

    path, output = savepoints("rocksdb")
    expected = expected_state(by_key(output))
    df = SavepointReader.read(spark, path).read_keyed_state("count", ReadCounts())
    assert df.columns == ["key", "count", "last", "even"]
    rows = {r.key: (r["count"], r["last"], r["even"]) for r in df.collect()}
    assert rows == {k: (c, expected["recent"][k][-1], expected["by-parity"][k].get(0, 0))
                    for k, c in expected["count"].items()}


def test_a_damaged_or_missing_state_file_is_named(spark, savepoints, tmp_path):
    from streamjob.state import SavepointReader

    path, _ = savepoints("hashmap")
    copy = tmp_path / "copy"
    shutil.copytree(path.removeprefix("file://"), copy)
    _, meta = load_checkpoint(str(copy))
    state_file = next(h["file"] for h in meta.operators["count"]["subtasks"] if h and "file" in h)
    target = copy / state_file
    data = bytearray(target.read_bytes())
    table = next(h for h in meta.operators["count"]["subtasks"] if h and h.get("file") == state_file)
    offset, length = table["index"]["keyed"]["ballast"]["groups"].popitem()[1][:2]
    data[offset + length // 2] ^= 0xFF
    target.write_bytes(bytes(data))
    reader = SavepointReader.read(spark, str(copy))
    with pytest.raises(Exception) as damaged:
        reader.read_keyed_state("count", "ballast", value_format="text").collect()
    message = str(damaged.value)
    assert f"{state_file}" in message and "checksum mismatch" in message
    assert "operator 'count'" in message and "'ballast'" in message
    target.unlink()
    with pytest.raises(Exception) as missing:
        reader.read_keyed_state("count", "count").collect()
    assert f"state file file://{copy}/{state_file}" in str(missing.value) and "is missing" in str(missing.value)
    assert "keyed state 'count' of operator 'count'" in str(missing.value)


def test_an_incremental_rocksdb_checkpoint_is_read_from_its_shared_files(spark, spark_slots, tmp_path):
    from streamjob.state import SavepointReader

    checkpoints = tmp_path / "chk"
    env = counting.build(str(tmp_path / "out"), str(checkpoints), 200_000, 3000, interval_ms=200,
                         backend="rocksdb", incremental=True, retained=2, parallelism=2)
    client = env.execute_async("counting")
    assert client.wait_until_running(60)
    deadline = time.monotonic() + 90
    while client.job_manager.coordinator.counts["COMPLETED"] < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    client.cancel()
    with pytest.raises(JobExecutionError, match="canceled"):
        client.get_job_execution_result(60)
    latest = max(glob.glob(str(checkpoints / client.job_id / "chk-*")), key=lambda d: int(d.rsplit("-", 1)[1]))
    _, meta = load_checkpoint(latest)
    assert meta.kind == "checkpoint" and meta.shared_files()

    reader = SavepointReader.read(spark, latest)
    ops = {o.uid: o for o in reader.operators()}
    assert ops["count"].backend == "rocksdb"
    # the source offsets of the same checkpoint say exactly which rows its state counted
    splits = [tuple(r.value) for r in reader.read_list_state("numbers", "source-splits").collect()]
    indexes: dict = defaultdict(list)
    for i in sorted(i for nxt, step in splits for i in range(nxt % step, nxt, step)):
        indexes[i % counting.KEYS].append(i)
    expected = expected_state(indexes)
    count = reader.read_keyed_state("count", "count")
    assert {r.key: r.value for r in count.collect()} == expected["count"]
    parity: dict = defaultdict(dict)
    for r in reader.read_keyed_state("count", "by-parity").collect():
        parity[r.key][r.map_key] = r.value
    assert dict(parity) == expected["by-parity"]

    # a damaged SST file in shared/ is named, with its operator and key groups
    sst = meta.shared_files()[0]
    path = checkpoints / client.job_id / sst
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(Exception) as damaged:
        reader.read_keyed_state("count", "count").collect()
    assert sst in str(damaged.value) and "checksum mismatch" in str(damaged.value)
    assert "operator 'count'" in str(damaged.value)
    path.unlink()
    with pytest.raises(Exception, match=f"shared state file .*{sst} is missing"):
        reader.read_keyed_state("count", "count").collect()


def test_a_savepoint_on_s3_is_read_through_fsspec(spark, savepoints):
    from s3server import MotoServer

    from streamjob.state import SavepointReader

    path, output = savepoints("rocksdb")
    server = MotoServer()
    try:
        client = server.client()
        client.create_bucket(Bucket="savepoints")
        local = path.removeprefix("file://")
        for name in os.listdir(local):  # a savepoint is self-contained: moved as is, it reads as is
            client.upload_file(os.path.join(local, name), "savepoints", f"moved/sp/{name}")
        options = {"endpoint_url": server.url, "key": "testing", "secret": "testing"}
        reader = SavepointReader.read(spark, "s3://savepoints/moved/sp", storage_options=options)
        expected = expected_state(by_key(output))
        assert {r.key: r.value for r in reader.read_keyed_state("count", "count").collect()} == expected["count"]
        ballast: dict = defaultdict(dict)
        for r in reader.read_keyed_state("count", "ballast").collect():
            ballast[r.key][r.map_key] = r.value
        assert dict(ballast) == expected["ballast"]
    finally:
        server.close()


def test_the_command_line_lists_and_dumps(spark, savepoints, tmp_path):
    from click.testing import CliRunner

    from streamjob.runtime.cli import main

    path, output = savepoints("hashmap")
    runner = CliRunner()
    listed = runner.invoke(main, ["state", "ls", path])
    assert listed.exit_code == 0, listed.output
    lines = listed.output.splitlines()
    assert lines[0].startswith("savepoint ")
    assert any(line.split()[:4] == ["count", "keyed", "value", str(counting.KEYS)] for line in lines)
    assert not any("_timers" in line for line in lines)
    doc = json.loads(runner.invoke(main, ["state", "ls", path, "--json"]).output)
    assert {o["uid"] for o in doc["operators"]} == {"numbers", "count", "files"}

    dumped = runner.invoke(main, ["state", "dump", path, "--uid", "count", "--state", "count"])
    assert dumped.exit_code == 0, dumped.output
    rows = {json.loads(line)["key"]: json.loads(line)["value"] for line in dumped.stdout.splitlines()}
    assert rows == {k: len(v) for k, v in by_key(output).items()}
    for fmt in ("parquet", "csv", "jsonl"):
        out = tmp_path / fmt
        result = runner.invoke(main, ["state", "dump", path, "--uid", "count", "--state", "by-parity",
                                      "--format", fmt, "--out", str(out)])
        assert result.exit_code == 0, result.output
        assert glob.glob(str(out / "part-*"))
    import pyarrow.parquet as pq

    table = pq.read_table(str(tmp_path / "parquet"))
    assert table.column_names == ["key", "map_key", "value"] and table.num_rows == counting.KEYS
    bad = runner.invoke(main, ["state", "dump", path, "--uid", "count", "--state", "nope"])
    assert bad.exit_code == 1 and "operator 'count' has no state 'nope'; its states: ballast, by-parity" in bad.output


def test_broadcast_state_and_timers_of_a_keyed_broadcast_job(spark, spark_slots, tmp_path):
    from jobs import broadcast_rules

    from streamjob.runtime import MapStateDescriptor
    from streamjob.runtime.api.types import Row
    from streamjob.state import KeyedStateReaderFunction, SavepointReader

    env = broadcast_rules.build(str(tmp_path / "out"), str(tmp_path / "chk"), 200_000, 2000, parallelism=2,
                                interval_ms=200)
    client = env.execute_async("rules")
    assert client.wait_until_running(60)
    deadline = time.monotonic() + 60
    while client.job_manager.coordinator.counts["COMPLETED"] < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)
    path = client.stop_with_savepoint(False, str(tmp_path / "sp"), timeout=120)
    client.get_job_execution_result(120)
    reader = SavepointReader.read(spark, path)

    factors = reader.read_broadcast_state("apply-rules", "factors")
    assert factors.columns == ["key", "value"]
    rules = {r.key: r.value for r in factors.collect()}
    # one copy, each rule once as it arrived (the rules' 2 source subtasks emit every other rule each,
    # each at its own pace: not necessarily a prefix of them)
    assert len(rules) > 2 and all(v == ((k - 1000) // broadcast_rules.EVERY) % 7 + 1 for k, v in rules.items())
    with pytest.raises(Exception, match="broadcast state, not split|is broadcast state"):
        reader.read_list_state("apply-rules", "factors").collect()

    class Pending(KeyedStateReaderFunction):
        def open(self, ctx):
            self.pending = ctx.get_map_state(MapStateDescriptor("pending"))

        def read_key(self, key, ctx, out):
            out.collect(Row(key=key, waiting=sorted(self.pending.keys()),
                            timers=sorted(ctx.registered_event_time_timers())))

    rows = reader.read_keyed_state("apply-rules", Pending()).collect()
    assert rows, "rows wait for their timers in the savepoint"
    assert all(r.waiting == r.timers for r in rows)  # a timer for each waiting timestamp, as the job keeps them
    pending = reader.read_keyed_state("apply-rules", "pending")  # map of timestamp -> list of row numbers
    assert pending.schema.simpleString() == "struct<key:bigint,map_key:bigint,value:array<bigint>>"
    for r in pending.collect():
        assert all(broadcast_rules.row(i)["ts"] == r.map_key and i % broadcast_rules.KEYS == r.key for i in r.value)


def test_state_with_a_ttl_is_unwrapped_and_its_descriptor_leaves_expired_values_out(spark, tmp_path):
    from streamjob.runtime import ListStateDescriptor, StateTtlConfig, Time, ValueStateDescriptor
    from streamjob.runtime.checkpoint.metadata import CheckpointMetadata
    from streamjob.runtime.checkpoint.storage import SavepointTarget
    from streamjob.runtime.state.heap import HashMapKeyedStateBackend
    from streamjob.runtime.state.snapshot import serialize
    from streamjob.state import SavepointReader

    def with_ttl(descriptor):
        descriptor.enable_time_to_live(StateTtlConfig.new_builder(Time.hours(1)).build())
        return descriptor

    now = int(time.time() * 1000)
    backend = HashMapKeyedStateBackend("op", 128, range(128))  # the state a job's subtask holds
    value = backend.get_state(with_ttl(ValueStateDescriptor("last")))
    items = backend.get_list_state(with_ttl(ListStateDescriptor("items")))
    for key, written in (("old", now - 2 * 3600_000), ("new", now)):
        backend.ttl_clock = lambda written=written: written
        backend.current_key = key
        value.update(f"{key}-value")
        items.add(1)
        items.add(2)
    data, index = serialize(backend.snapshot(1, full=True), 128, None)
    target = SavepointTarget(str(tmp_path / "sp"), inline_threshold=0)
    target.write_metadata(CheckpointMetadata(1, "0" * 32, "ttl", now, 1, 128, kind="savepoint", operators={
        "op": {"name": "KeyedProcess", "subtasks": [target.write_state(1, "op", data, index)]}}))

    reader = SavepointReader.read(spark, str(tmp_path / "sp"))
    assert {s.name: s.kind for s in reader.operators(count=False)[0].keyed_states} == {"last": "value+ttl",
                                                                                      "items": "list+ttl"}
    by_name = reader.read_keyed_state("op", "last")
    assert by_name.columns == ["key", "value", "last_access_ms"]
    assert sorted(tuple(r) for r in by_name.collect()) == [("new", "new-value", now),
                                                           ("old", "old-value", now - 2 * 3600_000)]
    live = reader.read_keyed_state("op", with_ttl(ValueStateDescriptor("last")))
    assert [(r.key, r.value) for r in live.collect()] == [("new", "new-value")]
    elements = reader.read_keyed_state("op", with_ttl(ListStateDescriptor("items")))
    assert sorted((r.key, r.value) for r in elements.collect()) == [("new", 1), ("new", 2)]
