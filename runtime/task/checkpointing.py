"""Task side of checkpoints: barrier alignment, and writing snapshots off the task's loop.

``BarrierHandler`` decides, per task, when the barrier of checkpoint n has
arrived on every input channel. In EXACTLY_ONCE mode a channel that delivered
barrier n is blocked until all have (alignment), so the snapshot holds exactly
the effects of the records before the barrier on each input. In AT_LEAST_ONCE
mode nothing is blocked; records after an early barrier are in the snapshot
and replayed after a failure. A finished channel counts as aligned. Unaligned
checkpoints (barriers overtaking in-flight data) are ``unaligned.UnalignedBarrierHandler``.

``SnapshotWriter`` is the asynchronous phase: one thread per slot serialises
the frozen state (chunk by chunk, so the task loop keeps the GIL most of the
time) and writes it to checkpoint storage; the loop collects the results,
folds copy-on-write layers back and acknowledges to the job manager.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

from ..checkpoint.storage import error_text
from ..network.channels import InputGate
from ..network.events import CheckpointBarrier


class BarrierHandler:
    def __init__(self, gate: InputGate, exactly_once: bool,
                 on_aligned: Callable[[CheckpointBarrier, float], None],
                 on_abort: Callable[[int, str], None]):
        self.gate = gate
        self.exactly_once = exactly_once
        self.on_aligned = on_aligned
        self.on_abort = on_abort
        self.pending: CheckpointBarrier | None = None
        self.arrived: set[int] = set()
        self.started = 0.0
        self.latest = 0  # newest checkpoint id this task triggered or gave up
        self.recording = False  # see UnalignedBarrierHandler

    def on_barrier(self, channel: int, barrier: CheckpointBarrier) -> None:
        n = barrier.checkpoint_id
        if n <= self.latest and (self.pending is None or n < self.pending.checkpoint_id):
            return  # an old checkpoint's barrier (aborted or already taken)
        if self.pending is None or n > self.pending.checkpoint_id:
            if self.pending is not None:
                self._cancel(f"barrier {n} overtook checkpoint {self.pending.checkpoint_id}")
            self.pending = barrier
            self.arrived = set()
            self.started = time.perf_counter()
        self.arrived.add(channel)
        if self.exactly_once:
            self.gate.block(channel)
        self.check()

    def check(self) -> None:
        """Complete the alignment if every channel delivered the barrier or finished."""
        barrier = self.pending
        if barrier is None:
            return
        channels = self.gate.channels
        for i, ch in enumerate(channels):
            # A loop's back-edge is never aligned on: its barrier comes back only after the head forwarded it.
            if i not in self.arrived and not ch.finished and not ch.feedback:
                return
        alignment_ms = (time.perf_counter() - self.started) * 1000.0
        self._release()
        self.latest = barrier.checkpoint_id
        self.on_aligned(barrier, alignment_ms)

    def abort(self, checkpoint_id: int) -> None:
        """The job manager gave checkpoint n up: stop aligning it."""
        if self.pending is not None and self.pending.checkpoint_id <= checkpoint_id:
            self._release()
        self.latest = max(self.latest, checkpoint_id)

    def _cancel(self, reason: str) -> None:
        n = self.pending.checkpoint_id  # type: ignore[union-attr]
        self._release()
        self.latest = max(self.latest, n)
        self.on_abort(n, reason)

    def _release(self) -> None:
        if self.exactly_once:
            for i in self.arrived:
                if not self.gate.channels[i].finished:
                    self.gate.unblock(i)
        self.pending = None
        self.arrived = set()


@dataclass
class SnapshotJob:
    task: Any  # the Task
    checkpoint_id: int
    snapshots: list[Any]  # OperatorSnapshot per stateful operator of the chain
    sync_ms: float
    alignment_ms: float
    channel_state: Any = None  # ChannelStateCollector of an unaligned-capable checkpoint
    start_delay_ms: float = 0.0  # trigger to this snapshot (Flink's checkpointStartDelay)


@dataclass
class SnapshotResult:
    job: SnapshotJob
    handles: dict[str, Any] | None
    async_ms: float
    size: int
    uploaded: int = 0
    error: str | None = None


class SnapshotWriter:
    """The asynchronous phase of one slot's snapshots, in a background thread."""

    def __init__(self, write: Callable[[Any, int], tuple[dict | None, int]]):
        self._write = write  # (operator snapshot, checkpoint id) -> (handle, state bytes, bytes written)
        self._jobs: queue.Queue[SnapshotJob | None] = queue.Queue()
        self.results: deque[SnapshotResult] = deque()
        self._busy = 0
        self._idle = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="snapshot-writer", daemon=True)
        self._thread.start()

    def submit(self, job: SnapshotJob) -> None:
        with self._idle:
            self._busy += 1
        self._jobs.put(job)

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            started = time.perf_counter()
            handles: dict[str, Any] = {}
            size = uploaded = 0
            error = None
            try:
                for snap in job.snapshots:
                    handle, n, written = self._write(snap, job.checkpoint_id)
                    handles[snap.key] = handle
                    size += n
                    uploaded += written
            except Exception as e:  # noqa: BLE001 - declines the checkpoint, not the job
                error = error_text(e)  # a storage error names the storage and its URL itself
            self.results.append(SnapshotResult(job, None if error else handles,
                                               (time.perf_counter() - started) * 1000.0, size, uploaded, error))
            with self._idle:
                self._busy -= 1
                self._idle.notify_all()

    def wait_idle(self, timeout: float | None = None) -> bool:
        with self._idle:
            return self._idle.wait_for(lambda: self._busy == 0, timeout)

    def close(self) -> None:
        self._jobs.put(None)
        self._thread.join(timeout=5)
