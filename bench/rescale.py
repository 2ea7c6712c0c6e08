"""Rescaling in place under load: the pause a rescale makes in a keyed job holding 1M keys.

    python bench/rescale.py [--keys 1000000] [--rate 30000] [--backends hashmap,rocksdb]
                            [--moves 2:1,1:2] [--settle 8]

Per backend and move FROM:TO, one run of bench/jobs/rescale_job.py on local Spark with as many slots as
the largest parallelism (local[2]: a job rescales in place only within the slots its master has): a DataGen source at --rate rows/s over --keys keys at parallelism FROM, a ValueState count
per key, every 20th row written with its wall-clock processing time by the exactly-once FileSink, 1 s
checkpoints (RocksDB: incremental). Once every key has a count (keys / rate seconds, plus --settle),
the job is rescaled in place to TO (PUT /v1/jobs/{id}/parallelism, as `streamjob rescale`); --settle
seconds later stopped (POST /v1/stop: the final checkpoint commits). A fresh job per move: each starts
from a job that ran at FROM all along (a RocksDB subtask is slower for a while after any restore, its

# A session cluster the user has running (streamjob cluster start) is not what this bench measures.
os.environ.setdefault("STREAMJOB_SESSION", "off")
caches cold: noted in docs/performance.md).

The pause of a rescale is read from the committed output, as a user sees it: the gap between the last
row processed before it (the last one its checkpoint committed) and the first one processed after it
(the new attempt's first), i.e. checkpoint + ending the attempt + starting the stage + restoring 1M keys.
Reported beside the job manager's own split (checkpoint_wait_s: request to completed checkpoint;
restart_s: completed checkpoint to every new task running) and the rows/s before and after. Floor
(issue 33): pause <= 5 s at 1M keys on either backend.

Exactly once is checked on the whole output: every written row once, none missing, and each row's count
the one its index implies (i // keys + 1).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

from rest_address import rest_address  # bench/: the script's own folder

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JOB = os.path.join(ROOT, "bench", "jobs", "rescale_job.py")
EVERY = 20


def _call(url: str, method: str = "GET", body: dict | None = None) -> dict:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.load(r)


def _count_rate(url: str, seconds: float) -> float:
    def records() -> int:
        doc = _call(url + "/v1/job?peek=true")
        return sum(op["records_in"] for v in doc["vertices"] for op in v["operators"] if op["name"] == "count")

    a, t = records(), time.monotonic()
    time.sleep(seconds)
    return (records() - a) / (time.monotonic() - t)


def _rows(out: str) -> list[dict]:
    rows = []
    for path in glob.glob(os.path.join(out, "*")):  # committed part files (in-progress ones are hidden)
        with open(path) as f:
            rows += [json.loads(line) for line in f]
    return rows


def _pause(times: list[float], start: float, end: float) -> float:
    """The longest gap between consecutive output rows that overlaps [start, end]."""
    best = 0.0
    for a, b in zip(times, times[1:]):
        if b >= start and a <= end:
            best = max(best, b - a)
    return best


def run(backend: str, keys: int, rate: float, start: int, steps: list[int], settle: float) -> dict:
    work = tempfile.mkdtemp(prefix=f"rescale-bench-{backend}-")
    out, checkpoints = os.path.join(work, "out"), os.path.join(work, "checkpoints")
    log: list[str] = []
    proc = subprocess.Popen([sys.executable, "-m", "streamjob.runtime.cli", "run", JOB, "--no-progress",
                             "--master", f"local[{max([start, *steps])}]", "--",
                             backend, str(keys), str(rate), out, checkpoints, str(EVERY), str(start)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    threading.Thread(target=lambda: log.extend(iter(proc.stdout.readline, "")), daemon=True).start()  # type: ignore[union-attr]
    try:
        url = rest_address(proc, log, 180)
        job_id = _call(url + "/v1/job?peek=true")["id"]
        fill = keys / rate + settle
        print(f"  {backend}: filling {keys:,} keys ({fill:.0f} s)", file=sys.stderr, flush=True)
        time.sleep(fill)
        results = []
        for p in steps:
            before = _count_rate(url, 3.0)
            doc = _call(f"{url}/v1/jobs/{job_id}/parallelism", "PUT", {"parallelism": p})
            while doc["status"] in ("CHECKPOINTING", "RESTARTING"):
                time.sleep(0.05)
                doc = _call(f"{url}/v1/jobs/{job_id}/rescales/{doc['id']}")
            if doc["status"] != "COMPLETED":
                raise RuntimeError(f"rescale to {p} failed: {doc}")
            time.sleep(settle)
            after = _count_rate(url, 3.0)
            results.append({"to": p, "before": doc["before"], "after": doc["after"], "doc": doc,
                             "rate_before": before, "rate_after": after})
            print(f"  {backend}: -> {p}: restart {doc['restart_s']:.2f} s after checkpoint {doc['checkpoint_id']}",
                  file=sys.stderr, flush=True)
        _call(url + "/v1/stop?wait=true", "POST")
        proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    rows = _rows(out)
    ids = sorted(r["i"] for r in rows)
    problems = []
    if len(ids) != len(set(ids)):
        problems.append(f"{len(ids) - len(set(ids))} rows twice")
    if ids and ids != list(range(0, ids[-1] + 1, EVERY)):
        problems.append(f"{len(range(0, ids[-1] + 1, EVERY)) - len(set(ids))} rows missing")
    wrong = [r for r in rows if r["c"] != r["i"] // keys + 1]
    if wrong:
        problems.append(f"{len(wrong)} rows with a wrong count, e.g. {wrong[0]}")
    times = sorted(r["t"] for r in rows)
    for r in results:
        d = r["doc"]
        r["pause_s"] = _pause(times, d["requested_time"], d["completed_time"] + 5.0)
    shutil.rmtree(work, ignore_errors=True)
    return {"backend": backend, "rows": len(rows), "exactly_once": not problems, "problems": problems,
            "steps": results}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--rate", type=float, default=30_000)
    ap.add_argument("--backends", default="hashmap,rocksdb")
    ap.add_argument("--moves", default="2:1,1:2", help="FROM:TO[:TO...] parallelism, a fresh job each")
    ap.add_argument("--settle", type=float, default=8.0)
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    moves = [[int(p) for p in m.split(":")] for m in args.moves.split(",")]
    results = [run(b, args.keys, args.rate, m[0], m[1:], args.settle) for b in args.backends.split(",") for m in moves]
    print(f"\nRescaling in place, {args.keys:,} keys, {args.rate:,.0f} rows/s offered, local[2], FileSink exactly "
          f"once, 1 s checkpoints")
    print(f"{'backend':<8} {'from -> to':<10} {'pause s':>8} {'ckpt wait s':>12} {'restart s':>10} "
          f"{'rows/s before':>14} {'rows/s after':>13}  exactly once")
    for res in results:
        for r in res["steps"]:
            d = r["doc"]
            move = f"{max(r['before'].values())} -> {r['to']}"
            print(f"{res['backend']:<8} {move:<10} {r['pause_s']:>8.2f} "
                  f"{d['checkpoint_wait_s']:>12.2f} {d['restart_s']:>10.2f} {r['rate_before']:>14,.0f} "
                  f"{r['rate_after']:>13,.0f}  {'yes' if res['exactly_once'] else 'NO: ' + '; '.join(res['problems'])}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2, default=str)


if __name__ == "__main__":
    main()
