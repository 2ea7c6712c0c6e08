"""Sources and sinks.

========================  =========================================
``DataGenSource``         row ``i`` is ``fn(i)``; bounded or not, rate-limited or not
``FileSource``            parquet / csv / jsonl files of a directory, bounded or monitored
``FileSink``              parquet / jsonl part files; exactly-once (2PC) with checkpointing
                          (PyFlink's ``FileSink.for_row_format`` / ``FileSource.for_record_stream_format``:
                          ``file_system.py``)
``KafkaSource``           Kafka partitions as splits, offsets in checkpoints (``kafka/``, PyFlink's builder)
``KafkaSink``             Kafka topics; NONE / AT_LEAST_ONCE / EXACTLY_ONCE (Kafka transactions, 2PC:
                          ``kafka/sink.py``)
``PrintSink``             prints records (to the job manager's console)
``DiscardingSink``        drops records
========================  =========================================
"""

from .base import END, Sink, SinkWriter, Source, SourceReader
from .collection import CollectionSource
from .datagen import DataGenSource
from .files import FileFormatError, FileSink, FileSource
from .file_system import (
    BucketAssigner,
    DefaultRollingPolicy,
    Encoder,
    FileSourceBuilder,
    OnCheckpointRollingPolicy,
    OutputFileConfig,
    RollingPolicy,
    StreamFormat,
)
from .kafka import (
    KafkaOffsetResetStrategy,
    KafkaOffsetsInitializer,
    KafkaRecordDeserializationSchema,
    KafkaSource,
    KafkaSourceError,
    KafkaTopicPartition,
)
from .serialization import DeserializationError, JsonRowDeserializationSchema, SimpleStringSchema
from .sinks import DiscardingSink, PrintSink
from .kafka.sink import DeliveryGuarantee, JsonRowSerializationSchema, KafkaRecordSerializationSchema, KafkaSink

__all__ = [
    "BucketAssigner",
    "DefaultRollingPolicy",
    "Encoder",
    "FileSourceBuilder",
    "OnCheckpointRollingPolicy",
    "OutputFileConfig",
    "RollingPolicy",
    "StreamFormat",
    "END",
    "CollectionSource",
    "DataGenSource",
    "DiscardingSink",
    "FileFormatError",
    "FileSink",
    "FileSource",
    "DeserializationError",
    "JsonRowDeserializationSchema",
    "KafkaOffsetResetStrategy",
    "KafkaOffsetsInitializer",
    "KafkaRecordDeserializationSchema",
    "KafkaSource",
    "KafkaSourceError",
    "KafkaTopicPartition",
    "SimpleStringSchema",
    "PrintSink",
    "Sink",
    "SinkWriter",
    "Source",
    "SourceReader",
]
__all__ += ["DeliveryGuarantee", "JsonRowSerializationSchema", "KafkaRecordSerializationSchema", "KafkaSink"]

from .number_seq import NumberSequenceSource  # noqa: E402

__all__ += ["NumberSequenceSource"]

from ..api.unsupported import name_lookup as _name_lookup  # noqa: E402

# A PyFlink connector or format streamjob does not have says so, and what to use instead.
__getattr__ = _name_lookup(__name__)
