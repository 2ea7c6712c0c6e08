"""W1: what the engine sustains on a keyed running sum, beside a plain Python loop and Bytewax,
into a sink that only notes its records and into real sinks that write them.

    python bench/w1.py [--rows 20000000] [--repeat 1] [--only plain,columnar,per_record,bytewax]
                       [--sinks note,parquet,jsonl]

W1 = rows i in [0, N): key = (i * 2654435761) % 100000, value = i % 1000, written once to
Parquet files (cached in bench/.data/, gitignored) that every case reads, so the source is
not the bottleneck. A keyed running sum at parallelism 2: each input comes out with its key's
sum so far (the per-key update stream, N rows), into one of three sinks:

* note: a sink that only notes when its first and last records came (what the engine sustains);
* parquet: the exactly-once ``FileSink.parquet`` writing the update stream (part files, committed
  when a checkpoint completes; without checkpoints when a file rolls or the input ends);
* jsonl: the exactly-once ``FileSink.jsonl``, the same as JSON lines.

The cases:

* plain loop: one Python process reads the same files (``to_pylist`` per batch), keeps the sums
  in a dict and, for the real sinks, writes its updates itself into one file: per batch
  ``pa.RecordBatch.from_pylist(rows, schema)`` into ``pq.ParquetWriter`` (pyarrow's defaults), or
  ``json.dumps`` per row. It is the 1.00x of every ratio, with the same sink;
* streamjob columnar: ``key_by("key").sum("value")`` (Arrow batches, numpy kernels);
* streamjob per-record: a ``KeyedProcessFunction`` keeping the sum in ``ValueState``;
* Bytewax (optional: ``pip install 'streamjob[bench]'``; note sink only): ``key_on`` +
  ``stateful_map``, 2 processes;

each streamjob and Bytewax case with checkpoints off and every 1 s (streamjob exactly-once to
file:// storage; Bytewax snapshots into its SQLite recovery partitions). Every case runs as its
own process tree (``streamjob run`` on the embedded local Spark), started from here, so:

* events/s = rows / (last record - first record at the sink): what the engine sustains; for a
  real sink the end is when its last part file was committed (the final checkpoint), and for the
  loop when its file was closed: from the first record to all output readable;
* first record = from starting the command to the first record at the sink (JVM, Spark, tasks);
* peak RSS = the most the whole process tree (driver, JVM, Python workers) held at once,
  sampled every 50 ms; peak PSS the same with shared pages split among their sharers (every 0.5 s),
  and at that peak each process's RSS, PSS and USS by role (the tables under the floors: where
  the memory goes);
* checkpoint cost = 1 - events/s with checkpoints / events/s without, same run and sink;
* events/CPU-s = rows / the CPU seconds (user + system) the whole process tree used between the
  first and the last record, and the checkpoint cost in those terms: on a machine shared with
  other work, wall-clock rates follow the load, what the job itself spent does much less;
* sink wrote = rows, bytes and files in the output directory after the run (read back: the
  rows must be N, and no in-progress file may be left).

Timings on a shared machine are noisy: compare the ratios of one run, and use --repeat: the cases
run interleaved, each ratio (vs loop, checkpoint cost) is taken within a repeat and the median of
those is reported. The lines under the table say whether issue 34's floors are met with the Parquet
sink (per-record >= 0.75x and columnar >= 2x the loop, 1 s checkpoints costing <= 5%; issue 25's were
0.5x, 1.5x and 10%), by wall clock and by CPU seconds.
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
import threading
import time
from pathlib import Path

import numpy as np
import psutil
import pyarrow as pa
import pyarrow.parquet as pq

# A session cluster the user has running (streamjob cluster start) is not what this bench measures.
os.environ.setdefault("STREAMJOB_SESSION", "off")

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
FILES = 4  # two per subtask at parallelism 2
BATCH = 8192


def ensure_data(rows: int, root: Path | None = None) -> Path:
    """The W1 rows as Parquet files, generated once per row count."""
    d = (root or HERE / ".data") / f"w1-{rows}"
    if (d / "_DONE").exists():
        return d
    tmp = d.with_name(d.name + f".tmp{os.getpid()}")
    tmp.mkdir(parents=True, exist_ok=True)
    bounds = np.linspace(0, rows, FILES + 1, dtype=np.int64)
    for k in range(FILES):
        i = np.arange(bounds[k], bounds[k + 1], dtype=np.int64)
        table = pa.table({"key": (i * 2654435761) % 100000, "value": i % 1000})
        pq.write_table(table, tmp / f"part-{k}.parquet", row_group_size=1 << 17)
    (tmp / "_DONE").touch()  # hidden from FileSource (leading "_")
    if d.exists():
        shutil.rmtree(tmp)
    else:
        tmp.rename(d)
    return d


# -- the plain loop (run in a child too, so its RSS and start are measured the same way) ------
def plain_loop(data: Path, out: Path, sink: str = "note") -> None:
    sums: dict = {}
    first = None
    count = 0
    files = out / "files"
    files.mkdir()
    writer = None
    text = open(files / "part-0.jsonl", "w") if sink == "jsonl" else None
    for f in sorted(data.glob("*.parquet")):
        for batch in pq.ParquetFile(f).iter_batches(batch_size=BATCH):
            if first is None:
                first = time.time()
            rows = batch.to_pylist()
            for row in rows:
                key = row["key"]
                total = sums.get(key, 0) + row["value"]
                sums[key] = total
                row["value"] = total
            if sink == "parquet":
                if writer is None:
                    writer = pq.ParquetWriter(files / "part-0.parquet", batch.schema)
                writer.write_batch(pa.RecordBatch.from_pylist(rows, schema=batch.schema))
            elif text is not None:
                text.write("".join(json.dumps(r) + "\n" for r in rows))
            count += batch.num_rows
    if writer is not None:
        writer.close()
    if text is not None:
        text.close()
    (out / "sink-0.json").write_text(json.dumps({"first": first, "last": time.time(), "count": count}))


def sink_output(files: Path, sink: str) -> dict:
    """What a sink left in its directory: rows, bytes, files (part files only; none may be in progress)."""
    if sink == "note":
        return {"rows": 0, "bytes": 0, "files": 0}
    parts = sorted(p for p in files.rglob("*") if p.is_file())
    hidden = [p.name for p in parts if p.name.startswith((".", "_"))]
    if hidden:
        raise RuntimeError(f"{len(hidden)} files left in progress in {files}: {hidden[:5]}")
    rows = 0
    for p in parts:
        if sink == "parquet":
            rows += pq.ParquetFile(p).metadata.num_rows
        else:
            with open(p, "rb") as f:
                rows += sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
    return {"rows": rows, "bytes": sum(p.stat().st_size for p in parts), "files": len(parts)}


# -- one case as a process tree -------------------------------------------------------------
def _role(p: psutil.Process, root: psutil.Process, zygotes: set) -> str:
    """What a process of a case's tree is: the driver, Spark's JVM, the Python daemon (or the proxy Spark
    started for it), a task's worker forked from the daemon."""
    if p.pid == root.pid:
        return "driver (Python: job manager, REST, checkpoint coordinator)"
    cmd = " ".join(p.cmdline())
    if "java" in p.name():
        return "Spark's JVM"
    if "pydaemon" in cmd and "--zygote" in cmd and p.ppid() == root.pid:
        zygotes.add(p.pid)
        return "Python daemon (the zygote the workers fork from)"
    if "pydaemon" in cmd and p.ppid() in zygotes:
        return "task worker"
    parent = p.parent()
    if "pydaemon" in cmd or (parent is not None and "java" in parent.name()):  # after the hand-over: a bare waiter
        return "daemon proxy (Spark's child; hands over to the zygote)"
    return p.name()


