"""Queryable state under load: lookups of random keys while a keyed job runs at full speed.

    python bench/queryable_state.py [--keys 1000000] [--seconds 15] [--rounds 3] [--backends hashmap,rocksdb]
                                    [--protocol direct,proxy,rest] [--connections 1] [--pin --parallelism 1]

Per backend, one run of bench/jobs/queryable_job.py (parallelism 2, or --parallelism; 1 s checkpoints,
or --checkpoint-interval; KEYS keys, a ValueState count per key queryable as "counts") on the embedded
local Spark. Once every key has a
count, a client process looks up random keys, per protocol: straight at the subtask that owns the key
(``direct``: its own lookup port, the route asked of the proxy once, as ``QueryableStateClient`` does
given the job's key type), through the queryable state proxy's port (``proxy``: the job manager's
KvStateClientProxy, cluster/query_proxy.py) and through the REST API (``rest``: GET
/v1/state/counts?key=K). The client is bench/loadgen (Go, built on first use), as wrk
or hey would be, since on 2 cores every bit of CPU the client takes is taken from the job
(``--client python``: aiohttp, in a process of its own, REST only):

* closed loop at 1, 8 and 32 concurrent requests: lookups/s, p50 and p99 latency;
* open loop at --rate lookups/s (default 1,000, the issue's floor: p99 <= 10 ms) on --connections
  connections to each subtask (default 1, as QueryableStateClient), pipelined: p50, p99;
* the job's throughput (records/s of the count operator, from /v1/job): --rounds open-loop windows,
  each between two windows without lookups (quiet, loaded, quiet, ... quiet); each loaded window
  against the mean of its two neighbours, the median of the rounds: the slowdown the lookups cost
  (floor: <= 10%). The job's own rate drifts by tens of percent over a run on this machine, so only
  windows side by side compare.

``--pin`` puts the client on the last core and the job on the others, and keeps the client's core busy
at nice 19 all along: what the lookups cost the job itself, the job's core at one speed (on this VM a
loop runs ~30% faster while the other core is busy than while it idles).

Every lookup must answer 200 with found=true; anything else is counted and printed.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

from rest_address import rest_address  # bench/: the script's own folder

# A session cluster the user has running (streamjob cluster start) is not what this bench measures.
os.environ.setdefault("STREAMJOB_SESSION", "off")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JOB = os.path.join(ROOT, "bench", "jobs", "queryable_job.py")


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.load(r)


def records_in(url: str) -> int:
    doc = _get(url + "/v1/job?peek=true")
    return sum(op["records_in"] for v in doc["vertices"] for op in v["operators"] if op["name"] == "count")


async def _closed(url: str, keys: int, concurrency: int, seconds: float) -> tuple[list[float], int]:
    import aiohttp

    latencies: list[float] = []
    errors = 0
    stop = time.perf_counter() + seconds
    async with aiohttp.ClientSession() as session:
        async def worker() -> None:
            nonlocal errors
            while time.perf_counter() < stop:
                k = random.randrange(keys)
                t0 = time.perf_counter()
                async with session.get(url.replace("{key}", str(k))) as r:
                    doc = await r.json()
                latencies.append(time.perf_counter() - t0)
                if r.status != 200 or not doc.get("found"):
                    errors += 1
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies, errors


async def _open(url: str, keys: int, rate: float, seconds: float) -> tuple[list[float], int]:
    import aiohttp

    latencies: list[float] = []
    errors = 0
    async with aiohttp.ClientSession() as session:
        async def one(k: int) -> None:
            nonlocal errors
            t0 = time.perf_counter()
            async with session.get(url.replace("{key}", str(k))) as r:
                doc = await r.json()
            latencies.append(time.perf_counter() - t0)
            if r.status != 200 or not doc.get("found"):
                errors += 1
        tasks = []
        start = time.perf_counter()
        n = int(rate * seconds)
        for i in range(n):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.ensure_future(one(random.randrange(keys))))
        await asyncio.gather(*tasks)
    return latencies, errors


def client_main(argv: list[str]) -> None:
    """In its own process, the Python client (``--client python``: aiohttp): one load phase, the
    loadgen's arguments; prints JSON (latencies in ms, errors). Its open loop counts from the send."""
    mode, url, keys, arg, seconds = argv[0], argv[1], int(argv[2]), float(argv[3]), float(argv[4])
    run = _closed(url, keys, int(arg), seconds) if mode == "closed" else _open(url, keys, arg, seconds)
    latencies, errors = asyncio.run(run)
    print(json.dumps({"ms": [round(x * 1000, 3) for x in latencies], "errors": errors}))


