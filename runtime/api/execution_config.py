"""``env.get_config()``: PyFlink's ``ExecutionConfig`` over the job's ``Configuration``.

PyFlink programs call ExecutionConfig methods on it (``set_auto_watermark_interval``,
``set_global_job_parameters``, ...); streamjob's own code and older programs use it as the
job's Configuration (``set``/``get`` by key). One object does both: the ExecutionConfig calls
are spellings of configuration keys, so nothing is kept twice. Calls streamjob cannot honour
fail naming themselves (``unsupported``), never silently.
"""

from __future__ import annotations

from typing import Any

from ..config import Configuration, Options
from . import unsupported

GLOBAL_JOB_PARAMETERS = "pipeline.global-job-parameters"  # Flink's option: a map, read by get_job_parameter

_PICKLED = ("records are Python objects, pickled (dict records columnar as Arrow): there are no Java serializers "
            "or type registrations; remove the call")
_OBJECT_REUSE = ("chained operators here always hand the same Python object on (no defensive copies, as Flink with "
                 "object reuse enabled); there is no switch: copy a record before changing it in place")
_NO_JAVA = "a Java-only setting with no counterpart in streamjob's Python runtime; remove the call"

EXECUTION_CONFIG: dict[str, str] = {
    "enable_closure_cleaner": _NO_JAVA,
    "disable_closure_cleaner": _NO_JAVA,
    "is_closure_cleaner_enabled": _NO_JAVA,
    "set_latency_tracking_interval": ("latency markers are not implemented; watermarks and records in/out are the "
                                      "metrics (REST API, /metrics)"),
    "get_latency_tracking_interval": "latency markers are not implemented",
    "set_task_cancellation_interval": _NO_JAVA,
    "get_task_cancellation_interval": _NO_JAVA,
    "set_task_cancellation_timeout": _NO_JAVA,
    "get_task_cancellation_timeout": _NO_JAVA,
    "set_restart_strategy": "use env.set_restart_strategy(RestartStrategies...)",
    "get_restart_strategy": "the restart strategy is in the configuration: env.get_config() (restart-strategy.*)",
    "set_execution_mode": "use env.set_runtime_mode(RuntimeExecutionMode...)",
    "get_execution_mode": "use env.set_runtime_mode(RuntimeExecutionMode...)",
    "set_default_input_dependency_constraint": _NO_JAVA,
    "get_default_input_dependency_constraint": _NO_JAVA,
    "enable_force_kryo": _PICKLED,
    "disable_force_kryo": _PICKLED,
    "is_force_kryo_enabled": _PICKLED,
    "enable_generic_types": _PICKLED,
    "disable_generic_types": _PICKLED,
    "has_generic_types_disabled": _PICKLED,
    "enable_force_avro": _PICKLED,
    "disable_force_avro": _PICKLED,
    "is_force_avro_enabled": _PICKLED,
    "enable_auto_generated_uids": "operators without a uid are matched by their place in the program; remove the call",
    "disable_auto_generated_uids": ("operators without a uid are matched by their place in the program; give each "
                                    "stateful operator .uid(name) instead"),
    "has_auto_generated_uids_enabled": "operators without a uid are matched by their place in the program",
    "disable_object_reuse": _OBJECT_REUSE,
    "add_default_kryo_serializer": _PICKLED,
    "add_default_kryo_serializer_class": _PICKLED,
    "register_type_with_kryo_serializer": _PICKLED,
    "register_type_with_kryo_serializer_class": _PICKLED,
    "register_pojo_type": _PICKLED,
    "register_kryo_type": _PICKLED,
    "get_registered_types_with_kryo_serializer_classes": _PICKLED,
    "get_default_kryo_serializer_classes": _PICKLED,
    "get_registered_kryo_types": _PICKLED,
    "get_registered_pojo_types": _PICKLED,
    "is_use_snapshot_compression": ("snapshot compression is not configurable: use "
                                    "get_checkpoint_config().set_incremental(True) with RocksDB for smaller checkpoints"),
    "set_use_snapshot_compression": "snapshot compression is not configurable; remove the call",
}


def job_parameters(value: Any) -> dict[str, str]:
    """The global job parameters as set by the API (a dict) or in a job.conf / ``--conf`` line in
    Flink's map syntax (``pipeline.global-job-parameters=k1:v1,k2:v2``)."""
    if not value:
        return {}
    if isinstance(value, dict):
        return {str(k): str(v) for k, v in value.items()}
    out = {}
    for pair in str(value).split(","):
        key, sep, val = pair.partition(":")
        if not sep or not key.strip():
            raise ValueError(f"configuration {GLOBAL_JOB_PARAMETERS}: expected key:value pairs separated by commas, "
                             f"got {value!r}")
        out[key.strip()] = val.strip()
    return out


class ExecutionConfig(Configuration):
    """The job's configuration, with PyFlink's ExecutionConfig methods on top."""

    def set_auto_watermark_interval(self, interval: int) -> "ExecutionConfig":
        """Milliseconds between periodic watermarks (``pipeline.auto-watermark-interval``); 0 turns
        periodic watermarks off, as in Flink."""
        if isinstance(interval, bool) or not isinstance(interval, int) or interval < 0:
            raise ValueError(f"set_auto_watermark_interval needs milliseconds >= 0, got {interval!r}")
        self.set(Options.AUTO_WATERMARK_INTERVAL, interval)
        return self

    def get_auto_watermark_interval(self) -> int:
        return self.get_duration_ms(Options.AUTO_WATERMARK_INTERVAL)

    def set_global_job_parameters(self, global_job_parameters_dict: dict) -> "ExecutionConfig":
        """Parameters every function reads with ``runtime_context.get_job_parameter(key)``; as in
        PyFlink they replace the previous ones, and keys and values become strings."""
        if not isinstance(global_job_parameters_dict, dict):
            raise TypeError(f"set_global_job_parameters needs a dict, got {global_job_parameters_dict!r}")
        self.set(GLOBAL_JOB_PARAMETERS, {str(k): str(v) for k, v in global_job_parameters_dict.items()})
        return self

    def get_global_job_parameters(self) -> dict[str, str]:
        return job_parameters(self.get(GLOBAL_JOB_PARAMETERS))

    def enable_object_reuse(self) -> "ExecutionConfig":
        """Accepted: it is what streamjob always does (no copies between chained operators)."""
        return self

    def is_object_reuse_enabled(self) -> bool:
        return True

    def get_parallelism(self) -> int:
        return self.get_int(Options.PARALLELISM)

    def set_parallelism(self, parallelism: int) -> "ExecutionConfig":
        if isinstance(parallelism, bool) or not isinstance(parallelism, int) or parallelism < 1:
            raise ValueError(f"set_parallelism needs a positive int, got {parallelism!r}")
        self.set(Options.PARALLELISM, parallelism)
        return self

    def get_max_parallelism(self) -> int:
        return self.get_int(Options.MAX_PARALLELISM)

    def set_max_parallelism(self, max_parallelism: int) -> "ExecutionConfig":
        from ..keygroups import check_max_parallelism

        check_max_parallelism(max_parallelism, 1)
        self.set(Options.MAX_PARALLELISM, max_parallelism)
        return self

    __getattr__ = unsupported.lookup("ExecutionConfig", EXECUTION_CONFIG)


__all__ = ["ExecutionConfig", "EXECUTION_CONFIG", "GLOBAL_JOB_PARAMETERS", "job_parameters"]
