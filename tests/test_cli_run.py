"""`streamjob run` as the operator's driver pods call it: --conf-file, --module, and a job that
cannot start leaving its reason in the termination message."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import run_cli
from streamjob.runtime.config import ConfigError, Configuration


def test_conf_file_lines_comments_and_errors_naming_the_line(tmp_path):
    path = tmp_path / "job.conf"
    path.write_text("# written by the operator\n\nparallelism.default = 3\nrest.address=0.0.0.0:8081\n")
    conf = Configuration.from_file(str(path))
    assert conf.get_int("parallelism.default") == 3 and conf.get("rest.address") == "0.0.0.0:8081"
    path.write_text("a=1\nthis line has no equals sign\n")
    with pytest.raises(ConfigError, match=r"job.conf, line 2: expected key=value"):
        Configuration.from_file(str(path))
    with pytest.raises(ConfigError, match="--conf-file .*missing.conf"):
        Configuration.from_file(str(tmp_path / "missing.conf"))


@pytest.mark.spark
def test_module_job_with_conf_file_and_args(tmp_path):
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "__init__.py").write_text("")
    (tmp_path / "jobs" / "echo.py").write_text(
        "import sys\n"
        "from streamjob.runtime import StreamExecutionEnvironment\n"
        "env = StreamExecutionEnvironment.get_execution_environment()\n"
        "env.from_collection(sys.argv[1:]).map(lambda s: s.upper()).print()\n"
        "env.execute('echo')\n")
    conf = tmp_path / "job.conf"
    conf.write_text("parallelism.default=2\nexecution.buffer-timeout=5\n")
    result = run_cli("run", "--module", "jobs.echo", "--conf-file", str(conf), "--no-progress",
                     "--conf", "parallelism.default=1", "--", "alpha", "beta",
                     env={"PYTHONPATH": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.split()[-2:]) == ["ALPHA", "BETA"]


@pytest.mark.parametrize("args, message", [
    (["--module", "no_such_module_here"], "no such module: no_such_module_here"),
    (["/no/such/job.py"], "no such job file: /no/such/job.py"),
])
def test_job_that_cannot_start_leaves_its_reason_for_the_operator(tmp_path, args, message):
    term = tmp_path / "termination-log"
    result = run_cli("run", *args, "--conf", f"kubernetes.termination-log={term}")
    assert result.returncode == 1 and message in result.stderr
    assert json.loads(term.read_text()) == {"state": "FAILED", "error": message, "final_savepoint": None}


def test_job_file_or_module_not_both_nor_none():
    assert run_cli("run").returncode == 2


@pytest.mark.spark
def test_environment_set_by_the_job_file_reaches_the_tasks_and_an_unchanged_one_keeps_the_prestarted_jvm(tmp_path):
    # The JVM (which the Python workers inherit their environment from) is prestarted before the job
    # file runs; a job file that sets a variable its tasks read must not get the stale JVM.
    job = tmp_path / "env_job.py"
    job.write_text(
        "import os\n"
        "from streamjob.runtime import StreamExecutionEnvironment\n"
        "if os.environ.get('SET_IN_JOB_FILE') != 'no':\n"
        "    os.environ['STREAMJOB_TEST_FROM_JOB_FILE'] = 'seen-by-the-task'\n"
        "env = StreamExecutionEnvironment.get_execution_environment()\n"
        "env.from_collection([1]).map(lambda _: os.environ.get('STREAMJOB_TEST_FROM_JOB_FILE', 'missing')).print()\n"
        "env.execute('env')\n")
    trace = tmp_path / "trace"
    result = run_cli("run", str(job), "--no-progress", env={"STREAMJOB_STARTUP_TRACE": str(trace)})
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[-1] == "seen-by-the-task"
    assert "jvm prestart discarded" in trace.read_text()

    trace.unlink()
    result = run_cli("run", str(job), "--no-progress", env={"STREAMJOB_STARTUP_TRACE": str(trace),
                                                             "SET_IN_JOB_FILE": "no"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[-1] == "missing"
    events = trace.read_text()
    # Taken unless this run writes the class-data-sharing archive (then its JVM is not prestarted).
    assert "jvm prestart taken" in events or "jvm launch" in events and "prestart" not in events


def test_user_text_is_never_read_as_markup(tmp_path):
    """Job names, operator names, exception messages and master URLs print exactly as written: rich
    markup in them ([bold], [prod], local[x]) used to be eaten."""
    job = tmp_path / "job.py"
    job.write_text(
        "from streamjob.runtime import StreamExecutionEnvironment\n"
        "from streamjob.runtime.connectors import DiscardingSink\n"
        "def parse(x):\n"
        "    if x == 3:\n"
        "        raise RuntimeError('field [bold]amount[/bold] missing in [record]')\n"
        "    return x\n"
        "env = StreamExecutionEnvironment.get_execution_environment()\n"
        "env.from_collection(list(range(10))).map(parse).name('[parse] step').sink_to(DiscardingSink())\n"
        "env.execute('[prod] totals')\n")
    r = run_cli("run", str(job), "-p", "1")
    out = r.stdout + r.stderr
    assert r.returncode != 0
    assert "field [bold]amount[/bold] missing in [record]" in out, out[-3000:]
    assert "Job '[prod] totals' failed" in out, out[-3000:]
    assert "[parse] step" in out, out[-3000:]
    # The user's frame names the job file and shows the line (cloudpickle ships it as "<dynamic-code>").
    assert f'  File "{job}", line 5, in parse\n    raise RuntimeError(' in out, out[-3000:]
    r = run_cli("run", str(job), "--master", "local[x]")
    assert r.returncode != 0 and "local[x]" in r.stdout + r.stderr, (r.stdout + r.stderr)[-3000:]


def test_no_progress_still_prints_the_summary(tmp_path):
    job = tmp_path / "job.py"
    job.write_text("from streamjob.runtime import StreamExecutionEnvironment\n"
                   "from streamjob.runtime.connectors import DiscardingSink\n"
                   "env = StreamExecutionEnvironment.get_execution_environment()\n"
                   "env.from_collection([1, 2, 3]).name('numbers').sink_to(DiscardingSink())\n"
                   "env.execute('quiet')\n")
    r = run_cli("run", str(job), "--no-progress")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "Job 'quiet' finished" in r.stderr and "numbers" in r.stderr, r.stderr[-2000:]


# -- a newcomer's typical mistakes: one line each, saying what to do, the right exit code ---------------
# No JVM is prestarted: each fails before any job runs (and a prestarted one would only be thrown away).
NO_JVM = {"STREAMJOB_PRESTART_JVM": "0"}
EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")


def test_a_misspelled_job_file_names_the_one_probably_meant(tmp_path):
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "word_count.py").write_text("")
    for typed in ("exmaples/word_count.py", "examples/wordcount.py", str(tmp_path / "exampels" / "word_cont.py")):
        r = subprocess.run([sys.executable, "-m", "streamjob.runtime.cli", "run", typed], capture_output=True,
                           text=True, timeout=60, cwd=tmp_path, env={**os.environ, **NO_JVM})
        meant = os.path.join(str(tmp_path) if typed.startswith("/") else "", "examples", "word_count.py")
        assert r.returncode == 1 and r.stderr.strip() == \
            f"error: no such job file: {typed} (did you mean {meant}?)", r.stderr
    r = run_cli("run", str(tmp_path / "nothing" / "alike.py"), env=NO_JVM)
    assert r.returncode == 1 and r.stderr.strip() == f"error: no such job file: {tmp_path}/nothing/alike.py"


def test_an_unknown_option_after_the_job_file_says_job_arguments_go_after_the_double_dash(tmp_path):
    job = os.path.join(EXAMPLES, "word_count.py")
    r = run_cli("run", job, "-p", "2", "--input", "in.txt", env=NO_JVM)
    assert r.returncode == 2 and "Error: No such option '--input' of streamjob run: the job's own arguments go " \
        "after `--` (streamjob run JOB_FILE [OPTIONS] -- --input ...)." in r.stderr, r.stderr
    r = run_cli("run", job, "--paralelism", "2", env=NO_JVM)  # a typo of ours: click's suggestion, no hint
    assert r.returncode == 2 and "Did you mean '--parallelism'?" in r.stderr and "`--`" not in r.stderr, r.stderr


def test_from_savepoint_with_a_path_that_is_no_savepoint_says_what_to_give(tmp_path):
    job = os.path.join(EXAMPLES, "word_count.py")
    (tmp_path / "empty").mkdir()
    cases = [(job, 1, "a file, not a savepoint or checkpoint"),
             (str(tmp_path / "empty"), 1, "contains no completed checkpoint"),
             (str(tmp_path / "missing"), 1, "no such checkpoint or checkpoint directory"),
             ("", 2, "--from-savepoint: the path is empty")]  # `-s $SAVEPOINT` with the variable unset
    for path, code, words in cases:
        r = run_cli("run", job, "-s", path, env=NO_JVM)
        assert r.returncode == code and len(r.stderr.strip().splitlines()) == 1 and words in r.stderr, (path, r.stderr)
        assert not r.stdout, r.stdout  # the job never ran
        if code == 1:
            assert "`streamjob savepoint` or `streamjob stop -p` printed" in r.stderr or "missing" in path, r.stderr
    # Storage that cannot be read at all (here: S3 without credentials; nothing is sent anywhere): one line,
    # not botocore's traceback. The environment is built whole: no AWS credentials of the machine's.
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(NO_JVM, AWS_EC2_METADATA_DISABLED="true", AWS_CONFIG_FILE=str(tmp_path / "none"),
               AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"))
    r = subprocess.run([sys.executable, "-m", "streamjob.runtime.cli", "run", job, "-s", "s3://no-bucket/sp"],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert r.stderr.strip().startswith("error: --from-savepoint: cannot read s3://no-bucket/sp: NoCredentialsError"), \
        r.stderr


def test_a_file_url_with_a_host_is_refused_naming_the_url(tmp_path):
    """file://otherhost/tmp/x used to be written under the working directory (<cwd>/otherhost/tmp/x) while
    the job reported file://otherhost/...: as checkpoint storage, savepoint directory or a path to restore."""
    job = os.path.join(EXAMPLES, "word_count.py")
    words = "names the host 'otherhost': a file:// URL is a path on this machine, written file:///path"
    for args in (["--conf", "execution.checkpointing.dir=file://otherhost/tmp/x"],
                 ["--conf", "execution.checkpointing.savepoint-dir=file://otherhost/tmp/x"],
                 ["-s", "file://otherhost/tmp/x"], ["--from-checkpoint", "file://otherhost/tmp/x"]):
        r = subprocess.run([sys.executable, "-m", "streamjob.runtime.cli", "run", job, *args], capture_output=True,
                           text=True, timeout=60, cwd=tmp_path, env={**os.environ, **NO_JVM})
        assert r.returncode in (1, 2) and len(r.stderr.strip().splitlines()) == 1, (args, r.stderr)
        assert words in r.stderr and "'file://otherhost/tmp/x'" in r.stderr, (args, r.stderr)
        assert not (tmp_path / "otherhost").exists()
    from streamjob.runtime.checkpoint.storage import normalize_url, savepoint_target_problem

    assert normalize_url("file://localhost/tmp/x") == "file:///tmp/x"
    assert words in savepoint_target_problem("file://otherhost/tmp/x", {"file"})


