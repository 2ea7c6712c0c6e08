"""Helpers of the Kafka tests (on the real broker of the ``kafka_broker`` fixtures)."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic


def unique_topic(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def create_topic(bootstrap: str, topic: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the result is in
    admin.create_topics([NewTopic(topic, partitions)])[topic].result(30)


def add_partitions(bootstrap: str, topic: str, total: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_partitions([NewPartitions(topic, total)])[topic].result(30)


def produce(bootstrap: str, topic: str, records: list[tuple], **conf) -> None:
    """``records``: (partition, key, value[, timestamp ms[, headers]]); acks=all, idempotent, so offsets
    are 0, 1, 2... per partition."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5, **conf})
    for partition, key, value, *more in records:
        extra = {"timestamp": more[0]} if more else {}
        if len(more) > 1:
            extra["headers"] = more[1]
        while True:
            try:
                producer.produce(topic, value=value, key=key, partition=partition, **extra)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(30) == 0, "records not delivered in 30 s"


def read_all(bootstrap: str, topic: str, partitions: int = 1, isolation: str = "read_committed") -> list[bytes]:
    """Every visible record of the topic, until each partition reports its end (then stop)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("g"),
                         "isolation.level": isolation, "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        got: list[bytes] = []
        at_end: set[int] = set()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(at_end) < partitions:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is None:
                got.append(msg.value())
                at_end.discard(msg.partition())
            elif msg.error().code() == KafkaError._PARTITION_EOF:
                at_end.add(msg.partition())
        assert len(at_end) == partitions, f"{topic} not read to its end in 30 s"
        return got
    finally:
        consumer.close()


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        got = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        return {tp.partition: tp.offset for tp in got}
    finally:
        consumer.close()
