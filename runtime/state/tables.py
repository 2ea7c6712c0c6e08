"""Copy-on-write state tables: what lets a snapshot run while records keep flowing.

A table maps keys to values in one dict (the *base*). At a checkpoint barrier
``freeze`` hands the base to the snapshot writer and opens an empty *delta*;
from then on writes go to the delta (deletes leave a tombstone), reads look in
the delta first. The synchronous phase is O(1) whatever the table size (the
design page measured ``dict.copy()`` of 1M entries at ~140 ms). When the
snapshot is written, ``thaw`` folds the delta back into the base.

Small tables of immutable values are copied instead (``dict.copy`` is C-speed: ~1-2 ms
for 50k entries, and checking the values' types about as much): a table whose keys are
mostly touched between two checkpoints (a running sum over 100k keys at 1 s intervals)
otherwise pays a second dict lookup and a delta insert on every access while the
snapshot is written, and the fold afterwards, measured at twice the cost of the
state accesses themselves (bench/w1.py, per-record path).

Reads of a mutable value from the frozen base copy it into the delta first
(copy-on-read), so a function that appends to the list it read cannot change
what the snapshot writer is serialising.
"""

from __future__ import annotations

import copy
from itertools import islice
from typing import Any, Iterator

import numpy as np

from ..lazy import LazyModule
from ..keygroups import group_entries
from .ttl import TtlValue

pd = LazyModule("pandas")  # only keyed aggregations need it: not loaded by every worker

_MISSING = object()
TOMBSTONE = object()
_IMMUTABLE = (int, float, str, bytes, bool, type(None), complex, frozenset)
_SCALARS = frozenset(_IMMUTABLE) - {frozenset}  # immutable without looking inside
# Up to this many entries a table of scalar values is copied at the barrier (a few ms at most)
# rather than frozen copy-on-write; beyond it the synchronous copy would stall the records.
COPY_MAX_ENTRIES = 1 << 17


def _is_immutable(value: Any) -> bool:
    t = type(value)
    if t in _IMMUTABLE:
        return True
    if t is tuple or t is TtlValue:  # a TTL state's (value, timestamp): as immutable as its value
        return all(_is_immutable(v) for v in value)
    return False


class KeyOrder:
    """The layout of a heap table's keys in its last columnar snapshot (``snapshot.KeyLayout``, in
    ``key_layout``) and those keys (``keys``, int64): a dict keeps its keys in insertion order, so
    while none was deleted the keys of the last snapshot are the first ones of the next, and only
    the keys added since are hashed and merged in. Read and replaced by the snapshot writer only:
    one thread per slot (``checkpointing.SnapshotWriter``) writing the snapshots in checkpoint order,
    so two snapshots of one table never use it at once."""

    __slots__ = ("key_layout", "keys")

    def __init__(self) -> None:
        self.key_layout: Any = None
        self.keys: np.ndarray | None = None

    def check(self, keys: np.ndarray) -> None:
        """``keys`` are the table's keys now: keep the cached layout only if the keys it laid out are
        still their first ones, in the same order (a deletion moves the keys after it)."""
        laid = self.key_layout
        if laid is not None:
            m = laid.n
            if self.keys is None or m > len(keys) or len(self.keys) < m or not np.array_equal(keys[:m], self.keys[:m]):
                self.key_layout = None
        self.keys = keys


class StateTable:
    """key -> value, copy-on-write while a snapshot is in flight."""

    kind = "dict"
    __slots__ = ("base", "delta", "order")

    def __init__(self) -> None:
        self.base: dict[Any, Any] = {}
        self.delta: dict[Any, Any] | None = None
        self.order = KeyOrder()  # see FrozenDict.columns

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

    def peek(self, key: Any, default: Any = None) -> Any:
        """``get`` from another thread (queryable state): never copies into the delta. Each step is one
        dict operation, so a concurrent thaw (delta folded into base, then dropped) never hides a key."""
        delta = self.delta
        if delta is not None:
            v = delta.get(key, _MISSING)
            if v is not _MISSING:
                return default if v is TOMBSTONE else v
        return self.base.get(key, default)

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
        base = self.base
        if len(base) <= COPY_MAX_ENTRIES:
            types = set(map(type, base.values()))
            if types <= _SCALARS:  # the table stays writable in place: no delta, nothing to thaw
                return FrozenDict(base.copy(), self.order if len(types) == 1 else None)
        self.delta = {}
        # Copy-on-write: the base stays as it is until thaw, so the writer may still find it columnar
        # (every key an int, every value an int or every one a float), checking the types itself.
        return FrozenDict(base, self.order, check_types=True)

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