def test_checkpoint_storage_that_is_a_file_is_one_line_naming_it(tmp_path):
    """execution.checkpointing.dir pointing at a regular file: not NotADirectoryError with fsspec's frames."""
    (tmp_path / "x").write_text("")
    r = run_cli("run", os.path.join(EXAMPLES, "word_count.py"), "--conf", f"execution.checkpointing.dir={tmp_path}/x",
                "--conf", "execution.checkpointing.interval=1s", env=NO_JVM)
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr
    assert f"checkpoint storage file://{tmp_path}/x: cannot write to it: NotADirectoryError" in r.stderr, r.stderr


@pytest.mark.spark
def test_a_task_that_dies_before_registering_is_named_with_what_happened(tmp_path):
    """Known only through Spark's stage failure: not `Attempt 1 failed: : org.apache.spark.SparkException: Job
    aborted due to stage failure: ResultStage 0 (collect at .../spark.py:888) ...`."""
    job = tmp_path / "job.py"
    job.write_text("from streamjob.runtime import RestartStrategies, StreamExecutionEnvironment\n"
                   "from streamjob.runtime.connectors import DiscardingSink\n"
                   "env = StreamExecutionEnvironment.get_execution_environment()\n"
                   "env.set_restart_strategy(RestartStrategies.fixed_delay_restart(1, 100))\n"
                   "env.from_collection([1, 2, 3]).map(lambda x: x).sink_to(DiscardingSink())\n"
                   "env.execute('early-death')\n")
    r = run_cli("run", str(job), "-p", "1", "--no-progress",
                env={"STREAMJOB_TEST_FAULT": f"task-start:{tmp_path}/killed-{{subtask}}"})
    assert r.returncode == 0 and (tmp_path / "killed-0").exists(), r.stderr[-3000:]
    failed = [line for line in r.stderr.splitlines() if line.startswith("Attempt 1 failed")]
    assert len(failed) == 1 and failed[0].startswith(
        "Attempt 1 failed: subtask 1/1: its Python process died without reporting (killed"), r.stderr[-3000:]
    assert "spark.py" not in r.stderr and "SparkException" not in r.stderr, r.stderr[-3000:]


