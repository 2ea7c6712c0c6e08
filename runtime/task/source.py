"""The source operator: the head of a source task, whose reader the task polls."""

from __future__ import annotations

from typing import Any

from ..batch import Batch, Stamped, num_rows
from .base import StreamOperator


class SourceOperator(StreamOperator):
    """Head of a source task; the task polls its reader and calls ``emit``.

    Its splits and positions are operator list state, redistributed on restore.
    """

    SPLITS = "source-splits"

    def setup(self) -> None:
        self.reader = self.node.fn.create_reader(self.ctx)
        store = self.operator_state
        self._splits = (store.get_union_list_state if self.reader.union_state else store.get_list_state)(self.SPLITS)
        if store.is_restored():
            self.reader.restore_state(self._splits.get())
        self._snapshotted: dict[int, list] = {}  # checkpoint id -> the splits it holds, until it completes
        self._take_side = getattr(self.reader, "take_side_outputs", None)  # readers need not subclass SourceReader

    def prepare_snapshot(self, checkpoint_id: int) -> None:
        splits = self.reader.snapshot_state()
        if splits is not None:
            self._splits.update(splits)
            self._snapshotted[checkpoint_id] = splits

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        splits = self._snapshotted.pop(checkpoint_id, None)
        for older in [n for n in self._snapshotted if n < checkpoint_id]:  # aborted or subsumed
            del self._snapshotted[older]
        self._guard(lambda: self.reader.notify_checkpoint_complete(checkpoint_id, splits))

    def poll(self) -> Any:
        """The reader's next batch, None (nothing yet) or END."""
        try:
            return self.reader.poll()
        except Exception as e:
            raise self.failure(e) from e

    def emit(self, batch: Batch) -> None:
        if type(batch) is Stamped:  # records with event timestamps (e.g. Kafka's)
            self.records_in += num_rows(batch.batch)
            self.output.emit(batch.batch, batch.ts)
        else:
            self.records_in += num_rows(batch)
            self.output.emit(batch)
        side = self._take_side() if self._take_side is not None else None
        if side:  # in the same step as the batch: no barrier between them and the position they moved
            self.output.emit_side({tag: rows for tag, (rows, _) in side.items()},
                                  {tag: ts for tag, (_, ts) in side.items()})

    def process(self, batch: Batch, input_index: int) -> None:  # pragma: no cover - sources have no input
        raise RuntimeError("a source has no input")

    def close(self) -> None:
        self._guard(self.reader.close)
