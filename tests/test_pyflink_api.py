"""More of PyFlink's DataStream API (issue 14, items 6 and 7): ``execute_async`` under ``streamjob run``,
several ``execute()`` in one program, keyed state in map/flat_map/filter/reduce functions, PyFlink's
file connectors, ``partition_custom``, ``add_source``/``add_sink``, and a clear error for every
PyFlink call streamjob does not implement."""

from __future__ import annotations

import glob
import gzip
import os
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from conftest import run_cli
from jobs import counting, keyed_functions
from streamjob.runtime import (
    ConnectedStreams,
    DataStream,
    DataStreamSink,
    KeyedStream,
    Partitioner,
    PyFlinkNotSupported,
    StreamExecutionEnvironment,
)
from streamjob.runtime.api import transformations as T
from streamjob.runtime.api import unsupported
from streamjob.runtime.api.transformations import CustomPartitionKey, KeySpec
from streamjob.runtime.connectors import END, DiscardingSink
from streamjob.runtime.connectors.file_system import (
    BucketAssigner,
    Encoder,
    FileSink,
    FileSource,
    OutputFileConfig,
    RollingPolicy,
    StreamFormat,
)
from streamjob.runtime.connectors.files import FileSourceReader
from streamjob.runtime.network.record_writer import RecordWriter
from test_checkpointing import committed_rows

JOBS = Path(__file__).parent / "jobs"

# PyFlink's public methods (pyflink.datastream, Flink 1.20), per class. The event-time ones
# (watermarks, windows, timers, broadcast state, runtime mode) are listed apart: they are being
# built elsewhere and are not this test's business.
PYFLINK = {
    StreamExecutionEnvironment: """
        get_config set_parallelism set_max_parallelism register_slot_sharing_group get_parallelism
        get_max_parallelism set_buffer_timeout get_buffer_timeout disable_operator_chaining is_chaining_enabled
        is_chaining_of_operators_with_different_max_parallelism_enabled get_checkpoint_config enable_checkpointing
        get_checkpoint_interval get_checkpointing_mode get_state_backend set_state_backend
        enable_changelog_state_backend is_changelog_state_backend_enabled set_default_savepoint_directory
        get_default_savepoint_directory set_restart_strategy get_restart_strategy add_default_kryo_serializer
        register_type_with_kryo_serializer register_type configure add_python_file set_python_requirements
        add_python_archive set_python_executable add_jars add_classpaths get_default_local_parallelism
        set_default_local_parallelism execute execute_async get_execution_plan register_cached_file
        get_execution_environment create_input add_source from_source read_text_file from_collection close""",
    DataStream: """
        get_name name uid set_uid_hash get_type get_execution_environment get_execution_config set_parallelism
        set_max_parallelism
        force_non_parallel set_buffer_timeout start_new_chain disable_chaining slot_sharing_group set_description
        map flat_map key_by filter union connect shuffle project rescale rebalance forward broadcast process
        partition_custom add_sink sink_to execute_and_collect print get_side_output cache""",
    KeyedStream: """
        map flat_map reduce filter sum min max min_by max_by add_sink key_by union shuffle project rescale
        rebalance forward broadcast partition_custom print process name uid set_uid_hash set_parallelism
        set_max_parallelism force_non_parallel set_buffer_timeout start_new_chain disable_chaining
        slot_sharing_group get_execution_environment sink_to""",
    ConnectedStreams: "map flat_map process",
    DataStreamSink: "name uid set_uid_hash set_parallelism set_description disable_chaining slot_sharing_group",
}
BEING_BUILT_ELSEWHERE = {"assign_timestamps_and_watermarks", "window", "window_all",
                         "count_window", "count_window_all", "key_by"}  # ConnectedStreams.key_by: KeyedCoProcess
TABLES = {StreamExecutionEnvironment: unsupported.ENVIRONMENT, DataStream: unsupported.DATA_STREAM,
          KeyedStream: unsupported.KEYED_STREAM, ConnectedStreams: unsupported.CONNECTED_STREAMS,
          DataStreamSink: unsupported.DATA_STREAM_SINK}


