"""W1 on streamjob, run by bench/w1.py as ``streamjob run bench/jobs/w1_job.py`` (one process tree per case).

W1_DATA: the Parquet directory; W1_PATH: ``columnar`` (built-in ``sum``) or ``per_record`` (a
KeyedProcessFunction keeping the sum in ValueState); W1_CHECKPOINT_DIR: set for 1 s exactly-once
checkpoints into it; W1_OUT: where each sink subtask notes when its first and last records came.
The last line on stdout is the job's result as JSON.
"""

import json
import os
import sys
import time

from streamjob.runtime import KeyedProcessFunction, StreamExecutionEnvironment, ValueStateDescriptor
from streamjob.runtime.batch import num_rows
from streamjob.runtime.connectors import FileSource
from streamjob.runtime.connectors.base import Sink, SinkWriter


class RunningSum(KeyedProcessFunction):
    def open(self, ctx):
        self.total = ctx.get_state(ValueStateDescriptor("sum", default=0))

    def process_element(self, row, ctx):
        total = self.total.value() + row["value"]
        self.total.update(total)
        row["value"] = total
        yield row


class TimingSink(Sink):
    """Discards records; notes the wall time of the first and the last batch, and the count."""

    default_name = "TimingSink"

    def __init__(self, out_dir: str):
        self.out_dir = out_dir

    def create_writer(self, ctx):
        return TimingWriter(os.path.join(self.out_dir, f"sink-{ctx.get_index_of_this_subtask()}.json"))


class TimingWriter(SinkWriter):
    def __init__(self, path: str):
        self.path = path
        self.first = None
        self.last = None
        self.count = 0

    def write(self, batch):
        now = time.time()
        if self.first is None:
            self.first = now
        self.last = now
        self.count += num_rows(batch)

    def close(self):
        with open(self.path, "w") as f:
            json.dump({"first": self.first, "last": self.last, "count": self.count}, f)


env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(2)
checkpoint_dir = os.environ.get("W1_CHECKPOINT_DIR")
if checkpoint_dir:
    env.enable_checkpointing(1000)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
keyed = env.from_source(FileSource.parquet(os.environ["W1_DATA"]), name="W1").key_by("key")
path = os.environ.get("W1_PATH", "columnar")
(keyed.sum("value") if path == "columnar" else keyed.process(RunningSum())).sink_to(TimingSink(os.environ["W1_OUT"]))
result = env.execute(f"W1-{path}")
stats = [c for c in result.checkpoints or [] if str(c.get("status")).upper() == "COMPLETED"]
print(json.dumps({"running_ms": result.running_time_ms, "net_runtime_ms": result.net_runtime_ms,
                  "checkpoints": len(stats),
                  "max_alignment_ms": max((c["max_alignment_ms"] for c in stats), default=0.0),
                  "max_checkpoint_ms": max((c["duration_ms"] or 0 for c in stats), default=0.0)}), flush=True)
