"""CRC32C checksums of state and metadata files, and checking them on restore.

Every state file's handle carries the file's checksum (``"crc32c"``), and the
index inside it the checksum of each chunk a restore may read on its own (one
key group of one state, a columnar table's rows of one key group, the operator
state, a RocksDB private file); every SST file uploaded to ``shared/`` has its
checksum beside its size in the handle; ``_metadata`` ends with the checksum
of everything before it. A restore checks what it reads, so a damaged file is
an error naming the file, the operator and the key group, never silently
wrong state.

CRC32C (Castagnoli) rather than zlib's CRC-32 or xxhash: it is what RocksDB,
S3 (``x-amz-checksum-crc32c``) and Google Cloud Storage check with, and the
``crc32c`` package (ICRAR, maintained since 2017) computes it with the CPU's
instruction (SSE4.2 / ARMv8, software elsewhere): measured here ~7.8 GB/s
against ~2.6 GB/s for ``zlib.crc32``, ~0.1 us per call on small chunks. It
takes any buffer (bytes, memoryview, numpy slices) without a copy, and lets
the GIL go on large buffers, so the snapshot writer thread computing it does
not stall the task thread. (``google-crc32c`` is as fast but refuses
memoryviews of slices.)
"""

from __future__ import annotations

from typing import Any

from crc32c import crc32c as _crc32c

ALGORITHM = "crc32c"
KEY = "crc32c"  # the field of a handle, shared-file reference or _metadata holding the checksum


def checksum(data: Any, value: int = 0) -> int:
    """CRC32C of a bytes-like object (continuing from ``value``, the checksum of what came before)."""
    return _crc32c(data, value)


def file_checksum(path: str, block: int = 8 << 20) -> int:
    """CRC32C of a local file, read in blocks (an SST file can be large)."""
    value = 0
    with open(path, "rb") as f:
        while True:
            part = f.read(block)
            if not part:
                return value
            value = _crc32c(part, value)


def mismatch(recorded: Any, data: Any) -> str | None:
    """What is wrong with ``data`` whose checksum was recorded as ``recorded`` (None: nothing;
    a checksum that was not recorded, as in checkpoints of earlier versions, cannot be checked)."""
    if recorded is None:
        return None
    actual = _crc32c(data)
    try:
        if int(recorded) == actual:
            return None
    except (TypeError, ValueError):
        return f"its recorded checksum {recorded!r} is not a number"
    return f"checksum mismatch ({ALGORITHM} {actual:#010x}, recorded {int(recorded):#010x})"


__all__ = ["ALGORITHM", "KEY", "checksum", "file_checksum", "mismatch"]
