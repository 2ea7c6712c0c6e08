"""The collect sink of ``execute_and_collect``: records go back to the program through the job manager.

Each subtask sends its records over the control channel (as PrintSink's lines), pickled, in
messages of at most ~1 MiB, numbered per subtask and signed with the job's collect key (HMAC-SHA256:
the job manager keeps the bytes without reading them, and the program unpickles only what the
tasks of this job sent; the key travels inside the job graph, never over the control port).

Flow control: a subtask has at most ``WINDOW`` messages the job manager has not acknowledged; it
acknowledges while the program reads (or has room for them), so a program that stops reading
holds the sink, and through backpressure the whole job, instead of filling the driver's memory.

With checkpointing, the records of a subtask between two barriers are released to the program
only when the checkpoint after them completes (the sink's committable is "everything up to
message n"); after a failure the job manager drops what the failed attempt sent after its last
completed checkpoint, so the program sees every record exactly once. Without checkpointing the
records are visible at once (a restart from the beginning sends them again, as PrintSink's).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from typing import Any

import cloudpickle

from ..batch import to_rows
from .base import Sink, SinkWriter

COLLECT = "collect"  # task -> job manager: records
COLLECT_COMMIT = "collect_commit"  # task -> job manager: a checkpoint covering messages up to seq completed
COLLECT_ACK = "collect_ack"  # job manager -> task: message seq was taken in
WINDOW = 2  # unacknowledged messages per subtask
MESSAGE_BYTES = 1 << 20  # records per message are cut at about this many pickled bytes


def sign(key: bytes, sink_id: str, attempt: int, slot: int, seq: int, payload: bytes) -> str:
    header = f"{sink_id}|{attempt}|{slot}|{seq}|".encode()
    return hmac.new(key, header + payload, hashlib.sha256).hexdigest()


class CollectSink(Sink):
    default_name = "Collect"
    throttles = True  # its writer can hold the task's input (is_available), see task/slot.py

    def __init__(self) -> None:
        self.sink_id = secrets.token_hex(8)
        self.key = secrets.token_bytes(32)
        self._channel: Any = None

    def create_writer(self, ctx: Any) -> "CollectWriter":
        channel = getattr(ctx, "_collector", None)
        if channel is None:
            raise RuntimeError("execute_and_collect needs a job manager to send the records to "
                               "(run the job with env.execute_and_collect() under streamjob run or python)")
        self._channel = channel
        return CollectWriter(self, channel, ctx.is_checkpointing_enabled())

    def commit(self, committables: list) -> None:
        for sink_id, attempt, slot, seq in committables:
            self._channel.send({"type": COLLECT_COMMIT, "id": sink_id, "attempt": attempt, "slot": slot, "seq": seq})

    def __getstate__(self) -> dict:
        return {"sink_id": self.sink_id, "key": self.key, "_channel": None}

    def __repr__(self) -> str:  # never the key
        return f"CollectSink({self.sink_id})"


class CollectWriter(SinkWriter):
    def __init__(self, sink: CollectSink, channel: Any, checkpointing: bool):
        self.sink_id, self.key = sink.sink_id, sink.key
        self.channel = channel
        self.checkpointing = checkpointing
        self.seq = 0  # messages sent
        self.committed = 0  # the newest seq handed out as a committable

    def is_available(self) -> bool:
        return self.seq - self.channel.acked.get(self.sink_id, 0) < WINDOW

    def write(self, batch: Any) -> None:
        rows = to_rows(batch)
        if not rows:
            return
        payload = cloudpickle.dumps(rows, protocol=5)
        if len(payload) > MESSAGE_BYTES and len(rows) > 1:
            half = len(rows) // 2
            self.write(rows[:half])
            self.write(rows[half:])
            return
        self.seq += 1
        ch = self.channel
        self.channel.send({"type": COLLECT, "id": self.sink_id, "attempt": ch.attempt, "slot": ch.slot,
                           "seq": self.seq, "visible": not self.checkpointing,
                           "data": base64.b64encode(payload).decode("ascii"),
                           "mac": sign(self.key, self.sink_id, ch.attempt, ch.slot, self.seq, payload)})

    def prepare_commit(self) -> list:
        if not self.checkpointing or self.seq == self.committed:
            return []
        self.committed = self.seq
        return [(self.sink_id, self.channel.attempt, self.channel.slot, self.seq)]


class CollectChannel:
    """A slot's side of collect sinks: sends over the control channel, counts acknowledgements."""

    def __init__(self, control: Any, slot: int, attempt: int):
        self.control = control
        self.slot = slot
        self.attempt = attempt
        self.acked: dict[str, int] = {}  # sink id -> highest seq the job manager took in

    def send(self, msg: dict) -> None:
        self.control.send(msg)

    def on_ack(self, msg: dict) -> None:
        sink_id, seq = str(msg["id"]), int(msg["seq"])
        if seq > self.acked.get(sink_id, 0):
            self.acked[sink_id] = seq


__all__ = ["COLLECT", "COLLECT_ACK", "COLLECT_COMMIT", "CollectChannel", "CollectSink", "CollectWriter", "sign"]
