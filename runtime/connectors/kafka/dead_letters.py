"""Undecodable records: a side output of the ``KafkaSource``, and a dead-letter topic fed from it.

By default a message whose value the deserializer cannot decode fails the job, naming its topic,
partition and offset (and the restart strategy replays it, and fails again: bad input is never
skipped silently). When the user asks, the source sends such messages to a side output instead:

- ``set_deserialization_failure_output(OutputTag("undecodable"))``: read them with
  ``stream.get_side_output(tag)``; each is a dict of the message as it was (``topic``,
  ``partition``, ``offset``, ``timestamp``, ``key``, ``value``, ``headers``) and ``error``;
- ``set_dead_letter_topic("clicks-dlq")``: the same side output written to that topic by a
  ``KafkaSink`` (exactly-once by default, so a dead letter is written once however often the job
  restarts), key, value and headers unchanged, and headers that say where the message came from and
  why it was refused. The names are those of Kafka Connect's dead letter queue
  (``errors.deadletterqueue.context.headers.enable``), under streamjob's prefix:
  ``__streamjob.errors.topic``, ``.partition``, ``.offset``, ``.exception.class.name``,
  ``.exception.message``.

The source moves past a refused message in the same poll that sends it to the side output, so the
checkpoint that holds the new position also holds the dead letter (in the sink's transaction).
"""

from __future__ import annotations

import re
from typing import Any

from ..delivery import DeliveryGuarantee

HEADER_PREFIX = "__streamjob.errors."
# Client properties the dead-letter producer shares with the source's consumer (how to reach and log
# in to the cluster); the consumer's own settings (group, isolation, offsets) are not the producer's.
_SHARED_PREFIXES = ("security.", "sasl.", "ssl.", "socket.", "broker.", "reconnect.", "client.dns", "metadata.")


def dead_letter_key(record: dict) -> bytes | None:
    return record["key"]


def dead_letter_value(record: dict) -> bytes | None:
    return record["value"]


def dead_letter_headers(record: dict) -> list:
    cls, _, message = record["error"].partition(": ")
    return list(record["headers"]) + [
        (HEADER_PREFIX + "topic", record["topic"].encode()),
        (HEADER_PREFIX + "partition", str(record["partition"]).encode()),
        (HEADER_PREFIX + "offset", str(record["offset"]).encode()),
        (HEADER_PREFIX + "exception.class.name", cls.encode()),
        (HEADER_PREFIX + "exception.message", message.encode()),
    ]


def dead_letter_serializer(topic: str) -> Any:
    """A ``KafkaRecordSerializationSchema`` of undecodable records (the side output's dicts) to
    ``topic``: their key and value as they were, their headers plus the error headers. For a
    side output the user writes with a KafkaSink of their own."""
    from .serialization import KafkaRecordSerializationSchema

    return (KafkaRecordSerializationSchema.builder().set_topic(topic)
            .set_key_serialization_schema(dead_letter_key)
            .set_value_serialization_schema(dead_letter_value)
            .set_header_provider(dead_letter_headers)
            .build())


class DeadLetterTopic:
    """What ``KafkaSourceBuilder.set_dead_letter_topic`` asked for."""

    def __init__(self, topic: str, delivery_guarantee: DeliveryGuarantee, transactional_id_prefix: str | None,
                 uid: str | None = None, name: str | None = None):
        if not topic or not isinstance(topic, str):
            raise ValueError(f"set_dead_letter_topic needs a topic name, got {topic!r}")
        if not isinstance(delivery_guarantee, DeliveryGuarantee):
            raise TypeError(f"set_dead_letter_topic: delivery_guarantee must be a DeliveryGuarantee, got "
                            f"{delivery_guarantee!r}")
        for what, value in (("uid", uid), ("name", name)):
            if value is not None and (not isinstance(value, str) or not value):
                raise ValueError(f"set_dead_letter_topic: {what} must be a non-empty string, got {value!r}")
        self.topic = topic
        self.uid = uid
        self.name = name
        self.delivery_guarantee = delivery_guarantee
        self.transactional_id_prefix = transactional_id_prefix

    def sink(self, bootstrap_servers: str, group_id: str | None, properties: dict[str, str]) -> Any:
        from .sink import KafkaSink

        builder = (KafkaSink.builder().set_bootstrap_servers(bootstrap_servers)
                   .set_record_serializer(dead_letter_serializer(self.topic))
                   .set_delivery_guarantee(self.delivery_guarantee))
        if self.delivery_guarantee is DeliveryGuarantee.EXACTLY_ONCE:
            # Stable across restarts (the restored job finds its transactions by it); unique per
            # consumer group and dead-letter topic. Two jobs sharing both must each pass a prefix.
            default = re.sub(r"[^A-Za-z0-9._\-]", "_", f"{group_id or 'streamjob'}-dlq-{self.topic}")[:200]
            builder.set_transactional_id_prefix(self.transactional_id_prefix or default)
        for key, value in properties.items():
            if key.startswith(_SHARED_PREFIXES):
                builder.set_property(key, value)
        return builder.build()
