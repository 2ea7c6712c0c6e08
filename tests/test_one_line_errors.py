"""Errors a user meets, each as one line naming its cause (issue 30): storage that cannot be written,
librdkafka's connection errors, Spark's stage failures."""

from __future__ import annotations

import pytest

from streamjob.runtime.checkpoint.storage import CheckpointStorage, SavepointTarget, StorageWriteError
from streamjob.runtime.task.checkpointing import SnapshotJob, SnapshotWriter


# -- checkpoint storage and savepoints that cannot be written ----------------------------------------------

def test_a_state_file_that_cannot_be_written_names_checkpoint_storage_and_its_url(tmp_path):
    storage = CheckpointStorage(str(tmp_path / "chk"), "job1", inline_threshold=10)
    storage.initialize()
    (tmp_path / "chk" / "job1" / "chk-1").write_text("a file where the checkpoint's directory goes")
    with pytest.raises(StorageWriteError) as e:
        storage.write_state(1, "op-0", b"x" * 100, {})
    assert str(e.value).startswith(f"checkpoint storage file://{tmp_path}/chk: cannot write to it: "
                                   f"FileExistsError: "), e.value  # the OS's words for a file in the way
    sst = tmp_path / "local.sst"
    sst.write_bytes(b"y" * 100)
    (tmp_path / "chk" / "job1" / "shared").rmdir()
    (tmp_path / "chk" / "job1" / "shared").write_text("")
    with pytest.raises(StorageWriteError, match=r"^checkpoint storage file://.*/chk: cannot write to it"):
        storage.upload_shared(1, str(sst))


def test_checkpoint_storage_that_is_a_file_names_it_at_initialize(tmp_path):
    (tmp_path / "x").write_text("")
    with pytest.raises(StorageWriteError, match=rf"^checkpoint storage file://{tmp_path}/x: cannot write to it: "
                                                r"(NotADirectoryError|FileExistsError)"):
        CheckpointStorage(str(tmp_path / "x"), "job1").initialize()


def test_a_savepoint_state_file_that_cannot_be_written_names_the_savepoint_and_its_url(tmp_path):
    (tmp_path / "sp").write_text("")
    target = SavepointTarget(str(tmp_path / "sp" / "savepoint-1"), inline_threshold=10)
    with pytest.raises(StorageWriteError, match=rf"^savepoint file://{tmp_path}/sp/savepoint-1: cannot write to it: "
                                                r"NotADirectoryError"):
        target.write_state(1, "op-0", b"x" * 100, {})


def test_the_task_declines_with_the_storage_line_not_a_bare_os_error(tmp_path):
    def write(snap, checkpoint_id):
        raise StorageWriteError(f"checkpoint storage file://{tmp_path}: cannot write to it: NotADirectoryError: x")

    writer = SnapshotWriter(write)
    writer.submit(SnapshotJob(task=None, checkpoint_id=1, snapshots=[object()], sync_ms=0.0, alignment_ms=0.0))
    assert writer.wait_idle(5)
    writer.close()
    assert writer.results[0].error == f"checkpoint storage file://{tmp_path}: cannot write to it: NotADirectoryError: x"


# -- librdkafka's log: each line at most once per 10 s, all of it with -v ------------------------------------

