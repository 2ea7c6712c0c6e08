"""execute_and_collect(): records come back to the program through the job manager, a program that
stops reading holds the job (bounded buffer, backpressure), closing the iterator or ending the
program cancels it, and with checkpointing every record arrives exactly once across a restart.

Real jobs on the tests' local Spark (and one `streamjob run`); the job manager's buffer logic alone
is tested at the end without Spark.
"""

from __future__ import annotations

import time
from collections import Counter

import pytest

from conftest import run_cli
from streamjob.runtime import (
    MapFunction,
    RestartStrategies,
    RuntimeContext,
    StreamExecutionEnvironment,
    Types,
    ValueStateDescriptor,
)
from streamjob.runtime.cluster.collect import LIMIT, CollectBuffer
from streamjob.runtime.connectors import DataGenSource
from streamjob.runtime.connectors.collect import MESSAGE_BYTES, WINDOW


def wait_for(predicate, timeout: float = 60.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_an_unread_unbounded_job_is_held_by_backpressure_and_close_cancels_it(spark_slots):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    it = env.from_source(DataGenSource(lambda i: i), name="numbers").map(lambda i: i).execute_and_collect("unread")
    first = [next(it) for _ in range(10)]
    client = it._client
    jm = client.job_manager
    # The program stops reading: the driver's buffer fills to its limit and then the job stops.
    wait_for(lambda: jm.collected.buffered_bytes() >= LIMIT, what="the collect buffer to fill")

    def sunk() -> int:
        return sum(v[0] for op, v in jm.operator_totals().items() if jm.operator_names.get(op, op) == "Collect Sink")

    time.sleep(2.0)  # metrics come every second
    held = sunk()
    time.sleep(1.5)
    assert sunk() == held, "the collect sink kept taking records nobody reads"
    bound = LIMIT + 2 * (WINDOW + 1) * MESSAGE_BYTES * 4 // 3  # + what each subtask may send ahead (base64)
    assert jm.collected.buffered_bytes() <= bound and client.get_job_status() == "RUNNING"
    # Reading again releases it; nothing was lost or repeated on the way (each subtask's numbers in order).
    more = first + [next(it) for _ in range(300_000)]
    for residue in (0, 1):
        mine = [x for x in more if x % 2 == residue]
        assert mine == list(range(residue, residue + 2 * len(mine), 2))
    started = time.monotonic()
    it.close()
    assert client.get_job_status() == "CANCELED" and time.monotonic() - started < 30
    with pytest.raises(StopIteration):
        next(it)


class FailOnce(MapFunction):
    """A running count per key (keyed state); attempt 0 fails at one record, after checkpoints."""

    def open(self, runtime_context: RuntimeContext):
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.INT()))
        self.attempt = runtime_context.get_attempt_number()

    def map(self, value):
        if self.attempt == 0 and value == 3000:
            raise RuntimeError("injected failure")
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        return value % 5, n


def test_with_checkpointing_every_record_arrives_once_across_a_restart(spark_slots):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(100)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(1, 0))
    n = 6000
    stream = env.from_source(DataGenSource(lambda i: i, count=n, rows_per_second=6000), name="numbers") \
        .key_by(lambda i: i % 5).map(FailOnce(), output_type=Types.TUPLE([Types.INT(), Types.INT()]))
    with stream.execute_and_collect("exactly-once") as results:
        got = list(results)
        jm = results._client.job_manager
    assert jm.restarts == 1, "the injected failure did not happen"
    per_key = Counter(k for k, _ in got)
    assert per_key == Counter(i % 5 for i in range(n))
    # Each key's running counts 1..n exactly once: none lost, none repeated (the failed attempt's
    # records after its last completed checkpoint were dropped, the restored state counts on).
    for key, total in per_key.items():
        assert sorted(c for k, c in got if k == key) == list(range(1, total + 1))


