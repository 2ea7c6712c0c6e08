"""Checkpoint storage through fsspec: ``file://``, ``s3://`` (s3fs), ``memory://``.

Layout per job, as Flink's::

    <dir>/<job-id>/chk-<n>/_metadata     written last, put-if-absent: makes chk-<n> complete
    <dir>/<job-id>/chk-<n>/<state files> exclusive to checkpoint n
    <dir>/<job-id>/shared/               state shared by several checkpoints (incremental)
    <dir>/<job-id>/taskowned/            state owned by the tasks, never deleted by the job manager

A savepoint is self-contained: its own directory (``<target>/savepoint-<job>-<id>``)
holds ``_metadata`` and every state file, named relative to that directory, so it
can be copied or moved to another directory or bucket and still restore.

``memory://`` is the job manager's own storage (Flink's JobManagerCheckpointStorage):
tasks run in other processes, so their state travels inline in the
acknowledgement and lives in the job manager's memory with ``_metadata``.
Small state is inlined in ``_metadata`` on every storage (as Flink's
memory threshold) instead of making a file per operator.
"""

from __future__ import annotations

import base64
import json
import os
import posixpath
import re
import uuid
from typing import Any

import fsspec

from . import checksums
from .metadata import CheckpointFormatError, CheckpointMetadata, FileRef, parse
from ..urls import file_host_problem

METADATA = "_metadata"
SHARED = "shared"
_CHK = re.compile(r"chk-(\d+)$")


class StateTooLargeError(RuntimeError):
    pass


class StorageWriteError(OSError):
    """The store refused a write (not a directory, no permission, unreachable, no credentials): the
    message names the storage and its URL, as ``JobLease`` does, not only the OS error of a path."""


def error_text(error: BaseException) -> str:
    """An error of a storage write for a message: a ``StorageWriteError`` says it all itself."""
    return str(error) if isinstance(error, StorageWriteError) else f"{type(error).__name__}: {error}"


def cannot_write(what: str, url: str, error: BaseException) -> StorageWriteError:
    """``what`` ("checkpoint storage", "savepoint"): one line a user can act on."""
    if isinstance(error, StorageWriteError):
        return error
    detail = str(error).strip() or "no detail"
    return StorageWriteError(f"{what} {url}: cannot write to it: {type(error).__name__}: {detail}")


def normalize_url(url: str) -> str:
    if not isinstance(url, str) or not url.strip():
        raise ValueError(f"checkpoint storage must be a URL such as file:///tmp/checkpoints or s3://bucket/dir, got {url!r}")
    url = url.strip()
    if "://" not in url:
        return "file://" + os.path.abspath(os.path.expanduser(url))
    protocol = url.split("://", 1)[0]
    try:
        fsspec.get_filesystem_class(protocol)
    except (ImportError, ValueError) as e:
        raise ValueError(f"checkpoint storage {url!r}: no filesystem for {protocol}:// ({e})") from None
    problem = file_host_problem(url)
    if problem:
        raise ValueError(problem)
    if protocol.lower() in ("file", "local") and url.split("://", 1)[1].lower().startswith("localhost/"):
        url = f"{protocol}://{url.split('://', 1)[1][len('localhost'):]}"
    return url.rstrip("/") if not url.endswith(":///") else url


def is_local(fs: Any) -> bool:
    """The local file system (fsync and atomic renames are ours to do)."""
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    return protocol in ("file", "local")


def _is_memory(fs: Any) -> bool:
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    return protocol == "memory"