def _sample_tree(proc: subprocess.Popen, result: dict) -> None:
    """Every 50 ms: the tree's memory (its peak is reported) and the CPU time all its processes
    used so far (user + system; a process that exited keeps its last reading).

    Memory two ways: the sum of the processes' RSS (a page shared by several processes, as Python
    workers forked from one daemon share its modules, counts once per process) and the sum of their
    PSS (proportional set size: a shared page split among its sharers, so every page counts once:
    what a pod's memory cgroup is charged), the latter every 10th sample (it reads smaps_rollup).
    At the peak of PSS, each process's RSS, PSS and USS (its own pages) by role: where the memory goes."""
    peak = peak_pss = 0
    samples = 0
    cpu_by_pid: dict = {}
    cpu = []  # (wall time, CPU seconds of the tree so far)
    at_peak: list = []
    zygotes: set = set()
    try:
        root = psutil.Process(proc.pid)
        while proc.poll() is None:
            total = pss = 0
            with_pss = samples % 10 == 0
            samples += 1
            each = []
            try:
                for p in [root, *root.children(recursive=True)]:
                    try:
                        with p.oneshot():
                            if with_pss:
                                m = p.memory_full_info()
                                pss += m.pss
                                each.append((_role(p, root, zygotes), m.rss, m.pss, m.uss))
                                total += m.rss
                            else:
                                total += p.memory_info().rss
                            t = p.cpu_times()
                        cpu_by_pid[p.pid] = t.user + t.system
                    except psutil.Error:
                        pass
            except psutil.Error:
                pass
            peak = max(peak, total)
            if pss > peak_pss:
                peak_pss, at_peak = pss, each
            cpu.append((time.time(), sum(cpu_by_pid.values())))
            time.sleep(0.05)
    except psutil.Error:
        pass
    result["peak_rss"] = peak
    result["peak_pss"] = peak_pss
    result["memory_at_peak"] = [{"role": r, "rss_mb": a / 2**20, "pss_mb": b / 2**20, "uss_mb": c / 2**20}
                                for r, a, b, c in sorted(at_peak, key=lambda x: -x[2])]
    result["cpu"] = cpu