LOADGEN = os.path.join(ROOT, "bench", "loadgen", "main.go")


def loadgen_binary() -> str | None:
    """bench/loadgen (Go, as wrk and hey: the client takes little of the 2 cores the job needs), built
    once per source version into ~/.cache/streamjob; None without a Go toolchain."""
    go = shutil.which("go") or ("/usr/local/go/bin/go" if os.path.exists("/usr/local/go/bin/go") else None)
    if go is None:
        return None
    with open(LOADGEN, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:12]
    out = os.path.join(os.path.expanduser("~/.cache/streamjob"), f"loadgen-{digest}")
    if not os.path.exists(out):
        os.makedirs(os.path.dirname(out), exist_ok=True)
        print("building bench/loadgen (Go)...", flush=True)
        subprocess.run([go, "build", "-o", out + ".tmp", LOADGEN], check=True, cwd=os.path.dirname(LOADGEN))
        os.replace(out + ".tmp", out)
    return out


def cpu_seconds(pid: int) -> dict[str, float]:
    """User + system CPU seconds so far of the job's processes: the driver (the job manager), the JVM,
    the Python task workers (with PySpark's daemon), and the load generator (this process's waited-for
    children: the finished loadgen runs)."""
    import resource

    import psutil

    out = {"job manager": 0.0, "jvm": 0.0, "tasks": 0.0}
    root = psutil.Process(pid)
    for p in [root, *root.children(recursive=True)]:
        try:
            t = p.cpu_times()
            name = p.name()
        except psutil.NoSuchProcess:
            continue
        part = "job manager" if p.pid == pid else "jvm" if name == "java" else "tasks"
        out[part] += t.user + t.system
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    out["client"] = children.ru_utime + children.ru_stime
    return out


# --pin: the client's cores and the job's (None: both wherever the OS puts them).
CLIENT_CPUS: set[int] | None = None
JOB_CPUS: set[int] | None = None
CONNECTIONS = 1  # --connections: the direct open loop's connections to each subtask


def load(client: list[str], mode: str, url: str, keys: int, arg: float, seconds: float,
         proxy: str | None = None, protocol: str = "rest") -> dict:
    """One load phase; ``proxy``: HOST:PORT of the queryable state proxy (protocol proxy: lookups through it;
    direct: the route from it, lookups to the subtasks' own ports)."""
    target = url + "/v1/state/counts?key={key}"
    if protocol != "rest":
        mode, target = f"{mode}-{protocol}", proxy + "/counts"
    # One OS thread for Go's scheduler: with two, its idle one spins looking for work at every wake-up
    # (1,000 a second), CPU taken from the job on this 2-core machine.
    r = subprocess.run(client + [mode, target, str(keys), str(arg), str(seconds)],
                       env={**os.environ, "GOMAXPROCS": "1", "LOADGEN_CONNECTIONS": str(CONNECTIONS)},
                       capture_output=True, text=True, timeout=seconds * 4 + 120,
                       preexec_fn=(lambda: os.sched_setaffinity(0, CLIENT_CPUS)) if CLIENT_CPUS else None)
    if r.returncode != 0:
        raise RuntimeError(r.stderr[-3000:])
    doc = json.loads(r.stdout)
    if doc.get("first_error"):
        print(f"  first error ({mode} {arg:g}): {doc['first_error'][:300]}", flush=True)
    ms = sorted(doc["ms"])
    return {"n": len(ms), "per_s": len(ms) / seconds, "p50": statistics.median(ms) if ms else None,
            "p99": ms[int(len(ms) * 0.99) - 1] if ms else None, "errors": doc["errors"], "ms": ms}


