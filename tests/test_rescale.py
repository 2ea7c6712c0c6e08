"""Rescaling in place (issue 33 item 2): PUT /v1/jobs/{id}/parallelism ends the attempt at the next
completed checkpoint and restarts the barrier stage at the new parallelism from it, exactly once.

Real local Spark (the session's local[4]), real FileSink output compared row for row with the one correct
result, with tasks SIGKILLed at random while the job is rescaled."""

import os
import random
import sys
import threading
import time

import pytest

from streamjob.runtime import StreamExecutionEnvironment
from streamjob.runtime.cluster import rescale as R
from streamjob.runtime.connectors import DataGenSource, FileSink
from streamjob.runtime.graph.job_graph import build_job_graph
from streamjob.runtime.rest_client import RestError, call

from conftest import SPARK_SLOTS, start_with_rest

HERE = os.path.dirname(__file__)
sys.path.insert(0, os.path.join(HERE, "jobs"))
import counting  # noqa: E402
from test_checkpointing import committed_rows  # noqa: E402


def _graph(parallelism=2, chain=True):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    s = env.from_source(DataGenSource(lambda i: {"k": i % 5, "i": i}, count=10), None, "numbers").uid("numbers")
    m = s.map(lambda r: r).uid("parse")
    if not chain:
        m = m.start_new_chain()
    m.key_by(lambda r: r["k"]).reduce(lambda a, b: a).uid("sum").sink_to(FileSink.jsonl("/tmp/x")).uid("files")
    return build_job_graph(env._transformations, env.get_config(), "t")


# -- the plan: pure ------------------------------------------------------------------------------------
def test_an_operator_named_takes_its_chain_and_the_rest_keeps_its_parallelism():
    g = _graph()
    new = R.plan(g, None, {"parse": 3}, slots=None, unaligned=False)
    by_key = new.operator_by_key()
    # numbers -> parse is one chain (forward): both go to 3; the keyed sum and the sink stay at 2
    assert (by_key["numbers"].parallelism, by_key["parse"].parallelism) == (3, 3)
    assert (by_key["sum"].parallelism, by_key["files"].parallelism) == (2, 2)
    assert new.parallelism == 3 and len(new.tasks) == len(g.tasks)
    assert R.vertex_parallelism(new) == {"Source: numbers -> Map": 3, "Reduce -> Sink: FileSink(jsonl)": 2}
    # the job's parallelism moves the rest; the earlier override stays
    again = R.plan(new, 1, {}, slots=None, unaligned=False)
    assert {k: o.parallelism for k, o in again.operator_by_key().items()} == \
        {"numbers": 3, "parse": 3, "sum": 1, "files": 1}
    assert R.unchanged(again, R.plan(again, 1, {}, slots=None, unaligned=False))


@pytest.mark.parametrize("parallelism,operators,status,words", [
    (None, {"nope": 2}, 400, ["no operator 'nope'", "'numbers'", "'parse'"]),
    (200, {}, 400, ["max parallelism"]),
    (None, {"numbers": 2, "parse": 3}, 400, ["chained in one task", "start_new_chain"]),
    (5, {}, 409, ["not enough slots", "5 slots", "local[5]"]),
])
def test_a_rescale_that_cannot_be_done_is_refused_saying_why(parallelism, operators, status, words):
    with pytest.raises(R.RescaleRefused) as e:
        R.plan(_graph(), parallelism, operators, slots=4, unaligned=False)
    assert e.value.status == status
    for w in words:
        assert w in str(e.value)


def test_unaligned_checkpoints_refuse_a_rescale_that_forms_a_chain():
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    s = env.from_source(DataGenSource(lambda i: i, count=10), None, "numbers").uid("numbers").set_parallelism(1)
    s.map(lambda r: r).uid("parse").sink_to(FileSink.jsonl("/tmp/x")).uid("files")
    g = build_job_graph(env._transformations, env.get_config(), "t")
    assert len(g.tasks) == 2  # numbers (1) =rebalance=> parse -> files (2)
    # at parallelism 1 the edge is forward and the three chain into one task: fine with aligned checkpoints ...
    assert len(R.plan(g, 1, {}, slots=None, unaligned=False).tasks) == 1
    # ... but in-flight data of that edge in an unaligned checkpoint would have no channel to go to
    with pytest.raises(R.RescaleRefused, match="chain differently") as e:
        R.plan(g, 1, {}, slots=None, unaligned=True)
    assert e.value.status == 409
    assert R.plan(g, 3, {}, slots=None, unaligned=True).parallelism == 3  # no chain forms: fine