def _cpu_between(samples: list, first: float, last: float) -> float:
    """CPU seconds the tree used from ``first`` to ``last`` (interpolated between samples)."""
    if len(samples) < 2:
        return float("nan")
    t, c = np.array(samples).T
    return float(np.interp(last, t, c) - np.interp(first, t, c))


def run_case(engine: str, checkpoint: bool, sink: str, data: Path, rows: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="w1-") as tmp:
        out = Path(tmp) / "out"
        out.mkdir()
        env = {**os.environ, "W1_DATA": str(data), "W1_OUT": str(out), "W1_SINK": sink, "PYTHONUNBUFFERED": "1"}
        if engine == "plain":
            cmd = [sys.executable, str(HERE / "w1.py"), "--plain-child", str(data), str(out), sink]
        elif engine in ("columnar", "per_record"):
            env["W1_PATH"] = engine
            if checkpoint:
                env["W1_CHECKPOINT_DIR"] = f"file://{tmp}/checkpoints"
            cmd = [sys.executable, "-m", "streamjob.runtime.cli", "run", str(HERE / "jobs" / "w1_job.py"), "--no-progress"]
        else:  # bytewax
            cmd = [sys.executable, "-m", "bytewax.testing", "w1_bytewax:flow", "-p", "2"]
            env["PYTHONPATH"] = os.pathsep.join([str(HERE / "jobs"), env.get("PYTHONPATH", "")])
            if checkpoint:
                recovery = Path(tmp) / "recovery"
                recovery.mkdir()
                subprocess.run([sys.executable, "-m", "bytewax.recovery", str(recovery), "2"], check=True,
                               capture_output=True)
                cmd += ["-r", str(recovery), "-s", "1", "-b", "0"]
        started = time.time()
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
        sampled: dict = {}
        sampler = threading.Thread(target=_sample_tree, args=(proc, sampled), daemon=True)
        sampler.start()
        stdout, stderr = proc.communicate(timeout=1800)
        sampler.join()
        if proc.returncode != 0:
            raise RuntimeError(f"{engine} (checkpoints {'on' if checkpoint else 'off'}, sink {sink}) failed "
                               f"({proc.returncode}):\n{stderr[-3000:]}")
        sinks = [json.loads(p.read_text()) for p in out.glob("sink-*.json")]
        sinks = [s for s in sinks if s["first"] is not None]
        count = sum(s["count"] for s in sinks)
        if count != rows:
            raise RuntimeError(f"{engine}: the sink saw {count} records, expected {rows}")
        wrote = sink_output(out / "files", sink)
        if sink != "note" and wrote["rows"] != rows:
            raise RuntimeError(f"{engine} ({sink}): the sink wrote {wrote['rows']} rows, expected {rows}")
        first, last = min(s["first"] for s in sinks), max(s["last"] for s in sinks)
        case = {"engine": engine, "checkpoint": checkpoint, "sink": sink, "wrote": wrote,
                "events_per_s": rows / (last - first),
                "first_record_s": first - started, "total_s": time.time() - started,
                "peak_rss_mb": sampled["peak_rss"] / 2**20, "peak_pss_mb": sampled["peak_pss"] / 2**20,
                "memory_at_peak": sampled["memory_at_peak"],
                "events_per_cpu_s": rows / _cpu_between(sampled["cpu"], first, last)}
        lines = [line for line in stdout.splitlines() if line.startswith("{")]
        if lines:
            case["job"] = json.loads(lines[-1])
        return case


