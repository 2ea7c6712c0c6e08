"""PyFlink calls streamjob does not implement, each with what to use instead.

A PyFlink program ported by changing its imports must fail where it is built,
naming the call, never run with a call silently ignored. Each class of the
DataStream API looks names up here when they are not real attributes
(``__getattr__``), so implementing a call later only needs its entry removed
(a test checks that no entry shadows a real method).
"""

from __future__ import annotations

from typing import Any


class PyFlinkNotSupported(NotImplementedError):
    """A PyFlink API call streamjob does not implement; the message names it and the alternative."""

    def __init__(self, call: str, alternative: str):
        self.call = call
        self.alternative = alternative
        super().__init__(f"{call} is not supported by streamjob: {alternative}")


class PyFlinkNameNotSupported(PyFlinkNotSupported, ImportError):
    """A PyFlink name (class, enum, function) streamjob does not have, imported or looked up from
    ``streamjob.runtime`` or ``streamjob.runtime.connectors``: the message says why and what to use
    instead. An ImportError too, so ``try: from ... import X / except ImportError`` works as usual."""

    def __init__(self, name: str, module: str, why: str, instead: str):
        NotImplementedError.__init__(self, f"PyFlink's {name} is not supported by streamjob: {why}. Instead: {instead}")
        self.call, self.alternative, self.why, self.module = name, instead, why, module


_RECORDS_ARE_PICKLED = ("records are Python objects, pickled (dict records columnar as Arrow): there are no Java "
                        "serializers to register; remove the call")
_CHAINING = ("streamjob chains every forward edge between operators of equal parallelism and slot sharing group "
             "unless an operator says otherwise (start_new_chain(), disable_chaining()); chaining changes no result, "
             "so remove the call")
_SLOT_RESOURCES = ("slot sharing groups are named on the operator (slot_sharing_group('name')) and get slots of their "
                   "own, but no resource profile: every slot is one Spark task (spark.task.cpus); remove the call")
_PYTHON_DEPS = ("the job's own folder is shipped to the tasks with the job; install other packages in the image "
                "(or the virtualenv) the job runs in, then remove the call")
_NO_JAVA = "streamjob runs no Java: its connectors are Python (streamjob.runtime.connectors); remove the call"
_UID_HASH = "use .uid(name): state is matched to operators by uid on restore"

ENVIRONMENT: dict[str, str] = {
    "register_slot_sharing_group": _SLOT_RESOURCES,
    "disable_operator_chaining": _CHAINING,
    "is_chaining_of_operators_with_different_max_parallelism_enabled": _CHAINING,
    "get_restart_strategy": "the restart strategy is in the configuration: env.get_config() (restart-strategy.*)",
    "add_default_kryo_serializer": _RECORDS_ARE_PICKLED,
    "register_type_with_kryo_serializer": _RECORDS_ARE_PICKLED,
    "register_type": _RECORDS_ARE_PICKLED,
    "add_python_file": _PYTHON_DEPS,
    "set_python_requirements": _PYTHON_DEPS,
    "add_python_archive": _PYTHON_DEPS,
    "set_python_executable": "the tasks run the interpreter `streamjob run` runs in; remove the call",
    "add_jars": _NO_JAVA,
    "add_classpaths": _NO_JAVA,
    "get_default_local_parallelism": "use env.get_parallelism()",
    "set_default_local_parallelism": "use env.set_parallelism(n) or `streamjob run --parallelism n`",
    "register_cached_file": "read the file from a path or URL (file://, s3://) the tasks can reach",
    "create_input": ("Java InputFormats do not exist here; use env.from_source(FileSource...) or another source "
                     "of streamjob.runtime.connectors"),
}

_STREAM_COMMON: dict[str, str] = {
    "set_uid_hash": _UID_HASH,
    "set_buffer_timeout": "the buffer timeout is the job's: env.set_buffer_timeout(ms)",
}

