"""User function interfaces, named as in PyFlink.

Plain callables work wherever a function object does (``map(lambda r: ...)``);
the classes are for functions that need ``open``/``close`` or state.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable


class RuntimeContext:
    """What a function learns about where it runs; given to ``open``."""

    def __init__(self, task_name: str, index: int, parallelism: int, max_parallelism: int, attempt: int = 0,
                 job_parameters: dict | None = None, printer: Callable[[list[str]], None] | None = None):
        self._task_name = task_name
        self._index = index
        self._parallelism = parallelism
        self._max_parallelism = max_parallelism
        self._attempt = attempt
        self._job_parameters = dict(job_parameters or {})
        # Where PrintSink output goes: the job manager's console when running on a cluster.
        self._printer = printer or _print_lines

    def get_task_name(self) -> str:
        return self._task_name

    def get_task_name_with_subtasks(self) -> str:
        """The task name with this subtask's place, as Flink shows it: ``Map (2/4)#0``."""
        return f"{self._task_name} ({self._index + 1}/{self._parallelism})#{self._attempt}"

    def get_metrics_group(self) -> Any:
        """This operator subtask's ``MetricGroup`` (PyFlink's): counters, gauges, meters and
        distributions registered on it are reported by the task to the job manager's ``/metrics``
        (Prometheus, ``streamjob_user_<name>``) and REST API (``api/metrics.py``)."""
        return self._metric_registry().group()

    def _metric_registry(self) -> Any:
        """The registry of this operator subtask's metrics, user and connector ones (made on first use)."""
        registry = getattr(self, "_metrics", None)
        if registry is None:
            from .metrics import MetricRegistry

            registry = self._metrics = MetricRegistry(self._task_name, self._index)
        return registry

    def get_index_of_this_subtask(self) -> int:
        return self._index

    def get_number_of_parallel_subtasks(self) -> int:
        return self._parallelism

    def get_max_number_of_parallel_subtasks(self) -> int:
        return self._max_parallelism

    def get_attempt_number(self) -> int:
        return self._attempt

    def get_job_parameter(self, key: str, default_value: Any = None) -> Any:
        """A global job parameter (``env.get_config().set_global_job_parameters``), else the job's
        configuration entry of that key."""
        from .execution_config import GLOBAL_JOB_PARAMETERS, job_parameters

        params = job_parameters(self._job_parameters.get(GLOBAL_JOB_PARAMETERS))
        if key in params:
            return params[key]
        return self._job_parameters.get(key, default_value)

    def is_checkpointing_enabled(self) -> bool:
        from ..config import Configuration

        return Configuration(self._job_parameters).checkpointing_enabled()

    # -- keyed state (on a keyed stream only; scoped to the key of the current record) --
    def get_state(self, state_descriptor: Any) -> Any:
        return self._keyed().get_state(state_descriptor)

    def get_list_state(self, state_descriptor: Any) -> Any:
        return self._keyed().get_list_state(state_descriptor)

    def get_map_state(self, state_descriptor: Any) -> Any:
        return self._keyed().get_map_state(state_descriptor)

    def get_reducing_state(self, state_descriptor: Any) -> Any:
        return self._keyed().get_reducing_state(state_descriptor)

    def get_aggregating_state(self, state_descriptor: Any) -> Any:
        return self._keyed().get_aggregating_state(state_descriptor)

    def _keyed(self) -> Any:
        backend = getattr(self, "_keyed_backend", None)
        if backend is None:
            raise RuntimeError(
                f"operator {self._task_name!r}: keyed state is only available on a keyed stream "
                "(stream.key_by(...) then map / flat_map / filter / reduce with a function that has open(), "
                "or process(KeyedProcessFunction))"
            )
        return backend


def _print_lines(lines: list[str]) -> None:
    print("\n".join(lines), flush=True)


