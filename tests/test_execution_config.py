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


@pytest.mark.parametrize("key, value, message", [
    ("execution.checkpointing.mode", "SOMETIMES",
     "execution.checkpointing.mode: unknown value 'SOMETIMES'; expected one of EXACTLY_ONCE, AT_LEAST_ONCE"),
    ("execution.checkpointing.mode", "EXACTLY-ONCE", "expected one of EXACTLY_ONCE, AT_LEAST_ONCE"),
    ("execution.checkpointing.externalized-checkpoint-retention", "KEEP", "RETAIN_ON_CANCELLATION"),
    ("execution.state-recovery.claim-mode", "LEGACY", "expected one of CLAIM, NO_CLAIM"),
    ("execution.runtime-mode", "stream", "expected one of STREAMING, BATCH, AUTOMATIC"),
    ("state.backend.type", "filesystem", "expected one of hashmap, rocksdb"),
    ("restart-strategy.type", "fixed", "expected one of none, off"),
    ("execution.checkpointing.intervall", "1 s", "unknown option; did you mean execution.checkpointing.interval?"),
    ("restart-strategy.fixed-delay.attemps", "3", "did you mean restart-strategy.fixed-delay.attempts?"),
])
def test_a_value_or_key_that_is_a_typo_is_refused_naming_key_value_and_what_is_allowed(key, value, message):
    with pytest.raises(ValueError, match="configuration " + key.replace(".", r"\.")) as e:
        Configuration({key: value}).validate()
    assert message in str(e.value)


@pytest.mark.parametrize("key, value", [
    ("execution.checkpointing.mode", "at_least_once"),  # case does not matter, as in Flink
    ("restart-strategy.type", "fixed_delay"),
    ("state.backend.type", "RocksDB"),
    ("execution.checkpointing.unaligned.enabled", "true"),  # Flink 2's spelling
    ("pipeline.name", "a Flink option this runtime does not use"),
    ("my.job.threshold", "7"),  # the job's own parameter
    ("spark.executor.memory", "2g"),
])
def test_values_and_keys_that_are_not_typos_pass(key, value):
    Configuration({key: value}).validate()


def test_streamjob_run_refuses_a_typo_before_the_job_starts(tmp_path):
    from conftest import run_cli

    job = tmp_path / "job.py"
    job.write_text("from streamjob.runtime import StreamExecutionEnvironment\n"
                   "from streamjob.runtime.connectors import DiscardingSink\n"
                   "env = StreamExecutionEnvironment.get_execution_environment()\n"
                   "env.from_collection([1, 2]).sink_to(DiscardingSink())\n"
                   "env.execute('typo')\n")
    r = run_cli("run", str(job), "--no-progress", "--conf", "execution.checkpointing.mode=SOMETIMES",
                "--conf", "execution.checkpointing.interval=1s")
    assert r.returncode != 0
    assert "execution.checkpointing.mode: unknown value 'SOMETIMES'" in r.stderr + r.stdout, r.stderr[-2000:]
