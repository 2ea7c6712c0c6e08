"""Apache Kafka: ``KafkaSource`` (PyFlink's names, ``pyflink.datastream.connectors.kafka``) and a
real single-node broker for development and tests (``broker.KafkaBroker``, ``streamjob kafka-dev``)."""

from .dead_letters import dead_letter_serializer
from .offsets import KafkaOffsetResetStrategy, KafkaOffsetsInitializer, KafkaTopicPartition
from .records import KafkaRecordDeserializationSchema
from .source import KafkaSource, KafkaSourceBuilder, KafkaSourceError

__all__ = [
    "KafkaOffsetResetStrategy",
    "KafkaOffsetsInitializer",
    "KafkaRecordDeserializationSchema",
    "KafkaSource",
    "KafkaSourceBuilder",
    "KafkaSourceError",
    "KafkaTopicPartition",
    "dead_letter_serializer",
]
