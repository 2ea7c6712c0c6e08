"""Checkpointing settings, named as in PyFlink: ``env.enable_checkpointing(...)`` and
``env.get_checkpoint_config()``. Everything is stored in the job's configuration
under Flink's keys, so ``--conf execution.checkpointing.interval=1000`` works too.
"""

from __future__ import annotations

import datetime as _dt
from enum import Enum
from typing import Any

from ..config import Configuration, Options


class CheckpointingMode(Enum):
    EXACTLY_ONCE = "EXACTLY_ONCE"
    AT_LEAST_ONCE = "AT_LEAST_ONCE"


class ExternalizedCheckpointRetention(Enum):
    """What happens to retained checkpoints when the job ends other than by finishing."""

    NO_EXTERNALIZED_CHECKPOINTS = "NO_EXTERNALIZED_CHECKPOINTS"  # deleted whenever the job ends
    DELETE_ON_CANCELLATION = "DELETE_ON_CANCELLATION"  # kept if the job fails, deleted if canceled
    RETAIN_ON_CANCELLATION = "RETAIN_ON_CANCELLATION"  # kept if the job fails or is canceled


# Flink 1.x name of the same enum.
ExternalizedCheckpointCleanup = ExternalizedCheckpointRetention


def to_millis(value: Any, what: str) -> int:
    if isinstance(value, _dt.timedelta):
        value = value.total_seconds() * 1000
    elif hasattr(value, "to_milliseconds"):  # Duration / Time, as PyFlink passes them
        value = value.to_milliseconds()
    try:
        ms = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be milliseconds (int) or a timedelta, got {value!r}") from None
    if ms < 0:
        raise ValueError(f"{what} must be >= 0 ms, got {ms}")
    return ms


