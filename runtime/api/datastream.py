"""DataStream, KeyedStream, ConnectedStreams and DataStreamSink, as in PyFlink."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from . import transformations as T
from .functions import (
    BroadcastProcessFunction,
    KeyedCoFlatMap,
    KeyedCoMap,
    CoFlatMapFunction,
    CoMapFunction,
    CoProcessFunction,
    KeyedBroadcastProcessFunction,
    KeyedCoProcessFunction,
    KeyedProcessFunction,
    OutputTag,
    ProcessFunction,
    as_callable,
)
from .transformations import CustomPartitionKey, KeySpec, Transformation
from .types import Row
from . import unsupported

if TYPE_CHECKING:  # pragma: no cover
    from .environment import StreamExecutionEnvironment


def _set_parallelism(t: Transformation, parallelism: int) -> None:
    if isinstance(parallelism, bool) or not isinstance(parallelism, int) or parallelism < 1:
        raise ValueError(f"set_parallelism of operator {t.name!r} needs a positive int, got {parallelism!r}")
    t.parallelism = parallelism


def _set_max_parallelism(t: Transformation, max_parallelism: int) -> None:
    from ..keygroups import check_max_parallelism

    if isinstance(max_parallelism, bool) or not isinstance(max_parallelism, int):
        raise ValueError(f"set_max_parallelism of operator {t.name!r} needs an int, got {max_parallelism!r}")
    try:
        check_max_parallelism(max_parallelism, 1)
    except ValueError as e:
        raise ValueError(f"operator {t.name!r}: {e}") from None
    t.max_parallelism = max_parallelism


def _group_name(group: Any) -> str:
    """A slot sharing group by name, or PyFlink's ``SlotSharingGroup`` object (its name)."""
    name = group if isinstance(group, str) else getattr(group, "get_name", lambda: None)()
    if not isinstance(name, str) or not name:
        raise ValueError(f"slot_sharing_group needs a name (str), got {group!r}")
    return name


def _all_key(value: Any) -> int:
    """The one key of window_all: every record to the same subtask."""
    return 0


