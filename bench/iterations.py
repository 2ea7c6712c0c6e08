"""Iterations: what exactly-once snapshots of a loop cost, and how much feedback they log (issue 32).

    python -P bench/iterations.py [--rounds 1 10 100] [--laps 20000000] [--repeats 2]

The loop: DataGen (bounded, unthrottled) emits (i, k); ``iterate()``; the body counts each record's
laps down in a keyed ``map`` (``key_by(i % 1024)``, so the back-edge is fed by a keyed operator and the
loop crosses the network); records with laps left go back (``close_with``), the others leave the loop
into a DiscardingSink. Every record goes round k times: ``--laps`` / k records per run, so each run
does about the same work. Parallelism 2, the embedded local Spark, one process (Spark started once).

For each k the job runs without checkpointing and with a checkpoint every 1 s (hash-map backend,
``file://`` storage), alternately (off, on, on, off, ...), ``--repeats`` runs of each; the best run of
each side is compared. Throughput is laps (records through the loop's body) per second of running
time. Checkpoint figures come from the checkpointed runs: the median of the completed checkpoints'
logged feedback (records and bytes, ``feedback_records`` / ``feedback_logged``), against the records
in the loop when the checkpoint was triggered (records the source emitted minus those that left,
sampled every 20 ms from the job manager's operator counters). Floor: the checkpoints' cost at k = 10
is at most 10% of the throughput.

Results are printed and written to bench/results/iterations.json.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from streamjob.runtime import StreamExecutionEnvironment
from streamjob.runtime.api.environment import execution_context
from streamjob.runtime.connectors import DataGenSource, DiscardingSink

# A session cluster the user has running (streamjob cluster start) is not what this bench measures.
os.environ.setdefault("STREAMJOB_SESSION", "off")

HERE = Path(__file__).parent
COST_FLOOR = 0.10  # at k = 10


def lap(r):
    return r[0], r[1] - 1


def run(records: int, k: int, checkpoint_dir: str | None) -> dict:
    execution_context.reset()
    execution_context.show_progress = False
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    if checkpoint_dir is not None:
        env.enable_checkpointing(1000)
        env.get_checkpoint_config().set_checkpoint_storage(f"file://{checkpoint_dir}")
    loop = env.from_source(DataGenSource(lambda i, k=k: (i, k), count=records), name="numbers").iterate()
    body = loop.key_by(lambda r: r[0] % 1024).map(lap).name("lap")
    loop.close_with(body.filter(lambda r: r[1] > 0).name("go round"))
    body.filter(lambda r: r[1] == 0).name("leave").sink_to(DiscardingSink()).name("out")
    client = env.execute_async(f"loop k={k}")
    samples: list[tuple[float, int]] = []  # wall clock, records in the loop
    done = threading.Event()

    def sample() -> None:
        while client.job_manager is None and not done.is_set():
            time.sleep(0.01)
        jm = client.job_manager
        while not done.is_set():
            by_name = {jm.operator_names.get(op, op): v for op, v in jm.operator_totals().items()}
            entered = sum(v[1] for n, v in by_name.items() if n.endswith("numbers"))
            left = sum(v[0] for n, v in by_name.items() if n.endswith("out"))
            samples.append((time.time(), max(0, entered - left)))
            time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        result = client.get_job_execution_result(1800)
    finally:
        done.set()
        sampler.join()
    completed = [c for c in result.checkpoints if c["status"] == "COMPLETED" and not c.get("final")]
    in_loop = []
    times = [t for t, _ in samples]
    for c in completed:
        i = bisect.bisect_left(times, c["trigger_time"])
        if 0 < i < len(samples):
            in_loop.append(samples[i][1])
    return {
        "k": k, "records": records, "checkpointing": checkpoint_dir is not None,
        "laps_per_s": records * k / (result.running_time_ms / 1000), "running_s": result.running_time_ms / 1000,
        "checkpoints_completed": len(completed),
        "checkpoints_failed": sum(1 for c in result.checkpoints if c["status"] == "FAILED"),
        "median_logged_records": statistics.median([c.get("feedback_records", 0) for c in completed]) if completed else None,
        "median_logged_bytes": statistics.median([c.get("feedback_logged", 0) for c in completed]) if completed else None,
        "median_in_loop_at_trigger": statistics.median(in_loop) if in_loop else None,
        "max_duration_ms": max((c["duration_ms"] for c in completed), default=None),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, nargs="+", default=[1, 10, 100])
    parser.add_argument("--laps", type=int, default=20_000_000, help="records x rounds per run")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    run(2000, 3, None)  # warm-up: Spark and its workers, untimed
    report = {"machine": {"cpus": os.cpu_count(), "load_before": os.getloadavg()[0]}, "runs": [], "by_k": {}}
    with tempfile.TemporaryDirectory(prefix="sj-bench-iter-") as d:
        for k in args.rounds:
            records = max(1, args.laps // k)
            runs = []
            for i in range(args.repeats):
                for on in ((False, True) if i % 2 == 0 else (True, False)):
                    r = run(records, k, os.path.join(d, f"k{k}-{i}-{on}") if on else None)
                    runs.append(r)
                    extra = (f", {r['checkpoints_completed']} checkpoints, logged {r['median_logged_records']} records "
                             f"({r['median_logged_bytes']} B) with {r['median_in_loop_at_trigger']} in the loop "
                             f"(medians)") if on else ""
                    print(f"  k={k:<3} checkpoints {'on ' if on else 'off'}: {r['laps_per_s']:,.0f} laps/s "
                          f"({r['running_s']:.1f} s){extra}", flush=True)
            best_off = max((r for r in runs if not r["checkpointing"]), key=lambda r: r["laps_per_s"])
            best_on = max((r for r in runs if r["checkpointing"]), key=lambda r: r["laps_per_s"])
            cost = 1 - best_on["laps_per_s"] / best_off["laps_per_s"]
            report["runs"] += runs
            report["by_k"][k] = {"records": records, "best_off": best_off["laps_per_s"], "best_on": best_on["laps_per_s"],
                                 "cost": cost, "logged_records": best_on["median_logged_records"],
                                 "logged_bytes": best_on["median_logged_bytes"],
                                 "in_loop_at_trigger": best_on["median_in_loop_at_trigger"]}
    report["machine"]["load_after"] = os.getloadavg()[0]
    print("\nloop at p=2 (DataGen -> iterate -> key_by.map -> close_with / DiscardingSink), embedded local Spark,"
          " hash-map backend, file:// checkpoints every 1 s:")
    print(f"  {'k':>4} {'laps/s off':>12} {'laps/s on':>12} {'cost':>7} {'logged/ckpt':>12} {'in loop':>9}")
    for k, b in report["by_k"].items():
        print(f"  {k:>4} {b['best_off']:>12,.0f} {b['best_on']:>12,.0f} {b['cost']:>7.1%} "
              f"{b['logged_records'] if b['logged_records'] is not None else '-':>12} "
              f"{b['in_loop_at_trigger'] if b['in_loop_at_trigger'] is not None else '-':>9}")
    if 10 in report["by_k"]:
        c = report["by_k"][10]["cost"]
        print(f"  floor: checkpoint cost at k=10 <= {COST_FLOOR:.0%}: {'PASS' if c <= COST_FLOOR else 'MISS'} ({c:.1%})")
    out = HERE / "results" / "iterations.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(report, indent=2, default=str))
    print(f"written to {out}")


if __name__ == "__main__":
    sys.exit(main())
