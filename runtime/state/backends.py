"""Which keyed state backend a task creates, from the job configuration (``state.backend.type``)."""

from __future__ import annotations

from typing import Any

from ..config import STATE_BACKENDS as BACKENDS
from ..config import ConfigError, Configuration, Options


def backend_type(config: Configuration) -> str:
    name = str(config.get(Options.STATE_BACKEND)).strip().lower()
    if name not in BACKENDS:
        raise ConfigError(f"configuration {Options.STATE_BACKEND}: unknown state backend {name!r}; "
                          f"available: {', '.join(BACKENDS)}")
    return name


def create_keyed_backend(config: Configuration, operator: str, max_parallelism: int, key_groups: range,
                         state_root: str | None) -> Any:
    """A new, empty keyed state backend for one operator subtask."""
    if backend_type(config) == "hashmap":
        from .heap import HashMapKeyedStateBackend  # the backends load where a task creates one

        return HashMapKeyedStateBackend(operator, max_parallelism, key_groups)
    from .rocksdb import RocksDBKeyedStateBackend, RocksDBOptions, default_local_dir

    options = RocksDBOptions(
        block_cache=config.get_bytes(Options.ROCKSDB_BLOCK_CACHE),
        write_buffer=config.get_bytes(Options.ROCKSDB_WRITE_BUFFER),
        threads=config.get_int(Options.ROCKSDB_THREADS),
        cache_size=max(1, config.get_int(Options.STATE_CACHE_SIZE)),
        cache_memory=max(1, config.get_bytes(Options.STATE_CACHE_MEMORY)),
    )
    return RocksDBKeyedStateBackend(
        operator, max_parallelism, key_groups, default_local_dir(config.get_string(Options.ROCKSDB_LOCAL_DIR)),
        options, incremental=config.get_bool(Options.INCREMENTAL_CHECKPOINTS), state_root=state_root)
