"""The Spark JVM dies: SIGKILL of the ``java`` child of ``streamjob run`` (an out-of-memory kill, a crash).

Everything runs for real: ``streamjob run`` in a subprocess on local Spark, its REST API, the
JVM's and the tasks' processes found and killed with psutil. On local Spark the job manager starts
a new JVM and SparkContext and restores the latest checkpoint; on a cluster master (a standalone
Spark master and worker started by the test) the driver's JVM is the driver, so the job fails fast
and keeps its checkpoints, which a new run resumes from. Output is compared row for row
(``tests/jobs/counting.py``).

A checkpoint or savepoint is held in flight with ``COUNTING_STALL_FILE`` (the counting operator
waits while the file exists), so the JVM is killed while it is in flight, not merely near it.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import psutil
import pytest

from jobs import counting
from test_checkpointing import committed_rows

HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(HERE, "jobs", "counting.py")
JVM_EXITED = "the Spark JVM exited (killed by signal 9)"

pytestmark = pytest.mark.spark


def free_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as s:
        return s.getsockname()[1]


def request(url: str, method: str = "GET", body: dict | None = None) -> tuple[int, dict]:
    req = urllib.request.Request(url, data=None if body is None else json.dumps(body).encode(), method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


class Job:
    """``streamjob run tests/jobs/counting.py`` in a subprocess, with its REST API on a known port."""

    def __init__(self, tmp_path, rows: int, rate: int, *args: str, env: dict | None = None, linger: str = "20 s"):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.out, self.checkpoints = str(tmp_path / "out"), str(tmp_path / "checkpoints")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "streamjob.runtime.cli", "run", JOB, self.out, self.checkpoints, str(rows),
             str(rate), "--no-progress", "--conf", f"rest.address=127.0.0.1:{self.port}",
             "--conf", f"rest.result-linger={linger}", *args],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})
        self.lines: list[str] = []
        self.proxies: list[psutil.Process] = []
        threading.Thread(target=lambda: self.lines.extend(self.proc.stderr), daemon=True).start()

    def stderr(self) -> str:
        return "".join(self.lines)

    def until(self, condition, timeout: float = 120, what: str = "") -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            assert self.proc.poll() is None, f"the job ended ({what}):\n{self.stderr()[-4000:]}"
            assert time.monotonic() < deadline, f"not within {timeout} s: {what}\n{self.stderr()[-4000:]}"
            time.sleep(0.05)

    def get(self, path: str) -> dict:
        try:
            return request(self.url + path)[1]
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return {}  # not serving yet

    def checkpoints_after(self, n: int) -> bool:
        """Running, with a checkpoint completed later than checkpoint ``n`` (every task is wired)."""
        job, cps = self.get("/job"), self.get("/checkpoints")
        latest = (cps.get("latest") or {}).get("completed") or {}
        return job.get("state") == "RUNNING" and latest.get("id", 0) > n

    def latest_checkpoint(self) -> int:
        return ((self.get("/checkpoints").get("latest") or {}).get("completed") or {}).get("id", 0)

    def java(self) -> psutil.Process:
        [java] = [c for c in psutil.Process(self.proc.pid).children() if c.name() == "java"]
        return java

    def kill_jvm(self, local: bool = True) -> list[psutil.Process]:
        """SIGKILL the JVM; returns its Python workers (the tasks), which outlive it as orphans unless ended."""
        java = self.java()
        workers = [p for p in java.children(recursive=True) if "python" in p.name()]
        assert workers or not local, "the JVM runs the job's tasks"
        # The daemon's zygote (runtime/cluster/zygote.py) is the run's child, and the task workers its children
        for child in psutil.Process(self.proc.pid).children():
            try:
                if "--zygote" in child.cmdline():
                    # The JVM's own Python child is then the proxy that handed its streams over: not a task
                    # (the run does not kill it); it exits by itself once the zygote has ended.
                    self.proxies = [p for p in workers if p.ppid() == java.pid]
                    workers = [p for p in workers if p not in self.proxies]
                    workers += [child, *child.children(recursive=True)]
            except psutil.Error:  # an earlier JVM's zygote, ended (a zombie until the run reaps it) or gone
                pass
        java.kill()
        return workers

    def proxies_exit(self) -> None:
        """The proxies of the killed JVM's daemon exit once the zygote that took over from them has ended
        (``dead`` checks the tasks at once: the run kills those, but a proxy wakes when it is scheduled)."""
        self.until(lambda: dead(self.proxies), timeout=30, what="the dead JVM's daemon proxy exits")
        self.proxies = []

    def lines_with(self, words: str) -> int:
        return sum(words in line for line in list(self.lines))

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)


def dead(processes: list[psutil.Process]) -> bool:
    def gone(p: psutil.Process) -> bool:
        try:
            return p.status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    return all(gone(p) for p in processes)


def savepoint_held_in_flight(job: Job, stall: str, target_dir: str) -> str:
    """A savepoint whose barrier waits at the stalled operator; returns its request id. A savepoint starts
    once no checkpoint is in flight: a periodic one that the stall caught before its barrier passed would
    hold it QUEUED for good, so then the stall is lifted (both complete) and it is tried again."""
    for attempt in range(5):
        open(stall, "w").close()
        rid = f"sp-1-{attempt}"
        code, sp = request(job.url + "/savepoints", "POST", {"target_dir": target_dir, "request_id": rid})
        assert code == 202, sp
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            if job.get(f"/savepoints/{rid}").get("status") == "IN_PROGRESS":
                return rid
            time.sleep(0.05)
        os.remove(stall)
        job.until(lambda: job.get(f"/savepoints/{rid}").get("status") == "COMPLETED", what=f"savepoint {rid}")
    raise AssertionError("no savepoint could be held in flight in 5 tries")


def no_completion_after_the_restore_point(job: Job) -> None:
    """Once the restore point was chosen, no checkpoint of the failed attempt completed: every checkpoint
    triggered before the restore that completed is at most the restored one."""
    cps = job.get("/checkpoints")
    restored = cps["latest"]["restored"]
    late = [c for c in cps["history"] if c["status"] == "COMPLETED" and c["trigger_time"] < restored["restore_time"]
            and c["id"] > restored["id"]]
    assert not late, (restored, late)


def test_jvm_killed_three_times_mid_checkpoint_mid_savepoint_and_anywhere_output_is_exact(tmp_path):
    """Three JVM kills in one run: while a checkpoint is in flight (it never completes: the attempt is
    fenced before the restore point is chosen), while a savepoint is in flight (it fails naming the
    JVM; a retry completes), and at a random moment. Each time the old tasks die, a new JVM starts,
    the latest checkpoint is restored and it counts as a restart; the output is exact."""
    rng = random.Random(int(time.time()))
    stall = str(tmp_path / "stall")
    rows = 50_000
    job = Job(tmp_path, rows, 2000, env={"COUNTING_STALL_FILE": stall})
    try:
        job.until(lambda: job.checkpoints_after(1), what="the job runs and checkpoints")

        # 1. A checkpoint in flight: its barrier waits at the stalled operator.
        open(stall, "w").close()
        held = {}

        def in_flight() -> bool:  # held for a second: one that was past the operator already has completed
            pending = [c for c in job.get("/checkpoints").get("history", [])
                       if c["status"] == "IN_PROGRESS" and time.time() - c["trigger_time"] > 1.0]
            held.update(pending[0] if pending else {})
            return bool(pending)

        job.until(in_flight, what="a checkpoint in flight")
        workers = job.kill_jvm()
        job.until(lambda: job.lines_with(f"{JVM_EXITED}; starting a new one") == 1, what="the JVM's death noticed")
        os.remove(stall)
        assert dead(workers), "the orphaned tasks of the dead JVM were ended"
        job.proxies_exit()
        job.until(lambda: job.checkpoints_after(held["id"]), what="running again")
        [status] = [c for c in job.get("/checkpoints")["history"] if c["id"] == held["id"]]
        assert status["status"] == "FAILED" and JVM_EXITED in status["failure"], status
        no_completion_after_the_restore_point(job)

        # 2. A savepoint in flight.
        sp1 = savepoint_held_in_flight(job, stall, str(tmp_path / "savepoints"))
        workers = job.kill_jvm()
        job.until(lambda: job.lines_with(f"{JVM_EXITED}; starting a new one") == 2, what="the JVM's death noticed")
        os.remove(stall)
        assert dead(workers)
        job.proxies_exit()
        failed = job.get(f"/savepoints/{sp1}")
        assert failed["status"] == "FAILED" and JVM_EXITED in failed["error"], failed
        assert not os.path.exists(failed["path"])  # nothing half-written left behind
        job.until(lambda: job.checkpoints_after(job.latest_checkpoint()), what="running again")
        no_completion_after_the_restore_point(job)
        code, sp = request(job.url + "/savepoints", "POST", {"target_dir": str(tmp_path / "savepoints"),
                                                              "request_id": "sp-2"})
        assert code == 202, sp
        job.until(lambda: job.get("/savepoints/sp-2").get("status") not in (None, "QUEUED", "IN_PROGRESS"),
                  what="the retried savepoint")
        retried = job.get("/savepoints/sp-2")
        assert retried["status"] == "COMPLETED", retried
        assert os.path.exists(os.path.join(retried["path"].removeprefix("file://"), "_metadata"))

        # 3. Anywhere.
        time.sleep(rng.uniform(0.0, 2.0))
        workers = job.kill_jvm()
        job.until(lambda: job.lines_with(f"{JVM_EXITED}; starting a new one") == 3, what="the JVM's death noticed")
        assert dead(workers)
        job.proxies_exit()

        final: dict = {}
        # Read once: the final result, once read, ends the process's wait for a reader (rest.result-linger).
        job.until(lambda: final.update(job.get("/job")) or final.get("state") not in (None, "RUNNING", "RESTARTING"),
                  timeout=180, what="the input ends")
        assert final["state"] == "FINISHED" and final["restarts"] == 3, final
        assert job.proc.wait(60) == 0, job.stderr()[-3000:]
    finally:
        job.kill()
    assert committed_rows(job.out) == counting.expected_rows(rows)


def trace_events(path: str, pid: int) -> list[str]:
    """The driver's moments in its start-up trace (STREAMJOB_STARTUP_TRACE), in order."""
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return []
    return [line.split(" ", 2)[2] for line in lines if line.count(" ") >= 2 and line.split(" ", 2)[1] == str(pid)]


