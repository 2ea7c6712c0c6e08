"""Savepoint and rescale benchmark, end to end on local Spark (one process, 2 cores).

    python bench/savepoints.py [--keys 1000000] [--backends hashmap,rocksdb]

For each state backend: a job at parallelism 2 keeps a ValueState for each of ``--keys``
keys (row i updates key i mod keys, unbounded, as fast as it goes) with a checkpoint every
2 s. Once every key has a value it takes a savepoint (``JobClient.trigger_savepoint``) and
then stops with another (``stop_with_savepoint``). Reported: savepoint duration (trigger
to completed ``_metadata``) and size, against the periodic checkpoint just before it (the
baseline: same state, same run; incremental for RocksDB, so the ratio shows what "always
full and canonical" costs).

Restore: the stop savepoint is restored at parallelism 3 (rescale) and at 2 (same
parallelism), and the job is started without state as the baseline; the figure is the time
from submission until every task runs (state restored), minus the baseline's, best of 2.

Results are printed and written to bench/results/savepoints.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time

from streamjob.runtime import KeyedProcessFunction, StreamExecutionEnvironment, ValueStateDescriptor
from streamjob.runtime.api.environment import execution_context
from streamjob.runtime.checkpoint.storage import load_checkpoint
from streamjob.runtime.connectors import DataGenSource

HERE = os.path.dirname(os.path.abspath(__file__))


class Remember(KeyedProcessFunction):
    def open(self, ctx):
        self.state = ctx.get_state(ValueStateDescriptor("v", default=0))

    def process_element(self, row, ctx):
        self.state.update(self.state.value() + row["i"])
        return ()


def build(keys: int, parallelism: int, backend: str, checkpoints: str, restore: str | None = None):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.configure({"spark.master": "local[4]", "execution.checkpointing.savepoint-dir": checkpoints + "/savepoints",
                   **({"execution.state-recovery.path": restore} if restore else {})})
    env.set_parallelism(parallelism)
    env.enable_checkpointing(2000)
    env.set_state_backend(backend)
    cfg = env.get_checkpoint_config()
    cfg.set_checkpoint_storage(checkpoints)
    cfg.set_incremental(backend == "rocksdb")
    env.from_source(DataGenSource(lambda i, k=keys: {"k": i % k, "i": i}), name="rows").uid("rows") \
        .key_by("k").process(Remember()).uid("remember").print()  # emits nothing: the state is the point
    return env


def wait(predicate, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("benchmark step timed out")
        time.sleep(0.02)


def savepoints(keys: int, backend: str, work: str) -> dict:
    client = build(keys, 2, backend, f"file://{work}/{backend}").execute_async("savepoint-bench")
    assert client.wait_until_running(120)
    jm = client.job_manager
    wait(lambda: max((v[0] for v in jm.operator_totals().values()), default=0) >= keys * 1.2, 600)
    cc = jm.coordinator
    full = time.time()  # every key has a value from here on: the baseline is a checkpoint triggered after it
    wait(lambda: any(s.status == "COMPLETED" and s.savepoint is None and s.trigger_time > full
                     for s in cc.history), 120)
    path = client.trigger_savepoint(timeout=600)
    stop_path = client.stop_with_savepoint(savepoint_directory=f"file://{work}/{backend}/savepoints", timeout=600)
    client.get_job_execution_result(120)
    stats = {s.savepoint: s for s in cc.history if s.savepoint}
    sp = stats[path]
    before = [s for s in cc.history if s.status == "COMPLETED" and s.savepoint is None
              and s.checkpoint_id < sp.checkpoint_id][-1]
    _, meta = load_checkpoint(path)
    out = {"keys": keys, "savepoint_ms": round(sp.duration_ms, 1), "savepoint_bytes": sp.state_size,
           "checkpoint_ms": round(before.duration_ms, 1), "checkpoint_bytes": before.state_size,
           "checkpoint_bytes_written": before.checkpointed_size,
           "savepoint_to_checkpoint_time": round(sp.duration_ms / before.duration_ms, 2),
           "stop_savepoint_ms": round(stats[stop_path].duration_ms, 1), "stop_savepoint": stop_path,
           "savepoint_files": len(meta.files())}
    print(f"{backend}: savepoint of {keys:,} keys {sp.duration_ms:.0f} ms, {sp.state_size / 1e6:.1f} MB; "
          f"checkpoint before it {before.duration_ms:.0f} ms, {before.state_size / 1e6:.1f} MB "
          f"({before.checkpointed_size / 1e6:.1f} MB written) "
          f"(savepoint/checkpoint time {sp.duration_ms / before.duration_ms:.2f}x); stop-with-savepoint "
          f"{stats[stop_path].duration_ms:.0f} ms", flush=True)
    return out


def time_to_running(keys: int, parallelism: int, backend: str, work: str, restore: str | None) -> float:
    started = time.monotonic()
    client = build(keys, parallelism, backend, f"file://{work}/restore-{backend}", restore).execute_async("restore-bench")
    assert client.wait_until_running(300)
    jm = client.job_manager
    if jm is None:
        client.get_job_execution_result(10)  # raises what went wrong
    wait(lambda: jm.all_running() or client._finished.is_set(), 600)
    took = time.monotonic() - started
    client.cancel()
    try:
        client.get_job_execution_result(120)
    except Exception:  # noqa: BLE001 - canceled on purpose
        pass
    return took


def restores(keys: int, backend: str, work: str, savepoint: str) -> dict:
    runs: dict[str, list[float]] = {"no state, p=3": [], "same parallelism, p=2": [], "rescale 2 -> 3": []}
    for _ in range(2):
        runs["no state, p=3"].append(time_to_running(keys, 3, backend, work, None))
        runs["same parallelism, p=2"].append(time_to_running(keys, 2, backend, work, savepoint))
        runs["rescale 2 -> 3"].append(time_to_running(keys, 3, backend, work, savepoint))
    best = {k: min(v) for k, v in runs.items()}
    base = best["no state, p=3"]
    out = {"deploy_without_state_s": round(base, 2),
           "restore_same_parallelism_s": round(best["same parallelism, p=2"] - base, 2),
           "restore_rescaled_s": round(best["rescale 2 -> 3"] - base, 2), "runs_s": runs}
    print(f"{backend}: restore of {keys:,} keys: same parallelism {out['restore_same_parallelism_s']:.2f} s, "
          f"rescaled 2 -> 3 {out['restore_rescaled_s']:.2f} s (beyond the {base:.2f} s a stateless start takes)",
          flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--backends", default="hashmap,rocksdb")
    args = parser.parse_args()
    execution_context.show_progress = False
    work = tempfile.mkdtemp(prefix="streamjob-bench-savepoints-")
    results: dict = {}
    try:
        for backend in args.backends.split(","):
            sp = savepoints(args.keys, backend, work)
            results[backend] = {"savepoint": sp, "restore": restores(args.keys, backend, work, sp["stop_savepoint"])}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "savepoints.json"), "w") as f:
        json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
