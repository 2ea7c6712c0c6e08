"""Logical plan -> job graph, without Spark: chaining, edges, definition errors."""

import pytest

from streamjob.runtime import JobDefinitionError, StreamExecutionEnvironment
from streamjob.runtime.api import transformations as T
from streamjob.runtime.connectors import DiscardingSink
from streamjob.runtime.graph.job_graph import build_job_graph


def graph_of(env):
    return build_job_graph(env._transformations, env.get_config(), "test")


def parallel_collection(env, items):
    """A collection source at the job's parallelism (from_collection is non-parallel, as PyFlink's)."""
    from streamjob.runtime.connectors.collection import CollectionSource

    return env.from_source(CollectionSource(list(items)), source_name="Collection")


def test_forward_operators_chain_and_key_by_cuts_the_chain():
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(3)
    parallel_collection(env, [1]).map(lambda x: x).filter(bool).key_by(lambda x: x).sum(0).sink_to(DiscardingSink())
    g = graph_of(env)
    assert [t.name(g) for t in g.tasks] == ["Source: Collection -> Map -> Filter", "Sum(0) -> Sink: Discard"]
    (edge,) = [g.edges[e] for e in g.tasks[1].input_edges]
    assert edge.partitioner == T.HASH and edge.key.fn is not None


def test_union_gives_one_operator_several_input_edges():
    env = StreamExecutionEnvironment.get_execution_environment()
    a, b = env.from_collection([1]), env.from_collection([2])
    a.union(b).map(lambda x: x).sink_to(DiscardingSink())
    g = graph_of(env)
    map_task = next(t for t in g.tasks if "Map" in t.name(g))
    assert len(map_task.input_edges) == 2
    assert all(g.edges[e].partitioner == T.FORWARD for e in map_task.input_edges)


def test_duplicate_names_are_told_apart():
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_collection([1]).map(str).map(str).sink_to(DiscardingSink())
    names = [op.name for op in graph_of(env).operators.values()]
    assert "Map" in names and "Map (2)" in names


def test_definition_errors_say_what_to_change():
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_collection([1]).map(str)
    with pytest.raises(JobDefinitionError, match="no sink"):
        graph_of(env)
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(200)
    env.from_collection([1]).sink_to(DiscardingSink())
    with pytest.raises(JobDefinitionError, match="exceeds max parallelism 128"):
        graph_of(env)
    with pytest.raises(TypeError, match="key_by needs"):
        env.from_collection([1]).key_by(3.5)
    with pytest.raises(ValueError, match="already used"):
        env.from_collection([1]).uid("a").map(str).uid("a")
    with pytest.raises(TypeError, match="needs a keyed stream"):
        from streamjob.runtime import KeyedProcessFunction

        env.from_collection([1]).process(KeyedProcessFunction())


def test_project_keeps_columns_on_arrow_batches_and_positions_on_tuples():
    import pyarrow as pa

    from streamjob.runtime.api.functions import RuntimeContext
    from streamjob.runtime.task.operators import create_operator

    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_collection([1]).project("b", "a").sink_to(DiscardingSink())
    node = next(op for op in graph_of(env).operators.values() if op.kind == T.PROJECT)
    op = create_operator(node, RuntimeContext("p", 0, 1, 128))
    out = []
    op.output.connect(lambda batch, ts: out.append(batch))
    op.open()
    op.process_batch(pa.RecordBatch.from_pylist([{"a": 1, "b": 2, "c": 3}]))
    assert isinstance(out[0], pa.RecordBatch) and out[0].to_pylist() == [{"b": 2, "a": 1}]
    node.params["fields"] = (1, 0)
    op.open()
    op.process_batch([(1, 2, 3)])
    assert out[1] == [(2, 1)]