class DataStream:
    def __init__(self, env: "StreamExecutionEnvironment", transformation: Transformation, type_info: Any = None):
        self._env = env
        self._t = transformation
        # The declared type of the records (output_type / type_info), as PyFlink keeps it: None is
        # PyFlink's pickled Python objects. Only print() looks at it (what PyFlink prints depends on it).
        self._type = type_info

    # -- naming -------------------------------------------------------------
    def name(self, name: str) -> "DataStream":
        """Operator name shown in progress, metrics and errors."""
        self._operator_transformation().name = name
        return self

    def uid(self, uid: str) -> "DataStream":
        """Stable operator id; state is matched to operators by it on restore."""
        self._env._claim_uid(uid, self._operator_transformation())
        return self

    def get_name(self) -> str:
        return self._t.name

    # -- parallelism and chaining (per operator, as Flink) ------------------
    def set_parallelism(self, parallelism: int) -> "DataStream":
        """This operator's parallelism (the job's, ``env.set_parallelism``, when not set)."""
        _set_parallelism(self._operator_transformation(), parallelism)
        return self

    def set_max_parallelism(self, max_parallelism: int) -> "DataStream":
        """This operator's max parallelism: the number of key groups its keyed state is split into,
        and the largest parallelism it can be rescaled to (the job's when not set)."""
        _set_max_parallelism(self._operator_transformation(), max_parallelism)
        return self

    def force_non_parallel(self) -> "DataStream":
        """Parallelism and max parallelism 1, as Flink."""
        t = self._operator_transformation()
        _set_parallelism(t, 1)
        _set_max_parallelism(t, 1)
        return self

    def start_new_chain(self) -> "DataStream":
        """Begin a new chain at this operator: it is not chained to the one before it."""
        self._operator_transformation().chaining = T.NEW_CHAIN
        return self

    def disable_chaining(self) -> "DataStream":
        """Chain this operator to neither the one before nor the ones after it."""
        self._operator_transformation().chaining = T.NO_CHAINING
        return self

    def slot_sharing_group(self, slot_sharing_group: Any) -> "DataStream":
        """As Flink: operators of different slot sharing groups never share a slot (nor a chain). A
        group gets as many slots as the largest parallelism in it, so the job needs the sum over its
        groups; an operator naming none takes its inputs' group when they agree, else "default"."""
        self._operator_transformation().slot_sharing_group = _group_name(slot_sharing_group)
        return self

    def get_type(self) -> Any:
        """The declared type of the records (``Types.PICKLED_BYTE_ARRAY()`` when none was, as PyFlink)."""
        from .types import Types

        return self._type if self._type is not None else Types.PICKLED_BYTE_ARRAY()

    def get_execution_config(self) -> Any:
        """The job's ExecutionConfig (the same object as ``env.get_config()``), as in PyFlink."""
        return self._env.get_config()

    def _operator_transformation(self) -> Transformation:
        t = self._t
        if t.kind in T.VIRTUAL_KINDS:
            raise ValueError("key_by/union/rebalance/get_side_output create no operator: name or uid the operator "
                             "before or after it")
        return t

    # -- transformations ----------------------------------------------------
    def _one_input(self, kind: str, name: str, fn: Any, **params: Any) -> Transformation:
        return self._env._add(Transformation(kind, name, [self._t], fn=fn, params=params))

    def map(self, func: Any, output_type: Any = None) -> "DataStream":
        as_callable(func, "map", "map")
        return DataStream(self._env, self._one_input(T.MAP, "Map", func), output_type)

    def flat_map(self, func: Any, output_type: Any = None) -> "DataStream":
        as_callable(func, "flat_map", "flat_map")
        return DataStream(self._env, self._one_input(T.FLAT_MAP, "FlatMap", func), output_type)

    def filter(self, func: Any) -> "DataStream":
        as_callable(func, "filter", "filter")
        return DataStream(self._env, self._one_input(T.FILTER, "Filter", func), self._type)

    def project(self, *fields: str | int) -> "DataStream":
        """Keep only ``fields``: column names of dict records (columnar, no Python per
        record on Arrow batches) or positions of tuple records, as Flink's ``project``."""
        if not fields or not all(isinstance(f, str) for f in fields) and not all(
            isinstance(f, int) and not isinstance(f, bool) for f in fields
        ):
            raise TypeError(f"project needs column names or tuple positions, got {fields!r}")
        return DataStream(self._env, self._one_input(T.PROJECT, f"Project{fields!r}", None, fields=fields))

    def process(self, func: ProcessFunction, output_type: Any = None) -> "DataStream":
        if isinstance(func, KeyedProcessFunction):
            raise TypeError("a KeyedProcessFunction needs a keyed stream: call key_by(...) first")
        as_callable(func, "process_element", "process")
        return DataStream(self._env, self._one_input(T.PROCESS, "Process", func), output_type)

    def assign_timestamps_and_watermarks(self, watermark_strategy: Any) -> "DataStream":
        """Event time from here on: each record gets its timestamp from the strategy's assigner, and
        watermarks follow the largest timestamp seen, every ``pipeline.auto-watermark-interval``."""
        from .watermarks import WatermarkStrategy

        if not isinstance(watermark_strategy, WatermarkStrategy):
            raise TypeError("assign_timestamps_and_watermarks needs a WatermarkStrategy "
                            f"(e.g. WatermarkStrategy.for_monotonous_timestamps()), got {watermark_strategy!r}")
        return DataStream(self._env, self._one_input(T.TIMESTAMPS, f"Timestamps/Watermarks({watermark_strategy.describe()})",
                                                     None, strategy=watermark_strategy), self._type)

    def window_all(self, window_assigner: Any) -> "AllWindowedStream":
        """Windows over all records (not per key), computed in one subtask."""
        from .windowing import WindowAssigner

        if not isinstance(window_assigner, WindowAssigner):
            raise TypeError(f"window_all needs a window assigner, got {window_assigner!r}")
        _check_merging(window_assigner)
        return AllWindowedStream(self.key_by(_all_key), window_assigner, all_windows=True)

    def count_window_all(self, size: int, slide: int = 0) -> "AllWindowedStream":
        """Count windows over all records (not per key), as ``count_window`` (full windows only)."""
        ws = self.key_by(_all_key).count_window(size, slide)
        return AllWindowedStream(ws._keyed, ws._params["assigner"], all_windows=True)

    def get_side_output(self, output_tag: OutputTag) -> "DataStream":
        """The values this stream's process function sent to ``output_tag`` (``yield tag, value`` or
        ``ctx.output(tag, value)``); they never reach its main output."""
        if not isinstance(output_tag, OutputTag):
            raise TypeError(f"get_side_output needs an OutputTag, got {output_tag!r}")
        owner = self._t
        if owner.kind == T.TIMESTAMPS and owner.inputs[0].kind == T.SOURCE:
            owner = owner.inputs[0]  # from_source(source, strategy): the strategy's operator is chained on
        if owner.kind == T.SOURCE:  # a source's own side outputs (KafkaSource's undecodable records)
            if output_tag.tag_id not in getattr(owner.fn, "side_output_tags", ()):
                raise ValueError(f"get_side_output({output_tag.tag_id!r}): source {owner.name!r} has no such side "
                                 "output (KafkaSource: .set_deserialization_failure_output(tag))")
        elif owner.kind not in T.SIDE_OUTPUT_KINDS:
            raise ValueError(f"get_side_output({output_tag.tag_id!r}) needs the stream a process function returns "
                             f"(stream.process(...)), not the output of {self._t.name!r}")
        t = self._env._add(Transformation(T.SIDE_OUTPUT, f"SideOutput({output_tag.tag_id!r})", [owner],
                                          params={"tag": output_tag.tag_id}))
        return DataStream(self._env, t, output_tag.type_info)

    def key_by(self, key_selector: Any, key_type: Any = None, key_type_info: Any = None) -> "KeyedStream":
        """``key_type`` (``key_type_info`` in PyFlink before 1.13): keys are Python values either way; the
        type converts keys given as JSON to queryable state lookups (``Types.INT()``, ``Types.TUPLE``...)."""
        spec = KeySpec.of(key_selector)
        if key_type is not None or key_type_info is not None:
            spec = dataclasses.replace(spec, key_type=key_type if key_type is not None else key_type_info)
        t = self._env._add(
            Transformation(T.PARTITION, f"KeyBy({spec.describe()})", [self._t], params={"partitioner": T.HASH, "key": spec})
        )
        return KeyedStream(self._env, t, spec, self._type)

    def _partition(self, name: str, partitioner: str) -> "DataStream":
        t = self._env._add(Transformation(T.PARTITION, name, [self._t], params={"partitioner": partitioner}))
        return DataStream(self._env, t, self._type)

    def rebalance(self) -> "DataStream":
        """Round-robin batches over all subtasks of the next operator."""
        return self._partition("Rebalance", T.REBALANCE)

    def shuffle(self) -> "DataStream":
        """Each batch to a random subtask of the next operator (Flink picks per record; batches
        are the unit of transfer here, as for rebalance)."""
        return self._partition("Shuffle", T.SHUFFLE)

    def broadcast(self, *broadcast_state_descriptors: Any) -> "DataStream | BroadcastStream":
        """Every record to every subtask of the next operator. With ``MapStateDescriptor``s, a
        ``BroadcastStream`` to ``connect`` to another stream: its records reach every subtask of
        a broadcast process function, which keeps them in broadcast state (one map per descriptor)."""
        if not broadcast_state_descriptors or broadcast_state_descriptors == (None,):
            return self._partition("Broadcast", T.BROADCAST)
        return BroadcastStream(self, list(broadcast_state_descriptors))

    def forward(self) -> "DataStream":
        """Subtask i to subtask i of the next operator (chained): every operator here runs at the
        job's parallelism, so this is always possible."""
        return self._partition("Forward", T.FORWARD)

    def rescale(self) -> "DataStream":
        """Flink's rescale sends each subtask's records round-robin to a local group of the next
        operator's subtasks; with equal parallelism that group is one subtask: forward. Where the
        parallelism changes (e.g. after the non-parallel ``from_collection``) it is round-robin."""
        t = self._env._add(Transformation(T.PARTITION, "Rescale", [self._t],
                                          params={"partitioner": T.FORWARD, "rescale": True}))
        return DataStream(self._env, t, self._type)

    def union(self, *streams: "DataStream") -> "DataStream":
        for s in streams:
            if s._env is not self._env:
                raise ValueError("union needs streams of the same StreamExecutionEnvironment")
        t = self._env._add(Transformation(T.UNION, "Union", [self._t] + [s._t for s in streams]))
        return DataStream(self._env, t, self._type)

    def connect(self, ds: "DataStream | BroadcastStream") -> "ConnectedStreams | BroadcastConnectedStream":
        other = ds
        if other._env is not self._env:
            raise ValueError("connect needs streams of the same StreamExecutionEnvironment")
        if isinstance(other, BroadcastStream):
            return BroadcastConnectedStream(self, other)
        if not isinstance(other, DataStream):
            raise TypeError(f"connect needs a DataStream or a BroadcastStream, got {other!r}")
        return ConnectedStreams(self, other)

    def sink_to(self, sink: Any) -> "DataStreamSink":
        if not hasattr(sink, "create_writer"):
            raise TypeError(f"sink_to needs a sink from streamjob.runtime.connectors, got {sink!r}")
        t = self._one_input(T.SINK, getattr(sink, "default_name", type(sink).__name__), sink)
        return DataStreamSink(self._env, t)

    def print(self, sink_identifier: str | None = None) -> "DataStreamSink":
        """Each record on the job's standard output as PyFlink prints it for this stream's type:
        ``str(value)`` without a declared type, ``+I[a,1]`` for a row type, else Java's form of the
        declared type (``true``, ``1.0E7``, ``(a,1)``); ``<identifier>:<subtask>> `` before it when parallel."""
        from ..connectors import PrintSink

        return self.sink_to(PrintSink(sink_identifier, type_info=self._type))

    def execute_and_collect(self, job_execution_name: str | None = None, limit: int | None = None) -> Any:
        """Run the job (everything defined since the last execute) and give its records back to this
        program: a ``CloseableIterator`` (close it, or use ``with``, to cancel a job still running), or
        with ``limit`` a list of at most that many (the job is canceled once they are in)."""
        from .collect import execute_and_collect

        return execute_and_collect(self, job_execution_name, limit)

    # -- more of PyFlink's DataStream (issue 14, item 6) ----------------------
    def partition_custom(self, partitioner: Any, key_selector: Any) -> "DataStream":
        """Each record to the subtask ``partitioner.partition(key, num_partitions)`` picks for its key
        (a ``Partitioner`` or a function of (key, num_partitions))."""
        if isinstance(partitioner, (str, bytes)) or not callable(getattr(partitioner, "partition", partitioner)):
            raise TypeError(f"partition_custom needs a Partitioner or a function (key, num_partitions) -> int, "
                            f"got {partitioner!r}")
        spec = KeySpec.of(key_selector)
        key = CustomPartitionKey(spec.column, spec.position, spec.fn, partitioner=partitioner)
        t = self._env._add(Transformation(T.PARTITION, f"PartitionCustom({spec.describe()})", [self._t],
                                          params={"partitioner": T.CUSTOM, "key": key}))
        return DataStream(self._env, t, self._type)

    def add_sink(self, sink_func: Any) -> "DataStreamSink":
        """PyFlink's older way to add a sink: works with a sink of streamjob.runtime.connectors."""
        if not hasattr(sink_func, "create_writer"):
            raise unsupported.PyFlinkNotSupported(
                f"DataStream.add_sink({type(sink_func).__name__})",
                "only sinks of streamjob.runtime.connectors run here (FileSink, PrintSink, ...), with "
                "stream.sink_to(sink) or stream.add_sink(sink)")
        return self.sink_to(sink_func)

    def iterate(self, max_wait_time_ms: int | None = None) -> "IterativeStream":
        """Start a loop (Flink's DataStream.iterate): the ``IterativeStream`` returned carries this
        stream's records and every record fed back with ``iteration.close_with(feedback)``. A bounded
        job ends once its input has ended and no record is left in the loop (detected, not guessed);
        ``max_wait_time_ms``, as in Flink, also ends the loop's head after that long without a fed-back
        record once its input has ended (records fed back later are dropped)."""
        return IterativeStream(self, max_wait_time_ms)

    def get_execution_environment(self) -> "StreamExecutionEnvironment":
        return self._env

    def set_description(self, description: str) -> "DataStream":
        """A longer text about the operator (kept with it; its name is what progress and metrics show)."""
        self._operator_transformation().params["description"] = str(description)
        return self

    __getattr__ = unsupported.lookup("DataStream", unsupported.DATA_STREAM)