def bench_backend(client: list[str], backend: str, keys: int, seconds: float, rate: float,
                  protocols: list[str], parallelism: int = 2, interval: int = 1000,
                  snapshots: str = "full", rounds: int = 3) -> list[dict]:
    spinner: subprocess.Popen | None = None  # --pin: see below
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.Popen([sys.executable, "-m", "streamjob.runtime.cli", "run", JOB, "--no-progress", "--",
                                 backend, str(keys), str(10**10), os.path.join(tmp, "ck"), str(parallelism),
                                 str(interval), snapshots],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                preexec_fn=(lambda: os.sched_setaffinity(0, JOB_CPUS)) if JOB_CPUS else None)
        log: list[str] = []
        threading.Thread(target=lambda: log.extend(proc.stderr), daemon=True).start()
        try:
            url = rest_address(proc, log)
            while records_in(url) < keys * 2:  # every key counted (twice: past the first pass's inserts)
                time.sleep(0.5)
            job = _get(url + "/v1/job?peek=true")
            proxy = f"127.0.0.1:{job['queryable_state_proxy_port']}"
            rows = []
            # --pin: the client's core kept busy all along at the lowest priority (the client preempts it), so
            # that the job's core runs at one speed in quiet and loaded windows alike: on this VM a loop on
            # one core runs ~30% faster while the other core is busy than while it idles (measured: a dict
            # loop on core 0, core 1 idle / spinning), which is more than the lookups' cost.
            spinner = subprocess.Popen(["nice", "-n", "19", sys.executable, "-c", "while True: pass"],
                                       preexec_fn=lambda: os.sched_setaffinity(0, CLIENT_CPUS)) if CLIENT_CPUS else None
            for protocol in protocols:
                out: dict = {"backend": backend, "protocol": protocol, "snapshots": snapshots}
                # Quiet and loaded windows in turn, starting and ending quiet: each loaded window against the
                # mean of the quiet ones on either side, the median over the rounds. The job's own rate drifts
                # by tens of percent on this machine (the state's growth, the garbage collector, the
                # neighbours), more than the lookups' cost: only windows side by side compare.
                def window(lookups: bool) -> tuple[float, dict | None, dict]:
                    a, t0, cpu = records_in(url), time.perf_counter(), cpu_seconds(proc.pid)
                    if lookups:
                        done = load(client, "open", url, keys, rate, seconds, proxy, protocol)
                    else:
                        done = None
                        time.sleep(seconds)
                    took = time.perf_counter() - t0
                    after = cpu_seconds(proc.pid)
                    return (records_in(url) - a) / took, done, {k: (after[k] - cpu[k]) / took for k in cpu}

                quiet, loaded, opens, cpu_quiet, cpu_loaded = [], [], [], [], []
                q, _, c = window(False)
                quiet.append(q), cpu_quiet.append(c)
                for _ in range(rounds):
                    r, done, c = window(True)
                    loaded.append(r), opens.append(done), cpu_loaded.append(c)
                    q, _, c = window(False)
                    quiet.append(q), cpu_quiet.append(c)
                changes = [loaded[i] / ((quiet[i] + quiet[i + 1]) / 2) - 1 for i in range(rounds)]
                ms = sorted(m for o in opens for m in o["ms"])
                n = len(ms)
                out["open"] = {"n": n, "per_s": sum(o["per_s"] for o in opens) / rounds, "p50": statistics.median(ms),
                               "p99": ms[int(n * 0.99) - 1], "errors": sum(o["errors"] for o in opens),
                               "p99_rounds": [o["p99"] for o in opens]}
                # CPU per lookup by process: CPU per second loaded less quiet, over the lookups per second.
                per_s = max(out["open"]["per_s"], 1)
                out["cpu_us"] = {part: (statistics.mean(c[part] for c in cpu_loaded)
                                        - statistics.mean(c[part] for c in cpu_quiet)) / per_s * 1e6
                                 for part in cpu_quiet[0]}
                out["job_change"] = statistics.median(changes)
                out["job_changes"] = changes
                out["job_quiet"] = statistics.mean(quiet)
                out["job_quiet_windows"] = quiet
                out["job_loaded"] = statistics.mean(loaded)
                for c in (1, 8, 32):
                    out[f"closed{c}"] = load(client, "closed", url, keys, c, seconds, proxy, protocol)
                rows.append(out)
            return rows
        finally:
            if spinner is not None:
                spinner.kill()
                spinner.wait()
            subprocess.run([sys.executable, "-m", "streamjob.runtime.cli", "cancel", "--address", url],
                           capture_output=True, timeout=120) if "url" in locals() else None
            if proc.poll() is None:
                proc.kill()
            proc.wait(60)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--client":
        return client_main(sys.argv[2:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--rounds", type=int, default=3,
                        help="loaded windows, each between two quiet ones (the job's change: the median of the rounds)")
    parser.add_argument("--backends", default="hashmap,rocksdb")
    parser.add_argument("--parallelism", type=int, default=2,
                        help="the job's (2 fills the 2 cores; 1 leaves one to the job manager and the client)")
    parser.add_argument("--checkpoint-interval", type=int, default=1000, help="ms; 0: no checkpoints")
    parser.add_argument("--rocksdb-snapshots", choices=("full", "incremental"), default="incremental",
                        help="RocksDB's checkpoints: incremental (the default, as Flink advises for state this "
                             "size: a checkpoint uploads the new SST files) or full (every entry, every checkpoint)")
    parser.add_argument("--protocol", default="direct,proxy,rest",
                        help="direct (the subtasks' lookup ports, routed by key as QueryableStateClient does given "
                             "the key type), proxy (the queryable state proxy's port), rest (GET /v1/state/...)")
    parser.add_argument("--connections", type=int, default=1,
                        help="the direct open loop's connections to each subtask, its requests pipelined on them "
                             "(QueryableStateClient keeps one)")
    parser.add_argument("--client", choices=("go", "python"), default="go",
                        help="the load generator: bench/loadgen (Go; the default) or aiohttp")
    parser.add_argument("--pin", action="store_true",
                        help="the client on the last core, the job (driver, JVM, workers) on the others: what the "
                             "lookups cost the job itself, not the client's CPU on its cores (in production the "
                             "client runs elsewhere); use with --parallelism 1 on 2 cores")
    args = parser.parse_args()
    global CONNECTIONS
    CONNECTIONS = args.connections
    if args.pin:
        global CLIENT_CPUS, JOB_CPUS
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) < 2:
            parser.error("--pin needs 2 cores or more")
        CLIENT_CPUS, JOB_CPUS = {cpus[-1]}, set(cpus[:-1])
    binary = loadgen_binary() if args.client == "go" else None
    if args.client == "go" and binary is None:
        print("no Go toolchain: the Python client (aiohttp) generates the load, and takes more of the CPU")
    client = [binary] if binary else [sys.executable, __file__, "--client"]
    print(f"load average at start: {os.getloadavg()[0]:.1f}; client: {'loadgen (Go)' if binary else 'aiohttp'}; "
          f"parallelism {args.parallelism}; checkpoints every {args.checkpoint_interval} ms"
          + (f"; client on cores {sorted(CLIENT_CPUS)}, job on {sorted(JOB_CPUS)}" if CLIENT_CPUS else ""))
    protocols = args.protocol.split(",")
    if not binary:
        protocols = [p for p in protocols if p == "rest"]  # the Python client speaks HTTP only
    rows = [r for b in args.backends.split(",") for r in bench_backend(client, b, args.keys, args.seconds, args.rate,
                                                                          protocols, args.parallelism,
                                                                          args.checkpoint_interval,
                                                                          args.rocksdb_snapshots if b == "rocksdb"
                                                                          else "full", args.rounds)]
    print(f"\n| backend | via | load | lookups/s | p50 ms | p99 ms | errors | job records/s loaded (quiet) "
          f"| job vs quiet (median of {args.rounds}) | CPU per lookup (beyond the job's own) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        o = r["open"]
        name = r["backend"] + (" (incremental)" if r["snapshots"] == "incremental" else "")
        print(f"| {name} | {r['protocol']} | open loop {args.rate:g}/s | {o['per_s']:,.0f} | {o['p50']:.1f} | "
              f"{o['p99']:.1f} | {o['errors']} | {r['job_loaded']:,.0f} ({r['job_quiet']:,.0f}) | "
              f"{r['job_change'] * 100:+.1f}% ({', '.join(f'{c * 100:+.0f}%' for c in r['job_changes'])}) | "
              f"{', '.join(f'{k} {v:.0f} us' for k, v in r['cpu_us'].items())} |")
        for c in (1, 8, 32):
            x = r[f"closed{c}"]
            print(f"| {name} | {r['protocol']} | {c} concurrent | {x['per_s']:,.0f} | {x['p50']:.1f} | "
                  f"{x['p99']:.1f} | {x['errors']} | | | |")
    print(f"load average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
