"""Reading one ``Split`` on an executor: fetch the bytes it needs, check them, decode.

This is the I/O edge: fsspec (``file://``, ``s3://``) through the runtime's ``StateLocation``,
which checks sizes and checksums as a restore does. A heap-format handle is read in the byte
spans of the one state asked for (``keyed_spans``), not whole; a native RocksDB handle (an
incremental checkpoint) has its SST files downloaded from ``shared/`` (each checked against
its recorded CRC32C) into a scratch directory and opened read-only.

Every error says which state, operator uid, subtask and file: ``StateReadError``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from typing import Any, Iterator

from streamjob.runtime.checkpoint.metadata import CheckpointFormatError
from streamjob.runtime.checkpoint.storage import StateLocation
from streamjob.runtime.state.snapshot import SnapshotFormatError, keyed_spans, read_operator

from . import decode
from .plan import Split


class StateReadError(RuntimeError):
    """A state file is missing, damaged or unreadable; the message names the state, operator and file."""


def _location(split: Split) -> StateLocation:
    return StateLocation(split.root, split.storage_options)


def _where(location: StateLocation, split: Split) -> str:
    return f"{location.describe(split.handle)} of {split.owner}"


@contextlib.contextmanager
def _errors(what: str, split: Split) -> Iterator[None]:
    try:
        yield
    except (CheckpointFormatError, SnapshotFormatError, OSError) as e:
        raise StateReadError(f"cannot read {what} of {split.owner}: {e}") from None


def keyed_parts(split: Split, name: str, drop: tuple[int, int] | None = None,
                ) -> Iterator[decode.Columns | decode.ColumnLists]:
    """The rows of keyed state ``name`` in this split (see ``decode.state_parts``)."""
    with _errors(f"keyed state {name!r}", split):
        if split.native:
            yield from _native_parts(split, {name: decode.table_kind(split.handle["index"], name)}, drop)
            return
        index = split.handle["index"]
        table = (index.get("keyed") or {}).get(name)
        if not table or not table.get("groups"):
            return
        location = _location(split)
        # only the header and this state's chunks: the other states' bytes are never fetched
        data = location.read_spans(split.handle, keyed_spans({"keyed": {name: table}}, split.key_groups))
        yield from decode.state_parts(data, index, name, split.key_groups, _where(location, split), drop)


def keyed_chunks(split: Split, names: list[str]) -> Iterator[tuple[str, str, int, Any]]:
    """(state, kind, key group, chunk) of several states (``KeyedStateReaderFunction``), chunks as a
    restore sees them (columnar tables as dicts)."""
    with _errors(f"keyed states {', '.join(map(repr, names))}", split):
        index = split.handle["index"]
        if split.native:
            kinds = {n: decode.table_kind(index, n) for n in names}
            yield from _native_chunks(split, {n: k for n, k in kinds.items() if k is not None})
            return
        from streamjob.runtime.state.snapshot import read_keyed

        tables = {n: t for n, t in (index.get("keyed") or {}).items() if n in names and t.get("groups")}
        if not tables:
            return
        location = _location(split)
        sub = {"keyed": tables}
        data = location.read_spans(split.handle, keyed_spans(sub, split.key_groups))
        for name in tables:  # per state, then key group: read_keyed yields one state's chunks together
            for _, kind, chunk in read_keyed(data, {"keyed": {name: tables[name]}}, split.key_groups,
                                             _where(location, split)):
                yield name, kind, -1, chunk


def _native_chunks(split: Split, states: dict[str, str]) -> Iterator[tuple[str, str, int, Any]]:
    from streamjob.runtime.state.rocksdb import canonical_chunks, open_read_only
    from streamjob.runtime.state.rocksdb_snapshot import _download

    location = _location(split)
    where = _where(location, split)
    data = location.read(split.handle)  # small: RocksDB's private files (MANIFEST, CURRENT, OPTIONS)
    scratch = tempfile.mkdtemp(prefix="streamjob-state-reader-")
    try:
        directory = os.path.join(scratch, "db")
        _, recorded, cfs, _ = _download(split.handle, data, location, where, directory)
        states = {n: k for n, k in states.items() if n in recorded}
        if not states:
            return
        db = open_read_only(directory, {n: cfs[n] for n in states})
        try:
            yield from canonical_chunks(db, states, {n: cfs[n] for n in states}, split.key_groups)
        finally:
            db.close()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _native_parts(split: Split, states: dict[str, str | None], drop: tuple[int, int] | None,
                  ) -> Iterator[decode.ColumnLists]:
    for _, kind, _, chunk in _native_chunks(split, {n: k for n, k in states.items() if k is not None}):
        yield decode.chunk_columns(kind, chunk, drop)


def native_parts(split: Split, states: dict[str, str]) -> Iterator[tuple[str, decode.ColumnLists]]:
    """(state, rows) of several states of a native RocksDB handle, from one download."""
    with _errors(f"keyed states {', '.join(map(repr, states))}", split):
        for name, kind, _, chunk in _native_chunks(split, states):
            yield name, decode.chunk_columns(kind, chunk)


def operator_state(split: Split) -> dict[str, tuple[str, Any]]:
    """This subtask's operator state: name -> (mode, items); broadcast state's items are a dict."""
    index = split.handle.get("index") or {}
    if "operator" not in index:
        return {}
    with _errors("operator state", split):
        location = _location(split)
        data = location.read(split.handle, verify=False)  # the operator chunk's own checksum is checked
        return read_operator(data, index, _where(location, split))
