"""Rescaling unaligned checkpoints: in-flight data (channel state) restored at another parallelism.

The mapping old channel -> new subtasks (checkpoint/channel_rescale.py) is tested on its own; the
placing of real channel state files into real input gates (task/channel_recovery.py) without Spark; and
the whole path with real Spark: a back-pressured keyed job takes unaligned checkpoints holding in-flight
data on both sides of its hash edge, is cancelled, and is restored at a higher and a lower parallelism,
its output compared row for row with the expected running counts.
"""

from __future__ import annotations

import os
import signal
import time
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pytest

from jobs import counting
from streamjob.runtime import RestartStrategies
from streamjob.runtime.cluster.executor import JobExecutionError
from streamjob.runtime.api.transformations import BROADCAST, FORWARD, HASH, REBALANCE
from streamjob.runtime.batch import Stamped
from streamjob.runtime.checkpoint import channel_rescale as cr
from streamjob.runtime.checkpoint import channel_state
from streamjob.runtime.checkpoint.channel_state import ChannelStateCollector
from streamjob.runtime.checkpoint.coordinator import CompletedCheckpoint
from streamjob.runtime.checkpoint.metadata import CheckpointMetadata
from streamjob.runtime.network.channels import InputChannel, InputGate
from streamjob.runtime.network.events import CheckpointBarrier, Watermark
from streamjob.runtime.keygroups import subtasks_for_keys
from streamjob.runtime.task.channel_recovery import recover_rescaled
from test_checkpointing import committed_rows


def shape(partitioner: str, sources: int, targets: int, max_parallelism: int = 128) -> cr.EdgeShape:
    return cr.EdgeShape(1, "a", "b", partitioner, sources, targets, max_parallelism)


# -- the mapping -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("old_p, new_p", [(3, 2), (2, 3), (3, 4), (4, 1), (1, 4), (5, 5)])
def test_keyed_in_flight_data_goes_to_the_new_owner_of_its_key_group(old_p, new_p):
    old, new = shape(HASH, 2, old_p, 16), shape(HASH, 2, new_p, 16)
    keys = np.arange(2000)
    old_owner = subtasks_for_keys(keys, 16, old_p)
    new_owner = subtasks_for_keys(keys, 16, new_p)
    for t in range(old_p):
        a = cr.assign(old, new, t)
        assert a.by_record
        # Every key an old target held goes to a new subtask the mapping names for it ...
        assert set(new_owner[old_owner == t].tolist()) <= set(a.subtasks)
        # ... and the mapping names no more than those (a new subtask reads only overlapping old ranges).
        assert set(a.subtasks) == set(new_owner[old_owner == t].tolist())
    for k in range(new_p):
        assert cr.old_targets(old, new, k) == sorted(set(old_owner[new_owner == k].tolist()))


def test_records_for_splits_a_batch_by_owner_keeping_order_and_timestamps():
    rb = pa.RecordBatch.from_pylist([{"k": i} for i in range(6)])
    owners = np.array([0, 1, 0, 2, 1, 0])
    assert cr.records_for(rb, owners, 0).to_pylist() == [{"k": 0}, {"k": 2}, {"k": 5}]
    assert cr.records_for(rb, owners, 3) is None
    assert cr.records_for(rb, np.zeros(6), 0) is rb  # nothing to filter: the same batch
    stamped = cr.records_for(Stamped(rb, np.arange(6) * 10), owners, 1)
    assert stamped.batch.to_pylist() == [{"k": 1}, {"k": 4}] and stamped.ts.tolist() == [10, 40]
    assert cr.records_for(["a", "b", "c"], np.array([1, 0, 1]), 1) == ["a", "c"]


def test_broadcast_in_flight_data_follows_the_broadcast_state_copy():
    # New subtask k restores old subtask (k mod old p)'s broadcast state copy, so it takes that one's data.
    for old_p, new_p in ((2, 5), (4, 2), (3, 3)):
        old, new = shape(BROADCAST, 1, old_p), shape(BROADCAST, 1, new_p)
        for k in range(new_p):
            assert cr.old_targets(old, new, k) == [k % old_p]
        for t in range(old_p):
            assert not cr.assign(old, new, t).by_record


