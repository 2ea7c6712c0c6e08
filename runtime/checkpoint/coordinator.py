"""The checkpoint coordinator: when to trigger, when a checkpoint is complete, what to keep.

It lives in the job manager but does no networking: the job manager feeds it
the clock, acknowledgements and declines, and sends the triggers and notices
it returns. A checkpoint is complete when every task has acknowledged it and
``_metadata`` is durably written (last); only then are tasks told, so 2PC
sinks commit only what a completed checkpoint covers. Failed, aborted and
timed-out checkpoints are deleted, and only the newest ``num_retained``
completed ones are kept.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from ..config import Configuration, Options
from .metadata import CheckpointMetadata, shared_files
from .shared import SharedStateRegistry, uploaded_for
from .storage import CheckpointStorage

IN_PROGRESS, COMPLETED, FAILED = "IN_PROGRESS", "COMPLETED", "FAILED"


@dataclass
class TaskCheckpointStats:
    task: str
    subtask: int
    sync_ms: float
    async_ms: float
    alignment_ms: float
    state_size: int
    checkpointed_size: int = 0  # bytes written for this checkpoint (less than state_size when incremental)


@dataclass
class CheckpointStats:
    checkpoint_id: int
    trigger_time: float  # wall clock, seconds
    status: str = IN_PROGRESS
    duration_ms: float | None = None
    state_size: int = 0
    checkpointed_size: int = 0
    tasks: list[TaskCheckpointStats] = field(default_factory=list)
    failure: str | None = None
    final: bool = False

    def summary(self) -> dict[str, Any]:
        def worst(attr: str) -> float:
            return max((getattr(t, attr) for t in self.tasks), default=0.0)

        return {"id": self.checkpoint_id, "status": self.status, "trigger_time": self.trigger_time,
                "duration_ms": self.duration_ms, "state_size": self.state_size,
                "checkpointed_size": self.checkpointed_size, "max_sync_ms": worst("sync_ms"),
                "max_async_ms": worst("async_ms"), "max_alignment_ms": worst("alignment_ms"),
                "failure": self.failure, "acks": len(self.tasks)}


@dataclass
class PendingCheckpoint:
    checkpoint_id: int
    timestamp_ms: int
    started: float  # monotonic
    expected: set[tuple[int, int]]  # (task vertex id, subtask) still to acknowledge
    handles: dict[str, list[Any]]
    stats: CheckpointStats


@dataclass
class CompletedCheckpoint:
    checkpoint_id: int
    url: str
    metadata: CheckpointMetadata
    final: bool = False  # taken after every task reached the end of its input


@dataclass
class CheckpointSettings:
    interval_ms: int
    mode: str
    timeout_ms: int
    min_pause_ms: int
    max_concurrent: int
    tolerable_failures: int
    num_retained: int
    retention: str

    @staticmethod
    def from_configuration(config: Configuration) -> "CheckpointSettings":
        return CheckpointSettings(
            interval_ms=config.get_duration_ms(Options.CHECKPOINTING_INTERVAL),
            mode=str(config.get(Options.CHECKPOINTING_MODE)).upper(),
            timeout_ms=config.get_duration_ms(Options.CHECKPOINTING_TIMEOUT),
            min_pause_ms=config.get_duration_ms(Options.CHECKPOINTING_MIN_PAUSE),
            max_concurrent=max(1, config.get_int(Options.CHECKPOINTING_MAX_CONCURRENT)),
            tolerable_failures=config.get_int(Options.CHECKPOINTING_TOLERABLE_FAILURES),
            num_retained=max(1, config.get_int(Options.CHECKPOINTING_NUM_RETAINED)),
            retention=str(config.get(Options.CHECKPOINTING_RETENTION)).upper(),
        )

    @property
    def enabled(self) -> bool:
        return self.interval_ms > 0


class TooManyCheckpointFailures(RuntimeError):
    pass


class CheckpointCoordinator:
    def __init__(self, settings: CheckpointSettings, storage: CheckpointStorage, *, job_id: str, job_name: str,
                 parallelism: int, max_parallelism: int, operators: dict[str, str], tasks: list[int],
                 first_id: int = 1, stats_kept: int = 200):
        self.settings = settings
        self.storage = storage
        self.job_id = job_id
        self.job_name = job_name
        self.parallelism = parallelism
        self.max_parallelism = max_parallelism
        self.operators = operators  # op key -> display name
        self.tasks = tasks  # task vertex ids; every subtask of each acknowledges
        self.next_id = first_id
        self.pending: dict[int, PendingCheckpoint] = {}
        self.completed: list[CompletedCheckpoint] = []
        self.history: list[CheckpointStats] = []
        self.stats_kept = stats_kept
        self.counts = {COMPLETED: 0, FAILED: 0}
        self.consecutive_failures = 0
        self.last_trigger = float("-inf")
        self.last_completion = float("-inf")
        self._final_requested = False
        self.final_completed = False
        self.shared = SharedStateRegistry()

    # -- triggering ----------------------------------------------------------------
    def request_final(self) -> None:
        """Every task reached the end of its input: take one last checkpoint now, so sinks can commit."""
        self._final_requested = True

    def should_trigger(self, now: float) -> bool:
        s = self.settings
        if not s.enabled or self.final_completed or len(self.pending) >= s.max_concurrent:
            return False
        if self._final_requested:
            return not any(p.stats.final for p in self.pending.values())
        if now - self.last_trigger < s.interval_ms / 1000.0:
            return False
        return now - self.last_completion >= s.min_pause_ms / 1000.0

    def trigger(self, now: float) -> tuple[int, int, bool]:
        """Start checkpoint n; returns (id, timestamp ms, final)."""
        n = self.next_id
        self.next_id += 1
        ts = int(time.time() * 1000)
        final = self._final_requested
        stats = CheckpointStats(n, ts / 1000.0, final=final)
        expected = {(t, i) for t in self.tasks for i in range(self.parallelism)}
        self.pending[n] = PendingCheckpoint(n, ts, now, expected, {k: [None] * self.parallelism for k in self.operators}, stats)
        self._remember(stats)
        self.last_trigger = now
        return n, ts, final

    # -- acknowledgements ------------------------------------------------------------
    def acknowledge(self, checkpoint_id: int, task: int, subtask: int, handles: dict[str, Any],
                    stats: TaskCheckpointStats, now: float) -> CompletedCheckpoint | None:
        pending = self.pending.get(checkpoint_id)
        if pending is None or (task, subtask) not in pending.expected:
            # Late (aborted, timed out, from an earlier attempt): what it uploaded belongs to nobody.
            self.storage.discard_files([h["file"] for h in handles.values() if h and h.get("file")])
            self._discard_uploads(checkpoint_id, handles.values())
            return None
        pending.expected.discard((task, subtask))
        for key, handle in handles.items():
            if key in pending.handles:
                pending.handles[key][subtask] = handle
        pending.stats.tasks.append(stats)
        pending.stats.state_size += stats.state_size
        pending.stats.checkpointed_size += stats.checkpointed_size
        if pending.expected:
            return None
        return self._complete(pending, now)

    def _complete(self, pending: PendingCheckpoint, now: float) -> CompletedCheckpoint | None:
        n = pending.checkpoint_id
        meta = CheckpointMetadata(
            checkpoint_id=n, job_id=self.job_id, job_name=self.job_name, timestamp_ms=pending.timestamp_ms,
            parallelism=self.parallelism, max_parallelism=self.max_parallelism,
            operators={k: {"name": self.operators[k], "subtasks": hs} for k, hs in pending.handles.items()},
            mode=self.settings.mode, completed_ms=int(time.time() * 1000),
        )
        dangling = self.shared.dangling(n, meta.shared_files())
        if dangling:
            self.fail(n, f"reuses shared state no retained checkpoint holds any more ({dangling[0]}, "
                         f"{len(dangling)} files): a task had not yet heard of the newer checkpoint", now)
            return None
        try:
            self.storage.write_metadata(meta)
        except Exception as e:  # noqa: BLE001 - any storage error fails this checkpoint only
            self.fail(n, f"could not write {self.storage.checkpoint_url(n)}/_metadata: {type(e).__name__}: {e}", now)
            return None
        del self.pending[n]
        pending.stats.status = COMPLETED
        pending.stats.duration_ms = (now - pending.started) * 1000.0
        self.counts[COMPLETED] += 1
        self.consecutive_failures = 0
        self.last_completion = now
        self.final_completed = self.final_completed or pending.stats.final
        done = CompletedCheckpoint(n, self.storage.checkpoint_url(n), meta, pending.stats.final)
        self.shared.register(n, meta.shared_files())
        self.completed.append(done)
        # A completed checkpoint subsumes older pending ones (as Flink's).
        for older in [k for k in self.pending if k < n]:
            self.fail(older, f"subsumed by checkpoint {n}", now, count=False)
        self._apply_retention()
        return done

    def _apply_retention(self) -> None:
        while len(self.completed) > self.settings.num_retained:
            self._discard_completed(self.completed.pop(0))
        self.sweep()

    def _discard_completed(self, checkpoint: CompletedCheckpoint) -> None:
        """Delete a completed checkpoint, and the shared files no other retained checkpoint references."""
        self.storage.discard(checkpoint.checkpoint_id)
        self.storage.discard_files(self.shared.unregister(checkpoint.checkpoint_id, checkpoint.metadata.shared_files()))

    def sweep(self, keep_pending: bool = True) -> None:
        """Delete every chk-<n> directory that is neither retained nor in progress, and every shared
        file no retained checkpoint references (leftovers of failed, aborted or killed uploads)."""
        keep = {c.checkpoint_id for c in self.completed}
        in_progress = set(self.pending) if keep_pending else set()
        for n in self.storage.checkpoint_ids():
            if n not in keep and n not in in_progress:
                self.storage.discard(n)
        if not self.storage.in_memory:
            self.storage.discard_files(self.shared.orphans(self.storage.shared_files(), in_progress))

    def _discard_uploads(self, checkpoint_id: int, handles: Any) -> None:
        """Delete the shared files uploaded for checkpoint n that never became part of a completed one."""
        self.storage.discard_files([f for h in handles for f in shared_files(h)
                                    if uploaded_for(f) == checkpoint_id and f not in self.shared.references])

    def adopt(self, checkpoints: list[CompletedCheckpoint]) -> None:
        """Claim retained checkpoints found in storage (oldest first), e.g. after the job manager restarted:
        they count for retention, and the shared-state registry is rebuilt from their ``_metadata``."""
        for c in checkpoints:
            self.shared.register(c.checkpoint_id, c.metadata.shared_files())
            self.completed.append(c)
            self.next_id = max(self.next_id, c.checkpoint_id + 1)
        self._apply_retention()

    # -- failures ----------------------------------------------------------------------
    def fail(self, checkpoint_id: int, reason: str, now: float, count: bool = True) -> None:
        pending = self.pending.pop(checkpoint_id, None)
        if pending is None:
            return
        pending.stats.status = FAILED
        pending.stats.failure = reason
        pending.stats.duration_ms = (now - pending.started) * 1000.0
        self.storage.discard(checkpoint_id)
        self._discard_uploads(checkpoint_id, [h for hs in pending.handles.values() for h in hs])
        if count:
            self.counts[FAILED] += 1
            self.consecutive_failures += 1

    def decline(self, checkpoint_id: int, reason: str, now: float) -> None:
        self.fail(checkpoint_id, reason, now)

    def expire(self, now: float) -> list[int]:
        timeout = self.settings.timeout_ms / 1000.0
        expired = [n for n, p in self.pending.items() if now - p.started > timeout]
        for n in expired:
            self.fail(n, f"expired after {self.settings.timeout_ms} ms before every task acknowledged", now)
        return expired

    def failures_exceeded(self) -> bool:
        return self.consecutive_failures > self.settings.tolerable_failures

    def abort_all(self, reason: str, now: float) -> list[int]:
        ids = list(self.pending)
        for n in ids:
            self.fail(n, reason, now, count=False)
        self._final_requested = False
        return ids

    # -- restore ---------------------------------------------------------------------------
    def latest(self) -> CompletedCheckpoint | None:
        return self.completed[-1] if self.completed else None

    def drop_corrupt(self, checkpoint_id: int) -> None:
        """A task could not read checkpoint n: forget it, so the one before is used."""
        for c in [c for c in self.completed if c.checkpoint_id == checkpoint_id]:
            self.completed.remove(c)
            self.shared.unregister(checkpoint_id, c.metadata.shared_files())

    # -- end of job ------------------------------------------------------------------------
    def shutdown(self, job_state: str) -> None:
        """Flink's cleanup: FINISHED discards all; CANCELED keeps them only with RETAIN_ON_CANCELLATION;
        FAILED keeps them unless checkpoints are not externalized."""
        retention = self.settings.retention
        keep = (job_state == "CANCELED" and retention == "RETAIN_ON_CANCELLATION") or (
            job_state == "FAILED" and retention != "NO_EXTERNALIZED_CHECKPOINTS")
        self.abort_all(f"job {job_state.lower()}", time.monotonic())
        if not keep:
            for c in self.completed:
                self._discard_completed(c)
            self.completed = []
        self.sweep(keep_pending=False)
        if not keep:
            self.storage.remove_job_dir_if_empty()

    def _remember(self, stats: CheckpointStats) -> None:
        self.history.append(stats)
        if len(self.history) > self.stats_kept:
            del self.history[0]