def instances() -> dict:
    env = StreamExecutionEnvironment.get_execution_environment()
    stream = env.from_collection([1, 2])
    return {StreamExecutionEnvironment: env, DataStream: stream, KeyedStream: stream.key_by(lambda x: x),
            ConnectedStreams: stream.connect(stream), DataStreamSink: stream.sink_to(DiscardingSink())}


def test_every_pyflink_call_runs_or_fails_naming_itself_and_what_to_use_instead():
    objects = instances()
    for cls, names in PYFLINK.items():
        obj, table = objects[cls], TABLES[cls]
        for name in names.split():
            if name in table:
                with pytest.raises(PyFlinkNotSupported) as e:
                    getattr(obj, name)
                assert str(e.value) == f"{cls.__name__}.{name}() is not supported by streamjob: {table[name]}"
                assert isinstance(e.value, NotImplementedError) and e.value.call == f"{cls.__name__}.{name}()"
            else:
                assert callable(getattr(obj, name)), f"{cls.__name__}.{name} is neither implemented nor refused"
        # An entry never hides a real method (implementing a call means dropping its entry).
        assert not [n for n in table if n in dir(cls)]
        assert not set(table) & BEING_BUILT_ELSEWHERE
    from streamjob.runtime import RuntimeContext

    ctx = RuntimeContext("Map", 1, 4, 128, attempt=0)
    assert ctx.get_task_name_with_subtasks() == "Map (2/4)#0"
    assert type(ctx.get_metrics_group()).__name__ == "MetricGroup"  # api/metrics.py (tests/test_metrics.py)
    # A keyed stream cannot be repartitioned (PyFlink raises too): its state would silently go elsewhere.
    for call in ("shuffle", "rebalance", "rescale", "forward"):
        with pytest.raises(PyFlinkNotSupported, match=rf"KeyedStream.{call}\(\) .*before key_by"):
            getattr(objects[KeyedStream], call)()
    with pytest.raises(PyFlinkNotSupported, match=r"KeyedStream.partition_custom\(\)"):
        objects[KeyedStream].partition_custom(Parity(), lambda x: x)
    # Names PyFlink does not have stay ordinary AttributeErrors (hasattr probes keep working).
    assert not hasattr(objects[DataStream], "no_such_call") and not hasattr(objects[StreamExecutionEnvironment], "x")


def test_pyflink_connectors_outside_streamjob_are_refused_by_name():
    env = StreamExecutionEnvironment.get_execution_environment()

    class FlinkKafkaConsumer:  # what a PyFlink program passes: a wrapper of a Java SourceFunction
        pass

    with pytest.raises(PyFlinkNotSupported, match=r"StreamExecutionEnvironment.add_source\(FlinkKafkaConsumer\)"):
        env.add_source(FlinkKafkaConsumer())
    with pytest.raises(PyFlinkNotSupported, match=r"DataStream.add_sink\(FlinkKafkaConsumer\) .*sink_to\(sink\)"):
        env.from_collection([1]).add_sink(FlinkKafkaConsumer())
    with pytest.raises(PyFlinkNotSupported, match=r"FileSink.for_bulk_format\(\) .* FileSink.parquet"):
        FileSink.for_bulk_format("/tmp/x", object())
    with pytest.raises(PyFlinkNotSupported, match=r"FileSource.for_bulk_file_format\(\)"):
        FileSource.for_bulk_file_format(object(), "/tmp/x")
    with pytest.raises(PyFlinkNotSupported, match=r"enable_compact\(\)"):
        FileSink.for_row_format("/tmp/x", Encoder.simple_string_encoder()).enable_compact(None, None)
    with pytest.raises(TypeError, match="needs an Encoder"):
        FileSink.for_row_format("/tmp/x", "utf-8")
    with pytest.raises(ValueError, match="pattern letter 'E'"):
        BucketAssigner.date_time_bucket_assigner("yyyy-EEE")
    with pytest.raises(ValueError, match="must not|not start with"):
        OutputFileConfig(".hidden", "")
    # The supported ones land where sink_to / from_source would.
    stream = env.add_source(FileSource.for_record_stream_format(StreamFormat.text_line_format(), "/tmp").build(),
                            "lines")
    sink = stream.add_sink(DiscardingSink())
    assert stream._t.kind == T.SOURCE and stream.get_name() == "lines" and sink._t.kind == T.SINK
    text = env.read_text_file("/tmp", "latin-1")
    assert text._t.fn.format == "text" and text._t.fn.charset == "latin-1" and text._t.fn.paths == ["/tmp"]
    env.set_default_savepoint_directory("file:///tmp/sp")
    assert env.get_default_savepoint_directory() == "file:///tmp/sp"


