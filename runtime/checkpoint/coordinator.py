"""The checkpoint coordinator: when to trigger, when a checkpoint is complete, what to keep.

It lives in the job manager but does no networking: the job manager feeds it
the clock, acknowledgements and declines, and sends the triggers and notices
it returns. A checkpoint is complete when every task has acknowledged it and
``_metadata`` is durably written (last); only then are tasks told, so 2PC
sinks commit only what a completed checkpoint covers. Failed, aborted and
timed-out checkpoints are deleted, and only the newest ``num_retained``
completed ones are kept.

Savepoints are checkpoints the user asked for, with ids from the same
sequence: always full and canonical, written into their own directory, never
used for failover or retention, and (as since Flink 1.15) an intermediate
savepoint does not tell tasks it completed, so sinks commit its output with
the next checkpoint: recovering from an older checkpoint never repeats output
a savepoint committed. A stop-with-savepoint is the job's final snapshot:
its completion is sent (sinks commit) and the job ends. A savepoint is
triggered when no checkpoint is in flight, and no checkpoint starts while
one is; its failure never counts toward the tolerable checkpoint failures.

Storage I/O is split from the decisions so the job manager can run it off its event loop
(``background``): ``record_ack`` says when ``_metadata`` is to be written, ``write_metadata`` writes
it (any thread), ``metadata_written`` decides what that means. A checkpoint whose ``_metadata`` the
store does not take within the checkpoint timeout fails like one a task did not acknowledge, and
what the write leaves behind once it returns is deleted. Deletes go through ``disposer`` (inline by
default; the job manager's retries them in a background thread). ``acknowledge`` does all of it at
once, in the caller's thread.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from ..config import Configuration, Options
from .background import InlineDisposer
from .channel_state import CHANNEL_STATE_KEY
from .metadata import CheckpointMetadata, shared_files
from .shared import SharedStateRegistry, uploaded_for
from .storage import CheckpointStorage, SavepointTarget, error_text, savepoint_url

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
    persisted_data: int = 0  # in-flight bytes stored as channel state (unaligned checkpoints), as Flink's
    processed_data: int = 0  # bytes processed between the barrier overtaking them and the snapshot settling
    unaligned: bool = False  # a barrier overtook in-flight data at this subtask
    start_delay_ms: float = 0.0  # trigger to this subtask's snapshot: how long the barrier took to come
    feedback_logged: int = 0  # a loop's head: bytes of fed-back records logged with its snapshot (task/iteration.py)
    feedback_records: int = 0


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
    savepoint: str | None = None  # the savepoint's directory, when this is one

    @property
    def persisted_data(self) -> int:
        return sum(t.persisted_data for t in self.tasks)

    @property
    def processed_data(self) -> int:
        return sum(t.processed_data for t in self.tasks)

    @property
    def feedback_logged(self) -> int:
        return sum(t.feedback_logged for t in self.tasks)

    @property
    def feedback_records(self) -> int:
        return sum(t.feedback_records for t in self.tasks)

    @property
    def checkpoint_type(self) -> str:
        """Flink's REST ``checkpoint_type``."""
        if self.savepoint is not None:
            return "SAVEPOINT"
        return "UNALIGNED_CHECKPOINT" if any(t.unaligned for t in self.tasks) else "CHECKPOINT"

    def summary(self) -> dict[str, Any]:
        def worst(attr: str) -> float:
            return max((getattr(t, attr) for t in self.tasks), default=0.0)

        return {"id": self.checkpoint_id, "status": self.status, "trigger_time": self.trigger_time,
                "duration_ms": self.duration_ms, "state_size": self.state_size,
                "checkpointed_size": self.checkpointed_size, "max_sync_ms": worst("sync_ms"),
                "max_async_ms": worst("async_ms"), "max_alignment_ms": worst("alignment_ms"),
                "max_start_delay_ms": worst("start_delay_ms"),
                "failure": self.failure, "acks": len(self.tasks), "savepoint": self.savepoint,
                "persisted_data": self.persisted_data, "processed_data": self.processed_data,
                "feedback_logged": self.feedback_logged, "feedback_records": self.feedback_records,
                "checkpoint_type": self.checkpoint_type}


