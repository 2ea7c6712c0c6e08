"""Savepoints on real local Spark: stop-with-savepoint, restore at another parallelism and into the
other state backend, a moved savepoint, and what a restore refuses.

The job is ``tests/jobs/counting.py`` (keyed running counts into the exactly-once FileSink); the
committed output of all phases together must equal, row for row, one run without any stop.
"""

from __future__ import annotations

import json
import os
import shutil
import time

import pytest

from jobs import counting
from streamjob.runtime.checkpoint.storage import dispose_savepoint, load_checkpoint
from streamjob.runtime.graph.job_graph import JobDefinitionError
from test_checkpointing import committed_rows

ROWS = 24_000
RATE = 4_000  # rows/s for the whole source: each phase stops ~1.5 s in, well before the end


def stop_phase(tmp_path, out, savepoints, *, parallelism, backend="hashmap", incremental=False, restore=None,
               run_for=1.5, drain=False) -> str:
    """Run until a checkpoint completed and ``run_for`` s passed, then stop with a savepoint."""
    env = counting.build(out, str(tmp_path / "checkpoints"), ROWS, RATE, interval_ms=250, backend=backend,
                         incremental=incremental, parallelism=parallelism, restore=restore)
    client = env.execute_async("counting")
    assert client.wait_until_running(60)
    deadline = time.monotonic() + 60
    while client.job_manager.coordinator.counts["COMPLETED"] < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(run_for)
    path = client.stop_with_savepoint(drain, str(savepoints), timeout=120)
    result = client.get_job_execution_result(120)
    assert client.get_job_status() == "FINISHED"
    assert any(c["savepoint"] == path and c["status"] == "COMPLETED" for c in result.checkpoints)
    _, meta = load_checkpoint(path)
    assert meta.kind == "savepoint" and meta.parallelism == parallelism
    # Self-contained: every file the savepoint references is inside its directory.
    for rel in meta.files():
        assert os.path.exists(os.path.join(path.removeprefix("file://"), rel))
    assert not meta.shared_files()
    return path


def finish_phase(tmp_path, out, *, parallelism, backend="hashmap", restore=None):
    env = counting.build(out, str(tmp_path / "checkpoints"), ROWS, RATE, interval_ms=250, backend=backend,
                         parallelism=parallelism, restore=restore)
    return env.execute("counting")


def test_rescale_2_3_1_through_savepoints_is_exactly_one_run(spark_slots, tmp_path):
    out, savepoints = str(tmp_path / "out"), tmp_path / "savepoints"
    first = stop_phase(tmp_path, out, savepoints, parallelism=2)
    partial = len(committed_rows(out))
    assert 0 < partial < ROWS, "the first phase should stop in the middle"
    second = stop_phase(tmp_path, out, savepoints, parallelism=3, restore=first)
    assert partial < len(committed_rows(out)) < ROWS
    finish_phase(tmp_path, out, parallelism=1, restore=second)
    assert committed_rows(out) == counting.expected_rows(ROWS)


def test_hashmap_rocksdb_hashmap_through_moved_savepoints(spark_slots, tmp_path):
    out, savepoints = str(tmp_path / "out"), tmp_path / "savepoints"
    first = stop_phase(tmp_path, out, savepoints, parallelism=2, backend="hashmap")
    moved = str(tmp_path / "elsewhere" / "sp")
    shutil.move(first.removeprefix("file://"), moved)  # self-contained: restores from anywhere
    second = stop_phase(tmp_path, out, savepoints, parallelism=2, backend="rocksdb", incremental=True,
                        restore=moved)
    finish_phase(tmp_path, out, parallelism=3, backend="hashmap", restore=second)
    assert committed_rows(out) == counting.expected_rows(ROWS)


def test_stop_with_drain_savepoint_restores_to_the_end(spark_slots, tmp_path):
    """Drain: the sources end their input first; the savepoint holds the finished state."""
    out, savepoints = str(tmp_path / "out"), tmp_path / "savepoints"
    path = stop_phase(tmp_path, out, savepoints, parallelism=2, drain=True)
    before = committed_rows(out)
    finish_phase(tmp_path, out, parallelism=2, restore=path)
    assert committed_rows(out) == counting.expected_rows(ROWS)
    assert len(before) < ROWS


def test_restore_refusals_name_the_problem(spark_slots, tmp_path):
    out, savepoints = str(tmp_path / "out"), tmp_path / "savepoints"
    path = stop_phase(tmp_path, out, savepoints, parallelism=2, run_for=0.2)
    doc = json.loads(open(os.path.join(path.removeprefix("file://"), "_metadata")).read())
    assert doc["type"] == "savepoint"

    # state of an operator the new job does not have: refused, naming the uid ...
    env = counting.build(out, str(tmp_path / "c2"), ROWS, RATE, parallelism=2, restore=path, count_uid="renamed")
    with pytest.raises(JobDefinitionError, match=r"uid 'count'.*--allow-non-restored-state"):
        env.execute("counting")
    # ... unless allowed: then that state is dropped and the job runs
    env = counting.build(str(tmp_path / "out2"), str(tmp_path / "c3"), 600, 10_000, parallelism=2, restore=path,
                         conf={"execution.state-recovery.ignore-unclaimed-state": True}, count_uid="renamed")
    env.execute("counting")

    # max parallelism is fixed by the first run
    env = counting.build(out, str(tmp_path / "c4"), ROWS, RATE, parallelism=2, restore=path)
    env.set_max_parallelism(64)
    with pytest.raises(JobDefinitionError, match="max parallelism 128, this job has 64"):
        env.execute("counting")

    # disposing a savepoint deletes it; disposing a checkpoint is refused
    dispose_savepoint(path)
    assert not os.path.exists(path.removeprefix("file://"))
