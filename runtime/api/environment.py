"""StreamExecutionEnvironment: where a job is defined and from where it is executed."""

from __future__ import annotations

from enum import Enum

import os
import signal
import threading
import time
import uuid
from typing import Any, Iterable

from ..config import Configuration, Options
from .time import TimeCharacteristic
from . import backends
from .backends import StateBackend
from .checkpointing import CheckpointConfig, CheckpointingMode
from .execution_config import ExecutionConfig
from .restart import RestartStrategyConfiguration
from ..keygroups import DEFAULT_MAX_PARALLELISM, check_max_parallelism
from . import transformations as T
from .datastream import DataStream
from .transformations import Transformation
from . import unsupported
from .job_result import JobExecutionResult


class JobStatus(str, Enum):
    """A job's state, as PyFlink's JobStatus (and equal to its name: ``JobStatus.RUNNING == "RUNNING"``)."""

    CREATED = "CREATED"
    RUNNING = "RUNNING"
    FAILING = "FAILING"
    FAILED = "FAILED"
    CANCELLING = "CANCELLING"
    CANCELED = "CANCELED"
    FINISHED = "FINISHED"
    RESTARTING = "RESTARTING"
    SUSPENDED = "SUSPENDED"
    RECONCILING = "RECONCILING"

    def is_globally_terminal_state(self) -> bool:
        """The job ended for good: failed, canceled or finished."""
        return self in (JobStatus.FAILED, JobStatus.CANCELED, JobStatus.FINISHED)

    def is_terminal_state(self) -> bool:
        return self.is_globally_terminal_state() or self is JobStatus.SUSPENDED

    def __str__(self) -> str:
        return self.value


class JobClient:
    """A job started with ``execute_async``: its id, status, cancellation and result."""

    def __init__(self, job_id: str, job_name: str):
        self.job_id = job_id
        self.job_name = job_name
        self.job_manager: Any = None  # set once the job manager runs (tests use it to find task processes)
        self._cancel_requested = False
        self._cancel_signal: int | None = None  # a second Ctrl-C / SIGTERM during the graceful stop
        self._state = "CREATED"
        self._result: JobExecutionResult | None = None
        self._error: BaseException | None = None
        self._finished = threading.Event()
        self._attached = threading.Event()
        self._result_read = False  # the program saw the outcome, so `streamjob run` need not report it
        self._collect_iterator = False  # execute_and_collect's job: canceled if the program ends without reading it all

    def get_job_id(self) -> str:
        return self.job_id

    def get_job_status(self) -> JobStatus:
        if self._finished.is_set():
            return JobStatus(self._state)
        jm = self.job_manager
        return JobStatus(jm.status.state if jm is not None else self._state)

    def cancel(self) -> None:
        """Cancel the job (no final checkpoint; retained checkpoints follow the retention setting)."""
        self._cancel_requested = True

    def trigger_savepoint(self, savepoint_directory: str | None = None, timeout: float = 300.0) -> str:
        """Take a savepoint of the running job; returns its path once it is complete."""
        return self._savepoint(savepoint_directory, False, False, timeout)

    def stop_with_savepoint(self, advance_to_end_of_event_time: bool = False,
                            savepoint_directory: str | None = None, timeout: float = 300.0) -> str:
        """Stop the job with a final savepoint (``advance_to_end_of_event_time``: drain first);
        returns its path. If the savepoint fails the job keeps running and this raises."""
        return self._savepoint(savepoint_directory, True, advance_to_end_of_event_time, timeout)

    def _savepoint(self, directory: str | None, stop: bool, drain: bool, timeout: float) -> str:
        if not self._attached.wait(timeout):
            raise TimeoutError(f"job {self.job_name!r} did not start within {timeout} s")
        request = self.job_manager.trigger_savepoint(directory, stop, drain)
        deadline = time.monotonic() + timeout
        while request.status in ("QUEUED", "IN_PROGRESS"):
            if time.monotonic() > deadline:
                raise TimeoutError(f"savepoint {request.trigger_id} did not complete within {timeout} s")
            time.sleep(0.05)
        if request.status != "COMPLETED":
            raise RuntimeError(f"savepoint {request.trigger_id} failed: {request.error}")
        return request.path

    def get_job_execution_result(self, timeout: float | None = None) -> JobExecutionResult:
        if not self._finished.wait(timeout):
            raise TimeoutError(f"job {self.job_name!r} did not end within {timeout} s")
        self._result_read = True
        if self._error is not None:
            raise self._error
        return self._result  # type: ignore[return-value]

    def wait_until_running(self, timeout: float = 60.0) -> bool:
        return self._attached.wait(timeout)

    # called by the executor
    def _attach(self, job_manager: Any) -> None:
        self.job_manager = job_manager
        self.job_id = job_manager.job_id  # a job that claims a checkpoint continues under its job id
        self._attached.set()

    def _interrupt(self, signum: int) -> None:
        """A second Ctrl-C (or SIGTERM) while the job drains: cancel it as ``streamjob run`` cancels the
        job of ``execute``: the latest completed checkpoint is kept and the run exits 128 + signum."""
        self._cancel_signal = signum

    def _done(self, state: str) -> None:
        self._state = state


