"""Side outputs (OutputTag): ``yield tag, value`` and ``ctx.output(tag, value)`` as in PyFlink.

A tagged value reaches only its side output, never the main output; side outputs are channels
like any other, so they are part of checkpoints and exactly once under task kills (compared row
for row with the failure-free result).
"""

from __future__ import annotations

import glob
import json
import os
import random
import time

import pytest

from streamjob.runtime import (
    ExternalizedCheckpointRetention,
    KeyedProcessFunction,
    OutputTag,
    ProcessFunction,
    RestartStrategies,
    StreamExecutionEnvironment,
    ValueStateDescriptor,
)
from streamjob.runtime.api import transformations as T
from streamjob.runtime.connectors import DataGenSource, DiscardingSink, FileSink
from streamjob.runtime.graph.job_graph import build_job_graph
from test_checkpointing import kill_tasks_at_random

SEVENS = OutputTag("sevens")  # yield tag, value
FIVES = OutputTag("fives")  # ctx.output(tag, value)
UNREAD = OutputTag("unread")  # nobody reads it: its values go nowhere, least of all the main output
KEYS = 30  # a multiple of the parallelism: each key comes from one source subtask, in order


class Split(KeyedProcessFunction):
    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", default=0))

    def process_element(self, row, ctx):
        c = self.count.value() + 1
        self.count.update(c)
        i = row["i"]
        if i % 7 == 0:
            yield SEVENS, {"i": i, "count": c}
        if i % 5 == 0:
            ctx.output(FIVES, {"i": i, "count": c})
        if i % 11 == 0:
            yield UNREAD, {"i": i}
        yield {"i": i, "count": c}


def expected(rows: int) -> dict[str, list[tuple]]:
    counts: dict[int, int] = {}
    out: dict[str, list[tuple]] = {"main": [], "sevens": [], "fives": []}
    for i in range(rows):
        k = i % KEYS
        counts[k] = counts.get(k, 0) + 1
        out["main"].append((i, counts[k]))
        if i % 7 == 0:
            out["sevens"].append((i, counts[k]))
        if i % 5 == 0:
            out["fives"].append((i, counts[k] * 10))  # the fives go through a map (x10)
    return {k: sorted(v) for k, v in out.items()}


def committed(path: str) -> list[tuple]:
    rows = []
    for f in glob.glob(os.path.join(path, "*")):  # glob skips the sink's hidden in-progress files
        with open(f) as fh:
            rows += [(r["i"], r["count"]) for r in map(json.loads, fh)]
    return sorted(rows)


def build(tmp_path, rows: int, rate: float | None, checkpoints: str | None = None) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(3)  # kill_tasks_at_random kills when at least 3 tasks run
    if checkpoints:
        env.enable_checkpointing(300)
        config = env.get_checkpoint_config()
        config.set_checkpoint_storage(checkpoints)
        config.set_externalized_checkpoint_retention(ExternalizedCheckpointRetention.RETAIN_ON_CANCELLATION)
        env.set_restart_strategy(RestartStrategies.fixed_delay_restart(20, 100))
    numbers = env.from_source(DataGenSource(lambda i: {"key": i % KEYS, "i": i}, count=rows, rows_per_second=rate))
    split = numbers.key_by("key").process(Split()).uid("split")
    split.sink_to(FileSink.jsonl(str(tmp_path / "main"))).uid("main-sink")
    # chained: a forward side output runs in the same task as the function that emits it
    split.get_side_output(FIVES).map(lambda r: {"i": r["i"], "count": r["count"] * 10}) \
        .sink_to(FileSink.jsonl(str(tmp_path / "fives"))).uid("fives-sink")
    # through a channel: keyed again
    split.get_side_output(SEVENS).key_by(lambda r: r["i"] % 3) \
        .sink_to(FileSink.jsonl(str(tmp_path / "sevens"))).uid("sevens-sink")
    return env


def test_side_output_edges_carry_their_tag_and_chain_like_any_edge():
    env = build_path_free_env()
    g = build_job_graph(env._transformations, env.get_config(), "t")
    split = next(op for op in g.operators.values() if op.name == "KeyedProcess")
    tags = sorted((g.edges[e].tag or "", g.edges[e].partitioner) for e in split.outputs)
    assert tags == [("", T.FORWARD), ("fives", T.FORWARD), ("sevens", T.HASH)]
    task = next(t for t in g.tasks if split.id in t.operators)
    # the main output's sink and the fives' map and sink are chained in; the sevens' sink is not
    assert sorted(g.operators[o].name for o in task.operators) == [
        "KeyedProcess", "Map", "Sink: Discard", "Sink: Discard (2)"]


def build_path_free_env() -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment()
    split = env.from_collection([{"key": 1, "i": 1}]).key_by("key").process(Split())
    split.sink_to(DiscardingSink())
    split.get_side_output(FIVES).map(lambda r: r).sink_to(DiscardingSink())
    split.get_side_output(SEVENS).key_by(lambda r: r["i"]).sink_to(DiscardingSink())
    return env


def test_get_side_output_errors_say_what_to_change():
    env = StreamExecutionEnvironment.get_execution_environment()
    stream = env.from_collection([1, 2])
    with pytest.raises(ValueError, match="needs the stream a process function returns"):
        stream.map(str).get_side_output(SEVENS)
    with pytest.raises(TypeError, match="needs an OutputTag"):
        stream.process(lambda x, ctx: [x]).get_side_output("sevens")
    with pytest.raises(ValueError, match="non-empty name"):
        OutputTag("")
    assert OutputTag("a") == OutputTag("a", None) and OutputTag("a") != OutputTag("b")


@pytest.mark.spark
def test_tagged_values_reach_only_their_side_output(spark_slots, tmp_path):
    rows = 3000
    build(tmp_path, rows, rate=None).execute("side-outputs")
    want = expected(rows)
    for name in ("main", "sevens", "fives"):
        assert committed(str(tmp_path / name)) == want[name], name


@pytest.mark.spark
def test_process_function_side_output_in_a_non_keyed_process(spark_slots, tmp_path):
    class Odd(ProcessFunction):
        def process_element(self, x, ctx):
            if x % 2:
                ctx.output(SEVENS, {"i": x, "count": 0})
            else:
                yield {"i": x, "count": 1}

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    odd = env.from_collection(list(range(100))).process(Odd())
    odd.sink_to(FileSink.jsonl(str(tmp_path / "even")))
    odd.get_side_output(SEVENS).sink_to(FileSink.jsonl(str(tmp_path / "odd")))
    env.execute()
    assert committed(str(tmp_path / "even")) == [(i, 1) for i in range(0, 100, 2)]
    assert committed(str(tmp_path / "odd")) == [(i, 0) for i in range(1, 100, 2)]


@pytest.mark.spark
def test_side_outputs_are_exactly_once_under_random_task_kills(spark_slots, tmp_path):
    rng = random.Random(int(time.time()))
    rows = 30_000
    env = build(tmp_path, rows, rate=5000, checkpoints=str(tmp_path / "checkpoints"))
    client = env.execute_async("side-outputs")
    killed = kill_tasks_at_random(client, 3, rng)
    result = client.get_job_execution_result(300)
    assert len(killed) >= 3 and result.restarts >= 3, "the job finished before the test could kill 3 tasks"
    want = expected(rows)
    for name in ("main", "sevens", "fives"):
        assert committed(str(tmp_path / name)) == want[name], name