def sync_directory(directory: str) -> None:
    """Make the names created or renamed in a local directory durable (its entries, not the files)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file(fs: Any, path: str, data: bytes, exclusive: bool) -> None:
    """Durable write; ``exclusive``: put-if-absent (raises FileExistsError)."""
    if is_local(fs):
        directory = os.path.dirname(path)
        os.makedirs(directory, exist_ok=True)
        tmp = f"{path}.{uuid.uuid4().hex[:8]}.tmp"
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        try:
            if exclusive:
                os.link(tmp, path)  # atomic put-if-absent
            else:
                os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        sync_directory(directory)
        return
    if exclusive:
        if fs.exists(path):
            raise FileExistsError(path)
        fs.pipe_file(path, data, mode="create")
    else:
        fs.pipe_file(path, data)


def inline_handle(data: bytes, index: dict) -> dict:
    """A state handle carrying its bytes inside ``_metadata`` (small state, or memory:// storage)."""
    return {"data": base64.b64encode(data).decode(), "size": len(data), "index": index,
            checksums.KEY: checksums.checksum(data)}


def file_handle(relative: str, data: bytes, index: dict) -> dict:
    return {"file": relative, "size": len(data), "index": index, checksums.KEY: checksums.checksum(data)}


class StateLocation:
    """Reads state handles relative to one job's checkpoint directory (tasks and job manager alike)."""

    def __init__(self, job_root_url: str, storage_options: dict | None = None):
        self.url = job_root_url
        self.fs, self.root = fsspec.core.url_to_fs(job_root_url, **(storage_options or {}))

    def path(self, relative: str) -> str:
        return posixpath.join(self.root, relative)

    def describe(self, handle: dict) -> str:
        """The state file a handle names, for messages."""
        return f"state file {self.url}/{handle['file']}" if "file" in handle else f"inline state in {self.url}"

    def read(self, handle: dict, verify: bool = True) -> bytes:
        """The bytes of a state handle. ``verify``: check the file's checksum (readers that check
        each chunk they use instead, naming its key group, pass False)."""
        if "data" in handle:
            try:
                data = base64.b64decode(handle["data"], validate=True)
            except (ValueError, TypeError) as e:
                raise CheckpointFormatError(f"{self.url}: inline state is not valid base64 ({e})") from None
        else:
            path = self.path(handle["file"])
            try:
                data = self.fs.cat_file(path)
            except FileNotFoundError:
                raise CheckpointFormatError(f"{self.describe(handle)} is missing") from None
            if "size" in handle and len(data) != int(handle["size"]):
                raise CheckpointFormatError(f"{self.describe(handle)} has {len(data)} bytes, the checkpoint recorded "
                                            f"{handle['size']} (truncated or overwritten)")
        problem = checksums.mismatch(handle.get(checksums.KEY), data) if verify else None
        if problem:
            raise CheckpointFormatError(f"{self.describe(handle)}: {problem}: the file is damaged")
        return data


    def find_damage(self, refs: list[FileRef]) -> str | None:
        """What is wrong with the first of ``refs`` that is missing or has another size than recorded
        (None: all there). One listing per directory, not one request per file."""
        listed: dict[str, dict[str, int] | None] = {}
        for ref in refs:
            directory, name = posixpath.split(self.path(ref.path))
            if directory not in listed:
                try:
                    entries = self.fs.ls(directory, detail=True, refresh=True)  # refresh: s3fs caches listings
                    listed[directory] = {posixpath.basename(e["name"].rstrip("/")): int(e.get("size") or 0)
                                         for e in entries}
                except FileNotFoundError:
                    listed[directory] = None
            sizes = listed[directory]
            what = f"state file {self.url}/{ref.path} of {ref.owner}"
            if sizes is None or name not in sizes:
                return f"{what} is missing"
            if ref.size is not None and sizes[name] != int(ref.size):
                return f"{what} has {sizes[name]} bytes, the checkpoint recorded {ref.size} (truncated or overwritten)"
        return None

    def read_spans(self, handle: dict, spans: list[tuple[int, int]]) -> Any:
        """The bytes of ``spans`` ([offset, length] each) of a state file, at their offsets in a buffer of
        the file's size (the rest left zero, and unread): a restore at a higher parallelism reads the key
        groups it owns, not every subtask's whole file. Inline handles and spans covering most of the
        file: the whole file, as ``read``."""
        size = int(handle.get("size", -1))
        if "data" in handle or size < 0 or sum(n for _, n in spans) > size // 2:
            return self.read(handle, verify=False)  # the reader checks each chunk it uses
        import numpy as np

        data = np.zeros(size, dtype=np.uint8)  # calloc: pages never read stay untouched
        path = self.path(handle["file"])
        for offset, length in _merged(spans):
            if offset < 0 or offset + length > size:
                raise CheckpointFormatError(f"state file {self.url}/{handle['file']}: bytes [{offset}, "
                                            f"{offset + length}) lie outside its recorded {size} bytes")
            try:
                part = self.fs.cat_file(path, start=offset, end=offset + length)
            except FileNotFoundError:
                raise CheckpointFormatError(f"{self.describe(handle)} is missing") from None
            if len(part) != length:
                raise CheckpointFormatError(f"{self.describe(handle)} has fewer bytes than the checkpoint recorded "
                                            f"({size}): truncated")
            data[offset : offset + length] = np.frombuffer(part, dtype=np.uint8)
        return data


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Spans sorted, overlapping or adjacent ones joined (one read each)."""
    out: list[list[int]] = []
    for offset, length in sorted((int(o), int(n)) for o, n in spans if int(n) > 0):
        if out and offset <= out[-1][0] + out[-1][1]:
            out[-1][1] = max(out[-1][1], offset + length - out[-1][0])
        else:
            out.append([offset, length])
    return [(o, n) for o, n in out]


class CheckpointStorage(StateLocation):
    """One job's checkpoint directory: ``<base>/<job-id>``."""

    def __init__(self, base_url: str, job_id: str, inline_threshold: int = 20 << 10, memory_max_state: int = 5 << 20):
        self.base_url = normalize_url(base_url)
        super().__init__(self.base_url.rstrip("/") + "/" + job_id)
        self.job_id = job_id
        self.in_memory = _is_memory(self.fs)
        self.inline_threshold = inline_threshold
        self.memory_max_state = memory_max_state

    # -- task side -----------------------------------------------------------------
    def write_state(self, checkpoint_id: int, name: str, data: bytes, index: dict) -> dict:
        """Store one operator subtask's snapshot; return its handle (JSON-able)."""
        if self.in_memory:
            if len(data) > self.memory_max_state:
                raise StateTooLargeError(
                    f"state of {name} is {len(data)} bytes, more than the {self.memory_max_state} bytes the job "
                    f"manager's memory:// checkpoint storage takes; use file:// or s3:// checkpoint storage"
                )
            return inline_handle(data, index)
        if len(data) <= self.inline_threshold:
            return inline_handle(data, index)
        relative = f"chk-{checkpoint_id}/{name}-{uuid.uuid4().hex[:8]}"
        self._write(self.path(relative), data, exclusive=False)
        return file_handle(relative, data, index)

    def upload_shared(self, checkpoint_id: int, local_path: str) -> dict:
        """Copy a local file (an SST) into ``shared/``; the name starts with the checkpoint that uploaded it.
        Returns its reference: {"file": relative path, "size", "crc32c": checksum of what was uploaded}."""
        try:
            return self._upload_shared(checkpoint_id, local_path)
        except FileNotFoundError as e:
            if e.filename == local_path:
                raise  # the local SST, not the store
            raise cannot_write("checkpoint storage", self.base_url, e) from None
        except Exception as e:  # noqa: BLE001 - the store: named, with its URL
            raise cannot_write("checkpoint storage", self.base_url, e) from None

    def _upload_shared(self, checkpoint_id: int, local_path: str) -> dict:
        relative = f"{SHARED}/{checkpoint_id}-{uuid.uuid4().hex}.sst"
        path = self.path(relative)
        if is_local(self.fs):
            with open(local_path, "rb") as src:
                data = src.read()
            self._write(path, data, exclusive=False)
            return {"file": relative, "size": len(data), checksums.KEY: checksums.checksum(data)}
        # SST files are immutable: the checksum of the local file is the checksum of the upload
        crc = checksums.file_checksum(local_path)
        self.fs.put_file(local_path, path)
        return {"file": relative, "size": os.path.getsize(local_path), checksums.KEY: crc}

    def shared_files(self) -> list[str]:
        """Every file in ``shared/`` (relative to the job's checkpoint directory)."""
        try:
            return [f"{SHARED}/{posixpath.basename(p)}" for p in self.fs.ls(self.path(SHARED), detail=False)]
        except FileNotFoundError:
            return []

    # -- job manager side --------------------------------------------------------------
    def initialize(self) -> None:
        try:
            for sub in ("shared", "taskowned"):
                self.fs.makedirs(self.path(sub), exist_ok=True)
        except Exception as e:  # noqa: BLE001 - the store: named, with its URL
            raise cannot_write("checkpoint storage", self.base_url, e) from None

    def checkpoint_path(self, checkpoint_id: int) -> str:
        return self.path(f"chk-{checkpoint_id}")

    def checkpoint_url(self, checkpoint_id: int) -> str:
        return f"{self.url}/chk-{checkpoint_id}"

    def write_metadata(self, metadata: CheckpointMetadata) -> None:
        """Durably, and only if absent: two job managers can never both complete checkpoint n."""
        directory = self.checkpoint_path(metadata.checkpoint_id)
        self.fs.makedirs(directory, exist_ok=True)
        self._write(posixpath.join(directory, METADATA), metadata.to_json(), exclusive=True)

    def _write(self, path: str, data: bytes, exclusive: bool) -> None:
        try:
            write_file(self.fs, path, data, exclusive)
        except FileExistsError as e:
            if exclusive and path in (e.filename, e.filename2, *e.args):
                raise  # put-if-absent said no: the caller's to handle
            raise cannot_write("checkpoint storage", self.base_url, e) from None  # a file where a directory goes
        except Exception as e:  # noqa: BLE001 - the store: named, with its URL
            raise cannot_write("checkpoint storage", self.base_url, e) from None

    # Deletes are best effort: when the store is unreachable, what stays behind is an orphan the
    # sweep after the next completed checkpoint removes; a failed delete never fails the job.
    # ``strict``: raise instead (the job manager's disposer logs it and tries again later).
    def discard(self, checkpoint_id: int, strict: bool = False) -> None:
        path = self.checkpoint_path(checkpoint_id)
        try:
            if self.fs.exists(path):
                self.fs.rm(path, recursive=True)
        except FileNotFoundError:
            pass
        except Exception:  # noqa: BLE001 - see above
            if strict:
                raise

    def discard_files(self, relatives: list[str], strict: bool = False) -> None:
        for rel in relatives:
            try:
                self.fs.rm(self.path(rel))
            except FileNotFoundError:
                pass
            except Exception:  # noqa: BLE001 - see above
                if strict:
                    raise
                return

    def checkpoint_ids(self) -> list[int]:
        """Every chk-<n> directory present, complete or not."""
        try:
            entries = self.fs.ls(self.root, detail=False)
        except FileNotFoundError:
            return []
        ids = []
        for e in entries:
            m = _CHK.search(e.rstrip("/"))
            if m:
                ids.append(int(m.group(1)))
        return sorted(ids)

    def remove_job_dir_if_empty(self) -> None:
        """After the job ends without retained checkpoints: remove the empty layout."""
        try:
            for sub in ("shared", "taskowned"):
                p = self.path(sub)
                if self.fs.exists(p) and not self.fs.ls(p, detail=False):
                    self.fs.rm(p, recursive=True)
            if self.fs.exists(self.root) and not self.fs.ls(self.root, detail=False):
                self.fs.rm(self.root, recursive=True)
        except (FileNotFoundError, OSError):
            pass


class SavepointTarget(StateLocation):
    """One savepoint's own directory: tasks write full, canonical state files into it, the job
    manager writes ``_metadata`` last, put-if-absent. Handles are relative to the directory."""

    def __init__(self, url: str, inline_threshold: int = 20 << 10, storage_options: dict | None = None):
        url = normalize_url(url)
        super().__init__(url, storage_options)
        if _is_memory(self.fs):
            raise ValueError(f"savepoint directory {url}: memory:// is private to one process; "
                             f"use file:// or s3://")
        self.inline_threshold = inline_threshold

    def write_state(self, checkpoint_id: int, name: str, data: bytes, index: dict) -> dict:
        if len(data) <= self.inline_threshold:
            return inline_handle(data, index)
        relative = f"{name}-{uuid.uuid4().hex[:8]}"
        try:
            write_file(self.fs, self.path(relative), data, exclusive=False)
        except Exception as e:  # noqa: BLE001 - the store: named, with its URL
            raise cannot_write("savepoint", self.url, e) from None
        return file_handle(relative, data, index)

    def write_metadata(self, metadata: CheckpointMetadata) -> None:
        self.fs.makedirs(self.root, exist_ok=True)
        write_file(self.fs, self.path(METADATA), metadata.to_json(), exclusive=True)

    def discard(self) -> None:
        try:
            if self.fs.exists(self.root):
                self.fs.rm(self.root, recursive=True)
        except FileNotFoundError:
            pass


def savepoint_url(target_dir: str, job_id: str) -> str:
    """A new savepoint directory under ``target_dir`` (Flink's naming)."""
    return f"{normalize_url(target_dir).rstrip('/')}/savepoint-{job_id[:6]}-{uuid.uuid4().hex[:12]}"


def url_scheme(url: str) -> str:
    """``s3`` of s3://bucket/dir; ``file`` of a bare path."""
    return url.split("://", 1)[0].lower() if "://" in url else "file"


def savepoint_target_problem(target: str, allowed_schemes: set[str]) -> str | None:
    """Why a savepoint directory asked for over the REST API is refused, or None. The job manager writes
    wherever a target points, with the job's credentials: only the storage the job itself uses (its
    checkpoint and savepoint directories' schemes, and those configured), and no way out of a directory."""
    if any(ord(c) < 32 or ord(c) == 127 for c in target):
        return "contains control characters"
    scheme = url_scheme(target)
    path = target.split("://", 1)[1] if "://" in target else target
    if "://" not in target and not target.startswith("/"):
        return f"{target!r} is a relative path; give an absolute path or a URL such as s3://bucket/savepoints"
    if ".." in path.replace("\\", "/").split("/"):
        return f"{target!r} contains '..'"
    if file_host_problem(target):
        return file_host_problem(target)
    if scheme not in allowed_schemes:
        return (f"{scheme}:// is not storage of this job (allowed: {', '.join(sorted(allowed_schemes))}); "
                f"configure rest.savepoint.allowed-schemes to allow it")
    return None


def dispose_savepoint(url: str, storage_options: dict | None = None) -> CheckpointMetadata:
    """Delete a savepoint directory, after checking it is one (never a job's checkpoints).
    ``storage_options``: fsspec settings for this store (the operator disposes of many jobs'
    savepoints, each with its own endpoint and credentials); else this process's defaults."""
    root, meta = load_checkpoint(url, storage_options)
    if meta.kind != "savepoint":
        raise CheckpointFormatError(f"{url} is a checkpoint, not a savepoint; the job that owns it deletes it")
    SavepointTarget(root, storage_options=storage_options).discard()
    return meta


def snapshot_root(url: str, kind: str) -> str:
    """What a snapshot's handles are relative to: a savepoint's own directory, a checkpoint's job directory."""
    return url if kind == "savepoint" else url.rsplit("/", 1)[0]


def load_checkpoint(url: str, storage_options: dict | None = None) -> tuple[str, CheckpointMetadata]:
    """Read ``_metadata`` of a checkpoint or savepoint: ``.../chk-<n>``, ``.../savepoint-...``,
    or either with ``/_metadata``.

    Returns what handles are relative to (``snapshot_root``) and the metadata.
    """
    url = normalize_url(url)
    if url.endswith("/" + METADATA):
        url = url[: -len(METADATA) - 1]
    fs, path = fsspec.core.url_to_fs(url, **(storage_options or {}))
    meta_path = posixpath.join(path, METADATA)
    try:
        data = fs.cat_file(meta_path)
    except FileNotFoundError:
        raise CheckpointFormatError(f"{url}: no {METADATA} (not a completed checkpoint)") from None
    except (IsADirectoryError, NotADirectoryError, PermissionError, OSError) as e:
        raise CheckpointFormatError(f"{url}/{METADATA}: cannot read ({e})") from None
    meta = parse(data, f"{url}/{METADATA}")
    return snapshot_root(url, meta.kind), meta


# Where a user finds the path to give (said when the one given holds nothing to restore).
_WHERE = ("; give the path `streamjob savepoint` or `streamjob stop -p` printed (savepoint-...), a checkpoint "
          "(chk-<n>), or a checkpoint directory")


def find_checkpoints(url: str) -> list[str]:
    """Checkpoint URLs under ``url`` that have ``_metadata``, newest first.

    ``url`` is a checkpoint (``chk-<n>``) or savepoint directory itself, a job's checkpoint directory,
    or the base checkpoint directory (``execution.checkpointing.dir``) holding job directories: then
    the job whose newest completed checkpoint completed last is taken.
    """
    url = normalize_url(url)
    if url.endswith("/" + METADATA):
        return [url[: -len(METADATA) - 1]]
    if _CHK.search(url.rstrip("/")):
        return [url]
    fs, path = fsspec.core.url_to_fs(url)
    try:
        if fs.isfile(posixpath.join(path, METADATA)):
            return [url]  # a savepoint (or a checkpoint directory under another name)
        if fs.isfile(path):
            raise CheckpointFormatError(f"{url}: a file, not a savepoint or checkpoint: those are directories "
                                        f"holding a {METADATA} file{_WHERE}")
    except OSError:
        pass
    try:
        entries = fs.ls(path, detail=False)
    except FileNotFoundError:
        raise CheckpointFormatError(f"{url}: no such checkpoint or checkpoint directory") from None
    found = _completed_in(fs, url, entries)
    if not found and not any(_CHK.search(e.rstrip("/")) for e in entries):
        return _newest_job(fs, url, entries)
    if not found:
        raise CheckpointFormatError(f"{url}: contains no completed checkpoint (no chk-<n>/{METADATA}){_WHERE}")
    return [u for _, u in sorted(found, reverse=True)]


def _completed_in(fs: Any, url: str, entries: list[str]) -> list[tuple[int, str]]:
    found = []
    for e in entries:
        m = _CHK.search(e.rstrip("/"))
        if m and fs.exists(posixpath.join(e, METADATA)):
            found.append((int(m.group(1)), f"{url.rstrip('/')}/chk-{m.group(1)}"))
    return found


def _newest_job(fs: Any, url: str, entries: list[str]) -> list[str]:
    """A base checkpoint directory: the checkpoints of the job whose newest completed checkpoint
    completed last (its ``_metadata``'s ``completed_ms``), newest first."""
    best: tuple[int, int, list[str]] | None = None
    jobs = 0
    for e in entries:
        name = e.rstrip("/").rsplit("/", 1)[-1]
        if name in (SHARED, "taskowned") or name.startswith("."):
            continue
        try:
            if not fs.isdir(e):
                continue
            found = _completed_in(fs, f"{url.rstrip('/')}/{name}", fs.ls(e, detail=False))
        except OSError:
            continue
        if not found:
            continue
        jobs += 1
        newest_id, newest = max(found)
        try:
            completed = int(json.loads(fs.cat_file(posixpath.join(fsspec.core.url_to_fs(newest)[1], METADATA)))
                            .get("completed_ms", 0))
        except (OSError, ValueError):
            completed = 0  # unreadable: still a candidate, the restore says what is wrong with it
        key = (completed, newest_id)
        if best is None or key > best[:2]:
            best = (completed, newest_id, [u for _, u in sorted(found, reverse=True)])
    if best is None:
        raise CheckpointFormatError(f"{url}: contains no completed checkpoint (no chk-<n>/{METADATA}, nor "
                                    f"<job id>/chk-<n>/{METADATA}) and is no savepoint (no {METADATA}){_WHERE}")
    return best[2]
