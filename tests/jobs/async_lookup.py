"""An async I/O job for the fault-tolerance tests: each record waits a random few milliseconds on
an asyncio loop (a stand-in for a service call) and comes back doubled, so its result is
deterministic while the order the calls complete in is not.

    streamjob run tests/jobs/async_lookup.py OUT CHECKPOINT_DIR ROWS ROWS_PER_SECOND [ordered|unordered|both]
"""

import asyncio
import random
import sys

from streamjob.runtime import (
    AsyncDataStream,
    AsyncFunction,
    CheckpointingMode,
    RestartStrategies,
    StreamExecutionEnvironment,
    Time,
)
from streamjob.runtime.connectors import DataGenSource, FileSink


class Double(AsyncFunction):
    def __init__(self, max_delay_ms: float = 20.0):
        self.max_delay_s = max_delay_ms / 1000.0

    async def async_invoke(self, value):
        await asyncio.sleep(random.uniform(0, self.max_delay_s))
        return [{"i": value["i"], "doubled": value["i"] * 2}]


def row(i):
    return {"i": i}


def expected_rows(rows: int) -> list[tuple]:
    return [(i, 2 * i) for i in range(rows)]


def build(out: str, checkpoints: str, rows: int, rate: float, ordered: bool | None, interval_ms: int = 300,
          capacity: int = 50, parallelism: int = 3, restore: str | None = None,
          unaligned: bool = False) -> StreamExecutionEnvironment:
    """``ordered`` None: both pipelines in one job (two sources, one for each mode), writing to
    ``out``/unordered and ``out``/ordered, so one run's failures hit both. The unordered pipeline
    rebalances its source's records to the async operator (records in channels: with ``unaligned``
    checkpoints they become channel state); the ordered one is chained, so each subtask's output
    keeps its source split's order."""
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    if restore:
        env.configure({"execution.state-recovery.path": restore})
    env.enable_checkpointing(interval_ms, CheckpointingMode.EXACTLY_ONCE)
    config = env.get_checkpoint_config()
    config.set_checkpoint_storage(checkpoints)
    if unaligned:
        config.enable_unaligned_checkpoints()
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(20, 100))
    for mode in ((False, True) if ordered is None else (ordered,)):
        name = "ordered" if mode else "unordered"
        source = env.from_source(DataGenSource(row, count=rows, rows_per_second=rate), None, f"numbers-{name}")
        wait = AsyncDataStream.ordered_wait if mode else AsyncDataStream.unordered_wait
        target = f"{out}/{name}" if ordered is None else out
        source = source.uid(f"numbers-{name}")
        wait(source if mode else source.rebalance(), Double(), Time.seconds(10), capacity).uid(f"lookup-{name}") \
            .sink_to(FileSink.jsonl(target)).uid(f"files-{name}")
    return env


if __name__ == "__main__":
    out, checkpoints, rows, rate = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    ordered = {"ordered": True, "unordered": False}.get(sys.argv[5] if len(sys.argv) > 5 else "both")
    build(out, checkpoints, rows, rate, ordered).execute("async-lookup")