class KeyedStream(DataStream):
    def __init__(self, env: "StreamExecutionEnvironment", transformation: Transformation, key: KeySpec,
                 type_info: Any = None):
        super().__init__(env, transformation, type_info)
        self._key = key

    def _keyed(self, kind: str, name: str, fn: Any = None, **params: Any) -> Transformation:
        return self._one_input(kind, name, fn, key=self._key, **params)

    def _aggregate(self, how: str, field: Any) -> DataStream:
        if not isinstance(field, (str, int)) or isinstance(field, bool):
            raise TypeError(f"{how}() needs a column name or a tuple position, got {field!r}")
        return DataStream(self._env, self._keyed(T.KEYED_AGGREGATE, f"{how.capitalize()}({field!r})", how=how, field=field),
                          self._type)

    def sum(self, position_to_sum: str | int = 0) -> DataStream:
        """Rolling sum: each input is answered with its key's first record with the field at
        ``position_to_sum`` (a tuple position or a field name) set to the key's running sum, as PyFlink."""
        return self._aggregate("sum", position_to_sum)

    def min(self, position_to_min: str | int = 0) -> DataStream:
        """Rolling minimum of the field, in the key's first record (``min_by`` gives the whole record)."""
        return self._aggregate("min", position_to_min)

    def max(self, position_to_max: str | int = 0) -> DataStream:
        """Rolling maximum of the field, in the key's first record (``max_by`` gives the whole record)."""
        return self._aggregate("max", position_to_max)

    def reduce(self, func: Any) -> DataStream:
        as_callable(func, "reduce", "reduce")
        return DataStream(self._env, self._keyed(T.KEYED_REDUCE, "Reduce", func), self._type)

    def as_queryable_state(self, queryable_state_name: str, state_descriptor: Any = None) -> Any:
        """Flink's ``asQueryableState``: keep each key's latest record (or, with a
        ReducingStateDescriptor, the records reduced) in state that the job manager's REST API
        answers lookups of while the job runs (``GET /v1/state/<name>?key=...``). Without a
        descriptor, a ValueStateDescriptor named after the queryable state. Ends the stream (a sink)."""
        from .queryable import QueryableSink, QueryableStateStream
        from .state import ReducingStateDescriptor, ValueStateDescriptor
        from ..connectors.sinks import DiscardingSink

        d = state_descriptor if state_descriptor is not None else ValueStateDescriptor(queryable_state_name, self._type)
        if not isinstance(d, (ValueStateDescriptor, ReducingStateDescriptor)):
            raise TypeError(f"as_queryable_state({queryable_state_name!r}) takes a ValueStateDescriptor or a "
                            f"ReducingStateDescriptor (Flink's), got {d!r}")
        d.set_queryable(queryable_state_name)
        self.process(QueryableSink(d)).name(f"Queryable state: {queryable_state_name}") \
            .sink_to(DiscardingSink()).name(f"Queryable state: {queryable_state_name} (end)")
        return QueryableStateStream(queryable_state_name, d)

    def process(self, func: KeyedProcessFunction, output_type: Any = None) -> DataStream:  # type: ignore[override]
        if isinstance(func, ProcessFunction):
            return DataStream(self._env, self._one_input(T.PROCESS, "Process", func), output_type)
        as_callable(func, "process_element", "process")
        return DataStream(self._env, self._keyed(T.KEYED_PROCESS, "KeyedProcess", func), output_type)

    def window(self, window_assigner: Any) -> "WindowedStream":
        """Group each key's records into windows (tumbling, sliding, session, global)."""
        from .windowing import WindowAssigner

        if not isinstance(window_assigner, WindowAssigner):
            raise TypeError("window needs a window assigner (e.g. TumblingEventTimeWindows.of(Time.seconds(5))), "
                            f"got {window_assigner!r}")
        _check_merging(window_assigner)
        return WindowedStream(self, window_assigner)

    def count_window(self, size: int, slide: int = 0) -> "WindowedStream":
        """Windows of ``size`` records per key, a new one every ``slide`` records (0: tumbling), as
        PyFlink's: window n holds a key's records n*slide .. n*slide+size-1 (``CountWindow(n)``) and
        fires once, when full. Unlike Java Flink's sliding count windows (an evictor over a global
        window) it never fires with fewer than ``size`` records."""
        from .windowing import CountSlidingWindowAssigner, CountTumblingWindowAssigner

        for what, n in (("size", size), ("slide", slide)):
            if isinstance(n, bool) or not isinstance(n, int) or n < (1 if what == "size" else 0):
                raise ValueError(f"count_window needs a positive size and a slide >= 0 (0: tumbling), "
                                 f"got size={size!r}, slide={slide!r}")
        if not slide:
            return WindowedStream(self, CountTumblingWindowAssigner(size))
        return WindowedStream(self, CountSlidingWindowAssigner(size, slide))

    def name(self, name: str) -> "KeyedStream":
        raise ValueError("key_by creates no operator: name the operator before or after it")

    def uid(self, uid: str) -> "KeyedStream":
        raise ValueError("key_by creates no operator: set the uid of the operator before or after it")

    def _no_operator(self, what: str) -> Any:
        raise ValueError(f"key_by creates no operator: {what} of the operator before or after it "
                         "(PyFlink: \"Set parallelism for KeyedStream is not supported\")")

    def set_parallelism(self, parallelism: int) -> "KeyedStream":
        return self._no_operator("set the parallelism")

    def set_max_parallelism(self, max_parallelism: int) -> "KeyedStream":
        return self._no_operator("set the max parallelism")

    def force_non_parallel(self) -> "KeyedStream":
        return self._no_operator("set the parallelism")

    def start_new_chain(self) -> "KeyedStream":
        return self._no_operator("start the chain")

    def disable_chaining(self) -> "KeyedStream":
        return self._no_operator("disable chaining")

    def slot_sharing_group(self, slot_sharing_group: Any) -> "KeyedStream":
        return self._no_operator("set the slot sharing group")

    # Functions on a keyed stream reach keyed state through their runtime context (open), as in Flink.
    def map(self, func: Any, output_type: Any = None) -> DataStream:
        as_callable(func, "map", "map")
        return DataStream(self._env, self._keyed(T.MAP, "Map", func), output_type)

    def flat_map(self, func: Any, output_type: Any = None) -> DataStream:
        as_callable(func, "flat_map", "flat_map")
        return DataStream(self._env, self._keyed(T.FLAT_MAP, "FlatMap", func), output_type)

    def filter(self, func: Any) -> DataStream:
        as_callable(func, "filter", "filter")
        return DataStream(self._env, self._keyed(T.FILTER, "Filter", func), self._type)

    def min_by(self, position_to_min_by: str | int = 0) -> DataStream:
        """Rolling: each input is answered with the record of its key whose field is smallest so far
        (the first of equal ones, as Flink's minBy)."""
        return self._by("min", position_to_min_by)

    def max_by(self, position_to_max_by: str | int = 0) -> DataStream:
        return self._by("max", position_to_max_by)

    def _by(self, how: str, field: Any) -> DataStream:
        _check_by_field(how, field)
        name = f"{how.capitalize()}By({field!r})"
        return DataStream(self._env, self._keyed(T.KEYED_REDUCE, name, _ByReducer(how, field)), self._type)

    # As in PyFlink: a keyed stream's records go to the subtask that owns their key; repartitioning it
    # would silently take the keyed state away from the functions after it.
    def _no_repartition(self, call: str) -> Any:
        raise unsupported.PyFlinkNotSupported(
            f"KeyedStream.{call}()", f"the partitioning of a keyed stream cannot be overridden (as in Flink); call "
                                     f"{call}() on the stream before key_by, or on the output of an operator after it")

    def shuffle(self) -> DataStream:
        return self._no_repartition("shuffle")

    def rebalance(self) -> DataStream:
        return self._no_repartition("rebalance")

    def rescale(self) -> DataStream:
        return self._no_repartition("rescale")

    def forward(self) -> DataStream:
        return self._no_repartition("forward")

    def broadcast(self, *broadcast_state_descriptors: Any) -> Any:
        return self._no_repartition("broadcast")  # PyFlink refuses it too, with or without descriptors

    def partition_custom(self, partitioner: Any, key_selector: Any) -> DataStream:
        return self._no_repartition("partition_custom")

    __getattr__ = unsupported.lookup("KeyedStream", unsupported.KEYED_STREAM)


