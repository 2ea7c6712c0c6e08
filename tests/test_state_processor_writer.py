"""The State Processor API's writer (``SavepointWriter``) on real local Spark, real files and moto's S3.

Savepoints written from DataFrames are restored by real jobs (``tests/jobs/bootstrapped.py``, and the
counting job of the fault-tolerance tests) on both backends, at other parallelisms than the writer's
task count, and their output must be exact: every bootstrapped key found with its value. Savepoints
rewritten from a running job's savepoint (operators removed, renamed) resume with and without
``--allow-non-restored-state`` as Flink's would; everything written reads back with
``SavepointReader``. Errors name the uid, state or file.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections import defaultdict

import pyarrow.parquet as pq
import pytest

from jobs import bootstrapped, counting
from streamjob.runtime import ValueStateDescriptor
from streamjob.runtime.checkpoint.storage import load_checkpoint
from streamjob.runtime.graph.job_graph import JobDefinitionError
from test_checkpointing import committed_rows

pytestmark = pytest.mark.spark

# Spark's own Python workers run the bootstrap functions; they do not have tests/ on their path, so
# what the functions use of the test job's module travels with them (as a job script's functions do).
from pyspark import cloudpickle  # noqa: E402

cloudpickle.register_pickle_by_value(bootstrapped)


@pytest.fixture(scope="module")
def spark(spark_slots):
    from pyspark.sql import SparkSession

    return SparkSession.builder.getOrCreate()  # on the session's SparkContext (local[4])


@pytest.fixture(scope="module")
def counting_savepoint(spark_slots, tmp_path_factory):
    """A stop-with-savepoint of the counting job part way (hashmap, parallelism 2): (path, rows, out dir)."""
    from streamjob.runtime.api.environment import execution_context

    base = tmp_path_factory.mktemp("counting")
    rows = 6000
    execution_context.reset()
    execution_context.show_progress = False
    env = counting.build(str(base / "out"), str(base / "chk"), rows, 2000, interval_ms=200, parallelism=2,
                         ballast=2048)  # bytes of state per row: the count operator's state is files, not inline
    client = env.execute_async("counting")
    assert client.wait_until_running(60)
    deadline = time.monotonic() + 60
    while client.job_manager.coordinator.counts["COMPLETED"] < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    path = client.stop_with_savepoint(False, str(base / "sp"), timeout=120)
    client.get_job_execution_result(120)
    partial = committed_rows(str(base / "out"))
    assert 0 < len(partial) < rows
    return path, rows, base / "out"


def output(out) -> list[dict]:
    rows = []
    for path in sorted(os.listdir(out)):
        if path.endswith(".parquet"):
            rows += pq.read_table(os.path.join(out, path)).to_pylist()
    return rows


def counts_function():
    from streamjob.state import KeyedStateBootstrapFunction

    class InitialCounts(KeyedStateBootstrapFunction):
        def open(self, ctx):
            self.count = ctx.get_state(ValueStateDescriptor("count", default=0))

        def process_element(self, row, ctx):
            assert ctx.get_current_key() == row["key"]
            self.count.update(row["count"])

    return InitialCounts()


def test_a_million_bootstrapped_keys_restore_into_a_running_job_that_continues(spark, spark_slots, tmp_path):
    """1M keys written by 2 Spark tasks (heap working state), restored whole into a RocksDB job at
    parallelism 3 that goes on counting 100k of them (one in ten, all over the key groups): each row's
    count is the bootstrapped one plus 1. (The savepoint's 1M keys are checked by reading it back.)"""
    from streamjob.state import OperatorTransformation, SavepointReader, SavepointWriter

    keys = 1_000_000
    df = spark.range(0, keys, 1, 4).selectExpr("id AS key", "id % 7 + 1 AS count")
    started = time.monotonic()
    path = (SavepointWriter.new_savepoint(spark, "hashmap", 128)
            .with_operator("count", OperatorTransformation.bootstrap_with(df).set_parallelism(2).key_by("key")
                           .transform(counts_function()))
            .write(str(tmp_path / "sp")))
    wrote = time.monotonic() - started
    _, meta = load_checkpoint(path)
    assert meta.kind == "savepoint" and meta.max_parallelism == 128 and meta.parallelism == 2
    assert len(meta.operators["count"]["subtasks"]) == 2  # one state file per writer task
    counted = SavepointReader.read(spark, path).read_keyed_state("count", "count") \
        .selectExpr("count(*) AS n", "sum(CASE WHEN value = key % 7 + 1 THEN 0 ELSE 1 END) AS wrong").collect()[0]
    assert (counted.n, counted.wrong) == (keys, 0)

    out = tmp_path / "out"
    touched = keys // 10
    bootstrapped.build(str(out), str(tmp_path / "chk"), touched, lambda i: i * 10 + i % 10, 3, "rocksdb",
                       restore=path).execute("go on")
    rows = output(out)
    assert sorted(r["key"] for r in rows) == [i * 10 + i % 10 for i in range(touched)]
    wrong = [r for r in rows if r["count"] != bootstrapped.initial(r["key"]) + 1]
    assert not wrong, f"{len(wrong)} keys restored wrong, e.g. {wrong[:3]}"
    print(f"wrote 1M keys in {wrote:.1f} s")


def test_every_kind_of_state_and_timers_round_trip_and_restore_into_a_heap_job(spark, spark_slots, tmp_path):
    """Value, list, map, reducing and aggregating state and event-time timers, written by 3 tasks with
    RocksDB as working state: read back by ``SavepointReader`` and restored into a heap job at
    parallelism 2, exactly as written."""
    from pyspark.sql import Row

    from streamjob.state import KeyedStateBootstrapFunction, OperatorTransformation, SavepointReader, SavepointWriter

    class Everything(KeyedStateBootstrapFunction):
        def open(self, ctx):
            d = bootstrapped.descriptors()
            self.count = ctx.get_state(d["count"])
            self.recent = self.get_runtime_context().get_list_state(d["recent"])
            self.tags = ctx.get_map_state(d["tags"])
            self.total = ctx.get_reducing_state(d["total"])
            self.average = ctx.get_aggregating_state(d["average"])

        def process_element(self, row, ctx):
            key = ctx.get_current_key()
            self.count.update(row.count)
            self.recent.add_all([key, key + 1])
            self.tags.put("parity", "even" if key % 2 == 0 else "odd")
            self.total.add(row.count)
            self.total.add(10)
            self.average.add(key)
            self.average.add(key + 2)
            if key % 5 == 0:
                ctx.timer_service().register_event_time_timer(1000 + key)

    keys = 2000
    df = spark.createDataFrame([Row(key=k, count=bootstrapped.initial(k)) for k in range(keys)])
    path = (SavepointWriter.new_savepoint(spark, "rocksdb", 64)
            .with_operator("count", OperatorTransformation.bootstrap_with(df).set_parallelism(3).key_by("key")
                           .transform(Everything()))
            .write(str(tmp_path / "sp")))
    reader = SavepointReader.read(spark, path)
    assert {r.key: r.value for r in reader.read_keyed_state("count", "count").collect()} == \
        {k: bootstrapped.initial(k) for k in range(keys)}
    ops = {o.uid: o for o in reader.operators(count=False)}
    assert {s.name: s.kind for s in ops["count"].keyed_states} == {
        "count": "value", "recent": "list", "tags": "map", "total": "reducing", "average": "aggregating",
        "_timers-event-time": "value", "_timers-processing-time": "value"}

    out = tmp_path / "out"
    bootstrapped.build(str(out), str(tmp_path / "chk"), keys, lambda i: i, 2, "hashmap", restore=path,
                       rich=True, conf={"pipeline.max-parallelism": 64}).execute("go on")
    rows = output(out)
    fired = sorted(r["key"] for r in rows if r["count"] == -1)
    assert fired == list(range(0, keys, 5))  # the bootstrapped timers fire at the end of the input
    for r in rows:
        if r["count"] == -1:
            assert r["timer"] == 1000 + r["key"]
            continue
        k = r["key"]
        assert (r["count"], r["recent"], r["tag"], r["total"], r["average"]) == (
            bootstrapped.initial(k) + 1, [k, k + 1], "even" if k % 2 == 0 else "odd", bootstrapped.initial(k) + 10,
            k + 1.0), r
    assert len(rows) == keys + len(fired)


def test_rename_and_remove_operators_then_resume_with_and_without_allow_non_restored_state(
        spark, spark_slots, counting_savepoint, tmp_path):
    from streamjob.runtime.config import Options
    from streamjob.state import SavepointReader, SavepointWriter

    path, rows, out = counting_savepoint
    source_files = sorted(os.listdir(path.removeprefix("file://")))
    renamed = SavepointWriter.from_existing_savepoint(spark, path) \
        .change_operator_identifier("count", "count-v2").write(str(tmp_path / "renamed"))
    assert sorted(os.listdir(path.removeprefix("file://"))) == source_files  # the source is only read
    reader = SavepointReader.read(spark, renamed)
    assert {o.uid for o in reader.operators(count=False)} == {"numbers", "count-v2", "files"}
    assert {r.key: r.value for r in reader.read_keyed_state("count-v2", "count").collect()} == \
        {r.key: r.value for r in SavepointReader.read(spark, path).read_keyed_state("count", "count").collect()}

    # the job whose counting operator now has uid "count-v2" continues exactly where the savepoint stopped
    resumed = tmp_path / "resumed"
    shutil.copytree(out, resumed)  # the sink's pending files are state of the savepoint: the same directory
    counting.build(str(resumed), str(tmp_path / "chk"), rows, 1e6, parallelism=3, restore=renamed,
                   count_uid="count-v2").execute("counting v2")
    assert committed_rows(str(resumed)) == counting.expected_rows(rows)

    # the old job (uid "count") cannot take state of "count-v2" ...
    with pytest.raises(JobDefinitionError, match="no operator of this job has uid 'count-v2'.*"
                                                 "--allow-non-restored-state"):
        counting.build(str(tmp_path / "refused"), str(tmp_path / "chk"), rows, 1e6, parallelism=2,
                       restore=renamed).execute("counting")
    # ... unless told to drop it: then its counts start from nothing, the rest (source, sink) restored
    dropped = tmp_path / "dropped"
    shutil.copytree(out, dropped)
    counting.build(str(dropped), str(tmp_path / "chk"), rows, 1e6, parallelism=2, restore=renamed,
                   conf={Options.ALLOW_NON_RESTORED_STATE: True}).execute("counting")
    # removing the operator's state gives the same, with no flag needed (nothing is left unclaimed)
    removed = SavepointWriter.from_existing_savepoint(spark, renamed).remove_operator("count-v2") \
        .write(str(tmp_path / "removed"))
    assert "count-v2" not in load_checkpoint(removed)[1].operators
    fresh = tmp_path / "fresh"
    shutil.copytree(out, fresh)
    counting.build(str(fresh), str(tmp_path / "chk"), rows, 1e6, parallelism=2, restore=removed).execute("counting")
    for run in (dropped, fresh):
        got = committed_rows(str(run))
        assert sorted(r[1] for r in got) == list(range(rows))  # every row exactly once: source and sink restored
        before = {r[1] for r in committed_rows(str(out))}
        after = defaultdict(list)
        for key, i, count, _ in sorted(got, key=lambda r: r[1]):
            if i not in before:
                after[key].append(count)
        assert all(c == list(range(1, len(c) + 1)) for c in after.values())  # counted from nothing again


def test_errors_name_the_uid_the_state_and_the_file(spark, counting_savepoint, tmp_path):
    from streamjob.state import (OperatorExistsError, OperatorTransformation, SavepointWriter, StateNotFoundError)

    path, _, _ = counting_savepoint
    writer = SavepointWriter.from_existing_savepoint(spark, path)
    with pytest.raises(StateNotFoundError, match="has no operator with uid 'nope'; its operators: count, files, "
                                                 "numbers"):
        writer.remove_operator("nope")
    df = spark.range(3).selectExpr("id AS key", "id AS count")
    transformation = OperatorTransformation.bootstrap_with(df).key_by("key").transform(counts_function())
    with pytest.raises(OperatorExistsError, match="already has an operator with uid 'count'"):
        writer.with_operator("count", transformation)
    with pytest.raises(OperatorExistsError, match="already has an operator with uid 'files'"):
        writer.change_operator_identifier("count", "files")
    with pytest.raises(ValueError, match="overlap the source"):
        writer.write(path.removeprefix("file://") + "/inside")
    with pytest.raises(KeyError, match="no column 'user'; its columns: key, count"):
        SavepointWriter.new_savepoint(spark).with_operator(
            "x", OperatorTransformation.bootstrap_with(df).key_by("user").transform(counts_function())) \
            .write(str(tmp_path / "unknown-column"))
    assert not (tmp_path / "unknown-column").exists()  # a failed write leaves nothing behind

    # a damaged file of an operator taken over: named, with its operator, and nothing written
    copy = tmp_path / "damaged"
    shutil.copytree(path.removeprefix("file://"), copy)
    _, meta = load_checkpoint(str(copy))
    state_file = next(h["file"] for h in meta.operators["count"]["subtasks"] if h and "file" in h)
    data = bytearray((copy / state_file).read_bytes())
    data[len(data) // 2] ^= 0xFF
    (copy / state_file).write_bytes(bytes(data))
    with pytest.raises(Exception) as damaged:
        SavepointWriter.from_existing_savepoint(spark, str(copy)).write(str(tmp_path / "from-damaged"))
    assert f"{state_file}" in str(damaged.value) and "checksum mismatch" in str(damaged.value)
    assert "operator 'count'" in str(damaged.value)
    assert not (tmp_path / "from-damaged").exists()
    # a failing bootstrap function names itself, the operator, subtask and key
    from streamjob.state import KeyedStateBootstrapFunction

    class Fails(KeyedStateBootstrapFunction):
        def process_element(self, row, ctx):
            raise ValueError("no good")

    with pytest.raises(Exception, match=r"Fails.process_element\(\) of operator 'x' \(subtask \d/1, key groups "
                                        r"0-127\) failed at key \d: ValueError: no good"):
        SavepointWriter.new_savepoint(spark).with_operator(
            "x", OperatorTransformation.bootstrap_with(df).set_parallelism(1).key_by("key").transform(Fails())) \
            .write(str(tmp_path / "fails"))


def test_a_savepoint_on_s3_is_rewritten_on_s3_and_resumes(spark, spark_slots, counting_savepoint, tmp_path):
    """From a savepoint moved to moto's S3 server: a new operator's state added from a DataFrame (str
    keys, a function as key selector), written to another prefix, read back and restored by the job."""
    from pyspark.sql import Row
    from s3server import MotoServer

    from streamjob.state import KeyedStateBootstrapFunction, OperatorTransformation, SavepointReader, SavepointWriter

    path, rows, out = counting_savepoint
    server = MotoServer()
    try:
        client = server.client()
        client.create_bucket(Bucket="savepoints")
        local = path.removeprefix("file://")
        for name in os.listdir(local):
            client.upload_file(os.path.join(local, name), "savepoints", f"moved/sp/{name}")
        options = {"endpoint_url": server.url, "key": "testing", "secret": "testing"}

        class Names(KeyedStateBootstrapFunction):
            def open(self, ctx):
                self.name = ctx.get_state(ValueStateDescriptor("name"))

            def process_element(self, row, ctx):
                self.name.update(f"{ctx.get_current_key()}:{row.n}")

        df = spark.createDataFrame([Row(first="user", n=n) for n in range(50)])
        target = (SavepointWriter.from_existing_savepoint(spark, "s3://savepoints/moved/sp", storage_options=options)
                  .with_operator("names", OperatorTransformation.bootstrap_with(df)
                                 .key_by(lambda row: f"{row['first']}-{row['n']}").transform(Names()))
                  .write("s3://savepoints/rewritten", ))
        assert target == "s3://savepoints/rewritten"
        reader = SavepointReader.read(spark, target, storage_options=options)
        assert {r.key: r.value for r in reader.read_keyed_state("names", "name").collect()} == \
            {f"user-{n}": f"user-{n}:{n}" for n in range(50)}

        # the counting job has no "names" operator: it resumes from S3 with the flag, exact
        resumed = tmp_path / "resumed"
        shutil.copytree(out, resumed)
        counting.build(str(resumed), str(tmp_path / "chk"), rows, 1e6, parallelism=2, restore=target,
                       conf={"s3.endpoint": server.url,
                             "execution.state-recovery.ignore-unclaimed-state": True}).execute("counting")
        assert committed_rows(str(resumed)) == counting.expected_rows(rows)
    finally:
        server.close()


def test_the_route_values_are_sparks_own_hash_partitions(spark):
    """The writer puts a subtask's rows into one Spark partition by a value Spark hashes there; it
    computes Spark's hash itself (``writer.spark_partition``), which must be Spark's."""
    from streamjob.state.writer import _route_values, spark_partition

    for p in (1, 2, 3, 128):
        rows = spark.range(-3000, 3000).selectExpr("id", f"pmod(hash(id), {p})").collect()
        assert all(spark_partition(v, p) == part for v, part in rows)
        assert [spark_partition(v, p) for v in _route_values(p)] == list(range(p))


def test_the_state_migration_example_resumes_the_changed_job_exactly(spark, spark_slots, tmp_path):
    from test_examples import load_example

    example = load_example("state_migration")
    after = example.main(str(tmp_path / "migration"), spark)  # checks its own output, raises if not exact
    assert 0 < after < example.EVENTS
    doc = json.loads((tmp_path / "migration" / "migrated" / "_metadata").read_text())
    assert set(doc["operators"]) == {"events", "count", "files"}
