"""Keys -> key groups -> subtasks, as Flink's KeyGroupRangeAssignment.

A key's key group is a *stable* hash of the key modulo max parallelism; subtask
``i`` of ``p`` owns the contiguous key-group range ``key_group_range(max_p, p, i)``.
Python's ``hash()`` is salted per process for ``str``/``bytes`` and so is never
used: routing and state placement must agree across processes, restarts and
``PYTHONHASHSEED`` values.

The hash has one definition with two implementations: a vectorised numpy one
for integer columns and a scalar one for everything else. Both must give the
same value for the same key (tested), because a key can reach an operator
through either path.

It sits below both the network (which routes records by it) and the state (which
shards by it): partitioning is neither, and neither imports the other.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import struct
import uuid
import zlib
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

DEFAULT_MAX_PARALLELISM = 128
UPPER_BOUND_MAX_PARALLELISM = 1 << 15

_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_M1 = 0xBF58476D1CE4E5B9
_M2 = 0x94D049BB133111EB
# Type tags keep e.g. the string "1" and the int 1 apart.
_TAG_STR = 0x5354_5200_0000_0001
_TAG_BYTES = 0x4259_5400_0000_0002
_TAG_FLOAT = 0x464C_5400_0000_0003
_TAG_TUPLE = 0x5455_5000_0000_0004
_TAG_NONE = 0x4E4F_4E00_0000_0005
_TAG_BIGINT = 0x4249_4700_0000_0006


def _mix(z: int) -> int:
    """splitmix64 finaliser on a 64-bit unsigned int."""
    z = (z + _GOLDEN) & _MASK
    z = ((z ^ (z >> 30)) * _M1) & _MASK
    z = ((z ^ (z >> 27)) * _M2) & _MASK
    return z ^ (z >> 31)


def _mix_array(x: np.ndarray) -> np.ndarray:
    z = x.astype(np.uint64, copy=False) + np.uint64(_GOLDEN)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(_M1)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(_M2)
    return z ^ (z >> np.uint64(31))


def _bytes_hash(data: bytes, tag: int) -> int:
    return _mix(((zlib.crc32(data) << 32) | (len(data) & 0xFFFFFFFF)) ^ tag)


def key_hash(key: Any) -> int:
    """Stable 64-bit hash of one key."""
    if key is None:
        return _mix(_TAG_NONE)
    t = type(key)
    if t is int or t is bool or isinstance(key, (int, np.integer)):
        k = int(key)
        if -(1 << 63) <= k < (1 << 64):
            return _mix(k & _MASK)
        return _bytes_hash(str(k).encode(), _TAG_BIGINT)
    if t is str:
        return _bytes_hash(key.encode("utf-8", "surrogatepass"), _TAG_STR)
    if isinstance(key, float) or isinstance(key, np.floating):
        f = float(key)
        # Equal keys must hash equally, and 1 == 1.0 in Python.
        if f.is_integer() and -(2.0**63) <= f < 2.0**63:
            return _mix(int(f) & _MASK)
        return _mix(struct.unpack("<Q", struct.pack("<d", f))[0] ^ _TAG_FLOAT)
    if isinstance(key, (bytes, bytearray, memoryview)):
        return _bytes_hash(bytes(key), _TAG_BYTES)
    if isinstance(key, tuple):
        h = _TAG_TUPLE
        for element in key:
            h = _mix((h * 31 + key_hash(element)) & _MASK)
        return h
    if isinstance(key, str):  # str subclasses, e.g. enum.StrEnum
        return key_hash(str(key))
    if isinstance(key, (_dt.datetime, _dt.date, _dt.time, _dt.timedelta, decimal.Decimal, uuid.UUID)):
        return _bytes_hash(f"{type(key).__name__}:{key}".encode(), _TAG_STR)
    raise TypeError(
        f"key {key!r} of type {type(key).__name__} has no stable hash; keys must be "
        "int, str, bytes, float, bool, None, datetime/date/time, Decimal, UUID, or a tuple of these"
    )


def key_hashes(keys: Sequence[Any] | np.ndarray) -> np.ndarray:
    """Stable hashes of many keys, as uint64; vectorised for integer keys."""
    if isinstance(keys, np.ndarray):
        if keys.dtype.kind in "iu" and keys.dtype.itemsize <= 8:
            if keys.dtype.kind == "u" and keys.dtype.itemsize == 8:
                return _mix_array(keys)
            return _mix_array(keys.astype(np.int64, copy=False))
        if keys.dtype.kind == "b":
            return _mix_array(keys.astype(np.int64))
        keys = keys.tolist()
    elif keys and set(map(type, keys)) == {int}:
        try:  # a list of ints that fit int64 (snapshots of int-keyed state): the vectorised path
            return _mix_array(np.array(keys, dtype=np.int64))
        except OverflowError:
            pass
    return np.fromiter((key_hash(k) for k in keys), dtype=np.uint64, count=len(keys))


def assign_key_groups(keys: Sequence[Any] | np.ndarray, max_parallelism: int) -> np.ndarray:
    """Key group of each key, as int64."""
    return (key_hashes(keys) % np.uint64(max_parallelism)).astype(np.int64)


def assign_to_key_group(key: Any, max_parallelism: int) -> int:
    return key_hash(key) % max_parallelism


def operator_index_for_key_group(max_parallelism: int, parallelism: int, key_group: Any) -> Any:
    """Subtask owning ``key_group`` (scalar or int64 array)."""
    return key_group * parallelism // max_parallelism


def key_group_range(max_parallelism: int, parallelism: int, index: int) -> range:
    """The contiguous key groups owned by subtask ``index`` of ``parallelism``."""
    start = (index * max_parallelism + parallelism - 1) // parallelism
    end = ((index + 1) * max_parallelism - 1) // parallelism
    return range(start, end + 1)


def check_max_parallelism(max_parallelism: int, parallelism: int) -> None:
    if not 1 <= max_parallelism <= UPPER_BOUND_MAX_PARALLELISM:
        raise ValueError(
            f"max parallelism must be between 1 and {UPPER_BOUND_MAX_PARALLELISM}, got {max_parallelism}"
        )
    if parallelism > max_parallelism:
        raise ValueError(
            f"parallelism {parallelism} exceeds max parallelism {max_parallelism}; "
            "raise it with env.set_max_parallelism(n)"
        )


def subtasks_for_keys(keys: Iterable[Any] | np.ndarray, max_parallelism: int, parallelism: int) -> np.ndarray:
    if not isinstance(keys, (np.ndarray, list, tuple)):
        keys = list(keys)
    return operator_index_for_key_group(max_parallelism, parallelism, assign_key_groups(keys, max_parallelism))


def group_entries(data: dict, max_parallelism: int) -> Iterator[tuple[int, dict]]:
    """A dict's entries by key group, in key-group order (the heap tables' and TTL states' snapshots)."""
    n = len(data)
    if not n:
        return
    keys = list(data)
    groups = assign_key_groups(keys, max_parallelism)
    groups = groups.astype(np.int16 if max_parallelism <= (1 << 15) else np.int32)  # stable argsort: a radix sort
    order = np.argsort(groups, kind="stable")
    sorted_groups = groups[order]
    # Object arrays hold references to the keys and values (fromiter does not unpack tuples or lists).
    sorted_keys = np.fromiter(keys, dtype=object, count=n)[order]
    sorted_values = np.fromiter(data.values(), dtype=object, count=n)[order]
    bounds = (np.flatnonzero(np.diff(sorted_groups)) + 1).tolist()
    for start, stop in zip([0, *bounds], [*bounds, n]):
        yield int(sorted_groups[start]), dict(zip(sorted_keys[start:stop].tolist(), sorted_values[start:stop].tolist()))
