"""The job manager's REST API and Prometheus metrics, against a real job on local Spark.

Responses are validated against the OpenAPI document the server itself serves (which is
checked to be a valid OpenAPI 3.1 document); bad requests must get a 4xx JSON error that
says what is wrong. The CLI commands run as subprocesses against the same job.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request

import jsonschema
import pytest
from openapi_spec_validator import validate as validate_openapi
from prometheus_client.parser import text_string_to_metric_families

from conftest import run_cli, start_with_rest
from jobs import counting
from streamjob.runtime.checkpoint.storage import load_checkpoint

TOKEN = "s3cret-token"


def request(url: str, method: str = "GET", body: bytes | None = None, token: str | None = TOKEN,
            content_type: str = "application/json") -> tuple[int, dict | str]:
    req = urllib.request.Request(url, data=body, method=method)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    if body is not None:
        req.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            status, raw, ctype = resp.status, resp.read(), resp.headers.get("Content-Type", "")
    except urllib.error.HTTPError as e:
        status, raw, ctype = e.code, e.read(), e.headers.get("Content-Type", "")
    return status, json.loads(raw) if "json" in ctype else raw.decode()


def conforms(doc: dict, openapi: dict, schema: str) -> None:
    jsonschema.validate(doc, {"$ref": f"#/components/schemas/{schema}", "components": openapi["components"]},
                        cls=jsonschema.Draft202012Validator)


@pytest.fixture
def running_job(spark_slots, tmp_path):
    env = counting.build(str(tmp_path / "out"), str(tmp_path / "checkpoints"), 200_000, 5_000, interval_ms=200,
                         parallelism=2, conf={"rest.auth.token": TOKEN})
    client, url = start_with_rest(env, "counting", running_timeout=60)
    yield client, url
    if not client._finished.is_set():
        client.cancel()
    try:
        client.get_job_execution_result(120)
    except Exception:  # noqa: BLE001 - canceled on purpose
        pass


def test_rest_contract_cli_and_metrics(running_job, tmp_path):
    client, url = running_job
    status, openapi = request(f"{url}/v1/openapi.json", token=None)
    assert status == 200
    validate_openapi(openapi)

    # -- authentication --------------------------------------------------------------------
    status, doc = request(f"{url}/v1/job", token=None)
    assert status == 401 and "bearer token" in doc["error"]
    status, doc = request(f"{url}/v1/job", token="wrong")
    assert status == 401

    # -- job and checkpoints -----------------------------------------------------------------
    status, job = request(f"{url}/v1/job")
    assert status == 200
    conforms(job, openapi, "Job")
    assert job["id"] == client.job_id and job["state"] == "RUNNING" and job["parallelism"] == 2
    assert job["max_parallelism"] == 128 and job["restarts"] == 0
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        status, cps = request(f"{url}/v1/checkpoints")
        if cps["counts"]["completed"] >= 2:
            break
        time.sleep(0.1)
    conforms(cps, openapi, "Checkpoints")
    assert cps["latest"]["completed"]["status"] == "COMPLETED" and cps["history"][0]["id"] >= cps["history"][-1]["id"]
    status, job = request(f"{url}/v1/job")
    assert job["latest_checkpoint"]["id"] >= 1
    status, limited = request(f"{url}/v1/checkpoints?limit=1")
    assert status == 200 and len(limited["history"]) == 1 and limited["history"][0]["id"] >= cps["history"][0]["id"]
    conforms(limited, openapi, "Checkpoints")

    # -- the job graph: tasks (chains), operators with records, rates and watermarks, edges ------
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # rates need two metric reports of the tasks (one each 500 ms)
        status, job = request(f"{url}/v1/job")
        if all(op["records_in_per_second"] > 0 for op in job["vertices"][1]["operators"]):
            break
        time.sleep(0.1)
    conforms(job, openapi, "Job")
    vertices = job["vertices"]
    assert [[op["name"] for op in v["operators"]] for v in vertices] == [
        ["Source: numbers"], ["KeyedProcess", "Sink: FileSink(jsonl)"]]
    assert [v["name"] for v in vertices] == ["Source: numbers", "KeyedProcess -> Sink: FileSink(jsonl)"]
    ops = {op["name"]: op for v in vertices for op in v["operators"]}
    assert ops["KeyedProcess"]["uid"] == "count" and ops["KeyedProcess"]["kind"] == "keyed_process"
    assert ops["KeyedProcess"]["records_in"] > 0 and ops["KeyedProcess"]["records_in_per_second"] > 0
    assert ops["Source: numbers"]["records_out_per_second"] > 0 and ops["Sink: FileSink(jsonl)"]["records_out"] == 0
    assert {(e["source_vertex"], e["target_vertex"], e["partitioner"], e["key"], e["chained"]) for e in job["edges"]} \
        == {(1, 2, "HASH", "'key'", False), (2, 2, "FORWARD", None, True)}
    assert all(v["backpressure"]["level"] in ("OK", "LOW", "HIGH") and len(v["backpressure"]["subtasks"]) == 2
               for v in vertices)
    for name in ("peek=maybe", "peek=2"):
        status, doc = request(f"{url}/v1/job?{name}")
        assert status == 400 and "'peek'" in doc["error"], doc
    status, doc = request(f"{url}/v1/checkpoints?limit=0")
    assert status == 400 and "'limit'" in doc["error"]
    status, doc = request(f"{url}/v1/exceptions")
    assert status == 200 and doc == {"total": 0, "truncated": False, "history": []}
    conforms(doc, openapi, "Exceptions")

    # -- the dashboard's files: no token needed (they hold no job data), locked down ------------
    with urllib.request.urlopen(f"{url}/", timeout=10) as resp:
        page = resp.read().decode()
        assert resp.headers["Content-Type"].startswith("text/html")
        assert "script-src 'self'" in resp.headers["Content-Security-Policy"]
        assert resp.headers["X-Frame-Options"] == "DENY"
    assert '<script src="dashboard/app.js"' in page
    status, script = request(f"{url}/dashboard/app.js", token=None)
    assert status == 200 and "v1/job?peek=true" in script
    status, doc = request(f"{url}/dashboard/../rest.py", token=None)
    assert status == 404
    status, doc = request(f"{url}/dashboard/nope.js", token=None)
    assert status == 404 and "nope.js" in doc["error"]

    # -- bad requests: 4xx with a message that says what is wrong --------------------------------
    bad = [
        (b"{not json", 400, "not valid JSON"),
        (b"[1, 2]", 400, "JSON object"),
        (json.dumps({"target_dir": str(tmp_path), "colour": "red"}).encode(), 400, "'colour'"),
        (json.dumps({"target_dir": ""}).encode(), 400, "target_dir"),
        (json.dumps({"target_dir": str(tmp_path), "stop": "yes"}).encode(), 400, "'stop' must be true or false"),
        (json.dumps({"target_dir": str(tmp_path), "drain": True}).encode(), 400, "'drain' needs 'stop'"),
        (json.dumps({"target_dir": "memory://x"}).encode(), 400, "memory://"),
        (b'{"target_dir": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", 400, "nested too deeply"),
        (json.dumps({"target_dir": str(tmp_path / "a\x00b")}).encode(), 400, "control characters"),
        (json.dumps({"target_dir": f"{tmp_path}/../../etc"}).encode(), 400, "contains '..'"),
        (json.dumps({"target_dir": "savepoints/here"}).encode(), 400, "relative path"),
        (json.dumps({"target_dir": "http://169.254.169.254/latest"}).encode(), 400,
         "http:// is not storage of this job (allowed: file)"),
        (json.dumps({"target_dir": "s3://other-bucket/sp"}).encode(), 400, "rest.savepoint.allowed-schemes"),
        (json.dumps({}).encode(), 409, "execution.checkpointing.savepoint-dir"),  # no default target configured
    ]
    for body, code, words in bad:
        status, doc = request(f"{url}/v1/savepoints", "POST", body)
        assert status == code and words in doc["error"], (body, status, doc)
        conforms(doc, openapi, "Error")
    status, doc = request(f"{url}/v1/savepoints/no-such-id")
    assert status == 404 and "no-such-id" in doc["error"]
    status, doc = request(f"{url}/v1/jobs")
    assert status == 404 and "/v1/jobs" in doc["error"]
    status, doc = request(f"{url}/v1/job", "DELETE")
    assert status == 405 and "DELETE" in doc["error"]
    with pytest.raises(urllib.error.HTTPError) as e:  # RFC 9110: a 405 names the allowed methods
        urllib.request.urlopen(urllib.request.Request(f"{url}/v1/stop", method="GET",
                                                      headers={"Authorization": f"Bearer {TOKEN}"}), timeout=10)
    assert e.value.code == 405 and e.value.headers["Allow"] == "POST", dict(e.value.headers)

    # -- a savepoint over the API --------------------------------------------------------------
    status, triggered = request(f"{url}/v1/savepoints", "POST", json.dumps({"target_dir": str(tmp_path / "sp")}).encode())
    assert status == 202
    conforms(triggered, openapi, "SavepointTriggered")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        status, sp = request(f"{url}/v1/savepoints/{triggered['id']}")
        if sp["status"] not in ("QUEUED", "IN_PROGRESS"):
            break
        time.sleep(0.1)
    conforms(sp, openapi, "Savepoint")
    assert sp["status"] == "COMPLETED" and sp["error"] is None
    assert load_checkpoint(sp["path"])[1].kind == "savepoint"
    status, listed = request(f"{url}/v1/savepoints")
    conforms(listed, openapi, "Savepoints")
    assert status == 200 and listed["savepoints"] == [sp]

    # -- the CLI against the same job ----------------------------------------------------------
    env = {"STREAMJOB_ADDRESS": url, "STREAMJOB_TOKEN": TOKEN}
    proc = run_cli("status", env=env, timeout=60)
    assert proc.returncode == 0 and "RUNNING" in proc.stdout and client.job_id in proc.stdout, proc.stderr
    proc = run_cli("checkpoints", "--json", env=env, timeout=60)
    assert proc.returncode == 0 and json.loads(proc.stdout)["counts"]["completed"] >= 2
    proc = run_cli("savepoint", "--target-dir", str(tmp_path / "sp-cli"), env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    cli_savepoint = proc.stdout.strip()
    assert load_checkpoint(cli_savepoint)[1].kind == "savepoint"
    proc = run_cli("status", "--address", url, "--token", "wrong", timeout=60)
    assert proc.returncode == 1 and "401" in proc.stderr
    proc = run_cli("savepoint", "--dispose", cli_savepoint, timeout=60)
    assert proc.returncode == 0 and not os.path.exists(cli_savepoint.removeprefix("file://"))
    proc = run_cli("savepoint", "--dispose", cli_savepoint, timeout=60)
    assert proc.returncode == 1 and "no _metadata" in proc.stderr

    # -- Prometheus metrics, scraped over HTTP ---------------------------------------------------
    status, text = request(f"{url}/metrics", token=None)
    assert status == 200
    families = {f.name: f for f in text_string_to_metric_families(text)}
    samples = {s.name: s for f in families.values() for s in f.samples if not s.labels.get("operator")
               and not s.labels.get("task") and not s.labels.get("state")}
    completed = samples["streamjob_number_of_completed_checkpoints_total"]
    assert completed.value >= 3 and completed.labels == {"job": "counting", "job_id": client.job_id}
    assert samples["streamjob_number_of_failed_checkpoints_total"].value == 0
    assert samples["streamjob_last_checkpoint_completed_timestamp_seconds"].value > time.time() - 60
    assert samples["streamjob_last_checkpoint_full_size_bytes"].value > 0
    assert samples["streamjob_num_restarts_total"].value == 0
    assert samples["streamjob_checkpoint_interval_seconds"].value == 0.2  # interval_ms=200 above
    # the REST savepoint and the CLI's: both completed, none failed
    assert samples["streamjob_number_of_completed_savepoints_total"].value == 2
    assert samples["streamjob_number_of_failed_savepoints_total"].value == 0
    assert families["streamjob_number_of_in_progress_checkpoints"].type == "gauge"
    records_in = {s.labels["operator"]: s.value for s in families["streamjob_num_records_in"].samples
                  if s.name.endswith("_total")}
    assert records_in and max(records_in.values()) > 0
    assert {s.labels["task"] for s in families["streamjob_back_pressured_time_seconds"].samples}
    running = [s for s in families["streamjob_job_state"].samples if s.value == 1]
    assert [s.labels["state"] for s in running] == ["RUNNING"]

    # -- stop ----------------------------------------------------------------------------------
    proc = run_cli("cancel", env=env, timeout=60)
    assert proc.returncode == 0
    with pytest.raises(Exception, match="canceled"):
        client.get_job_execution_result(120)
    assert client.get_job_status() == "CANCELED"


def test_rest_address_errors_are_clear(spark_slots, tmp_path):
    import socket

    from streamjob.runtime.graph.job_graph import JobDefinitionError

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = counting.build(str(tmp_path / "out"), str(tmp_path / "c"), 100, 1000, parallelism=1,
                             conf={"rest.address": f"127.0.0.1:{port}"})
        with pytest.raises(JobDefinitionError, match=f"rest.address=127.0.0.1:{port}.*in use"):
            env.execute("counting")
    env = counting.build(str(tmp_path / "out"), str(tmp_path / "c"), 100, 1000, parallelism=1,
                         conf={"rest.address": "localhost"})
    with pytest.raises(JobDefinitionError, match="rest.address: expected HOST:PORT"):
        env.execute("counting")