def test_repeats_of_a_librdkafka_line_pass_once_per_period_and_the_next_says_how_many_were_held():
    import logging

    from streamjob.runtime.connectors.kafka.logs import RepeatFilter, repeat_key

    now = [0.0]
    f = RepeatFilter(every=10.0, clock=lambda: now[0], verbose=lambda: False)

    def record(name: str, after: int) -> logging.LogRecord:
        text = (f"[thrd:127.0.0.1:9/bootstrap]: 127.0.0.1:9/bootstrap: Connect to ipv4#127.0.0.1:9 failed: "
                f"Connection refused (after {after}ms in state CONNECT)")
        return logging.LogRecord("k", logging.ERROR, "", 0, "%s [%s] %s", ("FAIL", name, text), None)

    assert repeat_key(record("rdkafka#producer-1", 0).getMessage()) == \
        repeat_key(record("rdkafka#producer-2", 17).getMessage())
    passed = []
    for i in range(300):  # a reconnect every 50 ms for 15 s, from two clients
        now[0] = i * 0.05
        r = record(f"rdkafka#producer-{1 + i % 2}", i % 3)
        if f.filter(r):
            passed.append(r.getMessage())
    assert len(passed) == 2, passed
    assert passed[1].endswith("(199 more like it not shown)"), passed[1]
    other = logging.LogRecord("k", logging.ERROR, "", 0, "%s [%s] %s", ("FAIL", "x", "another error"), None)
    assert f.filter(other)  # another line is news
    retrying = logging.LogRecord("k", logging.WARNING, "", 0, "%s [%s] %s", ("GETPID", "x", "[thrd:main]: Failed to "
                                 "acquire transactional PID from broker TxnCoordinator/1: Broker: Not coordinator: "
                                 "retrying"), None)
    assert not f.filter(retrying)  # the client's own retry of a transient answer: only with -v
    assert RepeatFilter(verbose=lambda: True).filter(record("p", 0)) and \
        RepeatFilter(verbose=lambda: True).filter(record("p", 0))


def test_a_client_against_an_unreachable_address_logs_the_connection_error_once(caplog):
    import logging
    import socket

    from confluent_kafka import KafkaException, Producer

    from streamjob.runtime.connectors.kafka.logs import NAME, with_logger

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        bootstrap = f"127.0.0.1:{s.getsockname()[1]}"  # nothing listens there
    seen: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = seen.append  # type: ignore[method-assign]
    logging.getLogger(NAME).addHandler(handler)
    try:
        producer = Producer(with_logger({"bootstrap.servers": bootstrap}))
        with pytest.raises(KafkaException):
            producer.list_topics(timeout=4)
        for _ in range(20):  # librdkafka retries every 50-1000 ms meanwhile
            producer.poll(0.1)
        del producer
    finally:
        logging.getLogger(NAME).removeHandler(handler)
    refused = [r.getMessage() for r in seen if "Connection refused" in r.getMessage()]
    assert 1 <= len(refused) <= 2, [r.getMessage() for r in seen]
    assert bootstrap in refused[0]


# -- malformed HTTP requests to the REST port ------------------------------------------------------------

def test_a_malformed_request_is_one_debug_line_without_its_bytes(caplog):
    import logging

    from aiohttp.http_exceptions import BadHttpMessage

    from streamjob.runtime.cluster.rest import _ServerLog

    log = _ServerLog(logging.getLogger("aiohttp.server"), {})
    error = BadHttpMessage("Invalid character in chunk size:\n\n    b'" + "x" * 100_000 + "'\n     ^")
    with caplog.at_level(logging.DEBUG, logger="aiohttp.server"):
        log.exception("Error handling request from %s", "10.0.0.7", exc_info=error)
        log.exception("Unhandled exception", exc_info=RuntimeError("a bug of ours"))
    first, second = caplog.records
    assert (first.levelno, first.getMessage(), first.exc_info) == \
        (logging.DEBUG, "malformed HTTP request from 10.0.0.7 answered 400: Invalid character in chunk size", None)
    assert second.levelno == logging.ERROR and second.exc_info is not None  # anything else: as aiohttp logs it


# -- task deaths only Spark saw -----------------------------------------------------------------------------

