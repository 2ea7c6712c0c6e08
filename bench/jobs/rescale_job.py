"""The rescale bench's job: a keyed count over KEYS keys, every EVERY-th row written with its time.

    streamjob run bench/jobs/rescale_job.py BACKEND KEYS RATE OUT CHECKPOINT_DIR [EVERY] [PARALLELISM]

An endless DataGenSource of RATE rows/s {"k": i % KEYS, "i": i}; per key a ValueState count; row i with
i % EVERY == 0 (default 20) is written as {"i", "k", "c" (its key's count), "t" (wall-clock seconds when
the count processed it)} by the exactly-once FileSink into OUT; checkpoints every second into
CHECKPOINT_DIR (RocksDB: incremental). With KEYS a multiple of the parallelism each key's rows come from
one source split, in order, so row i's count is i // KEYS + 1 whatever the parallelism: bench/rescale.py
checks every written row against that, and that none is missing or twice.
"""

import os
import sys
import time

from streamjob.runtime import StreamExecutionEnvironment, Types
from streamjob.runtime.api.functions import KeyedProcessFunction
from streamjob.runtime.api.state import ValueStateDescriptor
from streamjob.runtime.connectors import DataGenSource, FileSink


class Count(KeyedProcessFunction):
    def __init__(self, every: int):
        self.every = every

    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process_element(self, row, ctx):
        c = (self.count.value() or 0) + 1
        self.count.update(c)
        if row["i"] % self.every == 0:
            yield {"i": row["i"], "k": row["k"], "c": c, "t": time.time()}


def main() -> None:
    backend, keys, rate, out, checkpoints = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4], sys.argv[5]
    every = int(sys.argv[6]) if len(sys.argv) > 6 else 20
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(int(sys.argv[7]) if len(sys.argv) > 7 else 2)
    env.configure({"state.backend.type": backend, "execution.checkpointing.incremental": backend == "rocksdb"})
    env.enable_checkpointing(1000)
    env.get_checkpoint_config().set_checkpoint_storage_dir("file://" + os.path.abspath(checkpoints))
    (env.from_source(DataGenSource(lambda i: {"k": i % keys, "i": i}, rows_per_second=rate), name="gen").uid("gen")
     .key_by(lambda r: r["k"], key_type=Types.LONG()).process(Count(every)).name("count").uid("count")
     .sink_to(FileSink.jsonl(out)).uid("files"))
    env.execute(f"rescale {backend}")


if __name__ == "__main__":
    main()
