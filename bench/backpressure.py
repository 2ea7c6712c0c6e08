"""Backpressure benchmark: aligned vs unaligned checkpoints when the sink is slower than the source.

    python bench/backpressure.py [--seconds 14] [--rounds 2] [--sink-us-per-row 50] [--batch-size 200]
                                 [--buffers-per-channel 64] [--interval-ms 1000]

The job, at parallelism 2: an unbounded DataGen source (no rate limit) ->
``key_by`` a hot key (every row goes to the same sink subtask, as with a skewed
key) -> a sink that spends ``--sink-us-per-row`` µs per row (one ``time.sleep``
per batch: 20,000 rows/s by default). Every slot runs a subtask of each operator
in one loop (slot sharing): the slot whose sink is idle runs its source flat out,
so the channel from it to the slow sink stays full of as many batches as its
credits allow plus what waits for credit: sustained backpressure.
``--buffers-per-channel`` credits of ``--batch-size`` rows: the defaults hold
12,800 rows (~0.4 MB) in flight per channel, about what Flink buffers per channel
(10 network buffers of 32 KB).

Checkpoints every ``--interval-ms`` to ``file://`` storage, EXACTLY_ONCE, once
aligned and once unaligned (``enable_unaligned_checkpoints()``), in the order
aligned, unaligned, unaligned, aligned, ... (``--rounds`` pairs), in one
process (Spark is started once). Each run lasts ``--seconds``; the checkpoints
completed in its first 3 s (before backpressure is sustained) are left out. Per
checkpoint, from the job manager's statistics (what ``GET /v1/checkpoints``
shows):

* end-to-end duration: trigger to completion (Flink's ``end_to_end_duration``);
* start delay: trigger to the snapshot of the subtask the barrier reached last
  (Flink's checkpoint start delay): the barrier's end-to-end latency;
* persisted data: in-flight bytes stored as channel state (``persisted_data``).

An aligned barrier queues behind every batch in the channels and waits for the
slow sink to drain them; an unaligned one overtakes them and the task snapshots
at once (after the batch it is in the middle of). Floor: unaligned checkpoints
complete >= 5x faster (median end-to-end duration, aligned / unaligned).

Results are printed as a table and written to bench/results/backpressure.json.
"""

from __future__ import annotations

import argparse
import os
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from streamjob.runtime import StreamExecutionEnvironment
from streamjob.runtime.cluster.executor import JobExecutionError
from streamjob.runtime.connectors import DataGenSource
from streamjob.runtime.connectors.base import Sink, SinkWriter
from streamjob.runtime.batch import num_rows

# A session cluster the user has running (streamjob cluster start) is not what this bench measures.
os.environ.setdefault("STREAMJOB_SESSION", "off")

HERE = Path(__file__).parent
FLOOR = 5.0  # unaligned checkpoints complete at least 5x faster under sustained backpressure
WARMUP_S = 3.0


class SlowSink(Sink):
    """Spends ``us_per_row`` microseconds per row: a sink slower than its source."""

    default_name = "SlowSink"

    def __init__(self, us_per_row: float):
        self.us_per_row = us_per_row

    def create_writer(self, ctx) -> "SlowWriter":
        return SlowWriter(self.us_per_row / 1e6)


class SlowWriter(SinkWriter):
    def __init__(self, s_per_row: float):
        self.s_per_row = s_per_row

    def write(self, batch) -> None:
        time.sleep(num_rows(batch) * self.s_per_row)


def row(i: int) -> dict:
    return {"key": i % 1000, "value": i}


def run(args: argparse.Namespace, unaligned: bool, checkpoint_dir: str, timeout_ms: int = 0) -> dict:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.configure({"execution.batch-size": args.batch_size,
                   "taskmanager.network.memory.buffers-per-channel": args.buffers_per_channel})
    env.enable_checkpointing(args.interval_ms)
    config = env.get_checkpoint_config()
    config.set_checkpoint_storage(f"file://{checkpoint_dir}")
    if unaligned:
        config.enable_unaligned_checkpoints()
        config.set_aligned_checkpoint_timeout(timeout_ms)
    (env.from_source(DataGenSource(row), name="numbers")
        .key_by(lambda r: "hot").sink_to(SlowSink(args.sink_us_per_row)))
    client = env.execute_async("backpressure-" + mode_name(unaligned, timeout_ms))
    assert client.wait_until_running(120), "the job did not start"
    started = time.time()
    time.sleep(args.seconds)
    jm = client.job_manager
    history = [s.summary() for s in jm.coordinator.history]
    backpressure = jm.metrics_snapshot()["backpressure"]
    client.cancel()
    try:
        client.get_job_execution_result(120)
    except JobExecutionError:
        pass  # canceled, as intended
    completed = [c for c in history if c["status"] == "COMPLETED" and c["trigger_time"] >= started + WARMUP_S]
    return {
        "unaligned": unaligned,
        "mode": mode_name(unaligned, timeout_ms),
        "checkpoints": completed,
        "failed": sum(c["status"] == "FAILED" for c in history),
        "back_pressured": {f"{task}#{sub}": seconds for (task, sub), (seconds, _) in backpressure.items()},
    }


