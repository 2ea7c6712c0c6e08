"""``streamjob state``: savepoints and retained checkpoints from the command line, read on local Spark.

    streamjob state ls PATH
    streamjob state dump PATH --uid U --state S [--format parquet|jsonl|csv] [--out DIR]

A click group: more ``state`` commands join it (``streamjob state query`` for live state).
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

FORMATS = ("jsonl", "parquet", "csv")


@click.group("state")
def state() -> None:
    """State from outside a job: read savepoints and retained checkpoints (the State Processor API:
    ls, dump), or look keys up in a running job's queryable state (query)."""


def local_spark(parallelism: int) -> Any:
    """A SparkSession on the embedded local Spark, set up as `streamjob run` sets up its own (the same
    quiet logging, loopback addresses and Python workers), or the one already running in this process."""
    from pyspark.sql import SparkSession

    from streamjob.runtime.cluster.spark import LOCAL_BATCH_JVM_OPTIONS, _prepare_environment, spark_settings

    master = f"local[{parallelism}]"
    _prepare_environment(master, {})
    builder = SparkSession.builder.appName("streamjob state")
    # tasks of a local master run in the driver JVM: the Arrow batches of a dump pass through its heap,
    # and every row through its code (hence the JIT and collector of a batch job)
    settings = spark_settings({}, master, "", LOCAL_BATCH_JVM_OPTIONS)
    # Python workers talk to the JVM over Unix domain sockets rather than loopback TCP: a Python
    # task's fixed cost 0.16 s instead of 0.22-0.29 s here (a read of a savepoint is one such job)
    settings["spark.python.unix.domain.socket.enabled"] = "true"
    for key, value in {**settings, "spark.driver.memory": "1g"}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _reader(path: str, parallelism: int) -> Any:
    from streamjob.runtime.checkpoint.metadata import CheckpointFormatError
    from streamjob.state import SavepointReader

    try:
        return SavepointReader.read(local_spark(parallelism), path)
    except (CheckpointFormatError, ValueError) as e:
        raise click.ClickException(str(e)) from None


