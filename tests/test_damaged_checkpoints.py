"""A damaged newest checkpoint never duplicates output: real local Spark, real files.

The job is ``tests/jobs/counting.py`` (keyed running counts into the exactly-once FileSink), with every
state handle in a file (``file-state-threshold`` 0). The newest completed checkpoint is damaged three
ways: its ``_metadata`` truncated, a state file deleted, one bit of a state file flipped. At resume
(``streamjob run --from-checkpoint`` into the same output) and at failover (a task SIGKILLed right
after the damage) the job fails with one line naming the file, the operator and the key group, and
the committed output is compared row for row: nothing duplicated. With
``--allow-older-checkpoint`` the checkpoint before is restored (and what the newest one committed is
written again, as the user accepted). Savepoints' state files are checked on both backends.
"""

from __future__ import annotations

import glob
import os
import re
import signal
import time

import pytest

from conftest import run_cli
from jobs import counting
from streamjob.runtime.checkpoint.storage import load_checkpoint
from streamjob.runtime.cluster.executor import JobExecutionError
from test_checkpointing import committed_rows

HERE = os.path.dirname(__file__)
ROWS = 24_000
RATE = 4_000  # rows/s: each run stops or is damaged well before the end
FILES = {"execution.checkpointing.file-state-threshold": 0}  # every state handle in a file of its own
ALLOW = "execution.state-recovery.allow-older-checkpoint"


def wait_completed(client, n: int) -> None:
    deadline = time.monotonic() + 60
    while client.job_manager.coordinator.counts["COMPLETED"] < n and time.monotonic() < deadline:
        time.sleep(0.01)
    assert client.job_manager.coordinator.counts["COMPLETED"] >= n


def count_state(chk_dir: str, subtask: int = 1) -> tuple[str, dict]:
    """The file holding subtask ``subtask``'s state of the Count operator (uid "count"), and its handle."""
    root, meta = load_checkpoint(chk_dir)
    handle = meta.operators["count"]["subtasks"][subtask]
    return os.path.join(root.removeprefix("file://"), handle["file"]), handle


# -- the three kinds of damage, each returning what the message must say ----------------------------