class OutputTag:
    """Names a side output of a process function: ``yield tag, value`` or ``ctx.output(tag, value)``
    sends ``value`` there, never to the main output; ``stream.get_side_output(tag)`` reads it.
    Tags are equal by name, as in PyFlink (the same name is the same side output)."""

    __slots__ = ("tag_id", "type_info")

    def __init__(self, tag_id: str, type_info: Any = None):
        if not isinstance(tag_id, str) or not tag_id:
            raise ValueError(f"OutputTag needs a non-empty name, got {tag_id!r}")
        self.tag_id = tag_id
        self.type_info = type_info

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OutputTag) and other.tag_id == self.tag_id

    def __hash__(self) -> int:
        return hash(("OutputTag", self.tag_id))

    def __repr__(self) -> str:
        return f"OutputTag({self.tag_id!r})"

    def __reduce__(self) -> tuple:
        return OutputTag, (self.tag_id, self.type_info)


class Subscriptable:
    """PyFlink's functions, their contexts, triggers and assigners are generic
    (``ProcessWindowFunction[tuple, tuple, str, TimeWindow]``, ``ProcessWindowFunction.Context[TimeWindow]``
    in annotations): the subscript documents types and changes nothing."""

    __slots__ = ()

    def __class_getitem__(cls, params: Any) -> type:
        return cls


class Function(Subscriptable):
    def open(self, runtime_context: RuntimeContext) -> None:
        pass

    def close(self) -> None:
        pass


class MapFunction(Function):
    def map(self, value: Any) -> Any:
        raise NotImplementedError


class FlatMapFunction(Function):
    def flat_map(self, value: Any) -> Iterable[Any]:
        raise NotImplementedError


class FilterFunction(Function):
    def filter(self, value: Any) -> bool:
        raise NotImplementedError


class ReduceFunction(Function):
    def reduce(self, value1: Any, value2: Any) -> Any:
        raise NotImplementedError


class Partitioner(Function):
    """For ``partition_custom``: the subtask (0 .. num_partitions - 1) that gets a key's records."""

    def partition(self, key: Any, num_partitions: int) -> int:
        raise NotImplementedError


class KeySelector(Function):
    def get_key(self, value: Any) -> Any:
        raise NotImplementedError


class ProcessFunction(Function):
    """``process_element(value, ctx)`` yields zero or more output records."""

    class Context(Subscriptable):
        def timestamp(self) -> int | None:
            return None

        def output(self, output_tag: OutputTag, value: Any) -> None:
            """Emit ``value`` to the side output ``output_tag``."""
            raise NotImplementedError

    def process_element(self, value: Any, ctx: "ProcessFunction.Context") -> Iterable[Any] | None:
        raise NotImplementedError


class KeyedProcessFunction(Function):
    """Like ``ProcessFunction`` on a keyed stream: ``ctx.get_current_key()``, keyed state, and
    timers (``ctx.timer_service().register_event_time_timer(t)``) that call ``on_timer``."""

    class Context(Subscriptable):
        def get_current_key(self) -> Any:
            raise NotImplementedError

        def timestamp(self) -> int | None:
            """The record's event timestamp (ms), None without event time."""
            return None

        def timer_service(self) -> Any:
            raise NotImplementedError

        def output(self, output_tag: OutputTag, value: Any) -> None:
            """Emit ``value`` to the side output ``output_tag``."""
            raise NotImplementedError

    class OnTimerContext(Context):
        def time_domain(self) -> Any:
            """``TimeDomain.EVENT_TIME`` or ``TimeDomain.PROCESSING_TIME``."""
            raise NotImplementedError

    def process_element(self, value: Any, ctx: "KeyedProcessFunction.Context") -> Iterable[Any] | None:
        raise NotImplementedError

    def on_timer(self, timestamp: int, ctx: "KeyedProcessFunction.OnTimerContext") -> Iterable[Any] | None:
        """A timer set for the current key fired; yields output records (none by default)."""
        return None


