"""The RocksDB state backend: keyed state in an embedded RocksDB (rocksdict) per operator subtask.

State larger than memory lives on local disk. Each state is one column family;
every key starts with its key group (``codec``), so one subtask's state is a
contiguous range and a rescale can cut it by key group.

Python pays per call into RocksDB (~1-3 us for a get plus a put here), so, as
PyFlink does with ``python.state.cache-size``, each state keeps a bounded
write-back cache of decoded entries keyed by the Python key: reads and updates
of cached keys never leave Python. The cache is bounded by entries and by an
estimate of its memory (``python.state.cache-memory``), so with the default a
state of ~1-2M small entries is served from Python, as from the heap backend,
and larger state from RocksDB. When a cache generation is full its dirty
entries go to RocksDB in one ``WriteBatch``; a snapshot writes every dirty
entry first. Mutable values are cached *encoded*, so changing an object
you read never changes state without ``update`` (RocksDB semantics, unlike the
heap backend).

Map state is not cached: each user key is its own RocksDB entry (as Flink's),
so ``put`` of one entry never rewrites the whole map.

Snapshots: ``snapshot`` (synchronous) writes dirty entries and creates a
RocksDB checkpoint, hard links to the immutable SST files; the snapshot writer
thread uploads it (``rocksdb_snapshot``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import uuid
from typing import Any, Iterable, Iterator

import numpy as np
from rocksdict import (AccessType, BlockBasedOptions, Cache, Checkpoint, DBCompressionType, Options, Rdict,
                       WriteBatch, WriteOptions)

from ..api import state as api_state
from . import codec, ttl
from .heap import KeyedStateBackend, _KeyedState
from ..keygroups import assign_key_groups, key_hash

_MISSING = object()
_ABSENT = object()  # cached "no value" (a delete when the key is dirty)
_SCALARS = frozenset({int, float, str, bool, bytes})
_TTL = ttl.TtlValue  # a TTL state's (value, timestamp): cached as is when its value is a scalar (immutable)
_CF_PREFIX = "s:"  # column family of state <name>; keeps user names away from RocksDB's "default"
_END_OF_KEYS = b"\xff" * 3  # above every key: keys start with a 2-byte key group
_OWNER_FILE = "OWNER"


class _Encoded:
    """A mutable value cached as its bytes: every read decodes a fresh copy."""

    __slots__ = ("data",)

    def __init__(self, data: bytes):
        self.data = data


def default_local_dir(configured: str | None) -> str:
    return configured or os.path.join(tempfile.gettempdir(), "streamjob-rocksdb")


# Measured: a cached int -> int entry (young dict slot, both objects, its dirty-set slot)
# costs ~140 bytes of RSS on CPython 3.11; half of it for each side of the entry.
_ENTRY_COST = 70

# Entries per write batch when the cache is written back (see RocksTable.flush).
_FLUSH_CHUNK = 4096


def _charge(obj: Any) -> int:
    t = type(obj)
    if t is _Encoded:
        return _ENTRY_COST + len(obj.data)
    if t is str or t is bytes:
        return _ENTRY_COST + len(obj)
    return _ENTRY_COST


class RocksDBOptions:
    """What each task's database is opened with (from the job configuration)."""

    def __init__(self, block_cache: int = 64 << 20, write_buffer: int = 32 << 20, threads: int = 2,
                 cache_size: int = 2_000_000, cache_memory: int = 256 << 20):
        self.block_cache = block_cache
        self.write_buffer = write_buffer
        self.threads = threads
        self.cache_size = cache_size  # entries per state
        self.cache_memory = cache_memory  # estimated bytes per state

    def db_options(self, cache: Cache) -> Options:
        o = self.column_options(cache)
        o.create_if_missing(True)
        o.create_missing_column_families(True)
        o.set_max_background_jobs(max(2, self.threads))
        return o

    def column_options(self, cache: Cache) -> Options:
        o = Options(raw_mode=True)
        table = BlockBasedOptions()
        table.set_block_cache(cache)
        table.set_bloom_filter(10, False)
        table.set_cache_index_and_filter_blocks(True)
        table.set_pin_l0_filter_and_index_blocks_in_cache(True)
        o.set_block_based_table_factory(table)
        o.set_write_buffer_size(self.write_buffer)
        o.set_max_write_buffer_number(2)
        # Small SST files: a compaction rewrites only the files whose key ranges overlap, so an
        # incremental checkpoint after it uploads a slice of the state, not all of it.
        o.set_target_file_size_base(8 << 20)
        o.set_max_bytes_for_level_base(64 << 20)
        o.set_level_compaction_dynamic_level_bytes(True)
        o.set_compression_type(DBCompressionType.lz4())
        return o


