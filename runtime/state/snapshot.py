"""The bytes of one operator subtask's snapshot, and reading them back.

A snapshot is a sequence of chunks: one per (keyed state, key group), plus one
for all operator state. The index (state -> key group -> offset, length)
travels in the state handle, so a restore at another parallelism reads exactly
the key groups it now owns and nothing else. Key groups are computed here, in
the asynchronous phase, not per record.

Chunks are pickled, except for accumulator tables with int64 keys (the columnar
rolling and window aggregations) and heap ``value`` tables (of any size: a large one, frozen
copy-on-write, has its types checked by the writer) whose keys are all ints
and values all ints or all floats that fit 64 bits (a KeyedProcessFunction's running
sum: ``tables.FrozenDict.columns``; the same from a RocksDB backend's full snapshot,
``ColumnarValues``; read back as the dict they were, so a restore,
into either backend, sees no difference): such a table is *columnar*, two blocks of raw
bytes, its keys (int64) and its values, both ordered by key group; its index
entry says where the blocks are and which slice of them each key group is
(``"columnar": {"keys": [offset, length], "values": [offset, length], "dtype"}``,
``"groups": {key group: [start, stop]}``). Tables that share one key list (a
window's column tables) share one key block. An integer block whose values span
a narrow range is stored as offsets from its minimum in the narrowest unsigned
type that holds them (frame of reference: ``"keys_for"`` / ``"values_for"`` =
``[minimum, stored dtype]``): keys 0..100k and per-window sums take 4 and 2 bytes
instead of 8, and every byte not written is one the writer thread does not copy
or send beside the task thread. They are written and read with
numpy alone: the snapshot writer runs in a Python thread beside the task
thread, and whatever it does in Python per key is taken from the records (the
GIL), so a checkpoint of 100k keys must not cost 100k Python objects. Pickled
accumulator chunks (keys, values) of earlier versions still load.

Checksums: every chunk's index entry ends with its CRC32C (``[offset, length,
crc]``), and a columnar table's entry per key group with the CRC32C of that key
group's rows in the key block and in the value block (``[start, stop, keys
crc, values crc]``): a restore reads only the key groups it owns and checks
exactly those, so damage is reported with the state and key group it hit.
Index entries of earlier versions have no checksum and are read unchecked.
"""

from __future__ import annotations

import pickle
from typing import Any, Iterator

import numpy as np

from ..checkpoint.checksums import checksum, mismatch
from ..keygroups import assign_key_groups

MAGIC = b"SJSNAP1\n"
_KEY_DTYPE = np.dtype("<i8")
_VALUE_DTYPES = {np.dtype(t).str: np.dtype(t) for t in ("<i8", "<f8", "<u8", "<i4", "<f4")}


class SnapshotFormatError(ValueError):
    pass


class KeyLayout:
    """Where the first ``n`` keys of an append-only key list go in a snapshot: their key groups'
    sizes (``counts``, one per key group) and the key positions ordered by key group (``order``,
    stable: within a group by position). Cached on the key list (``KeyList.key_layout``) and
    extended by the keys appended since (``extend``): a table that gained no keys since the last
    checkpoint hashes none, one that gained k hashes k and merges in O(n) with numpy."""

    __slots__ = ("max_parallelism", "n", "order", "counts", "sorted_keys", "key_sums")

    def __init__(self, max_parallelism: int, n: int, order: np.ndarray, counts: np.ndarray):
        self.max_parallelism = max_parallelism
        self.n = n
        self.order = order
        self.counts = counts
        # the int64 keys in ``order`` as the writer stores them (_narrow), once it needed them, and
        # the checksum of each key group's slice of them
        self.sorted_keys: tuple[np.ndarray, list | None] | None = None
        self.key_sums: list[int] | None = None

    @classmethod
    def empty(cls, max_parallelism: int) -> "KeyLayout":
        return cls(max_parallelism, 0, np.zeros(0, dtype=np.int64), np.zeros(max_parallelism, dtype=np.int64))

    def extend(self, new_keys: Any) -> "KeyLayout":
        """The layout of these keys followed by ``new_keys`` (an int64 array, or a list)."""
        k = len(new_keys)
        if not k:
            return self
        maxp = self.max_parallelism
        groups = assign_key_groups(new_keys, maxp)
        groups = groups.astype(np.int16 if maxp <= (1 << 15) else np.int32)  # radix sort: O(k)
        new_order = np.argsort(groups, kind="stable")
        new_counts = np.bincount(groups, minlength=maxp).astype(np.int64)
        n = self.n
        if not n:
            return KeyLayout(maxp, k, new_order.astype(np.int64), new_counts)
        order = np.empty(n + k, dtype=np.int64)
        # Merged, group g holds its old keys, then its new ones: an old key at rank j of the old order
        # moves up by the new keys of the groups before g; a new one sits after all old keys of groups <= g.
        new_before = np.cumsum(new_counts) - new_counts
        old_through = np.cumsum(self.counts)
        order[np.arange(n) + np.repeat(new_before, self.counts)] = self.order
        order[np.arange(k) + np.repeat(old_through, new_counts)] = new_order + n
        return KeyLayout(maxp, n + k, order, self.counts + new_counts)

    def groups(self, present: np.ndarray | None = None) -> tuple[np.ndarray, list[tuple[int, int, int]]]:
        """(order, [(key group, start, stop)]): the key positions in group order, and each non-empty
        group's slice of it; ``present``: only the positions whose flag is set."""
        order, counts = self.order, self.counts
        if present is not None:
            keep = present[order]
            order = order[keep]
            sorted_groups = np.repeat(np.arange(self.max_parallelism), counts)
            counts = np.bincount(sorted_groups[keep], minlength=self.max_parallelism)
        ends = np.cumsum(counts)
        nonzero = np.flatnonzero(counts)
        return order, list(zip(nonzero.tolist(), (ends[nonzero] - counts[nonzero]).tolist(), ends[nonzero].tolist()))


