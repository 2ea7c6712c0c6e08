"""streamjob runtime: a streaming dataflow engine with a PyFlink-style DataStream API, run on Spark."""

from .api.datastream import ConnectedStreams, DataStream, DataStreamSink, KeyedStream
from .api.environment import JobExecutionResult, StreamExecutionEnvironment
from .api.functions import (
    CoMapFunction,
    CoProcessFunction,
    FilterFunction,
    FlatMapFunction,
    KeyedProcessFunction,
    KeySelector,
    MapFunction,
    ProcessFunction,
    ReduceFunction,
    RuntimeContext,
)
from .config import Configuration
from .graph.job_graph import JobDefinitionError

__all__ = [
    "CoMapFunction",
    "CoProcessFunction",
    "Configuration",
    "ConnectedStreams",
    "DataStream",
    "DataStreamSink",
    "FilterFunction",
    "FlatMapFunction",
    "JobDefinitionError",
    "JobExecutionResult",
    "KeySelector",
    "KeyedProcessFunction",
    "KeyedStream",
    "MapFunction",
    "ProcessFunction",
    "ReduceFunction",
    "RuntimeContext",
    "StreamExecutionEnvironment",
]
