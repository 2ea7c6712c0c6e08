"""The checkpoint coordinator, storage layout and retention, restart strategies: no Spark.

Storage is real (file:// in a temp dir, and fsspec's memory://); tasks are
played by calling ``acknowledge`` with handles written through the same
``CheckpointStorage.write_state`` the tasks use.
"""

from __future__ import annotations

import json
import os
import random

import pytest

from streamjob.runtime import RestartStrategies
from streamjob.runtime.checkpoint.coordinator import CheckpointCoordinator, CheckpointSettings, TaskCheckpointStats
from streamjob.runtime.checkpoint.metadata import CheckpointFormatError
from streamjob.runtime.checkpoint.storage import CheckpointStorage, load_checkpoint
from streamjob.runtime.cluster import failover
from streamjob.runtime.cluster.executor import _initial_restore
from streamjob.runtime.config import Configuration


def settings(**kw) -> CheckpointSettings:
    base = dict(interval_ms=100, mode="EXACTLY_ONCE", timeout_ms=1000, min_pause_ms=0, max_concurrent=1,
                tolerable_failures=0, num_retained=3, retention="NO_EXTERNALIZED_CHECKPOINTS")
    base.update(kw)
    return CheckpointSettings(**base)


def make(tmp_path, **kw):
    storage = CheckpointStorage(f"file://{tmp_path}", "job1", inline_threshold=0)
    storage.initialize()
    cc = CheckpointCoordinator(settings(**kw), storage, job_id="job1", job_name="j", parallelism=2, max_parallelism=128,
                               operators={"src": "Source", "sum": "Sum"}, tasks=[0, 1])
    return cc, storage


def ack_all(cc, storage, n, now, tasks=((0, "src"), (1, "sum"))):
    done = None
    for task, key in tasks:
        for sub in range(2):
            handle = storage.write_state(n, f"{key}-{sub}", f"state {n} {key} {sub}".encode() * 10, {"operator": [0, 1]})
            done = cc.acknowledge(n, task, sub, {key: handle}, TaskCheckpointStats(key, sub, 1.0, 2.0, 0.0, 10), now)
    return done


def files_under(root) -> set[str]:
    return {os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs}


def test_complete_only_with_every_ack_and_metadata_written_last(tmp_path):
    cc, storage = make(tmp_path)
    assert cc.should_trigger(10.0)
    p = cc.trigger(10.0)
    n, final = p.checkpoint_id, p.stats.final
    assert (n, final) == (1, False) and not cc.should_trigger(10.5)  # max concurrent 1
    handle = storage.write_state(n, "src-0", b"x" * 100, {"operator": [0, 1]})
    assert cc.acknowledge(n, 0, 0, {"src": handle}, TaskCheckpointStats("s", 0, 1, 1, 0, 100), 10.1) is None
    assert not os.path.exists(tmp_path / "job1" / "chk-1" / "_metadata")
    done = ack_all(cc, storage, n, 10.2, tasks=((0, "src"), (1, "sum")))
    assert done is not None and os.path.exists(tmp_path / "job1" / "chk-1" / "_metadata")
    root, meta = load_checkpoint(done.url)
    assert root == f"file://{tmp_path}/job1" and meta.checkpoint_id == 1
    assert meta.operators["sum"]["subtasks"][1]["file"].startswith("chk-1/sum-1")
    assert cc.history[-1].status == "COMPLETED" and cc.history[-1].state_size == 130


def test_after_50_checkpoints_with_3_retained_storage_holds_exactly_their_files(tmp_path):
    cc, storage = make(tmp_path, num_retained=3)
    rng = random.Random(7)
    now = 0.0
    for _ in range(70):
        now += 1.0
        n = cc.trigger(now).checkpoint_id
        if rng.random() < 0.15:  # some fail half-way: a task declines after others wrote files
            storage.write_state(n, "src-0", b"partial" * 10, {})
            cc.decline(n, "task declined", now)
            continue
        ack_all(cc, storage, n, now)
    assert cc.counts["COMPLETED"] >= 50
    kept = [c.checkpoint_id for c in cc.completed]
    assert kept == sorted(kept)[-3:] and len(kept) == 3
    expected = {"shared", "taskowned"}
    want_files = set()
    for c in cc.completed:
        want_files |= {f"chk-{c.checkpoint_id}/_metadata"} | set(c.metadata.files())
    assert files_under(tmp_path / "job1") == want_files
    assert {p for p in os.listdir(tmp_path / "job1") if not p.startswith("chk-")} == expected


