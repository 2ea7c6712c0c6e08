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
    runpy.run_module("pyspark.worker", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