def kill_starting_jvm(job: Job, old: int, trace: str, after: float = 1.2) -> int:
    """SIGKILL the JVM that replaces the one with pid ``old`` while it starts: ``after`` s after its process
    appears (spark-submit's script has become ``java``), or as soon as the SparkContext's start on it
    begins, whichever comes first (so the kill lands inside the start on a fast machine too). Its pid."""
    def new_java() -> psutil.Process | None:
        try:
            found = [c for c in psutil.Process(job.proc.pid).children() if c.pid != old and c.name() == "java"]
        except psutil.NoSuchProcess:
            return None
        return found[0] if found else None

    holder: dict = {}
    job.until(lambda: holder.update(java=new_java()) or holder["java"] is not None, what="a new JVM")
    appeared = time.monotonic()
    restarts = trace_events(trace, job.proc.pid).count("jvm restart")
    assert restarts, "the new JVM was started by restart_jvm"

    def since_restart() -> list[str]:
        events = trace_events(trace, job.proc.pid)
        return events[len(events) - events[::-1].index("jvm restart"):]

    while time.monotonic() - appeared < after and "spark context start" not in since_restart():
        time.sleep(0.01)
    java = holder["java"]
    assert "spark context" not in since_restart(), "the new JVM had started already: the kill is not during its start"
    java.kill()
    return java.pid


