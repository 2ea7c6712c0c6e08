"""Snapshot writer (``state.snapshot.serialize``) on accumulator tables, against the pickled
format it replaced (the previous writer, kept here as the baseline, run on the same frozen tables).

    python bench/snapshot_serialize.py [--keys 100000] [--repeat 5] [--skip-checksums]

The writer runs in a thread beside the task thread: every millisecond it spends in Python holds
the GIL the records need, so its CPU time is the checkpoint cost of the columnar paths. Cases:

* rolling: one table of int keys (a rolling sum's), as at a checkpoint with no new keys since
  the one before (the steady state) and at the first checkpoint (every key new);
* window: two column tables sharing one key list (a window sum with one other column), fresh;
* str keys: one table of str keys (the pickled path either way).

Figures: ms per snapshot (median), bytes written, and the new writer's speed-up.

Checksums (CRC32C per chunk, per key group of a columnar table, per file: ``checkpoint/checksums.py``),
same run, same frozen tables, plus a ValueState of as many int keys (pickled chunks per key group):

* write: ``serialize`` and the file's checksum (what ``write_state`` adds) against ``serialize(...,
  checksums=False)`` (the writer as it was before them);
* restore: every key group read back (``read_keyed``) into a fresh backend (``restore_chunk``), with
  the checksummed index against the same bytes with an index without checksums (as a checkpoint of
  an earlier version is read: nothing verified).

Figures: thread CPU ms (best of the interleaved runs) and the ratio with/without; ``--skip-checksums``
leaves them out.
"""

from __future__ import annotations

import argparse
import pickle
import statistics
import time
from typing import Any

import numpy as np

from streamjob.runtime import ValueStateDescriptor
from streamjob.runtime.checkpoint.checksums import checksum
from streamjob.runtime.state.heap import HashMapKeyedStateBackend
from streamjob.runtime.keygroups import assign_key_groups
from streamjob.runtime.state.snapshot import MAGIC, read_keyed, serialize
from streamjob.runtime.state.tables import AccumulatorTable

MAXP = 128


def _old_group_positions(keys: list, max_parallelism: int):
    if not keys:
        return
    groups = assign_key_groups(keys, max_parallelism)
    order = np.argsort(groups, kind="stable")
    bounds = np.flatnonzero(np.diff(groups[order])) + 1
    for part in np.split(order, bounds):
        yield int(groups[part[0]]), part


def old_serialize(keyed: dict[str, tuple[str, Any]], max_parallelism: int) -> tuple[bytes, dict]:
    """The writer before columnar chunks: key groups of every key per snapshot, pickled (list, array)."""
    out, index = bytearray(MAGIC), {}
    grouped: dict[tuple[int, int], list] = {}
    for name, (kind, frozen) in keyed.items():
        keys = frozen.keys()
        groups_of = index.setdefault("keyed", {}).setdefault(name, {"kind": kind, "groups": {}})["groups"]
        cache_key = (id(frozen._keys), len(keys))
        if cache_key not in grouped:
            grouped[cache_key] = list(_old_group_positions(keys, max_parallelism))
        for kg, positions in grouped[cache_key]:
            data = pickle.dumps(frozen.chunk_positions(positions), protocol=5)
            groups_of[str(kg)] = [len(out), len(data)]
            out.extend(data)
    return bytes(out), index


def table_of(keys: list, values: np.ndarray, shared: AccumulatorTable | None = None) -> AccumulatorTable:
    t = AccumulatorTable()
    if shared is not None:
        t.slot_of, t.keys_by_slot = shared.slot_of, shared.keys_by_slot
    s = t.slots(keys)
    t.ensure_capacity(len(t), values.dtype.kind)
    t.acc[s] = values
    return t


def timed(fn, repeat: int) -> tuple[float, int]:
    times, size = [], 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        data, _ = fn()
        times.append((time.perf_counter() - t0) * 1000)
        size = len(data)
    return statistics.median(times), size


def unchecked(index: dict) -> dict:
    """The same index without its checksums (as written before them)."""
    out = {**index}
    if "operator" in index:
        out["operator"] = index["operator"][:2]
    out["keyed"] = {}
    for name, table in (index.get("keyed") or {}).items():
        out["keyed"][name] = {**table, "groups": {kg: rng[:2] for kg, rng in table["groups"].items()}}
    return out


def restore_all(data: bytes, index: dict) -> None:
    backend = HashMapKeyedStateBackend("op", MAXP, range(MAXP))
    for name, kind, chunk in read_keyed(data, index, range(MAXP), "bench"):
        backend.restore_chunk(name, kind, chunk)


