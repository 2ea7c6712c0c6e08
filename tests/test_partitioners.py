"""PyFlink's partitioning calls (shuffle, broadcast, forward, rescale) and CoFlatMapFunction, on
real local Spark: where each record goes, and that none is lost or duplicated."""

from __future__ import annotations

import glob
import json
import os

import pytest

from streamjob.runtime import CoFlatMapFunction, MapFunction, StreamExecutionEnvironment
from streamjob.runtime.api import transformations as T
from streamjob.runtime.connectors import DataGenSource, DiscardingSink, FileSink
from streamjob.runtime.graph.job_graph import build_job_graph

P = 3


class WhereAmI(MapFunction):
    def open(self, ctx):
        self.subtask = ctx.get_index_of_this_subtask()

    def map(self, value):
        return {"value": value, "subtask": self.subtask}


def rows(path) -> list[dict]:
    out = []
    for f in glob.glob(os.path.join(str(path), "*")):
        with open(f) as fh:
            out += [json.loads(line) for line in fh]
    return out


def graph(build) -> object:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(P)
    # a collection source at the job's parallelism (from_collection is non-parallel, as PyFlink's: a
    # forward() from it into parallel operators would be refused, as in Flink)
    from streamjob.runtime.connectors.collection import CollectionSource

    build(env.from_source(CollectionSource(list(range(10))), source_name="Collection")).map(str) \
        .sink_to(DiscardingSink())
    return build_job_graph(env._transformations, env.get_config(), "t")


@pytest.mark.parametrize("call, partitioner, chained", [
    ("shuffle", T.SHUFFLE, False), ("broadcast", T.BROADCAST, False), ("rebalance", T.REBALANCE, False),
    ("forward", T.FORWARD, True), ("rescale", T.FORWARD, True)])
def test_each_call_makes_its_edge(call, partitioner, chained):
    g = graph(lambda s: getattr(s, call)())
    (edge,) = [e for e in g.edges.values() if g.operators[e.target].name == "Map"]
    assert edge.partitioner == partitioner
    assert (len(g.tasks) == 1) == chained  # source -> map -> sink in one task only when forward


@pytest.mark.spark
def test_shuffle_broadcast_and_co_flat_map_deliver_every_record(spark_slots, tmp_path):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(P)
    # Small batches: shuffle picks a subtask per batch, so 3000 rows make 60 random picks, not 3.
    env.configure({"execution.batch-size": 50})
    n = 3000
    numbers = env.from_source(DataGenSource(lambda i: i, count=n))
    numbers.shuffle().map(WhereAmI()).sink_to(FileSink.jsonl(str(tmp_path / "shuffled")))
    env.from_collection(["a", "b"]).broadcast().map(WhereAmI()).sink_to(FileSink.jsonl(str(tmp_path / "broadcast")))

    class Split(CoFlatMapFunction):
        def flat_map1(self, value):
            if value % 2:
                yield {"value": value, "from": 1}

        def flat_map2(self, value):
            yield {"value": value, "from": 2}
            yield {"value": value, "from": 2}

    evens = env.from_collection(list(range(100)))
    words = env.from_collection([f"w{i}" for i in range(20)]).rebalance()
    evens.connect(words).flat_map(Split()).sink_to(FileSink.jsonl(str(tmp_path / "co")))
    env.execute()

    shuffled = rows(tmp_path / "shuffled")
    assert sorted(r["value"] for r in shuffled) == list(range(n))  # none lost, none twice
    assert len({r["subtask"] for r in shuffled}) > 1  # spread over the map's subtasks
    broadcast = rows(tmp_path / "broadcast")
    assert sorted((r["value"], r["subtask"]) for r in broadcast) == sorted(
        (v, s) for v in "ab" for s in range(P))  # every record to every subtask
    co = rows(tmp_path / "co")
    assert sorted(r["value"] for r in co if r["from"] == 1) == list(range(1, 100, 2))
    assert sorted(r["value"] for r in co if r["from"] == 2) == sorted(f"w{i}" for i in range(20) for _ in range(2))


@pytest.mark.spark
def test_a_slot_that_finishes_first_delivers_everything_before_closing(spark_slots, tmp_path):
    """Two independent pipelines: one slot's tasks can all finish while its output channels still
    hold batches (and their EndOfPartition) waiting for credit from a peer that is still busy.
    The slot used to half-close its connections then, and the peer failed the job with
    "lost the connection ... closed by peer" (about one run in four here). Several runs, so the
    race has its chances; each must deliver every row once."""
    for run in range(4):
        env = StreamExecutionEnvironment.get_execution_environment()
        env.set_parallelism(P)
        env.configure({"execution.batch-size": 50})
        env.from_source(DataGenSource(lambda i: i, count=3000)).rebalance().map(WhereAmI()) \
            .sink_to(FileSink.jsonl(str(tmp_path / f"numbers-{run}")))
        env.from_collection(["a", "b"]).rebalance().map(WhereAmI()).sink_to(DiscardingSink())
        env.execute()
        assert sorted(r["value"] for r in rows(tmp_path / f"numbers-{run}")) == list(range(3000))


def test_a_task_is_done_only_when_its_channels_sent_everything():
    from streamjob.runtime.network.channels import OutputChannel
    from streamjob.runtime.network.record_writer import RecordWriter
    from streamjob.runtime.task.slot import Task

    delivered = []
    channel = OutputChannel(lambda item, is_data: delivered.append(item), batch_size=1, buffer_timeout_ms=0)
    writer = RecordWriter(1, T.REBALANCE, [channel], 0)

    class Vertex:
        name = "v"

    task = Task(Vertex(), [object()], [writer], gate=None)
    writer.emit([1])  # no credit yet: the batch waits in the channel
    assert not task.outputs_delivered()
    channel.add_credits(1)
    assert task.outputs_delivered() and delivered == [[1]]


def test_rescale_from_the_non_parallel_collection_source_is_round_robin_and_forward_is_refused():
    # Flink: rescale() into a different parallelism spreads each subtask's records over a group of the
    # next operator's subtasks (all of them, from one subtask); forward() cannot change the parallelism
    from streamjob.runtime import JobDefinitionError

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(P)
    env.from_collection(list(range(10))).rescale().map(str).sink_to(DiscardingSink())
    g = build_job_graph(env._transformations, env.get_config(), "t")
    (edge,) = [e for e in g.edges.values() if g.operators[e.target].name == "Map"]
    assert edge.partitioner == T.REBALANCE and [t.parallelism for t in g.tasks] == [1, P]
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(P)
    env.from_collection(list(range(10))).forward().map(str).sink_to(DiscardingSink())
    with pytest.raises(JobDefinitionError, match="forward partitioning does not allow a change of parallelism"):
        build_job_graph(env._transformations, env.get_config(), "t")