class RocksTable:
    """One state's column family behind a write-back cache of Python keys -> cached values.

    The cache has two generations (young, old) of up to half the cache's bounds each: a hit in
    the old one moves the entry to the young one; when the young one is full, dirty entries
    are written in one batch, the old generation is dropped and the young one becomes old.
    Keys used again within a generation survive, so a hot set stays cached (an LRU
    approximation that costs nothing on a hit in the young generation).

    A generation is full at ``cache_size / 2`` entries or ``cache_memory / 2`` estimated
    bytes, whichever comes first. The estimate is charged when a key enters the
    generation: a fixed per-entry cost (dict slot, key and value objects, dirty-set slot,
    measured) plus the length of str/bytes/encoded values; growing a cached value in place
    is not re-charged, so the bound is approximate, not exact."""

    __slots__ = ("backend", "name", "kind", "cf", "handle", "cache", "old", "dirty", "limit", "raw",
                 "bytes", "byte_limit")

    def __init__(self, backend: "RocksDBKeyedStateBackend", name: str, kind: str):
        self.backend = backend
        self.name = name
        self.kind = kind
        self.cache: dict[Any, Any] = {}  # young generation
        self.old: dict[Any, Any] = {}
        self.dirty: set[Any] = set()
        self.limit = max(1, backend.options.cache_size // 2)
        self.byte_limit = max(1, backend.options.cache_memory // 2)
        self.bytes = 0  # estimated size of the young generation
        self.raw = ttl.base_kind(kind) == "list"  # list values are cached as their framed bytes
        self.attach()

    def attach(self) -> None:
        self.cf, self.handle = self.backend.column_family(self.name)

    def evict_all(self) -> None:
        """Write dirty entries and empty the cache (the next access of every key reads RocksDB)."""
        self.flush()
        self.cache, self.old, self.bytes = {}, {}, 0

    # -- single keys --------------------------------------------------------------------
    def _lookup(self, key: Any) -> Any:
        """A miss in the young generation: promote from the old one, else read RocksDB."""
        v = self.old.pop(key, _MISSING)
        if v is not _MISSING:
            self._admit(key, v)
            return v
        raw = self.cf.get(self.backend.key_bytes(key))
        if raw is None:
            v = _ABSENT
        elif self.raw:
            v = raw
        else:
            v = codec.decode_value(raw)
            if type(v) not in _SCALARS and not (type(v) is _TTL and type(v[0]) in _SCALARS):
                v = _Encoded(raw)
        self._admit(key, v)
        return v

    def _admit(self, key: Any, cached: Any) -> None:
        cache = self.cache
        if key not in cache:
            if len(cache) >= self.limit or self.bytes >= self.byte_limit:
                self.flush()
                self.old = cache
                cache = self.cache = {}
                self.bytes = 0
            self.bytes += _charge(key) + _charge(cached)
        cache[key] = cached

    def get(self, key: Any, default: Any = None) -> Any:
        v = self.cache.get(key, _MISSING)
        if v is _MISSING:
            v = self._lookup(key)
        if v is _ABSENT:
            return default
        if type(v) is _Encoded:
            return codec.decode_value(v.data)
        return v

    def _peek(self, key: Any) -> Any:
        """The cached or stored value from another thread (queryable state): never admits, promotes or
        evicts. A flush writes RocksDB before it drops the cache, so a key is always in one of them."""
        v = self.cache.get(key, _MISSING)
        if v is _MISSING:
            v = self.old.get(key, _MISSING)
        if v is _MISSING:
            raw = self.cf.get(self.backend.key_bytes(key))
            v = _ABSENT if raw is None else raw if self.raw else _Encoded(raw)
        return v

    def peek(self, key: Any, default: Any = None) -> Any:
        v = self._peek(key)
        if v is _ABSENT:
            return default
        return codec.decode_value(v.data) if type(v) is _Encoded else v

    def peek_raw(self, key: Any) -> bytes | None:
        v = self._peek(key)
        return None if v is _ABSENT else v

    def put(self, key: Any, value: Any) -> None:
        if self.old:
            self.old.pop(key, None)
        t = type(value)
        cached = value if t in _SCALARS or (t is _TTL and type(value[0]) in _SCALARS) else _Encoded(codec.encode_value(value))
        self._admit(key, cached)
        self.dirty.add(key)

    def remove(self, key: Any) -> None:
        if self.old:
            self.old.pop(key, None)
        self._admit(key, _ABSENT)
        self.dirty.add(key)

    def get_raw(self, key: Any) -> bytes | None:
        v = self.cache.get(key, _MISSING)
        if v is _MISSING:
            v = self._lookup(key)
        return None if v is _ABSENT else v

    def put_raw(self, key: Any, data: bytes) -> None:
        if self.old:
            self.old.pop(key, None)
        self._admit(key, data)
        self.dirty.add(key)

    # -- batches (built-in rolling aggregations) -------------------------------------------------
    def get_many(self, keys: list) -> list:
        """Values of ``keys`` (None when absent), with one multi-get for the uncached ones."""
        cache, old = self.cache, self.old
        out = []
        for k in keys:
            v = cache.get(k, _MISSING)
            if v is _MISSING:
                v = old.pop(k, _MISSING)
                if v is not _MISSING:
                    self._admit(k, v)
            out.append(v)
        missing = [i for i, v in enumerate(out) if v is _MISSING]
        if missing:
            raws = self.cf.get(self.backend.keys_bytes([keys[i] for i in missing]))
            for i, raw in zip(missing, raws):
                v = _ABSENT if raw is None else codec.decode_value(raw)
                out[i] = v
                self._admit(keys[i], v)
        return [None if v is _ABSENT else v for v in out]

    def put_many(self, keys: list, values: list) -> None:
        dirty = self.dirty
        for k, v in zip(keys, values):
            if self.old:
                self.old.pop(k, None)
            self._admit(k, v)
            dirty.add(k)  # per key: an _admit that fills the generation flushes the earlier ones

    def items(self) -> Iterator[tuple[Any, Any]]:
        """Every entry of a value table (restore-time scans, e.g. rebuilding the timer index)."""
        self.flush()
        it = self.cf.iter()
        it.seek_to_first()
        while it.valid():
            yield codec.decode_key(it.key()[2:]), codec.decode_value(it.value())
            it.next()

    def keys(self) -> list:
        """Every key with an entry in this state, once each (``apply_to_keyed_state`` of a
        broadcast function visits them). A map state holds one entry per (key, user key)."""
        self.flush()
        out: list = []
        last = None
        it = self.cf.iter()
        it.seek_to_first()
        while it.valid():
            raw = it.key()[2:]
            kb = codec.split_map_key(raw)[0] if ttl.base_kind(self.kind) == "map" else raw
            if kb != last:  # the entries of one key are adjacent
                out.append(codec.decode_key(kb))
                last = kb
            it.next()
        return out

    # -- to RocksDB ----------------------------------------------------------------------------
    def flush(self) -> None:
        """Write every dirty entry, ``_FLUSH_CHUNK`` entries per batch: a write batch is one C call that
        holds the GIL, and a queryable lookup is answered on this thread between two of them (one batch of
        180k entries held it ~150 ms, measured; a chunk holds it a few ms). No WAL, so the batches need not
        be one: a failure restores the last checkpoint whatever was written."""
        if not self.dirty:
            return
        dirty = list(self.dirty)
        cache, old, handle = self.cache, self.old, self.handle
        write, keys_bytes, encode, raw = self.backend.db.write, self.backend.keys_bytes, codec.encode_value, self.raw
        for start in range(0, len(dirty), _FLUSH_CHUNK):
            chunk = dirty[start:start + _FLUSH_CHUNK]
            batch = WriteBatch(raw_mode=True)
            for k, kb in zip(chunk, keys_bytes(chunk)):
                v = cache.get(k, _MISSING)
                if v is _MISSING:
                    v = old[k]
                if v is _ABSENT:
                    batch.delete(kb, handle)
                elif type(v) is _Encoded:
                    batch.put(kb, v.data, handle)
                elif raw:
                    batch.put(kb, v, handle)
                else:
                    batch.put(kb, encode(v), handle)
            write(batch)
        self.dirty.clear()


class RocksListState(_KeyedState):
    """Framed bytes per key: ``add`` appends one frame, never decodes the list."""

    __slots__ = ()

    def get(self) -> list:
        raw = self.table.get_raw(self.backend.current_key)
        return codec.decode_list(raw) if raw else []

    def add(self, value: Any) -> None:
        if value is None:
            raise ValueError(f"list state {self.name!r}: cannot add None")
        key = self.backend.current_key
        self.table.put_raw(key, (self.table.get_raw(key) or b"") + codec.frame(value))

    def add_all(self, values: Iterable[Any]) -> None:
        values = list(values)
        if any(v is None for v in values):
            raise ValueError(f"list state {self.name!r}: cannot add None")
        if values:
            key = self.backend.current_key
            self.table.put_raw(key, (self.table.get_raw(key) or b"") + codec.encode_list(values))

    def update(self, values: Iterable[Any] | None) -> None:
        values = list(values or [])
        if any(v is None for v in values):
            raise ValueError(f"list state {self.name!r}: cannot add None")
        if values:
            self.table.put_raw(self.backend.current_key, codec.encode_list(values))
        else:
            self.clear()


class RocksMapState(api_state.MapProtocol):
    """One RocksDB entry per (key, user key); iteration is a prefix scan."""

    __slots__ = ("backend", "name", "table")

    def __init__(self, backend: "RocksDBKeyedStateBackend", table: RocksTable, name: str):
        self.backend = backend
        self.name = name
        # The table's column family, looked up on each call rather than kept here: the backend
        # drops its handles before closing the database (a handle freed after the close stalls ~1 s).
        self.table = table

    def _prefix(self) -> bytes:
        kb = self.backend.key_bytes(self.backend.current_key)
        return codec.map_prefix(kb[:2], kb[2:])

    def _entries(self) -> Iterator[tuple[bytes, bytes]]:
        prefix = self._prefix()
        it = self.table.cf.iter()
        it.seek(prefix)
        n = len(prefix)
        while it.valid():
            k = it.key()
            if k[:n] != prefix:
                break
            yield k[n:], it.value()
            it.next()

    def get(self, key: Any) -> Any:
        raw = self.table.cf.get(self._prefix() + codec.encode_key(key))
        return None if raw is None else codec.decode_value(raw)

    def put(self, key: Any, value: Any) -> None:
        self.table.cf.put(self._prefix() + codec.encode_key(key), codec.encode_value(value))

    def put_all(self, entries: dict) -> None:
        prefix = self._prefix()
        batch = WriteBatch(raw_mode=True)
        for k, v in entries.items():
            batch.put(prefix + codec.encode_key(k), codec.encode_value(v), self.table.handle)
        self.backend.db.write(batch)

    def contains(self, key: Any) -> bool:
        return self.table.cf.get(self._prefix() + codec.encode_key(key)) is not None

    def remove(self, key: Any) -> None:
        self.table.cf.delete(self._prefix() + codec.encode_key(key))

    def keys(self) -> list:
        return [codec.decode_key(k) for k, _ in self._entries()]

    def values(self) -> list:
        return [codec.decode_value(v) for _, v in self._entries()]

    def items(self) -> list:
        return [(codec.decode_key(k), codec.decode_value(v)) for k, v in self._entries()]

    def is_empty(self) -> bool:
        return next(self._entries(), None) is None

    def clear(self) -> None:
        batch = WriteBatch(raw_mode=True)
        prefix = self._prefix()
        for k, _ in self._entries():
            batch.delete(prefix + k, self.table.handle)
        self.backend.db.write(batch)

    def __iter__(self):
        return iter(self.keys())


class RocksTtlCleanup:
    """Background cleanup of a TTL state on RocksDB (``cleanup_in_rocksdb_compact_filter``, the
    default there). Flink does it in a RocksDB compaction filter; rocksdict exposes none to
    Python, so it is done as Flink's incremental cleanup is on the heap: every ``EVERY`` accesses
    of the state, the next ``EVERY`` entries of its column family are checked (a cursor going
    round the key range, resumed by key) and the expired ones deleted. Batches, not a few entries
    per access, because each batch opens a RocksDB iterator (microseconds).

    Entries whose key is in the state's cache are skipped: the cache may hold a newer value than
    RocksDB, and they are checked when read. Map entries are not cached, one per user key."""

    EVERY = 128

    __slots__ = ("table", "kind", "policy", "clock", "every", "resume")

    def __init__(self, table: RocksTable, kind: str, policy: ttl.TtlPolicy, clock: Any):
        self.table = table
        self.kind = ttl.base_kind(kind)
        self.policy = policy
        self.clock = clock
        self.every = self.EVERY  # accesses between two batches (the states count them down)
        self.resume: bytes | None = None  # RocksDB key the next batch starts at (None: the first)

    def run(self, n: int | None = None) -> int:
        """Check up to ``n`` entries (``every`` by default); the number deleted or rewritten."""
        n = self.every if n is None else n
        table = self.table
        limit = self.clock() - self.policy.ttl
        cache, old, handle, kind = table.cache, table.old, table.handle, self.kind
        it = table.cf.iter()
        if self.resume is None:
            it.seek_to_first()
        else:
            it.seek(self.resume)
        batch = WriteBatch(raw_mode=True)
        changed = checked = 0
        while it.valid() and checked < n:
            k, v = it.key(), it.value()
            it.next()
            checked += 1
            if kind == "map":
                if codec.decode_value(v)[1] <= limit:
                    batch.delete(k, handle)
                    changed += 1
                continue
            key = codec.decode_key(k[2:])
            if key in cache or key in old:
                continue
            if kind == "list":
                pairs = codec.decode_list(v)
                alive = [p for p in pairs if p[1] > limit]
                if len(alive) < len(pairs):
                    if alive:
                        batch.put(k, codec.encode_list(alive), handle)
                    else:
                        batch.delete(k, handle)
                    changed += 1
            elif codec.decode_value(v)[1] <= limit:
                batch.delete(k, handle)
                changed += 1
        self.resume = it.key() if it.valid() else None
        if changed:
            table.backend.db.write(batch)
        return changed


class RocksDBSnapshot:
    """What the synchronous phase made: a RocksDB checkpoint (hard links) in a local directory."""

    def __init__(self, backend: "RocksDBKeyedStateBackend", checkpoint_id: int, directory: str):
        self.backend = backend
        self.checkpoint_id = checkpoint_id
        self.directory = directory
        self.states = dict(backend.kinds)
        self.cfs = {name: backend.cf_of.get(name, _CF_PREFIX + name) for name in self.states}
        self.key_groups = backend.key_groups
        self.incremental = backend.incremental
        # SST files completed checkpoints already hold: the base an incremental snapshot reuses.
        self.base = dict(backend.uploaded.get(backend.last_completed, {})) if backend.last_completed is not None else {}
        # cleanup_full_snapshot: state -> (ttl, now); a canonical (full) write leaves expired values out
        now = backend.ttl_clock()
        self.ttl_drop = {name: (p.ttl, now) for name, p in backend.ttl_policies.items() if p.in_full_snapshot}

    def discard(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


class RocksDBKeyedStateBackend(KeyedStateBackend):
    """All keyed state of one operator subtask, in one RocksDB instance on local disk."""

    list_state = RocksListState
    map_state = RocksMapState

    def __init__(self, operator: str, max_parallelism: int, key_groups: range, local_dir: str,
                 options: RocksDBOptions | None = None, incremental: bool = False, state_root: str | None = None):
        super().__init__(operator, max_parallelism, key_groups)
        self.options = options or RocksDBOptions()
        self.incremental = incremental
        self.state_root = state_root  # this job's checkpoint directory: only its files may be reused
        self.column_families: set[str] = set()
        # state name -> its column family. Usually "s:<name>"; a state created after another was
        # dropped reuses the dropped one's (emptied) column family instead: creating or dropping one
        # rewrites RocksDB's OPTIONS file and syncs its MANIFEST, 5-20 ms each (measured here, growing
        # with the number of column families), and the columnar window operator makes and drops
        # tables per window.
        self.cf_of: dict[str, str] = {}
        self.free_cfs: list[str] = []
        self._cf_objects: dict[str, tuple[Rdict, Any]] = {}
        self._prefixes = [kg.to_bytes(2, "big") for kg in range(max_parallelism)]
        self._memo_key: Any = _MISSING
        self._memo_bytes = b""
        # incremental checkpoints: checkpoint id -> {local SST name: {"file", "size"}} uploaded for it
        self.uploaded: dict[int, dict[str, dict]] = {}
        self.last_completed: int | None = None
        self.block_cache = Cache(self.options.block_cache)
        sweep_stale(local_dir)
        self.home = os.path.join(local_dir, f"{_safe(operator)}-{uuid.uuid4().hex[:12]}")
        os.makedirs(self.home)
        # Written whole under a temporary name, then renamed: another task's sweep_stale (every
        # subtask starting in the same local directory sweeps it) must never read it empty.
        pending = os.path.join(self.home, _OWNER_FILE + ".tmp")
        with open(pending, "w") as f:
            f.write(str(os.getpid()))
        os.replace(pending, os.path.join(self.home, _OWNER_FILE))
        self.db_path = os.path.join(self.home, "db")
        self._open(self.db_path, [])

    def column_family(self, name: str) -> tuple[Rdict, Any]:
        """(column family, its handle) of state ``name``, created or taken from the free ones on first use."""
        cf = self.cf_of.get(name)
        if cf is None:
            if self.free_cfs:
                cf = self.free_cfs.pop()
            else:
                cf = _CF_PREFIX + name
                if cf in self.column_families:  # the name of a reused one: take a fresh name
                    cf = f"{_CF_PREFIX}{name}#{uuid.uuid4().hex[:8]}"
                self.db.create_column_family(cf, self.options.column_options(self.block_cache))
                self.column_families.add(cf)
            self.cf_of[name] = cf
        opened = self._cf_objects.get(cf)
        if opened is None:
            # Kept for the database's lifetime: freeing rocksdict's column-family object costs ~15 ms
            # (measured here), so a dropped table must not take it with it.
            opened = self._cf_objects[cf] = (self.db.get_column_family(cf), self.db.get_column_family_handle(cf))
        return opened

    def _open(self, path: str, column_families: list[str]) -> None:
        opts = self.options.db_options(self.block_cache)
        cfs = {cf: self.options.column_options(self.block_cache) for cf in column_families}
        self.db = Rdict(path, opts, column_families=cfs or None)
        wo = WriteOptions()
        wo.disable_wal = True  # durability comes from checkpoints, as in Flink
        self.db.set_write_options(wo)
        self.column_families = set(column_families)
        for table in self.tables.values():
            table.attach()

    # -- keys ---------------------------------------------------------------------------------
    def key_bytes(self, key: Any) -> bytes:
        if key is self._memo_key:
            return self._memo_bytes
        kb = self._prefixes[key_hash(key) % self.max_parallelism] + codec.encode_key(key)
        self._memo_key, self._memo_bytes = key, kb
        return kb

    def keys_bytes(self, keys: list) -> list[bytes]:
        groups = assign_key_groups(keys, self.max_parallelism).tolist()
        prefixes, encode = self._prefixes, codec.encode_key
        return [prefixes[g] + encode(k) for g, k in zip(groups, keys)]

    # -- states -------------------------------------------------------------------------------
    def new_table(self, name: str, kind: str) -> RocksTable:
        return RocksTable(self, name, kind)

    def ttl_cleanup(self, name: str, table: Any, policy: ttl.TtlPolicy) -> Any:
        if not policy.rocksdb_cleanup:
            return None
        cleanup = self.ttl_cleanups.get(name)
        if cleanup is None or cleanup.table is not table:
            cleanup = self.ttl_cleanups[name] = RocksTtlCleanup(table, self.kinds[name], policy, lambda: self.ttl_clock())
        return cleanup

    def drop_table(self, name: str) -> None:
        """Forget a state entirely: its column family goes (checkpoints already hold their hard links)."""
        table = self.tables.pop(name, None)
        self.kinds.pop(name, None)
        self.ttl_policies.pop(name, None)
        self.ttl_cleanups.pop(name, None)
        cf = self.cf_of.pop(name, None)
        if table is not None and cf is not None:
            # emptied with one range tombstone and kept for the next new state (see cf_of)
            wb = WriteBatch(raw_mode=True)  # through the database's write options (no WAL): ~0.01 ms, not ~7
            wb.delete_range(b"", _END_OF_KEYS, table.handle)
            self.db.write(wb)
            table.cf = table.handle = None
            self.free_cfs.append(cf)

    # -- snapshots ------------------------------------------------------------------------------
    def snapshot(self, checkpoint_id: int, full: bool = False) -> RocksDBSnapshot:
        """Synchronous phase: dirty cache entries into RocksDB, then a checkpoint of hard links.
        ``full``: canonical, whatever the incremental setting (savepoints)."""
        for table in self.tables.values():
            table.flush()
        self._flush_memtables()
        directory = os.path.join(self.home, f"chk-{checkpoint_id}-{uuid.uuid4().hex[:6]}")
        Checkpoint(self.db).create_checkpoint(directory)  # hard links (it would flush what is left first)
        snap = RocksDBSnapshot(self, checkpoint_id, directory)
        snap.incremental = snap.incremental and not full
        return snap

    def _flush_memtables(self, patience: float = 30.0) -> None:
        """The memtables to SST files by RocksDB's background threads while this thread waits in
        ``time.sleep``: ``create_checkpoint`` flushes them itself but holds the GIL all along (60-100 ms
        at 180k updates, measured), and this thread answers the subtask's queryable lookups meanwhile.
        Nothing writes while it waits (the task is in its synchronous phase), so what is flushed is the
        state at the barrier. After ``patience`` s (a stalled flush), ``create_checkpoint`` does the rest."""
        cfs = [cf for cf, _handle in self._cf_objects.values()]
        for cf in cfs:
            cf.flush(False)
        deadline = time.monotonic() + patience
        while time.monotonic() < deadline and any(
                cf.property_int_value("rocksdb.num-immutable-mem-table")
                or cf.property_int_value("rocksdb.mem-table-flush-pending") for cf in cfs):
            time.sleep(0.001)

    def thaw(self) -> None:
        pass  # the working database never stopped; the snapshot writer removes the checkpoint directory

    def record_upload(self, checkpoint_id: int, files: dict[str, dict]) -> None:
        self.uploaded[checkpoint_id] = files

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        if checkpoint_id in self.uploaded:
            self.last_completed = checkpoint_id
            for n in [n for n in self.uploaded if n < checkpoint_id]:
                del self.uploaded[n]

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        if checkpoint_id != self.last_completed:
            self.uploaded.pop(checkpoint_id, None)

    # -- restore ----------------------------------------------------------------------------------
    def adopt(self, directory: str, states: dict[str, str], cfs: dict[str, str], checkpoint_id: int,
              files: dict[str, dict], reusable: bool) -> None:
        """Make a downloaded checkpoint (same key groups) the working database; before processing starts.
        ``cfs``: state -> column family in it; its other (emptied) column families become free ones."""
        self._release_column_families()
        self.db.close()
        shutil.rmtree(self.db_path, ignore_errors=True)
        os.replace(directory, self.db_path)
        for name, kind in states.items():
            self.kinds.setdefault(name, kind)
        present = Rdict.list_cf(self.db_path)  # RocksDB opens a database only with all its column families
        self.cf_of = {name: cfs[name] for name in states}
        mapped = set(self.cf_of.values())
        self.free_cfs = [cf for cf in present if cf.startswith(_CF_PREFIX) and cf not in mapped]
        self._open(self.db_path, present)
        for name, kind in states.items():
            self.table(name, kind)
        if reusable:
            self.uploaded = {checkpoint_id: dict(files)}
            self.last_completed = checkpoint_id

    def clip(self) -> None:
        """Delete every entry outside this subtask's key groups (an adopted database of another range, at a
        rescale): range tombstones, as Flink's RocksDB restore clips its base database, instead of copying
        the entries kept one by one."""
        start, stop = self.key_groups.start, self.key_groups.stop
        for name in list(self.cf_of):
            cf = self.column_family(name)[0]
            if start > 0:
                cf.delete_range(b"", start.to_bytes(2, "big"))
            if stop < 1 << 16:
                cf.delete_range(stop.to_bytes(2, "big"), b"\xff" * 3)

    def copy_range(self, source: Rdict, states: dict[str, str], cfs: dict[str, str]) -> None:
        """Copy the entries of this subtask's key groups from another database (rescaling)."""
        start = self.key_groups.start.to_bytes(2, "big")
        stop = self.key_groups.stop
        for name, kind in states.items():
            table = self.table(name, kind)
            for batch in _range_batches(source.get_column_family(cfs[name]), start, stop):
                wb = WriteBatch(raw_mode=True)
                for k, v in batch:
                    wb.put(k, v, table.handle)
                self.db.write(wb)

    def restore_chunk(self, name: str, kind: str, chunk: Any) -> None:
        """Canonical chunk (one key group of one state, as the heap backend writes it) -> RocksDB."""
        table = self.table(name, kind)
        wb = WriteBatch(raw_mode=True)
        h = table.handle
        base = ttl.base_kind(kind)
        # A TTL state's entries arrive as plain (value, timestamp) tuples: stored as TtlValue (compact)
        wrap = (lambda p: ttl.TtlValue(p)) if ttl.is_ttl_kind(kind) else (lambda v: v)
        if kind == "accumulators":
            keys, values = chunk  # keys: a list, or an int64 array (columnar chunks): as Python ints
            keys = keys.tolist() if isinstance(keys, np.ndarray) else list(keys)
            for k, v in zip(self.keys_bytes(keys), np.asarray(values).tolist()):
                wb.put(k, codec.encode_value(v), h)
        elif base == "map":
            keys = list(chunk)
            for key, kb in zip(keys, self.keys_bytes(keys)):
                prefix = codec.map_prefix(kb[:2], kb[2:])
                for uk, v in chunk[key].items():
                    wb.put(prefix + codec.encode_key(uk), codec.encode_value(wrap(v)), h)
        elif base == "list":
            keys = list(chunk)
            for key, kb in zip(keys, self.keys_bytes(keys)):
                wb.put(kb, codec.encode_list([wrap(v) for v in chunk[key]]), h)
        else:
            keys = list(chunk)
            for key, kb in zip(keys, self.keys_bytes(keys)):
                wb.put(kb, codec.encode_value(wrap(chunk[key])), h)
        self.db.write(wb)

    def _release_column_families(self) -> None:
        """Drop the tables' column-family handles before the database closes: one dropped after the
        close blocks for ~1 s (measured here, rocksdict 0.3.x), in whatever code happens to free it."""
        for table in self.tables.values():
            table.cf = table.handle = None
        self._cf_objects.clear()

    def dispose(self) -> None:
        self._release_column_families()
        try:
            self.db.close()
        except Exception:  # noqa: BLE001 - already closed
            pass
        shutil.rmtree(self.home, ignore_errors=True)


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:60]


def _range_batches(cf: Rdict, start: bytes, stop_group: int, size: int = 4096) -> Iterator[list[tuple[bytes, bytes]]]:
    it = cf.iter()
    it.seek(start)
    batch: list[tuple[bytes, bytes]] = []
    while it.valid():
        k = it.key()
        if int.from_bytes(k[:2], "big") >= stop_group:
            break
        batch.append((k, it.value()))
        if len(batch) >= size:
            yield batch
            batch = []
        it.next()
    if batch:
        yield batch


def column_families_of(states: Iterable[str], recorded: dict[str, str] | None) -> dict[str, str]:
    """state -> column family of a snapshot; snapshots without the map (written before column families
    were reused) name each one after its state."""
    recorded = recorded or {}
    return {n: recorded.get(n, _CF_PREFIX + n) for n in states}


def open_read_only(directory: str, cfs: dict[str, str]) -> Rdict:
    """``cfs``: state -> column family; read-only RocksDB may open a subset of the column families."""
    families = {cf: Options(raw_mode=True) for cf in cfs.values()}
    return Rdict(directory, Options(raw_mode=True), column_families=families or None,
                 access_type=AccessType.read_only())


def canonical_chunks(db: Rdict, states: dict[str, str], cfs: dict[str, str], key_groups: range,
                     ttl_drop: dict[str, tuple[int, int]] | None = None) -> Iterator[tuple[str, str, int, Any]]:
    """(state, kind, key group, chunk) in the heap backend's format, for savepoint-style full snapshots
    and restores into another backend or parallelism. Reads a checkpoint opened read-only, never the
    live database (rocksdict 0.3.29's ``snapshot().items()`` reads live data). ``ttl_drop``: state ->
    (ttl, now) of TTL states whose expired values a full snapshot leaves out (cleanup_full_snapshot)."""
    start = key_groups.start.to_bytes(2, "big")
    for name, kind in states.items():
        cf = db.get_column_family(cfs[name])
        base = ttl.base_kind(kind)
        drop = (ttl_drop or {}).get(name)
        group, chunk = -1, None
        for batch in _range_batches(cf, start, key_groups.stop):
            for k, v in batch:
                g = int.from_bytes(k[:2], "big")
                if g != group:
                    if chunk:
                        yield from _finish(name, kind, group, chunk, drop)
                    group, chunk = g, ([], []) if kind == "accumulators" else {}
                if base == "map":
                    kb, ub = codec.split_map_key(k[2:])
                    chunk.setdefault(codec.decode_key(kb), {})[codec.decode_key(ub)] = codec.decode_value(v)
                elif base == "list":
                    chunk[codec.decode_key(k[2:])] = codec.decode_list(v)
                elif kind == "accumulators":
                    chunk[0].append(codec.decode_key(k[2:]))
                    chunk[1].append(codec.decode_value(v))
                else:
                    chunk[codec.decode_key(k[2:])] = codec.decode_value(v)
        if chunk:
            yield from _finish(name, kind, group, chunk, drop)


def _finish(name: str, kind: str, group: int, chunk: Any, drop: tuple[int, int] | None,
            ) -> Iterator[tuple[str, str, int, Any]]:
    if kind == "accumulators":
        keys, values = chunk
        chunk = keys, np.asarray(values)
    elif drop is not None:
        chunk = ttl.drop_expired(kind, chunk, *drop)
        if not chunk:
            return
    yield name, kind, group, chunk


def sweep_stale(local_dir: str) -> None:
    """Remove working directories of task processes that died without cleaning up (SIGKILL)."""
    import psutil

    try:
        entries = os.listdir(local_dir)
    except FileNotFoundError:
        os.makedirs(local_dir, exist_ok=True)
        return
    for entry in entries:
        owner = os.path.join(local_dir, entry, _OWNER_FILE)
        try:
            with open(owner) as f:
                pid = int(f.read().strip())
        except (OSError, ValueError):
            continue  # no owner (yet): a task may be creating it right now
        # (An empty owner read as pid 0, which psutil says does not exist: a task starting beside
        # another lost its new directory to the other's sweep.)
        if 0 < pid != os.getpid() and not psutil.pid_exists(pid):
            shutil.rmtree(os.path.join(local_dir, entry), ignore_errors=True)


api_state.ListState.register(RocksListState)  # PyFlink's state interfaces (see heap.py)
api_state.MapState.register(RocksMapState)