def key_layout(source: Any, keys: Any, n: int, max_parallelism: int) -> KeyLayout:
    """The layout of ``keys`` (the first ``n`` keys of the append-only ``source``), from the one cached
    on ``source`` if any (then only the keys appended since are hashed); caches the result there."""
    cached = getattr(source, "key_layout", None)
    if not isinstance(cached, KeyLayout) or cached.max_parallelism != max_parallelism or cached.n > n:
        cached = KeyLayout.empty(max_parallelism)  # (cached.n > n: a newer snapshot got there first)
    layout = cached.extend(keys[cached.n : n])
    try:
        current = getattr(source, "key_layout", None)
        if not isinstance(current, KeyLayout) or current.n <= layout.n:
            source.key_layout = layout
    except AttributeError:
        pass  # a source without the attribute: serialize() still shares the layout within one snapshot
    return layout


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
    """Appends chunks to one state file and records where each one is (and its checksum)."""

    def __init__(self, checksums: bool = True) -> None:
        # The parts, joined once at the end: appending to one growing bytearray copied a window's
        # tens of MB several times over (reallocations), and once more into the final bytes.
        self.parts: list[Any] = [MAGIC]
        self.size = len(MAGIC)
        self.index: dict[str, Any] = {}
        self.checksums = checksums  # False: as written before version 2 (bench/snapshot_serialize.py's baseline)

    def _append(self, data: Any, summed: bool = True) -> list[int]:
        offset = self.size
        self.parts.append(data)
        self.size += len(data)
        if summed and self.checksums:
            return [offset, len(data), checksum(data)]
        return [offset, len(data)]

    def _groups(self, name: str, kind: str) -> dict:
        return self.index.setdefault("keyed", {}).setdefault(name, {"kind": kind, "groups": {}})["groups"]

    def add_keyed(self, name: str, kind: str, key_group: int, chunk: Any) -> None:
        self._groups(name, kind)[str(key_group)] = self._append(pickle.dumps(chunk, protocol=5))

    def add_block(self, array: np.ndarray) -> list[int]:
        """Raw bytes of a contiguous array (a columnar table's keys or values): [offset, length]
        (restores read slices of it: the checksums are per key group, see ``_group_checksums``)."""
        return self._append(memoryview(np.ascontiguousarray(array)).cast("B"), summed=False)

    def add_operator(self, operator: dict[str, tuple[str, list]]) -> None:
        self.index["operator"] = self._append(pickle.dumps(operator, protocol=5))

    def add_file(self, name: str, data: bytes) -> None:
        """A small file kept verbatim (RocksDB's MANIFEST, CURRENT, OPTIONS)."""
        self.index.setdefault("files", {})[name] = self._append(data)

    def finish(self) -> tuple[bytes, dict]:
        return b"".join(self.parts), self.index


_NARROW = [np.dtype(t) for t in ("<u1", "<u2", "<u4")]


