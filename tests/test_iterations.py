"""Iterations (issue 32): stream.iterate(), close_with, with_feedback_type; back-edges; termination
detected by probe rounds; build-time refusals. Snapshots of loops: test_iteration_snapshots.py.

The build checks and the rounds coordinator run without Spark; one loop runs in this process in a
single slot (the slot coordinates its own rounds there); the rest are whole jobs on real local Spark
at parallelism 2, where the job manager runs the rounds.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from streamjob.runtime import (CoProcessFunction, RuntimeExecutionMode, KeyedProcessFunction, StreamExecutionEnvironment, Types,
                               ValueStateDescriptor)
from streamjob.runtime.api.watermarks import WatermarkStrategy
from streamjob.runtime.config import Options
from streamjob.runtime.connectors import DataGenSource, FileSink
from streamjob.runtime.graph.job_graph import JobDefinitionError, build_job_graph
from streamjob.runtime.task.iteration_rounds import END, ROUND, IterationRounds
from streamjob.runtime.task.slot import SlotRuntime


def collatz(n: int) -> int:
    steps = 0
    while n != 1:
        n = n // 2 if n % 2 == 0 else 3 * n + 1
        steps += 1
    return steps


def step(r):
    start, n, steps = r
    if n == 1:
        return r
    return start, (n // 2 if n % 2 == 0 else 3 * n + 1), steps + 1


def collatz_job(env, numbers, out):
    """Each (start, n, steps) goes round until n is 1; the finished walks leave the loop."""
    loop = env.from_collection([(n, n, 0) for n in numbers]).iterate()
    stepped = loop.map(step)
    loop.close_with(stepped.filter(lambda r: r[1] != 1))
    stepped.filter(lambda r: r[1] == 1).map(lambda r: {"start": r[0], "steps": r[2]}).sink_to(FileSink.jsonl(str(out)))


def read_rows(path) -> list[dict]:
    return [json.loads(line) for f in sorted(Path(path).rglob("part-*.jsonl")) for line in f.read_text().splitlines()]


def graph_of(env):
    return env._build("test")


def env_at(p: int):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(p)
    return env


# -- the job graph ----------------------------------------------------------------------------------------

def test_the_loop_is_a_back_edge_into_the_head_and_its_members_are_the_body():
    env = env_at(2)
    collatz_job(env, range(1, 5), "/tmp/unused")
    g = graph_of(env)
    (it,) = g.iterations
    head = g.operators[it.head]
    assert head.kind == "iteration_head" and head.name == "Iteration 1" and it.name == "Iteration 1"
    (back,) = [g.edges[e] for e in it.back_edges]
    assert back.feedback == it.id and back.target == it.head and back.input_index == 1
    assert {g.operators[o].name for o in it.members} == {"Iteration 1", "Map", "Filter"}
    assert "=forward feedback=> Iteration 1" in g.describe()
    assert any(e.get("feedback") for e in g.plan()["edges"])


def test_a_loop_without_close_with_is_refused_naming_the_iteration():
    env = env_at(2)
    loop = env.from_collection([1, 2]).iterate()
    loop.map(lambda x: x).print()
    with pytest.raises(JobDefinitionError, match=r"Iteration 1 is never closed: .*close_with"):
        graph_of(env)


def test_feedback_at_another_parallelism_than_the_head_is_refused_naming_both():
    env = env_at(2)
    loop = env.from_collection([1, 2]).iterate()
    body = loop.map(lambda x: x - 1)
    loop.close_with(body.filter(lambda x: x > 0).set_parallelism(3).name("Positive"))
    body.print()
    with pytest.raises(JobDefinitionError, match=r"Iteration 1: the feedback comes from 'Positive' at parallelism 3, "
                                                 r"but the loop's head 'Iteration 1' runs at parallelism 2"):
        graph_of(env)


def test_a_loop_runs_in_streaming_mode_batch_is_refused_and_automatic_becomes_streaming():
    env = env_at(2)
    env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    collatz_job(env, range(1, 5), "/tmp/unused")
    with pytest.raises(JobDefinitionError, match=r"Iteration 1: a job with iterations runs in STREAMING mode"):
        graph_of(env)
    env = env_at(2)
    env.set_runtime_mode(RuntimeExecutionMode.AUTOMATIC)  # bounded sources only: BATCH, were it not for the loop
    collatz_job(env, range(1, 5), "/tmp/unused")
    assert graph_of(env).config["execution.runtime-mode"] == "STREAMING"


def test_nested_loops_are_refused_naming_both():
    env = env_at(1)
    outer = env.from_collection([1, 2]).iterate()
    inner = outer.map(lambda x: x).iterate()
    body = inner.map(lambda x: x - 1)
    inner.close_with(body.filter(lambda x: x > 5))
    outer.close_with(body.filter(lambda x: 0 < x <= 5))
    body.print()
    with pytest.raises(JobDefinitionError, match=r"Iteration 1 and Iteration 2 share operators"):
        graph_of(env)


def test_async_io_inside_a_loop_is_refused():
    from streamjob.runtime import Time
    from streamjob.runtime.api.async_io import AsyncDataStream, AsyncFunction

    class Same(AsyncFunction):
        async def async_invoke(self, value):
            return [value]

    env = env_at(1)
    loop = env.from_collection([1, 2]).iterate()
    body = AsyncDataStream.unordered_wait(loop, Same(), Time.seconds(1))
    loop.close_with(body.filter(lambda x: False))
    body.print()
    with pytest.raises(JobDefinitionError, match=r"async I/O\) is inside the loop"):
        graph_of(env)


def test_with_feedback_type_makes_the_two_input_operator_the_head_with_feedback_as_input_2():
    env = env_at(2)
    loop = env.from_collection([1, 2]).iterate().with_feedback_type(Types.TUPLE([Types.INT(), Types.INT()]))
    head = loop.process(Tagged())
    loop.close_with(head.filter(lambda r: False))
    head.print()
    g = graph_of(env)
    (it,) = g.iterations
    assert g.operators[it.head].kind == "co_process"
    assert not any(op.kind == "iteration_head" for op in g.operators.values())
    assert [g.edges[e].input_index for e in it.back_edges] == [1]


# -- the rounds coordinator -------------------------------------------------------------------------------

def report(subtask, n, clean=True, heads=2, **kw):
    return {"type": "iteration", "iteration": 7, "subtask": subtask, "heads": heads, "round": n, "clean": clean, **kw}


def test_rounds_start_once_every_head_input_ended_and_end_after_a_clean_round():
    rounds = IterationRounds()
    assert rounds.on_report(report(0, 0)) == []
    assert rounds.on_report(report(1, 0)) == [{"type": ROUND, "iteration": 7, "round": 1}]
    assert rounds.on_report(report(1, 1, clean=False)) == []
    assert rounds.on_report(report(0, 1)) == [{"type": ROUND, "iteration": 7, "round": 2}]  # one head got feedback
    assert rounds.on_report(report(0, 2)) == []
    assert rounds.on_report(report(1, 2)) == [{"type": END, "iteration": 7}]
    assert rounds.on_report(report(1, 3)) == []  # nothing after the end


def test_a_head_that_ended_by_max_wait_counts_as_clean():
    rounds = IterationRounds()
    rounds.on_report(report(0, 0))
    rounds.on_report(report(1, 0))
    assert rounds.on_report(report(0, 1)) == []
    assert rounds.on_report(report(1, -1, ended=True)) == [{"type": END, "iteration": 7}]


# -- in this process: one slot, no job manager ------------------------------------------------------------

def test_a_loop_in_one_slot_without_a_job_manager_ends_by_itself(tmp_path):
    env = env_at(1)
    collatz_job(env, range(1, 40), tmp_path)
    g = graph_of(env)
    slot = SlotRuntime(g, 0)
    slot.connect([slot.address])
    started = time.monotonic()
    slot.run()
    assert time.monotonic() - started < 20
    rows = read_rows(tmp_path)
    assert sorted((r["start"], r["steps"]) for r in rows) == [(n, collatz(n)) for n in range(1, 40)]
    (head,) = [t for t in slot.tasks if t.loop is not None]
    # about one round per lap (27 takes 111 steps, 110 of them fed back), the last one clean
    assert 50 < head.loop.rounds <= max(collatz(n) for n in range(1, 40)) + 1
    (backlog,) = [e for e in head.head.ctx._metrics.report() if e[4] == "feedbackBacklog"]
    assert backlog[0] is True and backlog[-1] == 0  # a connector-style (system) gauge: nothing left queued


def test_a_feedback_backlog_beyond_the_memory_budget_waits_on_local_disk(tmp_path):
    """Each record fed back tenfold for three rounds, through one slot, with 20 KB for the head's queued
    feedback, the sink slow: the rest waits in spill files (unnamed: io.tmp.dirs stays empty), memory
    stays within the budget (and one batch: 1,000 records of two int64), and the output is exact."""
    env = env_at(1)
    spill_dir = tmp_path / "spill"
    spill_dir.mkdir()
    env.get_config().set(Options.BATCH_SIZE, 20).set(Options.BUFFERS_PER_CHANNEL, 1) \
        .set(Options.ITERATION_FEEDBACK_MEMORY, "20 kb") \
        .set(Options.IO_TMP_DIRS, str(spill_dir))
    tenfold(env, 300, tmp_path / "out")
    slot = SlotRuntime(graph_of(env), 0)
    slot.connect([slot.address])
    slot.run()
    ids = [r["id"] for r in read_rows(tmp_path / "out")]
    assert sorted(ids) == expected_tenfold(300)
    (head,) = [t for t in slot.tasks if t.loop is not None]
    buffer = head.feedback_buffer
    assert buffer.spilled_batches > 5 and buffer.spilled_bytes > 5 * 1000
    assert buffer.peak_in_memory <= 20 * 1024 + 1000 * 16, "the budget, and at most one batch beyond it"
    assert buffer.in_memory == 0 and buffer.on_disk == 0
    assert not list(spill_dir.iterdir())


def test_max_wait_time_ms_is_an_extra_the_loop_still_ends_when_it_is_empty(tmp_path):
    env = env_at(1)
    loop = env.from_collection([(n, n, 0) for n in range(1, 40)]).iterate(max_wait_time_ms=60_000)
    stepped = loop.map(step)
    loop.close_with(stepped.filter(lambda r: r[1] != 1))
    stepped.filter(lambda r: r[1] == 1).map(lambda r: {"start": r[0], "steps": r[2]}).sink_to(FileSink.jsonl(str(tmp_path)))
    slot = SlotRuntime(graph_of(env), 0)
    slot.connect([slot.address])
    started = time.monotonic()
    slot.run()
    assert time.monotonic() - started < 20  # detected, long before the minute of max_wait_time_ms
    assert sorted((r["start"], r["steps"]) for r in read_rows(tmp_path)) == [(n, collatz(n)) for n in range(1, 40)]


def test_max_wait_time_ms_ends_a_head_whose_feedback_stopped_coming():
    """Flink's meaning: after the input ended, a head that got no feedback for that long ends."""
    from streamjob.runtime.graph.iterations import Iteration
    from streamjob.runtime.task.iteration import HeadLoop

    sent = []
    head = HeadLoop(Iteration(7, "Iteration 1", 1, [], max_wait_time_ms=200), 0, 1, {1}, [], sent.append)
    assert not head.wait_expired(time.monotonic() + 10)  # the input still runs: no waiting yet
    head.on_input_ended()
    assert sent[-1]["round"] == 0
    now = time.monotonic()
    assert not head.wait_expired(now) and head.wait_deadline() == pytest.approx(now + 0.2, abs=0.05)
    head.on_feedback(3)  # feedback restarts the wait
    assert not head.wait_expired(time.monotonic() + 0.15)
    assert head.wait_expired(time.monotonic() + 0.25)
    head.end(timed_out=True)
    assert sent[-1] == {"type": "iteration", "iteration": 7, "subtask": 0, "heads": 1, "round": -1, "clean": True,
                        "ended": True}
    assert head.wait_deadline() is None


