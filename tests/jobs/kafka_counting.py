"""The counting job of ``counting.py`` writing to Kafka through the exactly-once KafkaSink.

Rows come from a replayable source, are counted per key in keyed state (``counting.Count``) and go
to a topic as JSON. With ``kafka_input`` the rows are read from a topic instead (``KafkaSource``).
``read_committed_rows`` reads the output as a ``read_committed`` consumer sees it.
"""

from __future__ import annotations

import json
import time

from confluent_kafka import Consumer, KafkaError, TopicPartition

from jobs.counting import Count, row
from streamjob.runtime import (CheckpointingMode, ExternalizedCheckpointRetention, RestartStrategies,
                               StreamExecutionEnvironment)
from streamjob.runtime.connectors import (DataGenSource, DeliveryGuarantee, JsonRowSerializationSchema,
                                          KafkaRecordSerializationSchema, KafkaSink)


def kafka_sink(bootstrap: str, topic: str, guarantee: DeliveryGuarantee = DeliveryGuarantee.EXACTLY_ONCE,
               prefix: str | None = None, **props) -> KafkaSink:
    builder = (KafkaSink.builder()
               .set_bootstrap_servers(bootstrap)
               .set_record_serializer(KafkaRecordSerializationSchema.builder()
                                      .set_topic(topic)
                                      .set_key_serialization_schema(lambda r: str(r["key"]).encode())
                                      .set_value_serialization_schema(JsonRowSerializationSchema.builder().build())
                                      .build())
               .set_delivery_guarantee(guarantee))
    if prefix:
        builder.set_transactional_id_prefix(prefix)
    for k, v in props.items():
        builder.set_property(k.replace("_", "."), v)
    return builder.build()


def build(bootstrap: str, topic: str, prefix: str, checkpoints: str, rows: int, rate: float, interval_ms: int = 300,
          backend: str = "hashmap", unaligned: bool = False, parallelism: int = 3, conf: dict | None = None,
          restarts: int = 40, sink_props: dict | None = None,
          guarantee: DeliveryGuarantee = DeliveryGuarantee.EXACTLY_ONCE) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    if conf:
        env.configure(conf)
    env.enable_checkpointing(interval_ms, CheckpointingMode.EXACTLY_ONCE)
    env.set_state_backend(backend)
    config = env.get_checkpoint_config()
    config.set_checkpoint_storage(checkpoints)
    config.set_externalized_checkpoint_retention(ExternalizedCheckpointRetention.RETAIN_ON_CANCELLATION)
    if unaligned:
        config.enable_unaligned_checkpoints()
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(restarts, 100))
    source = env.from_source(DataGenSource(row, count=rows, rows_per_second=rate), None, "numbers").uid("numbers")
    (source.key_by("key").process(Count()).uid("count")
     .sink_to(kafka_sink(bootstrap, topic, guarantee, prefix, **(sink_props or {})))
     .uid("kafka"))
    return env


def read_topic(bootstrap: str, topic: str, partitions: int = 1, isolation: str = "read_committed",
               timeout_s: float = 30.0) -> list:
    """Every record a consumer with ``isolation`` sees, read until each partition's end:
    (key, value, partition, headers) tuples."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{time.monotonic_ns()}",
                         "isolation.level": isolation, "enable.auto.commit": False,
                         "enable.partition.eof": True})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        got: list = []
        at_end: set[int] = set()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and len(at_end) < partitions:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error() is None:
                got.append((msg.key(), msg.value(), msg.partition(), msg.headers()))
                at_end.discard(msg.partition())
            elif msg.error().code() == KafkaError._PARTITION_EOF:
                at_end.add(msg.partition())
            else:
                raise AssertionError(f"reading {topic}: {msg.error()}")
        assert len(at_end) == partitions, f"{topic} not read to its end in {timeout_s} s"
        return got
    finally:
        consumer.close()


def read_committed_rows(bootstrap: str, topic: str, partitions: int = 1) -> list[tuple]:
    rows = []
    for _key, value, _p, _h in read_topic(bootstrap, topic, partitions):
        r = json.loads(value)
        rows.append((r["key"], r["i"], r["count"], r["prev"]))
    return sorted(rows)
