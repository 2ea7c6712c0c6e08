"""One key -> slot mapping shared by all the columns (and all the open windows) of a columnar
operator, so each record's key is hashed once per batch instead of once per window and column.

Slots are append-only: a key keeps its slot for the life of the index, so an array indexed by
slot stays valid while new keys arrive (arrays only grow). Integer keys (numpy int64, as
``batch.extract_keys`` returns an integer key column) go through pandas' C hash table in one
vectorised call per batch; any other key (str, tuples, a column with nulls) through pandas'
Python-object hash table (``==`` and ``hash`` as in a dict, so ``1``, ``1.0`` and ``True`` are one
key, as in every other keyed state table). An int index that meets a non-int key turns into an
object one, keeping every slot.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from pandas._libs import hashtable as _ht

_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


def _as_int64(keys: Any) -> np.ndarray | None:
    """The keys as an int64 array if they all are (Python or numpy) ints in range, else None."""
    if isinstance(keys, np.ndarray):
        if keys.dtype.kind == "i":
            return keys.astype(np.int64, copy=False)
        if keys.dtype.kind == "u" and (not len(keys) or int(keys.max()) <= _INT64_MAX):
            return keys.astype(np.int64)
        return None
    if not keys:
        return np.zeros(0, dtype=np.int64)
    # no bools: True is the key 1 for a dict but must not turn a bool key column into ints
    if any(type(k) is not int for k in keys):
        return None
    if min(keys) < _INT64_MIN or max(keys) > _INT64_MAX:
        return None
    return np.asarray(keys, dtype=np.int64)


def _as_objects(keys: Any) -> np.ndarray:
    if isinstance(keys, np.ndarray) and keys.dtype == object:
        return keys
    arr = np.empty(len(keys), dtype=object)
    arr[:] = keys.tolist() if isinstance(keys, np.ndarray) else list(keys)  # Python values, not numpy scalars
    return arr


class KeyIndex:
    """key -> slot (0, 1, 2, ... in order of first appearance), vectorised per batch."""

    def __init__(self) -> None:
        self.ints: bool | None = None  # decided by the first keys seen
        self._table: Any = None
        self._keys = np.zeros(0, dtype=np.int64)  # keys by slot (int64, or object once not all ints)
        self.n = 0
        # The object hash table treats None / NaN as "missing" (label -1): such keys get slots here.
        self._na_slots: dict[Any, int] = {}

    def __len__(self) -> int:
        return self.n

    @property
    def keys_by_slot(self) -> np.ndarray:
        """The keys of slots 0..n-1 (int64 array, or object array of Python values)."""
        return self._keys[: self.n]

    def keys_at(self, slots: np.ndarray) -> np.ndarray:
        return self._keys[slots]

    def key_list(self, slots: np.ndarray) -> list:
        """Python values (ints stay Python ints: key groups hash those, as they hash the records' keys)."""
        return self._keys[slots].tolist()

    def slots(self, keys: Any) -> np.ndarray:
        """The slot of every key (numpy int array or list), new keys numbered in order of first appearance."""
        if self.ints is None:
            self.ints = _as_int64(keys) is not None
            self._table = _ht.Int64HashTable(1 << 10) if self.ints else _ht.PyObjectHashTable(1 << 10)
            self._keys = np.zeros(0, dtype=np.int64 if self.ints else object)
        if self.ints:
            arr = _as_int64(keys)
            if arr is not None:
                return self._assign(arr)
            self._to_objects()
        return self._assign(_as_objects(keys))

    def _assign(self, values: np.ndarray) -> np.ndarray:
        before = self.n
        fresh = _ht.Int64Vector() if self.ints else _ht.ObjectVector()
        # new keys get labels before, before + 1, ... in order of first appearance; `fresh` lists them
        labels = self._table.get_labels(values, fresh, before, -1)
        new_keys = fresh.to_array()
        n = before + len(new_keys)
        if not self.ints:
            missing = np.flatnonzero(labels < 0)
            if len(missing):
                labels = labels.copy()
                extra = []
                for i in missing.tolist():
                    s = self._na_slot(values[i])
                    if s is None:
                        s = self._na_slots[values[i]] = n + len(extra)
                        extra.append(values[i])
                    labels[i] = s
                if extra:
                    tail = np.empty(len(extra), dtype=object)
                    tail[:] = extra
                    new_keys = np.concatenate([new_keys, tail])
                    n += len(extra)
        if n > before:
            if n > len(self._keys):
                grown = np.zeros(max(n, 2 * len(self._keys), 1024), dtype=self._keys.dtype)
                grown[:before] = self._keys[:before]
                self._keys = grown
            self._keys[before:n] = new_keys
            self.n = n
        return labels.astype(np.int64, copy=False)

    def _na_slot(self, key: Any) -> int | None:
        """The slot of a key the object hash table calls missing (None, NaN), if it has one."""
        for known, s in self._na_slots.items():  # a handful at most; NaN != NaN: compare by identity too
            if known is key or known == key:
                return s
        return None

    def _to_objects(self) -> None:
        """Some key is not an int64: keep every slot, continue with the object hash table."""
        old = self._keys[: self.n].tolist()
        self.ints = False
        self._table = _ht.PyObjectHashTable(max(1 << 10, 2 * self.n))
        self._keys = np.zeros(0, dtype=object)
        self.n = 0
        if old:
            self._assign(_as_objects(old))


__all__ = ["KeyIndex"]
