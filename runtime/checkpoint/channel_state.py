"""Channel state: the in-flight data an unaligned checkpoint persists (Flink's "channel state").

When a barrier overtakes buffered data, the snapshot of a task no longer
covers "everything before the barrier" by its operator state alone. What it
overtook is persisted next to the operator state, per channel:

* output channel state: the batches the barrier overtook in the task's output
  queues (they still go out, after the barrier, so the receiver does not count
  them in its own snapshot);
* input channel state: the batches that precede the barrier on each input
  channel the barrier had not yet come through when the task snapshotted: those
  queued before it at its arrival and those taken in the meantime.

On restore the output state is sent again first (it was emitted before the
snapshot), then the input state goes through the operators, before any new
input: together with the operator state, every record is counted exactly once.

Channels are named by (edge, subtask at the other end): a restore at the same
parallelism has the same channels. At another parallelism the data is
redistributed to the new subtasks (``channel_rescale``). This module is pure
logic and encoding; the task decides when, the snapshot writer stores the bytes.

Format 2 names an output channel by its target subtask (format 1: by its place in
the writer's channels, which differs on a forward edge, whose one channel goes to
the sender's own subtask); both are read.
"""

from __future__ import annotations

import dataclasses
import pickle
from dataclasses import dataclass, field
from typing import Any, Iterable

import pyarrow as pa

from ..network.spill import Spilled
from ..network.wire import decode, encode_batch
from ..batch import Stamped

# The key under which a task's channel state travels among its acknowledged handles.
CHANNEL_STATE_KEY = "__channel_state__"
FORMAT = 2
READABLE_FORMATS = (1, 2)

ChannelKey = tuple[int, int]  # (edge id, subtask at the other end)


def _freeze(batch: Any) -> Any:
    """Arrow batches are immutable: keep a reference and encode later, in the writer thread.
    Row batches are encoded now: a user function downstream may change a row in place. A batch a
    loop's back-edge spilled to disk is read there in the writer thread too."""
    if _arrow(batch) or type(batch) is Spilled:
        return batch
    return encode_batch(batch)


def _arrow(batch: Any) -> bool:
    """An Arrow batch, bare or with its event timestamps (both immutable)."""
    return isinstance(batch, pa.RecordBatch) or (isinstance(batch, Stamped) and isinstance(batch.batch, pa.RecordBatch))


def _size(frozen: Any) -> int:
    if isinstance(frozen, pa.RecordBatch):
        return frozen.nbytes
    if isinstance(frozen, Stamped):
        return frozen.batch.nbytes + frozen.ts.nbytes
    if type(frozen) is Spilled:
        return frozen.length
    return len(frozen[1])


@dataclass
class ChannelStateCollector:
    """The in-flight data of one task for one checkpoint, until every channel is settled.

    ``waiting_inputs``: gate indices whose barrier has not come through yet; batches taken from them
    are recorded. ``waiting_outputs``: output channels still holding an aligned barrier behind batches
    (aligned-checkpoint timeout: it may yet be turned into an unaligned one and overtake them)."""

    checkpoint_id: int
    barrier: Any
    input_keys: list[ChannelKey] = field(default_factory=list)  # per gate index
    waiting_inputs: set[int] = field(default_factory=set)
    waiting_outputs: dict[ChannelKey, Any] = field(default_factory=dict)
    inputs: dict[ChannelKey, list[Any]] = field(default_factory=dict)
    outputs: dict[ChannelKey, list[Any]] = field(default_factory=dict)
    bytes_in: int = 0  # input data persisted (also what was processed while the barrier was overtaking)
    bytes_out: int = 0
    unaligned: bool = False  # a barrier overtook data for this checkpoint at this task
    # A loop's head: what of ``bytes_in`` is its log of fed-back records (task/iteration.FeedbackLog), and
    # how many records that log holds.
    feedback_bytes: int = 0
    feedback_records: int = 0

    # -- recording -------------------------------------------------------------------------
    def add_input(self, index: int, batches: Iterable[Any]) -> None:
        held = self.inputs.setdefault(self.input_keys[index], [])
        for b in batches:
            frozen = _freeze(b)
            self.bytes_in += _size(frozen)
            held.append(frozen)

    def input_done(self, index: int) -> None:
        self.waiting_inputs.discard(index)

    def add_output(self, key: ChannelKey, batches: list[Any]) -> None:
        if batches:
            self.unaligned = True
            held = self.outputs.setdefault(key, [])
            for b in batches:
                frozen = _freeze(b)
                self.bytes_out += _size(frozen)
                held.append(frozen)

    def settle_outputs(self, start_delay_ms: float, timeout_ms: int | None) -> None:
        """An aligned barrier waiting in an output queue past the aligned-checkpoint timeout
        overtakes the batches before it; one that left the queue settles its channel."""
        for key, ch in list(self.waiting_outputs.items()):
            if not ch.holds(self.barrier):
                del self.waiting_outputs[key]
            elif timeout_ms is not None and start_delay_ms >= timeout_ms:
                # Sent as an unaligned barrier: downstream lets it overtake its input queue too.
                self.add_output(key, ch.overtake(dataclasses.replace(self.barrier, unaligned=True), self.barrier))
                del self.waiting_outputs[key]

    @property
    def complete(self) -> bool:
        return not self.waiting_inputs and not self.waiting_outputs

    @property
    def empty(self) -> bool:
        return not any(self.inputs.values()) and not any(self.outputs.values())

    # -- encoding -----------------------------------------------------------------------------
    def to_bytes(self) -> bytes:
        def enc(held: dict[ChannelKey, list[Any]]) -> list:
            out = []
            for (edge, other), frozen in held.items():
                if frozen:
                    frames = [encode_batch(b) if _arrow(b) else (b.kind, b.payload()) if type(b) is Spilled else b
                              for b in frozen]
                    out.append([edge, other, [(kind, bytes(payload)) for kind, payload in frames]])
            return out

        return pickle.dumps({"format": FORMAT, "inputs": enc(self.inputs), "outputs": enc(self.outputs)},
                            protocol=5)


@dataclass
class RecoveredChannelState:
    inputs: dict[ChannelKey, list[Any]]
    outputs: dict[ChannelKey, list[Any]]
    format: int = FORMAT  # 1: an output channel's key names its place in the writer, not its target subtask


class ChannelStateFormatError(ValueError):
    pass


def read(data: bytes, where: str) -> RecoveredChannelState:
    try:
        doc = pickle.loads(data)
        if doc.get("format") not in READABLE_FORMATS:
            raise ValueError(f"format {doc.get('format')!r}, expected one of {READABLE_FORMATS}")

        def dec(entries: list) -> dict[ChannelKey, list[Any]]:
            return {(int(edge), int(other)): [decode(kind, payload) for kind, payload in frames]
                    for edge, other, frames in entries}

        return RecoveredChannelState(dec(doc["inputs"]), dec(doc["outputs"]), int(doc["format"]))
    except Exception as e:  # noqa: BLE001 - any malformation is the same error, naming the file
        raise ChannelStateFormatError(f"{where}: channel state cannot be read ({type(e).__name__}: {e})") from None


__all__ = ["CHANNEL_STATE_KEY", "ChannelStateCollector", "ChannelStateFormatError",
           "RecoveredChannelState", "read"]