@pytest.mark.parametrize("body,words", [
    ({}, ["nothing to change"]),
    ({"parallelism": 0}, ["'parallelism' must be an integer >= 1"]),
    ({"parallelism": "2"}, ["'parallelism' must be an integer >= 1"]),
    ({"operators": {"a": 1.5}}, ["'a' must be an integer >= 1"]),
    ({"operators": [1]}, ["'operators' must be an object"]),
    ({"parallelism": 2, "wat": 1}, ["unknown field(s) 'wat'"]),
])
def test_malformed_requests_are_400_naming_the_field(body, words):
    with pytest.raises(R.RescaleRefused) as e:
        R.parse_request(body)
    assert e.value.status == 400
    for w in words:
        assert w in str(e.value)


# -- a running job ------------------------------------------------------------------------------------
def _rescale(url, job_id, body, timeout=120.0):
    deadline = time.monotonic() + timeout
    while True:
        try:
            doc = call(url, "", "PUT", f"/v1/jobs/{job_id}/parallelism", body)
            break
        except RestError as e:  # restarting after one of the test's kills: refused until it runs again
            if e.status == 409 and ("finishing" in str(e) or "FINISHED" in str(e)):
                return {"status": R.FAILED, "error": "the job ended first"}  # a slow machine: checked below
            if e.status != 409 or "RESTARTING" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    while doc["status"] in (R.CHECKPOINTING, R.RESTARTING) and time.monotonic() < deadline:
        time.sleep(0.1)
        doc = call(url, "", "GET", f"/v1/jobs/{job_id}/rescales/{doc['id']}")
    return doc


def _wait_checkpoints(jm, n, timeout=60.0):
    deadline = time.monotonic() + timeout
    start = jm.coordinator.counts["COMPLETED"]
    while jm.coordinator.counts["COMPLETED"] < start + n and time.monotonic() < deadline:
        time.sleep(0.05)


@pytest.mark.parametrize("backend,incremental,kills", [("hashmap", False, 3), ("rocksdb", True, 0)],
                         ids=["hashmap-with-kills", "rocksdb-incremental"])
def test_rescaling_up_down_and_per_operator_while_running_is_exactly_once(spark_slots, tmp_path, backend,
                                                                          incremental, kills):
    rng = random.Random(int(time.time()))
    rows = 36_000
    out, checkpoints = str(tmp_path / "out"), str(tmp_path / "checkpoints")
    env = counting.build(out, checkpoints, rows, rate=1500, interval_ms=rng.randint(300, 700), backend=backend,
                         incremental=incremental, parallelism=2)
    client, url = start_with_rest(env, "counting")
    jm = client.job_manager
    stop_killing = threading.Event()
    killed = []

    def killer():  # SIGKILL a task at random moments, also while a rescale checkpoints or restarts
        while len(killed) < kills and not stop_killing.wait(rng.uniform(1.0, 4.0)):
            pids = jm.task_pids()
            if pids and jm.all_running():
                try:
                    os.kill(pids[rng.choice(sorted(pids))], 9)
                    killed.append(time.monotonic())
                except ProcessLookupError:
                    pass

    if kills:  # the API's refusals, on the running job (once)
        for path, body, status, words in [
            ("/v1/jobs/nope/parallelism", {"parallelism": 3}, 404, "this job manager runs job"),
            (f"/v1/jobs/{client.job_id}/parallelism", {"operators": {"counter": 3}}, 400, "no operator 'counter'"),
            (f"/v1/jobs/{client.job_id}/parallelism", {"parallelism": SPARK_SLOTS + 1}, 409, "not enough slots"),
        ]:
            with pytest.raises(RestError) as e:
                call(url, "", "PUT", path, body)
            assert e.value.status == status and words in str(e.value), e.value
        same = call(url, "", "PUT", f"/v1/jobs/{client.job_id}/parallelism", {"parallelism": 2})
        assert same["status"] == R.COMPLETED and same["before"] == same["after"]  # already there: nothing to do
    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    try:
        steps = [({"parallelism": SPARK_SLOTS}, {"Source: numbers": SPARK_SLOTS, "KeyedProcess -> Sink: FileSink(jsonl)": SPARK_SLOTS}),
                 ({"parallelism": 1}, {"Source: numbers": 1, "KeyedProcess -> Sink: FileSink(jsonl)": 1}),
                 ({"operators": {"count": 3}}, {"Source: numbers": 1, "KeyedProcess -> Sink: FileSink(jsonl)": 3})]
        for body, after in steps:
            _wait_checkpoints(jm, 2)
            doc = _rescale(url, client.job_id, body)
            if doc["status"] == R.FAILED and "ended" in (doc["error"] or ""):
                break  # the input ended first (a slow machine): the output is still checked below
            assert doc["status"] == R.COMPLETED, doc
            assert doc["after"] == after and doc["checkpoint_id"] is not None
            job = call(url, "", "GET", "/v1/job?peek=true")
            assert {v["name"]: v["parallelism"] for v in job["vertices"]} == after
            assert job["rescale"]["id"] == doc["id"]
        client.get_job_execution_result(300)
    finally:
        stop_killing.set()
        thread.join()
    assert committed_rows(out) == counting.expected_rows(rows)
    assert len(killed) >= min(kills, 2)