class _ExecutionContext:
    """Defaults set by ``streamjob run`` (CLI flags) for environments the job creates."""

    def __init__(self) -> None:
        self.configuration = Configuration()
        self.environments: list["StreamExecutionEnvironment"] = []
        self.show_progress: bool | None = None
        self.show_summary: bool | None = None  # streamjob run: the summary is printed with or without progress
        self.clients: list[JobClient] = []  # jobs started with execute_async, in order

    def reset(self) -> None:
        self.__init__()

    def wait_for_async_jobs(self) -> None:
        """What Flink's client does in attached mode once the program's main returns: wait for the jobs
        it started with ``execute_async`` (they run in this process; returning would kill them).
        Raises the first failure the program did not see itself (``get_job_execution_result``).
        Ctrl-C stops them gracefully (sources end, everything drains), a second one cancels."""
        interrupts = 0
        for client in self.clients:
            if client._collect_iterator and not client._finished.is_set():
                client._result_read = True  # nobody can read its records any more: an unbounded one would
                client.cancel()             # keep the program waiting forever
        for client in self.clients:
            while not client._finished.is_set():
                try:
                    client._finished.wait(0.25)
                except KeyboardInterrupt as e:
                    interrupts += 1
                    # streamjob run turns SIGTERM into a KeyboardInterrupt named Terminated
                    terminated = type(e).__name__ == "Terminated"
                    for c in self.clients:
                        if c._finished.is_set():
                            continue
                        if c.job_manager is None:
                            c.cancel()  # not deployed yet: nothing to drain or keep
                        elif interrupts == 1:
                            c.job_manager.stop(by="SIGTERM" if terminated else "Ctrl-C")
                        else:  # as the job of execute(): canceled, the latest checkpoint kept, exit 130 / 143
                            c._interrupt(signal.SIGTERM if terminated else signal.SIGINT)
            if client._error is not None and not client._result_read:
                client._result_read = True
                raise client._error


execution_context = _ExecutionContext()


class RuntimeExecutionMode(Enum):
    STREAMING = 0
    BATCH = 1
    AUTOMATIC = 2