class _Channel:
    def __init__(self) -> None:
        self.got: list = []
        self.stamps: list = []

    def emit(self, batch, ts=None) -> None:
        self.got.extend(batch)
        if ts is not None:
            self.stamps.extend(ts.tolist())


class Parity(Partitioner):
    def partition(self, key, num_partitions):
        return key % num_partitions


def test_partition_custom_routes_each_key_where_the_partitioner_says():
    channels = [_Channel() for _ in range(3)]
    key = CustomPartitionKey(fn=lambda r: r["k"], partitioner=Parity())
    writer = RecordWriter(1, T.CUSTOM, channels, 0, key)
    writer.emit([{"k": k, "v": v} for v, k in enumerate([0, 1, 2, 3, 4, 5, 7])])
    assert [[r["k"] for r in c.got] for c in channels] == [[0, 3], [1, 4, 7], [2, 5]]
    stamped = [_Channel() for _ in range(3)]  # event timestamps go along with their records
    RecordWriter(1, T.CUSTOM, stamped, 0, key).emit([{"k": 2}, {"k": 1}, {"k": 5}], np.array([20, 10, 50]))
    assert [c.stamps for c in stamped] == [[], [10], [20, 50]]
    # A function of (key, num_partitions) works too; an answer out of range fails naming the key.
    bad = RecordWriter(1, T.CUSTOM, channels, 0, CustomPartitionKey(column="k", partitioner=lambda k, n: k))
    with pytest.raises(ValueError, match=r"returned 5 for key 5; it must return an int in 0..2"):
        bad.emit([{"k": 1}, {"k": 5}])
    floats = RecordWriter(1, T.CUSTOM, channels, 0, CustomPartitionKey(position=0, partitioner=lambda k, n: k / 2))
    with pytest.raises(ValueError, match=r"returned 0.0 for key 0"):
        floats.emit([(0,), (1,)])
    # In the plan: a channel edge with the partitioner, the next operator not keyed.
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(3)
    env.from_collection([1, 2]).partition_custom(Parity(), lambda x: x).map(str).sink_to(DiscardingSink())
    from streamjob.runtime.graph.job_graph import build_job_graph

    g = build_job_graph(env._transformations, env.get_config(), "t")
    (edge,) = [e for e in g.edges.values() if e.partitioner == T.CUSTOM]
    assert isinstance(edge.key, KeySpec) and isinstance(edge.key.partitioner, Parity)
    with pytest.raises(TypeError, match="partition_custom needs a Partitioner"):
        env.from_collection([1]).partition_custom("mod", lambda x: x)


JOB = "5e0b9c2f47d14a8e9b3f6c1d2a7e8f90"  # the task's job id: in FileSink's part names


class _Ctx:
    _job_id = JOB  # as SlotRuntime sets it

    def get_index_of_this_subtask(self):
        return 1

    def get_number_of_parallel_subtasks(self):
        return 2

    def is_checkpointing_enabled(self):
        return True


