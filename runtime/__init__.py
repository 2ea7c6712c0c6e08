"""streamjob runtime: a streaming dataflow engine with a PyFlink-style DataStream API, run on Spark."""

from .api.datastream import ConnectedStreams, DataStream, DataStreamSink, KeyedStream
from .api.backends import EmbeddedRocksDBStateBackend, HashMapStateBackend, StateBackend
from .api.checkpointing import (
    CheckpointConfig,
    CheckpointingMode,
    ExternalizedCheckpointCleanup,
    ExternalizedCheckpointRetention,
)
from .api.environment import JobClient, JobExecutionResult, StreamExecutionEnvironment
from .api.functions import (
    AggregateFunction,
    CoFlatMapFunction,
    CoMapFunction,
    CoProcessFunction,
    FilterFunction,
    FlatMapFunction,
    KeyedProcessFunction,
    KeySelector,
    MapFunction,
    OutputTag,
    Partitioner,
    ProcessFunction,
    ReduceFunction,
    RuntimeContext,
)
from .api.restart import RestartStrategies, RestartStrategyConfiguration
from .api.state import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateDescriptor,
    ValueStateDescriptor,
)
from .api.time import Duration, Time
from .api.unsupported import PyFlinkNotSupported
from .api.types import Row, RowKind, RowTypeInfo, TypeInformation, Types
from .checkpoint.metadata import CheckpointFormatError
from .config import Configuration
from .connectors import DataGenSource, DiscardingSink, Encoder, FileSink, FileSource, PrintSink
from .graph.job_graph import JobDefinitionError

__all__ = [
    "AggregateFunction",
    "AggregatingStateDescriptor",
    "CheckpointConfig",
    "CheckpointFormatError",
    "CheckpointingMode",
    "ExternalizedCheckpointCleanup",
    "ExternalizedCheckpointRetention",
    "JobClient",
    "DataGenSource",
    "DiscardingSink",
    "FileSink",
    "FileSource",
    "EmbeddedRocksDBStateBackend",
    "HashMapStateBackend",
    "PrintSink",
    "StateBackend",
    "ListStateDescriptor",
    "MapStateDescriptor",
    "ReducingStateDescriptor",
    "RestartStrategies",
    "RestartStrategyConfiguration",
    "StateDescriptor",
    "ValueStateDescriptor",
    "CoFlatMapFunction",
    "CoMapFunction",
    "CoProcessFunction",
    "Configuration",
    "ConnectedStreams",
    "DataStream",
    "DataStreamSink",
    "Duration",
    "FilterFunction",
    "FlatMapFunction",
    "JobDefinitionError",
    "JobExecutionResult",
    "KeySelector",
    "KeyedProcessFunction",
    "KeyedStream",
    "MapFunction",
    "OutputTag",
    "Partitioner",
    "PyFlinkNotSupported",
    "Encoder",
    "ProcessFunction",
    "ReduceFunction",
    "Row",
    "RowKind",
    "RowTypeInfo",
    "RuntimeContext",
    "StreamExecutionEnvironment",
    "Time",
    "TypeInformation",
    "Types",
]