class Tagged(CoProcessFunction):
    def process_element1(self, value, ctx):
        yield value, 0

    def process_element2(self, value, ctx):
        yield value


# -- on Spark --------------------------------------------------------------------------------------------

@pytest.mark.spark
@pytest.mark.parametrize("numbers,rounds", [([1] * 50, 0), ([2] * 50, 1), (list(range(1, 200)), max(map(collatz, range(1, 200))))])
def test_a_bounded_loop_ends_after_0_1_and_many_rounds_with_exact_output(spark_slots, tmp_path, numbers, rounds):
    env = env_at(2)
    collatz_job(env, numbers, tmp_path)
    started = time.monotonic()
    env.execute("collatz")
    rows = read_rows(tmp_path)
    assert sorted((r["start"], r["steps"]) for r in rows) == sorted((n, collatz(n)) for n in numbers)
    assert max(r["steps"] for r in rows) == rounds
    assert time.monotonic() - started < 60


class CountVisits(KeyedProcessFunction):
    """Keyed state in the loop: each key's visits; a record goes round (key, left) until left is 0."""

    def open(self, ctx):
        self.visits = ctx.get_state(ValueStateDescriptor("visits", Types.INT()))

    def process_element(self, value, ctx):
        key, left = value
        visits = (self.visits.value() or 0) + 1
        self.visits.update(visits)
        yield key, left - 1, visits, ctx.get_current_key()


