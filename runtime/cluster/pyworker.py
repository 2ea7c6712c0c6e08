"""The Python worker of the embedded local Spark (``spark.python.worker.module``): PySpark's own
worker, imported from the installed package instead of the zip Spark puts first on its path.

Spark starts each worker with ``$SPARK_HOME/python/lib/pyspark.zip`` (and py4j's zip) ahead of the
interpreter's own path. The zip holds sources only and Python cannot cache compiled code for a
zip, so every worker compiled PySpark's modules anew: ~0.8 s of a worker's start on 2 cores,
against ~0.1 s from the installed package's cached bytecode. In local mode the workers run the
driver's interpreter, whose installed PySpark is the very one Spark was started from, so the zips
are dropped when that package is importable without them; the worker itself is unchanged.

This module is imported before PySpark and must stay light: only the standard library.
"""

from __future__ import annotations

import os
import runpy
import sys

# Arrow's allocator (mimalloc) keeps the pages of freed buffers for a while, to reuse them. A task's
# batches come and go every few milliseconds, so each worker held ~30 MB more than it used (W1 at
# p=2: 155 against 185 MB RSS a worker), at no throughput measurable (bench/w1.py). And it commits
# its first arena (1 GiB reserved) eagerly, as it is first used: ~17 MB more of each worker's own
# memory than Arrow ever held at once (W1 per-record at p=2: 65 against 48 MB USS a worker, with
# 3 MB allocated and 12 MB at most by the pool's own count). mimalloc reads them once, so they are
# set before pyarrow is imported; a user's own setting wins.
ARROW_ALLOCATOR_ENV = {"MIMALLOC_PURGE_DELAY": "0", "MIMALLOC_ARENA_EAGER_COMMIT": "0"}
os.environ.update({k: os.environ.get(k, v) for k, v in ARROW_ALLOCATOR_ENV.items()})


def spark_zips_to_drop(path: list[str]) -> list[str]:
    """The zips of PySpark's own distribution on ``path`` whose package is also installed on it."""
    drop = []
    for entry in path:
        name = os.path.basename(entry)
        if not (entry.endswith(".zip") and name.startswith(("pyspark", "py4j"))):
            continue
        # <site>/pyspark/python/lib/{pyspark.zip,py4j-*.zip}: the installed packages are <site>/{pyspark,py4j}
        spark_home = os.path.dirname(os.path.dirname(os.path.dirname(entry)))
        site = os.path.dirname(spark_home)
        module = "pyspark" if name.startswith("pyspark") else "py4j"
        installed = os.path.basename(spark_home) == "pyspark" and os.path.exists(os.path.join(site, module, "__init__.py"))
        if installed and os.path.realpath(site) in {os.path.realpath(p) for p in path if p and p != entry}:
            drop.append(entry)
    return drop


def main() -> None:
    from ..startup_trace import mark

    mark("worker module")
    for entry in spark_zips_to_drop(sys.path):
        sys.path.remove(entry)
    # Exactly as Spark runs its worker (``python -m pyspark.worker``), from cached bytecode.
    try:
        runpy.run_module("pyspark.worker", run_name="__main__", alter_sys=True)
    except Exception as e:  # noqa: BLE001 - only a late worker's is swallowed, see below
        if not is_late_worker(e) or os.environ.get("STREAMJOB_VERBOSE"):
            raise
        sys.exit(1)


def is_late_worker(error: BaseException) -> bool:
    """The worker could not connect back to the executor that started it: PySpark's CANNOT_OPEN_SOCKET
    from ``get_sock_file_to_executor``, before any task reached it. Spark gave up waiting for it: its
    task was canceled (a worker Spark started for an attempt the job manager just ended) or Spark
    failed that task itself, as "Python worker failed to connect back", which reaches the job as the
    attempt's failure. Either way its own traceback on the console says nothing more (``-v`` shows it)."""
    if "CANNOT_OPEN_SOCKET" not in str(error):
        return False
    frames = []
    tb = error.__traceback__
    while tb is not None:
        frames.append((tb.tb_frame.f_code.co_name, tb.tb_frame.f_code.co_filename))
        tb = tb.tb_next
    # pyspark.worker's main() on the traceback: a task's own work raised it, no late worker's.
    ran_a_task = any(name == "main" and file.endswith(os.path.join("pyspark", "worker.py")) for name, file in frames)
    return any(name == "get_sock_file_to_executor" for name, _ in frames) and not ran_a_task


if __name__ == "__main__":
    main()