@pytest.mark.parametrize("old_kind, new_kind", [(REBALANCE, REBALANCE), (FORWARD, REBALANCE), (REBALANCE, FORWARD)])
def test_non_keyed_in_flight_data_moves_whole_channels_round_robin(old_kind, new_kind):
    for old_p, new_p in ((4, 2), (2, 4), (3, 2)):
        old, new = shape(old_kind, old_p, old_p), shape(new_kind, new_p, new_p)
        takers = [cr.assign(old, new, t) for t in range(old_p)]
        assert [a.subtasks for a in takers] == [(t % new_p,) for t in range(old_p)]
        assert not any(a.by_record for a in takers)
        # Each old channel to exactly one new subtask.
        assert sorted(t for k in range(new_p) for t in cr.old_targets(old, new, k)) == list(range(old_p))
    assert cr.input_channel(shape(FORWARD, 2, 2), 5, 1) == 1  # forward: the one channel, from its own subtask
    assert cr.input_channel(shape(REBALANCE, 2, 2), 5, 1) == 1  # old source 5 -> new source 5 mod 2


def test_rescaled_only_when_a_parallelism_or_an_edge_changed():
    graph = counting.build("/tmp/out", "/tmp/chk", 10, 10, parallelism=3)._build("counting")
    shapes = cr.shapes_of(graph)
    assert list(shapes) == [1] and shapes[1].partitioner == HASH and shapes[1].targets == 3  # the chained edge has none
    handle = {"data": "", "index": {"channel_state": cr.describe_handle([1], [], shapes)}}
    state = {"2": [handle, None, None]}
    assert not cr.rescaled(3, {}, state, graph)
    assert not cr.rescaled(3, {}, {}, graph)
    assert cr.rescaled(2, {}, state, graph)
    assert cr.rescaled(3, {"count": {"subtasks": [None] * 4, "parallelism": 4}}, state, graph)
    # Same shapes, but the data sits under another task vertex id (chaining changed elsewhere): redistributed.
    assert cr.rescaled(3, {}, {"1": [handle, None, None]}, graph)
    # Format 1 (no edges named) at the same parallelism restores its channels as they were.
    assert not cr.rescaled(3, {}, {"2": [{"data": "", "index": {}}]}, graph)


def metadata_with(channel: dict, parallelism: int = 3) -> CompletedCheckpoint:
    meta = CheckpointMetadata(checkpoint_id=7, job_id="j", job_name="counting", timestamp_ms=0, parallelism=parallelism,
                              max_parallelism=128, operators={}, extra={"channel_state": channel} if channel else {})
    return CompletedCheckpoint(7, "file:///c/j/chk-7", meta)


def test_restore_at_another_parallelism_is_refused_only_where_no_channel_can_take_the_data():
    from streamjob.runtime.cluster.executor import JobDefinitionError, check_restorable

    old_graph = counting.build("/tmp/out", "/tmp/chk", 10, 10, parallelism=3)._build("counting")
    graph = counting.build("/tmp/out", "/tmp/chk", 10, 10, parallelism=2)._build("counting")
    good = {"data": "", "index": {"channel_state": cr.describe_handle([1], [], cr.shapes_of(old_graph))}}
    assert check_restorable(metadata_with({"2": [None, good, None]}), graph, False) == []
    # A program whose edge 1 is now rebalanced: in-flight data is not re-routed across partitionings.
    moved = cr.EdgeShape(**{**cr.shapes_of(old_graph)[1].to_json(), "partitioner": REBALANCE})
    other = {"data": "", "index": {"channel_state": cr.describe_handle([1], [], {1: moved})}}
    with pytest.raises(JobDefinitionError, match=r"in-flight data of the edge Source: numbers -> KeyedProcess "
                                                 r"\(rebalance\), which this job partitions hash.*savepoint"):
        check_restorable(metadata_with({"2": [other, None, None]}), graph, False)
    # An edge whose target is now chained to its source: no input channel is left for the data.
    chained = cr.EdgeShape(2, "count", "files", REBALANCE, 3, 2, 128, name="KeyedProcess -> Sink: FileSink(jsonl)")
    lost = {"data": "", "index": {"channel_state": cr.describe_handle([2], [], {2: chained})}}
    with pytest.raises(JobDefinitionError, match=r"edge KeyedProcess -> Sink: FileSink\(jsonl\) \(rebalance\), "
                                                 r"but at this parallelism 'Sink: FileSink\(jsonl\)' is chained to "
                                                 r"'KeyedProcess'.*start_new_chain"):
        check_restorable(metadata_with({"2": [lost, None, None]}), graph, False)