def _narrow(a: np.ndarray) -> tuple[np.ndarray, list | None]:
    """An integer array as (offsets from its minimum in the narrowest unsigned type that holds
    them, [minimum, that type]); anything else, or nothing narrower, as (itself, None)."""
    if a.dtype.kind not in "iu" or not len(a):
        return a, None
    lo, hi = a.min(), a.max()
    span = int(hi) - int(lo)
    for t in _NARROW:
        if t.itemsize >= a.dtype.itemsize:
            break
        if span <= np.iinfo(t).max:
            # the true difference fits in t, so the wrapping subtraction in a's own type is exact
            return (a - lo).astype(t), [int(lo), t.str]
    return a, None


def _widen(stored: np.ndarray, frame: list | None, dtype: np.dtype) -> np.ndarray:
    if frame is None:
        return stored
    return stored.astype(dtype) + dtype.type(frame[0])


def _stored_dtype(col: dict, block: str, dtype: np.dtype) -> tuple[np.dtype, list | None]:
    """The dtype a block was written in, and its frame of reference (None: written as is)."""
    frame = col.get(f"{block}_for")
    if frame is None:
        return dtype, None
    stored = np.dtype(str(frame[1]))
    if stored not in _NARROW:
        raise ValueError(f"unknown stored dtype {frame[1]!r}")
    return stored, [int(frame[0]), stored.str]


def _columnar_values(values: np.ndarray) -> np.ndarray | None:
    """The values as one of the columnar dtypes (little endian), or None: then the chunk is pickled."""
    dtype = values.dtype.newbyteorder("<") if values.dtype.byteorder == ">" else values.dtype
    if dtype.str not in _VALUE_DTYPES:
        return None
    return values.astype(dtype, copy=False)


def serialize(keyed: dict[str, tuple[str, Any]] | None, max_parallelism: int,
              operator: dict[str, tuple[str, list]] | None, checksums: bool = True) -> tuple[bytes, dict]:
    """Frozen keyed tables and copied operator state -> (bytes, index).

    Accumulator tables are written from the interface of ``tables.FrozenAccumulators`` (``n``,
    ``values``, ``key_array()``, ``layout_source``, ``present``; ``keys()`` and ``chunk_positions()``
    for keys that are not int64), other tables from ``keys()`` and ``chunk(keys)``. ``checksums``:
    False only to measure what they cost (bench/snapshot_serialize.py)."""
    builder = SnapshotBuilder(checksums)
    seen: dict[Any, Any] = {}  # tables sharing one key list (a window's columns) group it once
    for name, (kind, frozen) in (keyed or {}).items():
        builder._groups(name, kind)
        if kind == "accumulators" and hasattr(frozen, "layout_source"):
            _write_accumulators(builder, name, frozen, max_parallelism, seen)
            continue
        columns = getattr(frozen, "columns", None) if kind == "value" else None
        columnar = columns() if columns is not None else None
        if columnar is not None:  # a heap ValueState of int keys and int / float values: as accumulators
            _write_accumulators(builder, name, columnar, max_parallelism, seen)
            continue
        grouped = getattr(frozen, "grouped", None)
        if kind != "accumulators" and grouped is not None:  # heap tables: grouped without Python per key
            for kg, chunk in grouped(max_parallelism):
                builder.add_keyed(name, kind, kg, chunk)
            continue
        keys = frozen.keys()
        for kg, positions in _group_positions(keys, max_parallelism):
            if kind == "accumulators":
                chunk = frozen.chunk_positions(positions)
            else:
                chunk = frozen.chunk([keys[i] for i in positions.tolist()])
            builder.add_keyed(name, kind, kg, chunk)
    if operator:
        builder.add_operator(operator)
    return builder.finish()