def _check_merging(assigner: Any) -> None:
    from .windowing import MergingWindowAssigner

    if isinstance(assigner, MergingWindowAssigner) and \
            type(assigner).merge_windows is not MergingWindowAssigner.merge_windows:
        raise unsupported.PyFlinkNotSupported(
            f"{type(assigner).__name__}.merge_windows()",
            "windows merge here when they overlap (session windows: EventTimeSessionWindows, "
            "ProcessingTimeSessionWindows, with a fixed or dynamic gap); a merging rule of your own is not applied")


def _check_by_field(how: str, field: Any) -> None:
    if not isinstance(field, (str, int)) or isinstance(field, bool):
        raise TypeError(f"{how}_by() needs a column name or a tuple position, got {field!r}")


class _ByReducer:
    """Reducer of min_by / max_by: keeps the record with the smaller (larger) field."""

    def __init__(self, how: str, field: Any):
        self.how = how
        self.field = field

    def __call__(self, current: Any, value: Any) -> Any:
        if isinstance(value, (tuple, list, dict, Row)):
            a, b = current[self.field], value[self.field]
        elif self.field in (0, None):  # a basic value is its own only field, as in PyFlink
            a, b = current, value
        else:
            raise TypeError(f"{self.how}_by({self.field!r}) on a {type(value).__name__} record: a field of a basic "
                            f"value can only be 0 (the value itself)")
        better = b < a if self.how == "min" else b > a
        return value if better else current