def test_a_new_jvm_killed_while_it_starts_is_one_more_restart_and_output_is_exact(tmp_path):
    """The JVM dies, and so does its replacement while it starts (its process killed ~1.2 s after it
    appeared): that is one more failure for the restart strategy (counted, said as any, a third JVM
    started), not the job's end; the job finishes and its output is exact."""
    trace = str(tmp_path / "trace")
    rows = 20_000
    job = Job(tmp_path, rows, 2000, env={"STREAMJOB_STARTUP_TRACE": trace})
    try:
        job.until(lambda: job.checkpoints_after(1), what="the job runs and checkpoints")
        old = job.java().pid
        job.kill_jvm()
        job.until(lambda: job.lines_with(f"{JVM_EXITED}; starting a new one") == 1, what="the JVM's death noticed")
        kill_starting_jvm(job, old, trace)
        job.until(lambda: job.lines_with("the new Spark JVM exited while it started (killed by signal 9); starting a "
                                         "new one. Restarting from checkpoint") == 1,
                  what="the replacement's death noticed as an attempt's failure")
        # The third JVM runs the job to its end (restarts == 2, FINISHED): it may finish before any wait here.
        final: dict = {}
        job.until(lambda: final.update(job.get("/job")) or final.get("state") not in (None, "RUNNING", "RESTARTING"),
                  timeout=180, what="the input ends")
        assert final["state"] == "FINISHED" and final["restarts"] == 2, final
        assert job.proc.wait(60) == 0, job.stderr()[-3000:]
    finally:
        job.kill()
    stderr = job.stderr()
    assert "could not start" not in stderr and "Traceback" not in stderr, stderr[-3000:]
    assert committed_rows(job.out) == counting.expected_rows(rows)


