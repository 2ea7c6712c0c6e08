"""Every public name of PyFlink's DataStream modules imports from streamjob or says why not, and the
errors a PyFlink user meets first say what to write instead. No Spark here: these run in seconds.

The names come from runtime/api/pyflink_names.json, which tools/pyflink_names.py reads from the
apache-flink wheels of PyPI (the wheel's files parsed with ast, not installed); a test below runs
its parser on a wheel built here, so the data's origin is checked without the network.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import typing
import zipfile
from pathlib import Path

import pytest

import streamjob.runtime as runtime
import streamjob.runtime.connectors as connectors
from conftest import run_cli
from streamjob.runtime import (
    AggregatingState,
    AggregatingStateDescriptor,
    CountSlidingWindowAssigner,
    CountTumblingWindowAssigner,
    CountWindow,
    FileSystemCheckpointStorage,
    FsStateBackend,
    Instant,
    JobManagerCheckpointStorage,
    JobStatus,
    ListState,
    ListStateDescriptor,
    MapState,
    MapStateDescriptor,
    MemoryStateBackend,
    NumberSequenceSource,
    PyFlinkNotSupported,
    ReducingState,
    ReducingStateDescriptor,
    RocksDBStateBackend,
    Row,
    StateTtlConfig,
    StreamExecutionEnvironment,
    Time,
    TimeCharacteristic,
    Types,
    ValueState,
    ValueStateDescriptor,
)
from streamjob.runtime.api import pyflink_names, unsupported
from streamjob.runtime.api.pyflink_import import PyFlinkImportError
from streamjob.runtime.api.types import print_string
from streamjob.runtime.checkpoint.storage import normalize_url
from streamjob.runtime.config import Configuration
from streamjob.runtime.connectors import END
from streamjob.runtime.state.backends import create_keyed_backend

ROOT = Path(__file__).parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import pyflink_names as names_tool  # noqa: E402  (tools/pyflink_names.py)


def target(module: str):
    return importlib.import_module(pyflink_names.streamjob_module(module))


def importable(module: str, name: str) -> bool:
    try:
        getattr(target(module), name)
        return True
    except (AttributeError, PyFlinkNotSupported):
        return False


def test_every_public_pyflink_name_imports_or_is_in_the_one_table_with_its_reason():
    data = pyflink_names.load()
    assert data["versions"] == ["1.20.5", "2.3.0"]
    pairs = pyflink_names.all_names()
    assert len(pairs) > 250 and ("pyflink.datastream.state", "ReducingState") in pairs
    missing = [f"{m}.{n}" for m, n in pairs if not importable(m, n) and n not in unsupported.NAMES]
    assert not missing, f"neither importable nor in api/unsupported.NAMES: {missing}"
    # Both ways: an entry never shadows a name that imports (implementing one means dropping its entry;
    # after the Kafka branches merge, this names the "being added" entries to drop)...
    shadowing = sorted({n for m, n in pairs if n in unsupported.NAMES and importable(m, n)})
    assert not shadowing, f"importable, so drop them from api/unsupported.NAMES: {shadowing}"
    # ... and every entry is a PyFlink name, with a reason and an alternative.
    assert set(unsupported.NAMES) <= {n for _, n in pairs}
    for name, (why, instead) in unsupported.NAMES.items():
        assert why and instead and not why.endswith(".") and not instead.endswith("."), name
    # The names the issue found missing are real now.
    for name in ("ReducingState", "AggregatingState", "TimeCharacteristic", "NumberSequenceSource",
                 "CountSlidingWindowAssigner", "CountTumblingWindowAssigner", "ValueState", "Window",
                 "ContinuousEventTimeTrigger", "DynamicEventTimeSessionWindows", "FileSystemCheckpointStorage"):
        assert name not in unsupported.NAMES and getattr(runtime, name)


def test_an_unsupported_name_says_why_and_what_instead_and_is_an_import_error():
    with pytest.raises(ImportError) as e:
        from streamjob.runtime import TypeSerializer  # noqa: F401
    assert isinstance(e.value, PyFlinkNotSupported) and isinstance(e.value, NotImplementedError)
    assert str(e.value) == ("PyFlink's TypeSerializer is not supported by streamjob: records and state are pickled "
                            "Python objects (dict records travel as Arrow): there are no type serializers. "
                            "Instead: drop it")
    with pytest.raises(PyFlinkNotSupported, match=r"PyFlink's JdbcSink is not supported by streamjob: a connector "
                                                  r"of Flink's Java side"):
        from streamjob.runtime.connectors import JdbcSink  # noqa: F401
    # pyflink.common's schemas are looked up among the connectors
    assert runtime.SimpleStringSchema is connectors.SimpleStringSchema
    with pytest.raises(PyFlinkNotSupported, match="SerializationSchema is not supported"):
        _ = runtime.SerializationSchema
    # Names PyFlink does not have stay ordinary AttributeErrors (hasattr probes keep working).
    assert not hasattr(runtime, "NoSuchThing") and not hasattr(connectors, "NoSuchThing")
    assert importlib.import_module("streamjob.runtime.connectors.file_system").FileSink is connectors.FileSink


def test_the_docs_show_the_table_made_from_the_same_data():
    page = (ROOT / "docs" / "api" / "pyflink-unsupported.md").read_text()
    assert pyflink_names.replace_readme_table(page) == page, \
        "docs/api/pyflink-unsupported.md's table of unsupported PyFlink names is stale: run python " \
        "tools/pyflink_names.py --docs"
    table = pyflink_names.readme_table()
    for name, (why, _) in unsupported.NAMES.items():
        assert f"`{name}`" in table and why in table


def test_the_names_tool_reads_all_and_generic_classes_from_a_wheel_without_installing_it(tmp_path):
    wheel = tmp_path / "apache_flink-9.9.9-cp311-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("pyflink/datastream/__init__.py", "from .x import A\n__all__ = ['A', 'B', 'A']\n")
        z.writestr("pyflink/datastream/functions.py",
                   "from typing import Generic\n__all__ = ['Fn']\n"
                   "class Fn(Function, Generic[IN]):\n    class Context(ABC, Generic[W]):\n        pass\n"
                   "class _Internal(Generic[T]):\n    pass\n")
        z.writestr("pyflink/common/watermark_strategy.py", "class WatermarkStrategy:\n    pass\nclass _Hidden:\n"
                                                           "    pass\ndef helper():\n    pass\n")
        z.writestr("pyflink/datastream/connectors/kafka.py", "__all__ = ['KafkaSource']\n")
        z.writestr("pyflink/datastream/connectors/tests/test_x.py", "__all__ = ['NotThis']\n")
        z.writestr("pyflink/table/__init__.py", "__all__ = ['TableEnvironment']\n")
    names, generic = names_tool.read_wheel(str(wheel))
    assert names == {"pyflink.datastream": ["A", "B"], "pyflink.datastream.functions": ["Fn"],
                     "pyflink.common.watermark_strategy": ["WatermarkStrategy", "helper"],
                     "pyflink.datastream.connectors.kafka": ["KafkaSource"]}
    assert generic == ["pyflink.datastream.functions.Fn", "pyflink.datastream.functions.Fn.Context"]
    # The committed data is the tool's output format, with PyFlink's own names in it.
    data = json.loads((ROOT / "runtime" / "api" / "pyflink_names.json").read_text())
    assert data["only_in"]["pyflink.datastream.TimeCharacteristic"] == ["1.20.5"]
    assert "pyflink.datastream.functions.ProcessWindowFunction.Context" in data["generic"]


def test_every_generic_pyflink_class_and_every_function_context_can_be_subscripted():
    data = pyflink_names.load()
    checked = 0
    for qualified in data["generic"]:
        parts = qualified.split(".")
        top = next(i for i, p in enumerate(parts) if p[:1].isupper())
        obj = getattr(runtime, parts[top], None) if parts[top] not in unsupported.NAMES else None
        if obj is None:
            continue
        for nested in parts[top + 1:]:
            obj = getattr(obj, nested)
        params = (int,) * max(1, len(getattr(obj, "__parameters__", ())))  # typing.Generic counts them
        assert obj[params if len(params) > 1 else int] is not None, qualified  # e.g. ....Context[TimeWindow]
        checked += 1
    assert checked >= 30
    for cls in (runtime.ProcessFunction, runtime.KeyedProcessFunction, runtime.CoProcessFunction,
                runtime.KeyedCoProcessFunction, runtime.BroadcastProcessFunction,
                runtime.KeyedBroadcastProcessFunction, runtime.ProcessWindowFunction, runtime.ProcessAllWindowFunction):
        for name in dir(cls):
            if name.endswith("Context"):
                assert getattr(cls, name)[runtime.TimeWindow] is getattr(cls, name), f"{cls.__name__}.{name}"
    hint = typing.get_type_hints(_annotated)  # annotations as a real program writes them resolve
    assert hint["ctx"] is runtime.ProcessWindowFunction.Context


def _annotated(ctx: "runtime.ProcessWindowFunction.Context[runtime.TimeWindow]") -> None: ...


@pytest.mark.parametrize("backend", ["hashmap", "rocksdb"])
def test_the_state_interfaces_are_what_every_backend_returns(backend, tmp_path):
    conf = Configuration({"state.backend.type": backend, "state.backend.rocksdb.localdir": str(tmp_path)})
    b = create_keyed_backend(conf, "op", 128, range(0, 128), None)
    b.current_key = "k"
    ttl = StateTtlConfig.new_builder(Time.seconds(60)).build()

    class Avg(runtime.AggregateFunction):
        def create_accumulator(self):
            return 0, 0

        def add(self, value, acc):
            return acc[0] + value, acc[1] + 1

        def get_result(self, acc):
            return acc[0] / acc[1]

    for with_ttl in (False, True):
        sfx = "-ttl" if with_ttl else ""
        ds = [ValueStateDescriptor("v" + sfx), ListStateDescriptor("l" + sfx), MapStateDescriptor("m" + sfx),
              ReducingStateDescriptor("r" + sfx, lambda a, c: a + c), AggregatingStateDescriptor("a" + sfx, Avg())]
        if with_ttl:
            for d in ds:
                d.enable_time_to_live(ttl)
        v, lst, m, r, a = (b.get_state(ds[0]), b.get_list_state(ds[1]), b.get_map_state(ds[2]),
                           b.get_reducing_state(ds[3]), b.get_aggregating_state(ds[4]))
        assert isinstance(v, ValueState) and isinstance(lst, ListState) and isinstance(m, MapState)
        assert isinstance(r, ReducingState) and isinstance(a, AggregatingState)
        assert not isinstance(v, ListState) and not isinstance(r, AggregatingState)
        r.add(2), r.add(3), a.add(2), a.add(4)
        assert (r.get(), a.get()) == (5, 3.0)


def test_time_characteristic_type_info_and_key_type_keywords_as_pyflink():
    env = StreamExecutionEnvironment.get_execution_environment()
    assert env.get_stream_time_characteristic() is TimeCharacteristic.EventTime
    env.set_stream_time_characteristic(TimeCharacteristic.ProcessingTime)  # as Flink: periodic watermarks off
    assert env.get_config().get_auto_watermark_interval() == 0
    env.set_stream_time_characteristic(TimeCharacteristic.IngestionTime)
    assert env.get_config().get_auto_watermark_interval() == 200
    with pytest.raises(TypeError, match="TimeCharacteristic"):
        env.set_stream_time_characteristic("EventTime")
    numbers = env.from_source(NumberSequenceSource(1, 3), runtime.WatermarkStrategy.no_watermarks(), "n")
    assert numbers.get_type() == Types.LONG()  # the source's own type, as PyFlink's
    typed = env.from_source(NumberSequenceSource(1, 3), runtime.WatermarkStrategy.no_watermarks(), "n",
                            type_info=Types.STRING())
    assert typed.get_type() == Types.STRING() and typed.get_name() == "n"
    keyed = typed.key_by(lambda x: x, key_type=Types.STRING()).filter(lambda x: True)
    assert keyed.get_type() == Types.STRING()  # filter keeps the type
    assert typed.key_by(lambda x: x, key_type_info=Types.STRING()).map(str).get_type() == Types.PICKLED_BYTE_ARRAY()
    assert typed.connect(typed).key_by(lambda x: x, lambda x: x, key_type=Types.STRING()) is not None
    assert JobStatus("RUNNING") == "RUNNING" and JobStatus.FINISHED.is_globally_terminal_state()
    assert Instant.of_epoch_milli(1500).to_epoch_milli() == 1500 and Instant.of_epoch_milli(-1) == Instant(-1, 999_000_000)


def test_checkpoint_storage_and_flink_1_backends_set_what_they_name(tmp_path):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.get_checkpoint_config().set_checkpoint_storage(FileSystemCheckpointStorage(str(tmp_path / "c")))
    assert env.get_checkpoint_config().get_checkpoint_storage() == f"file://{tmp_path}/c"
    env.get_checkpoint_config().set_checkpoint_storage(JobManagerCheckpointStorage())
    assert env.get_checkpoint_config().get_checkpoint_storage() == normalize_url("memory://")
    env.set_state_backend(FsStateBackend(f"file://{tmp_path}/fs", f"file://{tmp_path}/sp"))
    assert env.get_checkpoint_config().get_checkpoint_storage() == f"file://{tmp_path}/fs"
    assert env.get_default_savepoint_directory() == f"file://{tmp_path}/sp" and env.get_state_backend() == "hashmap"
    env.set_state_backend(RocksDBStateBackend(f"file://{tmp_path}/r", True))
    assert env.get_state_backend() == "rocksdb" and env.get_checkpoint_config().is_incremental()
    env.set_state_backend(MemoryStateBackend())
    assert env.get_state_backend() == "hashmap"
    assert env.get_checkpoint_config().get_checkpoint_storage() == normalize_url("memory://")


def test_count_window_assigners_number_windows_as_pyflink():
    # PyFlink's CountSlidingWindowAssigner.assign_windows, element by element (newest window first)
    sliding = CountSlidingWindowAssigner.of(3, 2)
    assert [[w.id for w in sliding.assign_count_windows(n)] for n in range(6)] == [[0], [0], [1, 0], [1], [2, 1], [2]]
    gaps = CountSlidingWindowAssigner(2, 3)  # slide > size: some elements are in no window
    assert [[w.id for w in gaps.assign_count_windows(n)] for n in range(7)] == [[0], [0], [], [1], [1], [], [2]]
    assert CountTumblingWindowAssigner.of(3).assign_count_windows(7) == [CountWindow(2)]
    with pytest.raises(ValueError, match="positive"):
        CountSlidingWindowAssigner(0, 1)
    env = StreamExecutionEnvironment.get_execution_environment()
    keyed = env.from_collection([1]).key_by(lambda x: x)
    assert type(keyed.count_window(5)._params["assigner"]) is CountTumblingWindowAssigner
    assert type(keyed.count_window(5, 0)._params["assigner"]) is CountTumblingWindowAssigner
    assert type(keyed.count_window(5, 2)._params["assigner"]) is CountSlidingWindowAssigner


def test_a_merging_assigner_with_its_own_merge_rule_is_refused():
    class Custom(runtime.EventTimeSessionWindows):
        def merge_windows(self, windows, callback):
            pass

    keyed = StreamExecutionEnvironment.get_execution_environment().from_collection([1]).key_by(lambda x: x)
    with pytest.raises(PyFlinkNotSupported, match=r"Custom.merge_windows\(\) is not supported .*session windows"):
        keyed.window(Custom(Time.seconds(1)))
    merged = []

    class Callback(runtime.MergingWindowAssigner.MergeCallback):
        def merge(self, to_be_merged, merge_result):
            merged.append((to_be_merged, merge_result))

    tw = runtime.TimeWindow
    runtime.EventTimeSessionWindows.with_gap(Time.seconds(1)).merge_windows([tw(0, 5), tw(4, 8), tw(10, 12)], Callback())
    assert merged == [([tw(0, 5), tw(4, 8)], tw(0, 8))]


def test_number_sequence_source_splits_the_range_and_resumes_at_its_position():
    source = NumberSequenceSource(1, 10)
    assert source.splits(3) == [[1, 4], [5, 7], [8, 10]]
    from streamjob.runtime.connectors.number_seq import NumberSequenceReader

    reader = NumberSequenceReader([5, 7], batch_size=2)
    assert reader.poll() == [5, 6]
    state = reader.snapshot_state()
    restored = NumberSequenceReader([0, -1], batch_size=2)
    restored.restore_state(state)
    assert restored.poll() == [7] and restored.poll() is END
    with pytest.raises(ValueError, match="greater"):
        NumberSequenceSource(5, 1)


def test_print_string_is_pyflinks_for_each_declared_type():
    assert print_string(Row(name="A", age=3), None) == "Row(name='A', age=3)"
    assert print_string((1, "a"), None) == "(1, 'a')" and print_string("s", None) == "s"
    named = Types.ROW_NAMED(["decade", "name"], [Types.INT(), Types.STRING()])
    assert print_string(Row(name="Bob", decade=4), named) == "+I[4,Bob]"  # taken by the type's names
    assert print_string((1, None, True), Types.ROW([Types.INT(), Types.STRING(), Types.BOOLEAN()])) == "+I[1,None,True]"
    assert print_string(0.1, Types.FLOAT()) == "0.1" and print_string(1e7, Types.DOUBLE()) == "1.0E7"
    assert print_string(1.5e-4, Types.DOUBLE()) == "1.5E-4" and print_string(100.0, Types.DOUBLE()) == "100.0"
    assert print_string(None, Types.STRING()) == "null" and print_string(False, Types.BOOLEAN()) == "false"
    assert print_string((1, Row(2, True)), Types.TUPLE([Types.INT(), Types.ROW([Types.INT(), Types.BOOLEAN()])])) \
        == "(1,+I[2, true])"
    # java.util.HashMap's iteration order (String.hashCode buckets), as Java prints the map
    assert print_string({"a": 1, "b": 2, "c": 3, "aa": 4}, Types.MAP(Types.STRING(), Types.INT())) == "{aa=4, a=1, b=2, c=3}"


def test_import_pyflink_names_the_line_what_to_write_and_the_mapping(tmp_path):
    job = tmp_path / "job.py"
    job.write_text("import streamjob.runtime\n\nfrom pyflink.datastream.window import (TumblingEventTimeWindows,\n"
                   "                                     CountWindow)\n")
    r = subprocess.run([sys.executable, str(job)], capture_output=True, text=True)
    assert r.returncode == 1 and "PyFlinkImportError: No module named 'pyflink': this is streamjob" in r.stderr
    assert f"{job}, line 3: from pyflink.datastream.window import (TumblingEventTimeWindows," in r.stderr
    assert "write instead: from streamjob.runtime import (TumblingEventTimeWindows," in r.stderr
    assert "pyflink.datastream.connectors, pyflink.datastream.connectors.*  ->  streamjob.runtime.connectors" in r.stderr
    with pytest.raises(ImportError):  # still an ImportError: `try: import pyflink` probes work
        import pyflink  # noqa: F401
    with pytest.raises(PyFlinkImportError, match="Table API and SQL are not part of streamjob"):
        from pyflink.table import TableEnvironment  # noqa: F401
    # `streamjob run` shows it without a traceback, before any JVM or job.
    job.write_text("from pyflink.common import Row, Types\n")
    r = run_cli("run", str(job))
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "line 1: from pyflink.common import Row, Types\n  write instead: from streamjob.runtime import Row, Types" \
        in r.stderr


def test_port_imports_changes_only_pyflink_import_lines():
    source = ("from pyflink.common import Types\nfrom pyflink.datastream.connectors.kafka import KafkaSource\n"
              "    from pyflink.datastream.state import ValueState\nx = 'from pyflink.common import Types'\n")
    assert pyflink_names.port_imports(source) == (
        "from streamjob.runtime import Types\nfrom streamjob.runtime.connectors import KafkaSource\n"
        "    from streamjob.runtime import ValueState\nx = 'from pyflink.common import Types'\n")
    with pytest.raises(ValueError, match="no streamjob counterpart"):
        pyflink_names.port_imports("from pyflink.table import TableEnvironment\n")