def test_row_format_file_sink_names_rolls_buckets_and_commits_like_flink(tmp_path):
    out = tmp_path / "out"
    sink = (FileSink.for_row_format(str(out), Encoder.simple_string_encoder())
            .with_output_file_config(OutputFileConfig.builder().with_part_prefix("pre").with_part_suffix(".ext").build())
            .with_rolling_policy(RollingPolicy.default_rolling_policy(part_size=20, rollover_interval=60_000))
            .with_bucket_assigner(BucketAssigner.date_time_bucket_assigner("yyyy-MM-dd", "UTC"))
            .build())
    writer = sink.create_writer(_Ctx())
    writer.write(["a" * 8, "b" * 8])  # 18 bytes: under the part size
    writer.write(["c" * 8])  # 27 bytes: over it, the part file rolls (pending, hidden)
    writer.write(["d"])
    bucket = out / time.strftime("%Y-%m-%d", time.gmtime())
    assert sorted(os.listdir(bucket)) == [f".pre-{JOB}-1-0.ext.inprogress", f".pre-{JOB}-1-1.ext.inprogress"]
    committables = writer.prepare_commit()  # the checkpoint barrier closes the open part too
    checkpointed = writer.snapshot_state()
    assert [Path(c["final"]).name for c in committables] == [f"pre-{JOB}-1-0.ext", f"pre-{JOB}-1-1.ext"]
    assert not glob.glob(str(bucket / "pre-*"))  # nothing visible before the checkpoint completes
    sink.commit(committables)
    sink.commit(committables)  # idempotent, as after a restore
    assert (bucket / f"pre-{JOB}-1-0.ext").read_text() == "aaaaaaaa\nbbbbbbbb\ncccccccc\n"
    assert (bucket / f"pre-{JOB}-1-1.ext").read_text() == "d\n"
    # After a failure: the restored subtask drops what its job wrote after its checkpoint, in every bucket,
    # and nothing of another job writing into the same directory.
    writer.write(["lost"])
    assert glob.glob(str(bucket / f".pre-{JOB}-1-2.ext.inprogress"))
    other = f".pre-{'0' * 32}-1-2.ext.inprogress"
    (bucket / other).write_text("another job's\n")
    restored = sink.create_writer(_Ctx())
    restored.restore_state(checkpointed)
    assert sorted(os.listdir(bucket)) == [other, f"pre-{JOB}-1-0.ext", f"pre-{JOB}-1-1.ext"]
    restored.write(["e"])
    assert [Path(c["final"]).name for c in restored.prepare_commit()] == [f"pre-{JOB}-1-2.ext"]
    # On-checkpoint rolling: one file per checkpoint however much is written; base path: no bucket.
    flat = FileSink.for_row_format(str(tmp_path / "flat"), Encoder.simple_string_encoder()) \
        .with_rolling_policy(RollingPolicy.on_checkpoint_rolling_policy()) \
        .with_bucket_assigner(BucketAssigner.base_path_bucket_assigner()).build()
    w = flat.create_writer(_Ctx())
    for _ in range(50):
        w.write(["x" * 100])
    assert [Path(c["final"]).name for c in w.prepare_commit()] == [f"part-{JOB}-1-0"]


def test_text_line_source_reads_every_path_and_resumes_after_the_lines_it_read(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "one.txt").write_text("l1\nl2\r\nl3")
    (tmp_path / "a" / ".hidden").write_text("never\n")
    with gzip.open(tmp_path / "two.txt.gz", "wt") as f:
        f.write("g1\ng2\n")
    builder = FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(tmp_path / "a"),
                                                  str(tmp_path / "two.txt.gz"))
    source = builder.build()
    assert source.monitor_interval is None
    reader = FileSourceReader(source, 0, 1, batch_size=2)
    first = reader.poll()
    assert first == ["l1", "l2"]
    state = reader.snapshot_state()
    resumed = FileSourceReader(source, 0, 1, batch_size=10)
    resumed.restore_state(state)
    rest = []
    while (batch := resumed.poll()) is not END:
        rest += batch
    assert rest == ["l3", "g1", "g2"]
    from streamjob.runtime.api.time import Duration

    monitored = builder.monitor_continuously(Duration.of_millis(500)).build()
    assert monitored.monitor_interval == 0.5


