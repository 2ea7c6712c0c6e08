"""Snapshots of cyclic jobs (issue 32, slice 2): the head logs its back-edges between its snapshot and
the barrier's return (task/iteration.FeedbackLog); a restore replays the log into the loop first.

The loop job: each input number walks its Collatz sequence round the loop, one step per lap, keyed by
its start; a keyed state in the body counts the laps of each walk and the walk leaves the loop with
that count when it reaches 1. A fed-back record lost at a failure loses its walk's output row; one
replayed twice makes its count too high. The output is compared row for row with the expected.
All jobs run on the session's real local Spark.
"""

from __future__ import annotations

import json
import random
import time
import urllib.request
from pathlib import Path

import pytest

from streamjob.runtime import (CheckpointingMode, ExternalizedCheckpointRetention, KeyedProcessFunction,
                               RestartStrategies, StreamExecutionEnvironment, ValueStateDescriptor)
from streamjob.runtime.connectors import DataGenSource, FileSink

from test_checkpointing import kill_tasks_at_random
from test_iterations import collatz

pytestmark = pytest.mark.spark


def first(i: int) -> int:
    """Where walk i starts: short and long walks mixed (up to 127 laps)."""
    return i % 97 + 2


def walk(i: int):
    return (i, first(i), 0)


class Lap(KeyedProcessFunction):
    """One step of a walk; the walk's lap count lives in keyed state (not in the record), so a lap done
    twice or lost shows in the output."""

    def open(self, ctx):
        self.laps = ctx.get_state(ValueStateDescriptor("laps", int))

    def process_element(self, value, ctx):
        start, n, _ = value
        laps = (self.laps.value() or 0) + 1
        self.laps.update(laps)
        yield start, (n // 2 if n % 2 == 0 else 3 * n + 1), laps


def walks_job(out: str, checkpoints: str | None, count: int, rate: float, parallelism: int = 3,
              backend: str = "hashmap", unaligned: bool = False, interval_ms: int = 250,
              restore: str | None = None, conf: dict | None = None,
              emitted_out: str | None = None) -> StreamExecutionEnvironment:
    """``emitted_out``: also write each walk the source emits there (committed with the same checkpoints)."""
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    if restore:
        env.configure({"execution.state-recovery.path": restore})
    if conf:
        env.configure(conf)
    if checkpoints:
        env.enable_checkpointing(interval_ms, CheckpointingMode.EXACTLY_ONCE)
        env.set_state_backend(backend)
        config = env.get_checkpoint_config()
        config.set_checkpoint_storage(checkpoints)
        config.set_externalized_checkpoint_retention(ExternalizedCheckpointRetention.RETAIN_ON_CANCELLATION)
        if unaligned:
            config.enable_unaligned_checkpoints()
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(50, 100))
    numbers = env.from_source(DataGenSource(walk, count=count, rows_per_second=rate), None, "numbers").uid("numbers")
    if emitted_out:
        numbers.map(lambda r: {"walk": r[0], "laps": collatz(first(r[0]))}).uid("emitted") \
            .sink_to(FileSink.jsonl(emitted_out)).uid("emitted-files")
    loop = numbers.iterate()
    stepped = loop.key_by(lambda r: r[0]).process(Lap()).uid("laps")
    loop.close_with(stepped.filter(lambda r: r[1] != 1))
    stepped.filter(lambda r: r[1] == 1).map(lambda r: {"walk": r[0], "laps": r[2]}).uid("rows") \
        .sink_to(FileSink.jsonl(out)).uid("files")
    return env


def expected(count: int) -> list[tuple[int, int]]:
    return [(i, collatz(first(i))) for i in range(count)]


def committed(out: str) -> list[tuple[int, int]]:
    rows = [json.loads(line) for f in sorted(Path(out).rglob("part-*.jsonl")) for line in f.read_text().splitlines()]
    return sorted((r["walk"], r["laps"]) for r in rows)


def emitted(client, rows: int, timeout: float = 60.0) -> None:
    """Wait until the source has emitted ``rows`` walks (the job manager's operator counters)."""
    jm = client.job_manager
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        totals = {jm.operator_names.get(k, k): v for k, v in jm.operator_totals().items()}
        if totals.get("Source: numbers", [0, 0])[1] >= rows:
            return
        time.sleep(0.05)
    raise AssertionError(f"the source did not emit {rows} walks within {timeout} s")


def checkpoint_history(client) -> dict:
    with urllib.request.urlopen(f"{client.job_manager.rest.url}/v1/checkpoints", timeout=10) as resp:
        return json.loads(resp.read())


@pytest.mark.parametrize("backend, unaligned", [("hashmap", False), ("rocksdb", True)], ids=["aligned-hashmap",
                                                                                            "unaligned-rocksdb"])
