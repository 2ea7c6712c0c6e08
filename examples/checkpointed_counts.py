"""Checkpoints and resume: a count per user, written exactly once, that survives being killed.

    streamjob run examples/checkpointed_counts.py --parallelism 2

It checkpoints every second into ./checkpoints (CHECKPOINTS=... to change it) and keeps the newest
checkpoints when it fails or is canceled (RETAIN_ON_CANCELLATION). Its sink writes JSON lines to
./out/counts (OUT=...) and commits a part file only when the checkpoint that covers it completes, so
what is committed is exactly what the state has counted. Kill it any way you like (Ctrl-C twice,
`kill -9`, a power cut), then resume where the last checkpoint left it:

    streamjob run examples/checkpointed_counts.py --parallelism 2 --from-checkpoint checkpoints

(the newest job's newest checkpoint; or name one, checkpoints/<job id>/chk-<n>: a run that ends
prints the retained checkpoint's path and this command). ROWS bounds the
input (default: 300,000 events at 5,000 a second, a minute of work).
"""

import os

from streamjob.runtime import (CheckpointingMode, ExternalizedCheckpointRetention, KeyedProcessFunction,
                               StreamExecutionEnvironment, ValueStateDescriptor)
from streamjob.runtime.connectors import DataGenSource, FileSink

USERS = 100


def event(i: int) -> dict:
    return {"user": i % USERS, "seq": i}


class CountPerUser(KeyedProcessFunction):
    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", default=0))

    def process_element(self, event, ctx):
        n = self.count.value() + 1
        self.count.update(n)
        yield {"user": event["user"], "seq": event["seq"], "count": n}


def main() -> None:
    rows = int(os.environ.get("ROWS", "300000"))
    rate = float(os.environ.get("RATE", "5000"))
    env = StreamExecutionEnvironment.get_execution_environment()
    env.enable_checkpointing(1000, CheckpointingMode.EXACTLY_ONCE)
    checkpoints = env.get_checkpoint_config()
    checkpoints.set_checkpoint_storage_dir("file://" + os.path.abspath(os.environ.get("CHECKPOINTS", "checkpoints")))
    checkpoints.set_externalized_checkpoint_retention(ExternalizedCheckpointRetention.RETAIN_ON_CANCELLATION)
    checkpoints.set_num_retained_checkpoints(3)
    (
        env.from_source(DataGenSource(event, count=rows, rows_per_second=rate), name="events").uid("events")
        .key_by("user")
        .process(CountPerUser()).uid("count").name("count per user")
        .sink_to(FileSink.jsonl(os.environ.get("OUT", "out/counts"))).uid("files")
    )
    env.execute("checkpointed_counts")


if __name__ == "__main__":
    main()