class StreamExecutionEnvironment:
    def __init__(self, configuration: Configuration | None = None):
        # PyFlink's ExecutionConfig (get_config()) over the job's configuration: one object, no copy to keep in step
        self._config = ExecutionConfig(execution_context.configuration.to_dict())
        if configuration is not None:
            self._config.update(configuration)
        self._time_characteristic = TimeCharacteristic.EventTime  # Flink's default since 1.12
        self._changelog_state_backend: bool | None = None  # enable_changelog_state_backend
        self._transformations: list[Transformation] = []
        self._uids: dict[str, Transformation] = {}
        self._executed = False
        execution_context.environments.append(self)

    @staticmethod
    def get_execution_environment(configuration: Configuration | None = None) -> "StreamExecutionEnvironment":
        return StreamExecutionEnvironment(configuration)

    # -- configuration ------------------------------------------------------
    def get_config(self) -> ExecutionConfig:
        """PyFlink's ExecutionConfig, and the job's Configuration (``set``/``get`` by key)."""
        return self._config

    def configure(self, configuration: Configuration | dict) -> "StreamExecutionEnvironment":
        self._config.update(configuration)
        return self

    def set_parallelism(self, parallelism: int) -> "StreamExecutionEnvironment":
        if not isinstance(parallelism, int) or parallelism < 1:
            raise ValueError(f"parallelism must be a positive int, got {parallelism!r}")
        self._config.set(Options.PARALLELISM, parallelism)
        return self

    def get_parallelism(self) -> int:
        return self._config.get_int(Options.PARALLELISM)

    def set_max_parallelism(self, max_parallelism: int) -> "StreamExecutionEnvironment":
        check_max_parallelism(max_parallelism, 1)
        self._config.set(Options.MAX_PARALLELISM, max_parallelism)
        return self

    def get_max_parallelism(self) -> int:
        return self._config.get_int(Options.MAX_PARALLELISM, DEFAULT_MAX_PARALLELISM)

    def set_buffer_timeout(self, timeout_millis: int) -> "StreamExecutionEnvironment":
        """Longest time a record waits in a partly filled network batch (Flink's buffer timeout)."""
        if timeout_millis < 0:
            raise ValueError("buffer timeout must be >= 0 ms")
        self._config.set(Options.BUFFER_TIMEOUT, timeout_millis)
        return self

    def get_buffer_timeout(self) -> int:
        return self._config.get_int(Options.BUFFER_TIMEOUT)

    # -- fault tolerance ------------------------------------------------------
    def enable_checkpointing(self, interval: Any, mode: CheckpointingMode | None = None) -> "StreamExecutionEnvironment":
        """Take a checkpoint every ``interval`` ms (int or timedelta); EXACTLY_ONCE unless ``mode`` says otherwise."""
        config = self.get_checkpoint_config()
        config.set_checkpoint_interval(interval)
        if mode is not None:
            config.set_checkpointing_mode(mode)
        return self

    def get_checkpoint_config(self) -> CheckpointConfig:
        return CheckpointConfig(self._config)

    def get_checkpoint_interval(self) -> int:
        return self.get_checkpoint_config().get_checkpoint_interval()

    def get_checkpointing_mode(self) -> CheckpointingMode:
        return self.get_checkpoint_config().get_checkpointing_mode()

    def set_state_backend(self, state_backend: "StateBackend | str") -> "StreamExecutionEnvironment":
        """``HashMapStateBackend()`` (default), ``EmbeddedRocksDBStateBackend(...)``, or ``"hashmap"`` / ``"rocksdb"``."""
        for key, value in backends.state_backend(state_backend).settings().items():
            self._config.set(key, value)
        return self

    def enable_changelog_state_backend(self, enabled: bool) -> "StreamExecutionEnvironment":
        """PyFlink's flag for Flink's changelog state backend, a performance option of Flink's
        checkpoints. It is recorded (``is_changelog_state_backend_enabled`` gives it back) and has
        no effect here: the HashMap backend's snapshots are copy-on-write and asynchronous, RocksDB's
        incremental (``get_checkpoint_config().set_incremental(True)``)."""
        self._changelog_state_backend = bool(enabled)
        return self

    def is_changelog_state_backend_enabled(self) -> bool | None:
        """What ``enable_changelog_state_backend`` set; None if it was never called (as PyFlink)."""
        return self._changelog_state_backend

    def set_default_savepoint_directory(self, directory: str) -> "StreamExecutionEnvironment":
        """Where savepoints go when the trigger names no directory."""
        self._config.set(Options.SAVEPOINT_DIR, str(directory))
        return self

    def get_default_savepoint_directory(self) -> str | None:
        return self._config.get_string(Options.SAVEPOINT_DIR) or None

    def set_stream_time_characteristic(self, characteristic: TimeCharacteristic) -> "StreamExecutionEnvironment":
        """Flink 1.x's call (deprecated since 1.12, gone in 2.0). As there, it only sets the periodic
        watermark interval: ``ProcessingTime`` turns periodic watermarks off, the others set 200 ms.
        Windows name their time domain (``TumblingEventTimeWindows``, ``TumblingProcessingTimeWindows``)."""
        if not isinstance(characteristic, TimeCharacteristic):
            raise TypeError(f"set_stream_time_characteristic needs a TimeCharacteristic "
                            f"(TimeCharacteristic.EventTime, ...), got {characteristic!r}")
        self._time_characteristic = characteristic
        self._config.set_auto_watermark_interval(0 if characteristic is TimeCharacteristic.ProcessingTime else 200)
        return self

    def get_stream_time_characteristic(self) -> TimeCharacteristic:
        return self._time_characteristic

    def is_chaining_enabled(self) -> bool:
        return True  # forward edges are always chained

    def close(self) -> None:
        """Nothing to release: each job's Spark stage and job manager end with it."""

    __getattr__ = unsupported.lookup("StreamExecutionEnvironment", unsupported.ENVIRONMENT)

    def get_state_backend(self) -> str:
        return str(self._config.get(Options.STATE_BACKEND))

    def set_restart_strategy(self, restart_strategy_configuration: RestartStrategyConfiguration) -> "StreamExecutionEnvironment":
        if not isinstance(restart_strategy_configuration, RestartStrategyConfiguration):
            raise TypeError(f"set_restart_strategy needs RestartStrategies.<...>(), got {restart_strategy_configuration!r}")
        for key, value in restart_strategy_configuration.settings().items():
            self._config.set(key, value)
        return self

    # -- sources ------------------------------------------------------------
    def from_source(
        self, source: Any, watermark_strategy: Any = None, source_name: str | None = None, type_info: Any = None,
        *, name: str | None = None,
    ) -> DataStream:
        """``type_info`` declares the records' type (what ``print()`` shows depends on it); without
        it a source that knows its type gives it (NumberSequenceSource: ``Types.LONG()``)."""
        if not hasattr(source, "create_reader"):
            raise TypeError(f"from_source needs a source from streamjob.runtime.connectors, got {source!r}")
        from .watermarks import WatermarkStrategy

        if watermark_strategy is not None and not isinstance(watermark_strategy, WatermarkStrategy):
            raise TypeError("from_source: the second argument is a WatermarkStrategy (e.g. "
                            f"WatermarkStrategy.no_watermarks()), got {watermark_strategy!r}")
        if source_name is not None and not isinstance(source_name, str):
            raise TypeError(f"from_source: the third argument is the source's name, got {source_name!r}")
        label = name or source_name or getattr(source, "default_name", type(source).__name__)
        stream = DataStream(self, self._add(Transformation(T.SOURCE, label, [], fn=source)),
                            type_info if type_info is not None else getattr(source, "produced_type", None))
        wire = getattr(source, "wire_side_outputs", None)
        if wire is not None:  # e.g. a KafkaSource's dead-letter topic: a sink on one of its side outputs
            wire(stream)
        if watermark_strategy is not None and (watermark_strategy.kind != WatermarkStrategy.NONE
                                               or watermark_strategy.assigner is not None):
            # Flink generates watermarks inside the source operator; chained right after it, the same.
            stream = stream.assign_timestamps_and_watermarks(watermark_strategy)
        return stream

    def add_source(self, source_func: Any, source_name: str = "Custom Source", type_info: Any = None) -> DataStream:
        """PyFlink's older way to add a source: works with a source of streamjob.runtime.connectors."""
        if not hasattr(source_func, "create_reader"):
            raise unsupported.PyFlinkNotSupported(
                f"StreamExecutionEnvironment.add_source({type(source_func).__name__})",
                "only sources of streamjob.runtime.connectors run here (DataGenSource, FileSource, ...), with "
                "env.from_source(source, watermark_strategy, name) or env.add_source(source)")
        return self.from_source(source_func, None, source_name, type_info)

    def read_text_file(self, file_path: str, charset_name: str = "UTF-8") -> DataStream:
        """The lines of a text file (or of every file of a directory), as strings."""
        from ..connectors.file_system import FileSource, StreamFormat

        source = FileSource.for_record_stream_format(StreamFormat.text_line_format(charset_name), file_path).build()
        return self.from_source(source, None, f"Read text file {file_path}")

    def from_collection(self, collection: Iterable[Any], type_info: Any = None) -> DataStream:
        """A non-parallel source of the elements, in order, as PyFlink's (a source of parallelism 1;
        the operators after it run at the job's parallelism, fed round-robin, as Flink rebalances where
        the parallelism changes). With a row type (``Types.ROW`` / ``Types.ROW_NAMED``) the elements
        (tuples, lists, dicts, Rows, or objects with the fields as attributes) become Rows with its
        field names, as in PyFlink. ``.set_parallelism(n)`` on it still splits the elements among n
        subtasks (Flink refuses that)."""
        from ..connectors.collection import CollectionSource
        from .types import RowTypeInfo, as_row

        items = list(collection)
        if isinstance(type_info, RowTypeInfo):
            items = [as_row(x, type_info, i) for i, x in enumerate(items)]
        return self.from_source(CollectionSource(items), type_info=type_info, name="Collection").set_parallelism(1)

    # -- execution ----------------------------------------------------------
    def execute(self, job_name: str | None = None) -> JobExecutionResult:
        execute_job = _executor()
        graph = self._build(job_name)
        return execute_job(graph, self._resolved(graph), show_progress=execution_context.show_progress,
                           summary=execution_context.show_summary)

    def execute_async(self, job_name: str | None = None) -> JobClient:
        """Start the job and return at once; the job runs in a background thread of this process."""
        execute_job = _executor()
        graph = self._build(job_name)
        client = JobClient(uuid.uuid4().hex, graph.job_name)

        def run() -> None:
            try:
                client._result = execute_job(graph, self._resolved(graph), show_progress=False, job_id=client.job_id,
                                             client=client)
            except BaseException as e:  # noqa: BLE001 - handed to get_job_execution_result
                client._error = e
            finally:
                client._finished.set()
                client._attached.set()

        threading.Thread(target=run, name=f"job-{graph.job_name}", daemon=True).start()
        execution_context.clients.append(client)
        return client

    def _resolved(self, graph: Any) -> Configuration:
        """The configuration with the runtime mode the graph resolved (AUTOMATIC -> STREAMING/BATCH)."""
        config = Configuration(self._config.to_dict())
        config.set(Options.RUNTIME_MODE, graph.config[Options.RUNTIME_MODE])
        return config

    def set_runtime_mode(self, execution_mode: "RuntimeExecutionMode | str") -> "StreamExecutionEnvironment":
        """BATCH: bounded input, no checkpoints; watermarks jump to the end of input, where every
        window and timer fires, and rolling aggregations emit only their final value per key.
        AUTOMATIC: BATCH if every source is bounded."""
        name = execution_mode.name if isinstance(execution_mode, RuntimeExecutionMode) else str(execution_mode).upper()
        if name not in RuntimeExecutionMode.__members__:
            raise ValueError(f"set_runtime_mode needs RuntimeExecutionMode.STREAMING, BATCH or AUTOMATIC, "
                             f"got {execution_mode!r}")
        self._config.set(Options.RUNTIME_MODE, name)
        return self

    def _build(self, job_name: str | None) -> Any:
        """The job graph of everything defined since the last ``execute``, as Flink does: each
        ``execute()`` runs the operators added since the previous one (plus the streams they read,
        which may come from before it), so one program can run several jobs in turn."""
        from ..graph.job_graph import build_job_graph

        if not self._transformations:
            if self._executed:
                raise ValueError("no operators were defined since the last execute(): add a source and a sink "
                                 "before calling execute() again")
            raise ValueError("the job has no operators: add a source with env.from_source(...) and a sink")
        transformations = _with_inputs(self._transformations)
        name = job_name or os.path.splitext(os.path.basename(_main_file() or "streamjob"))[0]
        graph = _with_configured_overrides(build_job_graph(transformations, self._config, name), self._config)
        self._executed = True
        self._transformations = []
        self._uids = {}  # uids are unique per job; the next job may reuse them
        return graph

    def get_execution_plan(self) -> str:
        from ..graph.job_graph import build_job_graph

        return _with_configured_overrides(build_job_graph(self._transformations, self._config, "plan"),
                                          self._config).describe()

    # -- internals ----------------------------------------------------------
    def _add(self, t: Transformation) -> Transformation:
        self._transformations.append(t)
        return t

    def _claim_uid(self, uid: str, t: Transformation) -> None:
        if not isinstance(uid, str) or not uid:
            raise ValueError(f"uid must be a non-empty string, got {uid!r}")
        owner = self._uids.get(uid)
        if owner is not None and owner is not t:
            raise ValueError(f"uid {uid!r} is already used by operator {owner.name!r}; uids must be unique in a job")
        if t.uid is not None and t.uid != uid:
            self._uids.pop(t.uid, None)
        t.uid = uid
        self._uids[uid] = t


