"""Exactly-once under failures, on real local Spark: tasks are SIGKILLed at random moments.

The committed output (visible files of the 2PC FileSink) is compared row for
row with what a failure-free run computes (``tests/jobs/counting.py``).
"""

from __future__ import annotations

import glob
import json
import os
import random
import signal
import time
import urllib.request
from types import SimpleNamespace

import pyarrow.parquet as pq
import pytest

from conftest import run_cli
from jobs import counting
from streamjob.runtime import CheckpointingMode
from streamjob.runtime.cluster.executor import JobExecutionError
from streamjob.runtime.network.channels import InputChannel, InputGate
from streamjob.runtime.network.events import CheckpointBarrier, EndOfPartition
from streamjob.runtime.task.checkpointing import BarrierHandler
from streamjob.runtime.task.slot import Task

HERE = os.path.dirname(__file__)


def committed_rows(out: str) -> list[tuple]:
    rows = []
    for path in glob.glob(os.path.join(out, "*")):  # glob skips the hidden in-progress / pending files
        if path.endswith(".parquet"):
            rows += [tuple(r[k] for k in ("key", "i", "count", "prev")) for r in pq.read_table(path).to_pylist()]
            continue
        with open(path) as f:
            rows += [tuple(json.loads(line)[k] for k in ("key", "i", "count", "prev")) for line in f]
    return sorted(rows)


def kill_tasks_at_random(client, kills: int, rng: random.Random, pause: tuple[float, float] = (0.3, 1.5),
                         within: float = 240) -> list[float]:
    """SIGKILL a random task process at random moments, each time once the job runs again."""
    assert client.wait_until_running(60)
    jm = client.job_manager
    killed_at = []
    deadline = time.monotonic() + within
    while len(killed_at) < kills and time.monotonic() < deadline:
        if client._finished.is_set():
            break
        # The random pause counts from when the job runs again: the restart is waited out in short
        # polls, not in pauses (that would add half a pause per kill and kill no more randomly).
        while not (jm.all_running() and len(jm.task_pids()) >= 3) and time.monotonic() < deadline \
                and not client._finished.is_set():
            time.sleep(0.02)
        time.sleep(rng.uniform(*pause))
        pids = jm.task_pids()
        if not jm.all_running() or len(pids) < 3:
            continue
        slot = rng.choice(sorted(pids))
        attempt = jm.attempt
        try:
            os.kill(pids[slot], signal.SIGKILL)
            killed_at.append(time.monotonic())
        except ProcessLookupError:
            continue
        # Until the job manager saw this kill, the attempt still looks running: a second kill would hit
        # the same attempt (two kills, one restart).
        noticed = time.monotonic() + 30
        while jm.attempt == attempt and not jm.failures and time.monotonic() < noticed:
            time.sleep(0.01)
    return killed_at


@pytest.mark.parametrize("mode, backend, incremental, sink", [
    (CheckpointingMode.EXACTLY_ONCE, "hashmap", False, "jsonl"),
    (CheckpointingMode.AT_LEAST_ONCE, "hashmap", False, "jsonl"),
    (CheckpointingMode.EXACTLY_ONCE, "rocksdb", False, "jsonl"),
    (CheckpointingMode.EXACTLY_ONCE, "rocksdb", True, "jsonl"),
    (CheckpointingMode.EXACTLY_ONCE, "hashmap", False, "parquet"),
], ids=["exactly-once-hashmap", "at-least-once-hashmap", "exactly-once-rocksdb-full", "exactly-once-rocksdb-incremental",
        "exactly-once-hashmap-parquet"])
def test_random_kills_lose_and_duplicate_nothing(spark_slots, tmp_path, mode, backend, incremental, sink):
    rng = random.Random(int(time.time()))
    rows = 60_000
    out, checkpoints = str(tmp_path / "out"), str(tmp_path / "checkpoints")
    env = counting.build(out, checkpoints, rows, rate=6000, interval_ms=rng.randint(200, 500), mode=mode,
                         backend=backend, incremental=incremental, sink=sink)
    client = env.execute_async("counting")
    killed = kill_tasks_at_random(client, 5, rng)
    result = client.get_job_execution_result(300)
    assert len(killed) >= 5, "the job finished before the test could kill 5 tasks"
    assert result.restarts >= 5
    assert sum(c["status"] == "COMPLETED" for c in result.checkpoints) > 0
    got = committed_rows(out)
    expected = counting.expected_rows(rows)
    if mode == CheckpointingMode.EXACTLY_ONCE:
        assert len(got) == len(expected)
        assert got == expected
    else:
        # At least once: every input row is in the output (some maybe twice, with other counts).
        assert {r[1] for r in got} == set(range(rows))
    assert not os.path.exists(os.path.join(checkpoints, result.job_id))  # finished: checkpoints cleaned up