def checksum_cost(cases: list, n: int, repeat: int) -> None:
    heap = HashMapKeyedStateBackend("op", MAXP, range(MAXP))
    state = heap.get_state(ValueStateDescriptor("count"))
    for k in range(n):
        heap.current_key = k
        state.update(k)
    frozen = heap.freeze()  # written as often as needed: writing reads a frozen table, never changes it
    cases = cases + [("ValueState, int keys", lambda: frozen)]
    # CPU time of this thread (what the snapshot writer takes from the task thread: the GIL), best of
    # the interleaved runs: on a shared machine wall-clock medians swung by 2x from one invocation to
    # the next with other processes' load.
    print(f"\nchecksums (CRC32C), {n:,} keys: with / without, same frozen tables (thread CPU ms, best of "
          f"{repeat}, interleaved)")
    print(f"{'case':24} {'write ms':>9} {'unchecked':>10} {'ratio':>6} {'restore ms':>11} {'unchecked':>10} "
          f"{'ratio':>6} {'MB':>6}")
    for label, make in cases:
        data, index = serialize(make(), MAXP, None)
        plain = unchecked(index)

        def write(sums: bool) -> None:
            frozen = make()  # (a view of the frozen table: nothing copied)
            t0 = time.thread_time()
            out, _ = serialize(frozen, MAXP, None, checksums=sums)
            if sums:
                checksum(out)  # the file's own, in write_state
            return time.thread_time() - t0

        def restore(idx: dict) -> float:
            t0 = time.thread_time()
            restore_all(data, idx)
            return time.thread_time() - t0

        # interleaved, so that a busy moment of the (shared) machine hits both sides alike
        w, u, r, ru = [], [], [], []
        for i in range(repeat):  # and in alternating order: neither side always runs first
            if i % 2:
                w.append(write(True))
                u.append(write(False))
                r.append(restore(index))
                ru.append(restore(plain))
            else:
                u.append(write(False))
                w.append(write(True))
                ru.append(restore(plain))
                r.append(restore(index))
        w_ms, u_ms, r_ms, ru_ms = (min(x) * 1000 for x in (w, u, r, ru))
        print(f"{label:24} {w_ms:>9.2f} {u_ms:>10.2f} {w_ms / u_ms:>6.3f} {r_ms:>11.2f} {ru_ms:>10.2f} "
              f"{r_ms / ru_ms:>6.3f} {len(data) / 1e6:>6.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--skip-checksums", action="store_true")
    args = ap.parse_args()
    n, rng = args.keys, np.random.default_rng(7)
    ints = ((np.arange(n, dtype=np.int64) * 2654435761) % (n * 10)).tolist()
    values = rng.integers(0, 1000, n).astype(np.int64)

    def fresh_rolling() -> dict:  # a new table each time: every key is new to the layout
        return {"sum-numeric": ("accumulators", table_of(ints, values).freeze())}

    rolling = table_of(ints, values)
    serialize({"sum-numeric": ("accumulators", rolling.freeze())}, MAXP, None)  # the layout is cached now

    def window() -> dict:
        first = table_of(ints, values)
        other = table_of(ints, values * 3, shared=first)
        return {"_wagg-1000-1": ("accumulators", first.freeze()), "_wagg-1000-2": ("accumulators", other.freeze())}

    strs = table_of([f"user-{k}" for k in ints], values)
    cases = [
        ("rolling, no new keys", lambda: {"sum-numeric": ("accumulators", rolling.freeze())}),
        ("rolling, all keys new", fresh_rolling),
        ("window, 2 columns", window),
        ("str keys, no new keys", lambda: {"sum-numeric": ("accumulators", strs.freeze())}),
    ]
    print(f"serialize() of accumulator tables, {n:,} keys, max parallelism {MAXP} (median of {args.repeat}; "
          "the tables are filled and frozen outside the timing)")
    print(f"{'case':24} {'pickled ms':>11} {'columnar ms':>12} {'speed-up':>9} {'pickled MB':>11} {'columnar MB':>12}")
    for label, make in cases:
        frozen_sets = [make() for _ in range(args.repeat)]  # built outside the timing
        it_old, it_new = iter(frozen_sets), iter([make() for _ in range(args.repeat)])
        old_ms, old_size = timed(lambda: old_serialize(next(it_old), MAXP), args.repeat)
        new_ms, new_size = timed(lambda: serialize(next(it_new), MAXP, None), args.repeat)
        print(f"{label:24} {old_ms:>11.2f} {new_ms:>12.2f} {old_ms / new_ms:>8.1f}x "
              f"{old_size / 1e6:>11.2f} {new_size / 1e6:>12.2f}")
    if not args.skip_checksums:
        checksum_cost(cases, n, args.repeat)


if __name__ == "__main__":
    main()
