"""Attempts stay apart, at the job manager: real control-channel sockets, no Spark.

A test plays the tasks with plain sockets speaking the control protocol (JSON lines), so the
cases Spark produces only by chance (a worker of a cancelled attempt registering late, two
processes for one slot, an acknowledgement racing the restart) happen here every time.
"""

from __future__ import annotations

import json
import socket
import time

import pytest

from streamjob.runtime.checkpoint.coordinator import CheckpointCoordinator, CheckpointSettings
from streamjob.runtime.checkpoint.storage import CheckpointStorage
from streamjob.runtime.cluster import control as C
from streamjob.runtime.cluster.jobmanager import JobManager


class Task:
    """One task's control connection."""

    def __init__(self, address, slot: int, attempt: int):
        self.sock = socket.create_connection(address, timeout=5)
        self.file = self.sock.makefile("rb")
        self.slot, self.attempt = slot, attempt
        self.send({"type": C.REGISTER, "slot": slot, "attempt": attempt, "pid": 1})

    def send(self, msg: dict) -> None:
        self.sock.sendall(C.encode(msg))

    def receive(self) -> dict:
        line = self.file.readline()
        return json.loads(line) if line else {"type": "closed"}

    def close(self) -> None:
        self.file.close()
        self.sock.close()


def until(condition, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.01)


@pytest.fixture
def jm(tmp_path):
    storage = CheckpointStorage(f"file://{tmp_path}", "job1", inline_threshold=1 << 20)
    storage.initialize()
    settings = CheckpointSettings(interval_ms=3_600_000, mode="EXACTLY_ONCE", timeout_ms=60_000, min_pause_ms=0,
                                  max_concurrent=1, tolerable_failures=0, num_retained=3,
                                  retention="NO_EXTERNALIZED_CHECKPOINTS")
    cc = CheckpointCoordinator(settings, storage, job_id="job1", job_name="j", parallelism=2, max_parallelism=128,
                               operators={"op": "Op"}, tasks=[0])
    manager = JobManager("job1", "j", 2, coordinator=cc)
    manager.start()
    yield manager
    manager.shutdown()


def test_a_task_of_another_attempt_or_a_second_one_for_a_slot_is_refused_and_never_fails_the_attempt(jm):
    jm.begin_attempt(0, None)
    first = Task(jm.address, 0, 0)
    assert first.receive()["type"] == C.DEPLOY
    # The attempt fails; a worker Spark started for it registers after the next attempt began.
    jm.begin_attempt(1, None)
    late = Task(jm.address, 1, 0)
    refused = late.receive()
    assert refused["type"] == C.REFUSED and "attempt 1 is over" in refused["reason"], refused
    assert late.receive()["type"] == "closed"
    current = Task(jm.address, 1, 1)
    assert current.receive()["type"] == C.DEPLOY
    twin = Task(jm.address, 1, 1)  # a second process for slot 2 of the same attempt
    answer = twin.receive()
    assert answer["type"] == C.REFUSED and "has a task already" in answer["reason"], answer
    for task in (late, twin, first):  # their processes go: none of them is a failure of attempt 2
        task.close()
    time.sleep(0.2)
    assert not jm.failures and jm.registered == {1}
    current.close()  # the slot's registered task is lost: that is a failure
    until(lambda: jm.failures)
    [lost] = jm.failures
    assert (lost.slot, lost.cause, lost.attempt) == (1, "lost", 1)


def test_a_fenced_attempt_completes_no_checkpoint_and_registers_no_task(jm):
    jm.begin_attempt(0, None)
    tasks = [Task(jm.address, slot, 0) for slot in (0, 1)]
    for t in tasks:
        assert t.receive()["type"] == C.DEPLOY
        t.send({"type": C.RUNNING, "slot": t.slot, "attempt": 0})
    cc = jm.coordinator
    triggers = [t.receive() for t in tasks]  # the first checkpoint is triggered once every task runs
    assert [m["type"] for m in triggers] == [C.TRIGGER, C.TRIGGER]
    n = triggers[0]["id"]

    def ack(task: Task) -> None:
        task.send({"type": C.ACK, "slot": task.slot, "attempt": 0, "id": n, "task": 0, "name": "op",
                   "sync_ms": 0, "async_ms": 0, "alignment_ms": 0, "size": 1,
                   "handles": {"op": {"inline": "", "index": {}}}})

    ack(tasks[0])
    until(lambda: cc.pending[n].expected == {(0, 1)})
    survivors = jm.fence()  # the executor gave attempt 1 up; the last acknowledgement arrives after that
    assert survivors == {0: 1, 1: 1}
    ack(tasks[1])
    late = Task(jm.address, 0, 0)
    assert late.receive()["type"] == C.REFUSED
    time.sleep(0.2)
    assert n in cc.pending and not cc.completed  # nothing completes: no sink is told to commit
    for t in tasks:
        t.sock.settimeout(0.2)
        with pytest.raises(TimeoutError):
            t.receive()  # no "complete", no trigger
        t.close()
    late.close()
    time.sleep(0.2)
    assert not jm.failures  # the fenced attempt's tasks going is no news


def test_the_end_of_input_of_a_failed_attempt_never_makes_a_checkpoint_of_the_next_one_final(jm):
    """A task that failed late in an attempt: the others of that attempt may report the end of their
    input after the executor gave the attempt up. Counted, it would make the next attempt's first
    checkpoint "final": the slots would then stop waiting for a final checkpoint, and a KafkaSink's
    last transaction (prepared at the end of input, committed by the final checkpoint) would stay
    open for ever, its rows lost (seen in CI: ``test_a_kill_between_the_final_checkpoint_and_its_commit_loses_nothing``)."""
    jm.begin_attempt(0, None)
    tasks = [Task(jm.address, slot, 0) for slot in (0, 1)]
    for t in tasks:
        assert t.receive()["type"] == C.DEPLOY
        t.send({"type": C.RUNNING, "slot": t.slot, "attempt": 0})
    assert [t.receive()["type"] for t in tasks] == [C.TRIGGER, C.TRIGGER]
    cc = jm.coordinator
    tasks[0].send({"type": C.END_OF_DATA, "slot": 0, "attempt": 0})
    until(lambda: jm.end_of_data == {0})
    jm.fence()  # slot 2 failed; the executor ends attempt 1 and aborts its checkpoints
    cc.abort_all("restarting", time.monotonic())
    tasks[1].send({"type": C.END_OF_DATA, "slot": 1, "attempt": 0})  # the straggler
    time.sleep(0.3)
    assert jm.end_of_data == {0}
    assert not cc.should_trigger(time.monotonic())  # no final checkpoint asked for (the interval is 1 h)
    for t in tasks:
        t.close()
    jm.begin_attempt(1, None)
    assert not cc.pending and cc.should_trigger(time.monotonic() + 3600)
    nxt = cc.trigger(time.monotonic() + 3600)
    assert not nxt.stats.final, "the new attempt's first checkpoint was taken as its final one"
