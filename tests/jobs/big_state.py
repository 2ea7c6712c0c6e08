"""A job whose keyed state is large: ROWS keys, each holding a VALUE_BYTES-byte string.

    streamjob run tests/jobs/big_state.py ROWS VALUE_BYTES hashmap|rocksdb CHECKPOINT_DIR

Used to show that state larger than the memory a task may use runs on RocksDB
(the test bounds task memory with Spark's ``spark.executor.pyspark.memory``).
At the end every task checks that it still reads back what it stored.
"""

import random
import sys

from streamjob.runtime import KeyedProcessFunction, RestartStrategies, StreamExecutionEnvironment, ValueStateDescriptor
from streamjob.runtime.connectors import DataGenSource, DiscardingSink


class Remember(KeyedProcessFunction):
    def __init__(self, value_bytes: int):
        self.value_bytes = value_bytes

    def open(self, ctx):
        self.value = ctx.get_state(ValueStateDescriptor("value"))

    def process_element(self, row, ctx):
        i = row["i"]
        if i % 2 == 0:
            # hex of random bytes: does not compress away (LZ4 would shrink a padded string 30x)
            self.value.update(f"{i:012d}" + random.Random(i).randbytes(self.value_bytes // 2).hex())
        else:  # odd rows read back what the even row before them with the same key stored
            stored = self.value.value()
            assert stored is not None and stored.startswith(f"{i - 1:012d}"), f"key {ctx.get_current_key()}: {stored!r:.40}"
        return None


def build(rows: int, value_bytes: int, backend: str, checkpoints: str) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.set_state_backend(backend)
    env.enable_checkpointing(2000)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoints)
    env.get_checkpoint_config().set_incremental(True)
    env.set_restart_strategy(RestartStrategies.no_restart())  # running out of memory fails the job
    # key i // 2: the odd row reads what the even row just wrote, and every key is new
    source = env.from_source(DataGenSource(lambda i: {"k": i // 2, "i": i}, count=rows), name="rows")
    source.key_by("k").process(Remember(value_bytes)).sink_to(DiscardingSink())
    return env


if __name__ == "__main__":
    rows, value_bytes, backend, checkpoints = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    build(rows, value_bytes, backend, checkpoints).execute(f"big state on {backend}")
