"""W1 on streamjob, run by bench/w1.py as ``streamjob run bench/jobs/w1_job.py`` (one process tree per case).

W1_DATA: the Parquet directory; W1_PATH: ``columnar`` (built-in ``sum``) or ``per_record`` (a
KeyedProcessFunction keeping the sum in ValueState); W1_CHECKPOINT_DIR: set for 1 s exactly-once
checkpoints into it (W1_CHECKPOINT_INTERVAL_MS: another interval, to profile what one checkpoint
costs); W1_SINK: ``note`` (the default: a sink that only notes when its first and last
records came) or ``parquet`` / ``jsonl`` (the exactly-once FileSink writing the update stream into
W1_OUT/files); W1_OUT: where each sink subtask notes its first and last records (for a FileSink: its
first write and when its last part file was committed, which is when a reader can see all of it).
The last line on stdout is the job's result as JSON.
"""

import json
import os
import time

from streamjob.runtime import KeyedProcessFunction, StreamExecutionEnvironment, ValueStateDescriptor
from streamjob.runtime.batch import num_rows
from streamjob.runtime.connectors import FileSink, FileSource
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
    """Notes the wall time of the first and the last batch, and the count; with ``inner`` (a real
    sink) writes through it, and the end is when the writer closes: after the final commit."""

    default_name = "TimingSink"

    def __init__(self, out_dir: str, inner: Sink | None = None):
        self.out_dir = out_dir
        self.inner = inner
        self.exactly_once = inner.exactly_once if inner is not None else False

    def create_writer(self, ctx):
        inner = self.inner.create_writer(ctx) if self.inner is not None else None
        return TimingWriter(os.path.join(self.out_dir, f"sink-{ctx.get_index_of_this_subtask()}.json"), inner)

    def commit(self, committables):
        if self.inner is not None:
            self.inner.commit(committables)


class TimingWriter(SinkWriter):
    def __init__(self, path: str, inner: SinkWriter | None):
        self.path = path
        self.inner = inner
        self.first = None
        self.last = None
        self.count = 0

    def write(self, batch):
        now = time.time()
        if self.first is None:
            self.first = now
        self.last = now
        self.count += num_rows(batch)
        if self.inner is not None:
            self.inner.write(batch)

    def prepare_commit(self):
        return self.inner.prepare_commit() if self.inner is not None else []

    def snapshot_state(self):
        return self.inner.snapshot_state() if self.inner is not None else []

    def restore_state(self, state):
        if self.inner is not None:
            self.inner.restore_state(state)

    def close(self):
        if self.inner is not None:
            self.inner.close()
            self.last = time.time()  # the final checkpoint committed every part file before close
        with open(self.path, "w") as f:
            json.dump({"first": self.first, "last": self.last, "count": self.count}, f)


env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(2)
checkpoint_dir = os.environ.get("W1_CHECKPOINT_DIR")
if checkpoint_dir:
    env.enable_checkpointing(int(os.environ.get("W1_CHECKPOINT_INTERVAL_MS", "1000")))
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
keyed = env.from_source(FileSource.parquet(os.environ["W1_DATA"]), name="W1").key_by("key")
path = os.environ.get("W1_PATH", "columnar")
sink = os.environ.get("W1_SINK", "note")
files = os.path.join(os.environ["W1_OUT"], "files")
inner = {"note": None, "parquet": FileSink.parquet(files), "jsonl": FileSink.jsonl(files)}[sink]
(keyed.sum("value") if path == "columnar" else keyed.process(RunningSum())).sink_to(TimingSink(os.environ["W1_OUT"], inner))
result = env.execute(f"W1-{path}-{sink}")
stats = [c for c in result.checkpoints or [] if str(c.get("status")).upper() == "COMPLETED"]
print(json.dumps({"running_ms": result.running_time_ms, "net_runtime_ms": result.net_runtime_ms,
                  "checkpoints": len(stats),
                  "max_alignment_ms": max((c["max_alignment_ms"] for c in stats), default=0.0),
                  "max_checkpoint_ms": max((c["duration_ms"] or 0 for c in stats), default=0.0)}), flush=True)
