import os
import sys

import pytest

from streamjob.runtime.api.environment import execution_context

SPARK_SLOTS = 4

# The S3 tests' credentials come through the standard AWS variables. Set before the Spark JVM
# starts, so its Python workers inherit them as a deployment's tasks would from their pod.
for _k, _v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
               "AWS_DEFAULT_REGION": "us-east-1"}.items():
    os.environ.setdefault(_k, _v)

# A session cluster the developer has running (streamjob cluster start) is never what a test's runs use;
# tests/test_session_cluster.py starts its own, in a cache folder of its own.
os.environ["STREAMJOB_SESSION"] = "off"

# Jobs the tests run register in a registry of the test run's own (streamjob list), never the user's.
if not os.environ.get("STREAMJOB_STATE_DIR"):
    import atexit
    import shutil
    import tempfile

    os.environ["STREAMJOB_STATE_DIR"] = os.environ["_STREAMJOB_TEST_STATE_DIR"] = \
        tempfile.mkdtemp(prefix="streamjob-test-state-")
    atexit.register(shutil.rmtree, os.environ["STREAMJOB_STATE_DIR"], ignore_errors=True)
# pytest-xdist workers inherit the controller's environment: each gets a registry of its own inside
# the controller's (removed with it), so one worker's jobs never answer another's lookups by name.
if os.environ.get("PYTEST_XDIST_WORKER") and \
        os.environ.get("STREAMJOB_STATE_DIR") == os.environ.get("_STREAMJOB_TEST_STATE_DIR"):
    os.environ["STREAMJOB_STATE_DIR"] = os.path.join(os.environ["_STREAMJOB_TEST_STATE_DIR"],
                                                     os.environ["PYTEST_XDIST_WORKER"])
    os.makedirs(os.environ["STREAMJOB_STATE_DIR"], mode=0o700, exist_ok=True)


# The run's longest files, longest first. pytest-xdist (-n 2 --dist loadfile) hands whole files to its
# workers in collection order (--no-loadscope-reorder: its default order is by test count, which put
# the 4-minute e2e suite, three tests, among the last); the longest first and the many short ones
# filling in at the end keep one worker from finishing minutes before the other
# (longest-processing-time-first scheduling). Figures: a whole run's --junitxml, summed per file; a
# file missing here only runs later.
LONGEST_FIRST = (
    "test_e2e_suite.py", "test_checkpointing.py", "test_state_processor.py", "test_state_processor_writer.py",
    "test_kafka_sink.py", "test_jvm_failover.py", "test_operator_e2e.py", "test_kafka_source.py",
    "test_stop_resume.py", "test_cli_run.py", "test_damaged_checkpoints.py", "test_rocksdb_checkpoints.py",
    "test_event_time.py", "test_unaligned_checkpoints.py", "test_s3.py", "test_image.py",
)


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: within a file, as written


def start_with_rest(env, name: str, running_timeout: float = 120):
    """``env.execute_async(name)`` once running, and its REST API's URL (the server binds as the job starts)."""
    import time

    client = env.execute_async(name)
    assert client.wait_until_running(running_timeout)
    jm = client.job_manager
    deadline = time.monotonic() + 60
    while (jm.rest is None or jm.rest.url is None) and time.monotonic() < deadline:
        time.sleep(0.05)
    return client, jm.rest.url


@pytest.fixture(scope="session")
def spark_slots():
    """One real local Spark for the whole run (JVM start is the slow part), with 4 slots."""
    from streamjob.runtime.cluster.spark import SparkDeployment

    deployment = SparkDeployment({"spark.master": f"local[{SPARK_SLOTS}]"}, SPARK_SLOTS, "streamjob-tests")
    yield SPARK_SLOTS
    deployment.spark_context.stop()


_previous_test = [""]


def _report_running_spark_jobs(test: str) -> None:
    """Spark jobs still running in the session's local Spark when a test starts hold slots: a barrier
    stage of this test may then wait for them without end (seen once in CI: a loop job that ran no task
    in 300 s). Said in the test's captured output, with the test that ran before it on this worker."""
    context = sys.modules.get("pyspark.core.context")
    sc = context.SparkContext._active_spark_context if context is not None else None
    if sc is None:
        return
    try:
        active = list(sc.statusTracker().getActiveJobsIds())
    except Exception:  # noqa: BLE001 - the session's JVM is gone (a test killed it): nothing holds slots
        return
    if active:
        print(f"Spark jobs {active} were running when {test} started (the test before it on this worker: "
              f"{_previous_test[0] or 'none'})", file=sys.stderr)


@pytest.fixture(autouse=True)
def _fresh_execution_context(request):
    _report_running_spark_jobs(request.node.nodeid)
    _previous_test[0] = request.node.nodeid
    execution_context.reset()
    execution_context.show_progress = False
    yield
    # A job of execute_async that its test left running (the test failed before it ended it) would hold
    # the session Spark's slots for good, and every later job would wait for them: canceled here.
    left = [c for c in execution_context.clients if not c._finished.is_set()]
    for client in left:
        client.cancel()
    for client in left:
        client._finished.wait(60)
    execution_context.reset()


def run_cli(*args, env=None, timeout=180):
    import subprocess

    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "streamjob.runtime.cli", *args],
        capture_output=True, text=True, timeout=timeout, env=full_env,
    )


# A real Apache Kafka broker (KRaft, one node) on 127.0.0.1. Its jars come from Maven Central through
# mvn (cached in ~/.cache/streamjob); if they cannot be fetched the fixture errors with the reason:
# a Kafka test never skips and never runs against a stand-in.
@pytest.fixture(scope="session")
def kafka_broker():
    """One broker for the whole run; tests share it, so each uses topic names of its own."""
    from streamjob.runtime.connectors.kafka.broker import KafkaBroker

    broker = KafkaBroker()
    broker.start()
    yield broker
    broker.close()


@pytest.fixture
def kafka_broker_private():
    """A broker of the test's own, for tests that stop, restart or kill it."""
    from streamjob.runtime.connectors.kafka.broker import KafkaBroker

    broker = KafkaBroker()
    broker.start()
    yield broker
    broker.close()

