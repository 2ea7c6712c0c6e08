"""The queryable state bench's job: a keyed count over KEYS keys at full speed, queryable as "counts".

    streamjob run bench/jobs/queryable_job.py BACKEND KEYS RECORDS CHECKPOINT_DIR [PARALLELISM] [INTERVAL_MS]
                                              [full|incremental]

A DataGenSource of RECORDS records {"k": i % KEYS}; per key a ValueState count (queryable "counts",
a LONG key); checkpoints every INTERVAL_MS (default 1000; 0: none) into CHECKPOINT_DIR, full (the default)
or incremental (RocksDB: only new SST files are uploaded); the output is discarded.
"""

import os
import sys

from streamjob.runtime import StreamExecutionEnvironment, Types
from streamjob.runtime.api.functions import KeyedProcessFunction
from streamjob.runtime.api.state import ValueStateDescriptor
from streamjob.runtime.connectors import DataGenSource, DiscardingSink


class Count(KeyedProcessFunction):
    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", Types.LONG()).set_queryable("counts"))

    def process_element(self, value, ctx):
        self.count.update((self.count.value() or 0) + 1)
        return ()


def main() -> None:
    backend, keys, records, checkpoints = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(int(sys.argv[5]) if len(sys.argv) > 5 else 2)
    incremental = len(sys.argv) > 7 and sys.argv[7] == "incremental"
    env.configure({"state.backend.type": backend, "execution.checkpointing.incremental": incremental})
    interval = int(sys.argv[6]) if len(sys.argv) > 6 else 1000
    if interval:
        env.enable_checkpointing(interval)
    env.get_checkpoint_config().set_checkpoint_storage_dir("file://" + os.path.abspath(checkpoints))
    (env.from_source(DataGenSource(lambda i: {"k": i % keys}, count=records), name="gen")
     .key_by(lambda r: r["k"], key_type=Types.LONG()).process(Count()).name("count")
     .sink_to(DiscardingSink()))
    env.execute(f"queryable {backend}")


if __name__ == "__main__":
    main()
