"""The command line as a Flink user knows it, run as real processes: `run -d`, `list`, commands by job id
(prefix) or name, `savepoint` without periodic checkpointing, `stop -p` (Flink's stop-with-savepoint),
`cancel` waiting for the outcome, `-s` / `-n`, `--` before job arguments; and the run's messages: Spark's
failures in one line, no JVM banner, `--log-level`, engine frames hidden unless `-v`."""

from __future__ import annotations

import glob
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections import defaultdict

import pytest
from conftest import run_cli

from streamjob.runtime import registry
from streamjob.runtime.checkpoint.storage import load_checkpoint

HERE = os.path.dirname(os.path.abspath(__file__))
ENDLESS = os.path.join(HERE, "jobs", "endless.py")
NAME = "[prod] totals"  # brackets: printed as they are, never read as markup
BANNER = ("Using incubator modules", "Setting default log level", "sc.setLogLevel", "default log4j profile")


def _rows(out_dir: str) -> list[dict]:
    """Every row written, in finished part files and in-progress ones (no checkpointing: no commits)."""
    rows = []
    for path in glob.glob(os.path.join(out_dir, "*.jsonl")) + glob.glob(os.path.join(out_dir, ".*.inprogress")):
        with open(path) as f:
            lines = f.read().split("\n")
        rows += [json.loads(line) for line in lines[:-1] if line.strip()]  # a last line may be half written
    return rows