class ColumnarValues:
    """The ``value`` tables of a snapshot written chunk by chunk (a RocksDB backend's full snapshot:
    ``canonical_chunks``), made columnar as a heap table is (``tables.int_columns``) while every chunk
    of the table has int keys and values of one of the columnar types; at the first chunk that does
    not, the table's chunks so far go into the snapshot pickled, as do the rest. Holds 16 bytes per
    entry of the columnar tables until ``finish``, against the Python dict of each chunk."""

    def __init__(self) -> None:
        self._tables: dict[str, list[tuple[int, np.ndarray, np.ndarray]] | None] = {}  # None: pickled

    def take(self, builder: SnapshotBuilder, name: str, kind: str, key_group: int, chunk: Any) -> bool:
        """True: the chunk is kept for the table's columnar form; False: pickle it (``add_keyed``)."""
        if kind != "value" or not isinstance(chunk, dict):
            return False
        from .tables import int_columns

        held = self._tables.setdefault(name, [])
        if held is None:
            return False
        arrays = int_columns(chunk)
        if arrays is not None and (not held or held[0][2].dtype == arrays[1].dtype):
            held.append((key_group, *arrays))
            return True
        self._tables[name] = None
        for kg, keys, values in held:  # the same ints and floats, back as the dict they came as
            builder.add_keyed(name, kind, kg, dict(zip(keys.tolist(), values.tolist())))
        return False

    def finish(self, builder: SnapshotBuilder, max_parallelism: int) -> None:
        """Write the tables kept columnar (their chunks came in key group order: ``order`` keeps it)."""
        from .tables import FrozenAccumulators

        for name, held in self._tables.items():
            if not held:
                continue
            keys = np.concatenate([k for _, k, _ in held])
            values = np.concatenate([v for _, _, v in held])
            builder._groups(name, "value")
            _write_accumulators(builder, name, FrozenAccumulators(keys, len(keys), values, key_array=keys),
                                max_parallelism, {})
        self._tables.clear()


def _write_accumulators(builder: SnapshotBuilder, name: str, frozen: Any, max_parallelism: int,
                        seen: dict[Any, Any]) -> None:
    """``seen``: what tables written before in this snapshot computed, to share: the layout per key
    list, and per (key list, presence) the key order and groups and the key block once written."""
    n = frozen.n
    if not n:
        return
    source, present = frozen.layout_source, frozen.present
    ints = frozen.key_array()
    layout = seen.get(id(source))
    if layout is None or layout.n != n:
        layout = seen[id(source)] = key_layout(source, ints if ints is not None else frozen.keys(), n, max_parallelism)
    shared = seen.get((id(source), n, id(present)))
    if shared is None:
        order, groups = layout.groups(None if present is None else np.asarray(present, dtype=bool)[:n])
        shared = seen[(id(source), n, id(present))] = [order, groups, None, None]
    order, groups, key_span, key_sums = shared
    values = _columnar_values(frozen.values) if ints is not None else None
    if values is None:  # str / object keys (or exotic values): pickled (key list, values) per key group
        for kg, start, stop in groups:
            builder.add_keyed(name, "accumulators", kg, frozen.chunk_positions(order[start:stop]))
        return
    if key_span is None:  # tables sharing the key list (and which of its keys they hold) share one key block
        if present is None:  # all the first n keys, which never change: sorted (and narrowed) once per layout
            if layout.sorted_keys is None:
                layout.sorted_keys = _narrow(ints[order].astype(_KEY_DTYPE, copy=False))
            stored_keys, key_frame = layout.sorted_keys
            if builder.checksums and layout.key_sums is None:
                layout.key_sums = _group_checksums(stored_keys, groups)
            key_sums = layout.key_sums
        else:
            stored_keys, key_frame = _narrow(ints[order].astype(_KEY_DTYPE, copy=False))
            key_sums = _group_checksums(stored_keys, groups) if builder.checksums else None
        key_span = shared[2] = (builder.add_block(stored_keys), key_frame)
        shared[3] = key_sums = key_sums if builder.checksums else None
    stored_values, value_frame = _narrow(values[order])
    col = {"keys": key_span[0], "values": builder.add_block(stored_values), "dtype": values.dtype.str}
    if key_span[1] is not None:
        col["keys_for"] = key_span[1]
    if value_frame is not None:
        col["values_for"] = value_frame
    entry = builder.index["keyed"][name]
    entry["columnar"] = col
    if key_sums is None:
        entry["groups"] = {str(kg): [start, stop] for kg, start, stop in groups}
    else:
        value_sums = _group_checksums(stored_values, groups)
        entry["groups"] = {str(kg): [start, stop, k, v]
                           for (kg, start, stop), k, v in zip(groups, key_sums, value_sums)}


def _group_checksums(stored: np.ndarray, groups: list[tuple[int, int, int]]) -> list[int]:
    """The checksum of each key group's rows of a block (one call per key group: at most max
    parallelism of them, each on a contiguous slice, no copy). Slices of a memoryview, not of the
    array: handing the checksum a numpy slice costs ~5 us a call, a memoryview slice ~0.3 us."""
    view, width = memoryview(np.ascontiguousarray(stored)).cast("B"), stored.dtype.itemsize
    return [checksum(view[start * width : stop * width]) for _, start, stop in groups]


