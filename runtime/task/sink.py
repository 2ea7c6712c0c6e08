"""The sink operator: a sink's writer, and the two-phase commit around it."""

from __future__ import annotations

from typing import Any

from ..batch import Batch
from .base import OperatorSnapshot, StreamOperator
from .committer import BackgroundCommitter
from .faults import maybe_kill


class SinkOperator(StreamOperator):
    """Runs a sink's writer; with checkpointing, the two-phase commit around it.

    Committables prepared at barrier n wait in operator state until checkpoint n
    is complete; those prepared at the end of input wait for the final
    checkpoint. A restored subtask first commits what its checkpoint held.
    A sink with ``commit_in_background`` commits in a thread of its own (see
    ``committer.py``): its committables leave the pending state only once committed.
    """

    PENDING = "pending-committables"
    WRITER = "writer"
    COMMIT_TIMEOUT_S = 600.0  # at the end, how long close waits for the last commits

    def setup(self) -> None:
        self._sink = self.node.fn
        self._checkpointing = self.ctx.is_checkpointing_enabled()
        # A writer may leave its pre-commit running (FileSink: Parquet part files completed in a thread):
        # it puts a wait here, and the checkpoint's snapshot waits for it before it is acknowledged.
        self._background: list = []
        self.ctx._sink_background = self._background
        self._writer = self._sink.create_writer(self.ctx)
        self._pending: list[tuple[int, Any]] = []  # (checkpoint id, committable)
        self._unassigned: list[Any] = []  # prepared at the end of input, before the final checkpoint
        self._committer: BackgroundCommitter | None = None
        self._submitted_up_to = 0  # the newest checkpoint whose committables went to the committer
        self._finished = False  # the input ended: the next checkpoint to complete is the final one
        if self.operator_state.is_restored():
            restored = self.operator_state.get_list_state(self.PENDING).get()
            if restored:
                self._sink.commit([c for _, c in restored])
            self._writer.restore_state(self.operator_state.get_union_list_state(self.WRITER).get())
        start = getattr(self._writer, "start", None)  # writers that do not subclass SinkWriter have none
        if start is not None:
            start()
        if self._checkpointing and getattr(self._sink, "commit_in_background", False):
            self._committer = BackgroundCommitter(f"{self.name}-{self.ctx.get_index_of_this_subtask()}")

    def process(self, batch: Batch, input_index: int) -> None:
        if self._committer is not None and self._committer.error is not None:
            self._reap()
        self._writer.write(batch)

    def _reap(self) -> None:
        """Drop what the committer has committed from the pending state; its failure fails the task."""
        committer = self._committer
        if committer is None:
            return
        if committer.error is not None:
            raise self.failure(committer.error)
        done = committer.done_up_to
        if self._pending and self._pending[0][0] <= done:
            self._pending = [(n, c) for n, c in self._pending if n > done]

    def is_available(self) -> bool:
        """Whether the writer takes more now (a sink with ``throttles``: the collect sink)."""
        return self._writer.is_available()

    def snapshot_state(self, checkpoint_id: int, full: bool = False) -> OperatorSnapshot | None:
        snap = super().snapshot_state(checkpoint_id, full)
        if self._background:  # this checkpoint's pre-commits (and those of the end of input) still running
            if snap is None:
                snap = OperatorSnapshot(self, None, None)
                self.snapshot_in_flight = True
            snap.waits, self._background[:] = list(self._background), []
        return snap

    def prepare_snapshot(self, checkpoint_id: int) -> None:
        self._reap()
        ready = self._unassigned + self._writer.prepare_commit()
        self._unassigned = []
        self._pending.extend((checkpoint_id, c) for c in ready)
        self.operator_state.get_list_state(self.PENDING).update([[n, c] for n, c in self._pending])
        # Union: after a rescale every subtask sees every old writer's state (e.g. FileSink's part
        # counters), so no new part file can take the name of one an old subtask committed.
        self.operator_state.get_union_list_state(self.WRITER).update(self._writer.snapshot_state())

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        if self._committer is not None:
            self._reap()
            ready = [c for n, c in self._pending if self._submitted_up_to < n <= checkpoint_id]
            if ready:
                if self._finished:
                    maybe_kill(self.ctx, "sink-before-final-commit", ready)
                maybe_kill(self.ctx, "sink-before-commit", ready)
                self._committer.submit(checkpoint_id, lambda: self._sink.commit(ready))
                self._submitted_up_to = checkpoint_id
            return
        ready = [c for n, c in self._pending if n <= checkpoint_id]
        if ready:
            if self._finished:
                maybe_kill(self.ctx, "sink-before-final-commit", ready)
            maybe_kill(self.ctx, "sink-before-commit", ready)  # any commit, the final one too
            self._guard(lambda: self._sink.commit(ready))
            maybe_kill(self.ctx, "sink-after-commit", ready)
            self._pending = [(n, c) for n, c in self._pending if n > checkpoint_id]

    def on_finish(self) -> None:
        self._finished = True
        ready = self._writer.prepare_commit()
        if self._checkpointing:
            self._unassigned.extend(ready)  # committed once the final checkpoint completes
        else:
            self._sink.commit(ready)

    def close(self) -> None:
        if self._committer is not None:
            if not self._committer.wait(self.COMMIT_TIMEOUT_S):
                raise self.failure(TimeoutError(f"the sink's commits did not finish in {self.COMMIT_TIMEOUT_S:.0f} s"))
            self._reap()
        self._guard(self._writer.close)

    def dispose(self) -> None:
        if self._committer is not None:
            self._committer.close()  # after a failure nothing waits for it: the restore commits again
        dispose = getattr(getattr(self, "_writer", None), "dispose", None)
        if dispose is not None:  # a writer's background work (e.g. KafkaSink's periodic checks) stops
            dispose()
        super().dispose()
