"""State backends and checkpoint storage as PyFlink names them: ``env.set_state_backend(HashMapStateBackend())``,
``env.get_checkpoint_config().set_checkpoint_storage(FileSystemCheckpointStorage("s3://bucket/dir"))``.

A backend object only says which backend to use; it is written into the job
configuration (``state.backend.type``) and each task creates its own. A checkpoint
storage object only says where checkpoints go (``execution.checkpointing.dir``).
Flink 1.x's combined backends (``MemoryStateBackend``, ``FsStateBackend``,
``RocksDBStateBackend``) set both, as in Flink.
"""

from __future__ import annotations

from typing import Any


class StateBackend:
    type_name = ""

    def settings(self) -> dict:
        """Configuration entries this backend object stands for."""
        return {"state.backend.type": self.type_name}

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class HashMapStateBackend(StateBackend):
    """Keyed state in Python dicts in the task's memory (the default); copy-on-write snapshots."""

    type_name = "hashmap"


class EmbeddedRocksDBStateBackend(StateBackend):
    """Keyed state in an embedded RocksDB per task on local disk: state larger than memory, and
    incremental checkpoints (only new SST files are uploaded) with ``enable_incremental_checkpointing``."""

    type_name = "rocksdb"

    def __init__(self, enable_incremental_checkpointing: bool | None = None):
        self.incremental = enable_incremental_checkpointing

    def settings(self) -> dict:
        out = super().settings()
        if self.incremental is not None:
            out["execution.checkpointing.incremental"] = bool(self.incremental)
        return out

    def is_incremental_checkpoints_enabled(self) -> bool:
        return bool(self.incremental)

    def __repr__(self) -> str:
        return f"EmbeddedRocksDBStateBackend(enable_incremental_checkpointing={self.incremental})"


class MemoryStateBackend(HashMapStateBackend):
    """Flink 1.x's (removed in 2.0): HashMap state, checkpoints kept by the job manager (``memory://``)
    unless ``checkpoint_path`` is given."""

    def __init__(self, checkpoint_path: str | None = None, savepoint_path: str | None = None,
                 max_state_size: int | None = None, using_asynchronous_snapshots: bool | None = None):
        self.checkpoint_path = checkpoint_path or "memory://"
        self.savepoint_path = savepoint_path

    def settings(self) -> dict:
        return {**super().settings(), **_storage_settings(self.checkpoint_path, self.savepoint_path)}


class FsStateBackend(HashMapStateBackend):
    """Flink 1.x's (removed in 2.0): HashMap state, checkpoints in a file system (``file://``, ``s3://``)."""

    def __init__(self, checkpoint_directory_uri: str, default_savepoint_directory_uri: str | None = None,
                 file_state_size_threshold: int | None = None, write_buffer_size: int | None = None,
                 using_asynchronous_snapshots: bool | None = None):
        self.checkpoint_path = checkpoint_directory_uri
        self.savepoint_path = default_savepoint_directory_uri

    def settings(self) -> dict:
        return {**super().settings(), **_storage_settings(self.checkpoint_path, self.savepoint_path)}


class RocksDBStateBackend(EmbeddedRocksDBStateBackend):
    """Flink 1.x's (removed in 2.0): RocksDB state, checkpoints under ``checkpoint_data_uri``."""

    def __init__(self, checkpoint_data_uri: str, enable_incremental_checkpointing: bool | None = None,
                 checkpoint_stream_backend: Any = None):
        super().__init__(enable_incremental_checkpointing)
        self.checkpoint_path = checkpoint_data_uri

    def settings(self) -> dict:
        return {**super().settings(), **_storage_settings(self.checkpoint_path, None)}


def _storage_settings(checkpoint_path: str | None, savepoint_path: str | None) -> dict:
    from ..checkpoint.storage import normalize_url
    from ..config import Options

    out = {}
    if checkpoint_path:
        out[Options.CHECKPOINTING_DIR] = normalize_url(checkpoint_path)
    if savepoint_path:
        out[Options.SAVEPOINT_DIR] = normalize_url(savepoint_path)
    return out


class CheckpointStorage:
    """Where checkpoints go (``execution.checkpointing.dir``), for ``set_checkpoint_storage``."""

    checkpoint_path: str = "memory://"

    def get_checkpoint_path(self) -> str | None:
        return self.checkpoint_path

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.checkpoint_path!r})"


class JobManagerCheckpointStorage(CheckpointStorage):
    """Checkpoints kept by the job manager (``memory://``: lost with the driver), or written to
    ``checkpoint_path`` when one is given (as Flink, which then persists them there)."""

    def __init__(self, checkpoint_path: str | None = None, max_state_size: int | None = None):
        self.checkpoint_path = checkpoint_path or "memory://"


class FileSystemCheckpointStorage(CheckpointStorage):
    """Checkpoints in a file system or object store: ``file:///dir``, a local path, ``s3://bucket/dir``."""

    def __init__(self, checkpoint_path: str, file_state_size_threshold: int | None = None,
                 write_buffer_size: int = -1):
        if not isinstance(checkpoint_path, str) or not checkpoint_path:
            raise ValueError(f"FileSystemCheckpointStorage needs a path or URL, got {checkpoint_path!r}")
        self.checkpoint_path = checkpoint_path


BY_NAME = {"hashmap": HashMapStateBackend, "rocksdb": EmbeddedRocksDBStateBackend}


def state_backend(value: "StateBackend | str") -> StateBackend:
    """A backend object from an object or its configuration name (``"hashmap"``, ``"rocksdb"``)."""
    if isinstance(value, StateBackend):
        return value
    if isinstance(value, str) and value.strip().lower() in BY_NAME:
        return BY_NAME[value.strip().lower()]()
    raise TypeError(f"set_state_backend needs HashMapStateBackend(), EmbeddedRocksDBStateBackend() or one of "
                    f"{sorted(BY_NAME)}, got {value!r}")


__all__ = ["CheckpointStorage", "EmbeddedRocksDBStateBackend", "FileSystemCheckpointStorage", "FsStateBackend",
           "HashMapStateBackend", "JobManagerCheckpointStorage", "MemoryStateBackend", "RocksDBStateBackend",
           "StateBackend", "state_backend"]
