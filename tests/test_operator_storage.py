"""The operator's own checks of a spec's object storage, against a real S3 API server (moto's, in a
subprocess on 127.0.0.1): a missing bucket or savepoint is named before anything is deployed."""

from __future__ import annotations

import asyncio

import boto3
import pytest

from s3server import CREDENTIALS, MotoServer
from streamjob.operator import storage
from streamjob.operator.model import StreamJobSpec


@pytest.fixture(scope="module")
def moto():
    server = MotoServer()
    client = boto3.client("s3", endpoint_url=server.url, aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
                          aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"], region_name="us-east-1")
    client.create_bucket(Bucket="jobs")
    client.put_object(Bucket="jobs", Key="sp/savepoint-1/_metadata", Body=b"{}")
    yield server
    server.close()


def spec(moto, **fields) -> StreamJobSpec:
    return StreamJobSpec.model_validate({
        "image": "x", "job": {"file": "/j.py"}, "parallelism": 1, "checkpointDir": "s3://jobs/chk",
        "savepointDir": "s3://jobs/sp",
        "s3": {"endpoint": moto.url, "pathStyleAccess": True,
               "accessKeyId": {"name": "creds", "key": "id"}, "secretAccessKey": {"name": "creds", "key": "secret"}},
        **fields})


def errors(s: StreamJobSpec, first: bool = True) -> dict:
    async def secret(name: str, key: str) -> str:
        assert name == "creds"
        return {"id": CREDENTIALS["AWS_ACCESS_KEY_ID"], "secret": CREDENTIALS["AWS_SECRET_ACCESS_KEY"]}[key]

    return asyncio.run(storage.spec_errors(s, first, secret))


def test_reachable_storage_and_existing_savepoint_pass(moto):
    assert errors(spec(moto, initialSavepointPath="s3://jobs/sp/savepoint-1")) == {}


@pytest.mark.parametrize("fields, field, text", [
    ({"savepointDir": "s3://no-such-bucket/sp"}, "spec.savepointDir", "bucket 'no-such-bucket' does not exist"),
    ({"checkpointDir": "s3://nope/chk"}, "spec.checkpointDir", "bucket 'nope' does not exist"),
    ({"initialSavepointPath": "s3://jobs/sp/savepoint-9"}, "spec.initialSavepointPath", "no savepoint at"),
])
def test_missing_storage_is_named_by_field(moto, fields, field, text):
    found = errors(spec(moto, **fields))
    assert list(found) == [field] and text in found[field]


def test_unreachable_endpoint_is_named_and_file_paths_are_left_to_the_job(moto):
    s = spec(moto)
    s.s3.endpoint = "http://127.0.0.1:9"  # nothing listens there
    found = errors(s)
    assert set(found) == {"spec.checkpointDir", "spec.savepointDir"} and "cannot reach" in found["spec.savepointDir"]
    local = StreamJobSpec.model_validate({"image": "x", "job": {"file": "/j.py"}, "parallelism": 1,
                                          "savepointDir": "file:///nowhere", "initialSavepointPath": "file:///x"})
    assert storage.checks(local, True) == []  # in the pod's volumes: the job reports those itself
    assert storage.checks(spec(moto, initialSavepointPath="s3://jobs/sp/x"), False)[-1][0] == "spec.savepointDir"


def test_savepoint_disposal_uses_the_jobs_endpoint_and_credentials(moto, monkeypatch):
    """The operator disposes of many jobs' savepoints: each with its job's endpoint and Secret, not
    the operator process's own AWS settings (here: none, so without them the store is not found)."""
    import json

    from streamjob.runtime.checkpoint.metadata import CheckpointFormatError
    from streamjob.runtime.checkpoint.storage import dispose_savepoint

    for var in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(var, raising=False)
    client = boto3.client("s3", endpoint_url=moto.url, aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
                          aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"], region_name="us-east-1")

    def put_snapshot(prefix: str, kind: str) -> None:
        meta = {"format": "streamjob-checkpoint", "version": 1, "type": kind, "checkpoint_id": 3, "job_id": "j" * 32,
                "job_name": "sum", "timestamp_ms": 1, "completed_ms": 2, "parallelism": 1, "max_parallelism": 128,
                "mode": "EXACTLY_ONCE", "operators": {"op": {"name": "sum", "subtasks": [
                    {"file": "op-state-1", "size": 5, "index": {}}]}}}
        client.put_object(Bucket="jobs", Key=f"{prefix}/_metadata", Body=json.dumps(meta).encode())
        client.put_object(Bucket="jobs", Key=f"{prefix}/op-state-1", Body=b"state")

    def keys(prefix: str) -> list[str]:
        return [o["Key"] for o in client.list_objects_v2(Bucket="jobs", Prefix=prefix).get("Contents", [])]

    put_snapshot("sp/savepoint-2", "savepoint")
    put_snapshot("chk/job/chk-3", "checkpoint")

    async def secret(name: str, key: str) -> str:
        return {"id": CREDENTIALS["AWS_ACCESS_KEY_ID"], "secret": CREDENTIALS["AWS_SECRET_ACCESS_KEY"]}[key]

    options = asyncio.run(storage.job_s3_options(spec(moto), secret))
    assert options["endpoint_url"] == moto.url and options["key"] == CREDENTIALS["AWS_ACCESS_KEY_ID"]
    # The operator process's own AWS chain (no credentials in its environment here): refused, kept.
    from botocore.exceptions import NoCredentialsError
    with pytest.raises(NoCredentialsError):
        dispose_savepoint("s3://jobs/sp/savepoint-2", {"endpoint_url": moto.url})
    assert keys("sp/savepoint-2") == ["sp/savepoint-2/_metadata", "sp/savepoint-2/op-state-1"]

    dispose_savepoint("s3://jobs/sp/savepoint-2", options)
    assert keys("sp/savepoint-2") == []
    with pytest.raises(CheckpointFormatError, match="is a checkpoint, not a savepoint"):
        dispose_savepoint("s3://jobs/chk/job/chk-3", options)
    assert len(keys("chk/job/chk-3")) == 2  # a job's checkpoint is never disposed of