def test_resume_from_a_retained_checkpoint_gives_the_uninterrupted_output(spark_slots, tmp_path):
    rows = 30_000
    out, checkpoints = str(tmp_path / "out"), str(tmp_path / "checkpoints")
    client = counting.build(out, checkpoints, rows, rate=2500, interval_ms=200).execute_async("counting")
    assert client.wait_until_running(60)
    jm = client.job_manager
    deadline = time.monotonic() + 60
    while jm.coordinator.counts["COMPLETED"] < 6 and time.monotonic() < deadline:
        time.sleep(0.05)
    client.cancel()
    with pytest.raises(JobExecutionError, match="canceled"):
        client.get_job_execution_result(60)
    job_dir = os.path.join(checkpoints, client.job_id)
    # RETAIN_ON_CANCELLATION, 3 retained: exactly those 3 checkpoints' files are left.
    retained = sorted(int(d[4:]) for d in os.listdir(job_dir) if d.startswith("chk-"))
    assert len(retained) == 3 and retained == list(range(retained[0], retained[0] + 3))
    partial = committed_rows(out)
    assert 0 < len(partial) < rows

    proc = run_cli("run", os.path.join(HERE, "jobs", "counting.py"), "--from-checkpoint", job_dir, "--no-progress",
                   out, checkpoints, str(rows), "20000", timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"Restoring from checkpoint {retained[-1]}" in proc.stderr
    assert committed_rows(out) == counting.expected_rows(rows)


def test_resume_from_a_missing_checkpoint_is_a_clear_error(tmp_path):
    proc = run_cli("run", os.path.join(HERE, "jobs", "counting.py"), "--from-checkpoint", str(tmp_path / "nope"),
                   "x", "y", "1", "1")
    assert proc.returncode == 1
    assert "--from-checkpoint" in proc.stderr and "no such checkpoint" in proc.stderr


class Summer:
    """A head operator that sums what each input delivered: its state is two numbers."""

    def __init__(self):
        self.sums = [0, 0]

    def process_batch(self, batch, input_index, ts=None):
        self.sums[input_index] += sum(batch)

    def end_input(self, input_index):
        pass

    def next_processing_time(self):
        return None  # no timers

    def finish(self):
        pass


def run_two_inputs(exactly_once: bool) -> list:
    channels = [InputChannel(edge=0, source_subtask=0, input_index=0), InputChannel(edge=1, source_subtask=0, input_index=1)]
    for item in ([1], [2], CheckpointBarrier(1, 0), [4], [8], EndOfPartition()):
        channels[0].push(item)
    for item in ([10], [20], [40], CheckpointBarrier(1, 0), [80], EndOfPartition()):
        channels[1].push(item)
    gate = InputGate(channels)
    head = Summer()
    task = Task(SimpleNamespace(id=0), [head], [], gate)
    snapshots = []
    task.barriers = BarrierHandler(gate, exactly_once, on_aligned=lambda b, ms: snapshots.append(list(head.sums)),
                                   on_abort=lambda n, why: None)
    while task.step(0.0):
        pass
    assert task.finished and head.sums == [15, 150]
    return snapshots


def test_aligned_snapshot_holds_exactly_the_records_before_the_barrier_on_each_input():
    # Round-robin reading would take [4] from input 0 before input 1's barrier; alignment holds it back.
    assert run_two_inputs(exactly_once=True) == [[1 + 2, 10 + 20 + 40]]
    # Without alignment (at least once) the snapshot also holds input 0's records after its barrier.
    assert run_two_inputs(exactly_once=False) == [[1 + 2 + 4, 10 + 20 + 40]]


@pytest.mark.timeout(600)  # ~70 s on an idle machine; each restart takes several times longer on a loaded one
def test_twenty_kills_make_twenty_restarts(spark_slots, tmp_path):
    """Each task kill is one restart, no more: a task of a cancelled attempt that registers late (Spark
    started its worker before the stage was cancelled) is refused instead of joining the next attempt
    and failing it again. The count is read where a user reads it: GET /v1/job."""
    rng = random.Random(int(time.time()))
    # 18 s of input: each kill leaves well under a second of progress behind (a checkpoint every
    # 0.2-0.4 s, the next kill 0.1-0.4 s after the restart), so 20 kills use up at most ~10 s of it.
    rows = 144_000
    out, checkpoints = str(tmp_path / "out"), str(tmp_path / "checkpoints")
    env = counting.build(out, checkpoints, rows, rate=8000, interval_ms=rng.randint(200, 400))
    client = env.execute_async("counting")
    killed = kill_tasks_at_random(client, 20, rng, pause=(0.1, 0.4), within=500)
    assert len(killed) == 20, f"the job finished before the test could kill 20 tasks ({len(killed)})"
    jm = client.job_manager
    deadline = time.monotonic() + 30
    while not (jm.all_running() and jm.restarts >= 20) and time.monotonic() < deadline:
        time.sleep(0.1)  # the last kill's restart
    with urllib.request.urlopen(f"{jm.rest.url}/v1/job", timeout=10) as resp:
        job = json.loads(resp.read())
    assert job["restarts"] == 20, job
    result = client.get_job_execution_result(300)
    assert result.restarts == 20
    assert committed_rows(out) == counting.expected_rows(rows)
