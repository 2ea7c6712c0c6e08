"""Busy, back-pressured and idle time per task (Flink's task time metrics), honest where tasks share a
slot: the bookkeeping alone (task/task_time.py), then real jobs on local Spark read through REST,
Prometheus and /v1/job."""

from __future__ import annotations

import json
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import start_with_rest

from streamjob.operator.observer import autoscaler_view
from streamjob.runtime import StreamExecutionEnvironment, WatermarkStrategy
from streamjob.runtime.connectors import DataGenSource, DiscardingSink
from streamjob.runtime.task.task_time import BACK_PRESSURED, BUSY, IDLE, TaskTime, backpressure_level


# -- the bookkeeping ---------------------------------------------------------------------------------
def test_a_task_s_time_is_its_steps_and_its_waits_by_what_its_last_step_ended_with():
    t = TaskTime(0.0)
    t.waited(1.0)  # before its first step: idle
    t.stepped(1.5, True, BUSY)  # 0.5 s processing, more to do
    t.fed = 2.0  # a consumer in its slot worked 2 s on its output ...
    t.waited(4.5)  # ... of the 3 s it waited for its turn: back-pressured 2, busy (waiting for the thread) 1
    t.stepped(4.6, False, BACK_PRESSURED)  # found no room downstream
    t.waited(5.6)  # its whole wait back-pressured
    t.stepped(5.7, True, IDLE)  # processed what there was, then found its input empty
    t.waited(6.7)
    assert t.report(7.0) == [pytest.approx(0.5 + 1 + 0.1), pytest.approx(2 + 0.1 + 1), pytest.approx(1 + 1 + 0.3),
                             IDLE]
    assert sum(t.report(8.0)[:3]) == pytest.approx(8.0)  # every second accounted for, once


def test_consumer_time_beyond_the_wait_is_not_counted_twice_and_an_idle_task_is_never_back_pressured():
    t = TaskTime(0.0)
    t.stepped(1.0, True, BUSY)
    t.fed = 5.0  # more than it waited: capped
    t.waited(2.0)
    assert t.seconds[BACK_PRESSURED] == pytest.approx(1.0) and t.fed == 0.0
    t.stepped(2.5, True, IDLE)
    t.fed = 1.0  # its last output still being worked off, but it has nothing more to send
    t.waited(3.5)
    assert t.seconds[IDLE] == pytest.approx(1.0) and t.seconds[BACK_PRESSURED] == pytest.approx(1.0)


def test_flink_s_back_pressure_levels():
    assert [backpressure_level(r) for r in (0.0, 0.1, 0.11, 0.5, 0.51, 1.0)] == ["OK", "OK", "LOW", "LOW", "HIGH",
                                                                                   "HIGH"]


def test_a_task_of_a_second_slot_sharing_group_reports_its_own_subtask_indexes():
    """Slots are numbered over the slot sharing groups: a task in the second group runs its subtask 0 in the
    slot after the first group's. Its task time is reported per subtask, as Flink's, not per slot."""
    from streamjob.runtime.cluster.jobmanager import JobManager
    from streamjob.runtime.graph.job_graph import build_job_graph

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.from_source(DataGenSource(lambda i: i), WatermarkStrategy.no_watermarks(), "numbers") \
        .map(_slow).name("apart").slot_sharing_group("other").sink_to(DiscardingSink())
    graph = build_job_graph(env._transformations, env._config, "groups")
    plan = graph.plan()
    apart = next(v for v in plan["vertices"] if v["name"].startswith("apart"))
    assert apart["first_slot"] == 2 and graph.parallelism == 4
    jm = JobManager("job-g", "groups", graph.parallelism, plan=plan)
    jm.task_time = {2: {apart["name"]: [1.0, 0.0, 0.0, BUSY]}, 3: {apart["name"]: [0.5, 0.0, 0.5, IDLE]}}
    assert set(jm.task_time_metrics()) == {(apart["name"], 0), (apart["name"], 1)}
    [vertex] = [v for v in jm.job_info()["vertices"] if v["name"] == apart["name"]]
    assert [s["subtask"] for s in vertex["backpressure"]["subtasks"]] == [0, 1]


