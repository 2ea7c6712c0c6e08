"""The counting job of ``counting.py`` from Kafka to Kafka: Kafka -> keyed state -> KafkaSink.

``Feed`` writes row i (``{"key": i % 30, "i": i}``) to partition ``i % 3`` of the input topic at a
steady rate while the job runs, as a live stream; every key's rows are in one partition, in index
order, so the running count of every output row is deterministic (``counting.expected_rows``). The
job reads the topic with the KafkaSource, bounded at the offsets where the feed ends, counts per key
in keyed state (``counting.Count``) and writes JSON rows with the KafkaSink (exactly-once by
default). ``read_committed_rows`` reads the output as a ``read_committed`` consumer sees it.
"""

from __future__ import annotations

import json
import threading
import time

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from jobs.counting import Count, row
from streamjob.runtime import (CheckpointingMode, ExternalizedCheckpointRetention, RestartStrategies,
                               StreamExecutionEnvironment)
from streamjob.runtime.api.types import Types
from streamjob.runtime.connectors import (DataGenSource, DeliveryGuarantee, JsonRowDeserializationSchema,
                                          JsonRowSerializationSchema, KafkaOffsetsInitializer,
                                          KafkaRecordSerializationSchema, KafkaSink, KafkaSource, KafkaTopicPartition)

PARTITIONS = 3
ROW_TYPE = Types.ROW_NAMED(["key", "i"], [Types.INT(), Types.LONG()])


class Feed:
    """Writes rows 0, 1, 2... to ``topic`` (PARTITIONS partitions) at ``rate`` rows/s in a thread, until
    ``rows`` are written or ``stop()`` is called; keeps going through broker restarts (the producer
    retries)."""

    def __init__(self, bootstrap: str, topic: str, rate: float, rows: int | None = None):
        self.bootstrap, self.topic, self.rate, self.rows = bootstrap, topic, rate, rows
        self.sent = 0
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"feed-{topic}", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5, "enable.idempotence": True})
        started = time.monotonic()
        while not self._stop.is_set() and (self.rows is None or self.sent < self.rows):
            due = int((time.monotonic() - started) * self.rate) + 1
            if self.rows is not None:
                due = min(due, self.rows)
            for j in range(self.sent, due):
                producer.produce(self.topic, json.dumps(row(j)).encode(), str(j % 30).encode(),
                                 partition=j % PARTITIONS)
            self.sent = max(self.sent, due)
            producer.poll(0)
            time.sleep(0.01)
        assert producer.flush(120) == 0

    def stop(self) -> int:
        """Stop writing; returns how many rows were written."""
        self._stop.set()
        self.thread.join(150)
        return self.sent

    def join(self, timeout: float | None = None) -> None:
        self.thread.join(timeout)


def kafka_source(bootstrap: str, topic: str, rows: int | None) -> KafkaSource:
    """The input topic; with ``rows``, bounded where a ``Feed`` of that many rows ends (partition p holds
    the rows i with i % PARTITIONS == p, at offsets 0, 1, 2...)."""
    builder = (KafkaSource.builder().set_bootstrap_servers(bootstrap).set_topics(topic)
               .set_starting_offsets(KafkaOffsetsInitializer.earliest())
               .set_value_only_deserializer(JsonRowDeserializationSchema.builder().type_info(ROW_TYPE).build()))
    if rows is not None:
        ends = {KafkaTopicPartition(topic, p): len(range(p, rows, PARTITIONS)) for p in range(PARTITIONS)}
        builder.set_bounded(KafkaOffsetsInitializer.offsets(ends))
    return builder.build()


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


def build(bootstrap: str, topic: str, prefix: str | None, checkpoints: str, rows: int | None, rate: float,
          interval_ms: int = 300,
          backend: str = "hashmap", unaligned: bool = False, parallelism: int = 3, conf: dict | None = None,
          restarts: int = 40, sink_props: dict | None = None,
          guarantee: DeliveryGuarantee = DeliveryGuarantee.EXACTLY_ONCE,
          input_topic: str | None = None, restart_delay_ms: int = 100) -> StreamExecutionEnvironment:
    """``input_topic``: read the rows from that topic (``Feed`` them at ``rate``; ``rows=None``: unbounded);
    else from DataGen at ``rate``."""
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
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(restarts, restart_delay_ms))
    if input_topic is not None:
        source = env.from_source(kafka_source(bootstrap, input_topic, rows), None, "kafka-in").uid("kafka-in")
    else:
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