def kill_every_new_jvm(job: Job, first: psutil.Process, killed: list[psutil.Process]) -> threading.Thread:
    """A thread that SIGKILLs every JVM of the job but ``first`` 0.4 s after its process appears (while it
    starts), appending each to ``killed``, until the job ends."""
    def run() -> None:
        seen: dict[int, float] = {}
        while job.proc.poll() is None:
            try:
                children = [c for c in psutil.Process(job.proc.pid).children() if c.name() == "java"]
            except psutil.NoSuchProcess:
                children = []
            for c in children:
                if c.pid == first.pid or c.pid in [k.pid for k in killed]:
                    continue
                if time.monotonic() - seen.setdefault(c.pid, time.monotonic()) >= 0.4:
                    try:
                        c.kill()
                    except psutil.NoSuchProcess:
                        continue
                    killed.append(c)
            time.sleep(0.02)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("attempts", [None, 2], ids=["in-a-row", "strategy-gives-up"])
def test_new_jvms_that_keep_dying_while_they_start_end_the_job_naming_the_cause(tmp_path, attempts):
    """Every new JVM is killed while it starts (~0.4 s after its process appears), as if it could never
    start. The restart strategy decides: the job's (fixed delay, 20 attempts) would allow 20 restarts,
    but 5 JVMs failing to start in a row, with no attempt run in between, is the environment or the
    configuration, and the job fails saying so; with 2 attempts the strategy gives up first. Either way
    the error names the cause, and the checkpoints are kept (the job did not end, its JVM was lost)."""
    env = {"COUNTING_RETENTION": "NO_EXTERNALIZED_CHECKPOINTS"}
    if attempts:
        env["COUNTING_RESTART_ATTEMPTS"] = str(attempts)
    job = Job(tmp_path, 100_000, 2000, linger="0", env=env)
    killed: list[psutil.Process] = []
    try:
        job.until(lambda: job.checkpoints_after(1), what="the job runs and checkpoints")
        first = job.java()
        killer = kill_every_new_jvm(job, first, killed)
        job.kill_jvm()
        assert job.proc.wait(180) == 1, job.stderr()[-3000:]
        killer.join(10)
    finally:
        job.kill()
    stderr = job.stderr()
    starting = "the new Spark JVM exited while it started (killed by signal 9)"
    if attempts is None:
        assert len(killed) == 5 and job.lines_with(f"{starting}; starting a new one") == 4, stderr[-3000:]
        assert (f"the Spark JVM exited (killed by signal 9) and a new one could not start 5 times in a row, without "
                f"an attempt running in between (last: {starting}). That is no passing failure but the JVM's "
                f"environment or configuration") in stderr, stderr[-3000:]
    else:
        assert len(killed) == 2 and job.lines_with(f"{starting}; starting a new one") == 1, stderr[-3000:]
        assert (f"failed (restart strategy fixed-delay (2 attempts, 100 ms) gave up after 2 restarts): the Spark JVM "
                f"exited (killed by signal 9) and a new one could not start: {starting}") in stderr, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    [job_dir] = os.listdir(job.checkpoints)
    assert [d for d in os.listdir(os.path.join(job.checkpoints, job_dir)) if d.startswith("chk-")], \
        "the checkpoints outlive the lost JVM"
    assert dead(killed + [first]), "no JVM of the run is left"