@pytest.mark.spark
def test_pyflink_program_runs_three_jobs_and_the_cli_waits_for_the_async_one(tmp_path):
    out = tmp_path / "out"
    r = run_cli("run", str(JOBS / "pyflink_program.py"), str(out), "--no-progress")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    # 3. the async job ran to its end after the program's main had returned
    assert [line for line in lines if line.startswith("started ")]
    assert sorted(int(line.split("> ")[1]) for line in lines if line.startswith("async:")) == list(range(30))
    # 1. exactly-once row files, routed by the custom partitioner, counted with keyed state in a map
    names = sorted(os.listdir(out))
    job = names[0].split("-")[1]  # the job's id, in every part file's name
    assert len(job) == 32 and names == [f"words-{job}-0-0.txt", f"words-{job}-1-0.txt"]
    written = [line.split(",") for f in sorted(out.iterdir()) for line in f.read_text().splitlines()]
    words = _program_words()  # the program itself only runs under streamjob run
    assert sorted((w, int(c)) for w, c, _ in written) == sorted(
        (w, n) for w, total in Counter(words).items() for n in range(1, total + 1))
    assert all(int(s) == (0 if w < "n" else 1) for w, _, s in written)
    # 2. read back and the rolling max_by per first letter: the last record of each letter is its maximum
    last: dict = {}
    for line in lines:
        if line.startswith("max:"):
            word, count = eval(line.split("> ", 1)[1])
            last[word[0]] = count
    best: dict = {}
    for w, total in Counter(words).items():
        best[w[0]] = max(best.get(w[0], 0), total)
    assert last == best


def _program_words() -> list[str]:
    text = (JOBS / "pyflink_program.py").read_text()
    start = text.index('WORDS = "') + len('WORDS = "')
    return text[start:text.index('"', start)].split()


@pytest.mark.spark
def test_keyed_state_in_map_flat_map_filter_reduce_survives_rescale_and_backend_change(spark_slots, tmp_path):
    """2 subtasks (hashmap) -> savepoint -> 3 (RocksDB) -> savepoint -> 1 (hashmap): the committed output
    is row for row the one uninterrupted run's; every stage checks its own state on every record."""
    out, checkpoints, savepoints = str(tmp_path / "out"), str(tmp_path / "chk"), str(tmp_path / "sp")
    rows, rate = 6_000, 3_000
    restore = None
    for parallelism, backend in ((2, "hashmap"), (3, "rocksdb")):
        env = keyed_functions.build(out, checkpoints, rows, rate, parallelism=parallelism, backend=backend,
                                    restore=restore)
        client = env.execute_async("keyed-functions")
        assert client.wait_until_running(60)
        deadline = time.monotonic() + 60
        while client.job_manager.coordinator.counts["COMPLETED"] < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
        restore = client.stop_with_savepoint(False, savepoints, timeout=120)
        assert client.get_job_execution_result(120).restarts == 0
    assert 0 < len(committed_rows(out)) < rows, "the phases should stop in the middle"
    result = keyed_functions.build(out, checkpoints, rows, rate, parallelism=1, restore=restore).execute("last")
    assert result.restarts == 0
    assert committed_rows(out) == counting.expected_rows(rows)


class _Counter:
    """flat_map with keyed state: emits (key, n) n times, n = how often the key was seen."""

    def open(self, runtime_context):
        from streamjob.runtime import ValueStateDescriptor

        self.seen = runtime_context.get_state(ValueStateDescriptor("seen", default=0))

    def flat_map(self, value):
        n = self.seen.value() + 1
        self.seen.update(n)
        return [(value[0], n)] * n


def test_keyed_flat_map_and_filter_see_the_state_of_each_records_key_and_keep_timestamps(tmp_path):
    from streamjob.runtime import FilterFunction, RuntimeContext
    from streamjob.runtime.graph.job_graph import build_job_graph
    from streamjob.runtime.task.operators import KeyedFilterOperator, KeyedFlatMapOperator, MapOperator, \
        create_operator

    class Odd(FilterFunction):  # has no open(): no keyed backend, the plain operator
        def filter(self, value):
            return value[1] % 2 == 1

    env = StreamExecutionEnvironment.get_execution_environment()
    keyed = env.from_collection([("a", 0)]).key_by(lambda t: t[0])
    keyed.flat_map(_Counter()).key_by(lambda t: t[0]).filter(Odd()).sink_to(DiscardingSink())
    keyed.map(lambda t: t).sink_to(DiscardingSink())
    g = build_job_graph(env._transformations, env.get_config(), "t")
    ops = {}
    for node in g.operators.values():
        if node.kind in (T.FLAT_MAP, T.FILTER, T.MAP):
            op = create_operator(node, RuntimeContext(node.name, 0, 1, 128, job_parameters=env.get_config().to_dict()))
            op.open()
            ops[node.kind] = op
    assert type(ops[T.FLAT_MAP]) is KeyedFlatMapOperator and ops[T.FLAT_MAP].keyed_backend is not None
    assert type(ops[T.FILTER]) is not KeyedFilterOperator and ops[T.FILTER].keyed_backend is None
    assert type(ops[T.MAP]) is MapOperator  # a lambda cannot reach state: no keys extracted for it
    got = []
    ops[T.FLAT_MAP].output.connect(lambda batch, ts: got.append((batch, None if ts is None else ts.tolist())))
    ops[T.FLAT_MAP].process_batch([("a", 1), ("b", 2), ("a", 3)], 0, np.array([100, 200, 300]))
    assert got == [([("a", 1), ("b", 1), ("a", 2), ("a", 2)], [100, 200, 300, 300])]
    for op in ops.values():
        op.dispose()


