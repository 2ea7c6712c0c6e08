"""Per-operator parallelism, as Flink's ``set_parallelism`` / ``set_max_parallelism``.

Job graph (no Spark): operators of different parallelism are connected by rebalance where the
program left the edge forward, chains break there, an explicit forward() across a change is
refused, the job needs max(parallelism) slots, start_new_chain / disable_chaining / slot_sharing_group
cut chains, and each slot sharing group gets slots of its own (the job needs the sum). On real local
Spark: a job with source 1, map 3, keyed 2, sink 1 is exactly-once under random task kills, and a
savepoint of it restores with every operator's parallelism changed; a map in a slot sharing group of
its own is exactly-once under a random kill (aligned and unaligned checkpoints); outputs are compared
row for row with what one failure-free run computes (``tests/jobs/mixed_parallelism.py``).
"""

from __future__ import annotations

import os
import random
import time

import pytest

from jobs import mixed_parallelism as mixed
from streamjob.runtime import JobDefinitionError, KeyedProcessFunction, StreamExecutionEnvironment
from streamjob.runtime.api import transformations as T
from streamjob.runtime.checkpoint.storage import load_checkpoint
from streamjob.runtime.connectors import DiscardingSink
from streamjob.runtime.graph.job_graph import build_job_graph
from conftest import run_cli
from test_checkpointing import kill_tasks_at_random

HERE = os.path.dirname(__file__)


def graph_of(env):
    return build_job_graph(env._transformations, env.get_config(), "test")


def parallel_collection(env, items):
    """A collection source at the job's parallelism (from_collection is non-parallel, as PyFlink's)."""
    from streamjob.runtime.connectors.collection import CollectionSource

    return env.from_source(CollectionSource(list(items)), source_name="Collection")


def test_parallelism_per_operator_rebalances_where_it_changes_and_chains_break_there():
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    src = env.from_collection([{"k": 1}]).set_parallelism(1)
    mapped = src.map(lambda r: r).set_parallelism(3).filter(bool).set_parallelism(3)
    keyed = mapped.key_by("k").process(KeyedProcessFunction()).set_max_parallelism(64)
    keyed.map(str).sink_to(DiscardingSink()).set_parallelism(1)
    g = graph_of(env)
    assert [(t.name(g), t.parallelism) for t in g.tasks] == [
        ("Source: Collection", 1), ("Map -> Filter", 3), ("KeyedProcess -> Map (2)", 2), ("Sink: Discard", 1)]
    assert g.parallelism == 3  # slots: the largest parallelism
    assert g.default_parallelism == 2
    by_target = {g.operators[e.target].name: e for e in g.edges.values()}
    assert by_target["Map"].partitioner == T.REBALANCE  # 1 -> 3: left forward by the program
    assert by_target["Filter"].partitioner == T.FORWARD  # 3 -> 3: chained
    assert by_target["KeyedProcess"].partitioner == T.HASH
    assert by_target["Sink: Discard"].partitioner == T.REBALANCE  # 2 -> 1
    keyed_node = next(op for op in g.operators.values() if op.kind == T.KEYED_PROCESS)
    assert (keyed_node.parallelism, keyed_node.max_parallelism) == (2, 64)
    assert not g.uniform
    assert [v["parallelism"] for v in g.plan()["vertices"]] == [1, 3, 2, 1]


def test_a_job_without_set_parallelism_is_the_same_graph_as_before():
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(3)
    parallel_collection(env, [1]).map(str).key_by(lambda x: x).map(str).sink_to(DiscardingSink())
    g = graph_of(env)
    assert g.uniform and g.parallelism == 3 and all(t.parallelism == 3 for t in g.tasks)
    assert [t.name(g) for t in g.tasks] == ["Source: Collection -> Map", "Map (2) -> Sink: Discard"]


def test_explicit_forward_across_a_parallelism_change_is_refused():
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_collection([1]).set_parallelism(1).forward().map(str).set_parallelism(2).sink_to(DiscardingSink())
    with pytest.raises(JobDefinitionError, match=r"forward\(\) from 'Source: Collection' \(parallelism 1\) to "
                                                 r"'Map' \(parallelism 2\).*rebalance"):
        graph_of(env)