class WindowedStream:
    """``key_by(...).window(assigner)``: finish with ``reduce``, ``aggregate``, ``apply`` or ``process``."""

    def __init__(self, keyed_stream: KeyedStream, window_assigner: Any, all_windows: bool = False):
        self._keyed = keyed = keyed_stream
        self._env = keyed._env
        self._params: dict[str, Any] = {"assigner": window_assigner, "trigger": None, "evictor": None,
                                        "allowed_lateness": 0, "late_tag": None, "all_windows": all_windows}

    def trigger(self, trigger: Any) -> "WindowedStream":
        from .windowing import Trigger

        if not isinstance(trigger, Trigger):
            raise TypeError(f"trigger needs a Trigger (e.g. CountTrigger.of(10)), got {trigger!r}")
        if self._params["assigner"].merging and not trigger.can_merge():
            raise ValueError(f"{type(trigger).__name__} cannot be used with session windows: it cannot merge")
        self._params["trigger"] = trigger
        return self

    def evictor(self, evictor: Any) -> "WindowedStream":
        from .windowing import Evictor

        if not isinstance(evictor, Evictor):
            raise TypeError(f"evictor needs an Evictor (e.g. CountEvictor.of(10)), got {evictor!r}")
        self._params["evictor"] = evictor
        return self

    def allowed_lateness(self, time_ms: Any) -> "WindowedStream":
        """Keep each window this long after the watermark passed its end; late records within it
        fire the window again (with every record so far)."""
        from .windowing import _ms

        ms = _ms(time_ms, "allowed_lateness")
        if ms < 0:
            raise ValueError(f"allowed_lateness must not be negative, got {ms} ms")
        self._params["allowed_lateness"] = ms
        return self

    def side_output_late_data(self, output_tag: OutputTag) -> "WindowedStream":
        """Records too late for any window go to ``output_tag`` (read it with ``get_side_output``)."""
        if not isinstance(output_tag, OutputTag):
            raise TypeError(f"side_output_late_data needs an OutputTag, got {output_tag!r}")
        self._params["late_tag"] = output_tag
        return self

    def _build(self, name: str, type_info: Any = None, **params: Any) -> DataStream:
        p = dict(self._params, **params)
        label = f"{'WindowAll' if p['all_windows'] else 'Window'}({p['assigner'].describe()}, {name})"
        return DataStream(self._env, self._keyed._keyed(T.WINDOW, label, None, **p), type_info)

    def get_input_type(self) -> Any:
        return self._keyed.get_type()

    def reduce(self, reduce_function: Any, window_function: Any = None, output_type: Any = None) -> DataStream:
        as_callable(reduce_function, "reduce", "reduce")
        if window_function is None and output_type is None:
            output_type = self._keyed._type  # the reduced records are the input's type, as in PyFlink
        return self._build("Reduce", output_type, mode="reduce", reduce=reduce_function,
                           window_function=window_function)

    def aggregate(self, aggregate_function: Any, window_function: Any = None, accumulator_type: Any = None,
                  output_type: Any = None) -> DataStream:
        for m in ("create_accumulator", "add", "get_result"):
            if not callable(getattr(aggregate_function, m, None)):
                raise TypeError(f"aggregate needs an AggregateFunction ({m}() is missing), got {aggregate_function!r}")
        from .aggregations import Aggregations

        if (isinstance(aggregate_function, Aggregations) and window_function is None
                and all(f is None or isinstance(f, str) for _, _, f in aggregate_function.specs())
                and self._columnar()):
            # built-in aggregates of columns: the columnar operator computes them (same results)
            p = self._params
            label = f"Window({p['assigner'].describe()}, {aggregate_function!r})"
            t = self._keyed._keyed(T.WINDOW_AGGREGATE, label, None, assigner=p["assigner"], how="aggregate",
                                   field=None, outputs=aggregate_function.specs(), late_tag=p["late_tag"])
            return DataStream(self._env, t, output_type)
        return self._build("Aggregate", output_type, mode="aggregate", aggregate=aggregate_function,
                           window_function=window_function)

    def _columnar(self) -> bool:
        """Whether the columnar window operator can take this window: keyed by a column, tumbling or
        sliding event-time windows, nothing that needs the records one by one."""
        from .windowing import SlidingEventTimeWindows, TumblingEventTimeWindows

        p = self._params
        return (self._keyed._key.column is not None and not p["all_windows"]
                and type(p["assigner"]) in (TumblingEventTimeWindows, SlidingEventTimeWindows)
                and p["trigger"] is None and p["evictor"] is None and p["allowed_lateness"] == 0)

    def apply(self, window_function: Any, output_type: Any = None) -> DataStream:
        return self._build("Apply", output_type, mode="elements", window_function=window_function)

    def process(self, process_window_function: Any, output_type: Any = None) -> DataStream:
        if not callable(getattr(process_window_function, "process", None)):
            raise TypeError(f"process needs a ProcessWindowFunction, got {process_window_function!r}")
        return self._build("Process", output_type, mode="elements", window_function=process_window_function)

    def _field_aggregate(self, how: str, field: Any) -> DataStream:
        if not isinstance(field, (str, int)) or isinstance(field, bool):
            raise TypeError(f"{how}() needs a column name or a tuple position, got {field!r}")
        p = self._params
        if isinstance(field, str) and self._columnar():
            # The columnar path: Arrow batches in, one Arrow batch per fired window out.
            label = f"Window({p['assigner'].describe()}, {how.capitalize()}({field!r}))"
            t = self._keyed._keyed(T.WINDOW_AGGREGATE, label, None, assigner=p["assigner"], how=how, field=field,
                                   late_tag=p["late_tag"])
            return DataStream(self._env, t, self._keyed._type)
        return self._build(f"{how.capitalize()}({field!r})", self._keyed._type, mode="reduce",
                           reduce=_FieldReduce(how, field), window_function=None)

    def sum(self, field: str | int = 0) -> DataStream:
        """Per window, the first record with ``field`` replaced by the sum over the window."""
        return self._field_aggregate("sum", field)

    def min(self, field: str | int = 0) -> DataStream:
        return self._field_aggregate("min", field)

    def max(self, field: str | int = 0) -> DataStream:
        return self._field_aggregate("max", field)

    def min_by(self, field: str | int = 0) -> DataStream:
        """Per window, the record whose ``field`` is smallest (the first of equal ones, as Flink's minBy)."""
        return self._by("min", field)

    def max_by(self, field: str | int = 0) -> DataStream:
        return self._by("max", field)

    def _by(self, how: str, field: Any) -> DataStream:
        _check_by_field(how, field)
        p = self._params
        if isinstance(field, str) and self._columnar():
            label = f"Window({p['assigner'].describe()}, {how.capitalize()}By({field!r}))"
            t = self._keyed._keyed(T.WINDOW_AGGREGATE, label, None, assigner=p["assigner"], how=f"{how}_by",
                                   field=field, late_tag=p["late_tag"])
            return DataStream(self._env, t, self._keyed._type)
        return self._build(f"{how.capitalize()}By({field!r})", self._keyed._type, mode="reduce",
                           reduce=_ByReducer(how, field), window_function=None)