_COLUMN_DTYPES = {int: np.int64, float: np.float64}


class FrozenDict:
    """The base of a table as of the barrier; read only by the snapshot writer. ``order``: the
    table's ``KeyOrder`` when the values are of one scalar type (a copy: see ``columns``)."""

    def __init__(self, data: dict, order: KeyOrder | None = None, check_types: bool = False):
        self.data = data
        self.order = order
        self.check_types = check_types  # the values' types were not looked at the barrier: columns does

    def columns(self) -> "FrozenAccumulators | None":
        """The entries as two int64 / float64 blocks when every key is an int that fits int64 and
        every value an int that fits int64 (or every value a float), else None. Then the snapshot
        writer writes the table columnar, as the rolling aggregations' tables (numpy alone, no
        Python object per key, no pickling), laid out by key group from the layout of the last
        snapshot's keys when they are still the first ones (``KeyOrder``). The types are exact, so
        a restore gets back the same ints and floats (not bools: their type differs)."""
        data, order = self.data, self.order
        n = len(data)
        if order is None or not n:
            return None
        dtype = None
        if not self.check_types:  # one type of value: FrozenDict's order says so
            dtype = _COLUMN_DTYPES.get(type(next(iter(data.values()))))
            if dtype is None:
                return None
        arrays = int_columns(data, dtype)
        if arrays is None:
            return None
        keys, values = arrays
        order.check(keys)
        return FrozenAccumulators(keys, n, values, key_array=keys, layout_source=order)

    def keys(self) -> list:
        return list(self.data.keys())

    def chunk(self, keys: list) -> dict:
        data = self.data
        return {k: data[k] for k in keys}

    def grouped(self, max_parallelism: int) -> Iterator[tuple[int, dict]]:
        """(key group, its entries) for every non-empty key group, in group order, each group's
        entries in table order: what ``keys`` and ``chunk`` give, with no Python code per key
        (the snapshot writer shares the GIL with the task thread)."""
        yield from group_entries(self.data, max_parallelism)


# Entries per C call of the snapshot writer over a frozen table. A C call holds the GIL from start to end:
# the task thread, and a queryable state lookup answered in it, wait for at most one slice (~1-2 ms)
# rather than a whole table (~15 ms for 500k entries, several times per snapshot).
_SLICE = 1 << 16


def int_columns(data: dict, dtype: Any = None) -> tuple[np.ndarray, np.ndarray] | None:
    """A dict's keys as int64 and its values as int64 or float64 (``dtype``: the values' type when
    known), or None unless every key is an int that fits int64 and every value an int that fits
    int64 or every value a float (exact types: bools are not ints here). Numpy alone, a slice per
    C call: the columnar form of a ValueState in a snapshot (``snapshot.serialize``)."""
    n = len(data)
    if not n:
        return None
    if dtype is None:
        types = _types(data.values(), n)
        dtype = _COLUMN_DTYPES.get(types.pop()) if len(types) == 1 else None
    if dtype is None or _types(data, n) != {int}:
        return None
    try:
        return _array(data, n, np.int64), _array(data.values(), n, dtype)
    except OverflowError:  # an int beyond int64
        return None


def _types(entries: Any, n: int) -> set:
    """The types of ``entries`` (n of them), a slice per C call; stops once there are two."""
    it, types = iter(entries), set()
    for _ in range(0, n, _SLICE):
        types.update(map(type, islice(it, _SLICE)))
        if len(types) > 1:
            break
    return types


def _array(entries: Any, n: int, dtype: Any) -> np.ndarray:
    """``np.fromiter(entries)``, a slice per C call (OverflowError: an int beyond the dtype)."""
    it, out = iter(entries), np.empty(n, dtype=dtype)
    for start in range(0, n, _SLICE):
        stop = min(n, start + _SLICE)
        out[start:stop] = np.fromiter(islice(it, stop - start), dtype=dtype, count=stop - start)
    return out