def test_a_job_without_checkpointing_or_not_running_is_not_rescaled():
    from streamjob.runtime.cluster.jobmanager import JobManager

    jm = JobManager("j", "job", 2)
    with pytest.raises(R.RescaleRefused, match="the job is CREATED"):
        jm.request_rescale(3, {})
    jm.status.state = "RUNNING"
    with pytest.raises(R.RescaleRefused, match="without checkpointing") as e:
        jm.request_rescale(3, {})
    assert e.value.status == 409


@pytest.mark.timeout(600)
def test_streamjob_rescale_changes_a_detached_job_in_place_and_its_output_is_exact(tmp_path):
    import re

    from conftest import run_cli
    from streamjob.runtime import registry

    env = {"STREAMJOB_STATE_DIR": str(tmp_path / "state")}
    out, checkpoints, rows = str(tmp_path / "out"), str(tmp_path / "checkpoints"), 24_000
    r = run_cli("run", "-d", "--master", "local[4]", os.path.join(HERE, "jobs", "counting.py"), out, checkpoints,
                str(rows), "1500", env=env, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    job_id = re.search(r"JobID ([0-9a-f]{32})", r.stdout).group(1)
    try:
        r = run_cli("rescale", "counting", "-p", "2", "--operator", "count=4", env=env, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        assert re.search(r"rescaled Source: numbers 3 -> 2; KeyedProcess -> Sink: FileSink\(jsonl\) 3 -> 4 from "
                         r"checkpoint \d+ \(every task ran again [\d.]+ s after it\)", r.stdout), r.stdout
        # the sink named alone: its chain (the count) goes with it
        r = run_cli("rescale", job_id[:8], "--operator", "files=1", env=env, timeout=300)
        assert r.returncode == 0 and "KeyedProcess -> Sink: FileSink(jsonl) 4 -> 1" in r.stdout, r.stdout + r.stderr
        r = run_cli("rescale", job_id[:8], "--operator", "count=2", "--operator", "files=3", env=env, timeout=120)
        assert r.returncode == 1 and "'count' and 'files' are chained in one task" in r.stderr, r.stderr
        r = run_cli("rescale", job_id[:8], "--operator", "files=9", env=env, timeout=120)
        assert r.returncode == 1 and "not enough slots" in r.stderr and "local[" in r.stderr, r.stderr
        r = run_cli("rescale", job_id[:8], "--operator", "nope", env=env, timeout=60)
        assert r.returncode == 1 and "expected UID=N" in r.stderr, r.stderr
    finally:
        deadline = time.monotonic() + 240
        os.environ["STREAMJOB_STATE_DIR"], old = env["STREAMJOB_STATE_DIR"], os.environ.get("STREAMJOB_STATE_DIR")
        try:
            while any(e.id == job_id for e in registry.running()) and time.monotonic() < deadline:
                time.sleep(0.5)
        finally:
            os.environ["STREAMJOB_STATE_DIR"] = old or ""
    assert committed_rows(out) == counting.expected_rows(rows)