class _FieldReduce:
    """sum/min/max of one field over a window, as Flink's built-in window aggregations."""

    def __init__(self, how: str, field: Any):
        self.how, self.field = how, field

    def reduce(self, a: Any, b: Any) -> Any:
        from ..task.keyed import _replace

        x, y = a[self.field], b[self.field]
        v = x + y if self.how == "sum" else (min(x, y) if self.how == "min" else max(x, y))
        return _replace(a, self.field, v)


class AllWindowedStream(WindowedStream):
    """``window_all(assigner)``: one window for the whole stream, in one subtask (as Flink's
    windowAll, which runs at parallelism 1)."""


class ConnectedStreams:
    """Two streams into one two-input operator (``process`` or ``map``)."""

    def __init__(self, stream1: DataStream, stream2: DataStream):
        self._first = stream1
        self._second = stream2
        self._env = stream1._env

    def _two_input(self, kind: str, name: str, fn: Any, output_type: Any = None, **params: Any) -> DataStream:
        t = Transformation(kind, name, [self._first._t, self._second._t], fn=fn, params=params)
        return DataStream(self._env, self._env._add(t), output_type)

    def key_by(self, key_selector1: Any, key_selector2: Any, key_type: Any = None,
               key_type_info: Any = None) -> "ConnectedStreams":
        """Both inputs keyed (records with equal keys meet in one subtask), as PyFlink's
        ``ConnectedStreams.key_by``."""
        return ConnectedStreams(self._first.key_by(key_selector1), self._second.key_by(key_selector2))

    def _keys(self) -> list[KeySpec] | None:
        first, second = self._first, self._second
        if isinstance(first, KeyedStream) and isinstance(second, KeyedStream):
            return [first._key, second._key]
        return None

    def process(self, func: CoProcessFunction, output_type: Any = None) -> DataStream:
        for m in ("process_element1", "process_element2"):
            as_callable(func, m, "process on connected streams")
        keys = self._keys()
        if isinstance(func, KeyedCoProcessFunction) or (keys is not None and not isinstance(func, CoProcessFunction)):
            if keys is None:
                raise TypeError("a KeyedCoProcessFunction needs two keyed streams: connect two key_by(...) streams, "
                                "or call connected.key_by(key1, key2) first")
            return self._two_input(T.KEYED_CO_PROCESS, "KeyedCoProcess", func, output_type, keys=keys)
        return self._two_input(T.CO_PROCESS, "CoProcess", func, output_type)

    def map(self, func: CoMapFunction, output_type: Any = None) -> DataStream:
        for m in ("map1", "map2"):
            as_callable(func, m, "map on connected streams")
        keys = self._keys()
        if keys is not None:  # keyed connected streams: the function's open() gets keyed state, shared by both
            return self._two_input(T.KEYED_CO_PROCESS, "CoMap", KeyedCoMap(func), output_type, keys=keys)
        return self._two_input(T.CO_MAP, "CoMap", func, output_type)

    def flat_map(self, func: CoFlatMapFunction, output_type: Any = None) -> DataStream:
        for m in ("flat_map1", "flat_map2"):
            as_callable(func, m, "flat_map on connected streams")
        keys = self._keys()
        if keys is not None:
            return self._two_input(T.KEYED_CO_PROCESS, "CoFlatMap", KeyedCoFlatMap(func), output_type, keys=keys)
        return self._two_input(T.CO_FLAT_MAP, "CoFlatMap", func, output_type)

    __getattr__ = unsupported.lookup("ConnectedStreams", unsupported.CONNECTED_STREAMS)


