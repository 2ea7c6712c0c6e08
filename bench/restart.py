"""Recovery: from SIGKILL of one task to every task of the next attempt running again.

    python -P bench/restart.py [--kills 10] [--parallelism 3] [--backend hashmap]

One job (tests/jobs/counting.py: DataGen -> keyed state -> exactly-once FileSink, a checkpoint every
300 ms, the fixed-delay restart strategy's 100 ms delay) runs on the embedded local Spark, in a
process of its own per run (a process keeps its first SparkContext): with
``spark.python.use.daemon=false`` (a fresh Python process per task worker, the baseline) and with
the defaults (workers forked from streamjob's preloaded daemon), alternately, ``--rounds`` times
each. Each run kills a task ``--kills`` times, each 0.5 s after all tasks run again, and times the
kill to "all tasks running" as the job manager sees it. The figure is the ratio of the medians:
both sides share the machine's load of the moment.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# A session cluster the user has running (streamjob cluster start) is not what this bench measures.
os.environ.setdefault("STREAMJOB_SESSION", "off")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))


def recovery_times(conf: dict, kills: int, parallelism: int, backend: str) -> list[float]:
    from jobs import counting

    from streamjob.runtime.api.environment import execution_context

    execution_context.reset()
    execution_context.show_progress = False
    with tempfile.TemporaryDirectory(prefix="bench-restart-") as tmp:
        env = counting.build(f"{tmp}/out", f"{tmp}/chk", 10**9, rate=4000, interval_ms=300, backend=backend,
                             parallelism=parallelism, conf=conf)
        client = env.execute_async("counting")
        assert client.wait_until_running(120), "the job did not start"
        jm = client.job_manager
        times = []

        def all_running() -> bool:
            return jm.all_running() and len(jm.task_pids()) >= parallelism

        for k in range(kills):
            while not all_running():
                time.sleep(0.002)
            time.sleep(0.5)
            pids = jm.task_pids()
            attempt = jm.attempt
            started = time.monotonic()
            os.kill(pids[sorted(pids)[k % len(pids)]], signal.SIGKILL)
            while jm.attempt == attempt or not all_running():
                time.sleep(0.002)
            times.append(time.monotonic() - started)
            print(f"  kill {k + 1}/{kills}: all {parallelism} tasks running {times[-1]:.3f} s later", flush=True)
        client.cancel()
        try:
            client.get_job_execution_result(60)
        except Exception:  # noqa: BLE001 - canceled, as asked
            pass
        return times


VARIANTS = {"process": ("a process per worker (spark.python.use.daemon=false)", {"spark.python.use.daemon": "false"}),
            "daemon": ("forked from the preloaded daemon (default)", {})}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--parallelism", type=int, default=3)
    parser.add_argument("--backend", default="hashmap", choices=["hashmap", "rocksdb"])
    parser.add_argument("--one", choices=sorted(VARIANTS), help=argparse.SUPPRESS)  # a run, in its own process
    args = parser.parse_args()
    if args.one:
        times = recovery_times(VARIANTS[args.one][1], args.kills, args.parallelism, args.backend)
        print("TIMES " + " ".join(f"{t:.4f}" for t in times), flush=True)
        return
    times: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for r in range(args.rounds):
        for name, (title, _) in VARIANTS.items():
            print(f"round {r + 1}/{args.rounds}, {title}:", flush=True)
            run = subprocess.run([sys.executable, "-P", __file__, "--one", name, "--kills", str(args.kills),
                                  "--parallelism", str(args.parallelism), "--backend", args.backend],
                                 stdout=subprocess.PIPE, text=True, check=True)
            for line in run.stdout.splitlines():
                if line.startswith("TIMES "):
                    times[name] += [float(t) for t in line.split()[1:]]
                elif line.startswith("  kill "):
                    print(line, flush=True)
    base, new = (statistics.median(times[name]) for name in ("process", "daemon"))
    print(f"\nkill -> all tasks running, median of {len(times['daemon'])} kills each (parallelism "
          f"{args.parallelism}, {args.backend}, FileSink, DataGen at 4000 rows/s, 100 ms restart delay):")
    print(f"  {VARIANTS['process'][0]}: {base:.3f} s")
    print(f"  {VARIANTS['daemon'][0]}: {new:.3f} s")
    print(f"  ratio: {base / new:.1f}x faster (load average {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
