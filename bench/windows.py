"""Event-time windows on W1: a keyed tumbling window sum beside the rolling sum, one run.

    python bench/windows.py [--rows 60000000] [--per-record-rows 500000] [--repeat 2]
                            [--only rolling,window_columnar] [--stats]

Data: the W1 rows (key = (i * 2654435761) % 100000, value = i % 1000) with an event timestamp
``ts = i // 100 - 20 * (i % 5)`` ms: 100k events per event-time second, up to 80 ms out of order;
Parquet files generated once (bench/.data/, gitignored), one per source subtask, each holding
every other row, so both subtasks move through event time together (as partitions of a topic do;
files that each held a contiguous range would keep half of all windows open until the end). Every case runs as its own
``streamjob run bench/jobs/window_job.py`` at parallelism 2, reading the files with
``WatermarkStrategy.for_bounded_out_of_orderness(100 ms)`` on the ``ts`` column:

* rolling: ``key_by("key").sum("value")``, columnar (the baseline of the ratios);
* window columnar: ``key_by("key").window(TumblingEventTimeWindows.of(Time.seconds(1))).sum("value")``;
* window per-record: the same windows keyed by a function (the per-record window operator);

each with checkpoints off and every 1 s (exactly once, file://). events/s = rows / the job's
running time (first task processing to last task finished; deployment excluded): the columnar
cases read enough rows to run several seconds (a 1 s checkpoint interval needs that to show its
cost), the per-record ones (about 50x slower) the first ``--per-record-rows`` of them. Floors
(issue 14): columnar window >= 0.5x the columnar rolling sum, and 1 s checkpoints cost it <= 10%.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

# A session cluster the user has running (streamjob cluster start) is not what this bench measures.
os.environ.setdefault("STREAMJOB_SESSION", "off")

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
FILES = 2  # one per source subtask at parallelism 2


def ensure_data(rows: int) -> Path:
    d = HERE / ".data" / f"w1-ts-interleaved-{rows}"
    if (d / "_DONE").exists():
        return d
    tmp = d.with_name(d.name + f".tmp{os.getpid()}")
    tmp.mkdir(parents=True, exist_ok=True)
    for k in range(FILES):
        i = np.arange(k, rows, FILES, dtype=np.int64)
        table = pa.table({"key": (i * 2654435761) % 100000, "value": i % 1000,
                          "ts": 1_000_000 + i // 100 - 20 * (i % 5)})
        pq.write_table(table, tmp / f"part-{k}.parquet", row_group_size=1 << 17)
    (tmp / "_DONE").touch()
    if d.exists():
        shutil.rmtree(tmp)
    else:
        tmp.rename(d)
    return d


CASES = [("rolling", False), ("rolling", True), ("window_columnar", False), ("window_columnar", True),
         ("window_per_record", False), ("window_per_record", True)]


def run_case(case: str, checkpoint: bool, data: Path) -> dict:
    """Run one case as its own process tree; its result (running time, checkpoints, records out)."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "W_DATA": str(data), "W_CASE": case, "PYTHONUNBUFFERED": "1"}
        if checkpoint:
            env["W_CHECKPOINT_DIR"] = f"file://{tmp}/checkpoints"
        proc = subprocess.run([sys.executable, "-m", "streamjob.runtime.cli", "run", str(HERE / "jobs" / "window_job.py"),
                               "--no-progress"], env=env, capture_output=True, text=True, cwd=ROOT, timeout=1800)
        if proc.returncode != 0:
            raise SystemExit(f"case {case} (checkpoints {checkpoint}) failed:\n{proc.stderr[-3000:]}")
        return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=60_000_000)  # ~5 s a columnar case: several 1 s checkpoints
    ap.add_argument("--per-record-rows", type=int, default=500_000)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--only", help="comma-separated cases to run (rolling, window_columnar, window_per_record)")
    ap.add_argument("--stats", action="store_true",
                    help="also print each run's checkpoint figures (medians over its completed checkpoints)")
    args = ap.parse_args()
    cases = CASES
    if args.only:
        wanted = set(args.only.split(","))
        unknown = wanted - {c for c, _ in CASES}
        if unknown:
            raise SystemExit(f"--only: unknown case(s) {sorted(unknown)}; cases: {sorted({c for c, _ in CASES})}")
        cases = [c for c in CASES if c[0] in wanted]
    data = {n: ensure_data(n) for n in {args.rows if any(c != "window_per_record" for c, _ in cases) else 0,
                                        args.per_record_rows if any(c == "window_per_record" for c, _ in cases) else 0}
            if n}
    rows_of = {c: args.per_record_rows if c[0] == "window_per_record" else args.rows for c in cases}
    results: dict[tuple[str, bool], list[dict]] = {c: [] for c in cases}
    for r in range(args.repeat):
        for case, checkpoint in cases:  # interleaved, so drift of the machine hits every case alike
            n = rows_of[(case, checkpoint)]
            res = run_case(case, checkpoint, data[n])
            results[(case, checkpoint)].append(res)
            print(f"  run {r + 1}: {case:18} checkpoints {'1 s' if checkpoint else 'off':3}  {n:>11,} rows "
                  f"{n / (res['running_ms'] / 1000):>12,.0f} events/s  ({res['checkpoints']} checkpoints, "
                  f"{res['records_out']:,} records out)", flush=True)
            if args.stats and res.get("checkpoint_stats"):
                print("          " + _checkpoint_figures(res["checkpoint_stats"]), flush=True)
    rate = {c: statistics.median(rows_of[c] / (x["running_ms"] / 1000) for x in v) for c, v in results.items()}
    base = rate.get(("rolling", False))
    print(f"\nW1 windows, {args.rows:,} rows ({args.per_record_rows:,} per-record), parallelism 2, {datetime.date.today()}, "
          f"{os.cpu_count()} cores, Python {platform.python_version()} (median of {args.repeat})")
    print(f"{'case':20} {'checkpoints':>11} {'events/s':>12} {'vs rolling':>11} {'checkpoint cost':>16}")
    for case, checkpoint in cases:
        r = rate[(case, checkpoint)]
        cost = "" if not checkpoint or (case, False) not in rate else f"{1 - r / rate[(case, False)]:>15.1%}"
        vs = f"{r / base:>10.2f}x" if base else f"{'':>11}"
        print(f"{case:20} {'1 s' if checkpoint else 'off':>11} {r:>12,.0f} {vs} {cost:>16}")
    if ("rolling", True) in rate and base:
        cost = 1 - rate[("rolling", True)] / base
        print(f"\nfloor: 1 s checkpoints cost the columnar rolling sum {cost:.1%} (<= 5%: {'met' if cost <= 0.05 else 'NOT met'})")
    if not all(c in rate for c in (("window_columnar", False), ("window_columnar", True))) or not base:
        return
    ratio = rate[("window_columnar", False)] / base
    cost = 1 - rate[("window_columnar", True)] / rate[("window_columnar", False)]
    print(f"\nfloor: columnar window / columnar rolling sum = {ratio:.2f} (>= 0.5: {'met' if ratio >= 0.5 else 'NOT met'}); "
          f"1 s checkpoints cost the columnar window {cost:.1%} (<= 10%: {'met' if cost <= 0.10 else 'NOT met'})")


def _checkpoint_figures(stats: list[dict]) -> str:
    def med(key: str) -> float:
        return statistics.median(float(s.get(key) or 0) for s in stats)

    return (f"checkpoints (median of {len(stats)}): {med('duration_ms'):.0f} ms end to end, "
            f"{med('state_size') / 1e6:.1f} MB, sync {med('max_sync_ms'):.1f} ms, async {med('max_async_ms'):.0f} ms, "
            f"alignment {med('max_alignment_ms'):.0f} ms "
            f"(slowest subtask); largest {max(float(s.get('state_size') or 0) for s in stats) / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
