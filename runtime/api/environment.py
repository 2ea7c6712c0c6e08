"""StreamExecutionEnvironment: where a job is defined and from where it is executed."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Iterable

from ..config import Configuration, Options
from ..state.keygroups import DEFAULT_MAX_PARALLELISM, check_max_parallelism
from . import transformations as T
from .datastream import DataStream
from .transformations import Transformation


@dataclass
class JobExecutionResult:
    job_id: str
    job_name: str
    net_runtime_ms: int
    operators: dict[str, dict[str, int]]
    # From the first task starting to process to the last one finishing:
    # the net runtime less deployment (Spark stage start, address exchange).
    running_time_ms: int | None = None

    def get_job_id(self) -> str:
        return self.job_id

    def get_net_runtime(self) -> int:
        return self.net_runtime_ms


class _ExecutionContext:
    """Defaults set by ``streamjob run`` (CLI flags) for environments the job creates."""

    def __init__(self) -> None:
        self.configuration = Configuration()
        self.environments: list["StreamExecutionEnvironment"] = []
        self.show_progress: bool | None = None

    def reset(self) -> None:
        self.__init__()


execution_context = _ExecutionContext()


class StreamExecutionEnvironment:
    def __init__(self, configuration: Configuration | None = None):
        self._config = execution_context.configuration.copy()
        if configuration is not None:
            self._config.update(configuration)
        self._transformations: list[Transformation] = []
        self._uids: dict[str, Transformation] = {}
        self._executed = False
        execution_context.environments.append(self)

    @staticmethod
    def get_execution_environment(configuration: Configuration | None = None) -> "StreamExecutionEnvironment":
        return StreamExecutionEnvironment(configuration)

    # -- configuration ------------------------------------------------------
    def get_config(self) -> Configuration:
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

    def set_buffer_timeout(self, timeout_ms: int) -> "StreamExecutionEnvironment":
        """Longest time a record waits in a partly filled network batch (Flink's buffer timeout)."""
        if timeout_ms < 0:
            raise ValueError("buffer timeout must be >= 0 ms")
        self._config.set(Options.BUFFER_TIMEOUT, timeout_ms)
        return self

    def get_buffer_timeout(self) -> int:
        return self._config.get_int(Options.BUFFER_TIMEOUT)

    # -- sources ------------------------------------------------------------
    def from_source(
        self, source: Any, watermark_strategy: Any = None, source_name: str | None = None, name: str | None = None
    ) -> DataStream:
        if not hasattr(source, "create_reader"):
            raise TypeError(f"from_source needs a source from streamjob.runtime.connectors, got {source!r}")
        label = name or source_name or getattr(source, "default_name", type(source).__name__)
        return DataStream(self, self._add(Transformation(T.SOURCE, label, [], fn=source)))

    def from_collection(self, collection: Iterable[Any], type_info: Any = None) -> DataStream:
        from ..connectors.collection import CollectionSource

        return self.from_source(CollectionSource(list(collection)), name="Collection")

    # -- execution ----------------------------------------------------------
    def execute(self, job_name: str | None = None) -> JobExecutionResult:
        from ..cluster.executor import execute_job  # lazily: the API does not know where it runs
        from ..graph.job_graph import build_job_graph

        if self._executed:
            raise RuntimeError("this environment was already executed; build a new one for another job")
        if not self._transformations:
            raise ValueError("the job has no operators: add a source with env.from_source(...) and a sink")
        self._executed = True
        name = job_name or os.path.splitext(os.path.basename(_main_file() or "streamjob"))[0]
        graph = build_job_graph(self._transformations, self._config, name)
        return execute_job(graph, self._config, show_progress=execution_context.show_progress)

    def get_execution_plan(self) -> str:
        from ..graph.job_graph import build_job_graph

        return build_job_graph(self._transformations, self._config, "plan").describe()

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


def _main_file() -> str | None:
    import __main__

    return getattr(__main__, "__file__", None)