_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


class KeyList(list):
    """The keys of an ``AccumulatorTable`` by slot (a list: slot -> key), and, while every key is a
    Python ``int`` that fits int64, the same keys as one int64 numpy array.

    Both are append-only, so a snapshot can take the first ``n`` keys at the barrier in O(1) (a view
    of the array) while new keys keep coming, and the snapshot writer cuts int keys into chunks with
    numpy alone: no object array, no per-key Python objects. The array grows by doubling: a view
    handed out keeps the old buffer alive, whose first ``n`` entries never change.

    ``key_layout`` caches the key groups of the first keys and their order by key group
    (``snapshot.KeyLayout``); the snapshot writer reads and replaces it, extending it by the keys
    appended since. Tables that share one key list (a window's column tables) share the layout.
    """

    __slots__ = ("_ints", "_size", "key_layout")

    def __init__(self) -> None:
        super().__init__()
        self._ints: np.ndarray | None = np.zeros(0, dtype=np.int64)  # None: some key is not an int64
        self._size = 0  # keys in _ints (== len(self) while _ints is not None)
        self.key_layout: Any = None

    def add_ints(self, array: np.ndarray, keys: list) -> None:
        """Append int keys given both ways: ``array`` (int64) and ``keys`` (the same as Python ints)."""
        self.extend(keys)
        if self._ints is not None:
            self._put(array)

    def add(self, keys: list) -> None:
        """Append keys of any type (few of them, or not ints): checked one by one."""
        self.extend(keys)
        if self._ints is None:
            return
        if all(type(k) is int and _INT64_MIN <= k <= _INT64_MAX for k in keys):  # bools are not: their type differs
            self._put(np.array(keys, dtype=np.int64))
        else:
            self._ints = None

    def _put(self, array: np.ndarray) -> None:
        need = self._size + len(array)
        if need > len(self._ints):  # type: ignore[arg-type]
            grown = np.empty(max(need, 2 * len(self._ints), 1024), dtype=np.int64)  # type: ignore[arg-type]
            grown[: self._size] = self._ints[: self._size]  # type: ignore[index]
            self._ints = grown
        self._ints[self._size : need] = array  # type: ignore[index]
        self._size = need

    def array(self, n: int) -> np.ndarray | None:
        """The first ``n`` keys as an int64 array (a view), or None if some key is not an int64."""
        ints = self._ints
        if ints is None or self._size != len(self) or n > self._size:
            return None  # (a list method other than add/add_ints appended: the array is no longer whole)
        return ints[:n]


