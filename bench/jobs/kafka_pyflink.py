"""Kafka -> running sum per key -> Kafka on PyFlink, the peer in bench/kafka.py (run by the PyFlink venv's
Python: ``python bench/jobs/kafka_pyflink.py``; env as bench/jobs/kafka_job.py, plus KB_JARS: the Kafka
connector's jars, ``os.pathsep``-separated).

Flink's own ``KafkaSource`` / ``KafkaSink`` (Java), JSON rows decoded and encoded in Java by PyFlink's
``JsonRowDeserializationSchema`` / ``JsonRowSerializationSchema`` with the same row type, the running sum
a Python ``reduce`` on ``key_by`` (what a PyFlink DataStream job with a Python function runs: Flink's
built-in ``sum`` on a Python KeyedStream is a Python reduce too). Tuned: thread mode where pemja is
installed (the Python function in the JVM's process), else process mode with bundles of 1M records / 5 s;
Python metrics off; a state cache above the key count. With KB_CHECKPOINT_DIR set:
EXACTLY_ONCE sink, checkpoints every KB_INTERVAL_MS (1000) exactly-once; unset: no checkpoints, sink
DeliveryGuarantee.NONE. Records are written without a key (a key serializer would need a Java schema of
its own; the checks of bench/kafka.py do not depend on where a key's records land).
"""

import json
import os
import sys
import time
import uuid

from pyflink.common import Configuration, Row, Types, WatermarkStrategy
from pyflink.datastream import CheckpointingMode, StreamExecutionEnvironment
from pyflink.datastream.connectors.base import DeliveryGuarantee
from pyflink.datastream.connectors.kafka import (KafkaOffsetsInitializer, KafkaRecordSerializationSchema, KafkaSink,
                                                 KafkaSource)
from pyflink.datastream.formats.json import JsonRowDeserializationSchema, JsonRowSerializationSchema

ROW_TYPE = Types.ROW_NAMED(["k", "i", "v", "t"], [Types.INT(), Types.LONG(), Types.LONG(), Types.LONG()])

bootstrap = os.environ["KB_BOOTSTRAP"]
checkpoint_dir = os.environ.get("KB_CHECKPOINT_DIR")

config = Configuration()
# Tuned as a user who read PyFlink's performance page would (the defaults did ~1.2k records/s here):
# The Python reduce keeps its state in Flink's state backend (Java), with a cache in the Python worker of
# 1000 keys by default: at 10,000 keys every record became a round trip to Java (~1 ms). A cache above the
# key count is what a user would set.
config.set_integer("python.state.cache-size", 100_000)
config.set_string("python.metric.enabled", "false")  # no Python-side metric bookkeeping per bundle
try:
    import pemja  # noqa: F401 - thread mode runs the Python function in the JVM's process (no gRPC, no bundles)

    config.set_string("python.execution-mode", "thread")
    # The interpreter pemja embeds in the JVM is the base Python's, not this venv's: its packages are added.
    import site

    config.set_string("python.pythonpath", os.pathsep.join(site.getsitepackages()))
    MODE = "thread"
except ImportError:
    # process mode: bigger bundles amortise the Beam harness's round trips (defaults 100,000 / 1,000 ms)
    config.set_string("python.execution-mode", "process")
    config.set_integer("python.fn-execution.bundle.size", 1_000_000)
    config.set_integer("python.fn-execution.bundle.time", 5_000)
    MODE = "process"
env = StreamExecutionEnvironment.get_execution_environment(config)
env.add_jars(*[f"file://{j}" for j in os.environ["KB_JARS"].split(os.pathsep)])
env.set_python_executable(sys.executable)
env.set_parallelism(2)
if checkpoint_dir:
    env.enable_checkpointing(int(os.environ.get("KB_INTERVAL_MS", "1000")), CheckpointingMode.EXACTLY_ONCE)
    env.get_checkpoint_config().set_checkpoint_storage_dir(checkpoint_dir)

source = (KafkaSource.builder().set_bootstrap_servers(bootstrap).set_topics(os.environ["KB_IN"])
          .set_group_id(f"pyflink-bench-{uuid.uuid4().hex[:8]}")
          .set_starting_offsets(KafkaOffsetsInitializer.earliest())
          .set_value_only_deserializer(JsonRowDeserializationSchema.builder().type_info(ROW_TYPE).build()))
if os.environ.get("KB_BOUNDED") == "1":
    source.set_bounded(KafkaOffsetsInitializer.latest())
sink = (KafkaSink.builder().set_bootstrap_servers(bootstrap)
        .set_record_serializer(KafkaRecordSerializationSchema.builder().set_topic(os.environ["KB_OUT"])
                               .set_value_serialization_schema(
                                   JsonRowSerializationSchema.builder().with_type_info(ROW_TYPE).build())
                               .build())
        .set_delivery_guarantee(DeliveryGuarantee.EXACTLY_ONCE if checkpoint_dir else DeliveryGuarantee.NONE)
        .set_transactional_id_prefix(f"pyflink-bench-{uuid.uuid4().hex[:8]}")
        # Flink's default (1 h) is above the broker's transaction.max.timeout.ms (15 min): refused.
        .set_property("transaction.timeout.ms", "600000")
        .build())

stream = env.from_source(source.build(), WatermarkStrategy.no_watermarks(), "kafka")
summed = (stream.key_by(lambda r: r[0], key_type=Types.INT())
          .reduce(lambda a, b: Row(k=b[0], i=b[1], v=a[2] + b[2], t=b[3])))
summed.sink_to(sink)
started = time.time()
result = env.execute("kafka-bench-pyflink")
print(json.dumps({"running_ms": result.get_net_runtime(), "wall_ms": (time.time() - started) * 1000, "mode": MODE}),
      flush=True)