# Captured from a run whose task SIGKILLed itself before registering (STREAMJOB_TEST_FAULT=task-start:...):
# str() of the exception of the barrier stage's collect (the JVM's frames shortened).
CRASHED_BEFORE_REGISTERING = (
    "An error occurred while calling z:org.apache.spark.api.python.PythonRDD.collectAndServe.\n: "
    "org.apache.spark.SparkException: Job aborted due to stage failure: ResultStage 0 (collect at "
    "/work/wt-msg/runtime/cluster/spark.py:888) has failed the maximum allowable number of times: 1. Most recent "
    "failure reason: Stage failed because barrier task ResultTask(0, 1) finished unsuccessfully.\n"
    "org.apache.spark.SparkException: Python worker exited unexpectedly (crashed). Consider setting "
    "'spark.sql.execution.pyspark.udf.faulthandler.enabled' or'spark.python.worker.faulthandler.enabled' "
    "configuration to 'true' for the better Python traceback.\n"
    "\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator$$anonfun$1.applyOrElse(PythonRunner.scala:1136)\n"
    "\tat java.base/java.lang.Thread.run(Thread.java:840)\nCaused by: java.io.EOFException\n"
    "\tat java.base/java.io.DataInputStream.readInt(DataInputStream.java:386)\n\t... 22 more\n\n"
    "\tat org.apache.spark.scheduler.DAGScheduler.$anonfun$abortStage$3(DAGScheduler.scala:4568)\n"
    "\tat py4j.ClientServerConnection.run(ClientServerConnection.java:108)\n")
# Spark's other form (a task that is not of a barrier stage, or a Python exception before the task's own code).
LOST_TASK_WITH_PYTHON_ERROR = (
    "An error occurred while calling o87.collectAndServe.\n: org.apache.spark.SparkException: Job aborted due to "
    "stage failure: Task 2 in stage 1.0 failed 1 times, most recent failure: Lost task 2.0 in stage 1.0 (TID 5) "
    "(10.0.0.3 executor driver): org.apache.spark.api.python.PythonException: Traceback (most recent call last):\n"
    "  File \"/opt/venv/lib/python3.11/site-packages/pyspark/worker.py\", line 1899, in main\n"
    "    func, profiler, deserializer, serializer = read_command(pickleSer, infile)\n"
    "ModuleNotFoundError: No module named 'mylib'\n\n"
    "\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException(PythonRunner.scala:615)\n")


def test_a_task_death_only_spark_saw_names_the_subtask_and_what_happened():
    from streamjob.runtime.cluster.spark_errors import describe

    line = describe(Exception(CRASHED_BEFORE_REGISTERING), 2)
    assert line.startswith("subtask 2/2: its Python process died without reporting (killed"), line
    line = describe(Exception(LOST_TASK_WITH_PYTHON_ERROR), 4)
    assert line == "subtask 3/4: ModuleNotFoundError: No module named 'mylib'", line
    for text in (CRASHED_BEFORE_REGISTERING, LOST_TASK_WITH_PYTHON_ERROR,
                 "An error occurred while calling o1.collectAndServe.\n: org.apache.spark.SparkException: Job aborted "
                 "due to stage failure: ResultStage 1 (collect at /opt/venv/streamjob/runtime/cluster/spark.py:888) "
                 "has failed the maximum allowable number of times: 4.\n\tat x.y(Z.java:1)\n", ""):
        line = describe(Exception(text), 2)
        assert line and not line.startswith(":") and "spark.py" not in line and "\n" not in line, line
    assert describe(Exception("An error occurred while calling o1.collectAndServe.\n: org.apache.spark."
                              "SparkException: Job aborted due to stage failure: ResultStage 1 (collect at "
                              "/x/spark.py:888) has failed the maximum allowable number of times: 4.\n"), 2) == \
        "ResultStage 1 has failed the maximum allowable number of times: 4"


