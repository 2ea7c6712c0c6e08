"""Checkpoints and savepoints on s3:// through s3fs, against a real S3 API server (moto's server in
a subprocess on 127.0.0.1, behind a proxy the test takes down for an outage).

Credentials come from the standard AWS variables (set in conftest before Spark starts); the
endpoint from the job configuration (``s3.endpoint``) in-process, and from the standard
``AWS_ENDPOINT_URL_S3`` variable in the CLI run.
"""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.error
import urllib.request

import pytest

from conftest import run_cli
from jobs import counting
from s3server import MotoServer, Proxy, free_port
from test_checkpointing import committed_rows

HERE = os.path.dirname(__file__)


@pytest.fixture
def s3():
    server = MotoServer()
    proxy = Proxy(server.port)
    client = server.client()
    for bucket in ("checkpoints", "savepoints", "archive"):
        client.create_bucket(Bucket=bucket)
    yield server, proxy, client
    proxy.close()
    server.close()


def keys(client, bucket: str, prefix: str = "") -> list[str]:
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return [o["Key"] for page in pages for o in page.get("Contents", [])]


def test_savepoint_on_s3_moved_to_another_bucket_restores(spark_slots, s3, tmp_path):
    server, proxy, client = s3
    out, rows = str(tmp_path / "out"), 12_000
    env = counting.build(out, "s3://checkpoints/jobs", rows, 4_000, interval_ms=250, parallelism=2,
                         conf={"s3.endpoint": proxy.url})
    job = env.execute_async("counting")
    assert job.wait_until_running(60)
    deadline = time.monotonic() + 60
    while job.job_manager.coordinator.counts["COMPLETED"] < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert keys(client, "checkpoints", f"jobs/{job.job_id}/chk-"), "checkpoints are written to the bucket"
    path = job.stop_with_savepoint(False, "s3://savepoints/sp", timeout=120)
    job.get_job_execution_result(120)
    assert path.startswith("s3://savepoints/sp/savepoint-")
    partial = len(committed_rows(out))
    assert 0 < partial < rows

    # Move it: copy every object to another bucket and prefix, delete the originals.
    prefix = path.removeprefix("s3://savepoints/")
    moved = keys(client, "savepoints", prefix)
    assert f"{prefix}/_metadata" in moved
    for key in moved:
        client.copy_object(Bucket="archive", Key="moved/" + key.split("/")[-1],
                           CopySource={"Bucket": "savepoints", "Key": key})
        client.delete_object(Bucket="savepoints", Key=key)

    # Resume from the other bucket at parallelism 3, in a fresh process that finds the endpoint in
    # the standard AWS_ENDPOINT_URL_S3 variable.
    proc = run_cli("run", os.path.join(HERE, "jobs", "counting.py"), out, "s3://checkpoints/jobs", str(rows), "4000",
                   "--from-savepoint", "s3://archive/moved", "--no-progress",
                   env={"AWS_ENDPOINT_URL_S3": proxy.url}, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Restoring from savepoint" in proc.stderr and "rescaling from parallelism 2 to 3" in proc.stderr
    assert committed_rows(out) == counting.expected_rows(rows)
    assert keys(client, "archive", "moved/")  # the job never deletes a savepoint it started from
    assert not keys(client, "checkpoints", "jobs/"), "a FINISHED job leaves no checkpoints behind"

    proc = run_cli("savepoint", "--dispose", "s3://archive/moved", env={"AWS_ENDPOINT_URL_S3": proxy.url}, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert not keys(client, "archive", "moved/")


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


S3_FAST_FAIL = {"s3.connect-timeout": "1 s", "s3.read-timeout": "3 s", "s3.max-attempts": 1,
                "execution.checkpointing.timeout": "4 s"}


def test_s3_outage_fails_checkpoints_the_job_runs_on_and_recovers(spark_slots, s3, tmp_path):
    server, proxy, client = s3
    out, rows = str(tmp_path / "out"), 50_000  # 25 s of input: the outage and the recovery fit well inside
    env = counting.build(out, "s3://checkpoints/jobs", rows, 2_000, interval_ms=200, parallelism=2,
                         conf={"s3.endpoint": proxy.url, "execution.checkpointing.tolerable-failed-checkpoints": 1000,
                               **S3_FAST_FAIL})
    job = env.execute_async("counting")
    assert job.wait_until_running(60)
    cc = job.job_manager.coordinator
    wait_for(lambda: cc.counts["COMPLETED"] >= 2, 60, "two checkpoints")
    proxy.down()
    failed_before, completed_at_outage = cc.counts["FAILED"], cc.counts["COMPLETED"]
    wait_for(lambda: cc.counts["FAILED"] >= failed_before + 3, 60, "checkpoints failing in the outage")
    assert job.get_job_status() == "RUNNING" and job.job_manager.restarts == 0
    failures = [h.failure for h in cc.history if h.status == "FAILED"]
    assert all(f for f in failures)
    proxy.up()
    wait_for(lambda: cc.counts["COMPLETED"] >= completed_at_outage + 3, 60, "checkpoints completing again")
    assert not job._finished.is_set(), "the input ran out before the test saw recovery"
    result = job.get_job_execution_result(180)
    assert result.restarts == 0
    assert committed_rows(out) == counting.expected_rows(rows)


def test_s3_outage_beyond_tolerable_failures_restarts_from_s3(spark_slots, s3, tmp_path):
    server, proxy, client = s3
    out, rows = str(tmp_path / "out"), 40_000
    env = counting.build(out, "s3://checkpoints/jobs", rows, 5_000, interval_ms=200, parallelism=2,
                         conf={"s3.endpoint": proxy.url, "execution.checkpointing.tolerable-failed-checkpoints": 1,
                               **S3_FAST_FAIL})
    job = env.execute_async("counting")
    assert job.wait_until_running(60)
    jm = job.job_manager
    cc = jm.coordinator
    wait_for(lambda: cc.counts["COMPLETED"] >= 2, 60, "two checkpoints")
    proxy.down()
    wait_for(lambda: jm.restarts >= 1, 60, "the job to fail over after 2 failed checkpoints")
    time.sleep(1.0)
    proxy.up()
    result = job.get_job_execution_result(240)
    assert result.restarts >= 1
    assert any("checkpoints in a row failed" in f.error for f in jm.all_failures)
    assert committed_rows(out) == counting.expected_rows(rows)
    restored = jm.restored_info()
    assert restored is not None and restored["path"].startswith("s3://checkpoints/jobs/")


def probe(url: str, path: str) -> tuple[float, int, bytes]:
    """GET ``url + path``: (seconds it took, status, body); a client that waits at most 5 s."""
    started = time.monotonic()
    try:
        with urllib.request.urlopen(url + path, timeout=5) as response:
            return time.monotonic() - started, response.status, response.read()
    except (OSError, urllib.error.URLError) as e:
        return time.monotonic() - started, 0, repr(e).encode()


HANG_S = 20.0


def test_hung_s3_never_stalls_rest_metrics_or_the_control_channel(spark_slots, s3, tmp_path):
    """The S3 server is stopped (SIGSTOP: connections are accepted, no request is answered, as a hung
    endpoint) for HANG_S while a client probes the REST API and /metrics once a second: each answers
    within a second, the tasks' reports keep arriving, the checkpoints of the hang fail at the checkpoint
    timeout naming the _metadata write, and once the store answers again checkpoints complete and the
    output is exact, without a restart.

    HANG_S is 20 s, not the 60 s of the issue: what matters is that the hang outlasts every timeout on the
    job manager's path but S3's read timeout (60 s by default, kept here), so a _metadata write stays
    blocked for the whole hang; 20 s is 5 checkpoint timeouts (3 failures are asserted) and keeps the
    test well under a minute."""
    server, proxy, client = s3
    out, rate = str(tmp_path / "out"), 2_000
    rows = int(rate * (HANG_S + 18))  # the input outlasts start-up, the hang and the recovery
    env = counting.build(out, "s3://checkpoints/jobs", rows, rate, interval_ms=300, parallelism=2,
                         conf={"s3.endpoint": proxy.url, "execution.checkpointing.timeout": "4 s",
                               "execution.checkpointing.tolerable-failed-checkpoints": 1000,
                               "rest.address": f"127.0.0.1:{free_port()}"})
    job = env.execute_async("counting")
    assert job.wait_until_running(60)
    jm = job.job_manager
    cc = jm.coordinator
    wait_for(lambda: cc.counts["COMPLETED"] >= 2, 60, "two checkpoints")
    url = jm.rest.url

    def records_in(body: bytes) -> int:
        doc = json.loads(body)
        return sum(op["records_in"] for v in doc["vertices"] for op in v["operators"])

    probes: list[tuple[str, float, int, bytes]] = []
    os.kill(server.proc.pid, signal.SIGSTOP)
    hang_started = time.monotonic()
    try:
        completed_at_hang = cc.counts["COMPLETED"]
        while time.monotonic() - hang_started < HANG_S:
            tick = time.monotonic()
            for path in ("/v1/job?peek=true", "/v1/checkpoints?limit=5", "/metrics"):
                probes.append((path, *probe(url, path)))
            time.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))
        completed_in_hang = cc.counts["COMPLETED"] - completed_at_hang
    finally:
        os.kill(server.proc.pid, signal.SIGCONT)
    slow = [(path, round(seconds, 2), status) for path, seconds, status, _ in probes if seconds >= 1.0 or status != 200]
    assert not slow, f"{len(slow)} of {len(probes)} probes took 1 s or more, or failed: {slow[:10]}"
    assert len(probes) >= 3 * (HANG_S - 3)
    assert completed_in_hang == 0, "no checkpoint can complete while its _metadata cannot be written"
    # The control channel was served: the tasks' metric reports kept coming (records counted on)...
    counted = [records_in(body) for path, _, _, body in probes if path.startswith("/v1/job")]
    assert counted[-1] > counted[0] + rate * (HANG_S / 2), counted
    # ... and so did their acknowledgements: checkpoints of the hang failed while writing _metadata.
    writing = [h for h in cc.history if h.status == "FAILED" and h.failure and "while writing" in h.failure]
    assert len(writing) >= 3, [h.failure for h in cc.history if h.status == "FAILED"]
    assert "_metadata: the checkpoint storage did not answer" in writing[0].failure
    assert b"streamjob_number_of_failed_checkpoints_total" in probes[-1][3]

    wait_for(lambda: cc.counts["COMPLETED"] >= completed_at_hang + 3, 60, "checkpoints completing after the hang")
    assert not job._finished.is_set(), "the input ran out before the test saw recovery"
    result = job.get_job_execution_result(180)
    assert result.restarts == 0
    assert committed_rows(out) == counting.expected_rows(rows)
    assert not keys(client, "checkpoints", "jobs/"), "a FINISHED job leaves no checkpoints behind"