class ConnectedIterativeStreams(ConnectedStreams):
    """``iteration.with_feedback_type(type_info)``: the loop's input (input 1) connected with its
    feedback (input 2), so that the feedback can have a type of its own. The two-input operator made
    on it (``map``/``flat_map``/``process``, keyed after ``key_by(key1, key2)``) is the loop's head."""

    def __init__(self, input_stream: DataStream, feedback: DataStream):
        super().__init__(input_stream, feedback)
        self._feedback = feedback._t if feedback._t.kind == T.FEEDBACK else feedback._t.inputs[0]

    def key_by(self, key_selector1: Any, key_selector2: Any, key_type: Any = None,
               key_type_info: Any = None) -> "ConnectedIterativeStreams":
        keyed = ConnectedIterativeStreams(self._first.key_by(key_selector1), self._second.key_by(key_selector2))
        keyed._feedback = self._feedback
        return keyed

    def close_with(self, feedback_stream: DataStream) -> DataStream:
        """Feed ``feedback_stream`` back as input 2 of the head, closing the loop; returns it."""
        return _close(self._feedback, self._env, feedback_stream)


class IterativeStream(DataStream):
    """The head of a loop (``stream.iterate()``): its records are the input's and the fed-back ones.

    The body is what is built on it; ``close_with(feedback_stream)`` closes the loop, and what leaves
    the loop is an ordinary stream (a ``filter`` or a side output of the body). Event time: the head's
    output watermark is its input's; fed-back records keep their timestamps (see docs/iterations.md).
    """

    def __init__(self, input_stream: DataStream, max_wait_time_ms: int | None = None):
        if max_wait_time_ms is not None and (isinstance(max_wait_time_ms, bool) or not isinstance(max_wait_time_ms, int)
                                             or max_wait_time_ms < 0):
            raise ValueError(f"iterate(max_wait_time_ms=...) needs None or a non-negative int, got {max_wait_time_ms!r}")
        env = input_stream._env
        number = 1 + sum(1 for t in env._transformations if t.kind == T.FEEDBACK)
        name = f"Iteration {number}"
        self._input = input_stream
        self._feedback = env._add(Transformation(T.FEEDBACK, name, [], params={
            "name": name, "max_wait_time_ms": max_wait_time_ms}))
        head = env._add(Transformation(T.ITERATION_HEAD, name, [input_stream._t, self._feedback],
                                       params={"iteration": self._feedback.id}))
        super().__init__(env, head, input_stream._type)

    def close_with(self, feedback_stream: DataStream) -> DataStream:
        """Feed ``feedback_stream`` back to the head, closing the loop; returns ``feedback_stream``.
        Its parallelism must be the head's; a keyed ``feedback_stream`` (``key_by``) is routed by key
        group, as any keyed edge."""
        return _close(self._feedback, self._env, feedback_stream)

    def with_feedback_type(self, feedback_type_info: Any) -> "ConnectedIterativeStreams":
        """A loop whose feedback has a type of its own (Flink's withFeedbackType): a ``CoMapFunction`` /
        ``CoProcessFunction`` on the returned ``ConnectedIterativeStreams`` reads the input as input 1
        and the feedback as input 2, and ``close_with`` on it closes the loop."""
        env = self._env
        if any(self._t in t.inputs for t in env._transformations):
            raise ValueError(f"{self._feedback.name}: with_feedback_type(...) makes a new loop head, but this "
                             "IterativeStream is already read by an operator; use one or the other")
        env._transformations.remove(self._t)  # the connected streams' operator is the head instead
        return ConnectedIterativeStreams(self._input, DataStream(env, self._feedback, feedback_type_info))


