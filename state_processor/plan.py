"""From a savepoint's ``_metadata`` to what there is to read, and how to split the reading: pure.

``_metadata`` names every operator (by uid) and, per subtask, its state handle with the index of
what is inside (``runtime/checkpoint/metadata.py``): keyed state per state and key group (heap and
canonical snapshots) or a native RocksDB database (incremental checkpoints), and operator state.
One ``Split`` is one subtask's handle: one Spark task reads it. Nothing here reads a state file.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from streamjob.runtime.checkpoint.metadata import CheckpointMetadata
from streamjob.runtime.keygroups import key_group_range

NATIVE = "rocksdb"  # rocksdb_snapshot.NATIVE (not imported: that module needs rocksdict)


class StateNotFoundError(KeyError):
    """No such operator uid or state name in the savepoint; the message lists what there is."""

    def __str__(self) -> str:  # KeyError quotes its message; this one is a sentence
        return str(self.args[0]) if self.args else ""


@dataclass(frozen=True)
class Split:
    """One subtask's state handle of one operator: the unit a Spark task reads."""

    root: str  # what the handle's file is relative to (a savepoint's directory, a job's checkpoint directory)
    uid: str
    subtask: int
    parallelism: int
    max_parallelism: int
    handle: dict
    storage_options: dict | None = None
    groups: tuple[int, int] | None = None  # a part of the handle's key groups (``keyed_splits``); None: all

    @property
    def key_groups(self) -> range:
        """The key groups this split reads: the subtask's (those it wrote), or the part given."""
        if self.groups is not None:
            return range(*self.groups)
        native = (self.handle.get("index") or {}).get(NATIVE)
        if native and isinstance(native.get("key_groups"), list):
            lo, hi = native["key_groups"]
            return range(int(lo), int(hi))
        return key_group_range(self.max_parallelism, self.parallelism, self.subtask)

    @property
    def native(self) -> bool:
        return bool((self.handle.get("index") or {}).get(NATIVE))

    @property
    def owner(self) -> str:
        part = "" if self.groups is None else f", key groups {self.groups[0]}-{self.groups[1] - 1}"
        return f"operator {self.uid!r} (subtask {self.subtask + 1}/{self.parallelism}{part})"


@dataclass
class StateInfo:
    name: str
    kind: str  # value, list, map, reducing, aggregating, accumulators (built-in aggregations); "+ttl" with a TTL
    keys: int | None = None  # distinct keys (None: not counted)
    entries: int | None = None  # rows read_keyed_state gives (list elements, map entries)
    bytes: int | None = None  # in the state files (None: a native RocksDB database: per operator only)

    @property
    def internal(self) -> bool:
        """Timers and other state the runtime keeps for itself (names starting with ``_``)."""
        return self.name.startswith("_")


@dataclass
class OperatorStateInfo:
    name: str
    mode: str  # split (list state), union, broadcast
    entries: int | None = None


@dataclass
class OperatorInfo:
    uid: str
    name: str
    parallelism: int
    max_parallelism: int
    bytes: int  # every state file and shared file of the operator
    # "canonical" (the heap format: every savepoint, heap checkpoints, full RocksDB checkpoints) or
    # "rocksdb" (native SST files: incremental RocksDB checkpoints)
    backend: str
    keyed_states: list[StateInfo] = field(default_factory=list)
    operator_states: list[OperatorStateInfo] = field(default_factory=list)


def splits(meta: CheckpointMetadata, root: str, uid: str, storage_options: dict | None = None) -> list[Split]:
    """Every subtask handle of operator ``uid`` (subtasks without state have none)."""
    op = operator(meta, uid)
    n = len(op["subtasks"])
    maxp = meta.operator_max_parallelism(uid)
    return [Split(root, uid, i, n, maxp, h, storage_options) for i, h in enumerate(op["subtasks"]) if h]


