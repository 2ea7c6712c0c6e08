"""The Python daemon of the job's Spark (``spark.python.daemon.module``): PySpark's own daemon, with
the task's modules imported once, before it forks a worker per task.

Without a daemon, Spark starts each task's Python worker as a process of its own, one at a time
(~0.2 s each on 2 cores, waiting for it to connect back), and every worker imports the task's code
anew (PySpark's worker, cloudpickle, pyarrow, the slot runtime: ~0.65 s). A restart after a failure
starts a whole new set of workers: on 2 cores ~1.9 s from a task's kill to all tasks running, most
of it those starts. PySpark's daemon forks its workers instead; this one imports the task's modules
before the first fork, so a forked worker starts with them loaded and shares their pages with the
daemon (copy on write): the restart takes ~0.6 s.

PySpark's daemon imports a worker's modules after the fork because some libraries start threads
on import, which a fork does not carry over. Those imported here are fork-safe: pyarrow's jemalloc
background thread and OpenBLAS's (numpy) pool have fork handlers and are started again in the
child when used (tests/test_local_spark.py runs the forked workers' pyarrow and numpy). Nothing
here leaves a Python thread running (the zygote's loading thread has ended before the first fork).

Run as ``python -m streamjob.runtime.cluster.pydaemon``, on the driver (local Spark) and on
Kubernetes executors alike (the image has streamjob); ``spark.python.use.daemon=false`` goes back to
a process per worker.
"""

from __future__ import annotations

import os
import sys

from . import pyworker  # sets Arrow's allocator up before pyarrow loads (ARROW_ALLOCATOR_ENV)
from .process_tree import PRELOAD_ENV
from .session import TASK_CWD_ENV

# What a task imports (spark._task_entry, and what it loads before its sources run), in the order it does.
PRELOADED = (
    "pyspark.worker",
    "cloudpickle",
    "streamjob.runtime.task.factory",
    "streamjob.runtime.task.slot",
    "streamjob.runtime.cluster.control",
    "streamjob.runtime.cluster.pod",
)


def job_modules(env: dict | None = None) -> list[str]:
    """The job's own modules to preload, from ``PRELOAD_ENV``."""
    value = (os.environ if env is None else env).get(PRELOAD_ENV, "")
    return [name.strip() for name in value.split(",") if name.strip()]


def preload(extra: list[str] | tuple[str, ...] = ()) -> list[str]:
    """Import the task's modules and ``extra``; those that cannot be imported are left to the worker
    (which then fails with the error a task would have met anyway). Returns the ones that failed."""
    import importlib

    names = [*PRELOADED, *extra]
    if all(name in sys.modules for name in names):
        return []  # the zygote's, taken as the daemon: loaded and frozen already
    try:
        import pyarrow  # noqa: F401

        from .. import arrow_pandas

        arrow_pandas.defer()  # pyarrow's conversions load pandas only once something imports it
    except ImportError:
        pass  # the task reports it
    failed = []
    for name in names:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - the forked worker imports it again and reports the error as a task
            failed.append(name)
    # Every object so far is left out of the garbage collector's passes: a full collection in a
    # forked worker writes into each object it visits, and so copies the page under it from the
    # daemon (W1 at p=2: 15-20 MB less of each worker's memory is its own).
    import gc

    gc.collect()
    gc.freeze()
    return failed


def main() -> None:
    from . import zygote
    from ..startup_trace import mark

    if sys.argv[1:2] == ["--zygote"]:  # started by `streamjob run` beside the JVM's launch (zygote.start)
        # Returns as the daemon Spark started, its streams and setting taken.
        zygote.serve(sys.argv[2], preload, lower=zygote.FULL_SPEED not in sys.argv[3:])
    elif os.environ.get(zygote.ENV, "off") != "off":
        zygote.hand_over(os.environ[zygote.ENV])  # exits once the zygote, the daemon now, has ended
    task_cwd = os.environ.get(TASK_CWD_ENV)
    if task_cwd:  # a session cluster's JVM works elsewhere: the tasks work where their run does
        os.chdir(task_cwd)
    mark("daemon module")
    for entry in pyworker.spark_zips_to_drop(sys.path):
        sys.path.remove(entry)
    preload(job_modules())  # the zygote's: what it was told already is loaded; the rest now
    mark("daemon preloaded")
    from pyspark import daemon

    daemon.manager()


if __name__ == "__main__":
    main()