def test_chaining_hints_cut_chains():
    env = StreamExecutionEnvironment.get_execution_environment()
    s = env.from_collection([1])
    s.map(str).map(str).start_new_chain().map(str).sink_to(DiscardingSink())
    g = graph_of(env)
    assert [t.name(g) for t in g.tasks] == ["Source: Collection -> Map", "Map (2) -> Map (3) -> Sink: Discard"]

    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_collection([1]).map(str).disable_chaining().map(str).sink_to(DiscardingSink())
    g = graph_of(env)
    assert [t.name(g) for t in g.tasks] == ["Source: Collection", "Map", "Map (2) -> Sink: Discard"]

    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_collection([1]).map(str).slot_sharing_group("heavy").map(str).slot_sharing_group("heavy") \
        .sink_to(DiscardingSink())
    g = graph_of(env)
    # The sink names no group: it takes its input's ("heavy"), as in Flink, and chains to it.
    assert [(t.name(g), t.slot_sharing_group, t.first_slot) for t in g.tasks] == [
        ("Source: Collection", "default", 0), ("Map -> Map (2) -> Sink: Discard", "heavy", 1)]
    assert g.parallelism == 2  # a slot per group: groups never share one


def test_slot_sharing_groups_get_slots_of_their_own():
    """As Flink: a group's slots are as many as its largest parallelism, groups never share a slot, and an
    operator naming no group takes its inputs' when they agree, else "default"."""
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    src = parallel_collection(env, [{"k": 1}])
    heavy = src.map(lambda r: r).slot_sharing_group("heavy").set_parallelism(3)
    inherits = heavy.filter(bool)  # heavy, parallelism 2: rebalanced from the map, its own chain
    light = src.map(lambda r: r).slot_sharing_group("light").set_parallelism(1)
    joined = inherits.union(light).map(lambda r: r)  # inputs disagree: "default"
    joined.key_by("k").process(KeyedProcessFunction()).sink_to(DiscardingSink()).set_parallelism(1)
    g = graph_of(env)
    assert [(t.name(g), t.slot_sharing_group, t.parallelism, t.first_slot) for t in g.tasks] == [
        ("Source: Collection", "default", 2, 0), ("Map", "heavy", 3, 2), ("Filter", "heavy", 2, 2),
        ("Map (2)", "light", 1, 5), ("Map (3)", "default", 2, 0), ("KeyedProcess", "default", 2, 0),
        ("Sink: Discard", "default", 1, 0)]
    assert g.parallelism == 2 + 3 + 1  # default (2), heavy (3), light (1)
    src_to_map = next(e for e in g.edges.values() if g.operators[e.target].name == "Map")
    assert src_to_map.partitioner == T.REBALANCE
    assert g.tasks[1].subtask_in(4) == 2 and g.tasks[1].subtask_in(1) is None and g.tasks[3].subtask_in(4) is None
    assert "[slot sharing group 'heavy']" in g.describe()

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    parallel_collection(env, [1]).map(str).slot_sharing_group("heavy").map(str).slot_sharing_group("default") \
        .sink_to(DiscardingSink())
    g = graph_of(env)  # a forward edge into another group is no chain: it crosses slots
    assert [(t.name(g), t.first_slot) for t in g.tasks] == [
        ("Source: Collection", 0), ("Map", 2), ("Map (2) -> Sink: Discard", 0)]
    assert all(e.partitioner == T.FORWARD for e in g.edges.values()) and g.parallelism == 4


def test_not_enough_slots_names_the_slots_and_where_they_come_from():
    """The slots differ from the parallelism once a group or an operator has its own: the error says how
    many, from which group and operator, and what to change (it used to say "N slots (parallelism N)")."""
    from streamjob.runtime.cluster.spark import NotEnoughSlotsError, SlotReport, SparkDeployment
    from streamjob.runtime.graph.slots import slot_needs

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    parallel_collection(env, [1]).map(str).name("parse").sink_to(DiscardingSink()).name("files") \
        .slot_sharing_group("sink").set_parallelism(1)
    g = graph_of(env)
    assert g.parallelism == 3
    needs = slot_needs(g)
    # Checked before any JVM starts (the local master's slots are in its URL).
    with pytest.raises(NotEnoughSlotsError) as info:
        SparkDeployment({"spark.master": "local[2]"}, g.parallelism, "t", needs)
    text = str(info.value)
    for words in ("not enough slots: the job needs 3 slots", "2 for 'default' ('Source: Collection' at parallelism 2)",
                  "+ 1 for 'sink' ('Sink: files' at parallelism 1)", "master local[2] has 2",
                  "--master local[3]", "lower the parallelism (--parallelism)", "fewer slot sharing groups"):
        assert words in text, (words, text)
    assert "parallelism 3" not in text  # no operator has it
    text = SlotReport(3, "spark://m:7077", 1, 0, 2, 2, 2, needs=needs).message()
    assert "needs 3 slots, the sum over its 2 slot sharing groups" in text and "offers fewer" in text, text
    assert "spark.executor.instances" in text, text

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    parallel_collection(env, [1]).map(str).name("heavy").set_parallelism(4).sink_to(DiscardingSink())
    g = graph_of(env)
    with pytest.raises(NotEnoughSlotsError) as info:
        SparkDeployment({"spark.master": "local[2]"}, g.parallelism, "t", slot_needs(g))
    text = str(info.value)
    for words in ("needs 4 slots (operator 'heavy' has parallelism 4; the job's default is 2)", "--master local[4]",
                  "set_parallelism of 'heavy'"):
        assert words in text, (words, text)
    assert "slot sharing groups" not in text, text
    # One group, every operator at the job's parallelism: as before.
    assert "needs 3 slots (parallelism 3)" in SlotReport(3, "spark://m:7077", 1, 0, 2, 2, 2).message()