ENGINES = ["plain", "columnar", "per_record", "bytewax"]
SINKS = ["note", "parquet", "jsonl"]
LABELS = {"plain": "plain Python dict loop (1 process)", "columnar": "streamjob columnar (key_by.sum)",
          "per_record": "streamjob per-record (KeyedProcessFunction + ValueState)", "bytewax": "Bytewax 2 processes (stateful_map)"}
SINK_LABELS = {("plain", "parquet"): "pq.ParquetWriter", ("plain", "jsonl"): "json.dumps lines",
               "note": "notes first/last", "parquet": "FileSink.parquet", "jsonl": "FileSink.jsonl"}


def cases_for(engines: set, sinks: list) -> list:
    """(engine, checkpoint, sink) in table order: per sink, the loop, then each engine off and 1 s."""
    out = []
    for sink in sinks:
        for engine in ENGINES:
            if engine not in engines or engine == "bytewax" and sink != "note":
                continue
            out += [(engine, False, sink)] if engine == "plain" else [(engine, False, sink), (engine, True, sink)]
    return out


def _wrote(w: dict, sink: str) -> str:
    if sink == "note":
        return "nothing (noted)"
    return f"{w['rows'] / 1e6:.1f}M rows, {w['bytes'] / 1e6:.0f} MB, {w['files']:.0f} files"


# Issue 34's floors (issue 25's were 0.5x, 1.5x and 10%), with the Parquet sink: what each streamjob path
# must reach against the loop, and what 1 s exactly-once checkpoints may cost it.
FLOOR_VS_LOOP = {"per_record": 0.75, "columnar": 2.0}
FLOOR_CKPT_COST = 0.05
FLOOR_PEAK_MB = 400  # the whole process tree at parallelism 2


