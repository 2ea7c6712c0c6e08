"""`streamjob run` as the operator's driver pods call it: --conf-file, --module, and a job that
cannot start leaving its reason in the termination message."""

from __future__ import annotations

import json
import os
import subprocess
import sys

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