def test_streamjob_status_names_the_slots_when_they_differ_from_the_parallelism():
    from streamjob.runtime.cli_control import _slots

    assert _slots({"parallelism": 2, "slots": 2, "executors": None}) == ""
    assert _slots({"parallelism": 2, "slots": 4, "executors": None}) == ", 4 slots"
    assert _slots({"parallelism": 2, "slots": 4, "executors": 2}) == ", 4 slots on 2 executors"
    assert _slots({"parallelism": 2}) == ""  # a job manager of an earlier version


def test_bad_settings_say_what_is_wrong():
    env = StreamExecutionEnvironment.get_execution_environment()
    s = env.from_collection([1])
    with pytest.raises(ValueError, match="positive int"):
        s.set_parallelism(0)
    with pytest.raises(ValueError, match="key_by creates no operator.*KeyedStream"):
        s.key_by(lambda x: x).set_parallelism(2)
    s.map(str).set_parallelism(8).set_max_parallelism(4).sink_to(DiscardingSink())
    with pytest.raises(JobDefinitionError, match="operator 'Map': parallelism 8 is above its max parallelism 4"):
        graph_of(env)
    sink = env.from_collection([1]).sink_to(DiscardingSink())
    assert sink.set_parallelism(1) is sink and sink.disable_chaining() is sink


def test_streamjob_run_parallelism_is_the_default_of_operators_without_their_own(tmp_path):
    """The job sets parallelism 1 on its source and sink only: the map and the keyed operator take
    ``--parallelism``; the job needs 3 slots."""
    rows, subtasks = 3000, tmp_path / "subtasks"
    subtasks.mkdir()
    out = tmp_path / "out"
    proc = run_cli("run", os.path.join(HERE, "jobs", "mixed_parallelism.py"), "--parallelism", "3", "--no-progress",
                   "--", str(out), f"file://{tmp_path}/checkpoints", str(rows), "20000",
                   env={"MIXED_SUBTASKS": str(subtasks)})
    assert proc.returncode == 0, proc.stderr
    assert sorted(os.listdir(subtasks)) == ["totals-0-of-3", "totals-1-of-3", "totals-2-of-3"]
    assert mixed.committed(str(out)) == mixed.expected_rows(rows)


@pytest.mark.parametrize("group", [None, "heavy"])  # "heavy": the map runs in slot 4, as its subtask 1
def test_a_failure_names_the_subtask_of_the_operators_own_parallelism(spark_slots, group):
    from streamjob.runtime.cluster.executor import JobExecutionError
    from streamjob.runtime.connectors import DataGenSource

    def explode(x):
        if x == 1234:
            raise ValueError(f"bad record {x}")
        return x

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(3)
    mapped = env.from_source(DataGenSource(lambda i: i, count=5_000)).map(explode).name("explode").set_parallelism(1)
    if group:
        mapped.slot_sharing_group(group)
    mapped.sink_to(DiscardingSink()).slot_sharing_group("default")
    with pytest.raises(JobExecutionError, match=r"operator 'explode' \(subtask 1/1\) raised ValueError: bad record"):
        env.execute("failing")


