"""A keyed job with state and the exactly-once FileSink, for the fault-tolerance tests.

Row i has key i % 30; with parallelism 3 every key comes from one source
subtask (i % 3 fixes it), so each key's records arrive in one order and the
running count of every row is deterministic: ``expected_rows`` computes it.

    streamjob run tests/jobs/counting.py OUT CHECKPOINT_DIR ROWS ROWS_PER_SECOND [hashmap|rocksdb [incremental]]

With ``COUNTING_STALL_FILE=PATH`` in the environment, the counting operator waits while PATH exists:
a test holds a checkpoint or savepoint in flight (its barrier cannot pass) for as long as it likes.
``COUNTING_RETENTION`` overrides the externalized checkpoint retention (RETAIN_ON_CANCELLATION),
``COUNTING_RESTART_ATTEMPTS`` the restart strategy's attempts (fixed delay of 100 ms, 20 attempts).
"""

import os
import random
import sys
import time
from collections import defaultdict

from streamjob.runtime import (
    CheckpointingMode,
    ExternalizedCheckpointRetention,
    KeyedProcessFunction,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    RestartStrategies,
    StreamExecutionEnvironment,
    WatermarkStrategy,
    ValueStateDescriptor,
)
from streamjob.runtime.connectors import DataGenSource, FileSink

KEYS = 30


class Count(KeyedProcessFunction):
    """Keeps its count three ways (value, reducing, map) and checks they agree, plus a bounded list.
    With ``ballast`` > 0 every row also leaves that many bytes of state behind (big checkpoints)."""

    def __init__(self, ballast: int = 0, slow_ms: float = 0.0, stall_file: str | None = None):
        self.ballast = ballast
        self.slow_s = slow_ms / 1000.0  # > 0: a slow operator, so the job runs back-pressured
        self.stall_file = stall_file

    def open(self, ctx):
        self.blob = ctx.get_map_state(MapStateDescriptor("ballast"))
        self.count = ctx.get_state(ValueStateDescriptor("count", default=0))
        self.total = ctx.get_reducing_state(ReducingStateDescriptor("total", lambda a, b: a + b))
        self.by_parity = ctx.get_map_state(MapStateDescriptor("by-parity"))
        self.recent = ctx.get_list_state(ListStateDescriptor("recent"))

    def process_element(self, row, ctx):
        if self.slow_s:
            time.sleep(self.slow_s)
        while self.stall_file and os.path.exists(self.stall_file):
            time.sleep(0.01)
        c = self.count.value() + 1
        self.count.update(c)
        self.total.add(1)
        parity = row["i"] % 2
        self.by_parity.put(parity, (self.by_parity.get(parity) or 0) + 1)
        recent = self.recent.get()[-2:] + [row["i"]]
        self.recent.update(recent)
        if self.total.get() != c or sum(self.by_parity.values()) != c:
            raise AssertionError(f"state of key {ctx.get_current_key()} disagrees: {c}, {self.total.get()}")
        if self.ballast:
            self.blob.put(row["i"], random.Random(row["i"]).randbytes(self.ballast // 2).hex())
        yield {"key": row["key"], "i": row["i"], "count": c, "prev": recent[-2] if len(recent) > 1 else -1}


def row(i):
    return {"key": i % KEYS, "i": i}


def expected_rows(rows: int) -> list[tuple]:
    counts: dict = defaultdict(int)
    last: dict = {}
    out = []
    for i in range(rows):
        k = i % KEYS
        counts[k] += 1
        out.append((k, i, counts[k], last.get(k, -1)))
        last[k] = i
    return sorted(out)


def build(out: str, checkpoints: str, rows: int, rate: float, interval_ms: int = 300,
          mode: CheckpointingMode = CheckpointingMode.EXACTLY_ONCE, backend: str = "hashmap",
          incremental: bool = False, retained: int = 3, ballast: int = 0, parallelism: int = 3,
          restore: str | None = None, conf: dict | None = None, count_uid: str = "count",
          slow_ms: float = 0.0, event_time: bool = False, stall_file: str | None = None,
          retention: str = "RETAIN_ON_CANCELLATION", sink: str = "jsonl") -> StreamExecutionEnvironment:
    """``restore``: a savepoint or checkpoint to start from. With any parallelism a key's rows
    still come in index order: DataGen's splits are residue classes that keep their key.
    ``sink``: the FileSink's format, jsonl or parquet."""
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    if restore:
        env.configure({"execution.state-recovery.path": restore})
    if conf:
        env.configure(conf)
    env.enable_checkpointing(interval_ms, mode)
    env.set_state_backend(backend)
    config = env.get_checkpoint_config()
    config.set_incremental(incremental)
    config.set_checkpoint_storage(checkpoints)
    config.set_num_retained_checkpoints(retained)
    config.set_externalized_checkpoint_retention(ExternalizedCheckpointRetention(retention))
    attempts = int(os.environ.get("COUNTING_RESTART_ATTEMPTS") or 20)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(attempts, 100))
    # event_time: row i happens at i ms (watermarks flow, as the dashboard's event-time panels need)
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner("i") if event_time else None
    source = env.from_source(DataGenSource(row, count=rows, rows_per_second=rate), strategy, "numbers").uid("numbers")
    source.key_by("key").process(Count(ballast, slow_ms, stall_file)).uid(count_uid) \
        .sink_to(getattr(FileSink, sink)(out)).uid("files")
    return env


if __name__ == "__main__":
    out, checkpoints, rows, rate = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    backend = sys.argv[5] if len(sys.argv) > 5 else "hashmap"
    incremental = len(sys.argv) > 6 and sys.argv[6] == "incremental"
    build(out, checkpoints, rows, rate, backend=backend, incremental=incremental,
          stall_file=os.environ.get("COUNTING_STALL_FILE") or None,
          retention=os.environ.get("COUNTING_RETENTION") or "RETAIN_ON_CANCELLATION").execute("counting")
