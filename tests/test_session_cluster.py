"""The local session cluster (``streamjob cluster start``): real runs on a real kept JVM.

Each run is a ``streamjob run`` process; whether it took the session is read from its start-up trace
(``STREAMJOB_STARTUP_TRACE``: "session cluster taken", else "jvm launch"). The session lives in a cache
folder of the test's own (XDG_CACHE_HOME), with the machine's class-data archive linked in.
"""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from streamjob.runtime.cluster import user_cache

JOB = '''
import os
from streamjob.runtime import StreamExecutionEnvironment
from streamjob.runtime.connectors import DataGenSource, FileSink

rows, rate = int(os.environ["ROWS"]), int(os.environ["RATE"])
env = StreamExecutionEnvironment.get_execution_environment()
if os.environ.get("CHECKPOINTS"):
    env.enable_checkpointing(300)


def seen(r):
    """What a task sees: the run's variable and working directory (the sink's relative path is the run's too)."""
    if r["i"] == 0:
        print("a task printed this", flush=True)  # to the run's stdout, as without a session
    return {**r, "mark": os.environ.get("SESSION_TEST_MARK"), "cwd": os.getcwd()}


for n in range(int(os.environ.get("JOBS", "1"))):  # a program's later jobs run on the same session
    env.from_source(DataGenSource(lambda i: {"i": i}, count=rows, rows_per_second=rate), name="numbers") \\
        .map(seen).sink_to(FileSink.jsonl("out" if n == 0 else f"out{n}"))
    env.execute(f"session-test-{n}")
'''


@pytest.fixture
def cache(tmp_path):
    """XDG_CACHE_HOME of the test's own, with this machine's class-data archives (a JVM starts in ~1 s
    with one; without, the first one writes it for ~5 s more)."""
    home = tmp_path / "cache"
    (home / "streamjob").mkdir(parents=True)
    for archive in glob.glob(os.path.join(user_cache.folder(), "spark-*.jsa")):
        os.symlink(archive, home / "streamjob" / os.path.basename(archive))
    yield home
    subprocess.run([sys.executable, "-m", "streamjob.runtime.cli", "cluster", "stop"], env=_env(home),
                   capture_output=True, timeout=60)


def _env(cache, **extra) -> dict:
    env = {**os.environ, "XDG_CACHE_HOME": str(cache), **extra}
    env.pop("STREAMJOB_SESSION", None)  # tests/conftest.py turns it off for every other test
    return env


def cli(cache, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "streamjob.runtime.cli", *args], env=_env(cache),
                          capture_output=True, text=True, timeout=180)


