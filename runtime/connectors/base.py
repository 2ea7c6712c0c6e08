"""What a connector implements.

A source is a picklable description; each subtask asks it for a reader of its
share (``create_reader``). A reader's ``poll`` returns a batch (or a ``Stamped`` batch: records with event timestamps), ``None`` when
nothing is there yet (``wakeup_at`` says when to ask again), or ``END`` when
its share is exhausted. For exactly-once a reader is *replayable*: its
``snapshot_state`` returns its splits with their positions (small, picklable
values), and ``restore_state`` puts a fresh reader back at them.

A sink hands each subtask a writer. A two-phase-commit sink's writer makes
what it wrote so far ready but invisible in ``prepare_commit`` (at each
checkpoint barrier and at the end of input) and returns *committables*; the
sink's ``commit`` makes them visible once the checkpoint that holds them is
complete. ``commit`` must be idempotent: after a failure the committables of
the restored checkpoint are committed again.
"""

from __future__ import annotations

from typing import Any

from ..api.functions import RuntimeContext
from ..batch import Batch
from ..config import Options


class _End:
    def __repr__(self) -> str:
        return "END"


END = _End()


class Source:
    default_name = "Source"

    def is_bounded(self) -> bool:
        """The input ends (BATCH mode needs every source bounded)."""
        return True

    def create_reader(self, ctx: RuntimeContext) -> "SourceReader":
        raise NotImplementedError


class SourceReader:
    # False: on restore at another parallelism the old readers' splits are dealt out evenly (split
    # list state). True: every reader gets every old reader's splits and keeps its own share (union
    # list state), for sources where a rule, not the deal, says which reader owns a split (Kafka).
    union_state = False

    def poll(self) -> Batch | None | _End:
        raise NotImplementedError

    def snapshot_state(self) -> list | None:
        """The reader's splits and positions; None if the source cannot replay (at-most-once)."""
        return None

    def restore_state(self, splits: list) -> None:
        """Continue from positions a ``snapshot_state`` returned (of this or other subtasks)."""

    def notify_checkpoint_complete(self, checkpoint_id: int, splits: list | None) -> None:
        """Checkpoint ``checkpoint_id`` is complete; ``splits`` is what ``snapshot_state`` gave for it."""

    def current_split(self) -> Any:
        """The split the last polled batch came from (hashable), or None for a single stream.
        With several splits per reader (after a rescale) watermarks are generated per split
        and the reader's watermark is their minimum, as Flink does, so a split that is behind
        does not find its records late."""
        return None

    def open_splits(self) -> list | None:
        """The splits this reader has not finished (ids as ``current_split`` gives them)."""
        return None

    def take_side_outputs(self) -> dict | None:
        """Records of the batch ``poll`` just returned that go to side outputs, by OutputTag name:
        ``{tag: (records, event timestamps)}`` (e.g. Kafka messages that could not be decoded)."""
        return None

    def wakeup_at(self, now: float) -> float:
        return now + 0.01

    def close(self) -> None:
        pass


class Sink:
    default_name = "Sink"
    exactly_once = False  # True for two-phase-commit sinks
    # True: ``commit`` runs in a thread of its own, while the task goes on writing (it must not share
    # unsynchronised objects with the writer); committables count as pending until it returns.
    commit_in_background = False

    def create_writer(self, ctx: RuntimeContext) -> "SinkWriter":
        raise NotImplementedError

    def commit(self, committables: list) -> None:
        """Make prepared output visible. Idempotent."""


class SinkWriter:
    def write(self, batch: Batch) -> None:
        raise NotImplementedError

    def prepare_commit(self) -> list:
        """Checkpoint barrier or end of input: flush, return committables (none if output is already visible)."""
        return []

    def snapshot_state(self) -> list:
        return []

    def restore_state(self, state: list) -> None:
        """After a restore (and after the restored committables were committed)."""

    def start(self) -> None:
        """Once, before the first record: after ``create_writer`` and, on a restore, after
        ``restore_state``. A transactional writer cleans up after a failed attempt here."""

    def close(self) -> None:
        pass


def batch_size_of(ctx: RuntimeContext) -> int:
    return int(ctx.get_job_parameter(Options.BATCH_SIZE, 8192))


def connector_metrics(ctx: Any) -> Any:
    """The connector (system) metric group of the operator the reader or writer is for: Flink's
    connector metrics (``pendingRecords``...), shown without the ``user`` prefix (``api/metrics.py``)."""
    registry = getattr(ctx, "_metric_registry", None)
    if registry is None:  # a context of another kind (tests): metrics that go nowhere
        from ..api.metrics import MetricRegistry

        return MetricRegistry().group(system=True)
    return registry().group(system=True)


def share(ctx: RuntimeContext) -> tuple[int, int]:
    return ctx.get_index_of_this_subtask(), ctx.get_number_of_parallel_subtasks()


__all__ = ["END", "Source", "SourceReader", "Sink", "SinkWriter", "batch_size_of", "connector_metrics", "share", "Any"]
