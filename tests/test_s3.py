"""Checkpoints and savepoints on s3:// through s3fs, against a real S3 API server (moto's server in
a subprocess on 127.0.0.1, behind a proxy the test takes down for an outage).

Credentials come from the standard AWS variables (set in conftest before Spark starts); the
endpoint from the job configuration (``s3.endpoint``) in-process, and from the standard
``AWS_ENDPOINT_URL_S3`` variable in the CLI run.
"""

from __future__ import annotations

import os
import time

import pytest

from conftest import run_cli
from jobs import counting
from s3server import MotoServer, Proxy
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
