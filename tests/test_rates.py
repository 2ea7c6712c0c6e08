"""Per-second rates from the tasks' cumulative counters (records in/out, back-pressured seconds), and the
job manager's failure history for GET /v1/exceptions: pure bookkeeping, no Spark, no sockets."""

import pytest

from streamjob.runtime.cluster.jobmanager import FAILURE_HISTORY, JobManager, TaskFailure
from streamjob.runtime.cluster.rates import CounterRates


def test_rate_is_the_change_over_the_window_of_each_slots_reports():
    r = CounterRates(window=3.0)
    assert r.per_slot(0.0) == {}
    r.observe(0, 10.0, {"in": 0, "out": 0})
    assert r.per_slot(10.0) == {0: {"in": 0.0, "out": 0.0}}  # one report: no rate yet
    for t in range(1, 9):  # 100 records in, 50 out per second, reported every 0.5 s
        r.observe(0, 10.0 + t / 2, {"in": 50 * t, "out": 25 * t})
    r.observe(1, 12.0, {"in": 0})
    r.observe(1, 13.0, {"in": 30})
    rates = r.per_slot(14.0)
    assert rates[0] == {"in": pytest.approx(100.0), "out": pytest.approx(50.0)}
    assert rates[1] == {"in": pytest.approx(30.0)}
    # it spans about the window, not the whole history: a slow-down shows within seconds
    for t in range(9, 17):
        r.observe(0, 10.0 + t / 2, {"in": 400 + 10 * (t - 8), "out": 200})
    assert r.per_slot(18.0)[0] == {"in": pytest.approx(20.0), "out": pytest.approx(0.0)}


def test_a_silent_slot_and_a_counter_that_went_down_have_rate_zero():
    r = CounterRates(window=3.0)
    r.observe(0, 0.0, {"in": 0, "bp": 5.0})
    r.observe(0, 1.0, {"in": 100, "bp": 4.0})  # a counter going down: a restarted task
    assert r.per_slot(1.0)[0] == {"in": pytest.approx(100.0), "bp": 0.0}
    assert r.per_slot(10.0)[0] == {"in": 0.0, "bp": 0.0}  # no report for longer than the window
    r.observe(0, 11.0, {"in": 150, "new": 7})
    assert r.per_slot(11.0)[0]["new"] == 0.0  # a counter seen once has no rate yet
    r.clear()
    assert r.per_slot(11.0) == {}


def test_exceptions_group_each_attempts_failures_under_its_root_cause_newest_first():
    jm = JobManager("job-x", "exceptions", 2)
    assert jm.exceptions_info() == {"total": 0, "truncated": False, "history": []}
    jm._fail(TaskFailure(1, None, "PeerLost", "slot 1 went away", "", "peer", attempt=0, at=100.0))
    jm._fail(TaskFailure(0, "parse", "ValueError", "bad row", "Traceback ...\nValueError: bad row\n", "operator",
                         attempt=0, at=100.5))
    jm._fail(TaskFailure(-1, None, "CheckpointFailure", "3 in a row", "", "checkpoint", attempt=1, at=200.0))
    doc = jm.exceptions_info()
    assert [h["attempt"] for h in doc["history"]] == [1, 0]
    first = doc["history"][1]
    assert first["root"] == {"time": 100.5, "subtask": 0, "operator": "parse", "error_type": "ValueError",
                             "error": "bad row", "traceback": "Traceback ...\nValueError: bad row\n",
                             "cause": "operator", "checkpoint": None,
                             "summary": "operator 'parse' (subtask 1/2) raised ValueError: bad row"}
    assert [f["error_type"] for f in first["concurrent"]] == ["PeerLost"] and first["time"] == 100.5
    assert doc["history"][0]["root"]["subtask"] is None  # the job manager's own
    assert doc["history"][0]["root"]["summary"].startswith("the job manager raised CheckpointFailure")
    # a job that fails forever keeps only the newest failures
    for i in range(FAILURE_HISTORY + 5):
        jm._fail(TaskFailure(0, "parse", "ValueError", f"row {i}", "", "operator", attempt=2 + i))
    doc = jm.exceptions_info()
    assert doc["total"] == FAILURE_HISTORY + 8 and doc["truncated"] is True
    assert len(doc["history"]) == FAILURE_HISTORY
    assert doc["history"][0]["root"]["error"] == f"row {FAILURE_HISTORY + 4}"