def test_event_time_windows_across_parallelism_changes(spark_slots):
    """Source 1 -> timestamps 2 (not chained to the source: rebalanced) -> window 3: watermarks
    from subtasks of another parallelism hold the windows back until every input passed them."""
    from streamjob.runtime import Time, TumblingEventTimeWindows, WatermarkStrategy
    from streamjob.runtime.connectors import DataGenSource

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    rows = 6000
    source = env.from_source(DataGenSource(lambda i: {"key": i % 5, "t": i}, count=rows, rows_per_second=20_000),
                             None, "numbers").set_parallelism(1)
    stamped = source.assign_timestamps_and_watermarks(
        WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner("t"))  # the default: 2
    counts = stamped.map(lambda r: (r["key"], r["t"] // 1000, 1)).key_by(lambda r: r[0]) \
        .window(TumblingEventTimeWindows.of(Time.milliseconds(1000))) \
        .reduce(lambda a, b: (a[0], a[1], a[2] + b[2])).set_parallelism(3)
    got = sorted(counts.execute_and_collect())
    assert got == sorted((k, w, 200) for k in range(5) for w in range(rows // 1000))


def _run(env, name="mixed-parallelism"):
    return env.execute_async(name)


def test_mixed_parallelism_is_exactly_once_under_random_kills(spark_slots, tmp_path):
    rng = random.Random(int(time.time()))
    rows = 18_000
    out, checkpoints = str(tmp_path / "out"), str(tmp_path / "checkpoints")
    env = mixed.build(out, checkpoints, rows, rate=3000, interval_ms=rng.randint(200, 400))
    client = _run(env)
    killed = kill_tasks_at_random(client, 3, rng)
    result = client.get_job_execution_result(300)
    assert len(killed) >= 3, "the job finished before the test could kill 3 tasks"
    assert result.restarts >= 3
    assert sum(c["status"] == "COMPLETED" for c in result.checkpoints) > 0
    assert mixed.committed(out) == mixed.expected_rows(rows)


@pytest.mark.parametrize("unaligned", [False, True])
def test_slot_sharing_groups_are_exactly_once_under_random_kills(spark_slots, tmp_path, unaligned):
    """Source, keyed operator and sink at parallelism 2 in "default", the map at 2 in "heavy": 4 slots,
    the map's subtasks in slots 3-4 apart from everything else (forward edges from the source cross slots).
    Unaligned: in-flight data between the groups is channel state of each operator's own subtask."""
    rng = random.Random(int(time.time()))
    rows = 9000
    out, checkpoints = str(tmp_path / "out"), str(tmp_path / "checkpoints")
    env = mixed.build(out, checkpoints, rows, rate=3000, interval_ms=rng.randint(200, 400),
                      parallelism={"source": 2, "map": 2, "keyed": 2, "sink": 2},
                      groups={"map": "heavy", "keyed": "default"}, unaligned=unaligned)
    g = graph_of(env)
    assert [(t.name(g), t.first_slot) for t in g.tasks] == [
        ("Source: numbers", 0), ("Map", 2), ("KeyedProcess -> Sink: FileSink(jsonl)", 0)]
    client = _run(env, "slot-sharing-groups")
    killed = kill_tasks_at_random(client, 1, rng)
    assert client.job_manager.job_info()["slots"] == 4
    result = client.get_job_execution_result(300)
    assert len(killed) >= 1, "the job finished before the test could kill a task"
    assert result.restarts >= 1
    assert sum(c["status"] == "COMPLETED" for c in result.checkpoints) > 0
    assert mixed.committed(out) == mixed.expected_rows(rows)


def test_a_savepoint_restores_with_every_operators_parallelism_changed(spark_slots, tmp_path):
    rows = 16_000
    out, savepoints = str(tmp_path / "out"), str(tmp_path / "savepoints")
    env = mixed.build(out, str(tmp_path / "c1"), rows, rate=4000, interval_ms=250)
    client = _run(env)
    assert client.wait_until_running(60)
    info = client.job_manager.job_info()  # GET /v1/job: the job's parallelism, and the slots its graph asked for
    assert (info["parallelism"], info["slots"], info["executors"]) == (2, 3, None)
    deadline = time.monotonic() + 60
    while client.job_manager.coordinator.counts["COMPLETED"] < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)
    path = client.stop_with_savepoint(False, savepoints, timeout=120)
    client.get_job_execution_result(120)
    _, meta = load_checkpoint(path)
    assert meta.parallelism == 3  # the slots
    assert {k: (meta.operator_parallelism(k), meta.operator_max_parallelism(k)) for k in meta.operators} == {
        "numbers": (1, 128), "square": (3, 128), "totals": (2, 64), "files": (1, 128)}
    partial = len(mixed.committed(out))
    assert 0 < partial < rows, "the first run should stop in the middle"

    # max parallelism of an operator's keyed state is fixed by the first run
    env = mixed.build(out, str(tmp_path / "c2"), rows, rate=4000, restore=path, keyed_max=32)
    with pytest.raises(JobDefinitionError, match=r"max parallelism 64, this job has 32 \(operator 'KeyedProcess'\)"
                                                 r".*set_max_parallelism\(64\)"):
        env.execute("mixed-parallelism")

    env = mixed.build(out, str(tmp_path / "c3"), rows, rate=8000, restore=path,
                      parallelism={"source": 2, "map": 1, "keyed": 3, "sink": 2})
    env.execute("mixed-parallelism")
    assert mixed.committed(out) == mixed.expected_rows(rows)