# -- placing real channel state into real input gates (no Spark) ------------------------------------------
def old_channel_state(old_p: int, rows: int = 3000) -> tuple[dict, dict, list[dict]]:
    """Channel state of the counting job at parallelism ``old_p`` as its tasks write it: source subtask s
    reads rows i with i % old_p == s (DataGen's residue classes) and hash-routes them by key to the
    KeyedProcess; of each old channel a third is processed, a third waits at the receiver (input channel
    state), a third at the sender (output channel state). Returns (the metadata's channel_state, the
    bytes per handle, the in-flight rows)."""
    graph = counting.build("/tmp/out", "/tmp/chk", 10, 10, parallelism=old_p)._build("counting")
    shapes = cr.shapes_of(graph)
    barrier = CheckpointBarrier(5, 0, unaligned=True)
    sources = [ChannelStateCollector(5, barrier) for _ in range(old_p)]
    targets = [ChannelStateCollector(5, barrier, input_keys=[(1, s) for s in range(old_p)]) for _ in range(old_p)]
    in_flight = []
    for s in range(old_p):
        mine = [counting.row(i) for i in range(s, rows, old_p)]
        owner = subtasks_for_keys(np.array([r["key"] for r in mine]), 128, old_p)
        for t in range(old_p):
            channel = [r for r, o in zip(mine, owner) if o == t]
            third = len(channel) // 3
            waiting_in, waiting_out = channel[third: 2 * third], channel[2 * third:]
            # Arrow and Python-row batches, a watermark among them (dropped on rescale: no channel is left).
            targets[t].add_input(s, [pa.RecordBatch.from_pylist(waiting_in[:10]), Watermark(1), waiting_in[10:]])
            sources[s].add_output((1, t), [Stamped(pa.RecordBatch.from_pylist(waiting_out),
                                                   np.array([r["i"] for r in waiting_out], dtype=np.int64))])
            in_flight += waiting_in + waiting_out
    blobs, handles = {}, {"1": [], "2": []}
    for vertex, collectors in (("1", sources), ("2", targets)):
        for i, c in enumerate(collectors):
            name = f"{vertex}-{i}"
            blobs[name] = c.to_bytes()
            index = cr.describe_handle([e for (e, _), b in c.inputs.items() if b],
                                       [e for (e, _), b in c.outputs.items() if b], shapes)
            handles[vertex].append({"data": name, "index": {"channel_state": index}})
    return handles, blobs, in_flight


def rows_of(batch) -> list[dict]:
    inner = batch.batch if isinstance(batch, Stamped) else batch
    return inner.to_pylist() if isinstance(inner, pa.RecordBatch) else list(inner)


@pytest.mark.parametrize("old_p, new_p", [(3, 4), (3, 2), (2, 1)])
def test_in_flight_rows_reach_the_new_owner_of_their_key_once_and_before_new_input(old_p, new_p):
    handles, blobs, in_flight = old_channel_state(old_p)
    graph = counting.build("/tmp/out", "/tmp/chk", 10, 10, parallelism=new_p)._build("counting")
    keyed = next(v for v in graph.tasks if v.input_edges)
    tasks = []
    for k in range(new_p):
        channels = [InputChannel(1, s, 0) for s in range(new_p)]
        for ch in channels:
            ch.push([{"key": -1, "i": -1}])  # new input, already queued: it must come after everything recovered
        tasks.append(SimpleNamespace(gate=InputGate(channels), subtask=k, vertex=keyed))
    read = []
    restore = {"url": "file:///c/j/chk-5", "channel_state": handles}
    recover_rescaled(tasks, graph, restore, lambda h, where: read.append(where) or
                     channel_state.read(blobs[h["data"]], where))
    got = []
    for task in tasks:
        polled = []
        while (item := task.gate.poll()) is not None:
            polled += rows_of(item[1])
        new = [i for i, r in enumerate(polled) if r["key"] == -1]
        assert new == list(range(len(polled) - new_p, len(polled)))  # every recovered row before any new one
        mine = polled[: len(polled) - new_p]
        owners = subtasks_for_keys(np.array([r["key"] for r in mine], dtype=np.int64), 128, new_p)
        assert (owners == task.subtask).all()
        for key in {r["key"] for r in mine}:  # one old source per key: its rows in their order
            idx = [r["i"] for r in mine if r["key"] == key]
            assert idx == sorted(idx)
        got += mine
    assert sorted(r["i"] for r in got) == sorted(r["i"] for r in in_flight)  # each exactly once
    # Each handle read once per slot task that needs it, never more than once per task.
    assert len(read) <= new_p * 2 * old_p