class CoProcessFunction(Function):
    """Two inputs: ``process_element1`` for the first, ``process_element2`` for the second."""

    class Context(Subscriptable):
        def timestamp(self) -> int | None:
            return None

        def output(self, output_tag: OutputTag, value: Any) -> None:
            """Emit ``value`` to the side output ``output_tag``."""
            raise NotImplementedError

    def process_element1(self, value: Any, ctx: "CoProcessFunction.Context") -> Iterable[Any] | None:
        raise NotImplementedError

    def process_element2(self, value: Any, ctx: "CoProcessFunction.Context") -> Iterable[Any] | None:
        raise NotImplementedError


class KeyedCoProcessFunction(Function):
    """Two keyed inputs sharing keyed state and timers: ``process_element1`` / ``process_element2``,
    ``on_timer``; ``ctx.get_current_key()``."""

    Context = KeyedProcessFunction.Context
    OnTimerContext = KeyedProcessFunction.OnTimerContext

    def process_element1(self, value: Any, ctx: Any) -> Iterable[Any] | None:
        raise NotImplementedError

    def process_element2(self, value: Any, ctx: Any) -> Iterable[Any] | None:
        raise NotImplementedError

    def on_timer(self, timestamp: int, ctx: Any) -> Iterable[Any] | None:
        return None


class BaseBroadcastProcessFunction(Function):
    """What both broadcast process functions share (PyFlink's ``BaseBroadcastProcessFunction``).

    ``process_element`` sees the non-broadcast side with read-only broadcast state;
    ``process_broadcast_element`` sees every broadcast record, in every subtask, and may
    change the broadcast state: it must change it the same way in every subtask (depend on
    the broadcast record only), so that all copies stay equal, as in Flink."""

    class BaseContext(Subscriptable):
        def timestamp(self) -> int | None:
            """The record's event timestamp (ms), None without event time."""
            return None

        def current_processing_time(self) -> int:
            raise NotImplementedError

        def current_watermark(self) -> int:
            raise NotImplementedError

        def output(self, output_tag: OutputTag, value: Any) -> None:
            """Emit ``value`` to the side output ``output_tag``."""
            raise NotImplementedError

    class Context(BaseContext):
        def get_broadcast_state(self, state_descriptor: Any) -> Any:
            """The writable broadcast state of one of the broadcast stream's descriptors."""
            raise NotImplementedError

    class ReadOnlyContext(BaseContext):
        def get_broadcast_state(self, state_descriptor: Any) -> Any:
            """A read-only view of the broadcast state of one of the broadcast stream's descriptors."""
            raise NotImplementedError


class BroadcastProcessFunction(BaseBroadcastProcessFunction):
    """``non_broadcast.connect(broadcast_stream).process(f)``."""

    def process_element(self, value: Any, ctx: "BaseBroadcastProcessFunction.ReadOnlyContext") -> Iterable[Any] | None:
        raise NotImplementedError

    def process_broadcast_element(self, value: Any, ctx: "BaseBroadcastProcessFunction.Context") -> Iterable[Any] | None:
        raise NotImplementedError


class KeyedBroadcastProcessFunction(BaseBroadcastProcessFunction):
    """``keyed.connect(broadcast_stream).process(f)``: also keyed state and timers on the keyed
    side (``ctx.get_current_key()``, ``ctx.timer_service()``, ``on_timer``), and on the broadcast
    side ``ctx.apply_to_keyed_state(descriptor, function)`` over every key of this subtask."""

    class Context(BaseBroadcastProcessFunction.Context):
        def apply_to_keyed_state(self, state_descriptor: Any, func: Callable[[Any, Any], None]) -> None:
            """``func(key, state)`` for every key that has state ``state_descriptor`` here."""
            raise NotImplementedError

    class ReadOnlyContext(BaseBroadcastProcessFunction.ReadOnlyContext):
        def get_current_key(self) -> Any:
            raise NotImplementedError

        def timer_service(self) -> Any:
            raise NotImplementedError

    class OnTimerContext(ReadOnlyContext):
        def time_domain(self) -> Any:
            """``TimeDomain.EVENT_TIME`` or ``TimeDomain.PROCESSING_TIME``."""
            raise NotImplementedError

    def process_element(self, value: Any, ctx: "KeyedBroadcastProcessFunction.ReadOnlyContext") -> Iterable[Any] | None:
        raise NotImplementedError

    def process_broadcast_element(self, value: Any, ctx: "KeyedBroadcastProcessFunction.Context") -> Iterable[Any] | None:
        raise NotImplementedError

    def on_timer(self, timestamp: int, ctx: "KeyedBroadcastProcessFunction.OnTimerContext") -> Iterable[Any] | None:
        """A timer set for the current key fired; yields output records (none by default)."""
        return None