def truncate_metadata(chk_dir: str) -> str:
    path = os.path.join(chk_dir, "_metadata")
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(data[: len(data) // 2])
    return rf"file://{path} is truncated"


def delete_state_file(chk_dir: str) -> str:
    path, _ = count_state(chk_dir)
    os.remove(path)
    return rf"state file file://{path} of operator '[^']+' \(subtask 2/3, key groups 43-85\) is missing"


def flip_state_bit(chk_dir: str) -> str:
    """Flips one bit inside the first key group of the count state. The heap backend writes that state
    (int keys, int counts) columnar: a key block and a value block, each key group a slice of rows with
    its own checksums, and the bit goes into that key group's rows of the value block; otherwise (a
    RocksDB savepoint) each key group is a chunk of its own, and the bit goes into its middle."""
    path, handle = count_state(chk_dir)
    table = handle["index"]["keyed"]["count"]
    groups = sorted(table["groups"].items(), key=lambda g: g[1][0])
    if "columnar" in table:
        kg, (start, stop, *_) = next((g, span) for g, span in groups if span[1] > span[0])
        values_offset, values_length = table["columnar"]["values"]
        width = values_length // max(span[1] for _, span in groups)
        at = values_offset + (start + (stop - start) // 2) * width
        said = rf"\(state 'count'\), key group {kg}: checksum mismatch \(crc32c 0x\w{{8}}, recorded 0x\w{{8}}\) " \
               rf"in its rows of the value block"
    else:
        kg, (offset, length, _) = groups[0]
        at = offset + length // 2
        said = rf"\(state 'count', key group {kg}\): checksum mismatch \(crc32c 0x\w{{8}}, recorded 0x\w{{8}}\)"
    with open(path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)[0]
        f.seek(at)
        f.write(bytes([byte ^ 0x04]))
    return rf"state file file://{path} of operator '[^']+' \(subtask 2/3\) " + said


DAMAGE = {"truncated-metadata": truncate_metadata, "deleted-state-file": delete_state_file,
          "flipped-bit": flip_state_bit}
COMMITTED = (r"\. Checkpoint {n} completed, so sinks may have committed output with it, and restoring an older "
             r"checkpoint would write that output again; to accept that, set " + ALLOW.replace(".", r"\.") + r"=true")


def no_duplicates(rows: list) -> None:
    assert len(set(rows)) == len(rows), "rows were written twice"
    assert set(rows) <= set(counting.expected_rows(ROWS))


# -- at resume --------------------------------------------------------------------------------------

@pytest.mark.parametrize("damage", DAMAGE)
def test_resume_from_a_damaged_newest_checkpoint_fails_without_duplicating(spark_slots, tmp_path, damage):
    out, checkpoints = str(tmp_path / "out"), str(tmp_path / "checkpoints")
    client = counting.build(out, checkpoints, ROWS, RATE, interval_ms=200, conf=FILES).execute_async("counting")
    assert client.wait_until_running(60)
    wait_completed(client, 4)
    client.cancel()
    with pytest.raises(JobExecutionError, match="canceled"):
        client.get_job_execution_result(60)
    job_dir = os.path.join(checkpoints, client.job_id)
    retained = sorted(int(d[4:]) for d in os.listdir(job_dir) if d.startswith("chk-"))
    newest = retained[-1]
    said = DAMAGE[damage](os.path.join(job_dir, f"chk-{newest}"))
    before = committed_rows(out)
    no_duplicates(before)

    args = ("run", os.path.join(HERE, "jobs", "counting.py"), "--from-checkpoint", job_dir, "--no-progress",
            out, checkpoints, str(ROWS), "20000")
    proc = run_cli(*args, timeout=240)
    assert proc.returncode == 1, proc.stderr[-3000:]
    error = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1, proc.stderr[-3000:]
    assert re.search(rf"cannot restore checkpoint {newest}: {said}.*{COMMITTED.format(n=newest)}", error[0]), error[0]
    after = committed_rows(out)
    no_duplicates(after)
    assert after == before

    if damage != "truncated-metadata":
        return
    # Accepted explicitly: the checkpoint before is restored; what the newest one committed is written again.
    proc = run_cli(*args, "--allow-older-checkpoint", timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"Not restoring checkpoint {newest}: file://{job_dir}/chk-{newest}/_metadata is truncated" in proc.stderr
    assert f"Restoring from checkpoint {retained[-2]}" in proc.stderr
    final = committed_rows(out)
    assert set(final) == set(counting.expected_rows(ROWS)) and len(final) >= ROWS


def test_a_damaged_checkpoint_named_explicitly_is_never_replaced(spark_slots, tmp_path):
    out, checkpoints = str(tmp_path / "out"), str(tmp_path / "checkpoints")
    client = counting.build(out, checkpoints, ROWS, RATE, interval_ms=200, conf=FILES).execute_async("counting")
    assert client.wait_until_running(60)
    wait_completed(client, 3)
    client.cancel()
    with pytest.raises(JobExecutionError, match="canceled"):
        client.get_job_execution_result(60)
    job_dir = os.path.join(checkpoints, client.job_id)
    newest = max(int(d[4:]) for d in os.listdir(job_dir) if d.startswith("chk-"))
    flip_state_bit(os.path.join(job_dir, f"chk-{newest}"))
    before = committed_rows(out)
    env = counting.build(out, str(tmp_path / "c2"), ROWS, RATE, restore=os.path.join(job_dir, f"chk-{newest}"),
                         conf={ALLOW: True})
    with pytest.raises(JobExecutionError, match=rf"cannot restore checkpoint {newest}: .*checksum mismatch.* named "
                                                r"explicitly, so no other checkpoint is restored in its place"):
        env.execute("counting")
    after = committed_rows(out)
    no_duplicates(after)
    assert after == before


# -- at failover ------------------------------------------------------------------------------------

def damage_and_kill(tmp_path, damage: str, conf: dict | None = None):
    """Run, damage the newest completed checkpoint right after it completed, SIGKILL a task."""
    out, checkpoints = str(tmp_path / "out"), str(tmp_path / "checkpoints")
    # 1.5 s between checkpoints: none completes between the damage and the failover choosing one
    client = counting.build(out, checkpoints, ROWS, RATE, interval_ms=1500,
                            conf={**FILES, **(conf or {})}).execute_async("counting")
    assert client.wait_until_running(60)
    jm = client.job_manager
    wait_completed(client, 2)
    newest = jm.coordinator.latest()
    said = DAMAGE[damage](newest.url.removeprefix("file://"))
    pids = jm.task_pids()
    os.kill(pids[min(pids)], signal.SIGKILL)
    return client, out, newest.checkpoint_id, said


@pytest.mark.parametrize("damage", ["deleted-state-file", "flipped-bit"])
def test_failover_to_a_damaged_checkpoint_fails_the_job_without_duplicating(spark_slots, tmp_path, damage):
    client, out, newest, said = damage_and_kill(tmp_path, damage)
    with pytest.raises(JobExecutionError) as e:
        client.get_job_execution_result(120)
    message = str(e.value)
    assert "\n" not in message
    assert re.search(rf"failed: cannot restore checkpoint {newest}: {said}.*{COMMITTED.format(n=newest)}", message), \
        message
    assert client.get_job_status() == "FAILED"
    # It failed at once: no restart loop on the same damaged checkpoint. A missing file is found before
    # any redeployment; a flipped bit by the task that reads it, after one (two when a task of the
    # killed attempt registers late and fails the next one: issue 25, item 5).
    assert client.job_manager.restarts <= (2 if damage == "flipped-bit" else 0)
    no_duplicates(committed_rows(out))


def test_failover_after_a_truncated_metadata_restores_the_checkpoint_it_holds(spark_slots, tmp_path):
    """The job manager restores from the checkpoint it completed and holds in memory (as Flink's
    completed checkpoint store): the state files are intact, so the output is exact."""
    client, out, newest, _ = damage_and_kill(tmp_path, "truncated-metadata")
    result = client.get_job_execution_result(120)
    assert result.restarts >= 1
    assert committed_rows(out) == counting.expected_rows(ROWS)


def test_failover_with_older_checkpoints_allowed_restores_the_one_before(spark_slots, tmp_path, capfd):
    client, out, newest, _ = damage_and_kill(tmp_path, "flipped-bit", conf={ALLOW: True})
    result = client.get_job_execution_result(120)
    assert result.restarts >= 2  # the damaged one found by a task, then the one before
    err = capfd.readouterr().err
    assert f"Not restoring checkpoint {newest}: state file" in err and "writes again" in err
    final = committed_rows(out)
    assert set(final) == set(counting.expected_rows(ROWS)) and len(final) >= ROWS


# -- savepoints, both backends ------------------------------------------------------------------------

@pytest.mark.parametrize("backend", ["hashmap", "rocksdb"])
def test_a_flipped_bit_in_a_savepoint_is_found_at_restore(spark_slots, tmp_path, backend):
    out, savepoints = str(tmp_path / "out"), str(tmp_path / "savepoints")
    env = counting.build(out, str(tmp_path / "checkpoints"), ROWS, RATE, interval_ms=250, backend=backend,
                         incremental=backend == "rocksdb", conf=FILES)
    client = env.execute_async("counting")
    assert client.wait_until_running(60)
    wait_completed(client, 1)
    path = client.stop_with_savepoint(False, savepoints, timeout=120)
    client.get_job_execution_result(120)
    said = flip_state_bit(path.removeprefix("file://"))
    before = committed_rows(out)
    env = counting.build(out, str(tmp_path / "c2"), ROWS, RATE, backend=backend, restore=path)
    with pytest.raises(JobExecutionError) as e:
        env.execute("counting")
    assert re.search(rf"cannot restore savepoint \d+: {said}.* named explicitly", str(e.value)), str(e.value)
    assert committed_rows(out) == before
    assert glob.glob(os.path.join(path.removeprefix("file://"), "_metadata"))  # the savepoint is left as it was