class SavepointConflict(RuntimeError):
    """The job's state does not allow this savepoint now (finishing, or a stop already underway)."""


@dataclass
class SavepointRequest:
    """A savepoint asked for over the REST API or the CLI, from request to outcome."""

    trigger_id: str
    path: str  # the savepoint's own directory
    stop: bool = False
    drain: bool = False
    status: str = "QUEUED"  # QUEUED, IN_PROGRESS, COMPLETED, FAILED
    checkpoint_id: int | None = None
    error: str | None = None
    requested: float = field(default_factory=time.time)
    completed: float | None = None

    def summary(self) -> dict[str, Any]:
        return {"id": self.trigger_id, "status": self.status, "path": self.path, "stop": self.stop,
                "drain": self.drain, "checkpoint_id": self.checkpoint_id, "error": self.error,
                "requested_time": self.requested, "completed_time": self.completed}


@dataclass
class PendingCheckpoint:
    checkpoint_id: int
    timestamp_ms: int
    started: float  # monotonic
    expected: set[tuple[int, int]]  # (task vertex id, subtask) still to acknowledge
    handles: dict[str, list[Any]]
    stats: CheckpointStats
    savepoint: SavepointRequest | None = None
    channel_state: dict[str, list[Any]] = field(default_factory=dict)  # task vertex id -> handle per subtask
    writing: bool = False  # every task acknowledged; its _metadata is being written (``MetadataWrite``)


@dataclass
class MetadataWrite:
    """A checkpoint every task acknowledged, whose ``_metadata`` is to be written (last)."""

    pending: PendingCheckpoint
    metadata: CheckpointMetadata
    url: str  # the checkpoint's or savepoint's directory

    @property
    def checkpoint_id(self) -> int:
        return self.pending.checkpoint_id


