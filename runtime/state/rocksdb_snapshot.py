"""The asynchronous half of RocksDB snapshots, and reading them back.

Two kinds, chosen by ``execution.checkpointing.incremental``:

* **incremental** (native): the SST files of the RocksDB checkpoint that no
  completed checkpoint holds yet are uploaded to ``<job>/shared/<n>-<uuid>.sst``
  (``n`` = the checkpoint that uploaded it, which lets the job manager find
  orphans); the others are referenced again. The small private files
  (MANIFEST, CURRENT, OPTIONS) go into the subtask's state file. The handle
  maps each local SST name to its shared file, its size and its CRC32C
  (checked after each download); the job manager's ``SharedStateRegistry``
  counts the references.
* **full** (canonical): every entry of the checkpoint, decoded and grouped by
  key group in the heap backend's format, so it restores into either backend at
  any parallelism.

Restore: a native handle with exactly this subtask's key groups becomes the
working database as is (download, open); anything else is read key group by
key group (rescaling, or a change of backend).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from typing import Any, Iterator

from ..checkpoint import checksums
from ..checkpoint.storage import CheckpointStorage, StateLocation
from .rocksdb import (RocksDBKeyedStateBackend, RocksDBSnapshot, canonical_chunks, column_families_of,
                      open_read_only)
from .snapshot import ColumnarValues, SnapshotBuilder, SnapshotFormatError, read_file

NATIVE = "rocksdb"


def write_snapshot(snap: RocksDBSnapshot, storage: CheckpointStorage, name: str, operator_state: dict | None,
                   ) -> tuple[dict, int, int]:
    """(handle, full state size, bytes uploaded now); runs in the snapshot writer thread."""
    try:
        builder = SnapshotBuilder()
        if snap.incremental:
            return _write_incremental(snap, storage, name, operator_state, builder)
        db = open_read_only(snap.directory, snap.cfs)
        columnar = ColumnarValues()  # a ValueState of int keys and numbers: columnar, as the heap writes it
        try:
            for state, kind, kg, chunk in canonical_chunks(db, snap.states, snap.cfs, snap.key_groups, snap.ttl_drop):
                if not columnar.take(builder, state, kind, kg, chunk):
                    builder.add_keyed(state, kind, kg, chunk)
        finally:
            db.close()
        columnar.finish(builder, snap.backend.max_parallelism)
        for state, kind in snap.states.items():  # states with no entries still restore their kind
            builder.index.setdefault("keyed", {}).setdefault(state, {"kind": kind, "groups": {}})
        if operator_state:
            builder.add_operator(operator_state)
        data, index = builder.finish()
        return storage.write_state(snap.checkpoint_id, name, data, index), len(data), len(data)
    finally:
        snap.discard()


def _write_incremental(snap: RocksDBSnapshot, storage: CheckpointStorage, name: str, operator_state: dict | None,
                       builder: SnapshotBuilder) -> tuple[dict, int, int]:
    if storage.in_memory:
        raise ValueError("incremental RocksDB checkpoints need file:// or s3:// checkpoint storage "
                         "(execution.checkpointing.dir), not the job manager's memory://")
    sst: dict[str, dict] = {}
    uploaded = 0
    for entry in sorted(os.listdir(snap.directory)):
        path = os.path.join(snap.directory, entry)
        if entry.endswith(".sst"):
            size = os.path.getsize(path)
            known = snap.base.get(entry)
            if known is not None and int(known["size"]) == size:
                sst[entry] = known
            else:
                sst[entry] = storage.upload_shared(snap.checkpoint_id, path)
                uploaded += int(sst[entry]["size"])
        else:
            with open(path, "rb") as f:
                builder.add_file(entry, f.read())
    if operator_state:
        builder.add_operator(operator_state)
    builder.index[NATIVE] = {"key_groups": [snap.key_groups.start, snap.key_groups.stop],
                             "states": snap.states, "column_families": snap.cfs, "sst": sst}
    data, index = builder.finish()
    handle = storage.write_state(snap.checkpoint_id, name, data, index)
    snap.backend.record_upload(snap.checkpoint_id, sst)
    full = len(data) + sum(int(f["size"]) for f in sst.values())
    return handle, full, uploaded + len(data)


def _check(native: Any, where: str) -> tuple[range, dict[str, str], dict[str, str], dict[str, dict]]:
    """(key groups, state -> kind, state -> column family, SST files) of a native handle."""
    try:
        start, stop = (int(x) for x in native["key_groups"])
        states = {str(k): str(v) for k, v in native["states"].items()}
        cfs = column_families_of(states, {str(k): str(v) for k, v in (native.get("column_families") or {}).items()})
        sst = {str(k): {"file": str(v["file"]), "size": int(v["size"]),
                        **({checksums.KEY: int(v[checksums.KEY])} if checksums.KEY in v else {})}
               for k, v in native["sst"].items()}
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise SnapshotFormatError(f"{where}: malformed RocksDB handle ({type(e).__name__}: {e})") from None
    return range(start, stop), states, cfs, sst


def _download(handle: dict, data: bytes, location: StateLocation, where: str, into: str,
              ) -> tuple[range, dict, dict, dict]:
    key_groups, states, cfs, sst = _check(handle["index"][NATIVE], where)
    os.makedirs(into, exist_ok=True)
    for local, ref in sst.items():
        if "/" in local or local.startswith("."):
            raise SnapshotFormatError(f"{where}: bad SST file name {local!r}")
        target = os.path.join(into, local)
        try:
            location.fs.get_file(location.path(ref["file"]), target)
        except FileNotFoundError:
            raise SnapshotFormatError(f"{where}: shared state file {location.url}/{ref['file']} is missing") from None
        if os.path.getsize(target) != ref["size"]:
            raise SnapshotFormatError(f"{where}: shared state file {location.url}/{ref['file']} has "
                                      f"{os.path.getsize(target)} bytes, the checkpoint recorded {ref['size']} "
                                      f"(truncated or overwritten)")
        if checksums.KEY in ref:  # uploads of earlier versions carry none
            actual = checksums.file_checksum(target)
            if actual != ref[checksums.KEY]:
                raise SnapshotFormatError(
                    f"{where}: shared state file {location.url}/{ref['file']} (SST {local} of key groups "
                    f"{key_groups.start}-{key_groups.stop - 1}): checksum mismatch ({checksums.ALGORITHM} "
                    f"{actual:#010x}, recorded {ref[checksums.KEY]:#010x}): the file is damaged")
    for private in (handle["index"].get("files") or {}):
        if "/" in private or private.startswith("."):
            raise SnapshotFormatError(f"{where}: bad file name {private!r}")
        with open(os.path.join(into, private), "wb") as f:
            f.write(read_file(data, handle["index"], private, where))
    return key_groups, states, cfs, sst


def restore_native(backend: Any, handle: dict, data: bytes, location: StateLocation, checkpoint_id: int | None,
                   where: str, first: bool) -> None:
    """Restore one native RocksDB handle into ``backend`` (RocksDB or heap)."""
    native = handle["index"][NATIVE]
    key_groups = _check(native, where)[0]
    ours = backend.key_groups
    overlap = range(max(key_groups.start, ours.start), min(key_groups.stop, ours.stop))
    if isinstance(backend, RocksDBKeyedStateBackend) and first and len(overlap) * 2 >= len(ours):
        # The database becomes ours as it is (same key groups), or clipped to our key groups when it holds
        # at least half of them (a rescale; the caller gives the handle that overlaps most first): deleting
        # a range costs nothing, where copying entries one by one costs ~1 s per 500k keys.
        directory = os.path.join(backend.home, f"restore-{uuid.uuid4().hex[:6]}")
        _, states, cfs, sst = _download(handle, data, location, where, directory)
        same = key_groups == ours
        reusable = same and backend.state_root is not None and location.url == backend.state_root \
            and checkpoint_id is not None
        backend.adopt(directory, states, cfs, checkpoint_id or 0, sst, reusable)
        if not same:
            backend.clip()
        return
    for name, kind, _, chunk in _read_native(handle, data, location, where, backend.key_groups,
                                             copy_into=backend if isinstance(backend, RocksDBKeyedStateBackend) else None):
        backend.restore_chunk(name, kind, chunk)


def _read_native(handle: dict, data: bytes, location: StateLocation, where: str, key_groups: range,
                 copy_into: RocksDBKeyedStateBackend | None) -> Iterator[tuple[str, str, int, Any]]:
    scratch = tempfile.mkdtemp(prefix="streamjob-restore-")
    try:
        _, states, cfs, _ = _download(handle, data, location, where, os.path.join(scratch, "db"))
        db = open_read_only(os.path.join(scratch, "db"), cfs)
        try:
            if copy_into is not None:  # RocksDB -> RocksDB: copy the raw entries of our key groups
                copy_into.copy_range(db, states, cfs)
                for name, kind in states.items():
                    copy_into.table(name, kind)
                return
            yield from canonical_chunks(db, states, cfs, key_groups)
        finally:
            db.close()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