def test_sigterm_while_new_jvms_fail_to_start_ends_the_job_at_once_keeping_its_checkpoint(tmp_path):
    """No attempt runs while new JVMs fail to start, so there is nothing to drain: SIGTERM then ends the
    job at once (143, interrupted), keeping its latest checkpoint, instead of starting JVMs until the
    strategy gives up."""
    job = Job(tmp_path, 100_000, 2000, linger="0", env={"COUNTING_RETENTION": "NO_EXTERNALIZED_CHECKPOINTS"})
    killed: list[psutil.Process] = []
    try:
        job.until(lambda: job.checkpoints_after(1), what="the job runs and checkpoints")
        first = job.java()
        kill_every_new_jvm(job, first, killed)
        job.kill_jvm()
        job.until(lambda: job.lines_with("the new Spark JVM exited while it started") == 1, what="a failed start")
        job.proc.send_signal(signal.SIGTERM)
        assert job.proc.wait(60) == 143, job.stderr()[-3000:]
    finally:
        job.kill()
    stderr = job.stderr()
    assert "was interrupted by SIGTERM while a new Spark JVM was to start (no attempt was running)" in stderr, \
        stderr[-3000:]
    assert job.lines_with("the new Spark JVM exited while it started") <= 2, stderr[-3000:]
    assert re.search(r"Checkpoint \d+ retained at \S+/chk-\d+", stderr), stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]


def test_jvm_killed_during_stop_with_savepoint_fails_it_clearly_and_a_retry_stops_the_job(tmp_path):
    """A stop-with-savepoint in flight when the JVM dies fails, naming the JVM; the job restarts from
    its latest checkpoint and keeps running; the retried stop-with-savepoint ends it (FINISHED, the
    savepoint in the termination message), and a job resumed from that savepoint completes the output
    exactly."""
    stall = str(tmp_path / "stall")
    termination = tmp_path / "termination-log"
    rows = 30_000
    job = Job(tmp_path, rows, 2000, "--conf", f"kubernetes.termination-log={termination}",
              env={"COUNTING_STALL_FILE": stall})
    target = str(tmp_path / "savepoints")
    try:
        job.until(lambda: job.checkpoints_after(1), what="the job runs and checkpoints")
        open(stall, "w").close()
        code, sp = request(job.url + "/savepoints", "POST", {"target_dir": target, "stop": True, "request_id": "stop-1"})
        assert code == 202, sp
        job.until(lambda: job.get("/savepoints/stop-1").get("status") == "IN_PROGRESS", what="the savepoint in flight")
        workers = job.kill_jvm()
        job.until(lambda: job.lines_with(f"{JVM_EXITED}; starting a new one") == 1, what="the JVM's death noticed")
        os.remove(stall)
        assert dead(workers)
        job.proxies_exit()
        failed = job.get("/savepoints/stop-1")
        assert failed["status"] == "FAILED" and JVM_EXITED in failed["error"], failed
        job.until(lambda: job.checkpoints_after(job.latest_checkpoint()), what="running again")
        code, sp = request(job.url + "/savepoints", "POST", {"target_dir": target, "stop": True, "request_id": "stop-2"})
        assert code == 202, sp
        assert job.proc.wait(120) == 0, job.stderr()[-3000:]
    finally:
        job.kill()
    result = json.loads(termination.read_text())
    assert result["state"] == "FINISHED" and result["error"] is None, result
    assert result["final_savepoint"] == sp["path"]
    stopped_at = len(committed_rows(job.out))
    assert 0 < stopped_at < rows
    resumed = subprocess.run([sys.executable, "-m", "streamjob.runtime.cli", "run", JOB, job.out, job.checkpoints,
                              str(rows), "20000", "--no-progress", "--from-savepoint", sp["path"]],
                             capture_output=True, text=True, timeout=180)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert committed_rows(job.out) == counting.expected_rows(rows)


# -- a cluster master: the driver's JVM is the driver ---------------------------------------------------
SPARK_HOME = os.path.dirname(__import__("importlib.util").util.find_spec("pyspark").origin)


def _spark_daemon(log_path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "SPARK_HOME": SPARK_HOME, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_NO_DAEMONIZE": "1",
           # quicker to start, as the embedded local Spark's JVM (spark.LOCAL_JVM_OPTIONS)
           "SPARK_DAEMON_JAVA_OPTS": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC", "SPARK_DAEMON_MEMORY": "256m",
           # every port on loopback only; no REST submission server
           "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false", "SPARK_WORKER_OPTS": "-Dspark.worker.cleanup.enabled=false"}
    return subprocess.Popen([os.path.join(SPARK_HOME, "bin", "spark-class"), *args], env=env,
                            stdout=open(log_path, "w"), stderr=subprocess.STDOUT)


