"""State migration with the State Processor API: a count per user becomes a (count, last seen) row.

    python examples/state_migration.py            (WORKDIR=... to choose where it writes; default ./migration)

Version 1 of the job counts events per user in a ValueState of ints ("count") and keeps the last
event it saw of each user in another ("last-seen"). Version 2 keeps both in one state, "count", of
``Row(count=..., last_seen=...)``, and writes the previous event of the user beside each count. The
states of a running job do not change type by themselves; this script migrates them:

1. runs version 1, and stops it with a savepoint half way through its input (``stop_with_savepoint``,
   as ``streamjob stop -p DIR``);
2. reads the savepoint's two states as Spark DataFrames (``SavepointReader``), joins them into the new
   shape, and writes a new savepoint (``SavepointWriter``): the old "count" operator's state is
   removed and bootstrapped again from the DataFrame; the source's offsets and the sink's pending
   commits are taken over as they are;
3. resumes version 2 from the new savepoint (as ``streamjob run -s PATH``): it continues where
   version 1 stopped.

Then it checks the committed output of both runs together: every event exactly once, each user's
counts 1, 2, 3... without a gap, and each "last seen" the user's event before, across the migration.
"""

import glob
import json
import os
import shutil
import sys
import time

from streamjob.runtime import (CheckpointingMode, KeyedProcessFunction, StreamExecutionEnvironment,
                               ValueStateDescriptor)
from streamjob.runtime.api.types import Row, Types
from streamjob.runtime.connectors import DataGenSource, FileSink
from streamjob.state import KeyedStateBootstrapFunction, OperatorTransformation, SavepointReader, SavepointWriter

USERS = 50
EVENTS = 12_000


def event(i: int) -> dict:
    return {"user": i % USERS, "seq": i}


class CountV1(KeyedProcessFunction):
    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", default=0))
        self.last = ctx.get_state(ValueStateDescriptor("last-seen", default=-1))

    def process_element(self, event, ctx):
        n = self.count.value() + 1
        previous = self.last.value()
        self.count.update(n)
        self.last.update(event["seq"])
        yield {"user": event["user"], "seq": event["seq"], "count": n, "previous": previous}


class CountV2(KeyedProcessFunction):
    """Version 2: one state of rows."""

    def open(self, ctx):
        self.stats = ctx.get_state(ValueStateDescriptor("count"))

    def process_element(self, event, ctx):
        stats = self.stats.value() or Row(count=0, last_seen=-1)
        n = stats["count"] + 1
        self.stats.update(Row(count=n, last_seen=event["seq"]))
        yield {"user": event["user"], "seq": event["seq"], "count": n, "previous": stats["last_seen"]}


class MigrateCounts(KeyedStateBootstrapFunction):
    """Writes version 2's "count" state of a user from the row the migration made for it."""

    def open(self, ctx):
        self.stats = ctx.get_state(ValueStateDescriptor("count"))

    def process_element(self, row, ctx):
        self.stats.update(Row(count=row["count"], last_seen=row["last_seen"]))


def job(version: int, workdir: str, rate: float | None, restore: str | None = None) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(500, CheckpointingMode.EXACTLY_ONCE)
    env.get_checkpoint_config().set_checkpoint_storage_dir(f"file://{workdir}/checkpoints")
    if restore:
        env.configure({"execution.state-recovery.path": restore})
    count = CountV1() if version == 1 else CountV2()
    (env.from_source(DataGenSource(event, count=EVENTS, rows_per_second=rate), name="events").uid("events")
        .key_by("user")
        .process(count).uid("count").name(f"count v{version}")
        .sink_to(FileSink.jsonl(f"{workdir}/out")).uid("files"))
    return env


def run_v1_until_savepoint(workdir: str) -> str:
    client = job(1, workdir, rate=3000).execute_async("counts v1")
    client.wait_until_running(120)
    deadline = time.monotonic() + 120
    while len(committed(workdir)) < EVENTS // 3 and time.monotonic() < deadline:
        time.sleep(0.1)  # a third of the input committed (checkpoints commit the sink's files): stop there
    return client.stop_with_savepoint(False, f"{workdir}/savepoints", timeout=120)


def migrate(spark, savepoint: str, target: str) -> str:
    reader = SavepointReader.read(spark, savepoint)
    # key, value: both bigint (declared: else a sample of the values is read first to infer them)
    counts = reader.read_keyed_state("count", "count", Types.LONG(), Types.LONG())
    last = reader.read_keyed_state("count", "last-seen", Types.LONG(), Types.LONG()) \
        .withColumnRenamed("value", "last_seen")
    migrated = counts.withColumnRenamed("value", "count").join(last, "key")  # key, count, last_seen
    return (SavepointWriter.from_existing_savepoint(spark, savepoint)
            .remove_operator("count")
            .with_operator("count", OperatorTransformation.bootstrap_with(migrated).key_by("key")
                           .transform(MigrateCounts()))
            .write(target))


def committed(workdir: str) -> list[dict]:
    rows = []
    for path in glob.glob(f"{workdir}/out/*"):  # committed part files only (in-progress ones are hidden)
        with open(path) as f:
            rows += [json.loads(line) for line in f]
    return rows


def check(rows: list[dict]) -> None:
    """Both runs' output as one uninterrupted run of version 2 would have written it."""
    assert sorted(r["seq"] for r in rows) == list(range(EVENTS)), "every event exactly once"
    by_user: dict = {}
    for r in sorted(rows, key=lambda r: r["seq"]):
        seen = by_user.setdefault(r["user"], [])
        assert r["count"] == len(seen) + 1, f"user {r['user']}: count {r['count']} after {len(seen)} events"
        assert r["previous"] == (seen[-1] if seen else -1), f"user {r['user']}: last seen {r['previous']}"
        seen.append(r["seq"])


def main(workdir: str | None = None, spark=None) -> int:
    """Returns the number of events version 2 counted after the migration."""
    workdir = os.path.abspath(workdir or os.environ.get("WORKDIR", "migration"))
    shutil.rmtree(workdir, ignore_errors=True)
    savepoint = run_v1_until_savepoint(workdir)
    before = len(committed(workdir))
    print(f"version 1 stopped with savepoint {savepoint} after {before} events", file=sys.stderr)
    if spark is None:
        from streamjob.state.cli import local_spark

        spark = local_spark(2)  # the local Spark the job ran on
    migrated = migrate(spark, savepoint, f"{workdir}/migrated")
    print(f"migrated savepoint: {migrated}", file=sys.stderr)
    job(2, workdir, rate=None, restore=migrated).execute("counts v2")
    rows = committed(workdir)
    check(rows)
    print(f"OK: {len(rows)} events, {before} counted by version 1 and {len(rows) - before} by version 2 after the "
          f"migration; every count and last-seen exact")
    return len(rows) - before


if __name__ == "__main__":
    main()
