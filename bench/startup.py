"""Start-up: from starting ``streamjob run`` to the first record at the sink (issue 15; goal <= 6 s).

    python -P bench/startup.py [--repeat 5] [--breakdown] [--baseline REV] [--session] [--job bench/jobs/first_record.py]

Each run is its own ``streamjob run --no-progress JOB`` process tree (the embedded local Spark), timed
from spawning it to the first record line on its stdout; the run is then left to finish, so the next
one starts on a quiet machine. One warm-up run per code version comes first and is not counted: it
writes the class-data-sharing archive a first run on a machine writes (~3 s more), and the bench
waits until the archive can be adopted.

``--baseline REV`` runs a git revision's code (checked out in a temporary worktree, with its own
archive cache, as it would have in its own checkout) alternately with the current code in the same
run: figures taken while the machine is busy are compared as a ratio, never as absolute truths.

``--session`` also runs the current code on a session cluster (``streamjob cluster start``, started by
the bench in a cache folder of its own, the machine's class-data archive linked in), alternately with
runs that start their own JVM: what the prestarted JVM of ``streamjob cluster start`` buys.

Runs write and read their bytecode caches as a user's do, even where ``PYTHONDONTWRITEBYTECODE`` is set
(compiling streamjob's modules anew costs a run ~0.3 s of its driver's CPU).

``--breakdown`` prints where the time goes, from ``STREAMJOB_STARTUP_TRACE`` moments the driver and the
Python workers note (``streamjob.runtime.startup_trace``): medians of their offsets from the start,
and the spans between them. Spans overlap when work runs side by side (the JVM prestart beside the
job file's imports); a version without a moment leaves it out.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
LAUNCH = "import sys; from streamjob.runtime.cli import main; sys.argv[0] = 'streamjob'; sys.exit(main())"
DRIVER_EVENTS = ["cli", "job file", "execute", "session cluster taken", "jvm launch", "jvm up", "jvm prestart taken",
                 "jvm prestart discarded", "spark context start", "spark context", "job manager started",
                 "stage submit"]
WORKER_EVENTS = ["zygote preloaded", "process start", "worker module", "task entry", "task imports", "task deployed", "task slot ready",
                 "task running"]
SPANS = [  # (label, from, to): offsets of moments, "t0" = the command's start
    ("interpreter + imports (to cli)", "t0", "cli"),
    ("cli (to the job file)", "cli", "job file"),
    ("job file: imports + graph", "job file", "execute"),
    ("JVM launch (spark-submit to gateway)", "jvm launch", "jvm up"),
    ("SparkContext", "spark context start", "spark context"),
    ("execute -> stage submitted", "execute", "stage submit"),
    ("stage -> worker process", "stage submit", "worker: process start"),
    ("worker: interpreter start", "worker: process start", "worker: worker module"),
    ("worker: PySpark worker, task read (to task entry)", "worker: worker module", "worker: task entry"),
    ("worker: task imports", "worker: task entry", "worker: task imports"),
    ("task: deploy message", "worker: task imports", "worker: task deployed"),
    ("task: slot set up", "worker: task deployed", "worker: task slot ready"),
    ("task: peers", "worker: task slot ready", "worker: task running"),
    ("task running -> first record", "worker: task running", "first record"),
]


class Version:
    def __init__(self, name: str, env: dict[str, str], cwd: str, cache: str | None):
        self.name, self.env, self.cwd, self.cache = name, env, cwd, cache
        self.first: list[float] = []
        self.moments: list[dict[str, float]] = []


def _shim(tmp: Path, checkout: Path) -> str:
    """A folder that makes ``import streamjob.runtime`` load ``checkout``'s code (ahead of the editable install)."""
    pkg = tmp / "shim" / "streamjob"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "runtime").symlink_to(checkout / "runtime")
    if (checkout / "operator").is_dir():
        (pkg / "operator").symlink_to(checkout / "operator")
    return str(tmp / "shim")