def test_random_task_kills_lose_and_duplicate_no_walk_of_the_loop(spark_slots, tmp_path, backend, unaligned):
    """Ten random task kills (head, body or sink, wherever the kill lands); the restores replay the logged
    feedback; every walk leaves the loop exactly once with its exact lap count."""
    rng = random.Random(int(time.time()))
    count = 5000
    out = str(tmp_path / "out")
    env = walks_job(out, str(tmp_path / "chk"), count, rate=900, backend=backend, unaligned=unaligned,
                    interval_ms=rng.randint(150, 300))
    client = env.execute_async("walks")
    killed = kill_tasks_at_random(client, 10, rng, pause=(0.2, 0.6), within=120)
    result = client.get_job_execution_result(300)
    assert len(killed) == 10, f"the job finished before the test could kill 10 tasks ({len(killed)})"
    assert result.restarts == 10
    assert committed(out) == expected(count)
    # The logs did something: completed checkpoints held fed-back records in flight.
    logged = [c for c in result.checkpoints if c.get("feedback_records")]
    assert logged, result.checkpoints


def test_a_kill_while_the_head_logs_feedback_restores_exactly(spark_slots, tmp_path):
    """The head SIGKILLs itself right after logging a fed-back batch for a checkpoint whose barrier is still
    going round (the fault point ``feedback-logging``): the pending checkpoint never completes, the restore
    takes the one before with its own log, and the output is exact."""
    count = 3000
    out = str(tmp_path / "out")
    marker = tmp_path / "killed"
    env = walks_job(out, str(tmp_path / "chk"), count, rate=1500, parallelism=2,
                    conf={"streamjob.test.fault": f"feedback-logging:{marker}"})
    client = env.execute_async("walks")
    result = client.get_job_execution_result(300)
    assert marker.exists(), "the fault point was never reached"
    logged = json.loads(marker.read_text())
    assert any(records > 0 for records in logged.values()), logged
    assert result.restarts == 1
    assert committed(out) == expected(count)


@pytest.mark.parametrize("resume_at", [3, 1])
def test_a_savepoint_at_parallelism_2_resumes_at_3_and_1_with_the_logged_feedback_redistributed(
        spark_slots, tmp_path, resume_at):
    """A savepoint of the running loop at p=2 (records circulating: its heads' logs hold them); the job
    resumed from it at another parallelism gets the logged records by key group (the feedback edge is
    keyed) and finishes every walk exactly once, across both runs."""
    count = 4000
    out = str(tmp_path / "out")
    env = walks_job(out, str(tmp_path / "chk"), count, rate=800, parallelism=2, interval_ms=60_000)
    client = env.execute_async("walks")
    assert client.wait_until_running(60)
    emitted(client, 800)
    savepoint = None
    for _ in range(10):  # until one catches records going round (nearly always the first)
        path = client.trigger_savepoint(str(tmp_path / "savepoints"), timeout=60)
        history = checkpoint_history(client)["history"]
        done = [c for c in history if c.get("savepoint") == path]
        if done and done[0].get("feedback_records"):
            savepoint = path
            break
        time.sleep(0.2)
    assert savepoint is not None, "no savepoint caught a record in the loop"
    client.cancel()
    with pytest.raises(Exception):
        client.get_job_execution_result(120)
    # What was committed until the savepoint, then the job from the savepoint at the new parallelism.
    before = committed(out)
    resumed = walks_job(out, str(tmp_path / "chk2"), count, rate=800, parallelism=resume_at, restore=savepoint)
    resumed.execute("walks resumed")
    rows = committed(out)
    assert rows == expected(count), (len(before), len(rows))


def test_stop_with_savepoint_and_resume_keep_every_walk_once(spark_slots, tmp_path):
    """streamjob stop (no drain) of a loop: the savepoint holds what circulates, the heads end with it, and
    the job resumed from it finishes every walk: nothing committed twice, nothing lost."""
    count = 3000
    out = str(tmp_path / "out")
    env = walks_job(out, str(tmp_path / "chk"), count, rate=800, parallelism=2)
    client = env.execute_async("walks")
    assert client.wait_until_running(60)
    emitted(client, 800)
    savepoint = client.stop_with_savepoint(False, str(tmp_path / "sp"), timeout=120)
    result = client.get_job_execution_result(120)
    taken = [c for c in result.checkpoints if c.get("savepoint") == savepoint]
    assert taken and taken[0]["feedback_records"] > 0, result.checkpoints  # walks were going round
    walks_job(out, str(tmp_path / "chk2"), count, rate=800, parallelism=2, restore=savepoint).execute("resumed")
    assert committed(out) == expected(count)