# -- real jobs -----------------------------------------------------------------------------------------
def _slow(value: int) -> int:
    end = time.perf_counter() + 0.0005  # 0.5 ms of work per record
    while time.perf_counter() < end:
        pass
    return value


def _get(url: str) -> object:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.load(r) if "json" in r.headers.get("Content-Type", "") else r.read().decode()


def _settled(url: str, check, seconds: float = 60.0) -> dict:
    """/v1/job once ``check`` holds of it (rates need a few seconds of task reports)."""
    deadline = time.monotonic() + seconds
    while True:
        job = _get(url + "/v1/job")
        if check(job):
            return job
        assert time.monotonic() < deadline, json.dumps(job["vertices"], indent=1)[:4000]
        time.sleep(0.5)


def _subtask_times(job: dict, vertex: int) -> dict:
    """The one subtask's times (a zero reading before the task's first report)."""
    [v] = [v for v in job["vertices"] if v["id"] == vertex]
    subtasks = v["backpressure"]["subtasks"]
    return subtasks[0] if subtasks else {"busyTimeMsPerSecond": 0, "backPressuredTimeMsPerSecond": 0,
                                          "idleTimeMsPerSecond": 0}


@pytest.mark.spark
@pytest.mark.timeout(300)
def test_a_slow_operator_sharing_its_source_s_slot_reads_busy_and_the_source_back_pressured(spark_slots):
    """The default slot sharing: the source and a slow map (0.5 ms per record, not chained) in one slot,
    one loop taking turns. The map reads busy; the source, waiting while the map works off its output,
    reads back-pressured (HIGH), as it would in a thread of its own blocked on full buffers. A batch
    (8,192 records, ~4 s of the map's work) is processed in slices: its counts and rate move within it."""
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.from_source(DataGenSource(lambda i: i), WatermarkStrategy.no_watermarks(), "numbers").map(_slow).disable_chaining().name("slow") \
        .sink_to(DiscardingSink())
    client, url = start_with_rest(env, "slow map")
    try:
        seen: list[tuple[int, float]] = []  # the map's records in, and its rate, within its first batch
        deadline = time.monotonic() + 60
        while len({n for n, _ in seen if 0 < n < 8192}) < 3:
            assert time.monotonic() < deadline, seen
            ops = {op["name"]: op for v in _get(url + "/v1/job")["vertices"] for op in v["operators"]}
            seen.append((ops["slow"]["records_in"], ops["slow"]["records_in_per_second"]))
            time.sleep(0.2)
        assert any(0 < n < 8192 and rate > 0 for n, rate in seen), seen

        def settled(job: dict) -> bool:
            source, slow = _subtask_times(job, 1), _subtask_times(job, 2)
            return source["backPressuredTimeMsPerSecond"] > 700 and slow["busyTimeMsPerSecond"] > 700

        job = _settled(url, settled)
        source, slow = _subtask_times(job, 1), _subtask_times(job, 2)
        for s in (source, slow):  # each task's second, accounted for once
            total = s["busyTimeMsPerSecond"] + s["backPressuredTimeMsPerSecond"] + s["idleTimeMsPerSecond"]
            assert 900 <= total <= 1010, s  # rates of reports a few ms apart
        vertices = {v["id"]: v for v in job["vertices"]}
        assert vertices[1]["backpressure"]["level"] == "HIGH" and vertices[2]["backpressure"]["level"] == "OK"
        assert vertices[2]["busy_ratio"] > 0.7 and slow["idleTimeMsPerSecond"] < 200

        # The operator's autoscaler reads this /v1/job: the topology, and the slow map's true processing rate
        # (records in per second / busy share) near what 0.5 ms a record allows (2,000 a second).
        topology, sample = autoscaler_view(job, 0.0)
        by_name = {v.name: v for v in topology}
        source_v, slow_v, sink_v = by_name["Source: numbers"], by_name["slow"], by_name["Sink: Discard"]
        assert source_v.source and slow_v.inputs == (source_v.id,) and sink_v.inputs == (slow_v.id,)
        assert not slow_v.keyed and slow_v.max_parallelism == 128 and slow_v.parallelism == 1
        s = sample.samples[slow_v.id]
        true_rate = s.records_in_per_second / (s.busy_ms_per_second / 1000.0)
        assert 800 < true_rate < 2600, (s, true_rate)

        # Flink's REST shapes: per subtask, and aggregated over the subtasks.
        wanted = "busyTimeMsPerSecond,backPressuredTimeMsPerSecond,idleTimeMsPerSecond"
        per_subtask = {m["id"]: float(m["value"]) for m in _get(f"{url}/v1/vertices/2/metrics?get=0.{wanted.replace(',', ',0.')}")}
        assert set(per_subtask) == {f"0.{n}" for n in wanted.split(",")} and per_subtask["0.busyTimeMsPerSecond"] > 500
        aggregated = {m["id"]: m for m in _get(f"{url}/v1/vertices/1/subtasks/metrics?get={wanted}")}
        assert aggregated["backPressuredTimeMsPerSecond"]["max"] > 500, aggregated
        assert set(aggregated["busyTimeMsPerSecond"]) == {"id", "min", "max", "avg", "sum"}

        # Prometheus: the counters and the per-second gauges, per task and subtask.
        source_task, slow_task = vertices[1]["name"], vertices[2]["name"]
        assert (source_task, slow_task) == ("Source: numbers", "slow")  # the sink: a task of its own (no chaining)
        families = {f.name: f for f in text_string_to_metric_families(_get(url + "/metrics"))}
        gauges = {s.labels["task"]: s.value for s in families["streamjob_busy_time_ms_per_second"].samples}
        assert gauges[slow_task] > 500 and gauges[source_task] < 500, gauges
        bp = {s.labels["task"]: s.value for s in families["streamjob_back_pressured_time_seconds"].samples
              if s.name.endswith("_total")}
        assert bp[source_task] > bp[slow_task], bp
        tasks = {v["name"] for v in job["vertices"]}
        assert {s.labels["task"] for s in families["streamjob_idle_time_seconds"].samples} == tasks
        is_bp = {s.labels["task"]: s.value for s in families["streamjob_is_back_pressured"].samples}
        assert set(is_bp) == tasks
    finally:
        client.cancel()