@pytest.fixture
def standalone_spark(tmp_path):
    """A Spark standalone master and one worker (3 cores) on 127.0.0.1, started by the test (the JVMs
    of pip's PySpark), stopped after it."""
    port = free_port()
    master_url = f"spark://127.0.0.1:{port}"
    logs = tmp_path / "spark-logs"
    logs.mkdir()
    master = _spark_daemon(logs / "master.log", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                           "--port", str(port), "--webui-port", str(free_port()))
    worker = _spark_daemon(logs / "worker.log", "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                           "--cores", "3", "--memory", "2g", "--webui-port", str(free_port()),
                           "--work-dir", str(tmp_path / "spark-work"), master_url)
    try:
        deadline = time.monotonic() + 120
        while "Registering worker" not in (logs / "master.log").read_text():
            assert master.poll() is None and worker.poll() is None and time.monotonic() < deadline, \
                (logs / "master.log").read_text()[-3000:] + (logs / "worker.log").read_text()[-3000:]
            time.sleep(0.2)
        yield master_url
    finally:
        for proc in (worker, master):  # the worker ends its executors as it stops
            proc.terminate()
        for proc in (worker, master):
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def test_on_a_cluster_master_the_jvm_s_death_fails_the_job_fast_and_keeps_its_checkpoints(standalone_spark, tmp_path):
    """On spark:// the driver's JVM is the Spark driver: a new one would be a new application without the
    job's executors. Its death fails the job at once with that message (REST, termination message),
    instead of retrying a dead gateway; even with NO_EXTERNALIZED_CHECKPOINTS the checkpoints stay (the
    driver crashed, the job did not end), and a run resumed from them completes the output exactly."""
    termination = tmp_path / "termination-log"
    rows = 30_000
    job = Job(tmp_path, rows, 1500, "--master", standalone_spark, "--conf", f"kubernetes.termination-log={termination}",
              "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.executor.memory=512m",
              "--conf", "spark.executor.extraJavaOptions=-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
              # the barrier stage starts once the worker's executor registered (else: not enough slots, restart)
              "--conf", "spark.scheduler.minRegisteredResourcesRatio=1.0",
              "--conf", "spark.scheduler.maxRegisteredResourcesWaitingTime=120s",
              "--conf", "spark.executorEnv.POD_IP=127.0.0.1", "--conf", "spark.executorEnv.STREAMJOB_BIND_HOST=127.0.0.1",
              linger="0",
              env={"STREAMJOB_BIND_HOST": "127.0.0.1", "SPARK_LOCAL_IP": "127.0.0.1",
                   "COUNTING_RETENTION": "NO_EXTERNALIZED_CHECKPOINTS"})
    try:
        job.until(lambda: job.checkpoints_after(2), timeout=180, what="the job runs on the cluster and checkpoints")
        job.kill_jvm(local=False)
        killed_at, before = time.monotonic(), len(job.lines)
        assert job.proc.wait(60) == 1, job.stderr()[-3000:]
        ended_in = time.monotonic() - killed_at
    finally:
        job.kill()
    stderr, after = job.stderr(), "".join(job.lines[before:])
    assert f"{JVM_EXITED}; it cannot be replaced on master {standalone_spark}" in after, stderr[-3000:]
    assert "Restarting" not in after and "Connection refused" not in after, stderr[-3000:]
    result = json.loads(termination.read_text())
    assert result["state"] == "FAILED" and JVM_EXITED in result["error"], result
    assert "its checkpoints are kept: resume from" in result["error"], result
    [job_dir] = os.listdir(job.checkpoints)
    kept = [d for d in os.listdir(os.path.join(job.checkpoints, job_dir)) if d.startswith("chk-")]
    assert kept, "the checkpoints outlive the driver"
    print(f"failed {ended_in:.1f} s after the kill")
    partial = len(committed_rows(job.out))
    assert partial < rows
    resumed = subprocess.run([sys.executable, "-m", "streamjob.runtime.cli", "run", JOB, job.out, job.checkpoints,
                              str(rows), "20000", "--no-progress", "--from-checkpoint",
                              os.path.join(job.checkpoints, job_dir)],
                             capture_output=True, text=True, timeout=180)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert committed_rows(job.out) == counting.expected_rows(rows)
