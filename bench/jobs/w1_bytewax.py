"""W1 on Bytewax, the peer in bench/w1.py: ``python -m bytewax.testing bench/jobs/w1_bytewax:flow -p 2``.

The same Parquet files (one partition per file, resumable by batch), a running sum per key in
``stateful_map`` (Bytewax keys are strings), and a sink noting when its first and last records
came (W1_OUT), as TimingSink does for streamjob.
"""

import json
import os
import time

import bytewax.operators as op
import pyarrow.parquet as pq
from bytewax.dataflow import Dataflow
from bytewax.inputs import FixedPartitionedSource, StatefulSourcePartition
from bytewax.outputs import DynamicSink, StatelessSinkPartition

BATCH = 8192


class ParquetPartition(StatefulSourcePartition):
    def __init__(self, path: str, resume: int | None):
        self.batches = pq.ParquetFile(path).iter_batches(batch_size=BATCH)
        self.done = resume or 0
        for _ in range(self.done):
            next(self.batches)

    def next_batch(self):
        batch = next(self.batches)  # StopIteration ends the partition
        self.done += 1
        return batch.to_pylist()

    def snapshot(self):
        return self.done


class ParquetSource(FixedPartitionedSource):
    def __init__(self, directory: str):
        self.directory = directory

    def list_parts(self):
        return sorted(f for f in os.listdir(self.directory) if f.endswith(".parquet"))

    def build_part(self, step_id, for_key, resume_state):
        return ParquetPartition(os.path.join(self.directory, for_key), resume_state)


class TimingPartition(StatelessSinkPartition):
    def __init__(self, path: str):
        self.path = path
        self.first = None
        self.last = None
        self.count = 0

    def write_batch(self, items):
        now = time.time()
        if self.first is None:
            self.first = now
        self.last = now
        self.count += len(items)

    def close(self):
        with open(self.path, "w") as f:
            json.dump({"first": self.first, "last": self.last, "count": self.count}, f)


class TimingSink(DynamicSink):
    def build(self, step_id, worker_index, worker_count):
        return TimingPartition(os.path.join(os.environ["W1_OUT"], f"sink-{os.getpid()}-{worker_index}.json"))


def running_sum(total, row):
    total = (total or 0) + row["value"]
    row["value"] = total
    return total, row


flow = Dataflow("w1")
rows = op.input("in", flow, ParquetSource(os.environ["W1_DATA"]))
keyed = op.key_on("key", rows, lambda r: str(r["key"]))
op.output("out", op.stateful_map("sum", keyed, running_sum), TimingSink())
