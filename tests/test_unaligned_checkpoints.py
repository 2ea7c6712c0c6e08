"""Unaligned checkpoints: barriers overtake in-flight data, which is persisted as channel state.

Runtime-level tests (real channels, gate, task loop and barrier handler, no Spark) check what a
snapshot and its channel state hold; the Spark test kills tasks of a back-pressured job and
compares the committed output row for row with a failure-free run.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from types import SimpleNamespace

import pytest

from jobs import counting
from streamjob.runtime import CheckpointingMode, StreamExecutionEnvironment
from streamjob.runtime.checkpoint import channel_state
from streamjob.runtime.checkpoint.channel_state import ChannelStateCollector
from streamjob.runtime.config import ConfigError, Configuration
from streamjob.runtime.network.channels import InputChannel, InputGate, OutputChannel
from streamjob.runtime.network.events import CheckpointBarrier, EndOfPartition
from streamjob.runtime.task.slot import Task
from streamjob.runtime.task.unaligned import UnalignedBarrierHandler
from test_checkpointing import Summer, committed_rows


def two_input_task(timeout_ms: int = 0):
    """A task summing two inputs; its unaligned snapshots record (operator sums, channel state)."""
    channels = [InputChannel(edge=0, source_subtask=0, input_index=0), InputChannel(edge=1, source_subtask=0, input_index=1)]
    gate = InputGate(channels)
    head = Summer()
    task = Task(SimpleNamespace(id=0), [head], [], gate)
    taken = []

    def on_unaligned(barrier, ms):
        collector = ChannelStateCollector(barrier.checkpoint_id, barrier)
        taken.append(("unaligned", list(head.sums), collector))
        return collector

    task.barriers = UnalignedBarrierHandler(gate, on_aligned=lambda b, ms: taken.append(("aligned", list(head.sums), None)),
                                            on_abort=lambda n, why: taken.append(("abort", n, why)),
                                            on_unaligned=on_unaligned, timeout_ms=timeout_ms)
    return channels, head, task, taken


def recorded(collector: ChannelStateCollector) -> dict:
    state = channel_state.read(collector.to_bytes(), "test")
    return {key: [row for batch in batches for row in batch] for key, batches in state.inputs.items()}


def test_first_barrier_overtakes_queued_data_and_the_rest_becomes_channel_state():
    channels, head, task, taken = two_input_task()
    now_ms = int(time.time() * 1000)
    for item in ([1], [2], CheckpointBarrier(1, now_ms, unaligned=True), [4], [8], EndOfPartition()):
        channels[0].push(item)
    for item in ([10], [20]):
        channels[1].push(item)
    assert task.step(0.0)
    # The barrier on input 0 jumped its queue: the snapshot holds nothing yet, and is taken at once.
    kind, sums, collector = taken[0]
    assert kind == "unaligned" and sums == [0, 0]
    for item in ([40], CheckpointBarrier(1, now_ms, unaligned=True), [80], EndOfPartition()):
        channels[1].push(item)
    while task.step(0.0):
        pass
    assert task.finished and head.sums == [15, 150]
    assert collector.complete and not task.barriers.recording
    # Channel state = everything before the barrier on each input; processed later, persisted now.
    assert recorded(collector) == {(0, 0): [1, 2], (1, 0): [10, 20, 40]}
    # Restoring operator state + channel state gives what an aligned snapshot holds (3, 70).
    assert [s + sum(r) for s, r in zip(sums, recorded(collector).values())] == [1 + 2, 10 + 20 + 40]
    assert collector.bytes_in > 0 and len(taken) == 1


def test_savepoint_barriers_stay_aligned():
    channels, head, task, taken = two_input_task()
    for item in ([1], CheckpointBarrier(1, 0, savepoint="file:///sp"), [4], EndOfPartition()):
        channels[0].push(item)
    for item in ([10], [20], CheckpointBarrier(1, 0, savepoint="file:///sp"), EndOfPartition()):
        channels[1].push(item)
    while task.step(0.0):
        pass
    assert taken == [("aligned", [1, 30], None)]


def test_aligned_checkpoint_switches_to_unaligned_after_the_timeout():
    channels, head, task, taken = two_input_task(timeout_ms=60_000)
    fresh = CheckpointBarrier(1, int(time.time() * 1000))
    for item in ([1], fresh, [4]):
        channels[0].push(item)
    for item in ([10], [20]):
        channels[1].push(item)
    for _ in range(3):
        task.step(0.0)
        task.barriers.poll_timeout()
    # Within the timeout: aligned, input 0 blocked after its barrier, nothing snapshotted.
    assert taken == [] and task.barriers.pending is fresh and head.sums == [1, 30]
    assert task.gate.is_blocked(0)
    channels[1].push([40])
    task.barriers.timeout_ms = 1  # the alignment now lasts longer than the timeout
    time.sleep(0.01)
    task.barriers.poll_timeout()
    kind, sums, collector = taken[0]
    assert kind == "unaligned" and sums == [1, 30] and not task.gate.is_blocked(0)
    for item in ([80], CheckpointBarrier(1, fresh.timestamp_ms), EndOfPartition()):
        channels[1].push(item)
    channels[0].push(EndOfPartition())
    while task.step(0.0):
        pass
    assert head.sums == [5, 150] and collector.complete
    assert recorded(collector) == {(1, 0): [40, 80]}


def test_a_barrier_queued_past_the_timeout_overtakes_the_data_before_it():
    channels, head, task, taken = two_input_task(timeout_ms=50)
    old = CheckpointBarrier(1, int(time.time() * 1000) - 1000)  # triggered 1 s ago
    for item in ([1], [2], old, [4]):
        channels[0].push(item)
    channels[1].push([10])
    task.barriers.poll_timeout()
    kind, sums, collector = taken[0]
    assert kind == "unaligned" and sums == [0, 0]
    assert list(channels[0].queue) == [[1], [2], [4]]  # the barrier left the queue
    channels[1].push(CheckpointBarrier(1, old.timestamp_ms))
    for ch in channels:
        ch.push(EndOfPartition())
    while task.step(0.0):
        pass
    assert recorded(collector) == {(0, 0): [1, 2], (1, 0): [10]}


def test_output_barrier_overtakes_batches_waiting_for_credit():
    sent = []
    out = OutputChannel(lambda item, is_data: sent.append(item), batch_size=100, buffer_timeout_ms=1000)
    out.add_credits(1)
    for b in ([1], [2], [3]):
        out.emit(b)
        out.flush()
    barrier = CheckpointBarrier(1, 0, unaligned=True)
    assert sent == [[1]] and out.overtake(barrier) == [[2], [3]]
    assert sent == [[1], barrier]  # events take no credit: it went out at once, before [2] and [3]
    out.add_credits(2)
    assert sent == [[1], barrier, [2], [3]]


def test_aligned_barrier_in_an_output_queue_times_out_into_an_unaligned_one():
    sent = []
    out = OutputChannel(lambda item, is_data: sent.append(item), batch_size=100, buffer_timeout_ms=1000)
    out.emit([1])
    barrier = CheckpointBarrier(1, 0)
    out.send_event(barrier)
    collector = ChannelStateCollector(1, barrier, waiting_outputs={(0, 0): out})
    collector.settle_outputs(start_delay_ms=10, timeout_ms=100)
    assert not collector.complete and sent == []
    collector.settle_outputs(start_delay_ms=200, timeout_ms=100)
    assert collector.complete and collector.unaligned and sent == [CheckpointBarrier(1, 0, unaligned=True)]
    assert channel_state.read(collector.to_bytes(), "test").outputs == {(0, 0): [[1]]}


def test_unaligned_checkpoints_need_exactly_once_and_the_api_names_the_options():
    env = StreamExecutionEnvironment.get_execution_environment()
    config = env.get_checkpoint_config()
    assert not config.is_unaligned_checkpoints_enabled()
    config.enable_unaligned_checkpoints()
    config.set_aligned_checkpoint_timeout(2000)
    assert config.is_unaligned_checkpoints_enabled() and config.get_aligned_checkpoint_timeout() == 2000
    config.disable_unaligned_checkpoints()
    assert not config.is_unaligned_checkpoints_enabled()
    # The rest of PyFlink's CheckpointConfig does what it says, or names what it does not do.
    from datetime import timedelta

    from streamjob.runtime.api.checkpointing import ExternalizedCheckpointCleanup
    from streamjob.runtime.api.time import Duration

    assert config.set_alignment_timeout(Duration.of_seconds(3)).get_alignment_timeout() == 3000
    assert config.set_aligned_checkpoint_timeout(timedelta(milliseconds=250)).get_aligned_checkpoint_timeout() == 250
    assert not config.is_externalized_checkpoints_enabled()
    config.enable_externalized_checkpoints(ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION)
    assert config.is_externalized_checkpoints_enabled()
    config.set_externalized_checkpoint_cleanup(ExternalizedCheckpointCleanup.DELETE_ON_CANCELLATION)
    assert config.get_externalized_checkpoint_cleanup() == ExternalizedCheckpointCleanup.DELETE_ON_CANCELLATION
    assert config.set_fail_on_checkpointing_errors(False).get_tolerable_checkpoint_failure_number() == 2**31 - 1
    assert config.set_fail_on_checkpointing_errors(True).is_fail_on_checkpointing_errors()
    assert config.set_force_unaligned_checkpoints(True).is_force_unaligned_checkpoints()
    config.set_checkpoint_storage_dir("file:///tmp/sj-checkpoints")
    assert config.get_checkpoint_storage() == "file:///tmp/sj-checkpoints"
    with pytest.raises(NotImplementedError, match="CheckpointConfig.enable_approximate_local_recovery"):
        config.enable_approximate_local_recovery(True)
    with pytest.raises(TypeError, match="execution.checkpointing.dir"):
        config.set_checkpoint_storage(42)
    with pytest.raises(ConfigError, match="execution.checkpointing.unaligned=true needs execution.checkpointing.mode"):
        Configuration({"execution.checkpointing.unaligned": "true",
                       "execution.checkpointing.mode": "AT_LEAST_ONCE"}).unaligned_checkpoints()
    assert Configuration({"execution.checkpointing.unaligned.enabled": "true",
                          "execution.checkpointing.aligned-checkpoint-timeout": "1 s"}).unaligned_checkpoints() == (True, 1000)


# -- real Spark: exactly once under kills, back-pressured, unaligned ------------------------------------
def kill_until_channel_state_restored(client, rng: random.Random, min_kills: int = 3, max_kills: int = 5):
    """SIGKILL random task processes (each time once the job runs again and a checkpoint completed
    since the last kill, so every restore has one) until at least ``min_kills`` happened and one restore
    used a checkpoint holding channel state. Returns (kills, {restored checkpoint id: held channel state})."""
    assert client.wait_until_running(60)
    jm = client.job_manager
    kills, restores = 0, {}
    completed_at_kill = 0
    deadline = time.monotonic() + 150
    while time.monotonic() < deadline and not client._finished.is_set():
        if jm.restore is not None:
            restores[jm.restore.checkpoint_id] = bool(jm.restore.metadata.channel_state())
        if kills >= max_kills or (kills >= min_kills and any(restores.values())):
            break
        time.sleep(rng.uniform(0.3, 1.2))
        pids = jm.task_pids()
        if not jm.all_running() or len(pids) < 3 or jm.coordinator.counts["COMPLETED"] <= completed_at_kill:
            continue
        try:
            completed_at_kill = jm.coordinator.counts["COMPLETED"]
            os.kill(pids[rng.choice(sorted(pids))], signal.SIGKILL)
            kills += 1
        except ProcessLookupError:
            pass
    return kills, restores


@pytest.mark.parametrize("backend, aligned_timeout_ms", [("hashmap", 0), ("rocksdb", 30)],
                         ids=["hashmap-unaligned", "rocksdb-aligned-timeout"])
def test_random_kills_with_unaligned_checkpoints_under_backpressure_lose_and_duplicate_nothing(
        spark_slots, tmp_path, backend, aligned_timeout_ms):
    """RocksDB runs with an aligned-checkpoint timeout of 30 ms: its checkpoints start aligned and turn
    unaligned under the backpressure (the timeout path, with the same exactly-once check)."""
    rng = random.Random(int(time.time()))
    rows = 40_000
    out, checkpoints = str(tmp_path / "out"), str(tmp_path / "checkpoints")
    # The keyed operator takes 0.5 ms a row (~2,000 rows/s per subtask) and the source offers 20,000
    # rows/s: every channel stays full, so each unaligned barrier overtakes in-flight data.
    env = counting.build(out, checkpoints, rows, rate=20_000, interval_ms=rng.randint(200, 400), backend=backend,
                         conf={"execution.checkpointing.unaligned": "true",
                               "execution.checkpointing.aligned-checkpoint-timeout": aligned_timeout_ms}, slow_ms=0.5)
    client = env.execute_async("counting-unaligned")
    kills, restores = kill_until_channel_state_restored(client, rng, min_kills=2)
    result = client.get_job_execution_result(300)
    # Each kill waits for a checkpoint completed after the previous restore, so fast restarts leave
    # time for two or three before the input ends (a kill as the job ends may find nothing to restart).
    assert kills >= 2 and result.restarts >= 1
    completed = [c for c in result.checkpoints if c["status"] == "COMPLETED"]
    assert any(c["checkpoint_type"] == "UNALIGNED_CHECKPOINT" and c["persisted_data"] > 0 for c in completed)
    assert any(restores.values()), f"no restore used a checkpoint holding in-flight data: {restores}"
    got = committed_rows(out)
    expected = counting.expected_rows(rows)
    assert len(got) == len(expected)
    assert got == expected


# -- statistics: Flink's persisted_data / processed_data in REST and Prometheus --------------------------
def test_persisted_in_flight_bytes_per_checkpoint_in_rest_stats_and_metrics(tmp_path):
    from streamjob.runtime.checkpoint.coordinator import CheckpointCoordinator, CheckpointSettings
    from streamjob.runtime.checkpoint.storage import CheckpointStorage, load_checkpoint
    from streamjob.runtime.cluster.jobmanager import JobManager
    from streamjob.runtime.cluster.metrics import JobMetrics

    storage = CheckpointStorage(f"file://{tmp_path}", "job1", inline_threshold=0)
    storage.initialize()
    settings = CheckpointSettings(interval_ms=100, mode="EXACTLY_ONCE", timeout_ms=10_000, min_pause_ms=0,
                                  max_concurrent=1, tolerable_failures=0, num_retained=2,
                                  retention="NO_EXTERNALIZED_CHECKPOINTS")
    cc = CheckpointCoordinator(settings, storage, job_id="job1", job_name="j", parallelism=2, max_parallelism=128,
                               operators={"sum": "Sum"}, tasks=[1])
    jm = JobManager("job1", "j", 2, coordinator=cc)
    # Its event loop (no servers): a checkpoint completes there once its _metadata write returns.
    threading.Thread(target=jm._loop.run_forever, daemon=True).start()
    collector = ChannelStateCollector(1, CheckpointBarrier(1, 0, unaligned=True), input_keys=[(0, 0)])
    rows = [{"k": i, "v": f"value {i}"} for i in range(300)]
    collector.add_input(0, [rows])
    data = collector.to_bytes()
    for n, persisted in ((1, collector.bytes_in), (2, 0)):
        cc.trigger(float(n))
        for sub in range(2):
            handles = {"sum": storage.write_state(n, f"sum-{sub}", b"state", {"operator": [0, 1]})}
            if persisted and sub == 1:
                handles[channel_state.CHANNEL_STATE_KEY] = storage.write_state(n, "cs-1", data, {"channel_state": {}})
            jm._on_ack({"type": "ack", "slot": sub, "attempt": 0, "id": n, "task": 1, "name": "Sum", "handles": handles,
                        "sync_ms": 1, "async_ms": 1, "alignment_ms": 0, "size": 5,
                        "persisted_data": persisted if sub == 1 else 0, "processed_data": persisted if sub == 1 else 0,
                        "unaligned": bool(persisted)})
        # The job manager writes _metadata in its storage thread (never on its event loop): wait for it.
        deadline = time.monotonic() + 30
        while (cc.latest() is None or cc.latest().checkpoint_id < n) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert cc.latest() is not None and cc.latest().checkpoint_id == n
        if n == 1:
            # The unaligned checkpoint's _metadata names its channel state, which reads back as recorded.
            root, meta = load_checkpoint(storage.checkpoint_url(1))
            assert set(meta.channel_state()) == {"1"} and meta.channel_state()["1"][0] is None
            assert recorded(collector) == {(0, 0): rows}
            text = JobMetrics(jm).exposition()[0].decode()
            assert f'streamjob_last_checkpoint_persisted_data_bytes{{job="j",job_id="job1"}} {float(persisted)}' in text
            assert 'streamjob_last_checkpoint_unaligned{job="j",job_id="job1"} 1.0' in text
    history = sorted(jm.checkpoints_info()["history"], key=lambda h: h["id"])
    assert [(h["id"], h["checkpoint_type"], h["persisted_data"]) for h in history] == [
        (1, "UNALIGNED_CHECKPOINT", collector.bytes_in), (2, "CHECKPOINT", 0)]
    assert collector.bytes_in > 1000 and history[0]["processed_data"] == collector.bytes_in
    text = JobMetrics(jm).exposition()[0].decode()
    jm._loop.call_soon_threadsafe(jm._loop.stop)
    assert 'streamjob_last_checkpoint_persisted_data_bytes{job="j",job_id="job1"} 0.0' in text
    assert 'streamjob_last_checkpoint_processed_data_bytes{job="j",job_id="job1"} 0.0' in text


def in_flight_bytes(checkpoint) -> int:
    """The bytes of in-flight data a completed checkpoint holds (its channel state)."""
    return sum(int(h.get("size", 0)) for handles in checkpoint.metadata.channel_state().values()
               for h in handles if h)


def test_repeated_failures_with_unaligned_checkpoints_do_not_pile_up_in_flight_data(spark_slots, tmp_path):
    """Four failures in a row, each as soon as the restarted job completed a checkpoint of its own (its
    restored in-flight data need not have drained): every restart restores a checkpoint the attempt before
    completed (checkpoints resume after each restore, never the same one restored again), and the in-flight
    data checkpoints persist does not grow from failure to failure: restored channel state replays inside
    the running task, so a checkpoint holds at most what the channels hold plus what the restore put back,
    and what is restored stays within two channels' worth. Sizes and counts only, no clock. Output exact."""
    rng = random.Random(int(time.time()))
    kills_wanted, rows = 4, 100_000  # ~35 s of input once back-pressured, ~50 s with the restarts
    out, checkpoints = str(tmp_path / "out"), str(tmp_path / "checkpoints")
    # Back-pressured as above (0.5 ms a row in the keyed operator, the source offering 20,000 rows/s),
    # with batches of 500 rows so a barrier waits at most one batch (250 ms) behind a task's current work.
    env = counting.build(out, checkpoints, rows, rate=20_000, interval_ms=300, retained=10, slow_ms=0.5,
                         conf={"execution.checkpointing.unaligned": "true", "execution.batch-size": 500})
    client = env.execute_async("counting-unaligned-repeated")
    assert client.wait_until_running(60)
    jm = client.job_manager

    def history():
        return [h for h in jm.coordinator.history if h.status == "COMPLETED"]

    # The failure-free attempt runs into steady back pressure: its channels hold what they can.
    _wait(lambda: jm.coordinator is not None and sum(h.persisted_data > 0 for h in history()) >= 3, 90,
          "three unaligned checkpoints with in-flight data")
    steady = max(h.persisted_data for h in history())
    restores: list = []  # the checkpoint each restart restored
    kills = 0
    while kills < kills_wanted:
        attempt, restored = jm.attempt, jm.restore
        _wait(lambda: jm.all_running() and jm.coordinator.latest() is not None and (
            restored is None or jm.coordinator.latest().checkpoint_id > restored.checkpoint_id), 90,
            f"a checkpoint completed in attempt {attempt + 1}")
        assert not client._finished.is_set(), f"the input ran out after {kills} kills"
        time.sleep(rng.uniform(0.0, 0.3))
        pids = jm.task_pids()
        os.kill(pids[rng.choice(sorted(pids))], signal.SIGKILL)
        kills += 1
        _wait(lambda: jm.attempt > attempt and jm.restore is not None, 90, f"the restart after kill {kills}")
        restores.append(jm.restore)
    result = client.get_job_execution_result(300)
    assert result.restarts == kills_wanted
    ids = [r.checkpoint_id for r in restores]
    assert ids == sorted(set(ids)), f"a restart restored the same or an older checkpoint again: {ids}"
    completed = [c for c in result.checkpoints if c["status"] == "COMPLETED"]
    persisted = [c["persisted_data"] for c in completed]
    restored_bytes = [in_flight_bytes(r) for r in restores]
    # What the channels hold varies with how full each batch was when the barrier came: a quarter of slack.
    channels = 1.25 * steady
    # A checkpoint persists at most what the channels hold plus what a restore put back into them...
    assert max(persisted) <= channels + max(restored_bytes), (steady, restored_bytes, persisted)
    # ... and what is restored does not grow with each failure (piled up, four failures would restore
    # four or five channels' worth).
    assert max(restored_bytes) <= 2 * channels, (steady, restored_bytes, persisted)
    assert committed_rows(out) == counting.expected_rows(rows)


def _wait(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)
