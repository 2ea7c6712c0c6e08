"""``env.get_config()`` is PyFlink's ExecutionConfig and the job's Configuration at once."""

from __future__ import annotations

import pytest

from streamjob.runtime import ExecutionConfig, PyFlinkNotSupported, StreamExecutionEnvironment
from streamjob.runtime.api.execution_config import EXECUTION_CONFIG
from streamjob.runtime.api.functions import RuntimeContext
from streamjob.runtime.config import Configuration
from streamjob.runtime.connectors import DiscardingSink
from streamjob.runtime.graph.job_graph import build_job_graph

# PyFlink's ExecutionConfig (pyflink.common, Flink 1.20)
PYFLINK_EXECUTION_CONFIG = """
    enable_closure_cleaner disable_closure_cleaner is_closure_cleaner_enabled set_auto_watermark_interval
    get_auto_watermark_interval set_latency_tracking_interval get_latency_tracking_interval get_parallelism
    set_parallelism get_max_parallelism set_max_parallelism get_task_cancellation_interval
    set_task_cancellation_interval get_task_cancellation_timeout set_task_cancellation_timeout set_execution_mode
    get_execution_mode set_default_input_dependency_constraint get_default_input_dependency_constraint
    enable_force_kryo disable_force_kryo is_force_kryo_enabled enable_generic_types disable_generic_types
    has_generic_types_disabled enable_auto_generated_uids disable_auto_generated_uids has_auto_generated_uids_enabled
    enable_force_avro disable_force_avro is_force_avro_enabled enable_object_reuse disable_object_reuse
    is_object_reuse_enabled get_global_job_parameters set_global_job_parameters add_default_kryo_serializer
    register_type_with_kryo_serializer register_pojo_type register_kryo_type
    get_registered_types_with_kryo_serializer_classes get_default_kryo_serializer_classes get_registered_kryo_types
    get_registered_pojo_types is_use_snapshot_compression set_use_snapshot_compression"""


def test_pyflink_execution_config_calls_write_the_job_configuration():
    env = StreamExecutionEnvironment.get_execution_environment()
    config = env.get_config()
    assert isinstance(config, ExecutionConfig) and isinstance(config, Configuration)
    assert env.from_collection([1]).get_execution_config() is config
    assert config.get_auto_watermark_interval() == 200  # Flink's default
    config.set_auto_watermark_interval(50).set_global_job_parameters({"threshold": 7, "mode": "fast"})
    assert config.get("pipeline.auto-watermark-interval") == 50 and config.get_int("pipeline.auto-watermark-interval") == 50
    assert config.get_global_job_parameters() == {"threshold": "7", "mode": "fast"}  # strings, as in PyFlink
    config.set("parallelism.default", 3)  # the Configuration calls keep working on the same object
    assert config.get_parallelism() == 3 == env.get_parallelism()
    with pytest.raises(ValueError, match="set_auto_watermark_interval needs milliseconds"):
        config.set_auto_watermark_interval(-1)
    # what a function sees: the job parameters, through the job graph's configuration
    env.from_collection([1]).sink_to(DiscardingSink())
    g = build_job_graph(env._transformations, env.get_config(), "t")
    ctx = RuntimeContext("Map", 0, 3, 128, job_parameters=g.config)
    assert ctx.get_job_parameter("threshold") == "7" and ctx.get_job_parameter("missing", "d") == "d"
    # ... also when set in a job.conf in Flink's map syntax
    ctx = RuntimeContext("Map", 0, 1, 128, job_parameters={"pipeline.global-job-parameters": "a:1, b:x"})
    assert ctx.get_job_parameter("b") == "x"


def test_every_pyflink_execution_config_call_runs_or_fails_naming_itself():
    config = StreamExecutionEnvironment.get_execution_environment().get_config()
    for name in PYFLINK_EXECUTION_CONFIG.split():
        if name in EXECUTION_CONFIG:
            with pytest.raises(PyFlinkNotSupported) as e:
                getattr(config, name)
            assert str(e.value).startswith(f"ExecutionConfig.{name}() is not supported by streamjob: ")
        else:
            assert callable(getattr(config, name)), name
    assert not [n for n in EXECUTION_CONFIG if n in dir(ExecutionConfig)]  # no entry hides a real method
    assert config.enable_object_reuse() is config and config.is_object_reuse_enabled()
    assert not hasattr(config, "no_such_call")
