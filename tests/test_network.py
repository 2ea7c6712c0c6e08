"""Channels over real TCP between two transports: order, credits, blocking one channel."""

import threading
import time

import pyarrow as pa

from streamjob.runtime.network.channels import InputGate, local_pair
from streamjob.runtime.network.events import CheckpointBarrier, EndOfPartition
from streamjob.runtime.network.transport import Transport

CREDITS = 2
BATCH = 100


def _pair():
    """Slot 0 sends on edges 1 and 2 to slot 1, whose two-input gate reads both."""
    t0, t1 = Transport(0, "127.0.0.1", CREDITS), Transport(1, "127.0.0.1", CREDITS)
    outs = [t0.output_channel(edge, 1, BATCH, 10_000) for edge in (1, 2)]
    gate = InputGate([t1.input_channel(1, 0, 0), t1.input_channel(2, 0, 1)])
    addresses = [t0.address, t1.address]
    threads = [threading.Thread(target=t.connect, args=(addresses,)) for t in (t0, t1)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(10)
    return t0, t1, outs, gate


def _pump(t0, t1, seconds=0.3):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t0.poll(0.001)
        t1.poll(0.001)


def _drain(gate):
    items = []
    while (polled := gate.poll()) is not None:
        items.append(polled)
    return items


def test_events_travel_in_order_with_data():
    t0, t1, outs, gate = _pair()
    try:
        outs[0].emit([1, 2])
        outs[0].send_event(CheckpointBarrier(7, 123))
        outs[0].emit(pa.RecordBatch.from_pylist([{"a": 3}]))
        outs[0].send_event(EndOfPartition())
        _pump(t0, t1)
        items = [item for _, item in _drain(gate)]
        assert items[0] == [1, 2]
        assert items[1] == CheckpointBarrier(7, 123)
        assert items[2].to_pylist() == [{"a": 3}]
        assert items[3] == EndOfPartition()
    finally:
        t0.close()
        t1.close()


def test_blocked_channel_stops_only_its_sender_and_the_other_keeps_flowing():
    t0, t1, outs, gate = _pair()
    try:
        gate.block(0)
        received = {0: 0, 1: 0}
        sent = {0: 0, 1: 0}
        for _ in range(50):  # far more batches than credits
            for i, out in enumerate(outs):
                if out.is_available():
                    out.emit(list(range(sent[i], sent[i] + BATCH)))
                    sent[i] += BATCH
            _pump(t0, t1, 0.01)
            for index, item in _drain(gate):
                received[index] += len(item)
        # The open channel kept flowing the whole time ...
        assert received[1] == sent[1] >= 40 * BATCH
        # ... while the blocked one delivered nothing and its sender was held back by credit:
        assert received[0] == 0
        assert not outs[0].is_available()
        assert sent[0] <= (CREDITS + 2) * BATCH
        assert len(gate.channels[0].queue) <= CREDITS
        # Unblocking releases the held records, in order.
        gate.unblock(0)
        got = []
        for _ in range(20):
            _pump(t0, t1, 0.01)
            for index, item in _drain(gate):
                if index == 0:
                    got.extend(item)
        assert got == list(range(sent[0]))
    finally:
        t0.close()
        t1.close()


def test_local_channel_batches_until_full_or_timeout():
    out, inp = local_pair(1, 0, 0, batch_size=10, buffer_timeout_ms=50, credits=2)
    out.emit([1, 2, 3])
    assert not inp.queue  # waiting for more records
    assert out.flush_if_due(time.monotonic()) is not None
    time.sleep(0.06)
    out.flush_if_due(time.monotonic())
    assert list(inp.queue) == [[1, 2, 3]]
    out.emit(list(range(10)))  # full: sent at once
    assert len(inp.queue) == 2
    out.emit(list(range(10)))  # no credit left: waits
    assert len(inp.queue) == 2 and not out.is_idle()
    inp.poll()  # consuming returns a credit
    assert len(inp.queue) == 2


# -- a loop's back-edge: bounded in memory, spilled to disk beyond (network/spill.py) -------------------

def _feedback_channel(budget: int, tmp_path):
    from streamjob.runtime.network.channels import InputChannel
    from streamjob.runtime.network.spill import FeedbackBuffer

    ch = InputChannel(edge=7, source_subtask=0, input_index=0)
    ch.feedback = True
    ch.spill = FeedbackBuffer(budget, str(tmp_path))
    return ch


def test_a_back_edge_spills_beyond_its_budget_and_gives_everything_back_in_order(tmp_path):
    from streamjob.runtime.batch import Stamped
    from streamjob.runtime.network.events import Watermark
    from streamjob.runtime.network.spill import Spilled, estimated_bytes
    import numpy as np

    ch = _feedback_channel(4096, tmp_path)
    arrow = [pa.record_batch({"v": list(range(i * 100, i * 100 + 100))}) for i in range(20)]
    rows = [[(i, "x" * 20) for i in range(k * 50, k * 50 + 50)] for k in range(20)]
    stamped = [Stamped(b, np.arange(100, dtype=np.int64) + 7) for b in arrow[:5]]
    sent = [b for trio in zip(arrow, rows) for b in trio] + stamped
    for i, b in enumerate(sent):
        ch.push(b)
        if i == 10:
            ch.push(Watermark(5))
    spilled = [item for item in ch.queue if type(item) is Spilled]
    assert spilled and ch.spill.on_disk == sum(s.length for s in spilled)
    assert ch.spill.in_memory <= 4096 + max(estimated_bytes(b) for b in sent)
    assert not list(tmp_path.iterdir()), "spill files have no name: nothing to leave behind"
    got = [ch.poll() for _ in range(len(ch.queue))]
    assert isinstance(got[11], Watermark)
    del got[11]
    for want, have in zip(sent, got, strict=True):
        if isinstance(want, Stamped):
            assert want.batch.equals(have.batch) and (want.ts == have.ts).all()
        elif isinstance(want, pa.RecordBatch):
            assert want.equals(have)
        else:
            assert want == have
    assert ch.spill.in_memory == 0 and ch.spill.on_disk == 0 and ch.owed == len(sent)


def test_spilled_feedback_is_read_back_for_a_checkpoint_s_log_and_dropped_when_the_head_ends(tmp_path):
    from streamjob.runtime.checkpoint.channel_state import ChannelStateCollector, read

    ch = _feedback_channel(1, tmp_path)
    batches = [[("k", i)] * 10 for i in range(6)]
    for b in batches:
        ch.push(b)
    collector = ChannelStateCollector(3, CheckpointBarrier(3, 0), input_keys=[(7, 0)])
    collector.add_input(0, [item for item in ch.queue])
    assert ch.spill.spilled_batches == 5 and collector.bytes_in > 0
    ch.discard_queued()  # the head ended: its queue goes, the log keeps what it refers to
    assert ch.spill.on_disk == 0 and ch.spill.in_memory == 0
    restored = read(collector.to_bytes(), "test")
    assert restored.inputs[(7, 0)] == batches


def test_split_sends_each_row_and_timestamp_to_its_channel_in_order():
    """Arrow batches, Python lists, with and without timestamps, few channels (a pass per channel)
    and many (a stable sort): each channel gets exactly its rows, in the batch's order."""
    import numpy as np

    from streamjob.runtime.network.record_writer import split

    class Channel:
        def __init__(self):
            self.rows, self.ts = [], []

        def emit(self, batch, ts=None):
            self.rows += batch.to_pylist() if isinstance(batch, pa.RecordBatch) else batch
            self.ts += [] if ts is None else ts.tolist()

    rng = np.random.default_rng(34)
    for p in (1, 2, 3, 16, 17, 40):
        for n in (0, 1, 500):
            targets = rng.integers(0, p, n)
            ts = rng.integers(0, 10**12, n)
            records = [{"i": i} for i in range(n)]
            for batch in (pa.RecordBatch.from_pylist(records, schema=pa.schema([("i", pa.int64())])), records):
                for stamps in (None, ts):
                    channels = [Channel() for _ in range(p)]
                    split(batch, targets, channels, stamps)
                    for c, channel in enumerate(channels):
                        mine = [i for i in range(n) if targets[i] == c]
                        assert [r["i"] for r in channel.rows] == mine
                        assert channel.ts == ([] if stamps is None else [int(ts[i]) for i in mine])
