"""Copying a kept operator's files into the new savepoint, checked on the way: the I/O edge.

A savepoint is self-contained (its handles name files relative to its own directory), so the files
of the operators a ``SavepointWriter`` keeps are copied, under the same relative names, never
referenced across directories, and the source is only read. Each file's size and CRC32C are checked
against what its handle recorded before it is written: a damaged source file fails the write,
naming the file and the operator, instead of passing the damage on.
"""

from __future__ import annotations

import posixpath

import fsspec

from streamjob.runtime.checkpoint import checksums
from streamjob.runtime.checkpoint.storage import StateLocation, cannot_write, write_file

from .rewrite import FileCopy
from .source import StateReadError


def copy_file(copy: FileCopy, source_root: str, target_root: str, storage_options: dict | None = None) -> int:
    """Copy one file; returns its size."""
    source = StateLocation(source_root, storage_options)
    what = f"state file {source.url}/{copy.path} of {copy.owner}"
    try:
        data = source.fs.cat_file(source.path(copy.path))
    except FileNotFoundError:
        raise StateReadError(f"cannot copy {what}: it is missing") from None
    except OSError as e:
        raise StateReadError(f"cannot copy {what}: {type(e).__name__}: {e}") from None
    if copy.size is not None and len(data) != copy.size:
        raise StateReadError(f"cannot copy {what}: it has {len(data)} bytes, the savepoint recorded {copy.size} "
                             f"(truncated or overwritten)")
    problem = checksums.mismatch(copy.crc32c, data)
    if problem:
        raise StateReadError(f"cannot copy {what}: {problem}: the file is damaged")
    fs, root = fsspec.core.url_to_fs(target_root, **(storage_options or {}))
    try:
        write_file(fs, posixpath.join(root, copy.path), data, exclusive=False)
    except Exception as e:  # noqa: BLE001 - the store: named, with its URL
        raise cannot_write("savepoint", target_root, e) from None
    return len(data)