class AccumulatorTable:
    """Numeric per-key accumulators for built-in rolling aggregations (sum/min/max).

    Keys map to slots in an append-only list (so the snapshot writer can read
    the first ``n`` while new keys are added; int keys are also kept as an int64
    array, see ``KeyList``), values live in one numpy array; freezing copies only
    the array (~8 MB and a few ms per 1M keys).
    """

    kind = "accumulators"

    def __init__(self) -> None:
        self.slot_of: dict[Any, int] = {}
        self.keys_by_slot: KeyList = KeyList()
        self.acc = np.zeros(0, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.keys_by_slot)

    def slots(self, keys: list | np.ndarray) -> np.ndarray:
        """The slot of each key; new keys get new slots. ``keys``: a list, or an int64 array (restore)."""
        int_array = keys if isinstance(keys, np.ndarray) and keys.dtype == np.int64 else None
        if isinstance(keys, np.ndarray):
            keys = keys.tolist()
        get = self.slot_of.get
        found = [get(k, -1) for k in keys]
        arr = np.asarray(found, dtype=np.int64)
        missing = np.flatnonzero(arr < 0)
        if not len(missing):
            return arr
        if int_array is not None or (len(missing) > 64 and type(keys[int(missing[0])]) in (int, str)):
            # Many new keys (every key of a fresh window): number them in one vectorised pass.
            if int_array is not None:
                new_array: Any = int_array[missing]
                types = {int}
            else:
                new = [keys[i] for i in missing.tolist()]
                types = set(map(type, new))  # all ints or all strs (no bools: their key groups differ); else one by one
                new_array = None
                if types == {int} and _INT64_MIN <= min(new) and max(new) <= _INT64_MAX:
                    new_array = np.asarray(new, dtype=np.int64)
                elif types == {str}:
                    new_array = np.asarray(new, dtype=object)
            if new_array is not None:
                codes, uniques = pd.factorize(new_array, use_na_sentinel=False)
                base = len(self.keys_by_slot)
                fresh = uniques.tolist()  # Python ints / strs: key groups hash them, not numpy scalars
                self.slot_of.update(zip(fresh, range(base, base + len(fresh))))
                if types == {int}:
                    self.keys_by_slot.add_ints(np.asarray(uniques, dtype=np.int64), fresh)
                else:
                    self.keys_by_slot.add(fresh)
                arr[missing] = base + codes
                return arr
        found = [None if f < 0 else f for f in found]
        if None in found:
            slot_of, by_slot = self.slot_of, self.keys_by_slot
            fresh = []
            base = len(by_slot)
            for i, s in enumerate(found):
                if s is None:
                    k = keys[i]
                    s = slot_of.get(k)
                    if s is None:
                        s = slot_of[k] = base + len(fresh)
                        fresh.append(k)
                    found[i] = s
            by_slot.add(fresh)
        return np.asarray(found, dtype=np.int64)

    def ensure_capacity(self, n: int, kind: str) -> None:
        if kind == "f" and self.acc.dtype.kind != "f":
            self.acc = self.acc.astype(np.float64)
        if n > len(self.acc):
            grown = np.zeros(max(n, 2 * len(self.acc), 1024), dtype=self.acc.dtype)
            grown[: len(self.acc)] = self.acc
            self.acc = grown

    def freeze(self) -> "FrozenAccumulators":
        keys = self.keys_by_slot
        n = len(keys)
        return FrozenAccumulators(keys, n, self.acc[:n].copy())

    def thaw(self) -> None:
        pass  # the snapshot holds its own copy of the values; keys are append-only

    def load(self, chunk: tuple) -> None:
        """Restore one key group: (keys, values); keys an int64 array (columnar chunks) or a list."""
        keys, values = chunk
        if not len(keys):
            return
        s = self.slots(keys if isinstance(keys, np.ndarray) and keys.dtype == np.int64 else list(keys))
        self.ensure_capacity(len(self.keys_by_slot), values.dtype.kind)
        self.acc[s] = values


class FrozenAccumulators:
    """An accumulator table as of the barrier, for the snapshot writer (``snapshot.serialize``).

    The interface the writer uses (a window's column views can give the same):

    * ``n``: the number of keys; ``values``: their values (numpy, length ``n``);
    * ``key_array()``: the keys as int64 (length ``n``), or None when they are not all int64
      (then ``keys()`` (a list) and ``chunk_positions(positions)`` -> (key list, values) are used);
    * ``layout_source``: the key list the keys are the first ``n`` of; frozen tables with the same
      source share one cached key layout, kept in its ``key_layout`` attribute;
    * ``present``: None, or a bool array (length ``n``): only those keys belong to this table (a
      view over a key list shared with other tables).
    """

    def __init__(self, keys_by_slot: Any, n: int, values: np.ndarray, key_array: np.ndarray | None = None,
                 present: np.ndarray | None = None, layout_source: Any = None):
        """``keys_by_slot``: a list or array whose first ``n`` entries are the keys; the rest as above
        (by default: the int64 view of a ``KeyList``, all keys present, the key list as layout source)."""
        self._keys = keys_by_slot
        self.n = n
        self.values = values
        if key_array is None and isinstance(keys_by_slot, KeyList):
            key_array = keys_by_slot.array(n)  # O(1): a view
        self._ints = key_array
        self.present = present
        self.layout_source = keys_by_slot if layout_source is None else layout_source
        self._key_array: np.ndarray | None = None  # the keys as one object array, for cutting chunks

    def key_array(self) -> np.ndarray | None:
        return self._ints

    def keys(self) -> list:
        return self._keys[: self.n]  # append-only list: the first n never change

    def chunk_positions(self, positions: np.ndarray) -> tuple:
        if self._key_array is None:  # once per snapshot: then each key group's keys are one numpy take
            self._key_array = np.empty(self.n, dtype=object)
            self._key_array[:] = self._keys[: self.n]
        return self._key_array[positions].tolist(), self.values[positions]