def run_once(version: Version, job: str, timeout: float = 180.0) -> tuple[float, dict[str, float]]:
    fd, trace = tempfile.mkstemp(prefix="startup-trace-")
    os.close(fd)
    env = {**version.env, "STREAMJOB_STARTUP_TRACE": trace}
    t0 = time.time()
    proc = subprocess.Popen([sys.executable, "-c", LAUNCH, "run", "--no-progress", job], env=env, cwd=version.cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    first = None
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    for line in proc.stdout:  # the job prints its records; the first one is the moment measured
        if first is None and line.strip():
            first = time.time() - t0
        if time.monotonic() > deadline:
            proc.kill()
            break
    code = proc.wait()
    if first is None or code != 0:
        raise SystemExit(f"{version.name}: the job printed no record (exit code {code})")
    moments = {"first record": first}
    with open(trace) as f:
        lines = [ln.split(" ", 2) for ln in f.read().splitlines() if ln]
    os.remove(trace)
    for ts, pid, event in lines:
        offset = float(ts) - t0
        key = event if int(pid) == proc.pid else f"worker: {event}"
        if int(pid) != proc.pid and event not in WORKER_EVENTS:
            continue
        if int(pid) == proc.pid and event == "process start":
            continue
        # Workers: the last one matters (records flow once every task is up); the driver notes each once.
        moments[key] = max(moments.get(key, offset), offset)
    return first, moments


def wait_for_archives(caches: list[str]) -> None:
    """A warm-up run's JVM wrote its archive at exit; a later run adopts it once it has settled (30 s)."""
    while True:
        young = [p for c in caches for p in Path(c).glob("*.jsa.part")
                 if p.stat().st_size and time.time() - p.stat().st_mtime < 31]
        if not young:
            return
        print(f"waiting for the class-data-sharing archive to settle ({len(young)} new)", flush=True)
        time.sleep(5)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--breakdown", action="store_true")
    ap.add_argument("--baseline", metavar="REV", help="also run this git revision's code, alternately")
    ap.add_argument("--session", action="store_true", help="also run on a session cluster, alternately")
    ap.add_argument("--job", default=str(HERE / "jobs" / "first_record.py"))
    args = ap.parse_args()
    job = str(Path(args.job).resolve())
    tmp = Path(tempfile.mkdtemp(prefix="startup-bench-"))
    work = tmp / "cwd"
    work.mkdir()
    base_env = {k: v for k, v in os.environ.items()
                if k not in ("PYTHONPATH", "STREAMJOB_STARTUP_TRACE", "PYTHONDONTWRITEBYTECODE")}
    base_env["STREAMJOB_SESSION"] = "off"  # a session the user has running is measured by --session only
    default_cache = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "streamjob")
    versions = [Version("current", {**base_env, "PYTHONPATH": _shim(tmp / "current", ROOT)}, str(work),
                        default_cache)]
    worktree = None
    session_env = None
    try:
        if args.session:
            session_env = _start_session(tmp, {**base_env, "PYTHONPATH": _shim(tmp / "session", ROOT),
                                               "STREAMJOB_SESSION": "on"})
            versions[0].name = "current (own JVM)"
            versions.append(Version("current (session cluster)", session_env, str(work), None))
        if args.baseline:
            worktree = tmp / "baseline"
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(worktree), args.baseline],
                           check=True)
            rev = subprocess.run(["git", "-C", str(worktree), "rev-parse", "--short", "HEAD"], check=True,
                                 capture_output=True, text=True).stdout.strip()
            # Its own archive cache: the archive matches its class path as it does in its own checkout.
            cache_home = tmp / "baseline-cache"
            versions.append(Version(f"baseline {args.baseline} ({rev})",
                                    {**base_env, "PYTHONPATH": _shim(tmp / "base", worktree),
                                     "XDG_CACHE_HOME": str(cache_home)}, str(work), str(cache_home / "streamjob")))
        load = os.getloadavg()
        print(f"job {job}; load average at start {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}", flush=True)
        for v in versions:
            first, _ = run_once(v, job)
            print(f"warm-up {v.name}: first record {first:.2f} s", flush=True)
        wait_for_archives([v.cache for v in versions if v.cache])
        for i in range(args.repeat):
            for v in (versions if i % 2 == 0 else versions[::-1]):
                first, moments = run_once(v, job)
                v.first.append(first)
                v.moments.append(moments)
                print(f"run {i + 1} {v.name}: first record {first:.2f} s (load {os.getloadavg()[0]:.2f})", flush=True)
        print()
        for v in versions:
            print(f"{v.name}: median first record {statistics.median(v.first):.2f} s "
                  f"(min {min(v.first):.2f}, max {max(v.first):.2f}, n={len(v.first)})")
        if len(versions) == 2 and args.baseline:
            print(f"current / baseline: {statistics.median(versions[0].first) / statistics.median(versions[1].first):.2f}")
        if args.breakdown:
            for v in versions:
                _breakdown(v)
        load = os.getloadavg()
        print(f"\nload average at end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    finally:
        if session_env is not None:
            subprocess.run([sys.executable, "-c", LAUNCH, "cluster", "stop"], env=session_env, check=False,
                           capture_output=True)
        if worktree is not None:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(worktree)], check=False)
        shutil.rmtree(tmp, ignore_errors=True)  # the baseline's archive alone is ~70 MB


def _start_session(tmp: Path, env: dict[str, str]) -> dict[str, str]:
    """A session cluster in a cache folder of the bench's own (its runs' environment is returned)."""
    cache = tmp / "session-cache"
    (cache / "streamjob").mkdir(parents=True)
    real = Path(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")) / "streamjob"
    for archive in real.glob("spark-*.jsa"):
        (cache / "streamjob" / archive.name).symlink_to(archive)
    env = {**env, "XDG_CACHE_HOME": str(cache)}
    started = subprocess.run([sys.executable, "-c", LAUNCH, "cluster", "start"], env=env, capture_output=True,
                             text=True)
    if started.returncode != 0:
        raise SystemExit(f"the session cluster did not start:\n{started.stderr[-3000:]}")
    print(started.stdout.strip(), flush=True)
    return env


def _median(v: Version, key: str) -> float | None:
    if key == "t0":
        return 0.0
    xs = [m[key] for m in v.moments if key in m]
    return statistics.median(xs) if len(xs) == len(v.moments) and xs else None


def _breakdown(v: Version) -> None:
    print(f"\n{v.name}: moments (median offset from the command's start)")
    for key in DRIVER_EVENTS + [f"worker: {e}" for e in WORKER_EVENTS] + ["first record"]:
        m = _median(v, key)
        if m is not None:
            print(f"  {m:6.2f} s  {key}")
    print(f"{v.name}: spans (medians)")
    for label, a, b in SPANS:
        ma, mb = _median(v, a), _median(v, b)
        if ma is not None and mb is not None:
            print(f"  {mb - ma:6.2f} s  {label}")


if __name__ == "__main__":
    main()