def test_each_execute_builds_what_was_added_since_the_last_one():
    env = StreamExecutionEnvironment.get_execution_environment()
    numbers = env.from_collection([1, 2, 3]).uid("numbers")
    numbers.map(str).uid("first").sink_to(DiscardingSink())
    first = env._build("first")  # what execute() builds before it runs the job
    assert sorted(op.uid or op.kind for op in first.operators.values()) == ["first", "numbers", "sink"]
    # The second job reads a stream of the first (its source comes along) and may reuse a uid.
    numbers.map(lambda x: x * 2).uid("first").sink_to(DiscardingSink())
    second = env._build("second")
    assert sorted(op.uid or op.kind for op in second.operators.values()) == ["first", "numbers", "sink"]
    assert [op.kind for op in second.operators.values() if op.uid == "first"] == [T.MAP]
    with pytest.raises(ValueError, match=r"no operators were defined since the last execute\(\)"):
        env._build("third")


@pytest.mark.spark
def test_the_cli_reports_an_async_job_failure_the_program_did_not_see(spark_slots):
    from streamjob.runtime.api.environment import execution_context
    from streamjob.runtime.cluster.executor import JobExecutionError

    def build(name):
        env = StreamExecutionEnvironment.get_execution_environment()
        env.from_collection([1, 0]).map(lambda x: 1 // x).name(name).sink_to(DiscardingSink())
        return env.execute_async(name)

    seen = build("seen")
    with pytest.raises(JobExecutionError):
        seen.get_job_execution_result(120)
    unseen = build("unseen")
    with pytest.raises(JobExecutionError, match=r"operator 'unseen' .*ZeroDivisionError"):
        execution_context.wait_for_async_jobs()  # what `streamjob run` does when the program returns
    assert unseen.get_job_status() == "FAILED"
    execution_context.wait_for_async_jobs()  # reported once


def test_min_by_and_max_by_keep_the_first_record_of_equal_values_as_pyflink():
    from streamjob.runtime import Row
    from streamjob.runtime.api.datastream import _ByReducer

    top = _ByReducer("max", 1)
    assert top(("a", 2, "first"), ("b", 2, "second")) == ("a", 2, "first")
    assert top(("a", 2), ("b", 3)) == ("b", 3)
    assert _ByReducer("min", "v")({"v": 1, "n": "x"}, {"v": 0, "n": "y"}) == {"v": 0, "n": "y"}
    assert _ByReducer("min", 1)(Row("a", 5), Row("b", 4)) == Row("b", 4)
    assert _ByReducer("min", 0)(3, 1) == 1  # a basic value is its own field 0
    with pytest.raises(TypeError, match=r"max_by\(1\) on a int record"):
        top(3, 4)
    env = StreamExecutionEnvironment.get_execution_environment()
    stream = env.from_collection([("a", 1)]).key_by(lambda t: t[0]).max_by(1)
    assert stream._t.kind == T.KEYED_REDUCE and stream._t.name == "MaxBy(1)"


# -- PyFlink semantics, not only names (issue 30, item 4) -----------------------------------------------
def test_from_collection_is_a_non_parallel_source_rebalanced_into_the_jobs_parallelism():
    # PyFlink's _from_collection calls forceNonParallel() on its source; Flink rebalances where the
    # parallelism changes, and its collect sink has one subtask.
    from streamjob.runtime.graph.job_graph import build_job_graph

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(3)
    env.from_collection([1, 2, 3]).map(str).sink_to(DiscardingSink())
    g = build_job_graph(env._transformations, env.get_config(), "t")
    assert [(t.name(g), t.parallelism) for t in g.tasks] == [("Source: Collection", 1),
                                                             ("Map -> Sink: Discard", 3)]
    (edge,) = [e for e in g.edges.values() if g.operators[e.target].name == "Map"]
    assert edge.partitioner == T.REBALANCE and g.parallelism == 3
    # an explicit parallelism still splits the elements (Flink refuses it on a non-parallel source)
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_collection([1, 2, 3]).set_parallelism(2).sink_to(DiscardingSink())
    g = build_job_graph(env._transformations, env.get_config(), "t")
    assert g.tasks[0].parallelism == 2


def test_execute_and_collect_with_a_limit_gives_the_first_elements_in_order(spark_slots):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    assert env.from_collection(list(range(1000))).execute_and_collect(limit=5) == [0, 1, 2, 3, 4]
    env.set_parallelism(2)
    got = env.from_collection(list(range(100))).map(lambda x: x * 2).execute_and_collect(limit=200)
    assert sorted(got) == list(range(0, 200, 2))


def test_changelog_state_backend_flag_is_recorded_as_in_pyflink():
    env = StreamExecutionEnvironment.get_execution_environment()
    assert env.is_changelog_state_backend_enabled() is None  # PyFlink: None until set
    assert env.enable_changelog_state_backend(True) is env
    assert env.is_changelog_state_backend_enabled() is True
    env.enable_changelog_state_backend(False)
    assert env.is_changelog_state_backend_enabled() is False


def test_pyflinks_type_variables_import_from_streamjob():
    # pyflink.datastream.functions / window / state define them outside __all__; programs import them
    import typing

    import streamjob.runtime as runtime
    from streamjob.runtime import IN, KEY, OUT, W  # noqa: F401

    for name in ("T", "K", "V", "W", "W2", "IN", "IN1", "IN2", "OUT", "KEY"):
        assert isinstance(getattr(runtime, name), typing.TypeVar) and getattr(runtime, name).__name__ == name
        assert name not in runtime.__all__  # as PyFlink: `import *` does not bring them

    from streamjob.runtime import KeyedProcessFunction

    class Typed(KeyedProcessFunction):
        def process_element(self, value: IN, ctx: "KeyedProcessFunction.Context") -> typing.Iterable[OUT]:
            yield value

    assert list(Typed().process_element(1, None)) == [1]


def test_plain_objects_with_the_fields_as_attributes_are_named_rows_as_in_pyflink():
    # PyFlink's RowTypeInfo.to_internal_type takes obj.__dict__.get(name) for each field name
    from streamjob.runtime import Row, Types
    from streamjob.runtime.api.types import as_row

    class Order:
        def __init__(self, id, amount, note=None):
            self.id, self.amount = id, amount
            if note is not None:
                self.note = note

    row_type = Types.ROW_NAMED(["id", "amount", "note"], [Types.INT(), Types.DOUBLE(), Types.STRING()])
    row = as_row(Order(1, 2.5, "x"), row_type)
    assert isinstance(row, Row) and row.as_dict() == {"id": 1, "amount": 2.5, "note": "x"}
    assert as_row(Order(2, 1.0), row_type).as_dict() == {"id": 2, "amount": 1.0, "note": None}
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_collection([Order(1, 2.5, "x")], type_info=row_type)  # accepted (was a TypeError)
    with pytest.raises(TypeError, match="cannot be a row"):
        as_row(42, row_type)


PRINTING_JOB = '''
import sys
from streamjob.runtime import MapFunction, StreamExecutionEnvironment

class Shout(MapFunction):
    def open(self, runtime_context):
        print("open", runtime_context.get_index_of_this_subtask())

    def map(self, value):
        print("saw", value)
        print("to stderr", value, file=sys.stderr)
        return value * 10

    def close(self):
        print("close", end="")  # no newline: still a line of its own at the end

env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(2)
env.from_collection([1, 2, 3]).map(Shout()).print()
env.execute("printing")
'''


def test_print_in_user_functions_goes_to_stdout_and_the_runtimes_notes_to_stderr(tmp_path):
    # PyFlink's Python workers print to the TaskManager's stdout (.out); stderr stays stderr
    job = tmp_path / "printing.py"
    job.write_text(PRINTING_JOB)
    r = run_cli("run", str(job))
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    assert sorted(line for line in out if line.startswith("open")) == ["open 0", "open 1"]
    assert sorted(line for line in out if line.startswith("saw")) == ["saw 1", "saw 2", "saw 3"]
    assert out.count("close") == 2
    printed = [line.split("> ")[-1] for line in out]  # PrintSink at parallelism 2: "1> 10"
    assert sorted(p for p in printed if p in ("10", "20", "30")) == ["10", "20", "30"]
    for word in ("open", "saw", "close"):
        assert not [line for line in r.stderr.splitlines() if line.startswith(word)], r.stderr
    assert sorted(line for line in r.stderr.splitlines() if line.startswith("to stderr")) == \
        ["to stderr 1", "to stderr 2", "to stderr 3"]
    assert "REST API" in r.stderr  # the runtime's notes


def test_a_slots_stdout_sends_whole_lines_and_gives_stdout_back():
    import sys

    from streamjob.runtime.task import user_output

    sent: list = []
    out = user_output.SlotOutput(sent.append)
    real = sys.stdout
    user_output.attach(out)
    try:
        print("a")
        print("b", end="")
        sys.stdout.write("c\nd")  # "d" has no newline yet
        assert out.pending and sent == []  # batched until the slot's loop (or 64 KiB, or flush) sends them
        print("e", flush=True)
        assert sent == [["a", "bc", "de"]]
        print("tail", end="")
        kept = sys.stdout
    finally:
        user_output.detach(out)
    assert sys.stdout is real and sent[-1] == ["tail"]  # the unended line goes at the end
    assert kept.encoding  # a reference kept past the slot still writes (to the real stdout)


def test_rolling_sum_of_named_rows_made_from_objects_keeps_each_keys_first_note(spark_slots):
    # PyFlink: objects become Rows of the ROW_NAMED type (their attributes), and KeyedStream.sum keeps
    # the first record's other fields (PyFlink's reduce returns v1 with only the summed field changed)
    from streamjob.runtime import Types

    class Order:
        def __init__(self, name, amount, note):
            self.name, self.amount, self.note = name, amount, note

    orders = [Order("a", 1, "first a"), Order("b", 10, "first b"), Order("a", 2, "second a"),
              Order("a", 3, "third a"), Order("b", 20, "second b")]
    row_type = Types.ROW_NAMED(["name", "amount", "note"], [Types.STRING(), Types.INT(), Types.STRING()])
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    got = env.from_collection(orders, type_info=row_type).key_by(lambda r: r["name"]).sum("amount") \
        .execute_and_collect(limit=10)
    per_key = {k: [(r["amount"], r["note"]) for r in got if r["name"] == k] for k in ("a", "b")}
    assert per_key == {"a": [(1, "first a"), (3, "first a"), (6, "first a")],
                       "b": [(10, "first b"), (30, "first b")]}


def test_configuration_has_pyflinks_typed_getters_and_setters():
    from streamjob.runtime import Configuration

    c = Configuration()
    c.set_integer("a", 3).set_boolean("b", True).set_float("f", 1.5)
    assert c.get_integer("a") == 3 and c.get_integer("missing", 7) == 7
    assert c.get_boolean("b") is True and c.get_boolean("missing", False) is False
    assert c.get_float("f") == 1.5 and c.get_string("missing", "x") == "x"
    assert c.key_set() == {"a", "b", "f"}
    d: dict = {}
    c.add_all_to_dict(d)
    assert d == {"a": 3, "b": True, "f": 1.5}
    assert Configuration().add_all(c, "job.").key_set() == {"job.a", "job.b", "job.f"}
    assert c.remove_config("a") is True and c.remove_config("a") is False and not c.contains_key("a")