DATA_STREAM: dict[str, str] = {
    **_STREAM_COMMON,
    "cache": "cached intermediate results exist only in Flink's batch mode; write them with a FileSink and read "
             "them back with a FileSource",
}

KEYED_STREAM: dict[str, str] = dict(DATA_STREAM)

CONNECTED_STREAMS: dict[str, str] = {
    # key_by belongs with KeyedCoProcessFunction (not listed: it is being built)
}

DATA_STREAM_SINK: dict[str, str] = {
    "set_uid_hash": _UID_HASH,
}


# -- PyFlink names streamjob does not have -----------------------------------------------------------
# The public names of PyFlink's DataStream modules are in pyflink_names.json (tools/pyflink_names.py
# reads them from the apache-flink wheels); each one imports from streamjob.runtime (connectors and
# formats: streamjob.runtime.connectors) or is here, with why not and what to use instead. A test
# checks both ways (every name accounted for; no entry shadows a name that imports), and the README's
# table is made from this one (tools/pyflink_names.py --readme).
_JAVA_CONNECTOR = ("a connector of Flink's Java side; streamjob runs no Java",
                   "a source or sink of streamjob.runtime.connectors, or your own (subclass Source / Sink there)")
_JAVA_FORMAT = ("a format of Flink's Java side",
                "FileSource.parquet / .csv / .jsonl(path), FileSink.parquet / .jsonl(path), or "
                "FileSink.for_row_format(path, Encoder.simple_string_encoder()) of str records")
_SERIALIZER = ("records and state are pickled Python objects (dict records travel as Arrow): there are no type "
               "serializers", "drop it")
_JAVA_PLUMBING = ("an interface of Flink's Java connectors", "a Source / Sink of streamjob.runtime.connectors")
_FUNCTION_WRAPPER = ("a wrapper of a Java SourceFunction / SinkFunction object",
                     "env.from_source(source, ...) / stream.sink_to(sink) with a Source / Sink of "
                     "streamjob.runtime.connectors")
_DATASET_ERA = ("a setting of Flink's DataSet API, removed in Flink 2.0",
                "env.set_runtime_mode(RuntimeExecutionMode.BATCH) for bounded jobs")
_SLOTS = ("no fine-grained resources (a slot sharing group's CPU and memory): every slot is one Spark task",
          "name the group instead: slot_sharing_group('name')")
_KAFKA_INTERNAL = ("a building block streamjob's Kafka connector does not expose by this name",
                   "KafkaSource.builder() / KafkaSink.builder() with SimpleStringSchema or the JSON schemas")