@pytest.mark.spark
def test_an_unreachable_kafka_address_says_so_once_not_per_reconnect(tmp_path):
    """librdkafka printed a FAIL line per reconnect (190-460 of them) before the job's one line."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        bootstrap = f"127.0.0.1:{s.getsockname()[1]}"  # nothing listens there
    job = tmp_path / "job.py"
    job.write_text("from streamjob.runtime import StreamExecutionEnvironment\n"
                   "from streamjob.runtime.connectors import KafkaRecordSerializationSchema, KafkaSink, "
                   "SimpleStringSchema\n"
                   "env = StreamExecutionEnvironment.get_execution_environment()\n"
                   "env.from_collection(['a']).sink_to(KafkaSink.builder().set_bootstrap_servers("
                   f"{bootstrap!r}).set_record_serializer(KafkaRecordSerializationSchema.builder().set_topic('t')"
                   ".set_value_serialization_schema(SimpleStringSchema()).build()).build())\n"
                   "env.execute('kafka-unreachable')\n")
    r = run_cli("run", str(job), "-p", "1", "--no-progress")
    assert r.returncode == 1, r.stderr[-3000:]
    refused = [line for line in r.stderr.splitlines() if "Connection refused" in line and "Kafka client" in line]
    assert 1 <= len(refused) <= 2 and "%3|" not in r.stderr, r.stderr[-5000:]
    assert f"no Kafka broker of {bootstrap} answered within 10 s" in r.stderr, r.stderr[-3000:]


@pytest.mark.spark
def test_a_savepoint_into_a_file_is_one_line_naming_the_savepoint(tmp_path):
    """`streamjob savepoint --target-dir` naming a regular file: the savepoint fails naming itself and its URL."""
    (tmp_path / "x").write_text("")
    env = {**os.environ, "STREAMJOB_STATE_DIR": str(tmp_path / "state"), "OUT": str(tmp_path / "out")}
    proc = subprocess.Popen([sys.executable, "-m", "streamjob.runtime.cli", "run", os.path.join(EXAMPLES, "rolling_sum.py"),
                             "--no-progress"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
                            cwd=tmp_path)
    try:
        deadline = time.monotonic() + 120
        while True:  # the job is listed once its REST API serves
            listed = subprocess.run([sys.executable, "-m", "streamjob.runtime.cli", "list"], capture_output=True,
                                    text=True, timeout=60, env=env)
            if "rolling_sum" in listed.stdout or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        r = subprocess.run([sys.executable, "-m", "streamjob.runtime.cli", "savepoint", "--target-dir",
                            str(tmp_path / "x")], capture_output=True, text=True, timeout=120, env=env)
        assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert r.stderr.startswith("error: savepoint ") and f"file://{tmp_path}/x/savepoint-" in r.stderr \
            and "NotADirectoryError" in r.stderr, r.stderr
        subprocess.run([sys.executable, "-m", "streamjob.runtime.cli", "cancel"], capture_output=True, timeout=120,
                       env=env)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert "Traceback" not in err and "ERROR" not in err, err[-3000:]


# -- Ctrl-C / SIGTERM while Spark starts ------------------------------------------------------------------
WORD_COUNT = os.path.join(EXAMPLES, "word_count.py")


def _session_processes(sid: int) -> list[str]:
    """The processes still in session ``sid`` (the run's: its JVM and launcher too), as "pid command"."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
            fields = stat[stat.rindex(b")") + 2:].split()
            if int(fields[3]) == sid and fields[0] != b"Z":  # field 6, the session; zombies are gone already
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    command = f.read().replace(b"\0", b" ").decode(errors="replace")[:200]
                found.append(f"{name} {command}")
        except (OSError, ValueError, IndexError):
            continue
    return found


def _interrupt_at(tmp_path, moment: str, signum: int, to_group: bool, env: dict | None = None, delay: float = 0.0):
    """`streamjob run examples/word_count.py` in a session of its own (as a shell runs it); ``signum`` is
    sent ``delay`` seconds after the driver's start-up trace shows ``moment``: to the whole process group,
    as a terminal's Ctrl-C is (the JVM and its launcher too), or to the driver alone, as `kill` does."""
    trace, state = tmp_path / f"trace-{moment}", tmp_path / "state"
    proc = subprocess.Popen([sys.executable, "-m", "streamjob.runtime.cli", "run", WORD_COUNT, "-p", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, "STREAMJOB_STARTUP_TRACE": str(trace),
                                 "STREAMJOB_STATE_DIR": str(state), **(env or {})})
    try:
        deadline = time.monotonic() + 120
        while not (trace.exists() and f" {moment}\n" in trace.read_text()):
            assert proc.poll() is None and time.monotonic() < deadline, (moment, proc.communicate())
            time.sleep(0.002)
        time.sleep(delay)
        os.killpg(proc.pid, signum) if to_group else proc.send_signal(signum)
        out, err = proc.communicate(timeout=120)
        deadline = time.monotonic() + 10
        while (left := _session_processes(proc.pid)) and time.monotonic() < deadline:
            time.sleep(0.1)
        return proc.returncode, out, err, left, state, trace.read_text()
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # whatever a failed test left
        except ProcessLookupError:
            pass


@pytest.mark.spark
@pytest.mark.parametrize("moment, delay, signum, to_group, env", [
    ("job manager started", 0.0, signal.SIGINT, True, None),  # the prestarted JVM still starting, or just taken
    ("spark context start", 0.5, signal.SIGINT, True, None),  # inside the SparkContext's start: a py4j call
    ("spark context start", 0.0, signal.SIGTERM, False, None),
    ("jvm launch", 0.3, signal.SIGINT, True, {"STREAMJOB_PRESTART_JVM": "0"}),  # the start's own JVM launching
], ids=["jvm-starting", "context-starting", "sigterm", "no-prestart"])
def test_a_signal_while_spark_starts_is_one_line_and_leaves_nothing_behind(tmp_path, moment, delay, signum, to_group,
                                                                             env):
    """Ctrl-C 0.5-3 s into `streamjob run` (Spark still starting) used to print py4j's traceback ("ERROR:root:
    KeyboardInterrupt while sending command.": the KeyboardInterrupt was raised inside a py4j call, which
    logs it on the root logger), a table of zeros and "while no job was running"; Ctrl-C while the run's
    own JVM was launching left that JVM running for good (its connection-info folder removed under it,
    py4j's server thread kept it alive) and the run itself hung. Now the signal is counted, never raised,
    the start is given up (its JVM killed) and one line says so, with the signal's exit code; no process
    of the run is left, nor its registry entry."""
    code, out, err, left, state, marks = _interrupt_at(tmp_path, moment, signum, to_group, env, delay)
    name = "Ctrl-C" if signum == signal.SIGINT else "SIGTERM"
    assert code == 128 + signum, (code, err, marks)
    assert "stage submit" not in marks, marks  # the signal came before the job ran (else the test proves nothing)
    assert f"interrupted by {name} while it was starting: nothing ran (nothing to resume)" in err, err
    assert all(x not in err for x in ("Traceback", "py4j", "Exception", "Error")), err
    # That line, after at most the one naming the job's REST API (printed as its job manager started).
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 or len(lines) == 2 and "REST API and metrics at" in lines[0], err
    assert not out.strip(), out  # no word was counted
    assert not left, left
    r = run_cli("list", env={"STREAMJOB_STATE_DIR": str(state)}, timeout=60)
    assert r.stdout.strip() == "No running jobs.", r.stdout
    assert not [n for n in os.listdir(state) if n.endswith(".json")] if state.exists() else True
    ended = run_cli("status", "word_count", env={"STREAMJOB_STATE_DIR": str(state)}, timeout=60)
    assert "ended CANCELED" in ended.stderr, ended.stderr


@pytest.mark.spark
def test_a_signal_in_the_job_file_ends_the_prestarted_jvm_too(tmp_path):
    """Ctrl-C before the job file called execute(): the line as before, and the JVM launched beside the
    job file's imports is ended with the run, not left to exit once it has started."""
    code, out, err, left, state, marks = _interrupt_at(tmp_path, "job file", signal.SIGINT, True)
    assert code == 130 and "interrupted by Ctrl-C while no job was running" in err, err
    assert "Traceback" not in err and not left, (err, left)


@pytest.mark.spark
def test_a_job_that_cannot_get_its_slots_is_its_error_alone(tmp_path):
    """Nothing ran: no table of zeros, no "Nothing to resume from", no JVM left behind; the one error line
    names the slots and what to do (slot sharing groups: see test_operator_parallelism)."""
    proc = subprocess.Popen([sys.executable, "-m", "streamjob.runtime.cli", "run", WORD_COUNT, "-p", "2", "--master",
                             "local[1]"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env={**os.environ, "STREAMJOB_STATE_DIR": str(tmp_path)})
    try:
        out, err = proc.communicate(timeout=120)
        lines = [line for line in err.splitlines() if line.strip()]
        assert proc.returncode == 1 and len(lines) == 2 and "REST API and metrics at" in lines[0], err
        assert lines[1].startswith(f"error: {WORD_COUNT}: not enough slots: the job needs 2 slots (parallelism 2), "
                                   f"but master local[1] has 1; use --master local[2]"), err
        assert not out.strip()
        assert not _session_processes(proc.pid)  # the JVM prestarted beside the job file is ended with the run
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_kill_tree_ends_the_process_and_its_children():
    """What an interrupted start uses on the JVM it launched: spark-submit's launcher JVM is a child of it
    while it builds the command (here: a shell and its two sleeping children)."""
    from streamjob.runtime.cluster.process_tree import descendants, kill_tree

    proc = subprocess.Popen(["sh", "-c", "sleep 60 & sleep 60 & wait"])
    deadline = time.monotonic() + 10
    while len(descendants(proc.pid)) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    children = descendants(proc.pid)
    kill_tree(proc)
    assert proc.returncode == -signal.SIGKILL
    time.sleep(0.2)  # the orphaned children are reaped by init
    for pid in children:
        try:
            with open(f"/proc/{pid}/stat") as f:
                assert f.read().split(") ", 1)[1][0] == "Z", pid  # a zombie at most
        except FileNotFoundError:
            pass
