"""Kafka -> key_by.sum -> Kafka on streamjob, run by bench/kafka.py as ``streamjob run bench/jobs/kafka_job.py``.

KB_BOOTSTRAP, KB_IN, KB_OUT: the broker and the topics; KB_PATH: ``columnar`` (JSON decoded into Arrow
columns by a declared row type, ``key_by("k").sum("v")``) or ``per_record`` (values as strings,
``json.loads`` per record, a key function); KB_CHECKPOINT_DIR: set for exactly-once with checkpoints
every KB_INTERVAL_MS (default 1000) into it, unset for no checkpoints and a ``DeliveryGuarantee.NONE``
sink; KB_BOUNDED=1: read up to the offsets there are at the start (the preloaded topic), else run
until stopped (the latency runs). The last line on stdout is the job's result as JSON.
"""

import json
import os
import uuid

from streamjob.runtime import CheckpointingMode, StreamExecutionEnvironment
from streamjob.runtime.api.types import Types
from streamjob.runtime.connectors import (DeliveryGuarantee, JsonRowDeserializationSchema, JsonRowSerializationSchema,
                                          KafkaOffsetsInitializer, KafkaRecordSerializationSchema, KafkaSink,
                                          KafkaSource, SimpleStringSchema)

ROW_TYPE = Types.ROW_NAMED(["k", "i", "v", "t"], [Types.INT(), Types.LONG(), Types.LONG(), Types.LONG()])

bootstrap = os.environ["KB_BOOTSTRAP"]
path = os.environ.get("KB_PATH", "columnar")
checkpoint_dir = os.environ.get("KB_CHECKPOINT_DIR")

env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(2)
if checkpoint_dir:
    env.enable_checkpointing(int(os.environ.get("KB_INTERVAL_MS", "1000")), CheckpointingMode.EXACTLY_ONCE)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)

values = (JsonRowDeserializationSchema.builder().type_info(ROW_TYPE).build() if path == "columnar"
          else SimpleStringSchema())
source = (KafkaSource.builder().set_bootstrap_servers(bootstrap).set_topics(os.environ["KB_IN"])
          .set_starting_offsets(KafkaOffsetsInitializer.earliest()).set_value_only_deserializer(values))
if os.environ.get("KB_BOUNDED") == "1":
    source.set_bounded(KafkaOffsetsInitializer.latest())
sink = (KafkaSink.builder().set_bootstrap_servers(bootstrap)
        .set_record_serializer(KafkaRecordSerializationSchema.builder().set_topic(os.environ["KB_OUT"])
                               .set_key_serialization_schema(lambda r: str(r["k"]).encode())
                               .set_value_serialization_schema(JsonRowSerializationSchema.builder().build())
                               .build())
        .set_delivery_guarantee(DeliveryGuarantee.EXACTLY_ONCE if checkpoint_dir else DeliveryGuarantee.NONE)
        .set_transactional_id_prefix(f"bench-{uuid.uuid4().hex[:8]}")
        .build())

stream = env.from_source(source.build(), None, "kafka")
if path == "columnar":
    summed = stream.key_by("k").sum("v")
else:
    summed = stream.map(json.loads).key_by(lambda r: r["k"]).sum("v")
summed.sink_to(sink)
result = env.execute(f"kafka-bench-{path}")
done = [c for c in result.checkpoints or [] if str(c.get("status")).upper() == "COMPLETED"]
def median(key: str) -> float:
    xs = sorted(c.get(key) or 0.0 for c in done)
    return xs[len(xs) // 2] if xs else 0.0


syncs = sorted(c.get("max_sync_ms") or 0 for c in done)  # the slowest task's synchronous phase: the sink's pre-commit
print(json.dumps({"running_ms": result.running_time_ms, "checkpoints": len(done),
                  "max_checkpoint_ms": max((c.get("duration_ms") or 0 for c in done), default=0.0),
                  "median_checkpoint_ms": syncs and sorted(c.get("duration_ms") or 0 for c in done)[len(done) // 2],
                  "median_sync_ms": syncs and syncs[len(syncs) // 2], "max_sync_ms": syncs and syncs[-1],
                  # How long barriers took to reach the slowest subtask (queued behind in-flight batches) and
                  # the longest alignment: a checkpoint that outlasts its interval shows here, not in sync_ms.
                  "median_start_delay_ms": median("max_start_delay_ms"),
                  "median_alignment_ms": median("max_alignment_ms")}), flush=True)