@pytest.mark.spark
@pytest.mark.parametrize("backend", ["hashmap", "rocksdb"])
def test_keyed_state_in_the_loop_and_a_keyed_feedback_edge(spark_slots, tmp_path, backend):
    env = env_at(2)
    env.get_config().set("state.backend.type", backend).set("state.backend.rocksdb.localdir", str(tmp_path / "db"))
    loop = env.from_collection([(f"k{i}", i % 7) for i in range(40)]).iterate()
    body = loop.key_by(lambda r: r[0]).process(CountVisits())
    # keyed feedback: routed by key group to the head subtask that owns the key group
    loop.close_with(body.filter(lambda r: r[1] >= 0).map(lambda r: (r[0], r[1])).key_by(lambda r: r[0]))
    body.filter(lambda r: r[1] < 0).map(lambda r: {"key": r[0], "visits": r[2]}).sink_to(
        FileSink.jsonl(str(tmp_path / "out")))
    g = graph_so_far(env)
    (back,) = [g.edges[e] for e in g.iterations[0].back_edges]
    assert back.partitioner == "hash"
    env.execute("keyed loop")
    rows = read_rows(tmp_path / "out")
    assert sorted((r["key"], r["visits"]) for r in rows) == sorted((f"k{i}", i % 7 + 1) for i in range(40))


