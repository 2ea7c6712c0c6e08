"""Stopping is exact, resuming is obvious: `streamjob run` in a real terminal (a pty from pexpect:
Ctrl-C is the terminal's ^C, delivered to the whole foreground process group, the JVM and the Python
workers included), SIGTERM, `streamjob stop`, and what each end says can be resumed.

The job is ``tests/jobs/slow_drain.py``: one source subtask, a map sleeping per record, the
exactly-once FileSink. A signal sent just as a batch begins leaves that batch to drain (BATCH * SLEEP_MS):
the slot reads the stop before its source's next step, so no batch after it. The committed output is
checked row for row: every record the source emitted (its count in the summary), none twice, no
in-progress file left.
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from streamjob.runtime.checkpoint.checksums import checksum
from streamjob.runtime.checkpoint.metadata import CheckpointFormatError, CheckpointMetadata
from streamjob.runtime.checkpoint.storage import find_checkpoints
from streamjob.runtime.cluster import resume
from streamjob.runtime.cluster.interrupts import Interrupts

JOB = Path(__file__).parent / "jobs" / "slow_drain.py"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
SLEEP_MS = 20
START_TIMEOUT = 240  # Spark's start on a busy 2-core machine


# -- in a terminal ------------------------------------------------------------------------------------
class Terminal:
    """`streamjob run tests/jobs/slow_drain.py ...` in a pseudo-terminal of its own (a new session: its
    process group is the terminal's foreground group, as in a shell)."""

    def __init__(self, tmp_path: Path, rows: int, batch: int, *extra: str, env: dict | None = None):
        import pexpect

        self.out, self.checkpoints, self.markers = tmp_path / "out", tmp_path / "checkpoints", tmp_path / "markers"
        self.batch = batch
        self.log = io.StringIO()
        self.child = pexpect.spawn(
            sys.executable, ["-m", "streamjob.runtime.cli", "run", str(JOB), "--no-progress", *extra, "--",
                             str(self.out), str(self.checkpoints), str(rows), str(SLEEP_MS), str(batch),
                             str(self.markers)],
            env={**os.environ, **(env or {})}, encoding="utf-8", codec_errors="replace", timeout=None,
            dimensions=(50, 400))
        self.child.logfile_read = self.log
        self._reader = threading.Thread(target=self._drain_output, daemon=True)
        self._reader.start()

    def _drain_output(self) -> None:
        import pexpect

        try:
            self.child.expect(pexpect.EOF)
        except Exception:  # noqa: BLE001 - the test reads what arrived
            pass

    def batch_starts(self) -> list[int]:
        return sorted(int(n) for n in os.listdir(self.markers)) if self.markers.exists() else []

    def wait_for_new_batch(self, after: int = 1) -> int:
        """Until a batch begins after ``after`` others have (the job runs), returns its first record."""
        deadline = time.monotonic() + START_TIMEOUT
        while len(self.batch_starts()) < after:
            assert self.child.isalive() and time.monotonic() < deadline, self.text()
            time.sleep(0.05)
        seen = self.batch_starts()[-1]
        while self.batch_starts()[-1] == seen:
            assert self.child.isalive() and time.monotonic() < deadline, self.text()
            time.sleep(0.01)
        return self.batch_starts()[-1]

    def ctrl_c(self) -> None:
        self.child.sendintr()  # the terminal's ^C: SIGINT to the foreground process group

    def wait(self, timeout: float = 180) -> int:
        self._reader.join(timeout)
        assert not self._reader.is_alive(), "streamjob run did not end:\n" + self.text()
        self.child.close()
        return self.child.exitstatus if self.child.exitstatus is not None else 128 + self.child.signalstatus

    def text(self) -> str:
        return ANSI.sub("", self.log.getvalue()).replace("\r", "")

    def rest_url(self) -> str:
        deadline = time.monotonic() + START_TIMEOUT
        while not (m := re.search(r"REST API and metrics at (http://\S+)", self.text())):
            assert self.child.isalive() and time.monotonic() < deadline, self.text()
            time.sleep(0.05)
        return m.group(1)


@pytest.fixture
def terminal():
    """Makes Terminals; whatever still runs when the test ends (it failed) is killed, its whole process
    group (the session pexpect made: the JVM and the task processes too)."""
    made: list[Terminal] = []

    def make(*args, **kwargs) -> Terminal:
        made.append(Terminal(*args, **kwargs))
        return made[-1]

    yield make
    for term in made:
        try:
            os.killpg(term.child.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def committed(out: Path) -> list[int]:
    return sorted(json.loads(line)["seq"] for f in out.glob("part-*") for line in f.read_text().splitlines())


def source_count(text: str) -> int:
    line = next(line for line in text.splitlines() if "Source: numbers" in line)
    return int(line.split("│")[2].strip().replace(",", ""))


def assert_everything_committed(term: Terminal, in_flight_batch: int) -> list[int]:
    rows = committed(term.out)
    text = term.text()
    emitted = source_count(text)
    assert rows == list(range(emitted)), f"committed {len(rows)} rows, the source emitted {emitted}:\n{text}"
    # The batch the signal interrupted drained whole.
    assert emitted >= in_flight_batch + term.batch, text
    leftovers = [p.name for p in term.out.iterdir() if not p.name.startswith("part-")]
    assert not leftovers, f"in-progress or pending files left behind: {leftovers}"
    return rows


@pytest.mark.spark
@pytest.mark.parametrize("batch", [300, 10], ids=["drain-longer-than-5s", "drain-short"])
def test_one_ctrl_c_drains_and_commits_every_row(terminal, tmp_path, batch):
    rows = 3_000  # a minute of work at 20 ms a row: stopped long before its end
    term = terminal(tmp_path, rows, batch)
    first = term.wait_for_new_batch()
    term.ctrl_c()
    signalled = time.monotonic()
    code = term.wait()
    drained = time.monotonic() - signalled
    text = term.text()
    assert code == 0, text
    assert "Stopping (Ctrl-C)" in text and "Job 'slow drain' finished" in text
    assert_everything_committed(term, first)
    assert re.search(r"Stopped by Ctrl-C: every record the sources emitted was processed, and the output "
                     r"committed with final checkpoint \d+", text), text
    # Under the default retention (NO_EXTERNALIZED_CHECKPOINTS) too, the stop's final checkpoint stays,
    # named with the command that resumes from it.
    m = re.search(r"Final checkpoint (\d+) retained at (\S+/chk-\d+) \(a graceful stop keeps it whatever the "
                  r"retention\): resume with `streamjob run \S+ --from-checkpoint (\S+) ", text)
    assert m and m.group(2) == m.group(3), text
    assert [p.name for p in term.checkpoints.glob("*/chk-*/_metadata")] == ["_metadata"]
    assert os.path.exists(os.path.join(m.group(2), "_metadata"))
    if batch == 300:
        # The stop reached the source while that batch (6 s) ran, and the source saw it before its next
        # step: the drain carried that batch and nothing after it.
        assert source_count(text) == first + batch, text
        # The batch that had just begun drained whole: 300 rows at 20 ms at least, longer than the 5 s after
        # which the run used to be declared finished while it still drained.
        assert drained > 5.0, f"drained in {drained:.1f} s"
        # The stop is exact: resumed from its final checkpoint, the two runs commit every row once.
        assert len(committed(term.out)) < rows
        resume_to_the_end(term, tmp_path, m.group(2), rows)


@pytest.mark.spark
def test_sigterm_drains_commits_and_says_so(terminal, tmp_path):
    term = terminal(tmp_path, 1_000_000, 100)
    first = term.wait_for_new_batch()
    os.kill(term.child.pid, signal.SIGTERM)  # as kill or a container stop sends it: to the driver only
    code = term.wait()
    text = term.text()
    assert code == 0, text
    assert "Stopping (SIGTERM)" in text and "Stopped by SIGTERM" in text
    assert_everything_committed(term, first)


@pytest.mark.spark
def test_sigterm_to_the_whole_process_group_is_one_graceful_stop(terminal, tmp_path):
    """What `timeout`, a supervisor and `kill -TERM -PGID` send: SIGTERM to every process of the group.
    The JVM and the Python workers run in a process group of their own, so only the driver gets it: one
    graceful stop, as SIGTERM to the driver alone, not a JVM exit and dead tasks (two failures and a new
    JVM) before it."""
    term = terminal(tmp_path, 1_000_000, 100)
    first = term.wait_for_new_batch()
    os.killpg(os.getpgid(term.child.pid), signal.SIGTERM)
    code = term.wait()
    text = term.text()
    assert code == 0, text
    assert "Stopping (SIGTERM)" in text and "Stopped by SIGTERM" in text
    assert not re.search(r"Attempt \d+ failed|Restarting|starting a new one", text), text
    assert_everything_committed(term, first)


@pytest.mark.spark
def test_streamjob_stop_drains_and_commits_every_row(terminal, tmp_path):
    term = terminal(tmp_path, 1_000_000, 100)
    url = term.rest_url()
    first = term.wait_for_new_batch()
    r = subprocess.run([sys.executable, "-m", "streamjob.runtime.cli", "stop", "--address", url],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    code = term.wait()
    text = term.text()
    assert code == 0, text
    assert "Stopped by streamjob stop" in text
    assert_everything_committed(term, first)


@pytest.mark.spark
@pytest.mark.parametrize("execute", ["execute", "execute_async"])
def test_second_ctrl_c_cancels_keeps_the_checkpoint_and_the_base_directory_resumes_it(terminal, tmp_path, execute):
    """Ctrl-C twice during a long drain: canceled, exit 130, the latest checkpoint kept (the default
    retention would delete it) and named with the command that resumes it; that command, given the
    base checkpoint directory instead, resumes the newest job's newest checkpoint, and the two runs
    together commit every row exactly once. The same for a job the program started with
    execute_async (streamjob run waits for it, and its main thread gets the signals)."""
    rows = 3_000
    term = terminal(tmp_path, rows, 100, env={"EXECUTE_ASYNC": "1"} if execute == "execute_async" else None)
    deadline = time.monotonic() + START_TIMEOUT
    while not any(term.checkpoints.glob("*/chk-*/_metadata")):  # a checkpoint (every 2 s) completed
        assert term.child.isalive() and time.monotonic() < deadline, term.text()
        time.sleep(0.05)
    term.wait_for_new_batch()
    term.ctrl_c()
    time.sleep(0.5)  # the batch that just began drains for 100 * 20 ms at least: still draining
    term.ctrl_c()
    code = term.wait()
    text = term.text()
    assert code == 130, text
    assert "Ctrl-C again: canceling" in text and "was canceled by Ctrl-C during its graceful stop" in text
    m = re.search(r"Checkpoint (\d+) retained at (\S+/chk-\d+) \(kept whatever the retention: the run was "
                  r"interrupted\): resume with `([^`]+)`", text)
    assert m, text
    assert os.path.exists(os.path.join(m.group(2), "_metadata"))
    assert m.group(3) == f"streamjob run {os.path.relpath(JOB)} --from-checkpoint {m.group(2)} " \
        f"{term.out} {term.checkpoints} {rows} {SLEEP_MS} 100 {term.markers}"
    before = committed(term.out)
    assert before == list(range(len(before))) and len(before) < rows

    # Resume from the base directory (the job's id is not needed).
    stderr = resume_to_the_end(term, tmp_path, str(term.checkpoints), rows)
    assert f"Restoring from checkpoint {m.group(1)} at file://{m.group(2)}" in stderr


def _checkpoint_ids(root: Path) -> set[int]:
    return {int(p.parent.name.split("-")[1]) for p in root.glob("*/chk-*/_metadata")}


def _rest_cancel(url: str) -> dict:
    """POST /v1/cancel as any REST client sends it, then GET /v1/job until the job's end (end_time)."""
    import urllib.request

    request = urllib.request.Request(url + "/v1/cancel?wait=true", method="POST", data=b"")
    with urllib.request.urlopen(request, timeout=30) as r:
        assert r.status == 202 and json.load(r)["state"] == "CANCELING"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        with urllib.request.urlopen(url + "/v1/job", timeout=30) as r:
            doc = json.load(r)
        if doc["end_time"] is not None:
            return doc
        assert doc["state"] in ("RUNNING", "CANCELED"), doc
        time.sleep(0.1)
    raise AssertionError("the canceled job did not end")


@pytest.mark.spark
@pytest.mark.parametrize("how", ["cli", "rest"])
def test_cancel_with_checkpoints_in_flight_completes_nothing_after_it_and_resumes_exactly(terminal, tmp_path, how):
    """`streamjob cancel` and POST /v1/cancel fence the attempt before they answer: with a checkpoint every
    0.3 s and a slow map before the exactly-once FileSink (checkpoints in flight at any moment), no
    checkpoint completes after the cancel, so the one the job's end names is its newest and still exists
    (retention would delete it once a later one completed), and resuming it with the printed command commits
    every row exactly once. It used to complete 4 more checkpoints, commit their output, and name a deleted one."""
    rows = 3_000
    term = terminal(tmp_path, rows, 10, "-p", "1",
                    env={"RETENTION": "RETAIN_ON_CANCELLATION", "CHECKPOINT_MS": "300"})
    url = term.rest_url()
    deadline = time.monotonic() + START_TIMEOUT
    while max(_checkpoint_ids(term.checkpoints), default=0) < 3:
        assert term.child.isalive() and time.monotonic() < deadline, term.text()
        time.sleep(0.05)
    if how == "cli":
        r = subprocess.run([sys.executable, "-m", "streamjob.runtime.cli", "cancel", "--address", url],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        answered = r.stdout
    else:
        doc = _rest_cancel(url)
        answered = f"{doc['state']}\n{doc['resume']}"
    assert "CANCELED" in answered, answered
    m = re.search(r"Checkpoint (\d+) retained at (\S+/chk-\d+): resume with `([^`]+)`", answered)
    assert m, answered
    named = int(m.group(1))
    # The job's own options and arguments are in the command: following it runs the same job.
    assert m.group(3) == f"streamjob run {os.path.relpath(JOB)} -p 1 --from-checkpoint {m.group(2)} " \
        f"{term.out} {term.checkpoints} {rows} {SLEEP_MS} 10 {term.markers}", m.group(3)
    assert term.wait() == 1
    ids = _checkpoint_ids(term.checkpoints)
    assert max(ids) == named, f"checkpoints {sorted(ids)} after naming {named}:\n{term.text()}"
    assert os.path.exists(os.path.join(m.group(2), "_metadata"))
    before = committed(term.out)
    assert before == list(range(len(before))) and len(before) < rows
    resume_to_the_end(term, tmp_path, m.group(2), rows)


def resume_to_the_end(term: Terminal, tmp_path: Path, from_checkpoint: str, rows: int) -> str:
    """A second run from ``from_checkpoint``, the map fast this time, to the end of the input: the two
    runs' committed output is every row once."""
    r = subprocess.run([sys.executable, "-m", "streamjob.runtime.cli", "run", str(JOB), "--no-progress",
                        "--from-checkpoint", from_checkpoint, "--", str(term.out), str(tmp_path / "ck2"),
                        str(rows), "0", "100", str(term.markers)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert committed(term.out) == list(range(rows))
    return r.stderr


# -- without Spark ------------------------------------------------------------------------------------
def _metadata(root: Path, job_id: str, n: int, completed_ms: int, operators: dict | None = None,
              job_name: str = "job", kind: str = "checkpoint") -> Path:
    path = root / job_id / f"chk-{n}" if kind == "checkpoint" else root
    path.mkdir(parents=True, exist_ok=True)
    meta = CheckpointMetadata(n, job_id, job_name, completed_ms, 1, 128, operators or {}, kind=kind,
                              completed_ms=completed_ms)
    (path / "_metadata").write_bytes(meta.to_json())
    return path


def test_from_checkpoint_takes_the_base_directory_newest_job_newest_checkpoint(tmp_path):
    base = tmp_path / "checkpoints"
    _metadata(base, "aaaa", 3, 1_000)
    _metadata(base, "aaaa", 9, 9_000)  # the newest checkpoint of all: job aaaa is the newest job
    _metadata(base, "bbbb", 12, 5_000)
    (base / "bbbb" / "chk-13").mkdir()  # in progress: no _metadata
    (base / "cccc" / "shared").mkdir(parents=True)  # a job without a completed checkpoint
    assert find_checkpoints(str(base)) == [f"file://{base}/aaaa/chk-9", f"file://{base}/aaaa/chk-3"]
    # A job's directory and a checkpoint as before.
    assert find_checkpoints(str(base / "bbbb")) == [f"file://{base}/bbbb/chk-12"]
    assert find_checkpoints(str(base / "bbbb" / "chk-12")) == [f"file://{base}/bbbb/chk-12"]
    with pytest.raises(CheckpointFormatError, match="contains no completed checkpoint"):
        find_checkpoints(str(base / "cccc"))
    empty = tmp_path / "empty"
    (empty / "dddd" / "chk-1").mkdir(parents=True)
    with pytest.raises(CheckpointFormatError, match=r"no chk-<n>/_metadata, nor <job id>/chk-<n>/_metadata"):
        find_checkpoints(str(empty))


def test_a_savepoint_of_another_job_names_it_and_suggests_uid_in_one_line(tmp_path):
    """Restoring a savepoint of another job into tests/jobs/slow_drain.py: its operators line up by
    uid 'slow' with keyed state the map here cannot take. Refused before Spark runs, in one line."""
    empty = checksum(b"")  # inline handles holding nothing: the check happens before anything is read
    keyed = {"data": "", "crc32c": empty, "index": {"keyed": {"count": {"groups": {"3": [0, 8]}}}}}
    savepoint = _metadata(tmp_path / "savepoint-users-1", "4f1c0ffee", 7, 1_000, job_name="user counts",
                          kind="savepoint", operators={
                              "slow": {"name": "count per user", "subtasks": [keyed]},
                              "counter": {"name": "totals", "subtasks": [{"data": "", "crc32c": empty, "index": {}}]}})
    args = [sys.executable, "-m", "streamjob.runtime.cli", "run", str(JOB), "--no-progress", "--from-savepoint",
            str(savepoint), "--", str(tmp_path / "out"), str(tmp_path / "ck"), "10", "0", "10", str(tmp_path / "m")]
    r = subprocess.run(args, capture_output=True, text=True, timeout=180)
    assert r.returncode == 1
    assert "Traceback" not in r.stderr and "During handling" not in r.stderr
    assert r.stderr.count(str(savepoint)) == 1, r.stderr
    message = " ".join(r.stderr.split())  # rich may wrap it on a narrow terminal
    assert "was taken of job 'user counts' (4f1c0ffee)" in message, message
    assert "uid 'slow' (count per user, keyed)" in message and "uid 'counter' (totals)" in message
    assert "uid 'slow' holds keyed state, but this job's operator 'slow' with that uid is not keyed" in message
    assert "no operator of this job has uid 'counter'" in message
    assert ".uid(" in message and "--allow-non-restored-state" in message


def test_every_ending_names_what_can_be_resumed():
    argv = ["jobs/counts.py", "out"]
    stopped = resume.Ending("FINISHED", True, "NO_EXTERNALIZED_CHECKPOINTS", True, 9, "file:///ck/j/chk-9",
                            stopped=True)
    assert resume.describe(stopped, argv) == (
        "Final checkpoint 9 retained at /ck/j/chk-9 (a graceful stop keeps it whatever the retention): resume "
        "with `streamjob run jobs/counts.py --from-checkpoint /ck/j/chk-9 out`")
    kept = resume.Ending("FAILED", True, "RETAIN_ON_CANCELLATION", True, 7, "file:///ck/j/chk-7")
    assert resume.describe(kept, argv) == ("Checkpoint 7 retained at /ck/j/chk-7: resume with "
                                           "`streamjob run jobs/counts.py --from-checkpoint /ck/j/chk-7 out`")
    deleted = resume.Ending("CANCELED", True, "NO_EXTERNALIZED_CHECKPOINTS", False, 7, "file:///ck/j/chk-7")
    assert "deleted (execution.checkpointing.externalized-checkpoint-retention=NO_EXTERNALIZED_CHECKPOINTS)" \
        in resume.describe(deleted, argv)
    none_yet = resume.Ending("CANCELED", True, "RETAIN_ON_CANCELLATION", True)
    assert resume.describe(none_yet, argv).startswith("No checkpoint had completed")
    unchecked = resume.Ending("CANCELED", False, "", False)
    assert "without checkpointing" in resume.describe(unchecked, argv)
    savepoint = resume.Ending("FINISHED", True, "NO_EXTERNALIZED_CHECKPOINTS", False, 7, "file:///ck/j/chk-7",
                              savepoint="s3://b/sp/savepoint-1")
    assert resume.describe(savepoint, ["job.py", "-x"]) == (
        "Final savepoint at s3://b/sp/savepoint-1: resume with "
        "`streamjob run job.py --from-savepoint s3://b/sp/savepoint-1 -- -x`")
    ran_out = resume.Ending("FINISHED", True, "NO_EXTERNALIZED_CHECKPOINTS", False, 7, "file:///ck/j/chk-7")
    assert resume.describe(ran_out, argv) is None  # it ran to the end of its input: nothing to say
    # Never a command that cannot work: a checkpoint in memory:// storage ended with the process, and one
    # a restore refused is not named as the one to resume (an older one is, with the flag that allows it).
    memory = resume.Ending("FINISHED", True, "NO_EXTERNALIZED_CHECKPOINTS", True, 4, "memory://ck/j/chk-4", stopped=True)
    assert resume.describe(memory, argv).startswith("Nothing to resume from: checkpoint 4 was kept in memory")
    damaged = resume.Ending("FAILED", True, "RETAIN_ON_CANCELLATION", True, 7, "file:///ck/j/chk-7", damaged=(7,))
    assert resume.describe(damaged, argv) == (
        "Checkpoint 7 at /ck/j/chk-7 cannot be restored (see above): resume from an older one with `streamjob run "
        "jobs/counts.py --allow-older-checkpoint --from-checkpoint /ck/j out`, accepting that the output it "
        "committed is written again")
    # The run's own options come along: following the hint after `streamjob run -p 2` does not rescale to 1.
    resume.run_options[:] = ["-p", "2", "--conf", "a=b c"]
    try:
        assert resume.describe(kept, argv) == ("Checkpoint 7 retained at /ck/j/chk-7: resume with `streamjob run "
                                               "jobs/counts.py -p 2 --conf 'a=b c' --from-checkpoint /ck/j/chk-7 out`")
    finally:
        resume.run_options[:] = []


def test_signals_are_counted_not_raised_and_the_attempt_end_survives_them():
    """bpo-45274: a join() interrupted by a signal made CPython 3.11 report a running thread as
    stopped. The attempt's end is an Event set by the thread itself; a stand-in deployment whose stage
    blocks until released plays Spark's part (only the thread's life matters here)."""
    from streamjob.runtime.cluster.executor import _Attempt

    release = threading.Event()

    class Stage:
        def run_stage(self, *args):
            release.wait(30)

    attempt = _Attempt(Stage(), "job", 0, "name", b"", ("127.0.0.1", 1))
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    interrupts = Interrupts()
    with interrupts:
        threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)).start()
        threading.Timer(0.4, os.kill, (os.getpid(), signal.SIGTERM)).start()
        deadline = time.monotonic() + 10
        while interrupts.count < 2 and time.monotonic() < deadline:
            attempt.join(0.05)
        assert interrupts.signals == [signal.SIGINT, signal.SIGTERM]
        assert attempt.alive()
    # Put back as found, except PySpark's job-cancelling SIGINT handler (a SparkContext an earlier test of this
    # process made installs it): that one gives way to Python's KeyboardInterrupt (Interrupts.restore).
    expected = tuple(signal.default_int_handler if getattr(h, "__qualname__", "").startswith("SparkContext") else h
                     for h in before)
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == expected
    # Even a KeyboardInterrupt raised inside the wait leaves the attempt running, as it is.
    threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)).start()
    with pytest.raises(KeyboardInterrupt):
        attempt.join(5)
    assert attempt.alive()
    release.set()
    attempt.join(5)
    assert not attempt.alive()


@pytest.mark.parametrize("signum, code, name", [(signal.SIGTERM, 143, "SIGTERM"), (signal.SIGINT, 130, "Ctrl-C")])
def test_a_signal_before_any_job_runs_ends_the_run_saying_so(tmp_path, signum, code, name):
    """SIGTERM no longer ends `streamjob run` silently: outside a running job (here in the job file's own
    code, before it builds anything) it ends as Ctrl-C does, with one line."""
    job = tmp_path / "slow_start.py"
    job.write_text("import pathlib, sys, time\npathlib.Path(sys.argv[1]).touch()\ntime.sleep(120)\n")
    ready = tmp_path / "ready"
    proc = subprocess.Popen([sys.executable, "-m", "streamjob.runtime.cli", "run", str(job), str(ready)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not ready.exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signum)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == code, stderr
    assert f"interrupted by {name} while no job was running" in stderr
    assert "Traceback" not in stderr


@pytest.mark.spark
def test_pyspark_sigint_handler_does_not_outlive_a_job(spark_slots):
    """PySpark's SparkContext, made in the main thread, installs a SIGINT handler that cancels every
    Spark job; a job run here replaces it while it runs and leaves Python's own in its place."""
    from pyspark import SparkContext

    from streamjob.runtime import StreamExecutionEnvironment
    from streamjob.runtime.connectors import DataGenSource, DiscardingSink

    current = signal.getsignal(signal.SIGINT)
    if not getattr(current, "__qualname__", "").startswith("SparkContext"):  # an earlier job already replaced it

        def signal_handler(signum, frame):  # as PySpark's (pyspark/core/context.py), under its name
            SparkContext._active_spark_context.cancelAllJobs()
            raise KeyboardInterrupt

        signal_handler.__qualname__ = "SparkContext._do_init.<locals>.signal_handler"
        signal.signal(signal.SIGINT, signal_handler)
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.from_source(DataGenSource(lambda i: i, count=10)).sink_to(DiscardingSink())
    env.execute("handlers")
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_the_stop_note_promises_a_checkpoint_only_when_the_job_takes_them():
    from types import SimpleNamespace

    from streamjob.runtime.cluster.executor import _stopping_note

    off = SimpleNamespace(settings=SimpleNamespace(enabled=False), latest=lambda: None)
    on = SimpleNamespace(settings=SimpleNamespace(enabled=True), latest=lambda: SimpleNamespace(checkpoint_id=5))
    assert _stopping_note(signal.SIGINT, off) == ("Stopping (Ctrl-C): sources end, in-flight records drain, sinks "
                                                  "flush. Ctrl-C again cancels")
    assert _stopping_note(signal.SIGINT, on).endswith("the final checkpoint commits. Ctrl-C again cancels, "
                                                      "keeping checkpoint 5")