def _read_columnar(data: bytes, spec: Any, groups: dict, key_groups: range, where: str,
                   ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(keys, values) of the key groups of ``key_groups`` in a columnar table, one pair per run of
    adjacent groups (the groups a subtask owns are one run: the blocks are ordered by key group)."""
    try:
        dtype = _VALUE_DTYPES[spec["dtype"]]
        (ko, kl), (vo, vl) = (_span(data, spec[b], f"{where}, {b} block") for b in ("keys", "values"))
        key_stored, key_frame = _stored_dtype(spec, "keys", _KEY_DTYPE)
        value_stored, value_frame = _stored_dtype(spec, "values", dtype)
    except (KeyError, TypeError, ValueError, IndexError) as e:
        if isinstance(e, SnapshotFormatError):
            raise
        raise SnapshotFormatError(f"{where}: malformed columnar table entry {spec!r}") from None
    count = kl // key_stored.itemsize
    if kl != count * key_stored.itemsize or vl != count * value_stored.itemsize:
        raise SnapshotFormatError(f"{where}: key block of {kl} bytes and {spec['dtype']} value block of {vl} bytes "
                                  "do not hold the same number of keys")
    runs: list[list[int]] = []
    checked: list[tuple[str, int, int, Any]] = []
    for kg, rng in sorted(groups.items(), key=lambda item: _slice(item, count, where)[0]):
        start, stop = _slice((kg, rng), count, where)
        if int(kg) not in key_groups or start == stop:
            continue
        checked.append((kg, start, stop, rng))
        if runs and runs[-1][1] == start:
            runs[-1][1] = stop
        else:
            runs.append([start, stop])
    if not runs:
        return
    view = memoryview(data)
    keys = np.frombuffer(view[ko : ko + kl], dtype=key_stored)
    values = np.frombuffer(view[vo : vo + vl], dtype=value_stored)
    key_bytes, value_bytes = view[ko : ko + kl], view[vo : vo + vl]
    kw, vw = key_stored.itemsize, value_stored.itemsize
    for kg, start, stop, rng in checked:
        if len(rng) >= 4:  # version 2: each key group's rows carry their checksums
            for block, part, recorded in (("key", key_bytes[start * kw : stop * kw], rng[2]),
                                          ("value", value_bytes[start * vw : stop * vw], rng[3])):
                problem = mismatch(recorded, part)
                if problem:
                    raise SnapshotFormatError(f"{where}, key group {kg}: {problem} in its rows of the {block} block: "
                                              f"the file is damaged")
    for start, stop in runs:
        yield _widen(keys[start:stop], key_frame, _KEY_DTYPE), _widen(values[start:stop], value_frame, dtype)


def _slice(item: tuple[str, Any], count: int, where: str) -> tuple[int, int]:
    kg, rng = item
    try:
        start, stop = int(rng[0]), int(rng[1])
        int(kg)
    except (TypeError, ValueError, IndexError):
        raise SnapshotFormatError(f"{where}, key group {kg}: malformed key range {rng!r}") from None
    if not 0 <= start <= stop <= count:
        raise SnapshotFormatError(f"{where}, key group {kg}: keys [{start}, {stop}) lie outside the table's {count} keys")
    return start, stop


def _load_keyed(data: bytes, span: Any, kind: str, where: str) -> Any:
    """One pickled keyed chunk, as it was written."""
    offset, length = _checked_span(data, span, where)
    chunk = _unpickle(memoryview(data)[offset : offset + length], offset, where)
    if kind == "accumulators":  # earlier versions: a pickled (key list, value array) tuple
        if not (isinstance(chunk, tuple) and len(chunk) == 2 and len(chunk[0]) == len(chunk[1])):
            raise SnapshotFormatError(f"{where}: accumulator chunk is {type(chunk).__name__}, expected (keys, values) "
                                      "of equal length")
        chunk = chunk[0], np.asarray(chunk[1])
    return chunk


def _span(data: bytes, span: Any, where: str) -> tuple[int, int]:
    try:
        offset, length = int(span[0]), int(span[1])
    except (TypeError, ValueError, IndexError):
        raise SnapshotFormatError(f"{where}: malformed offset/length {span!r}") from None
    if offset < len(MAGIC) or length < 0 or offset + length > len(data):
        raise SnapshotFormatError(f"{where}: chunk [{offset}, {offset + length}) lies outside the {len(data)}-byte file")
    return offset, length


def _checked_span(data: Any, span: Any, where: str) -> tuple[int, int]:
    """``_span``, and the chunk's bytes checked against its checksum (version 2 index entries)."""
    offset, length = _span(data, span, where)
    if len(span) > 2:
        problem = mismatch(span[2], memoryview(data)[offset : offset + length])
        if problem:
            raise SnapshotFormatError(f"{where}: {problem} in bytes [{offset}, {offset + length}): the file is damaged")
    return offset, length


def _unpickle(chunk: Any, offset: int, where: str) -> Any:
    try:
        return pickle.loads(chunk)
    except Exception as e:  # noqa: BLE001 - any unpickling problem means a corrupt file
        raise SnapshotFormatError(f"{where}: cannot read chunk at {offset}: {type(e).__name__}: {e}") from e


def _load(data: bytes, span: Any, where: str) -> Any:
    offset, length = _checked_span(data, span, where)
    return _unpickle(memoryview(data)[offset : offset + length], offset, where)


def keyed_spans(index: dict, key_groups: range) -> list[tuple[int, int]]:
    """The byte spans of a state file that a restore owning ``key_groups`` reads: the header, the
    operator state, and the chunks (pickled) or rows (columnar) of the key groups it owns. Spans
    that are malformed are left to ``read_keyed`` to report."""
    spans = [(0, len(MAGIC))]
    try:
        if isinstance(index.get("operator"), list):
            spans.append((int(index["operator"][0]), int(index["operator"][1])))
    except (TypeError, ValueError, IndexError):
        return [(0, 1 << 62)]
    for table in (index.get("keyed") or {}).values():
        groups = table.get("groups") or {}
        col = table.get("columnar")
        try:
            owned = [rng for kg, rng in groups.items() if int(kg) in key_groups]
            if col is None:  # [offset, length(, checksum)]
                spans.extend((int(rng[0]), int(rng[1])) for rng in owned)
                continue
            width = {"keys": _stored_dtype(col, "keys", _KEY_DTYPE)[0].itemsize,
                     "values": _stored_dtype(col, "values", _VALUE_DTYPES[col["dtype"]])[0].itemsize}
            for block, size in width.items():  # [start, stop(, keys checksum, values checksum)]
                base = int(col[block][0])
                spans.extend((base + int(rng[0]) * size, (int(rng[1]) - int(rng[0])) * size) for rng in owned)
        except (TypeError, ValueError, KeyError, IndexError):
            return [(0, 1 << 62)]  # malformed: read it all, and let read_keyed say what is wrong
    return spans


def check_magic(data: Any, where: str) -> None:
    if bytes(memoryview(data)[: len(MAGIC)]) != MAGIC:
        raise SnapshotFormatError(f"{where}: not a streamjob state file (bad header)")


def read_keyed(data: bytes, index: dict, key_groups: range, where: str) -> Iterator[tuple[str, str, Any]]:
    """(state name, kind, chunk) for every key group of ``key_groups`` in the snapshot."""
    check_magic(data, where)
    for name, table in (index.get("keyed") or {}).items():
        kind = table.get("kind")
        if "columnar" in table:
            for keys, values in _read_columnar(data, table["columnar"], table.get("groups") or {}, key_groups,
                                               f"{where} (state {name!r})"):
                # a heap table written columnar (FrozenDict.columns) comes back as the dict it was
                yield name, kind, (keys, values) if kind == "accumulators" else dict(zip(keys.tolist(), values.tolist()))
            continue
        for kg, span in table.get("groups", {}).items():
            if int(kg) in key_groups:
                yield name, kind, _load_keyed(data, span, kind, f"{where} (state {name!r}, key group {kg})")


def read_file(data: bytes, index: dict, name: str, where: str) -> bytes:
    span = (index.get("files") or {}).get(name)
    if span is None:
        raise SnapshotFormatError(f"{where}: has no file {name!r}")
    offset, length = int(span[0]), int(span[1])
    if offset < len(MAGIC) or offset + length > len(data):
        raise SnapshotFormatError(f"{where}: file {name!r} lies outside the {len(data)}-byte state file")
    offset, length = _checked_span(data, span, f"{where} (RocksDB file {name!r})")
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