@pytest.mark.spark
def test_connected_iterative_streams_feed_back_another_type_as_input_2(spark_slots, tmp_path):
    env = env_at(2)
    loop = env.from_collection(list(range(1, 60))).iterate().with_feedback_type(Types.TUPLE([Types.INT(), Types.INT()]))
    head = loop.process(Tagged())  # input 1: int, input 2: (n, steps)
    stepped = head.map(lambda r: (r[0], 0) if r[0] == 1 else ((r[0] // 2 if r[0] % 2 == 0 else 3 * r[0] + 1), r[1] + 1))
    loop.close_with(stepped.filter(lambda r: r[0] != 1))
    stepped.filter(lambda r: r[0] == 1).map(lambda r: {"steps": r[1]}).sink_to(FileSink.jsonl(str(tmp_path)))
    env.execute("connected loop")
    assert sorted(r["steps"] for r in read_rows(tmp_path)) == sorted(collatz(n) for n in range(1, 60))


@pytest.mark.spark
def test_two_loops_in_one_job_each_end_by_detection(spark_slots, tmp_path):
    env = env_at(2)
    first = env.from_collection([(n, n, 0) for n in range(1, 50)]).iterate()
    stepped = first.map(step)
    first.close_with(stepped.filter(lambda r: r[1] != 1))
    done = stepped.filter(lambda r: r[1] == 1)
    # the second loop reads the first one's output: it counts each walk's steps down to 0
    second = done.map(lambda r: (r[0], r[2], r[2])).iterate()
    down = second.map(lambda r: (r[0], r[1], r[2] - 1) if r[2] > 0 else r)
    second.close_with(down.filter(lambda r: r[2] > 0))
    down.filter(lambda r: r[2] <= 0).map(lambda r: {"start": r[0], "steps": r[1]}).sink_to(FileSink.jsonl(str(tmp_path)))
    assert len(graph_so_far(env).iterations) == 2
    env.execute("two loops")
    assert sorted((r["start"], r["steps"]) for r in read_rows(tmp_path)) == [(n, collatz(n)) for n in range(1, 50)]


def graph_so_far(env):
    """The graph of the job defined so far, leaving its definition for execute()."""
    from streamjob.runtime.api.environment import _with_inputs

    return build_job_graph(_with_inputs(env._transformations), env._config, "plan")


def tenfold(env, n: int, out, slow: bool = True) -> None:
    """Each of n records goes round three times and is multiplied by ten each time: n * 1000 leave."""
    loop = env.from_collection([(i, 0) for i in range(n)]).iterate()
    body = loop.key_by(lambda r: r[0] % 7).flat_map(
        lambda r: [(r[0] * 10 + k, r[1] + 1) for k in range(10)] if r[1] < 3 else [r])
    loop.close_with(body.filter(lambda r: r[1] < 3))
    body.filter(lambda r: r[1] >= 3).map(slow_id if slow else lambda r: {"id": r[0]}) \
        .sink_to(FileSink.jsonl(str(out)))


def expected_tenfold(n: int) -> list[int]:
    return sorted(i * 1000 + k for i in range(n) for k in range(1000))


@pytest.mark.spark
def test_a_loop_that_multiplies_its_records_tenfold_for_three_rounds_ends_without_deadlock(spark_slots, tmp_path):
    """Small batches and one credit per channel: the body's output fills every channel at once, so a
    back-edge that waited for the head (which waits for the body) would freeze the loop; the keyed
    body sits in another task, so records cross slots both ways. The sink is slow too, and the heads
    keep 1 KB of feedback in memory: the backlog waits on disk."""
    env = env_at(2)
    env.set_buffer_timeout(5)
    env.get_config().set(Options.BATCH_SIZE, 50).set(Options.BUFFERS_PER_CHANNEL, 1) \
        .set(Options.ITERATION_FEEDBACK_MEMORY, "1 kb")
    tenfold(env, 100, tmp_path)
    started = time.monotonic()
    client = env.execute_async("tenfold")
    client.get_job_execution_result(120)
    ids = [r["id"] for r in read_rows(tmp_path)]
    assert sorted(ids) == expected_tenfold(100)
    assert time.monotonic() - started < 120
    assert spilled_bytes(client) > 0, "the backlog went to disk"


def spilled_bytes(client) -> int:
    """The heads' numFeedbackBytesSpilled of the job's last attempt, as they last reported it."""
    return sum(entry[-1] for _op, _name, _subtask, entries in client.job_manager.operator_metrics()
               for entry in entries if entry[4] == "numFeedbackBytesSpilled")


def slow_id(r):
    if r[0] % 1000 == 0:
        time.sleep(0.01)
    return {"id": r[0]}


class Stamp(KeyedProcessFunction):
    def process_element(self, value, ctx):
        yield value[0], value[1], ctx.timestamp()


@pytest.mark.spark
def test_fed_back_records_keep_their_timestamps(spark_slots, tmp_path):
    env = env_at(2)
    source = env.from_collection([(i, 3) for i in range(20)]).assign_timestamps_and_watermarks(
        WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda r: 1000 + r[0]))
    loop = source.iterate()
    body = loop.map(lambda r: (r[0], r[1] - 1))
    loop.close_with(body.filter(lambda r: r[1] > 0))
    out = body.filter(lambda r: r[1] <= 0).key_by(lambda r: r[0]).process(Stamp())
    out.map(lambda r: {"id": r[0], "ts": r[2]}).sink_to(FileSink.jsonl(str(tmp_path)))
    env.execute("timestamps")
    assert sorted((r["id"], r["ts"]) for r in read_rows(tmp_path)) == [(i, 1000 + i) for i in range(20)]


class Merge(CoProcessFunction):
    """Inside the loop, an input from outside it: the loop's records pass, the outside ones join."""

    def process_element1(self, value, ctx):
        yield value

    def process_element2(self, value, ctx):
        yield value, value, 0


@pytest.mark.spark
def test_a_body_operator_with_an_input_from_outside_the_loop_keeps_the_loop_open_until_it_ends(spark_slots, tmp_path):
    env = env_at(2)
    loop = env.from_collection([(n, n, 0) for n in range(1, 30)]).iterate()
    late = env.from_source(DataGenSource(lambda i: 30 + i, count=30, rows_per_second=20))  # ends after ~1.5 s
    merged = loop.connect(late).process(Merge())
    stepped = merged.map(step)
    loop.close_with(stepped.filter(lambda r: r[1] != 1))
    stepped.filter(lambda r: r[1] == 1).map(lambda r: {"start": r[0], "steps": r[2]}).sink_to(FileSink.jsonl(str(tmp_path)))
    env.execute("outside input")
    assert sorted((r["start"], r["steps"]) for r in read_rows(tmp_path)) == [(n, collatz(n)) for n in range(1, 60)]


@pytest.mark.spark
def test_a_drain_stop_ends_the_input_and_the_loop_empties_before_the_job_finishes(spark_slots, tmp_path):
    env = env_at(2)
    source = env.from_source(DataGenSource(lambda i: (i + 1, i + 1, 0), count=None, rows_per_second=500))
    loop = source.set_parallelism(1).iterate()  # one source subtask: what it emitted is 1..n
    stepped = loop.map(step)
    loop.close_with(stepped.filter(lambda r: r[1] != 1))
    stepped.filter(lambda r: r[1] == 1).map(lambda r: {"start": r[0], "steps": r[2]}).sink_to(
        FileSink.jsonl(str(tmp_path / "out")))
    source.map(lambda r: {"emitted": r[0]}).sink_to(FileSink.jsonl(str(tmp_path / "emitted")))
    client = env.execute_async("drained loop")
    assert client.wait_until_running(60)
    time.sleep(3)
    client.job_manager.stop()
    client.get_job_execution_result(120)
    emitted = sorted(r["emitted"] for r in read_rows(tmp_path / "emitted"))
    assert len(emitted) > 10
    # every walk the source started was finished: none is lost in the loop at the stop
    assert sorted((r["start"], r["steps"]) for r in read_rows(tmp_path / "out")) == [(n, collatz(n)) for n in emitted]