NAMES: dict[str, tuple[str, str]] = {
    "SourceFunction": _FUNCTION_WRAPPER,
    "SinkFunction": _FUNCTION_WRAPPER,
    "TypeSerializer": _SERIALIZER,
    "TimeWindowSerializer": _SERIALIZER,
    "CountWindowSerializer": _SERIALIZER,
    "GlobalWindowSerializer": _SERIALIZER,
    "CustomStateBackend": ("a Java state backend class", "HashMapStateBackend() or EmbeddedRocksDBStateBackend()"),
    "CustomCheckpointStorage": ("a Java checkpoint storage class",
                                "FileSystemCheckpointStorage(url) (file://, s3://) or JobManagerCheckpointStorage()"),
    "PredefinedOptions": ("option presets of the Java RocksDB library",
                          "the state.backend.rocksdb.* configuration keys (block cache, write buffer, threads)"),
    "ConfigOption": ("typed Java configuration options",
                     "configuration keys as strings: env.get_config().set('key', value)"),
    "ConfigOptions": ("typed Java configuration options",
                      "configuration keys as strings: env.get_config().set('key', value)"),
    "ExecutionMode": _DATASET_ERA,
    "InputDependencyConstraint": _DATASET_ERA,
    "JobID": ("job ids are strings here", "client.get_job_id(), a str"),
    "CompletableFuture": ("JobClient's calls return their result (blocking) rather than a future",
                          "client.get_job_execution_result(timeout) without .result()"),
    "SlotSharingGroup": _SLOTS,
    "MemorySize": _SLOTS,
    "AssignerWithPeriodicWatermarksWrapper": ("a wrapper of Java's deprecated AssignerWithPeriodicWatermarks",
                                              "WatermarkStrategy.for_bounded_out_of_orderness(...)"
                                              ".with_timestamp_assigner(...)"),
    "OperatorStateStore": ("operator state is the runtime's own (source positions, sink commits)",
                           "keyed state (runtime_context.get_state(...)) or broadcast state "
                           "(ctx.get_broadcast_state(descriptor))"),
    "StreamTransformer": _JAVA_PLUMBING,
    "SupportsPreprocessing": _JAVA_PLUMBING,
    "FileEnumeratorProvider": ("a Java plug-in of FileSource", "FileSource reads every file under its paths"),
    "FileSplitAssignerProvider": ("a Java plug-in of FileSource", "FileSource reads every file under its paths"),
    "FileCompactor": ("part files are not compacted", "larger part files: RollingPolicy.default_rolling_policy(...)"),
    "FileCompactStrategy": ("part files are not compacted",
                            "larger part files: RollingPolicy.default_rolling_policy(...)"),
    "BulkFormat": _JAVA_FORMAT,
    "BulkWriterFactory": _JAVA_FORMAT,
    "StreamingFileSink": ("the file sink before FileSink, removed in Flink 2.0",
                          "FileSink.for_row_format(path, Encoder.simple_string_encoder())"),
    "ByteArraySchema": ("a serialization schema of Flink 2.x's Java connectors", "bytes records as they are"),
    "RowFieldExtractorSchema": ("a serialization schema of Flink 2.x's Java connectors",
                                "a map function that picks the field"),
    "FlinkKafkaConsumer": ("the legacy Kafka source, removed in Flink 2.0", "KafkaSource"),
    "FlinkKafkaProducer": ("the legacy Kafka sink, removed in Flink 2.0", "KafkaSink"),
    "Semantic": ("the legacy Kafka sink's guarantee, removed in Flink 2.0", "DeliveryGuarantee"),
    "DynamicKafkaSource": _JAVA_CONNECTOR,
    "DynamicKafkaSourceBuilder": _JAVA_CONNECTOR,
    "KafkaMetadataService": _JAVA_CONNECTOR,
    "KafkaStreamSetSubscriber": _JAVA_CONNECTOR,
    "KafkaStreamSubscriber": _JAVA_CONNECTOR,
    "StreamPatternSubscriber": _JAVA_CONNECTOR,
    "SingleClusterTopicMetadataService": _JAVA_CONNECTOR,
    "CassandraSink": _JAVA_CONNECTOR,
    "CassandraCommitter": _JAVA_CONNECTOR,
    "CassandraFailureHandler": _JAVA_CONNECTOR,
    "ClusterBuilder": _JAVA_CONNECTOR,
    "ConsistencyLevel": _JAVA_CONNECTOR,
    "MapperOptions": _JAVA_CONNECTOR,
    "ElasticsearchSink": _JAVA_CONNECTOR,
    "ElasticsearchEmitter": _JAVA_CONNECTOR,
    "Elasticsearch6SinkBuilder": _JAVA_CONNECTOR,
    "Elasticsearch7SinkBuilder": _JAVA_CONNECTOR,
    "FlushBackoffType": _JAVA_CONNECTOR,
    "HybridSource": _JAVA_CONNECTOR,
    "HybridSourceBuilder": _JAVA_CONNECTOR,
    "JdbcSink": _JAVA_CONNECTOR,
    "JdbcConnectionOptions": _JAVA_CONNECTOR,
    "JdbcExecutionOptions": _JAVA_CONNECTOR,
    "FlinkKinesisConsumer": _JAVA_CONNECTOR,
    "KinesisStreamsSink": _JAVA_CONNECTOR,
    "KinesisStreamsSinkBuilder": _JAVA_CONNECTOR,
    "KinesisFirehoseSink": _JAVA_CONNECTOR,
    "KinesisFirehoseSinkBuilder": _JAVA_CONNECTOR,
    "KinesisDeserializationSchema": _JAVA_CONNECTOR,
    "KinesisShardAssigner": _JAVA_CONNECTOR,
    "PartitionKeyGenerator": _JAVA_CONNECTOR,
    "WatermarkTracker": _JAVA_CONNECTOR,
    "PulsarSource": _JAVA_CONNECTOR,
    "PulsarSourceBuilder": _JAVA_CONNECTOR,
    "PulsarSink": _JAVA_CONNECTOR,
    "PulsarSinkBuilder": _JAVA_CONNECTOR,
    "StartCursor": _JAVA_CONNECTOR,
    "StopCursor": _JAVA_CONNECTOR,
    "RangeGenerator": _JAVA_CONNECTOR,
    "MessageDelayer": _JAVA_CONNECTOR,
    "TopicRoutingMode": _JAVA_CONNECTOR,
    "RMQSource": _JAVA_CONNECTOR,
    "RMQSink": _JAVA_CONNECTOR,
    "RMQConnectionConfig": _JAVA_CONNECTOR,
    "AvroSchema": _JAVA_FORMAT,
    "GenericRecordAvroTypeInfo": _JAVA_FORMAT,
    "AvroInputFormat": _JAVA_FORMAT,
    "AvroBulkWriters": _JAVA_FORMAT,
    "AvroRowDeserializationSchema": _JAVA_FORMAT,
    "AvroRowSerializationSchema": _JAVA_FORMAT,
    "AvroParquetReaders": _JAVA_FORMAT,
    "AvroParquetWriters": _JAVA_FORMAT,
    "ParquetColumnarRowInputFormat": _JAVA_FORMAT,
    "ParquetBulkWriters": _JAVA_FORMAT,
    "OrcBulkWriters": _JAVA_FORMAT,
    "CsvSchema": _JAVA_FORMAT,
    "CsvSchemaBuilder": _JAVA_FORMAT,
    "CsvReaderFormat": _JAVA_FORMAT,
    "CsvBulkWriters": _JAVA_FORMAT,
    "CsvRowDeserializationSchema": _JAVA_FORMAT,
    "CsvRowSerializationSchema": _JAVA_FORMAT,
    # Being added on branches kafka / kafka-sink: drop these lines when they merge (a test then
    # names every entry that has become importable).
    "KafkaSourceBuilder": _KAFKA_INTERNAL,
    "KafkaSinkBuilder": _KAFKA_INTERNAL,
    "KafkaRecordSerializationSchemaBuilder": _KAFKA_INTERNAL,
    "KafkaTopicSelector": _KAFKA_INTERNAL,
    "SerializationSchema": _KAFKA_INTERNAL,
    "DeserializationSchema": _KAFKA_INTERNAL,
}


def name_lookup(module: str) -> Any:
    """A module ``__getattr__`` for ``module``: a PyFlink name of ``NAMES`` raises
    PyFlinkNameNotSupported; any other missing name is an ordinary AttributeError."""

    def __getattr__(name: str) -> Any:
        entry = NAMES.get(name)
        if entry is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        raise PyFlinkNameNotSupported(name, module, *entry)

    return __getattr__


def lookup(owner: str, table: dict[str, str]) -> Any:
    """A ``__getattr__`` that names a PyFlink call of ``table`` and its alternative; any other
    missing name is an ordinary AttributeError (so pickling and ``hasattr`` probes work as usual)."""

    def __getattr__(self: Any, name: str) -> Any:
        alternative = table.get(name)
        if alternative is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        raise PyFlinkNotSupported(f"{owner}.{name}()", alternative)

    return __getattr__


__all__ = ["NAMES", "PyFlinkNameNotSupported", "PyFlinkNotSupported", "lookup", "name_lookup"]