def mode_name(unaligned: bool, timeout_ms: int) -> str:
    if not unaligned:
        return "aligned"
    return f"timeout {timeout_ms} ms" if timeout_ms else "unaligned"


def median(runs: list[dict], field: str) -> float | None:
    values = [c[field] for r in runs for c in r["checkpoints"]]
    return statistics.median(values) if values else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=14.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--sink-us-per-row", type=float, default=50.0)
    parser.add_argument("--batch-size", type=int, default=200)
    parser.add_argument("--buffers-per-channel", type=int, default=64)
    parser.add_argument("--interval-ms", type=int, default=1000)
    parser.add_argument("--aligned-timeout-ms", type=int, default=0,
                        help="also run unaligned checkpoints with this aligned-checkpoint timeout (a third mode: "
                             "each checkpoint starts aligned and switches once it is that late)")
    args = parser.parse_args()

    modes = [(False, 0), (True, 0)] + ([(True, args.aligned_timeout_ms)] if args.aligned_timeout_ms else [])
    runs: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="sj-bench-bp-") as d:
        for i in range(args.rounds):
            for unaligned, timeout_ms in (modes if i % 2 == 0 else modes[::-1]):
                r = run(args, unaligned, d, timeout_ms)
                runs.append(r)
                durations = [c["duration_ms"] for c in r["checkpoints"]]
                print(f"  {r['mode']:<16}: {len(durations)} checkpoints, "
                      f"median {statistics.median(durations) if durations else float('nan'):.0f} ms, "
                      f"{r['failed']} failed", flush=True)

    rows = []
    for unaligned, timeout_ms in modes:
        mine = [r for r in runs if r["mode"] == mode_name(unaligned, timeout_ms)]
        rows.append({
            "mode": mode_name(unaligned, timeout_ms),
            "unaligned_checkpoints": sum(c["checkpoint_type"] == "UNALIGNED_CHECKPOINT"
                                         for r in mine for c in r["checkpoints"]),
            "checkpoints": sum(len(r["checkpoints"]) for r in mine),
            "duration_ms_median": median(mine, "duration_ms"),
            "duration_ms_max": max((c["duration_ms"] for r in mine for c in r["checkpoints"]), default=None),
            "start_delay_ms_median": median(mine, "max_start_delay_ms"),
            "alignment_ms_median": median(mine, "max_alignment_ms"),
            "persisted_bytes_median": median(mine, "persisted_data"),
            "failed": sum(r["failed"] for r in mine),
        })
    aligned, unaligned_row = rows[0], rows[1]
    ratio = None
    if aligned["duration_ms_median"] and unaligned_row["duration_ms_median"]:
        ratio = aligned["duration_ms_median"] / unaligned_row["duration_ms_median"]
    delay_ratio = None
    if aligned["start_delay_ms_median"] and unaligned_row["start_delay_ms_median"]:
        delay_ratio = aligned["start_delay_ms_median"] / unaligned_row["start_delay_ms_median"]

    print()
    print(f"Sink {args.sink_us_per_row:g} µs/row, one hot key, p=2, behind an unthrottled source; "
          f"batches of {args.batch_size} rows, "
          f"{args.buffers_per_channel} credits per channel; a checkpoint every {args.interval_ms} ms "
          f"({args.rounds} runs of {args.seconds:g} s per mode, first {WARMUP_S:g} s left out)")
    header = f"{'mode':<16} {'checkpoints':>11} {'unaligned':>9} {'end-to-end median':>18} {'max':>9} " \
             f"{'start delay median':>19} {'alignment median':>17} {'persisted median':>17}"
    print(header)
    print("-" * len(header))

    def ms(v: float | None) -> str:
        return "n/a" if v is None else f"{v:.0f} ms"

    for r in rows:
        persisted = "n/a" if r["persisted_bytes_median"] is None else f"{r['persisted_bytes_median'] / 1024:.0f} KiB"
        print(f"{r['mode']:<16} {r['checkpoints']:>11} {r['unaligned_checkpoints']:>9} "
              f"{ms(r['duration_ms_median']):>18} {ms(r['duration_ms_max']):>9} "
              f"{ms(r['start_delay_ms_median']):>19} {ms(r['alignment_ms_median']):>17} {persisted:>17}")
    print("-" * len(header))
    ok = ratio is not None and ratio >= FLOOR
    print(f"aligned / unaligned, median end-to-end duration: {ratio:.1f}x" if ratio else "ratio: n/a",
          f"(floor {FLOOR:g}x: {'PASS' if ok else 'FAIL'}); start delay: "
          f"{delay_ratio:.1f}x" if delay_ratio else "")

    out = HERE / "results"
    out.mkdir(exist_ok=True)
    with open(out / "backpressure.json", "w") as f:
        json.dump({"args": vars(args), "modes": rows, "ratio": ratio, "start_delay_ratio": delay_ratio,
                   "pass": ok, "runs": runs, "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())},
                  f, indent=1, default=str)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