def floors(med: dict) -> list:
    """One line per floor (Parquet sink): the figure by wall clock and by CPU seconds, met or missed."""
    out = []
    for engine, floor in FLOOR_VS_LOOP.items():
        for checkpoint in (False, True):
            m = med.get((engine, checkpoint, "parquet"))
            if m is None:
                continue
            wall, cpu = m["vs_loop_events_per_s"], m["vs_loop_events_per_cpu_s"]
            out.append(f"floor {engine} vs loop >= {floor}x (parquet, checkpoints {'1 s' if checkpoint else 'off'}): "
                       f"{wall:.2f}x wall {'met' if wall >= floor else 'MISSED'}, "
                       f"{cpu:.2f}x CPU {'met' if cpu >= floor else 'MISSED'}")
        m = med.get((engine, True, "parquet"))
        if m is not None and "cost_events_per_s" in m:
            wall, cpu = m["cost_events_per_s"], m["cost_events_per_cpu_s"]
            out.append(f"floor {engine} checkpoint cost <= {FLOOR_CKPT_COST:.0%} (parquet): "
                       f"{wall:.0%} wall {'met' if wall <= FLOOR_CKPT_COST else 'MISSED'}, "
                       f"{cpu:.0%} CPU {'met' if cpu <= FLOOR_CKPT_COST else 'MISSED'}")
        if m is not None:
            rss, pss = m["peak_rss_mb"], m["peak_pss_mb"]
            out.append(f"floor {engine} peak memory <= {FLOOR_PEAK_MB} MB (parquet, checkpoints 1 s): "
                       f"RSS {rss:.0f} MB {'met' if rss <= FLOOR_PEAK_MB else 'MISSED'}, "
                       f"PSS {pss:.0f} MB {'met' if pss <= FLOOR_PEAK_MB else 'MISSED'}")
    return out


