"""One case of bench/windows.py, run as ``streamjob run bench/jobs/window_job.py`` (its own process tree).

W_DATA: the Parquet directory (key, value, ts); W_CASE: ``rolling`` (the columnar rolling sum),
``window_columnar`` (1 s tumbling event-time windows, built-in ``sum`` by a key column) or
``window_per_record`` (the same windows keyed by a function: the per-record window operator);
W_CHECKPOINT_DIR: set for 1 s exactly-once checkpoints into it. The last stdout line is JSON.
"""

import json
import os

from streamjob.runtime import Duration, StreamExecutionEnvironment, Time, TumblingEventTimeWindows, WatermarkStrategy
from streamjob.runtime.connectors import DiscardingSink, FileSource

env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(2)
checkpoint_dir = os.environ.get("W_CHECKPOINT_DIR")
if checkpoint_dir:
    env.enable_checkpointing(1000)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
case = os.environ["W_CASE"]
strategy = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(100)).with_timestamp_assigner("ts")
rows = env.from_source(FileSource.parquet(os.environ["W_DATA"]), strategy, "W1")
if case == "rolling":
    out = rows.key_by("key").sum("value")
elif case == "window_columnar":
    out = rows.key_by("key").window(TumblingEventTimeWindows.of(Time.seconds(1))).sum("value")
else:
    out = rows.key_by(lambda r: r["key"]).window(TumblingEventTimeWindows.of(Time.seconds(1))).sum("value")
out.sink_to(DiscardingSink())
result = env.execute(f"windows-{case}")
stats = [c for c in result.checkpoints or [] if str(c.get("status")).upper() == "COMPLETED"]
agg = next(v["records_out"] for k, v in result.operators.items() if k.startswith(("Window", "Sum")))
# per completed checkpoint: end-to-end duration, state size, the slowest subtask's sync and async phases
# and barrier alignment
ckpt = [{k: c.get(k) for k in ("duration_ms", "state_size", "max_sync_ms", "max_async_ms", "max_alignment_ms")}
        for c in stats]
print(json.dumps({"running_ms": result.running_time_ms, "checkpoints": len(stats), "records_out": agg,
                  "checkpoint_stats": ckpt}), flush=True)