def test_the_loop_goes_on_checkpointing_after_its_input_ended(spark_slots, tmp_path):
    """Once the source has ended, the walks still going round keep the job running; checkpoints still
    complete meanwhile (the head's regular inputs are all aligned: it snapshots at the trigger)."""
    count = 100
    out = str(tmp_path / "out")
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(100)
    env.get_checkpoint_config().set_checkpoint_storage(str(tmp_path / "chk"))
    numbers = env.from_source(DataGenSource(lambda i: (i, 10**6 + i, 0), count=count), None, "numbers")
    loop = numbers.iterate()
    slow = loop.map(lambda r: (time.sleep(0.001), r)[1])  # ~150 laps of 100 records: seconds of loop
    stepped = slow.key_by(lambda r: r[0]).process(Lap())
    loop.close_with(stepped.filter(lambda r: r[1] != 1))
    stepped.filter(lambda r: r[1] == 1).map(lambda r: {"walk": r[0], "laps": r[2]}).sink_to(FileSink.jsonl(out))
    result = env.execute("long loop")
    assert committed(out) == sorted((i, collatz(10**6 + i)) for i in range(count))
    completed = [c for c in result.checkpoints if c["status"] == "COMPLETED"]
    assert len(completed) >= 3, result.checkpoints
    assert any(c.get("feedback_records") for c in completed)


@pytest.mark.parametrize("savepoint", [True, False], ids=["stop-with-savepoint-drain", "stop"])
def test_a_drain_of_a_checkpointed_loop_empties_it_and_commits_every_walk(spark_slots, tmp_path, savepoint):
    """A drain (stop --drain with a savepoint, or the plain stop) ends the input and lets the loop empty
    before the job's last snapshot: every walk the source started is committed, and that snapshot logs
    no feedback (nothing is left going round)."""
    out, started = str(tmp_path / "out"), str(tmp_path / "emitted")
    env = walks_job(out, str(tmp_path / "chk"), None, rate=800, parallelism=2, emitted_out=started)
    client = env.execute_async("walks")
    assert client.wait_until_running(60)
    emitted(client, 600)
    if savepoint:
        client.stop_with_savepoint(True, str(tmp_path / "sp"), timeout=120)
    else:
        client.job_manager.stop()
    result = client.get_job_execution_result(120)
    rows = committed(out)
    assert len(rows) > 500
    # Each source subtask stopped where it was: every walk one of them started is committed once, exact,
    # none lost in the loop at the stop.
    assert rows == committed(started)
    last = [c for c in result.checkpoints if c["status"] == "COMPLETED"][-1]
    assert last["feedback_records"] == 0, result.checkpoints


def test_kills_while_the_feedback_backlog_waits_on_disk_lose_and_duplicate_nothing(spark_slots, tmp_path):
    """A loop that feeds each record back tenfold for three rounds, a slow sink, and 1 KB of feedback in
    memory per head: the backlog waits in spill files, the heads' logs take spilled batches (read back
    by the checkpoint's writer), and three random kills later every output record is there once."""
    from streamjob.runtime.config import Options
    from test_iterations import expected_tenfold, read_rows, slow_id

    rng = random.Random(int(time.time()))
    n = 300
    out = str(tmp_path / "out")
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(3)
    env.enable_checkpointing(rng.randint(150, 300), CheckpointingMode.EXACTLY_ONCE)
    env.get_checkpoint_config().set_checkpoint_storage(str(tmp_path / "chk"))
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(50, 100))
    env.set_buffer_timeout(5)
    env.get_config().set(Options.BATCH_SIZE, 50).set(Options.ITERATION_FEEDBACK_MEMORY, "1 kb")
    numbers = env.from_source(DataGenSource(lambda i: (i, 0), count=n, rows_per_second=30), None, "numbers")
    loop = numbers.iterate()
    body = loop.key_by(lambda r: r[0] % 7).flat_map(
        lambda r: [(r[0] * 10 + k, r[1] + 1) for k in range(10)] if r[1] < 3 else [r])
    loop.close_with(body.filter(lambda r: r[1] < 3))
    body.filter(lambda r: r[1] >= 3).map(slow_id).sink_to(FileSink.jsonl(out))
    client = env.execute_async("tenfold")
    killed = kill_tasks_at_random(client, 3, rng, pause=(0.5, 1.5), within=60)
    result = client.get_job_execution_result(300)
    assert len(killed) == 3 and result.restarts == 3
    assert sorted(r["id"] for r in read_rows(out)) == expected_tenfold(n)
    # Logs larger than the memory budget: they held spilled batches.
    assert max(c.get("feedback_logged", 0) for c in result.checkpoints) > 1024, result.checkpoints