def test_timed_out_and_late_checkpoints_leave_nothing_behind(tmp_path):
    cc, storage = make(tmp_path, timeout_ms=500, tolerable_failures=1)
    n = cc.trigger(0.0).checkpoint_id
    handle = storage.write_state(n, "src-0", b"x" * 50, {})
    cc.acknowledge(n, 0, 0, {"src": handle}, TaskCheckpointStats("s", 0, 1, 1, 0, 50), 0.1)
    assert cc.expire(0.4) == [] and cc.expire(0.6) == [n]
    assert not os.path.exists(tmp_path / "job1" / f"chk-{n}")
    late = storage.write_state(n, "sum-1", b"y" * 50, {})  # a slow task acknowledges after the timeout
    assert cc.acknowledge(n, 1, 1, {"sum": late}, TaskCheckpointStats("s", 1, 1, 1, 0, 50), 0.7) is None
    assert not os.path.exists(tmp_path / "job1" / late["file"])
    assert not cc.failures_exceeded()  # 1 failure, 1 tolerated
    cc.trigger(1.0)
    cc.expire(2.0)
    assert cc.failures_exceeded()
    assert cc.history[-1].failure.startswith("expired after 500 ms")


def test_interval_and_min_pause_pace_the_triggers(tmp_path):
    cc, storage = make(tmp_path, interval_ms=1000, min_pause_ms=500)
    cc.trigger(0.0)
    ack_all(cc, storage, 1, 0.9)
    assert not cc.should_trigger(0.95)  # interval not over
    assert not cc.should_trigger(1.2)  # min pause after completion at 0.9
    assert cc.should_trigger(1.45)
    cc.request_final()
    cc.trigger(1.5)
    ack_all(cc, storage, 2, 1.6)
    assert cc.final_completed and not cc.should_trigger(100.0)


def test_a_failure_after_the_final_checkpoint_lets_the_restored_attempt_take_another(tmp_path):
    """A task died after the final checkpoint completed but before its sink committed: the restored
    attempt reaches the end of input again and needs a final checkpoint of its own to commit."""
    cc, storage = make(tmp_path, interval_ms=1000)
    cc.request_final()
    cc.trigger(0.0)
    ack_all(cc, storage, 1, 0.1)
    assert cc.final_completed and not cc.should_trigger(5.0)
    cc.abort_all("task lost", 6.0)
    assert not cc.final_completed
    cc.request_final()
    assert cc.should_trigger(6.1)


def test_shutdown_follows_externalized_retention(tmp_path):
    for state, retention, kept in [("FINISHED", "RETAIN_ON_CANCELLATION", False),
                                   ("CANCELED", "RETAIN_ON_CANCELLATION", True),
                                   ("CANCELED", "DELETE_ON_CANCELLATION", False),
                                   ("FAILED", "DELETE_ON_CANCELLATION", True),
                                   ("FAILED", "NO_EXTERNALIZED_CHECKPOINTS", False)]:
        d = tmp_path / f"{state}-{retention}"
        cc, storage = make(d, retention=retention)
        cc.trigger(0.0)
        ack_all(cc, storage, 1, 0.1)
        cc.trigger(1.0)  # in progress when the job ends: always discarded
        cc.shutdown(state)
        assert os.path.exists(d / "job1" / "chk-1" / "_metadata") == kept, (state, retention)
        assert not os.path.exists(d / "job1" / "chk-2")
        assert os.path.exists(d / "job1") == kept


def test_resume_never_skips_a_damaged_newest_checkpoint_unless_allowed(tmp_path):
    cc, storage = make(tmp_path, num_retained=3)
    for n in (1, 2, 3):
        cc.trigger(float(n))
        ack_all(cc, storage, n, float(n) + 0.5)
    job = f"{tmp_path}/job1"
    metadata = tmp_path / "job1" / "chk-3" / "_metadata"
    metadata.write_bytes(metadata.read_bytes()[:-40])  # truncated
    notes = []
    with pytest.raises(CheckpointFormatError) as e:
        _initial_restore(job, False, notes.append)
    message = str(e.value)
    assert "\n" not in message
    assert f"cannot restore checkpoint 3: file://{tmp_path}/job1/chk-3/_metadata is truncated" in message
    assert "would write that output again" in message
    assert "execution.state-recovery.allow-older-checkpoint=true" in message
    # Accepted explicitly: the one before, saying what it repeats; the older ones are kept for failover.
    chosen, explicit, older = _initial_restore(job, True, notes.append)
    assert (chosen.checkpoint_id, explicit, older) == (2, None, [f"file://{tmp_path}/job1/chk-1"])
    assert "Not restoring checkpoint 3" in notes[-1] and "writes again" in notes[-1]
    # Named explicitly: never another one in its place, whatever the setting.
    for allow in (False, True):
        with pytest.raises(CheckpointFormatError, match="cannot restore checkpoint 3: .* named explicitly"):
            _initial_restore(f"{job}/chk-3", allow, notes.append)
    assert _initial_restore(f"{job}/chk-2", False, notes.append)[:2] == (cc.completed[1], f"file://{job}/chk-2")
    # A state file gone or cut short: named, with the operator, subtask and what is wrong.
    os.remove(tmp_path / "job1" / cc.completed[1].metadata.files()[0])
    with pytest.raises(CheckpointFormatError, match=r"cannot restore checkpoint 2: state file file://.*/chk-2/src-0-\w+ "
                                                    r"of operator 'Source' \(subtask 1/2\) is missing\. It was named"):
        _initial_restore(f"{job}/chk-2", False, notes.append)
    notes.clear()
    assert _initial_restore(job, True, notes.append)[0].checkpoint_id == 1  # 3 and 2 skipped, as allowed
    assert [n.split(":")[0] for n in notes] == ["Not restoring checkpoint 3", "Not restoring checkpoint 2"]
    state = tmp_path / "job1" / cc.completed[0].metadata.files()[1]
    state.write_bytes(state.read_bytes()[:-3])
    with pytest.raises(CheckpointFormatError, match=r"chk-1/src-1-\w+ of operator 'Source' \(subtask 2/2\) has 127 "
                                                    r"bytes, the checkpoint recorded 130 \(truncated"):
        _initial_restore(f"{job}/chk-1", False, notes.append)


