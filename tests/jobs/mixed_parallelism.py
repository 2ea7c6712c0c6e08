"""A job whose operators run at different parallelism (``set_parallelism``), for the
fault-tolerance tests: by default source 1 -> map 3 (rebalance) -> keyed 2 (max parallelism
64, its own) -> sink 1, with the job's default parallelism 2 for nothing at all.

Records of one key reach the keyed operator from several map subtasks, in an order that varies
from run to run, so the output does not depend on it: every row once as (key, i, i*i) (the
sink's exactly-once), and per key, when its last row arrives, its count and its sum of i (the
keyed state's exactly-once: a row counted twice or lost changes them, or they never come).

    streamjob run tests/jobs/mixed_parallelism.py --parallelism N OUT CHECKPOINT_DIR ROWS ROWS_PER_SECOND

From the command line the source and the sink run at parallelism 1 and the map and the keyed
operator at the job's default (``--parallelism``). With ``MIXED_SUBTASKS=DIR`` in the environment
each subtask of the keyed operator leaves a file ``DIR/totals-<index>-of-<parallelism>``.
"""

import os
import sys

from streamjob.runtime import (
    CheckpointingMode,
    KeyedProcessFunction,
    RestartStrategies,
    StreamExecutionEnvironment,
    ValueStateDescriptor,
)
from streamjob.runtime.connectors import DataGenSource, FileSink

KEYS = 20
DEFAULT = {"source": 1, "map": 3, "keyed": 2, "sink": 1}


def row(i):
    return {"key": i % KEYS, "i": i}


def square(r):
    return {"key": r["key"], "i": r["i"], "v": r["i"] * r["i"]}


class Totals(KeyedProcessFunction):
    def __init__(self, rows: int):
        self.rows = rows

    def open(self, ctx):
        where = os.environ.get("MIXED_SUBTASKS")
        if where:
            name = f"totals-{ctx.get_index_of_this_subtask()}-of-{ctx.get_number_of_parallel_subtasks()}"
            open(os.path.join(where, name), "w").close()
        self.count = ctx.get_state(ValueStateDescriptor("count", default=0))
        self.sum = ctx.get_state(ValueStateDescriptor("sum", default=0))

    def process_element(self, r, ctx):
        c, s = self.count.value() + 1, self.sum.value() + r["i"]
        self.count.update(c)
        self.sum.update(s)
        yield r
        if c == len(range(r["key"], self.rows, KEYS)):  # the key's last row
            yield {"key": r["key"], "i": -1, "v": c}
            yield {"key": r["key"], "i": -2, "v": s}


def expected_rows(rows: int) -> list[tuple]:
    out = [(i % KEYS, i, i * i) for i in range(rows)]
    for k in range(min(KEYS, rows)):
        mine = range(k, rows, KEYS)
        out += [(k, -1, len(mine)), (k, -2, sum(mine))]
    return sorted(out)


def build(out: str, checkpoints: str, rows: int, rate: float, interval_ms: int = 300,
          parallelism: dict | None = None, restore: str | None = None, keyed_max: int = 64,
          default: int | None = 2, groups: dict | None = None, unaligned: bool = False) -> StreamExecutionEnvironment:
    """``parallelism``: operator -> its own parallelism (None: the job's default); ``default``: the
    job's (None: what the command line set); ``groups``: operator -> its slot sharing group;
    ``unaligned``: unaligned checkpoints (in-flight data becomes channel state)."""
    p = {**DEFAULT, **(parallelism or {})}
    env = StreamExecutionEnvironment.get_execution_environment()
    if default is not None:
        env.set_parallelism(default)
    if restore:
        env.configure({"execution.state-recovery.path": restore})
    env.enable_checkpointing(interval_ms, CheckpointingMode.EXACTLY_ONCE)
    config = env.get_checkpoint_config()
    config.set_checkpoint_storage(checkpoints)
    if unaligned:
        config.enable_unaligned_checkpoints()
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(20, 100))
    source = env.from_source(DataGenSource(row, count=rows, rows_per_second=rate), None, "numbers").uid("numbers")
    squares = source.map(square).uid("square")
    totals = squares.key_by(lambda r: r["key"]).process(Totals(rows)).uid("totals").set_max_parallelism(keyed_max)
    sink = totals.sink_to(FileSink.jsonl(out)).uid("files")
    for op, name in ((source, "source"), (squares, "map"), (totals, "keyed"), (sink, "sink")):
        if p[name] is not None:
            op.set_parallelism(p[name])
        if name in (groups or {}):
            op.slot_sharing_group(groups[name])
    return env


def committed(out: str) -> list[tuple]:
    import glob
    import json
    import os

    rows = []
    for path in glob.glob(os.path.join(out, "*")):  # glob skips the hidden in-progress / pending files
        with open(path) as f:
            rows += [(d["key"], d["i"], d["v"]) for d in map(json.loads, f)]
    return sorted(rows)


if __name__ == "__main__":
    out, checkpoints, rows, rate = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    build(out, checkpoints, rows, rate, parallelism={"map": None, "keyed": None}, default=None).execute("mixed-parallelism")
