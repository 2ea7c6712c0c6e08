"""Counts per user with queryable state: the queryable state tests' job.

    streamjob run tests/jobs/queryable_counts.py IN_DIR OUT CHECKPOINT_DIR BACKEND KILL_MARKER

Reads IN_DIR (JSON lines {"user": "u<k>", "n": i}, watched: the job runs until stopped and is
quiescent once every file is read). Per user (a STRING key): its count in a ValueState queryable as
"counts", its last three n in a ListState ("recent"), its counts by parity of n in a MapState
("parity"); per n % 5 (an INT key) the latest record via as_queryable_state("latest"). Writes
{"user", "count"} per record to the exactly-once FileSink OUT. BACKEND: hashmap or rocksdb. When the
file KILL_MARKER appears, the first subtask that sees it deletes it and SIGKILLs itself (a failover).
Parallelism 2, or PARALLELISM.
"""

import os
import signal
import sys

from streamjob.runtime import RestartStrategies, StreamExecutionEnvironment, Types
from streamjob.runtime.api.functions import KeyedProcessFunction
from streamjob.runtime.api.state import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor
from streamjob.runtime.connectors import FileSink, FileSource


class Counts(KeyedProcessFunction):
    def __init__(self, kill_marker: str):
        self.kill_marker = kill_marker

    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", Types.LONG()).set_queryable("counts"))
        self.recent = ctx.get_list_state(ListStateDescriptor("recent", Types.LONG()).set_queryable("recent"))
        self.parity = ctx.get_map_state(MapStateDescriptor("parity", Types.STRING(), Types.LONG()).set_queryable("parity"))

    def process_element(self, value, ctx):
        if os.path.exists(self.kill_marker):
            try:
                os.remove(self.kill_marker)
            except FileNotFoundError:
                pass
            else:
                os.kill(os.getpid(), signal.SIGKILL)
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        self.recent.update((list(self.recent.get() or []) + [value["n"]])[-3:])
        parity = "even" if value["n"] % 2 == 0 else "odd"
        self.parity.put(parity, (self.parity.get(parity) or 0) + 1)
        yield {"user": value["user"], "count": count}


def build(in_dir: str, out: str, checkpoints: str, backend: str, kill_marker: str,
          parallelism: int = 2, restarts: int | None = None) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    env.configure({"state.backend.type": backend, "execution.batch-size": "200"})
    env.enable_checkpointing(300)
    env.get_checkpoint_config().set_checkpoint_storage_dir("file://" + os.path.abspath(checkpoints))
    if restarts is not None:
        env.set_restart_strategy(RestartStrategies.fixed_delay_restart(restarts, 100))
    records = env.from_source(FileSource.jsonl(in_dir, monitor_interval=0.2), name="clicks").uid("clicks")
    (records.key_by(lambda r: r["user"], key_type=Types.STRING()).process(Counts(kill_marker)).uid("counts")
     .name("counts").sink_to(FileSink.jsonl(out)).uid("out"))
    records.key_by(lambda r: r["n"] % 5, key_type=Types.INT()).as_queryable_state("latest")
    return env


def main() -> None:
    in_dir, out, checkpoints, backend, kill_marker = sys.argv[1:6]
    build(in_dir, out, checkpoints, backend, kill_marker, int(os.environ.get("PARALLELISM", "2"))) \
        .execute("queryable counts")


if __name__ == "__main__":
    main()