@pytest.fixture
def state_dir(tmp_path):
    """The registry of this test's jobs; at the end, any job still running is ended (a failed test
    must not leave a detached job behind)."""
    path = tmp_path / "state"
    yield path
    old = os.environ.get("STREAMJOB_STATE_DIR")
    os.environ["STREAMJOB_STATE_DIR"] = str(path)
    try:
        for entry in registry.running(clean=False):
            try:
                os.kill(entry.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    finally:
        os.environ["STREAMJOB_STATE_DIR"] = old or ""


def _until(predicate, what: str, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _detached(env: dict, *args: str) -> tuple[str, str]:
    """`streamjob run -d`: returns (job id, log file) once it printed them."""
    r = run_cli("run", "-d", *args, env=env, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    job_id = re.search(r"JobID ([0-9a-f]{32})", r.stdout).group(1)
    log = re.search(r"^log: (.+)$", r.stdout, re.M).group(1)
    assert f"name: {NAME}" in r.stdout and "REST API: http://127.0.0.1:" in r.stdout, r.stdout
    return job_id, log


@pytest.mark.timeout(600)
def test_detached_list_savepoint_without_checkpointing_stop_and_resume(tmp_path, state_dir):
    env = {"STREAMJOB_STATE_DIR": str(state_dir)}
    out1, out2, sp = tmp_path / "out1", tmp_path / "out2", tmp_path / "savepoints"
    # Job arguments that look like options go after `--`.
    job_id, log = _detached(env, ENDLESS, "--", str(out1), "300", "--name", NAME)
    listed = run_cli("list", env=env, timeout=60)
    assert listed.returncode == 0 and f"{job_id} : {NAME} (RUNNING)" in listed.stdout, listed.stdout + listed.stderr
    as_json = json.loads(run_cli("list", "--json", env=env, timeout=60).stdout)
    assert [(j["id"], j["name"]) for j in as_json] == [(job_id, NAME)]
    # status by name and by a prefix of the id
    for ref in (NAME, job_id[:6]):
        r = run_cli("status", ref, env=env, timeout=60)
        assert r.returncode == 0 and f"{NAME} ({job_id}): RUNNING" in r.stdout, r.stdout + r.stderr
    r = run_cli("status", "no-such-job", env=env, timeout=60)
    assert r.returncode == 1 and "no running job with id or name 'no-such-job'" in r.stderr and job_id[:12] in r.stderr
    _until(lambda: len(_rows(str(out1))) > 50, "rows in the sink")

    # The job has no periodic checkpointing: a savepoint is taken all the same (as Flink's).
    r = run_cli("savepoint", job_id[:8], str(sp), env=env, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    first = r.stdout.strip().splitlines()[-1]
    _, meta = load_checkpoint(first)
    assert meta.kind == "savepoint" and meta.job_id == job_id
    assert any(meta.operators["count"]["subtasks"]), meta.operators.keys()  # keyed state of the count
    r = run_cli("checkpoints", NAME, env=env, timeout=60)
    assert "periodic checkpointing is off" in r.stdout and "savepoint" in r.stdout, r.stdout

    # Flink's `stop`: stop-with-savepoint, waiting for the job's end, naming what to resume from.
    r = run_cli("stop", "-p", str(sp), NAME, env=env, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    final = r.stdout.strip().splitlines()[0]
    assert final != first and load_checkpoint(final)[1].kind == "savepoint"
    assert f"Job '{NAME}' ({job_id}) FINISHED with savepoint {final}" in r.stdout, r.stdout
    # What to resume from, as the job said it: its own arguments (after `--`: they look like options) too.
    local = final.removeprefix("file://")
    m = re.search(rf"Final savepoint at {re.escape(local)}: resume with `streamjob run (\S+) --from-savepoint "
                  rf"{re.escape(local)} -- {re.escape(str(out1))} 300 --name '\[prod\] totals'`", r.stdout)
    assert m and os.path.samefile(m.group(1), ENDLESS), r.stdout
    _until(lambda: not os.path.exists(state_dir / f"{job_id}.json"), "the registry entry to go")
    assert "No running jobs." in run_cli("list", env=env, timeout=60).stdout
    with open(log) as f:
        text = f.read()
    assert not [b for b in BANNER if b in text], text[-3000:]  # the JVM's banner is gone

    # -s / -n: the resumed job's sink has another uid, so the savepoint's sink state has no operator:
    # refused without -n, dropped with it. The counts go on where the savepoint left them: row for row,
    # per key, every index once and the count exactly its position (nothing lost or repeated).
    r = run_cli("run", ENDLESS, "-s", final, "--", str(out2), "300", "--sink-uid", "files2", env=env, timeout=300)
    assert r.returncode == 1 and "--allow-non-restored-state" in r.stderr and "'files'" in r.stderr, r.stderr[-2000:]
    job2, log2 = _detached(env, ENDLESS, "-s", final, "-n", "--", str(out2), "300", "--name", NAME,
                           "--sink-uid", "files2")
    _until(lambda: len(_rows(str(out2))) > 50, "rows of the resumed job")
    r = run_cli("cancel", NAME, env=env, timeout=300)
    assert r.returncode == 0 and f"Job '{NAME}' ({job2}) CANCELED" in r.stdout, r.stdout + r.stderr
    assert "error" not in r.stderr.lower(), r.stderr
    _until(lambda: not os.path.exists(state_dir / f"{job2}.json"), "the canceled job's entry to go")
    with open(log2) as f:
        text = f.read()
    assert f"Job '{NAME}' ({job2}) was canceled" in text and "error:" not in text, text[-3000:]
    before = _rows(str(out1))
    by_key: dict = defaultdict(list)
    for row in before + _rows(str(out2)):
        by_key[row["key"]].append((row["i"], row.get("count", 1)))
    assert len(by_key) == 10
    for key, seen in by_key.items():
        seen.sort()
        assert [c for _, c in seen] == list(range(1, len(seen) + 1)), (key, seen[:5])
        assert [i for i, _ in seen] == [key + 10 * n for n in range(len(seen))], (key, seen[:5])
    after = _rows(str(out2))
    for key in by_key:  # the resumed job went on after the savepoint, not from the beginning
        assert min(r["i"] for r in after if r["key"] == key) > max(r["i"] for r in before if r["key"] == key)

    # Plain stop (the drain), asked for at once: the job may still be deploying; the stop is not lost.
    job3, _ = _detached(env, ENDLESS, "--", str(tmp_path / "out3"), "300", "--name", NAME)
    r = run_cli("stop", job3, env=env, timeout=300)
    assert r.returncode == 0 and f"Job '{NAME}' ({job3}) FINISHED" in r.stdout, r.stdout + r.stderr


def test_stale_entries_are_ignored_and_removed(tmp_path, monkeypatch):
    monkeypatch.setenv("STREAMJOB_STATE_DIR", str(tmp_path))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    registry.register("d" * 32, "dead", "http://127.0.0.1:1", token="secret", pid=dead.pid)
    registry.register("a" * 32, "alive", "http://127.0.0.1:2", pid=os.getpid())
    assert os.path.exists(tmp_path / ("d" * 32 + ".token"))
    assert [e.name for e in registry.running()] == ["alive"]
    assert not os.path.exists(tmp_path / ("d" * 32 + ".json")) and not os.path.exists(tmp_path / ("d" * 32 + ".token"))
    r = run_cli("list", env={"STREAMJOB_STATE_DIR": str(tmp_path)}, timeout=60)
    assert "a" * 32 + " : alive (UNREACHABLE)" in r.stdout, r.stdout + r.stderr
    registry.unregister("a" * 32)


def test_a_command_naming_a_job_that_ended_says_it_ended_and_how(tmp_path, monkeypatch):
    """`streamjob cancel JOB` of a job that finished: its entry is gone, but the record of its end says
    how it ended (it used to say "no running job is registered ...; give --address URL")."""
    monkeypatch.setenv("STREAMJOB_STATE_DIR", str(tmp_path))
    env = {"STREAMJOB_STATE_DIR": str(tmp_path)}
    registry.record_end("e" * 32, "word_count", "FINISHED", "/jobs/wc.py")
    registry.record_end("f" * 32, "other", "FAILED")
    assert [e.name for e in registry.ended()] == ["other", "word_count"]
    for ref in ("word_count", "eeee", "e" * 32):
        r = run_cli("cancel", ref, env=env, timeout=60)
        assert r.returncode == 1 and f"job 'word_count' ({'e' * 32}) is not running: it ended FINISHED at " \
            in r.stderr, r.stderr
    r = run_cli("status", env=env, timeout=60)  # no JOB, none running: the last one to end
    assert r.returncode == 1 and f"job 'other' ({'f' * 32}) is not running: it ended FAILED" in r.stderr, r.stderr
    r = run_cli("stop", "nothing-like-it", env=env, timeout=60)
    assert r.returncode == 1 and "no running job is registered" in r.stderr, r.stderr
    registry.register("a" * 32, "alive", "http://127.0.0.1:2", pid=os.getpid())
    r = run_cli("cancel", "word_count", env=env, timeout=60)  # the running ones are named too
    assert "ended FINISHED" in r.stderr and "running: aaaaaaaaaaaa ('alive')" in r.stderr, r.stderr
    registry.unregister("a" * 32)
    for i in range(registry.ENDED_KEPT + 5):  # only the newest are kept
        registry.record_end(f"{i:032x}", f"job{i}", "CANCELED")
    assert len(registry.ended()) == registry.ENDED_KEPT
    assert registry.find_ended(registry.ended(), None).name == f"job{registry.ENDED_KEPT + 4}"


@pytest.mark.spark
def test_cancel_of_a_job_that_finished_while_its_result_lingers_says_it_ended(tmp_path, state_dir):
    """The job finished but still serves its result (rest.result-linger): its entry is listed, and cancel,
    stop and savepoint used to answer with the API's "409 the job is FINISHED" and its URL."""
    env = {"STREAMJOB_STATE_DIR": str(state_dir)}
    job = os.path.join(os.path.dirname(HERE), "examples", "word_count.py")
    r = run_cli("run", "-d", job, "--conf", "rest.result-linger=120s", env=env, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    job_id = re.search(r"JobID ([0-9a-f]{32})", r.stdout).group(1)
    _until(lambda: "(FINISHED)" in run_cli("list", env=env, timeout=60).stdout, "the job to finish")
    for command, doing in (("cancel", "cancel"), ("stop", "stop"), ("savepoint", "take a savepoint of")):
        r = run_cli(command, "word_count", env=env, timeout=60)
        assert r.returncode == 1 and r.stderr.strip() == \
            f"error: job 'word_count' ({job_id}) already ended FINISHED: nothing to {doing}", r.stderr


def test_address_without_scheme_is_http_and_a_bad_one_is_one_line():
    """`--address 127.0.0.1:8081` (as `streamjob list` shows it, without http://) is the job's REST API;
    one that is no URL at all used to end in urllib's traceback."""
    from streamjob.runtime.rest_client import base_url

    assert base_url("127.0.0.1:8081/") == "http://127.0.0.1:8081"
    assert base_url("https://jobs.example:443") == "https://jobs.example:443"
    port = _free_port()
    for address, words in ((f"127.0.0.1:{port}", f"cannot reach the job at 127.0.0.1:{port} ("),
                           ("http://127.0.0.1:abc", "--address 'http://127.0.0.1:abc': expected the job's REST API "
                                                    "as http://HOST:PORT"),
                           ("ftp://x", "--address 'ftp://x': expected")):
        r = run_cli("checkpoints", "--address", address, timeout=60)
        assert r.returncode == 1 and r.stderr.startswith(f"error: {words}") and "Traceback" not in r.stderr, r.stderr


def test_resolve_names_ids_and_prefixes():
    e = [registry.Entry("ab12" + "0" * 28, "orders", "u1", 1, 1.0), registry.Entry("ab34" + "0" * 28, "clicks", "u2", 2, 2.0),
         registry.Entry("cd56" + "0" * 28, "clicks", "u3", 3, 3.0)]
    assert registry.resolve(e, "orders").url == "u1"
    assert registry.resolve(e, "ab3").url == "u2"
    assert registry.resolve(e, "cd56" + "0" * 28).url == "u3"
    for ref, problem in (("ab", "matches 2 running jobs"), ("clicks", "matches 2 running jobs"),
                         ("zz", "no running job with id or name 'zz'"), (None, "3 jobs are running")):
        try:
            registry.resolve(e, ref)
        except registry.RegistryError as err:
            assert problem in str(err)
        else:
            raise AssertionError(ref)
    assert registry.resolve(e[:1], None).url == "u1"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_spark_master_problems_are_one_line(tmp_path):
    """Refused before any JVM starts (Spark's client would retry an unreachable master for a minute)."""
    job = os.path.join(os.path.dirname(HERE), "examples", "word_count.py")
    cases = [("spark://nohost.invalid:7077", 1, "unknown host 'nohost.invalid'"),
             (f"spark://127.0.0.1:{_free_port()}", 1, "connection refused at 127.0.0.1:"),
             ("spark://masterhost", 2, "bad master URL 'spark://masterhost'"),
             ("mesos://x:5050", 2, "bad master URL 'mesos://x:5050'")]
    if not (os.environ.get("HADOOP_CONF_DIR") or os.environ.get("YARN_CONF_DIR")):  # spark-submit's stack trace
        cases.append(("yarn", 1, "master yarn needs the YARN cluster's configuration: set HADOOP_CONF_DIR"))
    for master, code, line in cases:
        r = run_cli("run", job, "--master", master, "--no-progress", timeout=120)
        errors = [x for x in r.stderr.splitlines() if x.startswith("error:")]
        assert r.returncode == code and len(errors) == 1 and line in errors[0], (master, r.stderr[-3000:])
        assert r.stderr.strip() == errors[0] and not r.stdout.strip(), r.stdout + r.stderr  # that line, nothing else


def test_driver_tracebacks_hide_engine_frames_unless_verbose(tmp_path):
    job = tmp_path / "job.py"
    job.write_text("from streamjob.runtime import StreamExecutionEnvironment\n"
                   "def build(env):\n"
                   "    return env.from_collection([1, 2]).key_by(None)\n"
                   "build(StreamExecutionEnvironment.get_execution_environment())\n")
    quiet = run_cli("run", str(job), timeout=120)
    loud = run_cli("run", str(job), "-v", timeout=120)
    for r in (quiet, loud):
        assert r.returncode == 1 and f'File "{job}", line 3, in build' in r.stderr, r.stderr
    assert "runpy\"" not in quiet.stderr and "/runtime/" not in quiet.stderr and "frames of streamjob" in quiet.stderr
    assert "runpy" in loud.stderr and "/runtime/cli.py" in loud.stderr and "hidden" not in loud.stderr


def test_task_failure_tracebacks_log_level_and_banner(tmp_path):
    job = tmp_path / "job.py"
    job.write_text("from streamjob.runtime import StreamExecutionEnvironment\n"
                   "from streamjob.runtime.connectors import DiscardingSink\n"
                   "def parse(x):\n"
                   "    if x == 3:\n"
                   "        raise ValueError('bad row [3]')\n"
                   "    return x\n"
                   "env = StreamExecutionEnvironment.get_execution_environment()\n"
                   "env.from_collection(list(range(10))).map(parse).sink_to(DiscardingSink())\n"
                   "env.execute('fails')\n")
    quiet = run_cli("run", str(job), "-p", "1", "--no-progress", timeout=300)
    assert quiet.returncode == 1 and "bad row [3]" in quiet.stderr, quiet.stderr[-3000:]
    assert f'File "{job}", line 5, in parse' in quiet.stderr, quiet.stderr[-3000:]
    assert "/runtime/task/" not in quiet.stderr and "frames of streamjob" in quiet.stderr, quiet.stderr[-3000:]
    assert not [b for b in BANNER if b in quiet.stderr], quiet.stderr[-3000:]
    assert " INFO " not in quiet.stderr
    loud = run_cli("run", str(job), "-p", "1", "--no-progress", "-v", "--log-level", "info", timeout=300)
    assert loud.returncode == 1 and "/runtime/task/" in loud.stderr, loud.stderr[-3000:]
    assert re.search(r" INFO \w+: ", loud.stderr), loud.stderr[-3000:]  # Spark's own INFO lines
