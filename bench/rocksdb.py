"""RocksDB state backend benchmark: state access speed against the heap backend, and what
incremental checkpoints upload.

    python bench/rocksdb.py [--ops 1000000] [--keys 2000000] [--intervals 8] [--skip-ops] [--skip-upload]

Both measurements run in one process on the state backends themselves (no Spark),
so the numbers are the backends' and not the network's or Spark's.

1. ValueState read-and-update: for each op, ``backend.current_key = k``,
   ``v = state.value()``, ``state.update(v + 1)`` -- what a KeyedProcessFunction
   does per record. The same loop over the same key sequence runs on
   HashMapKeyedStateBackend and on RocksDBKeyedStateBackend (default options:
   Python object cache of ``python.state.cache-memory`` 256 MB per state, 64 MB block
   cache), alternating, best of 3 each. Key sequences: ``hot`` (uniform over 10,000
   keys), ``zipf`` (Zipf s=1.1 over 1M keys: a typical skewed key distribution),
   ``uniform`` (uniform over 1M keys); with the default cache the 1M-key state fits
   the Python cache, as it fits the heap backend's memory. ``beyond-cache`` is
   ``uniform`` with a 16 MB Python cache (~1/8 of the state's objects): most ops go to
   RocksDB itself, which is what state larger than memory costs; reported, not part of
   the floor. Both backends first hold a value for every key
   of the key space (RocksDB: written and flushed, cache empty), then run one
   untimed warm-up pass of ``--ops`` ops drawn from the same distribution, then
   the timed pass: steady state, as in a long-running job. Floor: RocksDB >= 1/5 of
   the heap backend's ops/s (Flink's rule of thumb is 10x slower).

2. Bytes uploaded per checkpoint: ``--keys`` keys with 100-byte values
   (incompressible hex), checkpoint 1 taken and completed; then per interval
   1% of the keys (random) get a new value and checkpoint n is taken, with
   incremental checkpoints (only SST files no completed checkpoint holds are
   uploaded) and, from the same state, a full (canonical, every entry) one.
   "changed SST bytes" is the size of the SST files of checkpoint n that
   checkpoint n-1 did not have (new flushes and compaction outputs). Floor:
   incremental bytes per checkpoint <= 3x the changed SST bytes.

Results are printed and written to bench/results/rocksdb.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import tempfile
import time

import numpy as np

from streamjob.runtime import ValueStateDescriptor
from streamjob.runtime.checkpoint.storage import CheckpointStorage
from streamjob.runtime.state.heap import HashMapKeyedStateBackend
from streamjob.runtime.state.rocksdb import RocksDBKeyedStateBackend, RocksDBOptions
from streamjob.runtime.state.rocksdb_snapshot import write_snapshot

HERE = os.path.dirname(os.path.abspath(__file__))
MAXP = 128


def key_sequence(kind: str, ops: int, rng: np.random.Generator) -> list[int]:
    if kind == "hot":
        return rng.integers(0, 10_000, ops).tolist()
    if kind == "uniform":
        return rng.integers(0, 1_000_000, ops).tolist()
    z = rng.zipf(1.1, ops * 2)
    return (z[z <= 1_000_000][:ops] - 1).tolist()


def read_update(backend, keys: list[int]) -> float:
    state = backend.get_state(ValueStateDescriptor("v", default=0))
    started = time.perf_counter()
    for k in keys:
        backend.current_key = k
        state.update(state.value() + 1)
    return len(keys) / (time.perf_counter() - started)


def prefilled(backend, universe: int):
    """Both backends hold the same state: every key of the universe has a value."""
    state = backend.get_state(ValueStateDescriptor("v", default=0))
    for k in range(universe):
        backend.current_key = k
        state.update(1)
    if isinstance(backend, RocksDBKeyedStateBackend):
        table = backend.table("v", "value")
        table.evict_all()  # start cold: the warm-up pass fills the cache
        backend.db.flush()
    return backend


def bench_ops(ops: int, work: str) -> dict:
    rng = np.random.default_rng(42)
    out = {}
    for kind in ("hot", "zipf", "uniform", "beyond-cache"):
        sequence = "uniform" if kind == "beyond-cache" else kind
        options = RocksDBOptions(cache_memory=16 << 20) if kind == "beyond-cache" else RocksDBOptions()
        warmup, keys = key_sequence(sequence, ops, rng), key_sequence(sequence, ops, rng)
        universe = 10_000 if kind == "hot" else 1_000_000
        heap_runs, rocks_runs = [], []
        for _ in range(3):
            heap = prefilled(HashMapKeyedStateBackend("bench", MAXP, range(MAXP)), universe)
            read_update(heap, warmup)
            heap_runs.append(read_update(heap, keys))
            del heap
            rocks = prefilled(RocksDBKeyedStateBackend("bench", MAXP, range(MAXP), os.path.join(work, "local"),
                                                       options), universe)
            read_update(rocks, warmup)
            rocks_runs.append(read_update(rocks, keys))
            rocks.dispose()
        h, r = max(heap_runs), max(rocks_runs)
        out[kind] = {"hashmap_ops_per_s": round(h), "rocksdb_ops_per_s": round(r), "ratio": round(r / h, 3),
                     "distinct_keys_touched": len(set(keys))}
        floor = "reported only" if kind == "beyond-cache" else "floor 1/5"
        print(f"ValueState read+update, {kind:12s}: hashmap {h / 1e6:.2f} M ops/s, rocksdb {r / 1e6:.2f} M ops/s "
              f"= 1/{h / r:.1f} ({floor})", flush=True)
    return out


def bench_upload(keys: int, intervals: int, work: str) -> dict:
    rng = random.Random(7)
    storage = CheckpointStorage("file://" + os.path.join(work, "checkpoints"), "bench", inline_threshold=0)
    storage.initialize()
    backend = RocksDBKeyedStateBackend("bench", MAXP, range(MAXP), os.path.join(work, "local"), RocksDBOptions(),
                                       incremental=True, state_root=storage.url)
    state = backend.get_state(ValueStateDescriptor("v"))
    started = time.perf_counter()
    for k in range(keys):
        backend.current_key = k
        state.update(rng.randbytes(50).hex())
    print(f"filled {keys:,} keys in {time.perf_counter() - started:.1f} s", flush=True)

    def checkpoint(n: int, incremental: bool) -> tuple[dict, int, int]:
        backend.incremental = incremental
        snap = backend.snapshot(n)
        handle, full, uploaded = write_snapshot(snap, storage, f"bench-{'inc' if incremental else 'full'}", None)
        return handle, full, uploaded

    handle, full, first = checkpoint(1, True)
    backend.notify_checkpoint_complete(1)
    previous = handle["index"]["rocksdb"]["sst"]
    rows = []
    for n in range(2, intervals + 2):
        for k in rng.sample(range(keys), keys // 100):
            backend.current_key = k
            state.update(rng.randbytes(50).hex())
        t = time.perf_counter()
        handle, full_size, inc = checkpoint(n, True)
        inc_s = time.perf_counter() - t
        sst = handle["index"]["rocksdb"]["sst"]
        changed = sum(int(f["size"]) for name, f in sst.items() if name not in previous)
        backend.notify_checkpoint_complete(n)
        previous = sst
        t = time.perf_counter()
        _, _, full_bytes = checkpoint(10_000 + n, False)
        full_s = time.perf_counter() - t
        rows.append({"checkpoint": n, "incremental_bytes": inc, "changed_sst_bytes": changed,
                     "full_bytes": full_bytes, "state_sst_bytes": full_size, "incremental_s": round(inc_s, 3),
                     "full_s": round(full_s, 3)})
        print(f"checkpoint {n}: incremental {inc / 1e6:7.2f} MB (changed SSTs {changed / 1e6:7.2f} MB, "
              f"{inc / max(changed, 1):.2f}x) in {inc_s:.2f} s; full {full_bytes / 1e6:7.2f} MB in {full_s:.2f} s",
              flush=True)
    backend.dispose()
    mean_inc = statistics.mean(r["incremental_bytes"] for r in rows)
    mean_changed = statistics.mean(r["changed_sst_bytes"] for r in rows)
    mean_full = statistics.mean(r["full_bytes"] for r in rows)
    worst = max(r["incremental_bytes"] / max(r["changed_sst_bytes"], 1) for r in rows)
    print(f"mean per checkpoint: incremental {mean_inc / 1e6:.2f} MB, changed SSTs {mean_changed / 1e6:.2f} MB "
          f"(worst ratio {worst:.2f}x, floor 3x), full {mean_full / 1e6:.2f} MB "
          f"(incremental = {mean_inc / mean_full:.1%} of full); first checkpoint {first / 1e6:.2f} MB", flush=True)
    return {"keys": keys, "first_checkpoint_bytes": first, "checkpoints": rows,
            "mean_incremental_bytes": mean_inc, "mean_changed_sst_bytes": mean_changed, "mean_full_bytes": mean_full,
            "worst_incremental_to_changed": round(worst, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=2_000_000)
    parser.add_argument("--intervals", type=int, default=8)
    parser.add_argument("--skip-ops", action="store_true")
    parser.add_argument("--skip-upload", action="store_true")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="streamjob-bench-rocksdb-")
    results: dict = {}
    try:
        if not args.skip_ops:
            results["value_state_ops"] = bench_ops(args.ops, work)
        if not args.skip_upload:
            results["incremental_upload"] = bench_upload(args.keys, args.intervals, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    path = os.path.join(HERE, "results", "rocksdb.json")
    if os.path.exists(path):  # a run with --skip-* keeps the other measurement's last figures
        with open(path) as f:
            results = {**json.load(f), **results}
    with open(path, "w") as f:
        json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
