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
