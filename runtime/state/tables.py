"""Copy-on-write state tables: what lets a snapshot run while records keep flowing.

A table maps keys to values in one dict (the *base*). At a checkpoint barrier
``freeze`` hands the base to the snapshot writer and opens an empty *delta*;
from then on writes go to the delta (deletes leave a tombstone), reads look in
the delta first. The synchronous phase is O(1) whatever the table size (the
design page measured ``dict.copy()`` of 1M entries at ~140 ms). When the
snapshot is written, ``thaw`` folds the delta back into the base.

Reads of a mutable value from the frozen base copy it into the delta first
(copy-on-read), so a function that appends to the list it read cannot change
what the snapshot writer is serialising.
"""

from __future__ import annotations

import copy
from typing import Any, Iterator

import numpy as np

from ..lazy import LazyModule
from .ttl import TtlValue

pd = LazyModule("pandas")  # only keyed aggregations need it: not loaded by every worker

_MISSING = object()
TOMBSTONE = object()
_IMMUTABLE = (int, float, str, bytes, bool, type(None), complex, frozenset)


def _is_immutable(value: Any) -> bool:
    t = type(value)
    if t in _IMMUTABLE:
        return True
    if t is tuple or t is TtlValue:  # a TTL state's (value, timestamp): as immutable as its value
        return all(_is_immutable(v) for v in value)
    return False


class StateTable:
    """key -> value, copy-on-write while a snapshot is in flight."""

    kind = "dict"
    __slots__ = ("base", "delta")

    def __init__(self) -> None:
        self.base: dict[Any, Any] = {}
        self.delta: dict[Any, Any] | None = None

    def get(self, key: Any, default: Any = None) -> Any:
        delta = self.delta
        if delta is None:
            return self.base.get(key, default)
        v = delta.get(key, _MISSING)
        if v is not _MISSING:
            return default if v is TOMBSTONE else v
        v = self.base.get(key, _MISSING)
        if v is _MISSING:
            return default
        if not _is_immutable(v):
            v = copy.deepcopy(v)
            delta[key] = v
        return v

    def put(self, key: Any, value: Any) -> None:
        if self.delta is None:
            self.base[key] = value
        else:
            self.delta[key] = value

    def remove(self, key: Any) -> None:
        if self.delta is None:
            self.base.pop(key, None)
        elif key in self.base:
            self.delta[key] = TOMBSTONE
        else:
            self.delta.pop(key, None)

    def contains(self, key: Any) -> bool:
        return self.get(key, _MISSING) is not _MISSING

    def keys(self) -> Iterator[Any]:
        if self.delta is None:
            yield from self.base.keys()
            return
        for k, v in self.delta.items():
            if v is not TOMBSTONE:
                yield k
        for k in self.base.keys():
            if k not in self.delta:
                yield k

    def items(self) -> Iterator[tuple[Any, Any]]:
        """Every entry (restore-time scans, e.g. rebuilding the timer index)."""
        for k in list(self.keys()):
            yield k, self.get(k)

    # -- snapshots ---------------------------------------------------------------
    def freeze(self) -> "FrozenDict":
        if self.delta is not None:
            raise RuntimeError("a snapshot of this state table is still being written")
        self.delta = {}
        return FrozenDict(self.base)

    def thaw(self) -> None:
        delta = self.delta
        if delta is None:
            return
        base = self.base
        base.update(delta)
        if any(v is TOMBSTONE for v in delta.values()):
            for k in [k for k, v in delta.items() if v is TOMBSTONE]:
                del base[k]
        self.delta = None

    def load(self, chunk: dict) -> None:
        """Restore (before processing starts): add the entries of one key group."""
        self.base.update(chunk)


class FrozenDict:
    """The base of a table as of the barrier; read only by the snapshot writer."""

    def __init__(self, data: dict):
        self.data = data

    def keys(self) -> list:
        return list(self.data.keys())

    def chunk(self, keys: list) -> dict:
        data = self.data
        return {k: data[k] for k in keys}


class AccumulatorTable:
    """Numeric per-key accumulators for built-in rolling aggregations (sum/min/max).

    Keys map to slots in an append-only list (so the snapshot writer can read
    the first ``n`` while new keys are added), values live in one numpy array;
    freezing copies only the array (~8 MB and a few ms per 1M keys).
    """

    kind = "accumulators"

    def __init__(self) -> None:
        self.slot_of: dict[Any, int] = {}
        self.keys_by_slot: list[Any] = []
        self.acc = np.zeros(0, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.keys_by_slot)

    def slots(self, keys: list) -> np.ndarray:
        get = self.slot_of.get
        found = [get(k, -1) for k in keys]
        arr = np.asarray(found, dtype=np.int64)
        missing = np.flatnonzero(arr < 0)
        if not len(missing):
            return arr
        if len(missing) > 64 and type(keys[int(missing[0])]) in (int, str):
            # Many new keys (every key of a fresh window): number them in one vectorised pass.
            new = [keys[i] for i in missing.tolist()]
            types = set(map(type, new))  # all ints or all strs (no bools: their key groups differ); else one by one
            if types == {str} or (types == {int} and -(1 << 63) <= min(new) and max(new) < (1 << 63)):
                codes, uniques = pd.factorize(np.asarray(new, dtype=object if types == {str} else np.int64),
                                              use_na_sentinel=False)
                base = len(self.keys_by_slot)
                fresh = uniques.tolist()  # Python ints / strs: key groups hash them, not numpy scalars
                self.slot_of.update(zip(fresh, range(base, base + len(fresh))))
                self.keys_by_slot.extend(fresh)
                arr[missing] = base + codes
                return arr
        found = [None if f < 0 else f for f in found]
        if None in found:
            slot_of, by_slot = self.slot_of, self.keys_by_slot
            for i, s in enumerate(found):
                if s is None:
                    k = keys[i]
                    s = slot_of.get(k)
                    if s is None:
                        s = slot_of[k] = len(by_slot)
                        by_slot.append(k)
                    found[i] = s
        return np.asarray(found, dtype=np.int64)

    def ensure_capacity(self, n: int, kind: str) -> None:
        if kind == "f" and self.acc.dtype.kind != "f":
            self.acc = self.acc.astype(np.float64)
        if n > len(self.acc):
            grown = np.zeros(max(n, 2 * len(self.acc), 1024), dtype=self.acc.dtype)
            grown[: len(self.acc)] = self.acc
            self.acc = grown

    def freeze(self) -> "FrozenAccumulators":
        n = len(self.keys_by_slot)
        return FrozenAccumulators(self.keys_by_slot, n, self.acc[:n].copy())

    def thaw(self) -> None:
        pass  # the snapshot holds its own copy of the values; keys are append-only

    def load(self, chunk: tuple) -> None:
        keys, values = chunk
        if not len(keys):
            return
        s = self.slots(list(keys))
        self.ensure_capacity(len(self.keys_by_slot), values.dtype.kind)
        self.acc[s] = values


class FrozenAccumulators:
    def __init__(self, keys_by_slot: list, n: int, values: np.ndarray):
        self._keys = keys_by_slot
        self.n = n
        self.values = values
        self._key_array: np.ndarray | None = None  # the keys as one object array, for cutting chunks

    def keys(self) -> list:
        return self._keys[: self.n]  # append-only list: the first n never change

    def chunk_positions(self, positions: np.ndarray) -> tuple:
        if self._key_array is None:  # once per snapshot: then each key group's keys are one numpy take
            self._key_array = np.empty(self.n, dtype=object)
            self._key_array[:] = self._keys[: self.n]
        return self._key_array[positions].tolist(), self.values[positions]