class Run:
    def __init__(self, tmp_path, cache, name: str, rows: int, rate: int, *args: str, **env):
        self.dir = tmp_path / name
        self.dir.mkdir()
        (self.dir / "job.py").write_text(JOB)
        self.rows, self.mark, self.trace = rows, name, self.dir / "trace"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "streamjob.runtime.cli", "run", "--no-progress", *args, "job.py"], cwd=self.dir,
            env=_env(cache, ROWS=str(rows), RATE=str(rate), SESSION_TEST_MARK=name,
                     STREAMJOB_STARTUP_TRACE=str(self.trace), **env),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        self.stdout = ""

    def moments(self) -> list[str]:
        try:
            return [line.split(" ", 2)[2] for line in self.trace.read_text().splitlines()
                    if line.split(" ", 2)[1] == str(self.proc.pid)]
        except (OSError, IndexError):
            return []

    def on_session(self) -> bool:
        return "session cluster taken" in self.moments()

    def wait(self, timeout: float = 240) -> str:
        self.stdout, err = self.proc.communicate(timeout=timeout)
        assert self.proc.returncode == 0, err[-4000:]
        return err

    def until(self, condition, what: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            assert self.proc.poll() is None, f"the run ended ({what}): {self.proc.communicate()[1][-3000:]}"
            assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
            time.sleep(0.05)

    def committed(self, out: str = "out") -> list[dict]:
        rows = []
        for path in glob.glob(str(self.dir / out / "*")):  # glob skips in-progress (hidden) files
            with open(path) as f:
                rows += [json.loads(line) for line in f]
        return rows

    def check_exact(self, out: str = "out") -> None:
        rows = self.committed(out)
        assert sorted(r["i"] for r in rows) == list(range(self.rows)), "every row once, none twice"
        assert {r["mark"] for r in rows} == {self.mark}, "the tasks see the run's environment"
        assert {r["cwd"] for r in rows} == {str(self.dir)}, "the tasks work in the run's directory"


def session_of(cache) -> dict:
    with open(cache / "streamjob" / "session" / "session.json") as f:
        return json.load(f)


def test_runs_take_the_warm_session_jvm_one_at_a_time_and_a_killed_run_s_context_is_stopped(tmp_path, cache):
    started = cli(cache, "cluster", "start")
    assert started.returncode == 0, started.stderr
    session = session_of(cache)
    status = cli(cache, "cluster", "status")
    assert status.returncode == 0 and f"JVM pid {session['jvm']}" in status.stdout, status.stdout

    # One after the other: each takes the session (the one before stopped its context and let it go).
    for name, jobs in (("a", 1), ("b", 2)):  # b's program runs two jobs, one after the other
        run = Run(tmp_path, cache, name, 300, 600, JOBS=str(jobs))
        err = run.wait()
        assert run.on_session() and "jvm launch" not in run.moments(), run.moments()
        assert f"On the session cluster (its JVM: pid {session['jvm']})" in err, err[-2000:]
        assert "a task printed this" in run.stdout, run.stdout[-2000:]
        for n in range(jobs):
            run.check_exact("out" if n == 0 else f"out{n}")

    # Side by side: the second finds the session held and runs on a JVM of its own; both exact.
    first = Run(tmp_path, cache, "c", rows=3000, rate=1000)
    first.until(first.on_session, "the first run takes the session")
    second = Run(tmp_path, cache, "d", rows=300, rate=600)
    err = second.wait()
    first.wait()
    assert not second.on_session() and "jvm launch" in second.moments(), second.moments()
    assert "the session cluster runs another run's job: this run starts a Spark JVM of its own" in err, err[-2000:]
    for run in (first, second):
        run.check_exact()

    # A run killed with everything of its own (its process group: the driver, its zygote, its tasks) leaves
    # its SparkContext in the session's JVM; the keeper stops it, and the next run takes the session.
    killed = Run(tmp_path, cache, "e", rows=100_000, rate=500)
    killed.until(lambda: killed.on_session() and "stage submit" in killed.moments(), "the run's stage runs")
    time.sleep(1.0)
    os.killpg(killed.proc.pid, signal.SIGKILL)
    killed.proc.communicate()
    log = session["log"]
    deadline = time.monotonic() + 30
    while "of a run that ended without it" not in open(log).read():
        assert time.monotonic() < deadline, open(log).read()[-3000:]
        time.sleep(0.1)
    after = Run(tmp_path, cache, "f", rows=300, rate=600)
    after.wait()
    assert after.on_session(), after.moments()
    after.check_exact()
    # The same with the keeper paused (it would have stopped the context within half a second): the next
    # run finds the context left behind as it makes its own, stops it, and goes on.
    os.kill(session["keeper"], signal.SIGSTOP)
    try:
        killed = Run(tmp_path, cache, "e2", rows=100_000, rate=500)
        killed.until(lambda: killed.on_session() and "stage submit" in killed.moments(), "the run's stage runs")
        time.sleep(1.0)
        os.killpg(killed.proc.pid, signal.SIGKILL)
        killed.proc.communicate()
        after = Run(tmp_path, cache, "f2", rows=300, rate=600)
        after.wait()
        assert after.on_session() and "session context left behind stopped" in after.moments(), after.moments()
        after.check_exact()
    finally:
        os.kill(session["keeper"], signal.SIGCONT)
    assert session_of(cache)["jvm"] == session["jvm"] and psutil.pid_exists(session["jvm"])

    # A run with a JVM setting of its own needs a JVM launched with it, and says so.
    own = Run(tmp_path, cache, "h", 100, 600, "--conf", "spark.driver.memory=600m")
    err = own.wait()
    assert not own.on_session() and "jvm launch" in own.moments(), own.moments()
    assert ("a session cluster runs, but this run sets JVM settings of its own (spark.driver.memory): this run "
            "starts a Spark JVM of its own") in err, err[-2000:]
    own.check_exact()

    stopped = cli(cache, "cluster", "stop")
    assert stopped.returncode == 0 and "session cluster stopped" in stopped.stdout, stopped
    assert not psutil.pid_exists(session["jvm"]) or psutil.Process(session["jvm"]).status() == psutil.STATUS_ZOMBIE
    assert cli(cache, "cluster", "status").returncode == 1
    alone = Run(tmp_path, cache, "g", rows=100, rate=600)
    alone.wait()
    assert not alone.on_session() and "jvm launch" in alone.moments()
    alone.check_exact()


def test_the_session_jvm_killed_under_a_run_is_a_restart_on_a_jvm_of_its_own_and_output_is_exact(tmp_path, cache):
    started = cli(cache, "cluster", "start")
    assert started.returncode == 0, started.stderr
    session = session_of(cache)
    run = Run(tmp_path, cache, "a", rows=3000, rate=600, CHECKPOINTS="1")
    run.until(lambda: run.on_session() and len(glob.glob(str(run.dir / "out" / "*"))) > 0,
              "a checkpoint committed output on the session's JVM")
    os.kill(session["jvm"], signal.SIGKILL)
    err = run.wait()
    assert "the Spark JVM exited (the session cluster's JVM ended); starting a new one" in err, err[-3000:]
    assert "jvm restart" in run.moments() and "jvm launch" in run.moments(), run.moments()
    run.check_exact()
    deadline = time.monotonic() + 30  # the keeper ends with its JVM, and says so
    while cli(cache, "cluster", "status").returncode != 1:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert not psutil.pid_exists(session["keeper"]) or \
        psutil.Process(session["keeper"]).status() == psutil.STATUS_ZOMBIE
