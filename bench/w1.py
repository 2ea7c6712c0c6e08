"""Runtime foundation benchmark (issue 2): W1 throughput, latency, time to first record.

    python bench/w1.py [--rows 5000000] [--skip-latency] [--skip-first-record]

W1 = rows i in [0, N): key = (i * 2654435761) % 100000, value = i % 1000; a keyed
rolling sum at parallelism 2 into DiscardingSink, through (a) the columnar
built-in ``sum`` and (b) a KeyedProcessFunction keeping the sum in a dict.
Both are compared, as ratios, with a plain-Python loop updating a dict over the
same rows, measured in the same run.

Throughput is reported two ways: over the job's running time (first task
processing to last task finished, what the engine sustains) and over the whole
net runtime including deployment on Spark (stage start, address exchange).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from streamjob.runtime import KeyedProcessFunction, StreamExecutionEnvironment
from streamjob.runtime.api.environment import execution_context
from streamjob.runtime.connectors import DataGenSource, DiscardingSink
from streamjob.runtime.connectors.base import Sink, SinkWriter

HERE = Path(__file__).parent


def w1_row(i: int) -> dict:
    return {"key": (i * 2654435761) % 100000, "value": i % 1000}


class DictSum(KeyedProcessFunction):
    def open(self, ctx):
        self.sums = {}

    def process_element(self, row, ctx):
        key = ctx.get_current_key()
        total = self.sums.get(key, 0) + row["value"]
        self.sums[key] = total
        row["value"] = total
        yield row


def plain_python(rows: int) -> float:
    sums: dict = {}
    started = time.perf_counter()
    for i in range(rows):
        row = w1_row(i)
        key = row["key"]
        sums[key] = sums.get(key, 0) + row["value"]
    return rows / (time.perf_counter() - started)


def run_w1(rows: int, path: str) -> dict:
    execution_context.show_progress = False
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    keyed = env.from_source(DataGenSource(w1_row, count=rows), name="W1").key_by("key")
    (keyed.sum("value") if path == "columnar" else keyed.process(DictSum())).sink_to(DiscardingSink())
    result = env.execute(f"W1-{path}")
    return {
        "events_per_s": rows / (result.running_time_ms / 1000),
        "events_per_s_incl_deploy": rows / (result.net_runtime_ms / 1000),
        "running_s": result.running_time_ms / 1000,
        "net_runtime_s": result.net_runtime_ms / 1000,
    }


class LatencySink(Sink):
    def __init__(self, out_dir: str):
        self.out_dir = out_dir

    def create_writer(self, ctx):
        return LatencyWriter(os.path.join(self.out_dir, f"lat-{ctx.get_index_of_this_subtask()}.npy"))


class LatencyWriter(SinkWriter):
    def __init__(self, path: str):
        self.path = path
        self.latencies: list[float] = []

    def write(self, batch):
        now = time.time()
        rows = batch.to_pylist() if hasattr(batch, "to_pylist") else batch
        self.latencies.extend(now - r["t"] for r in rows)

    def close(self):  # the sink writer's last call, after its final input (SinkWriter.close)
        np.save(self.path, np.asarray(self.latencies))


def run_latency(rate: int, seconds: int) -> dict:
    execution_context.show_progress = False
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    with tempfile.TemporaryDirectory() as d:
        src = DataGenSource(lambda i: {"key": i % 100, "value": 1, "t": time.time()}, count=rate * seconds, rows_per_second=rate)
        env.from_source(src).key_by("key").sum("value").sink_to(LatencySink(d))
        env.execute("latency")
        lat = np.concatenate([np.load(p) for p in Path(d).glob("lat-*.npy")])
    warm = lat[len(lat) // 10 :]  # skip the first second: workers warming up
    return {"rate": rate, "records": int(len(lat)), "p50_ms": float(np.percentile(warm, 50) * 1000),
            "p99_ms": float(np.percentile(warm, 99) * 1000), "max_ms": float(warm.max() * 1000)}


def time_to_first_record() -> dict:
    job = HERE / "jobs" / "first_record.py"
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "streamjob.runtime.cli", "run", str(job), "--no-progress"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    first = proc.stdout.readline()
    elapsed = time.monotonic() - started
    proc.stdout.read()
    proc.wait(120)
    return {"seconds": elapsed, "first_line": first.strip(), "exit_code": proc.returncode}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=5_000_000)
    ap.add_argument("--skip-latency", action="store_true")
    ap.add_argument("--skip-first-record", action="store_true")
    args = ap.parse_args()
    results: dict = {"rows": args.rows, "cores": os.cpu_count()}
    results["plain_python_dict_events_per_s"] = plain_python(args.rows)
    results["columnar"] = run_w1(args.rows, "columnar")
    results["per_row"] = run_w1(args.rows, "per_row")
    base = results["plain_python_dict_events_per_s"]
    print(f"W1, {args.rows:,} rows, parallelism 2, {os.cpu_count()} cores")
    print(f"  plain Python dict loop (1 core):  {base / 1e6:6.2f} M events/s   1.00x")
    for path in ("columnar", "per_row"):
        r = results[path]
        print(f"  {path:<10} running time       {r['events_per_s'] / 1e6:6.2f} M events/s  {r['events_per_s'] / base:5.2f}x"
              f"   (incl. deployment {r['events_per_s_incl_deploy'] / 1e6:.2f} M/s, {r['net_runtime_s']:.1f}s)")
    if not args.skip_latency:
        results["latency"] = run_latency(1000, 12)
        lat = results["latency"]
        print(f"  latency at {lat['rate']} events/s: p50 {lat['p50_ms']:.1f} ms, p99 {lat['p99_ms']:.1f} ms, max {lat['max_ms']:.1f} ms")
    if not args.skip_first_record:
        results["first_record"] = time_to_first_record()
        print(f"  streamjob run to first record: {results['first_record']['seconds']:.1f} s")
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    (out / "w1.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