@pytest.mark.spark
@pytest.mark.timeout(300)
def test_a_quiet_source_reads_idle_and_a_fast_chain_is_not_back_pressured(spark_slots):
    """A source with little to read (5 rows a second) is idle nearly all the time, and so is its chain;
    a fast chain with input without end (source and map chained, one task) reads busy or idle as it is,
    never back-pressured: nothing downstream holds it."""
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.from_source(DataGenSource(lambda i: i, rows_per_second=5), WatermarkStrategy.no_watermarks(), "quiet").map(lambda x: x + 1).name("plus") \
        .sink_to(DiscardingSink())
    env.from_source(DataGenSource(lambda i: i), WatermarkStrategy.no_watermarks(), "busy").map(lambda x: x * 2).name("double") \
        .sink_to(DiscardingSink())
    client, url = start_with_rest(env, "quiet and busy")
    try:
        def settled(job: dict) -> bool:
            times = {v["name"]: v["backpressure"]["subtasks"] for v in job["vertices"]}
            return all(times.values()) and all(s[0]["busyTimeMsPerSecond"] + s[0]["idleTimeMsPerSecond"] > 0
                                               for s in times.values())

        _settled(url, settled)
        time.sleep(4)  # a whole rate window of reports
        job = _get(url + "/v1/job")
        times = {v["name"]: v["backpressure"]["subtasks"][0] for v in job["vertices"]}
        quiet = next(s for name, s in times.items() if name.startswith("Source: quiet"))
        busy = next(s for name, s in times.items() if name.startswith("Source: busy"))
        assert quiet["idleTimeMsPerSecond"] > 800 and quiet["backPressuredTimeMsPerSecond"] < 100, quiet
        assert busy["backPressuredTimeMsPerSecond"] < 100, busy
        assert busy["busyTimeMsPerSecond"] + busy["idleTimeMsPerSecond"] > 850, busy
        assert {v["backpressure"]["level"] for v in job["vertices"]} == {"OK"}
    finally:
        client.cancel()


