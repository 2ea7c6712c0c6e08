"""Snapshot writer (``state.snapshot.serialize``) on accumulator tables, against the pickled
format it replaced (the previous writer, kept here as the baseline, run on the same frozen tables).

    python bench/snapshot_serialize.py [--keys 100000] [--repeat 5]

The writer runs in a thread beside the task thread: every millisecond it spends in Python holds
the GIL the records need, so its CPU time is the checkpoint cost of the columnar paths. Cases:

* rolling: one table of int keys (a rolling sum's), as at a checkpoint with no new keys since
  the one before (the steady state) and at the first checkpoint (every key new);
* window: two column tables sharing one key list (a window sum with one other column), fresh;
* str keys: one table of str keys (the pickled path either way).

Figures: ms per snapshot (median), bytes written, and the new writer's speed-up.
"""

from __future__ import annotations

import argparse
import pickle
import statistics
import time
from typing import Any

import numpy as np

from streamjob.runtime.state.keygroups import assign_key_groups
from streamjob.runtime.state.snapshot import MAGIC, serialize
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=5)
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


if __name__ == "__main__":
    main()