def test_streamjob_run_ends_a_program_that_leaves_an_unbounded_collect_open(tmp_path):
    job = tmp_path / "job.py"
    job.write_text(
        "from streamjob.runtime import StreamExecutionEnvironment\n"
        "from streamjob.runtime.connectors import DataGenSource\n"
        "env = StreamExecutionEnvironment.get_execution_environment()\n"
        "numbers = env.from_source(DataGenSource(lambda i: i), name='numbers')\n"
        "print('limited', len(numbers.execute_and_collect(limit=5)))\n"
        "bounded = env.from_source(DataGenSource(lambda i: i, count=9), name='nine')\n"
        "print('keyed', sorted(bounded.key_by(lambda i: i % 3).execute_and_collect()))\n"
        "left_open = env.from_source(DataGenSource(lambda i: -i), name='more').execute_and_collect()\n"
        "print('first', next(left_open))\n")
    r = run_cli("run", str(job), "--parallelism", "2", "--no-progress", timeout=120)
    assert r.returncode == 0, r.stderr
    assert "limited 5" in r.stdout and "first " in r.stdout
    assert "keyed [0, 1, 2, 3, 4, 5, 6, 7, 8]" in r.stdout  # a KeyedStream's records, not PyFlink's key/value pairs


# -- the job manager's buffer, without Spark -----------------------------------------------------
def msg(seq: int, slot: int = 0, attempt: int = 0, visible: bool = True, size: int = 10) -> dict:
    return {"id": "s", "attempt": attempt, "slot": slot, "seq": seq, "visible": visible, "data": "x" * size, "mac": "m"}


def test_buffer_acknowledges_while_there_is_room_or_a_reader_waits():
    b = CollectBuffer(limit=25)
    assert b.add(msg(1)) == [(0, "s", 1)] and b.add(msg(2)) == [(0, "s", 2)]  # 10, 20 bytes: room left
    assert b.add(msg(3)) == [] and b.add(msg(4)) == []  # 30 >= 25: the acks wait for the reader
    item, acks = b.take("s", 0)
    assert item[4] == 1 and acks == []  # 30 bytes left: still no room
    item, acks = b.take("s", 0)
    assert item[4] == 2 and acks == [(0, "s", 3), (0, "s", 4)]  # 20 < 25: owed acknowledgements go, in order
    assert b.take("s", 0)[0][4] == 3 and b.take("s", 0)[0][4] == 4 and b.take("s", 0) == (None, [])


def test_buffer_releases_records_at_their_commit_and_drops_a_failed_attempts_rest():
    b = CollectBuffer()
    for seq in (1, 2, 3):
        b.add(msg(seq, visible=False))
    assert b.take("s", 0)[0] is None  # nothing committed yet
    b.commit({"id": "s", "attempt": 0, "slot": 0, "seq": 2})
    assert [b.take("s", 0)[0][4] for _ in range(2)] == [1, 2] and b.take("s", 0)[0] is None
    b.begin_attempt(1)
    b.add(msg(1, attempt=1, visible=False))
    b.commit({"id": "s", "attempt": 0, "slot": 0, "seq": 2})  # a restored subtask commits again: nothing new
    b.attempt_running(1)  # attempt 0's seq 3 came after its last checkpoint: never committed
    assert b.dropped == 1 and b.buffered_bytes() == 10
    b.commit({"id": "s", "attempt": 1, "slot": 0, "seq": 1})
    item = b.take("s", 0)[0]
    assert (item[2], item[4]) == (1, 1)


def test_a_waiting_reader_lets_deferred_acknowledgements_go():
    b = CollectBuffer(limit=5)
    assert b.add(msg(1, size=10)) == []  # 10 visible bytes >= 5: deferred
    # A reader waiting for another sink's records (or for records still pending their checkpoint):
    # what is owed goes out, or a sink that needs room to reach its next barrier would never commit.
    assert b.take("other", 0) == (None, [(0, "s", 1)])
    assert b.take("s", 0)[0][4] == 1