def test_a_late_python_worker_that_finds_no_executor_leaves_no_traceback(tmp_path):
    """A worker Spark started for a task it then canceled (the attempt is over) connects back to a closed
    port: PySpark's CANNOT_OPEN_SOCKET traceback. Spark fails a live task whose worker does not connect
    back itself ("Python worker failed to connect back"), so the worker's own traceback adds nothing;
    with -v it is shown."""
    import os
    import socket
    import subprocess
    import sys

    from streamjob.runtime.cluster.spark_errors import cause_of

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there any more
    env = {**os.environ, "PYTHON_WORKER_FACTORY_PORT": str(port), "PYTHON_WORKER_FACTORY_SECRET": "x"}
    env.pop("STREAMJOB_VERBOSE", None)
    worker = [sys.executable, "-m", "streamjob.runtime.cluster.pyworker"]
    r = subprocess.run(worker, capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)
    assert r.returncode == 1 and r.stderr == "", r.stderr
    r = subprocess.run(worker, capture_output=True, text=True, timeout=60, env={**env, "STREAMJOB_VERBOSE": "1"},
                       cwd=tmp_path)
    assert r.returncode == 1 and "CANNOT_OPEN_SOCKET" in r.stderr, r.stderr
    assert cause_of("Job aborted due to stage failure: ResultStage 3 (collect at /x/spark.py:888) has failed the "
                    "maximum allowable number of times: 1. Most recent failure reason: Stage failed because barrier "
                    "task ResultTask(3, 0) finished unsuccessfully.\norg.apache.spark.SparkException: Python worker "
                    "failed to connect back.\n\tat org.apache.spark.api.python.PythonWorkerFactory.createSimpleWorker"
                    "(PythonWorkerFactory.scala:253)\n").startswith("its Python worker did not connect back")
    assert cause_of("Job aborted due to stage failure: ResultStage 3 (collect at /x/spark.py:888) has failed the "
                    "maximum allowable number of times: 1. Most recent failure reason: Stage failed because barrier "
                    "task ResultTask(3, 0) finished unsuccessfully.\norg.apache.spark.SparkException: Something "
                    "else went wrong.\n\tat a.b(C.scala:1)\n") == "Something else went wrong"


def test_checkpoint_storage_without_permission_names_it(tmp_path, monkeypatch):
    """As root, a directory without write permission cannot be made here: the store's refusal is simulated."""
    storage = CheckpointStorage(str(tmp_path / "ro"), "job1")

    def refuse(path, exist_ok=False):
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(storage.fs, "makedirs", refuse)
    with pytest.raises(StorageWriteError, match=rf"^checkpoint storage file://{tmp_path}/ro: cannot write to it: "
                                                r"PermissionError: \[Errno 13\] Permission denied"):
        storage.initialize()


def test_verbose_reaches_the_tasks_on_executors_of_their_own():
    from streamjob.runtime.cluster.pod import Addresses, spark_conf
    from streamjob.runtime.config import Configuration

    loopback = Addresses("127.0.0.1", "127.0.0.1")
    assert spark_conf(Configuration(), {"STREAMJOB_VERBOSE": "1"}, 1, loopback)[
        "spark.executorEnv.STREAMJOB_VERBOSE"] == "1"
    assert "spark.executorEnv.STREAMJOB_VERBOSE" not in spark_conf(Configuration(), {}, 1, loopback)


def test_py4j_s_traceback_of_a_call_to_a_dead_jvm_stays_off_the_terminal(spark_slots, caplog):
    """py4j logs a call to a JVM that died through the root logger (``logging.exception``), which with
    no handler printed its traceback to stderr (seen in a run of test_jvm_failover.py's SIGTERM case).
    Once a Spark JVM was launched, such records are dropped before any handler sees them; the root
    logger's other records still pass."""
    import logging
    import sys

    import py4j.java_gateway

    from streamjob.runtime.cluster import spark

    root = logging.getLogger()
    assert spark._PY4J_ROOT_RECORDS in root.filters  # installed by the session's real JVM launch

    def record(pathname: str) -> logging.LogRecord:
        try:
            raise ConnectionResetError(104, "Connection reset by peer")
        except ConnectionResetError:
            return root.makeRecord("root", logging.ERROR, pathname, 1060, "Exception while sending command.",
                                   (), sys.exc_info())

    with caplog.at_level(logging.INFO):
        root.handle(record(py4j.java_gateway.__file__))
        assert not caplog.records
        root.handle(record(__file__))
        assert [r.getMessage() for r in caplog.records] == ["Exception while sending command."]