class CheckpointConfig:
    """A view on the job configuration's ``execution.checkpointing.*`` keys."""

    def __init__(self, config: Configuration):
        self._config = config

    # interval and mode
    def is_checkpointing_enabled(self) -> bool:
        return self.get_checkpoint_interval() > 0

    def get_checkpoint_interval(self) -> int:
        return self._config.get_duration_ms(Options.CHECKPOINTING_INTERVAL)

    def set_checkpoint_interval(self, checkpoint_interval: Any) -> "CheckpointConfig":
        ms = to_millis(checkpoint_interval, "checkpoint interval")
        if ms < 10:
            raise ValueError(f"checkpoint interval must be at least 10 ms, got {ms}")
        self._config.set(Options.CHECKPOINTING_INTERVAL, ms)
        return self

    def get_checkpointing_mode(self) -> CheckpointingMode:
        return CheckpointingMode(str(self._config.get(Options.CHECKPOINTING_MODE)).upper())

    def set_checkpointing_mode(self, checkpointing_mode: CheckpointingMode | str) -> "CheckpointConfig":
        mode = checkpointing_mode
        self._config.set(Options.CHECKPOINTING_MODE, CheckpointingMode(mode if isinstance(mode, str) else mode.value).value)
        return self

    # limits
    def get_checkpoint_timeout(self) -> int:
        return self._config.get_duration_ms(Options.CHECKPOINTING_TIMEOUT)

    def set_checkpoint_timeout(self, checkpoint_timeout: Any) -> "CheckpointConfig":
        ms = to_millis(checkpoint_timeout, "checkpoint timeout")
        if ms < 1:
            raise ValueError("checkpoint timeout must be > 0 ms")
        self._config.set(Options.CHECKPOINTING_TIMEOUT, ms)
        return self

    def get_min_pause_between_checkpoints(self) -> int:
        return self._config.get_duration_ms(Options.CHECKPOINTING_MIN_PAUSE)

    def set_min_pause_between_checkpoints(self, min_pause_between_checkpoints: Any) -> "CheckpointConfig":
        self._config.set(Options.CHECKPOINTING_MIN_PAUSE, to_millis(min_pause_between_checkpoints,
                                                                    "min pause between checkpoints"))
        return self

    def get_max_concurrent_checkpoints(self) -> int:
        return self._config.get_int(Options.CHECKPOINTING_MAX_CONCURRENT)

    def set_max_concurrent_checkpoints(self, max_concurrent_checkpoints: int) -> "CheckpointConfig":
        n = max_concurrent_checkpoints
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"max concurrent checkpoints must be a positive int, got {n!r}")
        self._config.set(Options.CHECKPOINTING_MAX_CONCURRENT, n)
        return self

    def get_tolerable_checkpoint_failure_number(self) -> int:
        return self._config.get_int(Options.CHECKPOINTING_TOLERABLE_FAILURES)

    def set_tolerable_checkpoint_failure_number(self, tolerable_checkpoint_failure_number: int) -> "CheckpointConfig":
        n = tolerable_checkpoint_failure_number
        if not isinstance(n, int) or n < 0:
            raise ValueError(f"tolerable checkpoint failure number must be an int >= 0, got {n!r}")
        self._config.set(Options.CHECKPOINTING_TOLERABLE_FAILURES, n)
        return self

    def get_num_retained_checkpoints(self) -> int:
        return self._config.get_int(Options.CHECKPOINTING_NUM_RETAINED)

    def set_num_retained_checkpoints(self, n: int) -> "CheckpointConfig":
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"number of retained checkpoints must be a positive int, got {n!r}")
        self._config.set(Options.CHECKPOINTING_NUM_RETAINED, n)
        return self

    # retention and storage
    def get_externalized_checkpoint_retention(self) -> ExternalizedCheckpointRetention:
        return ExternalizedCheckpointRetention(str(self._config.get(Options.CHECKPOINTING_RETENTION)).upper())

    def set_externalized_checkpoint_retention(self, retention_mode: ExternalizedCheckpointRetention | str
                                              ) -> "CheckpointConfig":
        value = retention_mode if isinstance(retention_mode, str) else retention_mode.value
        self._config.set(Options.CHECKPOINTING_RETENTION, ExternalizedCheckpointRetention(value).value)
        return self

    # Flink 1.x names of the same setting (PyFlink calls its argument cleanup_mode there)
    def enable_externalized_checkpoints(self, cleanup_mode: ExternalizedCheckpointRetention | str) -> "CheckpointConfig":
        return self.set_externalized_checkpoint_retention(cleanup_mode)

    def set_externalized_checkpoint_cleanup(self, cleanup_mode: ExternalizedCheckpointRetention | str
                                            ) -> "CheckpointConfig":
        return self.set_externalized_checkpoint_retention(cleanup_mode)
    get_externalized_checkpoint_cleanup = get_externalized_checkpoint_retention

    def is_externalized_checkpoints_enabled(self) -> bool:
        return self.get_externalized_checkpoint_retention() != ExternalizedCheckpointRetention.NO_EXTERNALIZED_CHECKPOINTS

    # failures
    def set_fail_on_checkpointing_errors(self, fail_on_checkpointing_errors: bool) -> "CheckpointConfig":
        """Flink 1.x: True = a failed checkpoint fails the job (tolerable failures 0); False = never."""
        self._config.set(Options.CHECKPOINTING_TOLERABLE_FAILURES, 0 if fail_on_checkpointing_errors else 2**31 - 1)
        return self

    def is_fail_on_checkpointing_errors(self) -> bool:
        return self.get_tolerable_checkpoint_failure_number() == 0

    # unaligned checkpoints
    def enable_unaligned_checkpoints(self, enabled: bool = True) -> "CheckpointConfig":
        """Barriers overtake in-flight data, which is stored in the checkpoint (EXACTLY_ONCE only):
        checkpoints complete quickly even under backpressure. Savepoints stay aligned."""
        self._config.set(Options.CHECKPOINTING_UNALIGNED, bool(enabled))
        return self

    def disable_unaligned_checkpoints(self) -> "CheckpointConfig":
        return self.enable_unaligned_checkpoints(False)

    def is_unaligned_checkpoints_enabled(self) -> bool:
        return self._config.unaligned_checkpoints()[0] if self.get_checkpointing_mode() == CheckpointingMode.EXACTLY_ONCE \
            else False

    def set_aligned_checkpoint_timeout(self, alignment_timeout: Any) -> "CheckpointConfig":
        """With unaligned checkpoints: start each checkpoint aligned and switch to unaligned where it
        has not completed within ``alignment_timeout`` of its trigger (ms, timedelta or Duration; 0:
        unaligned at once). PyFlink's keyword, as its ``set_alignment_timeout``."""
        self._config.set(Options.CHECKPOINTING_ALIGNED_TIMEOUT,
                         to_millis(alignment_timeout, "aligned checkpoint timeout"))
        return self

    def get_aligned_checkpoint_timeout(self) -> int:
        return self._config.get_duration_ms(Options.CHECKPOINTING_ALIGNED_TIMEOUT)

    set_alignment_timeout = set_aligned_checkpoint_timeout  # Flink 1.13 name
    get_alignment_timeout = get_aligned_checkpoint_timeout

    def set_force_unaligned_checkpoints(self, force_unaligned_checkpoints: bool = True) -> "CheckpointConfig":
        """Flink needs this for iterative jobs, where unaligned checkpoints are otherwise refused; here it
        is recorded and changes nothing (a job with a loop and checkpoints is refused in this version:
        docs/api/iterations.md)."""
        self._config.set(Options.CHECKPOINTING_UNALIGNED_FORCED, bool(force_unaligned_checkpoints))
        return self

    def is_force_unaligned_checkpoints(self) -> bool:
        return self._config.get_bool(Options.CHECKPOINTING_UNALIGNED_FORCED)

    # Flink settings this runtime does not have: a clear error rather than silence.
    def _unsupported(self, name: str, why: str) -> None:
        raise NotImplementedError(f"CheckpointConfig.{name}: {why}")

    def enable_approximate_local_recovery(self, enabled: bool = True) -> "CheckpointConfig":
        if enabled:
            self._unsupported("enable_approximate_local_recovery",
                              "approximate local recovery is not supported; failed tasks restore from the "
                              "latest completed checkpoint (exactly once)")
        return self

    def is_approximate_local_recovery_enabled(self) -> bool:
        return False

    def set_force_checkpointing(self, force: bool) -> "CheckpointConfig":
        """Flink 1.x, for iterative jobs (checkpointed without guarantees there): forcing changes nothing
        here, where a job with a loop and checkpoints is refused in this version (docs/api/iterations.md)."""
        return self

    def is_force_checkpointing(self) -> bool:
        return False

    def set_prefer_checkpoint_for_recovery(self, prefer: bool) -> "CheckpointConfig":
        if prefer:
            self._unsupported("set_prefer_checkpoint_for_recovery",
                              "recovery always uses the latest completed checkpoint; savepoints never count for "
                              "failover (removed in Flink 1.15 for the same reason)")
        return self

    def is_prefer_checkpoint_for_recovery(self) -> bool:
        return False

    def set_checkpoint_storage(self, storage: Any) -> "CheckpointConfig":
        """Where checkpoints go: ``file:///dir``, a local path, ``s3://bucket/dir`` or ``memory://`` (job manager).
        A PyFlink storage object with a ``checkpoint_path`` (FileSystemCheckpointStorage) works too."""
        from ..checkpoint.storage import normalize_url

        path = getattr(storage, "checkpoint_path", storage)
        if not isinstance(path, str):
            raise TypeError(f"set_checkpoint_storage takes a URL such as file:///tmp/checkpoints or "
                            f"s3://bucket/checkpoints (execution.checkpointing.dir), got {storage!r}")
        self._config.set(Options.CHECKPOINTING_DIR, normalize_url(path))
        return self

    def set_checkpoint_storage_dir(self, checkpoint_path: str) -> "CheckpointConfig":
        """``set_checkpoint_storage`` of a path or URL (PyFlink's name)."""
        return self.set_checkpoint_storage(checkpoint_path)

    def set_incremental(self, incremental: bool) -> "CheckpointConfig":
        """RocksDB backend: upload only SST files no completed checkpoint holds yet."""
        self._config.set(Options.INCREMENTAL_CHECKPOINTS, bool(incremental))
        return self

    def is_incremental(self) -> bool:
        return self._config.get_bool(Options.INCREMENTAL_CHECKPOINTS)

    def get_checkpoint_storage(self) -> str:
        return str(self._config.get(Options.CHECKPOINTING_DIR))


__all__ = [
    "CheckpointConfig",
    "CheckpointingMode",
    "ExternalizedCheckpointCleanup",
    "ExternalizedCheckpointRetention",
    "to_millis",
]