def test_format_1_channel_state_is_not_guessed_at_another_parallelism():
    from streamjob.runtime.cluster.executor import JobDefinitionError, check_restorable

    graph = counting.build("/tmp/out", "/tmp/chk", 10, 10, parallelism=2)._build("counting")
    assert check_restorable(metadata_with({}), graph, False) == []  # aligned: rescaling is fine
    with pytest.raises(JobDefinitionError, match=r"in-flight data \(channel state\) written by an earlier streamjob, "
                                                 r"which does not name its edges; it can only be restored at "
                                                 r"parallelism 3, this job has 2.*savepoint"):
        check_restorable(metadata_with({"2": [None, {"data": "", "index": {}}, None]}), graph, False)


# -- real Spark: unaligned checkpoint under backpressure, restored at another parallelism --------------
def _wait(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def held_channel_state(meta) -> tuple[int, int]:
    """(receiver-side, sender-side) bytes of in-flight data a checkpoint's metadata names."""
    sides = [0, 0]
    for handles in meta.channel_state().values():
        for h in handles:
            if h:
                index = h["index"]["channel_state"]
                sides[0] += int(index["inputs"])
                sides[1] += int(index["outputs"])
    return sides[0], sides[1]


@pytest.mark.parametrize("old_p, new_p", [(2, 4), (3, 2)], ids=["up-2-to-4", "down-3-to-2"])
def test_unaligned_checkpoint_under_backpressure_restores_exactly_once_at_another_parallelism(
        spark_slots, tmp_path, old_p, new_p):
    rows = 100_000  # the keyed operator's pace (~2,000 rows/s a subtask) gives a long first run; the second is fast
    out, checkpoints = str(tmp_path / "out"), str(tmp_path / "checkpoints")
    # 0.5 ms a row in the keyed operator (~2,000 rows/s per subtask) against a source offering 20,000 rows/s:
    # the channels stay full, so each unaligned barrier overtakes data waiting at the receivers, and
    # now and then at the senders too (batches without credit in their output queues).
    env = counting.build(out, checkpoints, rows, rate=20_000, interval_ms=500, parallelism=old_p, slow_ms=0.5,
                         retained=20, conf={"execution.checkpointing.unaligned": "true", "execution.batch-size": 200})
    env.set_restart_strategy(RestartStrategies.no_restart())  # the kill below ends this run
    client = env.execute_async("counting-unaligned-before")
    assert client.wait_until_running(60)
    jm = client.job_manager
    # Kill the tasks right after a checkpoint holding in-flight data on both sides of the hash edge completed
    # (the next is half a second away; a cancel takes longer): it is the newest, the one restored.
    looked, chosen = set(), None
    deadline = time.monotonic() + 60
    while chosen is None:
        assert time.monotonic() < deadline and not client._finished.is_set(), f"no such checkpoint among {looked}"
        latest = jm.coordinator.latest() if jm.coordinator is not None else None
        if latest is not None and latest.checkpoint_id not in looked:
            looked.add(latest.checkpoint_id)
            if all(held_channel_state(latest.metadata)):
                chosen = latest
                break
        time.sleep(0.005)
    for pid in jm.task_pids().values():
        os.kill(pid, signal.SIGKILL)
    with pytest.raises(JobExecutionError):
        client.get_job_execution_result(60)
    job_dir = os.path.join(checkpoints, client.job_id)
    latest = max((d for d in os.listdir(job_dir) if d.startswith("chk-")
                  and os.path.exists(os.path.join(job_dir, d, "_metadata"))), key=lambda d: int(d[4:]))
    assert latest == f"chk-{chosen.checkpoint_id}"
    stats = next(c for c in jm.coordinator.history if c.checkpoint_id == chosen.checkpoint_id)
    assert stats.checkpoint_type == "UNALIGNED_CHECKPOINT" and stats.persisted_data > 0
    assert len(committed_rows(out)) < rows

    env = counting.build(out, str(tmp_path / "c2"), rows, rate=500_000, interval_ms=250, parallelism=new_p,
                         restore=os.path.join(job_dir, latest), conf={"execution.checkpointing.unaligned": "true"})
    client = env.execute_async("counting-unaligned-after")
    result = client.get_job_execution_result(240)
    assert client.job_manager.restore.checkpoint_id == chosen.checkpoint_id and result.restarts == 0
    got = committed_rows(out)
    assert len(got) == len(set(got)) == rows  # nothing lost, nothing twice
    assert got == counting.expected_rows(rows)  # every running count as a failure-free run has it