class CoMapFunction(Function):
    def map1(self, value: Any) -> Any:
        raise NotImplementedError

    def map2(self, value: Any) -> Any:
        raise NotImplementedError


class CoFlatMapFunction(Function):
    """Two inputs, zero or more outputs per input: ``flat_map1`` / ``flat_map2`` yield them."""

    def flat_map1(self, value: Any) -> Iterable[Any]:
        raise NotImplementedError

    def flat_map2(self, value: Any) -> Iterable[Any]:
        raise NotImplementedError


class _KeyedCoAdapter(KeyedCoProcessFunction):
    """A CoMapFunction / CoFlatMapFunction on keyed connected streams (``connect(...).key_by(k1, k2)``),
    run by the keyed two-input operator: its ``open(runtime_context)`` gets keyed state, scoped to the
    key of the record in hand and shared by both inputs, as in PyFlink (which has no timers there)."""

    def __init__(self, fn: Any):
        self.fn = fn

    def open(self, runtime_context: RuntimeContext) -> None:
        if callable(getattr(self.fn, "open", None)):
            self.fn.open(runtime_context)

    def close(self) -> None:
        if callable(getattr(self.fn, "close", None)):
            self.fn.close()

    def on_timer(self, timestamp: int, ctx: Any) -> None:
        return None


class KeyedCoMap(_KeyedCoAdapter):
    def __init__(self, fn: Any):
        super().__init__(fn)
        self._first, self._second = as_callable(fn, "map1", "map"), as_callable(fn, "map2", "map")

    def process_element1(self, value: Any, ctx: Any) -> tuple:
        return (self._first(value),)

    def process_element2(self, value: Any, ctx: Any) -> tuple:
        return (self._second(value),)


class KeyedCoFlatMap(_KeyedCoAdapter):
    def __init__(self, fn: Any):
        super().__init__(fn)
        self._first = as_callable(fn, "flat_map1", "flat_map")
        self._second = as_callable(fn, "flat_map2", "flat_map")

    def process_element1(self, value: Any, ctx: Any) -> Iterable[Any]:
        return self._first(value)

    def process_element2(self, value: Any, ctx: Any) -> Iterable[Any]:
        return self._second(value)


def as_callable(fn: Any, method: str, what: str) -> Callable:
    """The per-record callable of a function object or a plain callable."""
    bound = getattr(fn, method, None)
    if bound is not None and callable(bound) and not isinstance(fn, type):
        return bound
    if callable(fn) and not isinstance(fn, Function):
        return fn
    raise TypeError(f"{what} needs a callable or an object with a {method}() method, got {fn!r}")


class AggregateFunction(Function):
    """Incremental aggregation for ``AggregatingState``: accumulator in, result out."""

    def create_accumulator(self) -> Any:
        raise NotImplementedError

    def add(self, value: Any, accumulator: Any) -> Any:
        raise NotImplementedError

    def get_result(self, accumulator: Any) -> Any:
        raise NotImplementedError

    def merge(self, acc_a: Any, acc_b: Any) -> Any:
        raise NotImplementedError