def test_plan_lists_tasks_with_their_chained_operators_and_every_edge():
    """What GET /v1/job and the dashboard draw: chains, partitioners with their keys, side outputs."""
    from streamjob.runtime import KeyedProcessFunction, OutputTag

    late = OutputTag("late")
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    split = parallel_collection(env, [{"k": 1}]).uid("src").map(lambda r: r).key_by("k").process(KeyedProcessFunction())
    split.sink_to(DiscardingSink())
    split.get_side_output(late).rebalance().sink_to(DiscardingSink())
    g = graph_of(env)
    plan = g.plan()
    assert [(v["id"], v["name"], v["parallelism"]) for v in plan["vertices"]] == [
        (1, "Source: Collection -> Map", 2), (2, "KeyedProcess -> Sink: Discard", 2), (3, "Sink: Discard (2)", 2)]
    assert [[(op["name"], op["kind"], op["uid"]) for op in v["operators"]] for v in plan["vertices"]] == [
        [("Source: Collection", T.SOURCE, "src"), ("Map", T.MAP, None)],
        [("KeyedProcess", T.KEYED_PROCESS, None), ("Sink: Discard", T.SINK, None)],
        [("Sink: Discard (2)", T.SINK, None)]]
    ids = {op.name: str(op.id) for op in g.operators.values()}  # the keys of the tasks' metric reports
    assert [op["id"] for v in plan["vertices"] for op in v["operators"]] == [
        ids[n] for n in ("Source: Collection", "Map", "KeyedProcess", "Sink: Discard", "Sink: Discard (2)")]
    edges = {(e["source"], e["target"]): e for e in plan["edges"]}
    assert edges[(ids["Source: Collection"], ids["Map"])] == {
        "source": ids["Source: Collection"], "target": ids["Map"], "source_vertex": 1, "target_vertex": 1,
        "partitioner": "FORWARD", "key": None, "side_output": None, "input": 0, "chained": True}
    keyed = edges[(ids["Map"], ids["KeyedProcess"])]
    assert (keyed["partitioner"], keyed["key"], keyed["chained"], keyed["source_vertex"], keyed["target_vertex"]) \
        == ("HASH", "'k'", False, 1, 2)
    side = edges[(ids["KeyedProcess"], ids["Sink: Discard (2)"])]
    assert (side["partitioner"], side["side_output"], side["chained"]) == ("REBALANCE", "late", False)
    assert len(plan["edges"]) == 4
    import json

    assert json.loads(json.dumps(plan)) == plan  # served as JSON as it is


def test_parallelism_overrides_from_the_configuration_set_job_vertices_above_the_program():
    """pipeline.jobvertex-parallelism-overrides (what the operator passes a redeploy so that the job keeps
    what its autoscaler chose): by uid, else op<n>; a key sets its chain (a job vertex, as a rescale
    request names it); kept by a later rescale; bad values named."""
    from streamjob.runtime import Configuration
    from streamjob.runtime.config import ConfigError

    def build(overrides, plan: bool = False):
        env = StreamExecutionEnvironment.get_execution_environment(
            Configuration({"pipeline.jobvertex-parallelism-overrides": overrides}))
        env.set_parallelism(2)
        keyed = parallel_collection(env, [1, 2]).key_by(lambda x: x)
        keyed.reduce(lambda a, b: a + b).uid("counts").sink_to(DiscardingSink())
        return env.get_execution_plan() if plan else env._build("test")

    def parallelism(g):
        return {op.state_key: op.parallelism for op in g.operators.values()}

    g = build("counts:5")
    assert parallelism(g) == {"op1": 2, "counts": 5, "op3": 5}  # the sink is chained to the counts
    assert [t.name(g) for t in g.tasks] == ["Source: Collection", "Reduce -> Sink: Discard"]
    assert parallelism(g.rescaled(4)) == {"op1": 4, "counts": 5, "op3": 5}  # kept by a rescale of the job
    assert parallelism(build("op3:3, op1:1")) == {"op1": 1, "counts": 3, "op3": 3}  # any member names its chain
    assert parallelism(build({"counts": 3})) == {"op1": 2, "counts": 3, "op3": 3}  # a mapping (a job's own)
    assert parallelism(build("")) == {"op1": 2, "counts": 2, "op3": 2}
    assert "Reduce -> Sink: Discard [parallelism 5]" in build("counts:5", plan=True)  # the plan shows what runs

    with pytest.raises(JobDefinitionError, match=r"configuration pipeline.jobvertex-parallelism-overrides: no "
                                                 r"operator 'sums' in job 'test'; its operators are 'op1', 'counts', "
                                                 r"'op3'"):
        build("sums:3")
    with pytest.raises(JobDefinitionError, match=r"'counts' and 'op3' are chained in one task"):
        build("counts:3,op3:4")
    for bad in ("counts:0", "counts", "counts:x", ":3"):
        with pytest.raises(ConfigError, match="pipeline.jobvertex-parallelism-overrides: .* expected e.g."):
            build(bad)