def test_metadata_is_validated_field_by_field(tmp_path):
    cc, storage = make(tmp_path)
    cc.trigger(0.0)
    ack_all(cc, storage, 1, 0.1)
    path = tmp_path / "job1" / "chk-1" / "_metadata"
    doc = json.loads(path.read_text())
    doc["operators"]["sum"]["subtasks"] = [None]
    path.write_text(json.dumps(doc))
    with pytest.raises(CheckpointFormatError, match=r"chk-1/_metadata: checksum mismatch \(crc32c 0x\w{8}, recorded "
                                                    r"0x\w{8}\): the file is damaged"):
        load_checkpoint(f"file://{tmp_path}/job1/chk-1")
    doc["version"] = 1  # as written before checksums: read unchecked, field by field
    del doc["crc32c"]
    path.write_text(json.dumps(doc))
    with pytest.raises(CheckpointFormatError, match=r"operators\['sum'\].subtasks has 1 entries for parallelism 2"):
        load_checkpoint(f"file://{tmp_path}/job1/chk-1")
    del doc["parallelism"]
    path.write_text(json.dumps(doc))
    with pytest.raises(CheckpointFormatError, match="field 'parallelism' is missing"):
        load_checkpoint(f"{tmp_path}/job1/chk-1/_metadata")


def test_memory_storage_keeps_state_inline_and_caps_its_size():
    storage = CheckpointStorage("memory://cp-test", "job", memory_max_state=100)
    handle = storage.write_state(1, "op-0", b"x" * 80, {})
    assert "data" in handle and "file" not in handle and storage.read(handle) == b"x" * 80
    with pytest.raises(RuntimeError, match="more than the 100 bytes.*use file:// or s3://"):
        storage.write_state(1, "op-0", b"x" * 101, {})


def strategy(restart) -> failover.RestartStrategy:
    return failover.from_configuration(Configuration(restart.settings()))


def test_restart_strategies_follow_flink():
    fixed = strategy(RestartStrategies.fixed_delay_restart(2, 500))
    assert [fixed.next_delay_ms(t) for t in (0, 1, 2)] == [500, 500, None]
    rate = strategy(RestartStrategies.failure_rate_restart(2, 10_000, 100))
    assert [rate.next_delay_ms(t) for t in (0, 1000, 2000)] == [100, 100, None]
    rate = strategy(RestartStrategies.failure_rate_restart(2, 10_000, 100))
    assert [rate.next_delay_ms(t) for t in (0, 1000, 20_000)] == [100, 100, 100]  # old failures age out
    exp = strategy(RestartStrategies.exponential_delay_restart(100, 1000, 2.0, 60_000, 0.0))
    assert [exp.next_delay_ms(t) for t in (0, 1, 2, 3, 4, 5)] == [100, 200, 400, 800, 1000, 1000]
    assert exp.next_delay_ms(100_000) == 100  # quiet longer than the reset threshold: start over
    assert strategy(RestartStrategies.no_restart()).next_delay_ms(0) is None
    # Flink's defaults: no restarts without checkpointing, exponential delay (unlimited) with it.
    assert isinstance(failover.from_configuration(Configuration()), failover.NoRestart)
    default = failover.from_configuration(Configuration({"execution.checkpointing.interval": "1 s"}))
    assert isinstance(default, failover.ExponentialDelay) and default.attempts is None
    with pytest.raises(ValueError, match="unknown restart strategy 'sometimes'"):
        failover.from_configuration(Configuration({"restart-strategy.type": "sometimes"}))
    by_conf = failover.from_configuration(Configuration({"restart-strategy.type": "fixed-delay",
                                                        "restart-strategy.fixed-delay.attempts": "3",
                                                        "restart-strategy.fixed-delay.delay": "2 s"}))
    assert (by_conf.attempts, by_conf.delay_ms) == (3, 2000)