def memory_table(runs: dict) -> list:
    """Where each streamjob case's memory went at its peak of PSS (its last repeat), by process role."""
    out = []
    for (engine, checkpoint, sink), v in runs.items():
        procs = v[-1].get("memory_at_peak") or []
        if engine not in ("columnar", "per_record") or not procs:
            continue
        out += ["", f"At the peak of {engine} (checkpoints {'1 s' if checkpoint else 'off'}, sink {sink}): "
                    f"RSS / PSS / USS (its own pages) of each process",
                "| process | RSS | PSS | USS |", "|---|---|---|---|"]
        out += [f"| {p['role']} | {p['rss_mb']:.0f} MB | {p['pss_mb']:.0f} MB | {p['uss_mb']:.0f} MB |" for p in procs]
        out.append(f"| all | {sum(p['rss_mb'] for p in procs):.0f} MB | {sum(p['pss_mb'] for p in procs):.0f} MB | "
                   f"{sum(p['uss_mb'] for p in procs):.0f} MB |")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=20_000_000)
    ap.add_argument("--repeat", type=int, default=1, help="runs of every case; the median is reported")
    ap.add_argument("--only", default="", help="comma-separated engines: plain,columnar,per_record,bytewax")
    ap.add_argument("--sinks", default=",".join(SINKS), help="comma-separated sinks: note,parquet,jsonl")
    ap.add_argument("--plain-child", nargs=3, metavar=("DATA", "OUT", "SINK"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.plain_child:
        plain_loop(Path(args.plain_child[0]), Path(args.plain_child[1]), args.plain_child[2])
        return
    sinks = [s for s in SINKS if s in set(filter(None, args.sinks.split(",")))]
    if not sinks:
        ap.error(f"--sinks: choose from {','.join(SINKS)}")
    data = ensure_data(args.rows)
    only = set(filter(None, args.only.split(","))) or set(ENGINES)
    try:
        import bytewax  # noqa: F401
    except ImportError:
        if "bytewax" in only and "note" in sinks:
            print("Bytewax is not installed (pip install 'streamjob[bench]'): its rows are left out", file=sys.stderr)
        only.discard("bytewax")
    only.add("plain")  # the baseline of every ratio
    cases = cases_for(only, sinks)
    runs: dict = {c: [] for c in cases}
    for r in range(args.repeat):
        for c in cases:  # interleaved: load from elsewhere on the machine hits every case alike
            print(f"run {r + 1}/{args.repeat}: {c[0]}, checkpoints {'1 s' if c[1] else 'off'}, sink {c[2]}",
                  file=sys.stderr, flush=True)
            runs[c].append(run_case(c[0], c[1], c[2], data, args.rows))
    med = {c: {k: statistics.median(x[k] for x in v)
               for k in ("events_per_s", "events_per_cpu_s", "first_record_s", "peak_rss_mb", "peak_pss_mb")}
           for c, v in runs.items()}
    for c, v in runs.items():
        med[c]["wrote"] = {k: statistics.median(x["wrote"][k] for x in v) for k in ("rows", "bytes", "files")}
        med[c]["checkpoints"] = statistics.median(x.get("job", {}).get("checkpoints", 0) for x in v)
        # Ratios per repeat (each against the loop and the checkpoint-free case of the same repeat, which
        # ran minutes apart at most), then their median: load from elsewhere moves both sides of a ratio.
        engine, checkpoint, sink = c
        for what in ("events_per_s", "events_per_cpu_s"):
            base = runs[("plain", False, sink)]
            med[c][f"vs_loop_{what}"] = statistics.median(x[what] / b[what] for x, b in zip(v, base))
            if checkpoint and (engine, False, sink) in runs:
                off = runs[(engine, False, sink)]
                med[c][f"cost_{what}"] = statistics.median(1 - x[what] / o[what] for x, o in zip(v, off))
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    title = (f"W1: {args.rows:,} rows, 100k keys, parallelism 2, Parquet source; {when}; {os.cpu_count()} cores "
             f"({platform.processor() or platform.machine()}), Python {platform.python_version()}; "
             f"median of {args.repeat} (ratios: median of the per-repeat ratios)")
    header = ["case", "sink", "checkpoints", "M events/s", "vs loop", "ckpt cost", "M events/CPU-s", "vs loop (CPU)",
              "ckpt cost (CPU)", "sink wrote", "first record", "peak RSS", "peak PSS"]
    table = []
    for c in cases:
        engine, checkpoint, sink = c
        m = med[c]
        cost = cpu_cost = ""
        if "cost_events_per_s" in m:
            cost = f"{m['cost_events_per_s'] * 100:.0f}%"
            cpu_cost = f"{m['cost_events_per_cpu_s'] * 100:.0f}%"
        if not checkpoint:
            mode = "off"
        elif engine == "bytewax":
            mode = "1 s snapshots"
        else:
            mode = f"1 s exactly-once ({m['checkpoints']:.0f})"
        table.append([LABELS[engine], SINK_LABELS.get((engine, sink), SINK_LABELS[sink]), mode,
                      f"{m['events_per_s'] / 1e6:.2f}", f"{m['vs_loop_events_per_s']:.2f}x", cost,
                      f"{m['events_per_cpu_s'] / 1e6:.2f}", f"{m['vs_loop_events_per_cpu_s']:.2f}x", cpu_cost,
                      _wrote(m["wrote"], sink), f"{m['first_record_s']:.1f} s", f"{m['peak_rss_mb']:.0f} MB",
                      f"{m['peak_pss_mb']:.0f} MB"])
    widths = [max(len(str(row[i])) for row in [header, *table]) for i in range(len(header))]
    lines = [title, "", "| " + " | ".join(h.ljust(w) for h, w in zip(header, widths)) + " |",
             "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    lines += ["| " + " | ".join(str(v).ljust(w) for v, w in zip(row, widths)) + " |" for row in table]
    lines += ["", *floors(med), *memory_table(runs)]
    print("\n".join(lines))
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    (out / "w1.json").write_text(json.dumps({"title": title, "runs": [{"case": list(c), "runs": v} for c, v in runs.items()]},
                                            indent=2, default=str))
    (out / "w1.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