def _size(n: int | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


@state.command("ls")
@click.argument("path")
@click.option("--json", "as_json", is_flag=True, help="One JSON document instead of the table.")
@click.option("-a", "--all", "show_all", is_flag=True, help="Also the runtime's own state (timers: names starting with _).")
@click.option("-p", "--parallelism", type=click.IntRange(min=1), default=2, show_default=True,
              help="Local Spark slots reading the state files.")
def ls(path: str, as_json: bool, show_all: bool, parallelism: int) -> None:
    """Operators of a savepoint or checkpoint, their states, kinds, keys and bytes."""
    from dataclasses import asdict

    reader = _reader(path, parallelism)
    operators = _fail_nicely(reader.operators)
    meta = reader.metadata
    if as_json:
        click.echo(json.dumps({"path": reader.url, "type": meta.kind, "checkpoint_id": meta.checkpoint_id,
                               "job_id": meta.job_id, "job_name": meta.job_name,
                               "operators": [asdict(o) for o in operators]}, indent=2))
        return
    click.echo(f"{meta.kind} {meta.checkpoint_id} of job {meta.job_name or '-'} ({meta.job_id}), "
               f"parallelism {meta.parallelism}, max parallelism {meta.max_parallelism}")
    rows = [("UID", "STATE", "KIND", "KEYS", "ENTRIES", "BYTES")]
    for op in operators:
        rows.append((op.uid, "", f"operator: {op.name}, p={op.parallelism}, {op.backend}", "", "", _size(op.bytes)))
        for s in op.keyed_states:
            if s.internal and not show_all:
                continue
            rows.append(("", s.name, f"keyed {s.kind}", str(s.keys), str(s.entries), _size(s.bytes)))
        for s in op.operator_states:
            rows.append(("", s.name, f"operator {s.mode}", "", str(s.entries), ""))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        click.echo("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())


def _fail_nicely(call: Any, *args: Any) -> Any:
    """Errors from the Spark tasks (a damaged file) as one line naming the file, not a JVM trace."""
    try:
        return call(*args)
    except click.ClickException:
        raise
    except Exception as e:  # noqa: BLE001 - Spark wraps the task's exception: find its message
        raise click.ClickException(_task_error(e)) from None


def _task_error(error: BaseException) -> str:
    from streamjob.state import StateNotFoundError

    if isinstance(error, (StateNotFoundError, TypeError, ValueError)) and "\n" not in str(error):
        return str(error)
    text = str(error)
    for marker in ("StateReadError: ", "StateNotFoundError: ", "ColumnMismatch: "):
        if marker in text:
            return text.split(marker, 1)[1].split("\n", 1)[0]
    return text.strip().splitlines()[-1] if text.strip() else type(error).__name__


@state.command("dump")
@click.argument("path")
@click.option("--uid", required=True, help="The operator's uid.")
@click.option("--state", "state_name", required=True, help="The state's name (keyed or operator state).")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="jsonl", show_default=True)
@click.option("--out", type=click.Path(file_okay=False), help="Directory to write (Spark's part files); "
                                                              "default: JSON lines on stdout.")
@click.option("--value-format", type=click.Choice(("infer", "text", "pickle")), default="infer", show_default=True,
              help="How values without a recorded type become columns (docs/state-processor.md).")
@click.option("-p", "--parallelism", type=click.IntRange(min=1), default=2, show_default=True,
              help="Local Spark slots reading the state files.")
def dump(path: str, uid: str, state_name: str, fmt: str, out: str | None, value_format: str, parallelism: int) -> None:
    """One state of one operator as rows: keyed state (key, [map_key,] value), list and union state
    (value), broadcast state (key, value)."""
    reader = _reader(path, parallelism)
    df = _fail_nicely(_frame, reader, uid, state_name, value_format)
    if out is None:
        if fmt != "jsonl":
            raise click.UsageError(f"--format {fmt} needs --out DIR")
        import warnings

        with warnings.catch_warnings():  # toJSON: "will return a DataFrame in future releases"
            warnings.simplefilter("ignore")
            lines = _fail_nicely(lambda: df.toJSON().toLocalIterator())
        for line in lines:  # streamed a partition at a time, never the whole state on the driver
            sys.stdout.write(line + "\n")
        return
    if fmt == "csv":  # CSV holds no nested columns: those are written as JSON text
        from pyspark.sql import functions as F
        from pyspark.sql.types import ArrayType, BinaryType, MapType, StructType

        df = df.select(*[F.to_json(F.col(f.name)).alias(f.name)
                         if isinstance(f.dataType, (ArrayType, MapType, StructType))
                         else F.base64(F.col(f.name)).alias(f.name) if isinstance(f.dataType, BinaryType)
                         else F.col(f.name) for f in df.schema.fields])
    writer = df.write.mode("errorifexists")
    _fail_nicely(lambda: writer.options(header=True).csv(out) if fmt == "csv"
                 else writer.json(out) if fmt == "jsonl" else writer.parquet(out))
    click.echo(f"wrote {fmt} to {out}", err=True)


def _frame(reader: Any, uid: str, name: str, value_format: str) -> Any:
    from streamjob.state import StateNotFoundError
    from streamjob.state.plan import keyed_state_kinds, operator

    operator(reader.metadata, uid)
    if name in keyed_state_kinds(reader.metadata, uid):
        return reader.read_keyed_state(uid, name, value_format=value_format)
    modes = {s.name: s.mode for op in reader.operators() if op.uid == uid for s in op.operator_states}
    if name not in modes:
        known = sorted(n for n in keyed_state_kinds(reader.metadata, uid) if not n.startswith("_")) + sorted(modes)
        raise StateNotFoundError(f"operator {uid!r} has no state {name!r}; its states: {', '.join(known) or 'none'}")
    if modes[name] == "broadcast":
        return reader.read_broadcast_state(uid, name, value_format=value_format)
    read = reader.read_union_state if modes[name] == "union" else reader.read_list_state
    return read(uid, name, value_format=value_format)