# -- slices of a slow batch ------------------------------------------------------------------------------
@pytest.mark.parametrize("columnar", [False, True])
def test_a_slow_batch_goes_through_the_chain_in_slices_in_order_with_its_timestamps(columnar):
    """A batch whose work exceeds SLICE_S is cut: the chain sees the same records, in order, with their
    timestamps, as smaller batches; the slot may report between slices. A fast batch stays whole."""
    import numpy as np
    import pyarrow as pa

    from streamjob.runtime.task import slot as S

    class Head:  # the chain's first operator, as Task calls it
        def __init__(self, seconds_per_row: float):
            self.seconds_per_row, self.calls = seconds_per_row, []

        def process_batch(self, batch, input_index=0, ts=None):
            rows = batch.column(0).to_pylist() if columnar else list(batch)
            self.calls.append((rows, None if ts is None else ts.tolist()))
            end = time.perf_counter() + self.seconds_per_row * len(rows)
            while time.perf_counter() < end:
                pass

    n = 2000
    batch = pa.record_batch({"v": list(range(n))}) if columnar else list(range(n))
    ts = np.arange(n, dtype=np.int64) * 10
    slow = Head(0.0002)  # 0.4 s for the batch: sliced
    task = S.Task(None, [slow], [], None)
    reports = []
    task.on_slice = lambda: reports.append(len(slow.calls))
    task._process(batch, 0, ts)
    assert [r for rows, _ in slow.calls for r in rows] == list(range(n))
    assert [t for _, stamps in slow.calls for t in stamps] == ts.tolist()
    assert len(slow.calls) >= 4 and len(slow.calls[0][0]) == S.FIRST_SLICE
    assert max(len(rows) for rows, _ in slow.calls[1:]) * 0.0002 <= S.SLICE_S * 1.5
    assert reports == list(range(1, len(slow.calls)))  # between slices, not after the last
    fast = Head(0.0)
    task = S.Task(None, [fast], [], None)
    task._process(batch, 0, None)
    task._process(batch, 0, None)
    assert [len(rows) for rows, _ in fast.calls] == [S.FIRST_SLICE, n - S.FIRST_SLICE, n]  # known fast: whole


@pytest.mark.spark
@pytest.mark.timeout(300)
def test_a_slow_function_chained_to_its_source_reports_its_counts_within_a_batch(spark_slots):
    """The source's own chain is sliced as well: a slow map chained to the source (one task) shows its
    records and rate moving within the first 8,192-record batch (~4 s of work), not once the batch ends."""
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.from_source(DataGenSource(lambda i: i), WatermarkStrategy.no_watermarks(), "numbers").map(_slow) \
        .name("slow").sink_to(DiscardingSink())
    client, url = start_with_rest(env, "slow chain")
    try:
        seen: list[tuple[int, float]] = []
        deadline = time.monotonic() + 60
        while len({n for n, _ in seen if 0 < n < 8192}) < 3:
            assert time.monotonic() < deadline, seen
            job = _get(url + "/v1/job")
            ops = {op["name"]: op for v in job["vertices"] for op in v["operators"]}
            seen.append((ops["slow"]["records_in"], ops["slow"]["records_in_per_second"]))
            time.sleep(0.2)
        assert len(job["vertices"]) == 1  # one chain: source, map, sink
        assert any(0 < n < 8192 and rate > 0 for n, rate in seen), seen
    finally:
        client.cancel()