def keyed_splits(meta: CheckpointMetadata, root: str, uid: str, tasks: int,
                 storage_options: dict | None = None) -> list[Split]:
    """Splits for reading keyed state with about ``tasks`` Spark tasks: a heap-format handle is cut
    into ranges of its key groups (each task fetches only its ranges' bytes), so a savepoint taken
    at parallelism 2 still reads on 32 cores. A native RocksDB handle stays whole: every part would
    download the whole database. Operator state is never cut (each handle's list is read once)."""
    whole = splits(meta, root, uid, storage_options)
    if not whole:
        return whole
    pieces = max(1, -(-tasks // len(whole)))
    out = []
    for split in whole:
        groups = split.key_groups
        if split.native or pieces == 1 or len(groups) < 2:
            out.append(split)
            continue
        n = min(pieces, len(groups))
        bounds = [groups.start + len(groups) * i // n for i in range(n + 1)]
        out += [replace(split, groups=(lo, hi)) for lo, hi in zip(bounds, bounds[1:])]
    return out


def operator(meta: CheckpointMetadata, uid: str) -> dict:
    op = meta.operators.get(uid)
    if op is None:
        raise StateNotFoundError(f"the {meta.kind} has no operator with uid {uid!r}; its operators: "
                                 f"{', '.join(sorted(meta.operators)) or 'none'}")
    return op


def keyed_state_kinds(meta: CheckpointMetadata, uid: str) -> dict[str, str]:
    """state name -> kind, of every keyed state the operator's handles record."""
    kinds: dict[str, str] = {}
    for h in operator(meta, uid)["subtasks"]:
        index = (h or {}).get("index") or {}
        for name, table in (index.get("keyed") or {}).items():
            kinds.setdefault(name, str(table.get("kind")))
        for name, kind in ((index.get(NATIVE) or {}).get("states") or {}).items():
            kinds.setdefault(name, str(kind))
    return kinds


def state_kind(meta: CheckpointMetadata, uid: str, name: str) -> str:
    kinds = keyed_state_kinds(meta, uid)
    if name not in kinds:
        user = sorted(n for n in kinds if not n.startswith("_"))
        raise StateNotFoundError(f"operator {uid!r} has no keyed state {name!r}; its keyed states: "
                                 f"{', '.join(user) or 'none'}")
    return kinds[name]


def columnar(meta: CheckpointMetadata, uid: str, name: str) -> str | None:
    """The value dtype when every handle holding state ``name`` stores it columnar (int64 keys, one
    numeric value dtype): the column types are known without reading. Else None."""
    dtypes = set()
    for h in operator(meta, uid)["subtasks"]:
        index = (h or {}).get("index") or {}
        if index.get(NATIVE):
            return None
        table = (index.get("keyed") or {}).get(name)
        if table is None or not table.get("groups"):
            continue
        col = table.get("columnar")
        if col is None:
            return None
        dtypes.add(str(col.get("dtype")))
    return dtypes.pop() if len(dtypes) == 1 else None


def handle_bytes(handle: dict | None) -> int:
    """A handle's state file plus the shared files it references."""
    if not handle:
        return 0
    native = (handle.get("index") or {}).get(NATIVE) or {}
    shared = sum(int(f.get("size", 0)) for f in (native.get("sst") or {}).values() if isinstance(f, dict))
    return int(handle.get("size", 0)) + shared


def state_bytes(index: dict, name: str) -> int | None:
    """Bytes of state ``name`` in one heap-format state file (None: native RocksDB, not per state)."""
    if index.get(NATIVE):
        return None
    table = (index.get("keyed") or {}).get(name)
    if not table:
        return 0
    col = table.get("columnar")
    groups = table.get("groups") or {}
    if col is None:
        return sum(int(span[1]) for span in groups.values())
    import numpy as np  # (only for the dtype's width)

    rows = sum(int(r[1]) - int(r[0]) for r in groups.values())
    return rows * (8 + np.dtype(str(col.get("dtype"))).itemsize)


def columnar_keys(index: dict, name: str) -> int | None:
    """Key count of a columnar table, from the index alone (None: not columnar)."""
    table = (index.get("keyed") or {}).get(name) or {}
    if "columnar" not in table:
        return None
    return sum(int(r[1]) - int(r[0]) for r in (table.get("groups") or {}).values())
