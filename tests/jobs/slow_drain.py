"""A map that sleeps per record, into the exactly-once FileSink: the stop tests' job (run in a pty).

    streamjob run tests/jobs/slow_drain.py OUT CHECKPOINT_DIR ROWS SLEEP_MS BATCH MARKERS

One source subtask emits {"seq": i} for i = 0..ROWS-1 in batches of BATCH rows (execution.batch-size);
the chained map sleeps SLEEP_MS per record, so a stop that arrives as a batch begins has about
BATCH * SLEEP_MS of records to drain before the final checkpoint. As the map takes the first record
of a batch it creates MARKERS/<seq>, so a test can send its signal just as a batch starts.
Checkpoints every 2 s (CHECKPOINT_MS if set) into CHECKPOINT_DIR (file), with the default retention unless
RETENTION is set.
"""

import os
import sys
import time

from streamjob.runtime import CheckpointingMode, ExternalizedCheckpointRetention, StreamExecutionEnvironment
from streamjob.runtime.connectors import DataGenSource, FileSink


class SlowMap:
    def __init__(self, sleep_s: float, batch: int, markers: str):
        self.sleep_s, self.batch, self.markers = sleep_s, batch, markers

    def __call__(self, record: dict) -> dict:
        if record["seq"] % self.batch == 0:
            open(os.path.join(self.markers, str(record["seq"])), "w").close()
        time.sleep(self.sleep_s)
        return record


def main() -> None:
    out, checkpoints, rows, sleep_ms, batch, markers = sys.argv[1:7]
    os.makedirs(markers, exist_ok=True)
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.configure({"execution.batch-size": batch})
    env.enable_checkpointing(int(os.environ.get("CHECKPOINT_MS", "2000")), CheckpointingMode.EXACTLY_ONCE)
    config = env.get_checkpoint_config()
    config.set_checkpoint_storage_dir("file://" + os.path.abspath(checkpoints))
    if os.environ.get("RETENTION"):
        config.set_externalized_checkpoint_retention(ExternalizedCheckpointRetention[os.environ["RETENTION"]])
    (
        env.from_source(DataGenSource(lambda i: {"seq": i}, count=int(rows)), name="numbers").uid("numbers")
        .map(SlowMap(float(sleep_ms) / 1000.0, int(batch), os.path.abspath(markers))).uid("slow").name("slow")
        .sink_to(FileSink.jsonl(out)).uid("files")
    )
    if os.environ.get("EXECUTE_ASYNC"):  # streamjob run waits for it when main returns, as Flink's client
        env.execute_async("slow drain")
    else:
        env.execute("slow drain")


if __name__ == "__main__":
    main()
