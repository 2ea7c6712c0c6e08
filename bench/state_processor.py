"""State Processor API benchmark: a savepoint's ValueState of N keys into a Spark DataFrame (read),
and from one (write).

    python bench/state_processor.py [--keys 10000000] [--backends hashmap,rocksdb,pickled] [--runs 3]
                                    [--direction read,write]

Write (``--direction write``): ``SavepointWriter.new_savepoint(spark, backend, 128).with_operator(uid,
OperatorTransformation.bootstrap_with(df).set_parallelism(2).key_by("key").transform(fn))`` where
``df`` holds (key, value = 3 * key) for ``--keys`` int keys in 2 partitions and ``fn`` writes
ValueState "v" per row; backends hashmap and rocksdb (the bootstrap tasks' working state; the savepoint
is the same canonical format either way), 2 Spark tasks. Baseline: pyarrow writing the same rows to
Parquet (two files, as 2 Spark tasks would); for reference Spark's own Parquet writer of the same
DataFrame, and the shuffle by key the writer does. The savepoint is read back and checked.

For each state backend, a savepoint of an operator at parallelism 2 whose ValueState holds an
int for each of ``--keys`` int keys (value = 3 * key) is written by the runtime's own snapshot
code, as a stop-with-savepoint writes it: each subtask's backend is filled with the keys of its
key groups, snapshotted with ``full=True`` and written to a ``SavepointTarget``. On both backends
such a table is written columnar (int64 blocks, read with numpy alone). ``pickled`` is the same rows
in the format any other ValueState has (str keys, objects): a pickled dict per key group, one
``pickle.loads`` each. Building the state through a running job would take minutes and measure the
job.

Measured, best of ``--runs``, in the same run and on the same local[2] Spark:

- reader: ``SavepointReader.read(spark, path).read_keyed_state(uid, "v")`` written to Spark's
  ``noop`` sink (every row materialised in the JVM, nothing stored): 2 Spark tasks, one per
  subtask handle;
- baseline: ``pyarrow.parquet.read_table`` of the same rows (key, value int64) from the two
  Parquet files a 2-task Spark job would have written (one process, pyarrow's own threads);
- for reference: Spark reading those Parquet files into the same ``noop`` sink, and the same rows
  made by numpy in 2 Python tasks through ``mapInArrow`` (no state read: the ceiling of a reader
  whose tasks are Python workers).

Floor (issue 31): reader >= 0.5x the pyarrow baseline. Printed and written to
bench/results/state_processor.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

HERE = os.path.dirname(os.path.abspath(__file__))
MAXP = 128
PARALLELISM = 2
UID, STATE = "remember", "v"


def subtask_keys(keys: int, subtask: int) -> np.ndarray:
    from streamjob.runtime.keygroups import assign_key_groups, key_group_range

    all_keys = np.arange(keys, dtype=np.int64)
    groups = key_group_range(MAXP, PARALLELISM, subtask)
    kg = assign_key_groups(all_keys, MAXP)
    return all_keys[(kg >= groups.start) & (kg < groups.stop)]


def write_savepoint(backend: str, keys: int, url: str) -> float:
    """The savepoint a job at parallelism 2 would write; returns the seconds it took (informative)."""
    from streamjob.runtime.checkpoint.metadata import CheckpointMetadata
    from streamjob.runtime.checkpoint.storage import SavepointTarget
    from streamjob.runtime.keygroups import key_group_range
    from streamjob.runtime.state.heap import HashMapKeyedStateBackend
    from streamjob.runtime.state.snapshot import serialize

    target = SavepointTarget(url)
    started = time.perf_counter()
    handles = []
    for i in range(PARALLELISM):
        ks = subtask_keys(keys, i)
        chunk = dict(zip(ks.tolist(), (ks * 3).tolist()))
        groups = key_group_range(MAXP, PARALLELISM, i)
        name = f"{UID}-{i}"
        if backend == "hashmap":
            b = HashMapKeyedStateBackend(UID, MAXP, groups)
            b.restore_chunk(STATE, "value", chunk)
            data, index = serialize(b.snapshot(1, full=True), MAXP, None)
            handles.append(target.write_state(1, name, data, index))
        elif backend == "pickled":
            from streamjob.runtime.state.snapshot import SnapshotBuilder, _group_positions

            # a dict per key group, pickled: the format of a ValueState of any other types (str keys,
            # objects), here of the same ints
            builder = SnapshotBuilder()
            for kg, positions in _group_positions(ks.tolist(), MAXP):
                part = ks[positions]
                builder.add_keyed(STATE, "value", kg, dict(zip(part.tolist(), (part * 3).tolist())))
            data, index = builder.finish()
            handles.append(target.write_state(1, name, data, index))
        else:
            from streamjob.runtime.state.rocksdb import RocksDBKeyedStateBackend
            from streamjob.runtime.state.rocksdb_snapshot import write_snapshot

            local = tempfile.mkdtemp(prefix="bench-sp-rocks-")
            b = RocksDBKeyedStateBackend(UID, MAXP, groups, local)
            b.restore_chunk(STATE, "value", chunk)
            handle, _, _ = write_snapshot(b.snapshot(1, full=True), target, name, None)
            handles.append(handle)
            b.dispose()
            shutil.rmtree(local, ignore_errors=True)
        del chunk
    meta = CheckpointMetadata(checkpoint_id=1, job_id="0" * 32, job_name="bench", timestamp_ms=int(time.time() * 1000),
                              parallelism=PARALLELISM, max_parallelism=MAXP,
                              operators={UID: {"name": "KeyedProcess", "subtasks": handles}}, kind="savepoint")
    target.write_metadata(meta)
    return time.perf_counter() - started


def write_parquet(keys: int, directory: str) -> None:
    os.makedirs(directory, exist_ok=True)
    for i in range(PARALLELISM):
        ks = subtask_keys(keys, i)
        pq.write_table(pa.table({"key": ks, "value": ks * 3}), os.path.join(directory, f"part-{i}.parquet"))


def best(runs: int, fn) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def synthetic(spark, keys: int):
    """The same number of rows made by numpy in 2 Python tasks (contiguous ranges: the key groups are
    not computed), through mapInArrow as the reader hands them to Spark: the ceiling of any reader that
    decodes in Python workers (task start, Arrow into the JVM, a row each there)."""
    from pyspark.sql.types import LongType, StructField, StructType

    def rows(ids):
        for batch in ids:
            for i in batch.column(0).to_pylist():
                lo, hi = i * keys // PARALLELISM, (i + 1) * keys // PARALLELISM
                for start in range(lo, hi, 1 << 20):
                    k = np.arange(start, min(start + (1 << 20), hi), dtype=np.int64)
                    yield pa.RecordBatch.from_arrays([pa.array(k), pa.array(k * 3)], names=["key", "value"])

    schema = StructType([StructField("key", LongType()), StructField("value", LongType())])
    return spark.range(0, PARALLELISM, 1, PARALLELISM).mapInArrow(rows, schema)


def spark_session():
    from streamjob.state.cli import local_spark

    return local_spark(PARALLELISM)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=10_000_000)
    parser.add_argument("--backends", default="hashmap,rocksdb,pickled")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--direction", default="read", help="read, write, or read,write")
    args = parser.parse_args()
    directions = args.direction.split(",")
    results_file = os.path.join(HERE, "results", "state_processor.json")
    if "write" in directions:
        write_bench(args, results_file)
    if "read" not in directions:
        return

    from streamjob.state import SavepointReader

    work = tempfile.mkdtemp(prefix="bench-state-processor-")
    results: dict = {"keys": args.keys, "spark_tasks": PARALLELISM, "runs": args.runs}
    try:
        spark = spark_session()
        parquet_dir = os.path.join(work, "parquet")
        write_parquet(args.keys, parquet_dir)
        baseline = best(args.runs, lambda: pq.read_table(parquet_dir))
        spark_parquet = best(args.runs, lambda: spark.read.parquet(parquet_dir).write.format("noop")
                             .mode("overwrite").save())
        ceiling = best(args.runs, lambda: synthetic(spark, args.keys).write.format("noop").mode("overwrite").save())
        results["pyarrow_parquet_rows_per_s"] = round(args.keys / baseline)
        results["spark_parquet_rows_per_s"] = round(args.keys / spark_parquet)
        results["spark_map_in_arrow_ceiling_rows_per_s"] = round(args.keys / ceiling)
        print(f"baseline: pyarrow.parquet.read_table {args.keys / baseline / 1e6:.1f} M rows/s "
              f"({baseline:.2f} s); Spark reading the Parquet files {args.keys / spark_parquet / 1e6:.1f} M rows/s; "
              f"Spark mapInArrow of numpy ranges (no state read) {args.keys / ceiling / 1e6:.1f} M rows/s", flush=True)
        for backend in args.backends.split(","):
            url = os.path.join(work, f"savepoint-{backend}")
            wrote = write_savepoint(backend, args.keys, url)
            reader = SavepointReader.read(spark, url)
            df = reader.read_keyed_state(UID, STATE)
            check = df.selectExpr("count(*) AS n", "sum(value - 3 * key) AS wrong").collect()[0]
            assert (check.n, check.wrong) == (args.keys, 0), check
            seconds = best(args.runs, lambda: reader.read_keyed_state(UID, STATE).write.format("noop")
                           .mode("overwrite").save())
            rate = args.keys / seconds
            results[backend] = {"keys_per_s": round(rate), "seconds": round(seconds, 3),
                                "ratio_to_pyarrow": round(rate * baseline / args.keys, 3),
                                "savepoint_bytes": sum(os.path.getsize(os.path.join(url, f)) for f in os.listdir(url)),
                                "savepoint_written_s": round(wrote, 1)}
            print(f"{backend}: read {args.keys / 1e6:.0f}M keys of ValueState into Spark at {rate / 1e6:.2f} M keys/s "
                  f"({seconds:.2f} s) = {rate * baseline / args.keys:.2f}x pyarrow's Parquet (floor 0.5x)", flush=True)
            shutil.rmtree(url, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    if os.path.exists(results_file):  # a write run's figures stay beside the read's
        with open(results_file) as f:
            written = json.load(f).get("write")
        if written:
            results["write"] = written
    with open(results_file, "w") as f:
        json.dump(results, f, indent=2)


def bootstrap_function():
    from streamjob.runtime import ValueStateDescriptor
    from streamjob.state import KeyedStateBootstrapFunction

    class WriteValue(KeyedStateBootstrapFunction):
        def open(self, ctx):
            self.v = ctx.get_state(ValueStateDescriptor(STATE))

        def process_element(self, row, ctx):
            self.v.update(row["value"])

    return WriteValue()


def write_bench(args, results_file: str) -> None:
    from streamjob.state import OperatorTransformation, SavepointReader, SavepointWriter

    work = tempfile.mkdtemp(prefix="bench-state-writer-")
    results: dict = {"keys": args.keys, "spark_tasks": PARALLELISM, "runs": args.runs}
    try:
        spark = spark_session()
        parquet_dir = os.path.join(work, "parquet")
        os.makedirs(parquet_dir, exist_ok=True)
        tables = [pa.table({"key": ks, "value": ks * 3}) for ks in np.array_split(np.arange(args.keys), PARALLELISM)]
        baseline = best(args.runs, lambda: [pq.write_table(t, os.path.join(parquet_dir, f"part-{i}.parquet"))
                                            for i, t in enumerate(tables)])
        results["pyarrow_parquet_write_rows_per_s"] = round(args.keys / baseline)
        print(f"baseline: pyarrow.parquet.write_table {args.keys / baseline / 1e6:.1f} M rows/s ({baseline:.2f} s)",
              flush=True)
        df = spark.range(0, args.keys, 1, PARALLELISM).selectExpr("id AS key", "id * 3 AS value")
        # for reference: Spark's own writer of the same DataFrame (its JVM Parquet writer, no Python), and
        # the same rows shuffled by key as the savepoint writer shuffles them (repartition, noop sink)
        spark_dir = os.path.join(work, "spark-parquet")
        spark_write = best(args.runs, lambda: df.write.mode("overwrite").parquet(spark_dir))
        shuffle = best(args.runs, lambda: df.repartition(PARALLELISM, "key").write.format("noop").mode("overwrite")
                       .save())
        results["spark_parquet_write_rows_per_s"] = round(args.keys / spark_write)
        results["spark_shuffle_rows_per_s"] = round(args.keys / shuffle)
        print(f"for reference: Spark writing the DataFrame to Parquet {args.keys / spark_write / 1e6:.1f} M rows/s "
              f"({baseline / spark_write:.2f}x pyarrow); Spark shuffling it by key {args.keys / shuffle / 1e6:.1f} M "
              f"rows/s", flush=True)
        for backend in [b for b in args.backends.split(",") if b in ("hashmap", "rocksdb")]:
            url = os.path.join(work, f"written-{backend}")

            def write() -> None:
                shutil.rmtree(url, ignore_errors=True)
                (SavepointWriter.new_savepoint(spark, backend, MAXP)
                 .with_operator(UID, OperatorTransformation.bootstrap_with(df).set_parallelism(PARALLELISM)
                                .key_by("key").transform(bootstrap_function()))
                 .write(url))

            seconds = best(args.runs, write)
            check = SavepointReader.read(spark, url).read_keyed_state(UID, STATE) \
                .selectExpr("count(*) AS n", "sum(value - 3 * key) AS wrong").collect()[0]
            assert (check.n, check.wrong) == (args.keys, 0), check
            rate = args.keys / seconds
            results[f"write_{backend}"] = {"keys_per_s": round(rate), "seconds": round(seconds, 3),
                                           "ratio_to_pyarrow": round(rate * baseline / args.keys, 4)}
            print(f"{backend}: wrote {args.keys / 1e6:g}M keys of ValueState from a DataFrame at {rate / 1e6:.3f} M "
                  f"keys/s ({seconds:.2f} s) = {rate * baseline / args.keys:.3f}x pyarrow writing Parquet", flush=True)
            shutil.rmtree(url, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    os.makedirs(os.path.dirname(results_file), exist_ok=True)
    previous = {}
    if os.path.exists(results_file):
        with open(results_file) as f:
            previous = json.load(f)
    with open(results_file, "w") as f:
        json.dump({**previous, "write": results}, f, indent=2)


if __name__ == "__main__":
    main()
