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

    def set_checkpoint_interval(self, interval_ms: Any) -> "CheckpointConfig":
        ms = to_millis(interval_ms, "checkpoint interval")
        if ms < 10:
            raise ValueError(f"checkpoint interval must be at least 10 ms, got {ms}")
        self._config.set(Options.CHECKPOINTING_INTERVAL, ms)
        return self

    def get_checkpointing_mode(self) -> CheckpointingMode:
        return CheckpointingMode(str(self._config.get(Options.CHECKPOINTING_MODE)).upper())

    def set_checkpointing_mode(self, mode: CheckpointingMode | str) -> "CheckpointConfig":
        self._config.set(Options.CHECKPOINTING_MODE, CheckpointingMode(mode if isinstance(mode, str) else mode.value).value)
        return self

    # limits
    def get_checkpoint_timeout(self) -> int:
        return self._config.get_duration_ms(Options.CHECKPOINTING_TIMEOUT)

    def set_checkpoint_timeout(self, timeout_ms: Any) -> "CheckpointConfig":
        ms = to_millis(timeout_ms, "checkpoint timeout")
        if ms < 1:
            raise ValueError("checkpoint timeout must be > 0 ms")
        self._config.set(Options.CHECKPOINTING_TIMEOUT, ms)
        return self

    def get_min_pause_between_checkpoints(self) -> int:
        return self._config.get_duration_ms(Options.CHECKPOINTING_MIN_PAUSE)

    def set_min_pause_between_checkpoints(self, min_pause_ms: Any) -> "CheckpointConfig":
        self._config.set(Options.CHECKPOINTING_MIN_PAUSE, to_millis(min_pause_ms, "min pause between checkpoints"))
        return self

    def get_max_concurrent_checkpoints(self) -> int:
        return self._config.get_int(Options.CHECKPOINTING_MAX_CONCURRENT)

    def set_max_concurrent_checkpoints(self, n: int) -> "CheckpointConfig":
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"max concurrent checkpoints must be a positive int, got {n!r}")
        self._config.set(Options.CHECKPOINTING_MAX_CONCURRENT, n)
        return self

    def get_tolerable_checkpoint_failure_number(self) -> int:
        return self._config.get_int(Options.CHECKPOINTING_TOLERABLE_FAILURES)

    def set_tolerable_checkpoint_failure_number(self, n: int) -> "CheckpointConfig":
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

    def set_externalized_checkpoint_retention(self, retention: ExternalizedCheckpointRetention | str) -> "CheckpointConfig":
        value = retention if isinstance(retention, str) else retention.value
        self._config.set(Options.CHECKPOINTING_RETENTION, ExternalizedCheckpointRetention(value).value)
        return self

    enable_externalized_checkpoints = set_externalized_checkpoint_retention  # Flink 1.x name

    def set_checkpoint_storage(self, storage: str) -> "CheckpointConfig":
        """Where checkpoints go: ``file:///dir``, a local path, ``s3://bucket/dir`` or ``memory://`` (job manager)."""
        from ..checkpoint.storage import normalize_url

        self._config.set(Options.CHECKPOINTING_DIR, normalize_url(storage))
        return self

    set_checkpoint_storage_dir = set_checkpoint_storage

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