def ack_savepoint(cc, n, target, now):
    done = None
    for task, key in ((0, "src"), (1, "sum")):
        for sub in range(2):
            handle = target.write_state(n, f"{key}-{sub}", f"sp {n} {key} {sub}".encode() * 10, {"operator": [0, 1]})
            done = cc.acknowledge(n, task, sub, {key: handle}, TaskCheckpointStats(key, sub, 1.0, 2.0, 0.0, 10), now)
    return done


def test_savepoint_waits_for_checkpoints_in_flight_and_is_never_retained(tmp_path):
    from streamjob.runtime.checkpoint.storage import SavepointTarget

    cc, storage = make(tmp_path, num_retained=1)
    cc.trigger(0.0)  # checkpoint 1 in flight
    request = cc.request_savepoint(f"file://{tmp_path}/savepoints")
    assert request.status == "QUEUED" and not cc.should_trigger(5.0)
    ack_all(cc, storage, 1, 0.5)
    assert cc.should_trigger(0.6)  # the queued savepoint goes first, whatever the interval says
    p = cc.trigger(0.6)
    assert p.savepoint is request and request.status == "IN_PROGRESS" and request.checkpoint_id == 2
    assert not cc.should_trigger(50.0)  # no checkpoint starts while a savepoint is in flight
    target = SavepointTarget(request.path, inline_threshold=0)
    done = ack_savepoint(cc, 2, target, 1.0)
    assert done is not None and done.savepoint is request and not done.final
    assert request.status == "COMPLETED"
    root, meta = load_checkpoint(request.path)
    assert root == request.path and meta.kind == "savepoint" and meta.checkpoint_id == 2
    assert sorted(os.listdir(request.path.removeprefix("file://"))) == sorted(["_metadata", *meta.files()])
    assert [c.checkpoint_id for c in cc.completed] == [1]  # not used for failover, not retained
    with pytest.raises(FileExistsError):  # _metadata is put-if-absent
        target.write_metadata(meta)
    cc.trigger(2.0)
    ack_all(cc, storage, 3, 2.5)
    assert os.path.exists(request.path.removeprefix("file://"))  # retention never deletes savepoints


def test_failed_savepoint_is_reported_not_counted_and_cleaned(tmp_path):
    cc, storage = make(tmp_path, tolerable_failures=0)
    request = cc.request_savepoint(f"file://{tmp_path}/savepoints", stop=True)
    with pytest.raises(RuntimeError, match="already in progress"):
        cc.request_savepoint(f"file://{tmp_path}/savepoints", stop=True)
    with pytest.raises(ValueError, match="memory://"):
        cc.request_savepoint("memory://x")
    p = cc.trigger(0.0)
    assert p.stats.final  # a stop-with-savepoint is the job's last snapshot
    cc.decline(p.checkpoint_id, "task 1 could not write", 0.5)
    assert request.status == "FAILED" and "could not write" in request.error
    assert cc.take_aborted() == [p.checkpoint_id] and cc.take_aborted() == []
    assert not cc.failures_exceeded() and not cc.final_completed
    assert not os.path.exists(request.path.removeprefix("file://"))
    assert cc.should_trigger(10.0)  # periodic checkpoints go on


def test_without_periodic_checkpointing_only_savepoints_trigger(tmp_path):
    """interval 0 (checkpointing off): nothing is triggered on its own, but a savepoint asked for is
    (as Flink's), and it completes into its own directory."""
    from streamjob.runtime.checkpoint.storage import SavepointTarget

    storage = CheckpointStorage(f"file://{tmp_path}/checkpoints", "job1", inline_threshold=0)  # not initialized
    cc = CheckpointCoordinator(settings(interval_ms=0), storage, job_id="job1", job_name="j", parallelism=2,
                               max_parallelism=128, operators={"src": "Source", "sum": "Sum"}, tasks=[0, 1])
    assert not cc.should_trigger(0.0) and not cc.should_trigger(1000.0)
    request = cc.request_savepoint(f"file://{tmp_path}/savepoints")
    assert cc.should_trigger(1000.0)
    p = cc.trigger(1000.0)
    assert p.savepoint is request and p.checkpoint_id == 1
    done = ack_savepoint(cc, 1, SavepointTarget(request.path, inline_threshold=0), 1001.0)
    assert done is not None and request.status == "COMPLETED" and load_checkpoint(request.path)[1].kind == "savepoint"
    assert not cc.should_trigger(2000.0) and cc.completed == []
    assert not os.path.exists(tmp_path / "checkpoints")  # nothing was written to checkpoint storage