@dataclass
class CompletedCheckpoint:
    checkpoint_id: int
    url: str
    metadata: CheckpointMetadata
    final: bool = False  # taken after every task reached the end of its input
    savepoint: SavepointRequest | None = None

    @property
    def root(self) -> str:
        """What its state handles are relative to."""
        return self.url if self.metadata.kind == "savepoint" else self.url.rsplit("/", 1)[0]


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
                 parallelism: int, max_parallelism: int, operators: dict[str, str], tasks: list[int] | dict[int, int],
                 first_id: int = 1, stats_kept: int = 200, operator_parallelism: dict[str, tuple[int, int]] | None = None):
        """``tasks``: task vertex ids (each at ``parallelism``), or vertex id -> its parallelism;
        ``operator_parallelism``: op key -> (parallelism, max parallelism) of operators that have
        their own (set_parallelism); the others have the job's."""
        self.settings = settings
        self.storage = storage
        self.job_id = job_id
        self.job_name = job_name
        self.parallelism = parallelism
        self.max_parallelism = max_parallelism
        self.operators = operators  # op key -> display name
        # task vertex id -> its parallelism; every subtask of each acknowledges
        self.tasks = dict(tasks) if isinstance(tasks, dict) else {v: parallelism for v in tasks}
        self.operator_parallelism = dict(operator_parallelism or {})
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
        self._asked = False  # a checkpoint is wanted now, whatever the interval (request_checkpoint)
        self.final_completed = False
        self.shared = SharedStateRegistry()
        self.savepoints: dict[str, SavepointRequest] = {}
        self._queued: list[SavepointRequest] = []
        self.aborted: list[int] = []  # failed at completion: the job manager tells the tasks
        self.disposer: Any = InlineDisposer()  # runs the deletes (see ``background``)
        # Held while a background delete reads what is retained and in progress (the job manager's lock,
        # which it holds whenever it calls the coordinator).
        self.lock: Any = threading.RLock()

    # -- triggering ----------------------------------------------------------------
    def request_final(self) -> None:
        """Every task reached the end of its input: take one last checkpoint now, so sinks can commit."""
        self._final_requested = True

    def request_checkpoint(self) -> None:
        """A checkpoint as soon as none is in flight, whatever the interval (a rescale waits for one)."""
        self._asked = True

    def reshape(self, parallelism: int, tasks: dict[int, int],
                operator_parallelism: dict[str, tuple[int, int]]) -> None:
        """The job runs at another parallelism from its next attempt on (a rescale): the shape its
        checkpoints take from then on. Whatever is in flight now is aborted by the caller."""
        self.parallelism = parallelism
        self.tasks = dict(tasks)
        self.operator_parallelism = dict(operator_parallelism)

    def withdraw_final(self) -> None:
        """A new attempt starts: its tasks report the end of their input anew."""
        self._final_requested = False

    def request_savepoint(self, target_dir: str, stop: bool = False, drain: bool = False,
                          inline_threshold: int = 20 << 10, trigger_id: str | None = None) -> SavepointRequest:
        """Queue a savepoint into a new directory under ``target_dir``; triggered when nothing is in flight.
        ``trigger_id``: the client's request id (as Flink's triggerId), else one is made up."""
        if self.final_completed or self._final_requested and not stop:
            raise SavepointConflict("the job is finishing: no savepoint can be taken any more")
        if stop and any(r.stop and r.status in ("QUEUED", "IN_PROGRESS") for r in self.savepoints.values()):
            raise SavepointConflict("a stop-with-savepoint is already in progress")
        url = savepoint_url(target_dir, self.job_id)
        SavepointTarget(url, inline_threshold)  # refuses memory:// before anything is queued
        request = SavepointRequest(trigger_id or url.rsplit("-", 1)[1], url, stop, drain)
        self.savepoints[request.trigger_id] = request
        self._queued.append(request)
        return request

    def _savepoint_in_flight(self) -> bool:
        return any(p.savepoint is not None for p in self.pending.values())

    def should_trigger(self, now: float) -> bool:
        s = self.settings
        if self.final_completed or self._savepoint_in_flight():
            return False
        if self._queued:  # also without periodic checkpointing: a savepoint is the user's (as Flink's)
            return not self.pending
        if not s.enabled:
            return False
        if self._asked:
            return not self.pending
        if len(self.pending) >= s.max_concurrent:
            return False
        if self._final_requested:
            return not any(p.stats.final for p in self.pending.values())
        if now - self.last_trigger < s.interval_ms / 1000.0:
            return False
        return now - self.last_completion >= s.min_pause_ms / 1000.0

    def trigger(self, now: float) -> PendingCheckpoint:
        """Start checkpoint n (a queued savepoint first)."""
        n = self.next_id
        self.next_id += 1
        ts = int(time.time() * 1000)
        savepoint = self._queued.pop(0) if self._queued else None
        final = savepoint.stop if savepoint is not None else self._final_requested
        stats = CheckpointStats(n, ts / 1000.0, final=final, savepoint=savepoint.path if savepoint else None)
        expected = {(t, i) for t, p in self.tasks.items() for i in range(p)}
        own = self.operator_parallelism
        pending = self.pending[n] = PendingCheckpoint(
            n, ts, now, expected, {k: [None] * (own[k][0] if k in own else self.parallelism) for k in self.operators},
            stats, savepoint)
        if savepoint is not None:
            savepoint.status, savepoint.checkpoint_id = "IN_PROGRESS", n
        self._remember(stats)
        if savepoint is None:
            self.last_trigger = now
            self._asked = False
        return pending

    # -- acknowledgements ------------------------------------------------------------
    def acknowledge(self, checkpoint_id: int, task: int, subtask: int, handles: dict[str, Any],
                    stats: TaskCheckpointStats, now: float) -> CompletedCheckpoint | None:
        """``record_ack``, and once every task acknowledged, write ``_metadata`` here and now."""
        write = self.record_ack(checkpoint_id, task, subtask, handles, stats, now)
        if write is None:
            return None
        error = None
        try:
            self.write_metadata(write)
        except Exception as e:  # noqa: BLE001 - any storage error fails this checkpoint only
            error = error_text(e)
        return self.metadata_written(write, error, now)

    def record_ack(self, checkpoint_id: int, task: int, subtask: int, handles: dict[str, Any],
                   stats: TaskCheckpointStats, now: float) -> MetadataWrite | None:
        """Note one subtask's acknowledgement. Returns the ``_metadata`` to write once every task
        acknowledged (the checkpoint stays pending, ``writing``, until ``metadata_written``)."""
        pending = self.pending.get(checkpoint_id)
        if pending is None or pending.writing or (task, subtask) not in pending.expected:
            # Late (aborted, timed out, from an earlier attempt): what it uploaded belongs to nobody.
            self.discard_acked_files(handles)
            self._discard_uploads(checkpoint_id, handles.values())
            return None
        pending.expected.discard((task, subtask))
        for key, handle in handles.items():
            if key in pending.handles:
                pending.handles[key][subtask] = handle
        if handles.get(CHANNEL_STATE_KEY):
            pending.channel_state.setdefault(str(task), [None] * self.tasks[task])[subtask] = handles[CHANNEL_STATE_KEY]
        pending.stats.tasks.append(stats)
        pending.stats.state_size += stats.state_size
        pending.stats.checkpointed_size += stats.checkpointed_size
        if pending.expected:
            return None
        return self._prepare(pending, now)

    def _own_parallelism(self, key: str) -> dict[str, int]:
        """An operator's own parallelism and max parallelism, for its metadata entry (none: the job's)."""
        if key not in self.operator_parallelism:
            return {}
        p, maxp = self.operator_parallelism[key]
        return {"parallelism": p, "max_parallelism": maxp}

    def _prepare(self, pending: PendingCheckpoint, now: float) -> MetadataWrite | None:
        n = pending.checkpoint_id
        meta = CheckpointMetadata(
            checkpoint_id=n, job_id=self.job_id, job_name=self.job_name, timestamp_ms=pending.timestamp_ms,
            parallelism=self.parallelism, max_parallelism=self.max_parallelism,
            operators={k: {"name": self.operators[k], "subtasks": hs, **self._own_parallelism(k)}
                       for k, hs in pending.handles.items()},
            kind="savepoint" if pending.savepoint else "checkpoint",
            mode=self.settings.mode, completed_ms=int(time.time() * 1000),
            extra={"channel_state": pending.channel_state} if pending.channel_state else {},
        )
        if pending.savepoint is None and self._dangling(n, meta, now):
            return None
        pending.writing = True
        url = pending.savepoint.path if pending.savepoint is not None else self.storage.checkpoint_url(n)
        return MetadataWrite(pending, meta, url)

    def _dangling(self, n: int, meta: CheckpointMetadata, now: float) -> bool:
        dangling = self.shared.dangling(n, meta.shared_files())
        if dangling:
            self.fail(n, f"reuses shared state no retained checkpoint holds any more ({dangling[0]}, "
                         f"{len(dangling)} files): a task had not yet heard of the newer checkpoint", now)
        return bool(dangling)

    def write_metadata(self, write: MetadataWrite) -> bool:
        """The I/O of completing a checkpoint, in any thread: write its ``_metadata`` (durably, put-if-absent).
        False: not written, because the checkpoint was given up while the write waited its turn."""
        if self.pending.get(write.checkpoint_id) is not write.pending:
            return False
        if write.pending.savepoint is not None:
            SavepointTarget(write.url).write_metadata(write.metadata)
        else:
            self.storage.write_metadata(write.metadata)
        return True

    def metadata_written(self, write: MetadataWrite, error: str | None, now: float) -> CompletedCheckpoint | None:
        """``write_metadata`` returned (``error``: what it raised): complete the checkpoint, or fail it.
        A checkpoint given up meanwhile (expired, aborted, subsumed) stays given up, and whatever the
        write left behind is deleted now that nothing writes it any more."""
        n, pending = write.checkpoint_id, write.pending
        if self.pending.get(n) is not pending:
            self._dispose_given_up(pending)
            return None
        if error is not None:
            self.fail(n, f"could not write {write.url}/_metadata: {error}", now)
            return None
        if pending.savepoint is not None:
            return self._complete_savepoint(pending, write.metadata, now)
        if self._dangling(n, write.metadata, now):  # retention ran while the write was in flight
            return None
        meta = write.metadata
        self._mark_completed(pending, now)
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

    def _mark_completed(self, pending: PendingCheckpoint, now: float) -> None:
        del self.pending[pending.checkpoint_id]
        pending.stats.status = COMPLETED
        pending.stats.duration_ms = (now - pending.started) * 1000.0
        self.counts[COMPLETED] += 1

    def _complete_savepoint(self, pending: PendingCheckpoint, meta: CheckpointMetadata,
                            now: float) -> CompletedCheckpoint | None:
        request = pending.savepoint
        assert request is not None
        self._mark_completed(pending, now)
        request.status, request.completed = COMPLETED, time.time()
        if request.stop:
            self.final_completed = True
        return CompletedCheckpoint(pending.checkpoint_id, request.path, meta, request.stop, request)

    def _apply_retention(self) -> None:
        while len(self.completed) > self.settings.num_retained:
            self._discard_completed(self.completed.pop(0))
        self.disposer.submit("leftovers in the checkpoint directory", self._sweep_now, retry=False)

    def _discard_completed(self, checkpoint: CompletedCheckpoint) -> None:
        """Delete a completed checkpoint, and the shared files no other retained checkpoint references."""
        n, unused = checkpoint.checkpoint_id, self.shared.unregister(checkpoint.checkpoint_id,
                                                                    checkpoint.metadata.shared_files())
        self.disposer.submit(f"checkpoint {n} ({checkpoint.url})", lambda: self._delete(n, unused))

    def _delete(self, checkpoint_id: int | None, files: list[str]) -> None:
        if checkpoint_id is not None:
            self.storage.discard(checkpoint_id, strict=True)
        self.storage.discard_files(files, strict=True)

    def discard_acked_files(self, handles: dict[str, Any]) -> None:
        """Delete the state files of an acknowledgement nobody takes (late, or of an attempt that is over)."""
        files = [h["file"] for h in handles.values() if isinstance(h, dict) and h.get("file")]
        if files:
            self.disposer.submit(f"{len(files)} state files of a late acknowledgement",
                                 lambda: self._delete(None, files))

    def sweep(self, keep_pending: bool = True) -> None:
        """Delete every chk-<n> directory that is neither retained nor in progress, and every shared
        file no retained checkpoint references (leftovers of failed, aborted or killed uploads)."""
        try:
            self._sweep_now(keep_pending)
        except Exception:  # noqa: BLE001 - store unreachable: the next sweep does it
            pass

    def _sweep_now(self, keep_pending: bool = True) -> None:
        # Listed first, then decided under the lock: a directory listed exists, so its checkpoint was
        # triggered before; whatever is not retained or in progress by now is given up for good.
        ids = self.storage.checkpoint_ids()
        listing = self.storage.shared_files() if not self.storage.in_memory else []
        with self.lock:  # copies first: the executor's thread may change them without the lock (restore choice)
            keep = {c.checkpoint_id for c in list(self.completed)}
            in_progress = set(self.pending) if keep_pending else set()
            orphans = self.shared.orphans(listing, in_progress)
        for n in ids:
            if n not in keep and n not in in_progress:
                self.storage.discard(n, strict=True)
        self.storage.discard_files(orphans, strict=True)

    def _discard_uploads(self, checkpoint_id: int, handles: Any) -> None:
        """Delete the shared files uploaded for checkpoint n that never became part of a completed one."""
        files = [f for h in handles for f in shared_files(h)
                 if uploaded_for(f) == checkpoint_id and f not in self.shared.references]
        if files:
            self.disposer.submit(f"{len(files)} shared files of checkpoint {checkpoint_id}",
                                 lambda: self._delete(None, files))

    def _dispose_given_up(self, pending: PendingCheckpoint) -> None:
        """Delete what a failed checkpoint (or savepoint) wrote: its directory and its own uploads."""
        n = pending.checkpoint_id
        request = pending.savepoint
        if request is not None:
            self.disposer.submit(f"failed savepoint {n} ({request.path})", lambda: SavepointTarget(request.path).discard())
            return
        self.disposer.submit(f"failed checkpoint {n} ({self.storage.checkpoint_url(n)})", lambda: self._delete(n, []))
        self._discard_uploads(n, [h for hs in pending.handles.values() for h in hs])

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
        self.aborted.append(checkpoint_id)
        # Its _metadata still being written: deleted when that write returns (``metadata_written``),
        # never before, or the write would leave a _metadata behind.
        if not pending.writing:
            self._dispose_given_up(pending)
        if pending.savepoint is not None:
            request = pending.savepoint
            request.status, request.error, request.completed = FAILED, reason, time.time()
            self.counts[FAILED] += 1  # but not toward the tolerable checkpoint failures
            return
        if count:
            self.counts[FAILED] += 1
            self.consecutive_failures += 1

    def decline(self, checkpoint_id: int, reason: str, now: float) -> None:
        self.fail(checkpoint_id, reason, now)

    def expire(self, now: float) -> list[int]:
        timeout = self.settings.timeout_ms / 1000.0
        expired = [n for n, p in self.pending.items() if now - p.started > timeout]
        for n in expired:
            p = self.pending[n]
            where = p.savepoint.path if p.savepoint is not None else self.storage.checkpoint_url(n)
            self.fail(n, f"expired after {self.settings.timeout_ms} ms while writing {where}/_metadata: the "
                         f"checkpoint storage did not answer" if p.writing else
                         f"expired after {self.settings.timeout_ms} ms before every task acknowledged", now)
        return expired

    def failures_exceeded(self) -> bool:
        return self.consecutive_failures > self.settings.tolerable_failures

    def abort_all(self, reason: str, now: float) -> list[int]:
        ids = list(self.pending)
        for n in ids:
            self.fail(n, reason, now, count=False)
        for request in self._queued:
            request.status, request.error, request.completed = FAILED, reason, time.time()
        self._queued = []
        self._final_requested = False
        # A task may die after the final checkpoint (or a stop-with-savepoint) completed but before
        # its sink committed: the restored attempt reaches the end again and needs one more final
        # checkpoint to commit what it restored. Left set, nothing would trigger it and the attempt
        # would wait for ever.
        self.final_completed = False
        self.aborted.clear()  # nobody is left to tell
        return ids

    def take_aborted(self) -> list[int]:
        """Checkpoints failed since the last call (the job manager sends ``abort``)."""
        ids, self.aborted = self.aborted, []
        return ids

    def latest_savepoint(self) -> SavepointRequest | None:
        done = [r for r in self.savepoints.values() if r.status == COMPLETED]
        return done[-1] if done else None

    # -- restore ---------------------------------------------------------------------------
    def latest(self) -> CompletedCheckpoint | None:
        return self.completed[-1] if self.completed else None

    def drop_corrupt(self, checkpoint_id: int) -> None:
        """A task could not read checkpoint n: forget it, so the one before is used."""
        for c in [c for c in self.completed if c.checkpoint_id == checkpoint_id]:
            self.completed.remove(c)
            self.shared.unregister(checkpoint_id, c.metadata.shared_files())

    # -- end of job ------------------------------------------------------------------------
    def shutdown(self, job_state: str, retain: bool = False) -> None:
        """Flink's cleanup: FINISHED discards all; CANCELED keeps them only with RETAIN_ON_CANCELLATION;
        FAILED keeps them unless checkpoints are not externalized. ``retain``: the job ends because its
        driver died (the Spark JVM), which is a crash rather than a job's end: as when Flink's job
        manager process dies, completed checkpoints stay for the job to be resumed from."""
        keep = keeps_checkpoints(job_state, self.settings.retention, retain)
        # The end of the job: what the background deletes had not done yet is done here, in this thread.
        self.disposer.close(timeout=10.0)
        self.disposer = InlineDisposer()
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


def keeps_checkpoints(job_state: str, retention: str, retain: bool = False) -> bool:
    """Whether a job ending in ``job_state`` keeps its completed checkpoints (Flink's rule, see
    ``CheckpointCoordinator.shutdown``). FINISHED never does, whatever the retention: a finished job's
    resumable state is a savepoint."""
    return retain or (job_state == "CANCELED" and retention == "RETAIN_ON_CANCELLATION") or (
        job_state == "FAILED" and retention != "NO_EXTERNALIZED_CHECKPOINTS")
