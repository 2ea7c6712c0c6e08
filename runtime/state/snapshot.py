"""The bytes of one operator subtask's snapshot, and reading them back.

A snapshot is a sequence of pickled chunks: one per (keyed state, key group),
plus one for all operator state. The index (state -> key group -> offset,
length) travels in the state handle, so a restore at another parallelism reads
exactly the key groups it now owns and nothing else. Key groups are computed
here, in the asynchronous phase, not per record.
"""

from __future__ import annotations

import pickle
from typing import Any, Iterator

import numpy as np

from .keygroups import assign_key_groups

MAGIC = b"SJSNAP1\n"


class SnapshotFormatError(ValueError):
    pass


def _group_positions(keys: list, max_parallelism: int) -> Iterator[tuple[int, np.ndarray]]:
    if not keys:
        return
    groups = assign_key_groups(keys, max_parallelism)
    order = np.argsort(groups, kind="stable")
    sorted_groups = groups[order]
    bounds = np.flatnonzero(np.diff(sorted_groups)) + 1
    for part in np.split(order, bounds):
        yield int(groups[part[0]]), part


class SnapshotBuilder:
    """Appends chunks to one state file and records where each one is."""

    def __init__(self) -> None:
        self.out = bytearray(MAGIC)
        self.index: dict[str, Any] = {}

    def _append(self, data: bytes) -> list[int]:
        offset = len(self.out)
        self.out.extend(data)
        return [offset, len(data)]

    def add_keyed(self, name: str, kind: str, key_group: int, chunk: Any) -> None:
        table = self.index.setdefault("keyed", {}).setdefault(name, {"kind": kind, "groups": {}})
        table["groups"][str(key_group)] = self._append(pickle.dumps(chunk, protocol=5))

    def add_operator(self, operator: dict[str, tuple[str, list]]) -> None:
        self.index["operator"] = self._append(pickle.dumps(operator, protocol=5))

    def add_file(self, name: str, data: bytes) -> None:
        """A small file kept verbatim (RocksDB's MANIFEST, CURRENT, OPTIONS)."""
        self.index.setdefault("files", {})[name] = self._append(data)

    def finish(self) -> tuple[bytes, dict]:
        return bytes(self.out), self.index


def serialize(keyed: dict[str, tuple[str, Any]] | None, max_parallelism: int,
              operator: dict[str, tuple[str, list]] | None) -> tuple[bytes, dict]:
    """Frozen keyed tables and copied operator state -> (bytes, index)."""
    builder = SnapshotBuilder()
    grouped: dict[tuple[int, int], list] = {}  # tables sharing one key list (a window's columns) group it once
    for name, (kind, frozen) in (keyed or {}).items():
        keys = frozen.keys()
        builder.index.setdefault("keyed", {}).setdefault(name, {"kind": kind, "groups": {}})
        shared = getattr(frozen, "_keys", None)
        if shared is not None:
            cache_key = (id(shared), len(keys))
            if cache_key not in grouped:
                grouped[cache_key] = list(_group_positions(keys, max_parallelism))
            groups: Any = grouped[cache_key]
        else:
            groups = _group_positions(keys, max_parallelism)
        for kg, positions in groups:
            if kind == "accumulators":
                chunk = frozen.chunk_positions(positions)
            else:
                chunk = frozen.chunk([keys[i] for i in positions.tolist()])
            builder.add_keyed(name, kind, kg, chunk)
    if operator:
        builder.add_operator(operator)
    return builder.finish()


def _load(data: bytes, span: Any, where: str) -> Any:
    try:
        offset, length = int(span[0]), int(span[1])
    except (TypeError, ValueError, IndexError):
        raise SnapshotFormatError(f"{where}: malformed offset/length {span!r}") from None
    if offset < len(MAGIC) or offset + length > len(data):
        raise SnapshotFormatError(f"{where}: chunk [{offset}, {offset + length}) lies outside the {len(data)}-byte file")
    try:
        return pickle.loads(data[offset : offset + length])
    except Exception as e:  # noqa: BLE001 - any unpickling problem means a corrupt file
        raise SnapshotFormatError(f"{where}: cannot read chunk at {offset}: {type(e).__name__}: {e}") from e


def check_magic(data: bytes, where: str) -> None:
    if not data.startswith(MAGIC):
        raise SnapshotFormatError(f"{where}: not a streamjob state file (bad header)")


def read_keyed(data: bytes, index: dict, key_groups: range, where: str) -> Iterator[tuple[str, str, Any]]:
    """(state name, kind, chunk) for every key group of ``key_groups`` in the snapshot."""
    check_magic(data, where)
    for name, table in (index.get("keyed") or {}).items():
        kind = table.get("kind")
        for kg, span in table.get("groups", {}).items():
            if int(kg) in key_groups:
                yield name, kind, _load(data, span, f"{where} (state {name!r}, key group {kg})")


def read_file(data: bytes, index: dict, name: str, where: str) -> bytes:
    span = (index.get("files") or {}).get(name)
    if span is None:
        raise SnapshotFormatError(f"{where}: has no file {name!r}")
    offset, length = int(span[0]), int(span[1])
    if offset < len(MAGIC) or offset + length > len(data):
        raise SnapshotFormatError(f"{where}: file {name!r} lies outside the {len(data)}-byte state file")
    return data[offset : offset + length]


def read_operator(data: bytes, index: dict, where: str) -> dict[str, tuple[str, list]]:
    check_magic(data, where)
    span = index.get("operator")
    if span is None:
        return {}
    value = _load(data, span, f"{where} (operator state)")
    if not isinstance(value, dict):
        raise SnapshotFormatError(f"{where}: operator state is {type(value).__name__}, expected a dict")
    return value