def _with_configured_overrides(graph: Any, config: Configuration) -> Any:
    """The graph with ``pipeline.jobvertex-parallelism-overrides`` applied as a rescale applies its request:
    each key sets its chain (the key of a job vertex the REST API reports, as the autoscaler names it)."""
    from ..graph.job_graph import JobDefinitionError

    overrides = config.get_parallelism_overrides()
    if not overrides:
        return graph
    try:
        return graph.rescaled(None, graph.chain_overrides(overrides))
    except JobDefinitionError as e:
        raise JobDefinitionError(f"configuration {Options.PARALLELISM_OVERRIDES}: {e}") from None


def _with_inputs(transformations: list[Transformation]) -> list[Transformation]:
    """``transformations`` and every transformation they read from, in creation order."""
    seen: dict[int, Transformation] = {}
    stack = list(transformations)
    while stack:
        t = stack.pop()
        if t.id not in seen:
            seen[t.id] = t
            stack.extend(t.inputs)
    return sorted(seen.values(), key=lambda t: t.id)


def _main_file() -> str | None:
    import __main__

    return getattr(__main__, "__file__", None)


EXECUTORS = "streamjob.executors"  # the entry point group (pyproject.toml) of what runs jobs


def _executor() -> Any:
    """What runs a job, found as Flink finds its PipelineExecutor (a service, here a package entry point):
    the API does not know where it runs, and never imports the cluster package."""
    from importlib.metadata import entry_points

    found = sorted(entry_points(group=EXECUTORS), key=lambda ep: ep.name)
    if not found:
        raise RuntimeError(f"no job executor is registered (entry point group {EXECUTORS!r}): streamjob is not "
                           f"installed; run `pip install -e .` in its checkout")
    return found[0].load()
