"""State backends as PyFlink names them: ``env.set_state_backend(HashMapStateBackend())``.

A backend object only says which backend to use; it is written into the job
configuration (``state.backend.type``) and each task creates its own.
"""

from __future__ import annotations


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


BY_NAME = {"hashmap": HashMapStateBackend, "rocksdb": EmbeddedRocksDBStateBackend}


def state_backend(value: "StateBackend | str") -> StateBackend:
    """A backend object from an object or its configuration name (``"hashmap"``, ``"rocksdb"``)."""
    if isinstance(value, StateBackend):
        return value
    if isinstance(value, str) and value.strip().lower() in BY_NAME:
        return BY_NAME[value.strip().lower()]()
    raise TypeError(f"set_state_backend needs HashMapStateBackend(), EmbeddedRocksDBStateBackend() or one of "
                    f"{sorted(BY_NAME)}, got {value!r}")


__all__ = ["EmbeddedRocksDBStateBackend", "HashMapStateBackend", "StateBackend", "state_backend"]