@pytest.fixture
def s3_defaults(s3):
    """This process's s3:// settings pointed at the test's proxy (as the job manager's are from the job's
    configuration): fast connection failures, S3's default 60 s read timeout. Restored afterwards."""
    import fsspec

    from streamjob.runtime.checkpoint.filesystems import configure
    from streamjob.runtime.config import Configuration

    server, proxy, client = s3
    saved = fsspec.config.conf.get("s3")
    configure(Configuration({"s3.endpoint": proxy.url, "s3.connect-timeout": "1 s", "s3.max-attempts": 1}))
    yield s3
    if saved is None:
        fsspec.config.conf.pop("s3", None)
    else:
        fsspec.config.conf["s3"] = saved


def test_metadata_write_the_store_does_not_answer_fails_its_checkpoint_and_deletes_are_retried(s3_defaults):
    """The coordinator's storage I/O as the job manager runs it, in threads (no Spark; the test plays the
    job manager's loop): a _metadata write to a hung S3 server (SIGSTOP) fails its checkpoint at the
    timeout, and what the write leaves once the server answers again is deleted; a delete while the
    server refuses connections is logged in one line, retried, and done once it is back."""
    from streamjob.runtime.checkpoint.background import Disposer, SerialWorker
    from streamjob.runtime.checkpoint.coordinator import (CheckpointCoordinator, CheckpointSettings,
                                                          TaskCheckpointStats)
    from streamjob.runtime.checkpoint.storage import CheckpointStorage, inline_handle

    server, proxy, client = s3_defaults
    storage = CheckpointStorage("s3://checkpoints/jobs", "job1")
    storage.initialize()
    settings = CheckpointSettings(interval_ms=100, mode="EXACTLY_ONCE", timeout_ms=1000, min_pause_ms=0,
                                  max_concurrent=1, tolerable_failures=100, num_retained=1,
                                  retention="NO_EXTERNALIZED_CHECKPOINTS")
    cc = CheckpointCoordinator(settings, storage, job_id="job1", job_name="j", parallelism=1, max_parallelism=128,
                               operators={"op": "Op"}, tasks=[0])
    notes: list[str] = []
    cc.disposer = Disposer(notes.append, retry_delays=(0.5,) * 20)
    writer = SerialWorker("test-metadata")
    now = 0.0

    def acknowledged(now: float):
        p = cc.trigger(now)
        write = cc.record_ack(p.checkpoint_id, 0, 0, {"op": inline_handle(b"state", {})},
                              TaskCheckpointStats("op", 0, 1.0, 1.0, 0.0, 5), now)
        assert write is not None
        return write, writer.submit(lambda: cc.write_metadata(write))

    def chk(n: int) -> list[str]:
        return keys(client, "checkpoints", f"jobs/job1/chk-{n}/")

    write, future = acknowledged(now)
    assert future.result(30) is True and cc.metadata_written(write, None, now).checkpoint_id == 1
    assert chk(1) == ["jobs/job1/chk-1/_metadata"]

    # -- the store hangs while checkpoint 2's _metadata is written --------------------------------------
    os.kill(server.proc.pid, signal.SIGSTOP)
    try:
        write, future = acknowledged(now := now + 1)
        time.sleep(0.5)
        assert not future.done() and 2 in cc.pending  # the write waits for the store; nothing decided yet
        assert cc.expire(now + 1.5) == [2]  # the checkpoint timeout, as the job manager's tick calls it
    finally:
        os.kill(server.proc.pid, signal.SIGCONT)
    [failed] = [h for h in cc.history if h.checkpoint_id == 2]
    assert failed.status == "FAILED" and failed.failure == (
        "expired after 1000 ms while writing s3://checkpoints/jobs/job1/chk-2/_metadata: the checkpoint "
        "storage did not answer")
    assert future.result(60) is True  # the server answered after all: the write went through...
    assert cc.metadata_written(write, None, now) is None and [c.checkpoint_id for c in cc.completed] == [1]
    assert cc.disposer.drain(30)
    assert chk(2) == [], "... and what it wrote is deleted: checkpoint 2 failed"

    # -- retention deletes checkpoint 1 while the store refuses connections ----------------------------
    write, future = acknowledged(now := now + 3)
    assert future.result(30) is True
    proxy.down()
    assert cc.metadata_written(write, None, now).checkpoint_id == 3  # retains 1: checkpoint 1 goes
    deadline = time.monotonic() + 30
    while not any("Could not delete checkpoint 1" in n for n in notes) and time.monotonic() < deadline:
        time.sleep(0.05)
    proxy.up()
    assert cc.disposer.drain(30)
    retried = [n for n in notes if "Could not delete checkpoint 1" in n]
    assert retried and all(n.endswith("retrying in 0.5 s") and "\n" not in n for n in retried), notes
    assert chk(1) == [] and chk(3) == ["jobs/job1/chk-3/_metadata"]
    writer.close()
    cc.disposer.close()
