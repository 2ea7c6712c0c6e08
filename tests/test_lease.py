"""One live job per checkpoint directory: the job manager's lease (runtime/checkpoint/lease.py).

The decisions without I/O, the lease on a real local directory (a dead holder on this host is taken over
at once; one on another host is waited for: refused once it renews, taken over once it expires), and two
real jobs: a retained checkpoint resumed in claim mode while the job that wrote it still runs is refused,
naming that job, and the running job goes on to commit every row exactly once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import fsspec
import pytest

from streamjob.runtime.checkpoint import lease as L
from test_stop_resume import JOB, SLEEP_MS, START_TIMEOUT, _checkpoint_ids, committed, resume_to_the_end  # noqa: F401


def test_who_may_take_the_directory():
    me, now = "mine", 1000.0
    other = L.Holder("theirs", "j" * 32, "host-a", 123, "http://127.0.0.1:1", now - 1)
    alive, dead = (lambda pid: True), (lambda pid: False)
    assert L.problem(None, me, now, "host-a", alive) is None
    assert L.problem(L.Holder(me, "j", "host-a", 1, None, now), me, now, "host-a", alive) is None
    why = L.problem(other, me, now, "host-a", alive)
    assert why and f"job {'j' * 32} is running on this checkpoint directory (pid 123 on host-a, REST API " \
        "http://127.0.0.1:1; its lease was renewed 1 s ago)" in why and "claim-mode=NO_CLAIM" in why
    assert L.problem(other, me, now, "host-a", dead) is None  # its process is gone
    assert L.problem(other, me, now, "host-b", dead) is not None  # another host: its pid says nothing
    assert L.problem(other, me, now + L.EXPIRES_S + 2, "host-b", alive) is None  # stale


def _foreign(path: str, renewed: float, host: str = "elsewhere", pid: int = 1) -> None:
    with open(path, "w") as f:
        json.dump({"owner": "x", "job_id": "j" * 32, "host": host, "pid": pid, "rest": None, "renewed": renewed}, f)


def test_a_lease_on_a_real_directory(tmp_path, monkeypatch):
    monkeypatch.setattr(L, "EXPIRES_S", 2.0)
    fs = fsspec.filesystem("file")
    lease = L.JobLease(fs, str(tmp_path), "a" * 32)
    path = str(tmp_path / L.LEASE)
    # A holder on this host whose process is gone (kill -9): taken over at once.
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    _foreign(path, time.time(), host=lease.me.host, pid=dead.pid)
    lease.acquire()
    assert json.loads(open(path).read())["owner"] == lease.me.owner
    # Another host's holder that renews while this one waits: refused, naming it.
    _foreign(path, time.time())
    notes: list[str] = []
    renewer = threading.Timer(0.6, lambda: _foreign(path, time.time()))
    renewer.start()
    with pytest.raises(L.LeaseHeld, match="pid 1 on elsewhere"):
        L.JobLease(fs, str(tmp_path), "a" * 32).acquire(notes.append)
    assert "waiting up to 2 s for it to expire" in notes[0]
    # One that never renews: taken over once it expires.
    _foreign(path, time.time())
    started = time.monotonic()
    fresh = L.JobLease(fs, str(tmp_path), "a" * 32)
    fresh.acquire()
    assert time.monotonic() - started >= 1.5 and json.loads(open(path).read())["owner"] == fresh.me.owner
    # Renewed while held; a takeover is noticed and said; release leaves a foreign lease alone.
    monkeypatch.setattr(L, "RENEW_S", 0.2)
    lost: list[str] = []
    fresh.start(lost.append)
    time.sleep(0.5)
    assert json.loads(open(path).read())["renewed"] > time.time() - 1
    _foreign(path, time.time())
    deadline = time.monotonic() + 5
    while not lost and time.monotonic() < deadline:
        time.sleep(0.05)
    assert lost and "holds checkpoint directory" in lost[0] and fresh.lost == lost[0]
    fresh.release()
    assert os.path.exists(path)
    theirs = L.JobLease(fs, str(tmp_path), "a" * 32)
    os.remove(path)
    theirs.acquire()
    theirs.release()
    assert not os.path.exists(path)


@pytest.mark.spark
def test_resuming_a_running_jobs_checkpoint_in_claim_mode_is_refused_naming_it(tmp_path):
    rows = 2_000
    out, checkpoints, markers = tmp_path / "out", tmp_path / "checkpoints", tmp_path / "markers"
    env = {**os.environ, "RETENTION": "RETAIN_ON_CANCELLATION", "CHECKPOINT_MS": "500"}
    args = [str(out), str(checkpoints), str(rows), "5", "50", str(markers)]
    first = subprocess.Popen([sys.executable, "-m", "streamjob.runtime.cli", "run", str(JOB), "--no-progress",
                              "--", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while not _checkpoint_ids(checkpoints):
            assert first.poll() is None and time.monotonic() < deadline, first.communicate()
            time.sleep(0.05)
        job_id = next(checkpoints.iterdir()).name
        second = subprocess.run([sys.executable, "-m", "streamjob.runtime.cli", "run", str(JOB), "--no-progress",
                                 "--from-checkpoint", str(checkpoints / job_id), "--conf",
                                 "execution.state-recovery.claim-mode=CLAIM", "--", str(tmp_path / "out2"),
                                 str(checkpoints), str(rows), "0", "50", str(tmp_path / "m2")],
                                capture_output=True, text=True, timeout=300, env=env)
        assert second.returncode == 1, second.stderr
        error = [line for line in second.stderr.splitlines() if line.startswith("error:")]
        assert len(error) == 1 and f"job {job_id} is running on this checkpoint directory (pid {first.pid} on " \
            in error[0] and "checkpoint storage file://" in error[0], second.stderr
        assert not (tmp_path / "out2").exists() or not list((tmp_path / "out2").glob("part-*"))
        assert first.poll() is None  # untouched
        _, err = first.communicate(timeout=300)
        assert first.returncode == 0, err
    finally:
        if first.poll() is None:
            first.kill()
    assert committed(out) == list(range(rows))
    assert not (checkpoints / job_id / L.LEASE).exists()  # released at the end


def test_a_renewal_in_flight_when_the_job_ends_does_not_leave_the_lease_behind(tmp_path, monkeypatch):
    """The renewal thread is past its wait and about to write when release() runs: the release waits for
    that write and then removes the lease, so the finished job's directory ends empty."""
    monkeypatch.setattr(L, "RENEW_S", 0.05)
    fs = fsspec.filesystem("file")
    root = str(tmp_path / "job")
    os.makedirs(root)
    lease = L.JobLease(fs, root, "job-1")
    lease.acquire()
    writing, go_on = threading.Event(), threading.Event()
    write = lease._write

    def slow_write() -> None:  # the renewal's write, held until release() has begun
        writing.set()
        go_on.wait(5)
        write()

    monkeypatch.setattr(lease, "_write", slow_write)
    lease.start(lambda why: None)
    assert writing.wait(5)
    threading.Timer(0.2, go_on.set).start()
    lease.release()
    lease._thread.join(5)  # whatever the renewal was doing is done
    assert os.listdir(root) == []