def _close(feedback: Transformation, env: "StreamExecutionEnvironment", feedback_stream: Any) -> Any:
    if not isinstance(feedback_stream, DataStream):
        raise TypeError(f"{feedback.name}: close_with needs a DataStream, got {feedback_stream!r}")
    if feedback_stream._env is not env:
        raise ValueError(f"{feedback.name}: close_with needs a stream of the same StreamExecutionEnvironment")
    feedback.inputs.append(feedback_stream._t)
    return feedback_stream


class BroadcastStream:
    """``stream.broadcast(descriptor, ...)``: a stream whose records go to every subtask of the
    operator it is connected to, with the broadcast state descriptors that operator holds."""

    def __init__(self, input_stream: DataStream, broadcast_state_descriptors: list):
        from .state import MapStateDescriptor

        stream, descriptors = input_stream, list(broadcast_state_descriptors)
        names = set()
        for d in descriptors:
            if not isinstance(d, MapStateDescriptor):
                raise TypeError(f"broadcast needs MapStateDescriptors (broadcast state is a map), got {d!r}")
            if d.name in names:
                raise ValueError(f"broadcast: two broadcast state descriptors are named {d.name!r}")
            names.add(d.name)
        self._stream = stream
        self._env = stream._env
        self._descriptors = descriptors

    def _transformation(self) -> Transformation:
        return self._env._add(Transformation(T.PARTITION, "Broadcast", [self._stream._t],
                                             params={"partitioner": T.BROADCAST}))


class BroadcastConnectedStream:
    """A (keyed or non-keyed) stream connected to a ``BroadcastStream``: finish with ``process``
    (a ``BroadcastProcessFunction``, or a ``KeyedBroadcastProcessFunction`` on a keyed stream)."""

    def __init__(self, non_broadcast_stream: DataStream, broadcast_stream: BroadcastStream,
                 broadcast_state_descriptors: Any = None):
        # (PyFlink passes the descriptors again; they are the broadcast stream's)
        self._stream = non_broadcast_stream
        self._broadcast = broadcast_stream
        self._env = non_broadcast_stream._env

    def process(self, func: Any, output_type: Any = None) -> DataStream:
        for m in ("process_element", "process_broadcast_element"):
            if not callable(getattr(func, m, None)) or isinstance(func, type):
                raise TypeError(f"process on a broadcast connected stream needs a BroadcastProcessFunction or a "
                                f"KeyedBroadcastProcessFunction ({m}() is missing), got {func!r}")
        keyed = isinstance(self._stream, KeyedStream)
        if keyed and isinstance(func, BroadcastProcessFunction):
            raise TypeError("a keyed stream connected to a broadcast stream needs a KeyedBroadcastProcessFunction, "
                            "got a BroadcastProcessFunction (as in PyFlink)")
        if not keyed and isinstance(func, KeyedBroadcastProcessFunction):
            raise TypeError("a KeyedBroadcastProcessFunction needs a keyed stream: connect "
                            "stream.key_by(...) to the broadcast stream")
        params: dict[str, Any] = {"descriptors": list(self._broadcast._descriptors)}
        if keyed:
            kind, name = T.KEYED_BROADCAST_PROCESS, "KeyedBroadcastProcess"
            params["key"] = self._stream._key  # type: ignore[attr-defined]
        else:
            kind, name = T.BROADCAST_PROCESS, "BroadcastProcess"
        t = Transformation(kind, name, [self._stream._t, self._broadcast._transformation()], fn=func, params=params)
        return DataStream(self._env, self._env._add(t), output_type)


class DataStreamSink:
    def __init__(self, env: "StreamExecutionEnvironment", transformation: Transformation):
        self._env = env
        self._t = transformation

    def name(self, name: str) -> "DataStreamSink":
        self._t.name = name
        return self

    def uid(self, uid: str) -> "DataStreamSink":
        self._env._claim_uid(uid, self._t)
        return self

    def set_description(self, description: str) -> "DataStreamSink":
        self._t.params["description"] = str(description)
        return self

    def set_parallelism(self, parallelism: int) -> "DataStreamSink":
        """The sink's parallelism (the job's when not set)."""
        _set_parallelism(self._t, parallelism)
        return self

    def set_max_parallelism(self, max_parallelism: int) -> "DataStreamSink":
        _set_max_parallelism(self._t, max_parallelism)
        return self

    def start_new_chain(self) -> "DataStreamSink":
        self._t.chaining = T.NEW_CHAIN
        return self

    def disable_chaining(self) -> "DataStreamSink":
        self._t.chaining = T.NO_CHAINING
        return self

    def slot_sharing_group(self, slot_sharing_group: Any) -> "DataStreamSink":
        """See ``DataStream.slot_sharing_group``."""
        self._t.slot_sharing_group = _group_name(slot_sharing_group)
        return self

    __getattr__ = unsupported.lookup("DataStreamSink", unsupported.DATA_STREAM_SINK)
