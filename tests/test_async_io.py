"""Async I/O (AsyncDataStream / AsyncFunction): the element queues, the operator driven by hand on its
real asyncio loop thread, and jobs on real local Spark, with tasks killed at random moments."""

from __future__ import annotations

import asyncio
import glob
import json
import os
import random
import threading
import time

import numpy as np
import pytest

from jobs import async_lookup
from streamjob.runtime import (
    AsyncDataStream,
    AsyncFunction,
    AsyncFunctionDescriptor,
    AsyncRetryStrategy,
    StreamExecutionEnvironment,
    Time,
)
from streamjob.runtime.api.functions import RuntimeContext
from streamjob.runtime.cluster.executor import JobExecutionError
from streamjob.runtime.connectors import DataGenSource, DiscardingSink
from streamjob.runtime.graph.job_graph import build_job_graph
from streamjob.runtime.network.events import MAX_WATERMARK, Watermark
from streamjob.runtime.task.async_queue import OrderedQueue, RecordEntry, UnorderedQueue, WatermarkEntry
from streamjob.runtime.task.base import OperatorFailure
from streamjob.runtime.task.operators import create_operator
from test_checkpointing import kill_tasks_at_random


# -- the queues (pure) -----------------------------------------------------------------------------
def _records(queue, values):
    entries = [RecordEntry(v, None) for v in values]
    for e in entries:
        queue.add(e)
    return entries


def _out(entries):
    return [("wm", e.timestamp) if isinstance(e, WatermarkEntry) else e.value for e in entries]


def test_ordered_queue_lets_an_entry_leave_only_after_everything_before_it():
    q = OrderedQueue(4)
    a, b, c = _records(q, "abc")
    q.add(WatermarkEntry(10))
    assert not q.has_room()
    q.complete(c, ["C"])
    q.complete(b, ["B"])
    assert q.pop_ready() == []  # a is still in flight
    assert _out(q) == ["a", "b", "c", ("wm", 10)]
    q.complete(a, ["A"])
    assert _out(q.pop_ready()) == ["a", "b", "c", ("wm", 10)]
    assert len(q) == 0 and q.has_room()


def test_unordered_queue_emits_as_completed_but_never_across_a_watermark():
    q = UnorderedQueue(10)
    a, b = _records(q, "ab")
    q.add(WatermarkEntry(10))
    c, d = _records(q, "cd")
    q.complete(d, ["D"])
    q.complete(b, ["B"])
    assert _out(q.pop_ready()) == ["b"]  # d waits behind the watermark, the watermark behind a
    assert _out(q) == ["a", ("wm", 10), "c", "d"]  # what a snapshot holds, in input order
    q.complete(a, ["A"])
    assert _out(q.pop_ready()) == ["a", ("wm", 10), "d"]
    q.complete(c, ["C"])
    assert _out(q.pop_ready()) == ["c"]
    assert len(q) == 0


def test_unordered_queue_takes_restored_completed_records_as_ready():
    q = UnorderedQueue(3)
    done = RecordEntry("x", None)
    done.done, done.result = True, ["X"]
    q.add(done)
    (pending,) = _records(q, "y")
    assert _out(q.pop_ready()) == ["x"]
    assert _out(q) == ["y"]


# -- the operator, driven by hand ----------------------------------------------------------------------
class Harness:
    """The async wait operator of a small job, fed batches by hand; completions are taken in as the
    task would (poll_async when its doorbell rings)."""

    def __init__(self, fn, ordered=True, capacity=100, timeout=Time.seconds(5), retry=None, restore=None):
        env = StreamExecutionEnvironment.get_execution_environment()
        source = env.from_collection([0])
        if retry is None:
            wait = AsyncDataStream.ordered_wait if ordered else AsyncDataStream.unordered_wait
            stream = wait(source, fn, timeout, capacity)
        else:
            wait = AsyncDataStream.ordered_wait_with_retry if ordered else AsyncDataStream.unordered_wait_with_retry
            stream = wait(source, fn, timeout, retry, capacity)
        stream.name("lookup")
        stream.sink_to(DiscardingSink())
        g = build_job_graph(env._transformations, env.get_config(), "t")
        node = g.operators[stream._t.id]
        self.op = create_operator(node, RuntimeContext(node.name, 0, 1, 128, job_parameters=g.config))
        if restore is not None:  # one subtask's operator state, or a list of them (a rescale)
            self.op.operator_state.restore(restore if isinstance(restore, list) else [restore], 0, 1)
        self.out: list = []
        self.op.output.connect(lambda b, ts: self.out.extend(zip(b, ts.tolist() if ts is not None else [None] * len(b))),
                               None, lambda e: self.out.append(("wm", e.timestamp_ms)) if isinstance(e, Watermark) else None)
        self.op.open()

    def feed(self, values, ts=None):
        self.op.process_batch(list(values), 0, None if ts is None else np.asarray(ts, dtype=np.int64))
        return self

    def until(self, condition, timeout=10.0):
        deadline = time.monotonic() + timeout
        while not condition():
            assert time.monotonic() < deadline, f"not done in {timeout} s; out: {self.out}"
            self.op.doorbell.wait(0.05)
            self.op.poll_async()

    def values(self):
        return [v for v, _ in self.out if v != "wm"]

    def finish(self, end_of_input=True):
        if end_of_input:  # what a source sends when its input ends (or it drains)
            self.op.process_watermark(MAX_WATERMARK)
        self.op.finish()
        self.op.close()
        self.op.dispose()
        return self


class Sleepy(AsyncFunction):
    """Record (value, delay_ms) comes back as [value * 2] after delay_ms; counts calls in flight."""

    def __init__(self):
        self.in_flight = 0
        self.most = 0
        self.calls = 0

    async def async_invoke(self, value):
        self.calls += 1
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        try:
            await asyncio.sleep(value[1] / 1000.0)
        finally:
            self.in_flight -= 1
        return [value[0] * 2]


def test_ordered_wait_emits_in_input_order_unordered_as_completed():
    delays = [(i, d) for i, d in enumerate([120, 10, 60, 0, 90, 30])]
    ordered = Harness(Sleepy(), ordered=True).feed(delays)
    unordered = Harness(Sleepy(), ordered=False).feed(delays)
    for h in (ordered, unordered):
        h.until(lambda h=h: len(h.out) == len(delays))
        h.finish()
    assert ordered.values() == [0, 2, 4, 6, 8, 10]
    assert unordered.values() == [2 * i for i, _ in sorted(delays, key=lambda r: r[1])]  # fastest first


def test_unordered_wait_keeps_results_behind_the_watermark_that_preceded_them():
    h = Harness(Sleepy(), ordered=False)
    h.feed([(1, 150)], ts=[5])
    h.op.process_watermark(10)
    h.feed([(2, 0), (3, 20)], ts=[11, 12])
    h.until(lambda: len(h.out) == 4)
    assert h.out == [(2, 5), ("wm", 10), (4, 11), (6, 12)]  # results keep their record's timestamp
    h.finish()


def test_watermark_with_nothing_in_flight_passes_at_once():
    h = Harness(Sleepy(), ordered=True)
    h.op.process_watermark(7)
    assert h.out == [("wm", 7)]
    h.finish()


def test_capacity_bounds_the_calls_in_flight_and_holds_the_tasks_input():
    fn = Sleepy()
    h = Harness(fn, ordered=False, capacity=3)
    h.feed([(i, 30) for i in range(10)])
    assert not h.op.is_available()  # the task takes no input while the queue is full
    assert len(h.op.queue) == 3 and len(h.op.backlog) == 7
    h.until(lambda: len(h.out) == 10)
    assert fn.most == 3  # never more than the capacity, and the capacity was used
    assert h.op.is_available()
    h.finish()


def test_end_of_input_and_a_graceful_stop_wait_for_every_call_in_flight():
    h = Harness(Sleepy(), ordered=True, capacity=4)
    h.feed([(i, 40) for i in range(8)])
    h.op.snapshot_state(1)  # a checkpoint on the way changes nothing
    h.finish()
    assert h.values() == [2 * i for i in range(8)]
    assert h.out[-1] == ("wm", MAX_WATERMARK)  # after every result
    # A graceful stop (the sources stop, event time does not end): every record in flight drains too.
    stopped = Harness(Sleepy(), ordered=True, capacity=4)
    stopped.feed([(i, 40) for i in range(8)])
    stopped.finish(end_of_input=False)
    assert stopped.values() == [2 * i for i in range(8)]


def test_a_stop_with_savepoint_without_drain_leaves_the_calls_in_flight_to_the_savepoint():
    h = Harness(Sleepy(), ordered=True, capacity=4)
    h.feed([(i, 40) for i in range(8)])
    state = h.op.snapshot_state(1, full=True).operator_state  # the stop's savepoint (full), no input after it
    h.finish(end_of_input=False)
    assert h.values() == []
    assert len(state["_async_wait_operator_state_"][1]) == 8
    again = Harness(Sleepy(), ordered=True, capacity=4, restore=state)
    again.finish()
    assert again.values() == [2 * i for i in range(8)]


class Slow(AsyncFunction):
    async def async_invoke(self, value):
        await asyncio.sleep(10)
        return [value]


class SlowWithTimeout(Slow):
    def timeout(self, value):
        return [("timed out", value)]


def test_timeout_gives_the_functions_timeout_result():
    h = Harness(SlowWithTimeout(), timeout=Time.milliseconds(50))
    h.feed([1, 2])
    h.until(lambda: len(h.out) == 2)
    assert h.values() == [("timed out", 1), ("timed out", 2)]
    h.finish()


def test_timeout_without_a_timeout_method_fails_naming_the_operator_and_the_record():
    h = Harness(Slow(), timeout=Time.milliseconds(50))
    h.feed([{"id": "order-17"}])
    with pytest.raises(OperatorFailure) as e:
        h.until(lambda: False)
    message = str(e.value)
    assert "operator 'lookup'" in message
    assert "{'id': 'order-17'}" in message and "did not complete within 50 ms" in message
    assert "Async function call has timed out" in message
    h.op.dispose()


class Raises(AsyncFunction):
    async def async_invoke(self, value):
        if value == 3:
            raise ConnectionError("service unreachable")
        return [value]


def test_an_exception_of_async_invoke_fails_naming_the_operator_and_the_record():
    h = Harness(Raises())
    h.feed([1, 2, 3])
    with pytest.raises(OperatorFailure) as e:
        h.until(lambda: False)
    assert "operator 'lookup'" in str(e.value)
    assert "async_invoke of record 3 raised ConnectionError: service unreachable" in str(e.value)
    h.op.dispose()


class NotAList(AsyncFunction):
    async def async_invoke(self, value):
        return value


def test_a_result_that_is_not_a_list_is_refused():
    h = Harness(NotAList())
    h.feed([5])
    with pytest.raises(OperatorFailure, match="The result of AsyncFunction should be of list type, got int"):
        h.until(lambda: False)
    h.op.dispose()


def test_the_snapshot_holds_what_is_in_flight_and_restore_sends_it_again():
    fn = Sleepy()
    h = Harness(fn, ordered=True, capacity=3)
    h.feed([(0, 0), (1, 1000), (2, 0), (3, 0), (4, 0), (5, 0)])  # 0 leaves, 1 holds 2 and 3 back; 4, 5 in the backlog
    h.until(lambda: len(h.out) == 1 and sum(e.done for e in h.op.queue) == 2)  # 2 and 3 wait behind 1
    snap = h.op.snapshot_state(1)
    state = snap.operator_state
    h.op.dispose()
    items = state["_async_wait_operator_state_"][1]
    assert [(i[1][0], i[3]) for i in items] == [(1, False), (2, True), (3, True), (4, False), (5, False)]
    assert items[1][4] == [4]  # a completed record is stored with its result, not called again

    again_fn = Sleepy()
    again = Harness(again_fn, ordered=True, capacity=3, restore=state)
    again.until(lambda: len(again.out) == 5)
    assert again.values() == [2, 4, 6, 8, 10]
    assert again_fn.calls == 3  # 1, 4 and 5
    again.finish()


def test_in_flight_records_of_two_subtasks_restore_into_one():
    states = []
    for first in (0, 100):
        h = Harness(Sleepy(), ordered=True, capacity=5)
        h.feed([(first + i, 300) for i in range(3)])  # snapshotted at once: all three in flight
        states.append(h.op.snapshot_state(1).operator_state)
        h.op.dispose()
    again = Harness(Sleepy(), ordered=True, capacity=5, restore=states)
    again.feed([(7, 0)])
    again.finish()
    assert again.values() == [0, 2, 4, 200, 202, 204, 14]  # restored first, in their order, then new input


@pytest.fixture
def double_service():
    """A real HTTP service on 127.0.0.1 (aiohttp, its own loop thread): GET /double?v=N answers
    {"doubled": 2N} after a random few milliseconds; it stops with the test."""
    from aiohttp import web

    async def double(request):
        await asyncio.sleep(random.uniform(0, 0.01))
        return web.json_response({"doubled": 2 * int(request.query["v"])})

    loop = asyncio.new_event_loop()
    app = web.Application()
    app.router.add_get("/double", double)
    runner = web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = site._server.sockets[0].getsockname()[1]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{port}/double"
    asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    loop.close()


class HttpDouble(AsyncFunction):
    """The usual shape: an aiohttp session made in open() (it needs the running loop), closed in an
    async close()."""

    def __init__(self, url):
        self.url = url
        self.session = None

    def open(self, runtime_context):
        import aiohttp

        self.session = aiohttp.ClientSession()

    async def async_invoke(self, value):
        async with self.session.get(self.url, params={"v": value}) as response:
            return [(value, (await response.json())["doubled"])]

    async def close(self):
        await self.session.close()


@pytest.mark.parametrize("ordered", [True, False], ids=["ordered", "unordered"])
def test_calls_to_a_real_http_service_with_an_aiohttp_session_made_in_open(double_service, ordered):
    fn = HttpDouble(double_service)
    h = Harness(fn, ordered=ordered, capacity=20)
    h.feed(range(200))
    h.finish()
    assert sorted(h.values()) == [(i, 2 * i) for i in range(200)]
    if ordered:
        assert h.values() == [(i, 2 * i) for i in range(200)]
    assert fn.session.closed


class Flaky(AsyncFunction):
    """Fails the first two attempts of each record, then answers [value]; odd results are retried once."""

    def __init__(self):
        self.attempts: dict = {}

    async def async_invoke(self, value):
        n = self.attempts[value] = self.attempts.get(value, 0) + 1
        if n <= 2:
            raise ConnectionError(f"attempt {n}")
        return [value + (1 if n == 3 and value % 2 else 0)]


def test_fixed_delay_retry_on_exceptions_and_results():
    fn = Flaky()
    strategy = AsyncRetryStrategy.fixed_delay(5, 10, result_predicate=lambda r: r[0] % 2 == 0 and r[0] > 10,
                                              exception_predicate=lambda e: isinstance(e, ConnectionError))
    h = Harness(fn, ordered=True, retry=strategy)
    h.feed([1, 2, 11])
    h.until(lambda: len(h.out) == 3)
    # 1 -> 2 on attempt 3 (even, not > 10: kept); 2 -> 2; 11 -> 12 on attempt 3 (retried) -> 11 on attempt 4
    assert h.values() == [2, 2, 11]
    assert fn.attempts == {1: 3, 2: 3, 11: 4}
    h.finish()


def test_retries_stop_at_max_attempts_and_the_last_error_fails_the_job():
    fn = Flaky()
    strategy = AsyncRetryStrategy.fixed_delay(1, 5, exception_predicate=lambda e: True)
    h = Harness(fn, ordered=True, retry=strategy)
    h.feed([4])
    with pytest.raises(OperatorFailure, match="async_invoke of record 4 raised ConnectionError: attempt 2"):
        h.until(lambda: False)
    h.op.dispose()


def test_exponential_backoff_grows_to_its_maximum():
    s = AsyncRetryStrategy.exponential_backoff(5, 100, 1000, 3.0)
    assert [s.get_backoff_time_millis(n) for n in range(1, 6)] == [100, 300, 900, 1000, 1000]
    assert s.can_retry(5) and not s.can_retry(6)
    assert not AsyncRetryStrategy.no_retry().can_retry(1)


def test_mistakes_are_refused_where_the_job_is_built():
    env = StreamExecutionEnvironment.get_execution_environment()
    ds = env.from_collection([1])

    class NotAsync(AsyncFunction):
        def async_invoke(self, value):
            return [value]

    with pytest.raises(TypeError, match="Method 'async_invoke' of class 'NotAsync' should be declared as 'async def'"):
        AsyncDataStream.unordered_wait(ds, NotAsync(), Time.seconds(1))
    with pytest.raises(ValueError, match="capacity"):
        AsyncDataStream.ordered_wait(ds, Sleepy(), Time.seconds(1), 0)
    with pytest.raises(TypeError, match="Time or Duration"):
        AsyncDataStream.ordered_wait(ds, Sleepy(), 5)
    with pytest.raises(ValueError, match="Timeout should be configured when do async with retry"):
        AsyncDataStream.unordered_wait_with_retry(ds, Sleepy(), Time.seconds(0), AsyncRetryStrategy.fixed_delay(2, 10))
    with pytest.raises(ValueError, match="max_attempts"):
        AsyncRetryStrategy.fixed_delay(0, 10)
    d = AsyncDataStream.ordered_wait(ds, Sleepy(), Time.seconds(2), 7)._t.fn
    assert isinstance(d, AsyncFunctionDescriptor) and d.ordered and d.capacity == 7 and d.timeout_ms == 2000


# -- real Spark ------------------------------------------------------------------------------------------
def committed(out: str) -> list[list[tuple]]:
    """The committed part files (glob skips hidden in-progress / pending ones), each as its rows in order."""
    files = []
    for path in sorted(glob.glob(os.path.join(out, "*"))):
        with open(path) as f:
            files.append([(r["i"], r["doubled"]) for r in map(json.loads, f)])
    return files


def test_random_kills_lose_and_duplicate_nothing_ordered_and_unordered(spark_slots, tmp_path):
    rng = random.Random(int(time.time()))
    rows = 9_000  # 3 s of input; each kill leaves at most 0.6 s of progress behind
    out, checkpoints = str(tmp_path / "out"), str(tmp_path / "checkpoints")
    # One job, one pipeline per mode (each its own source), so every kill hits both; unaligned checkpoints:
    # records rebalanced to the unordered operator are channel state, its queue operator state.
    env = async_lookup.build(out, checkpoints, rows, rate=3000, ordered=None, interval_ms=rng.randint(150, 400),
                             unaligned=True)
    client = env.execute_async("async-lookup")
    killed = kill_tasks_at_random(client, 3, rng, pause=(0.2, 0.6))
    result = client.get_job_execution_result(300)
    assert len(killed) >= 3, "the job finished before the test could kill 3 tasks"
    assert result.restarts >= 3
    for mode in ("unordered", "ordered"):
        files = committed(os.path.join(out, mode))
        got = sorted(r for f in files for r in f)
        assert len(got) == rows, mode
        assert got == async_lookup.expected_rows(rows), mode
        if mode == "ordered":  # each subtask wrote its records in input order (DataGen's split of a subtask ascends)
            for f in files:
                assert [i for i, _ in f] == sorted(i for i, _ in f)


def test_stop_with_savepoint_and_resume_at_another_parallelism_is_exactly_one_run(spark_slots, tmp_path):
    """The calls in flight at a stop-with-savepoint (without drain) are in the savepoint and sent again by
    the resumed job, which runs at parallelism 2 instead of 3 (the in-flight records are redistributed)."""
    rows = 9_000
    out, savepoints = str(tmp_path / "out"), str(tmp_path / "savepoints")
    env = async_lookup.build(out, str(tmp_path / "checkpoints"), rows, rate=3000, ordered=None, interval_ms=250)
    client = env.execute_async("async-lookup")
    assert client.wait_until_running(60)
    deadline = time.monotonic() + 60
    while client.job_manager.coordinator.counts["COMPLETED"] < 1 and time.monotonic() < deadline:
        time.sleep(0.05)  # the tasks process records (running is said before the first one)
    time.sleep(1.0)
    path = client.stop_with_savepoint(False, savepoints, timeout=120)
    client.get_job_execution_result(120)
    partial = [sorted(r for f in committed(os.path.join(out, m)) for r in f) for m in ("unordered", "ordered")]
    assert all(0 < len(p) < rows for p in partial), "the first run should stop in the middle"
    async_lookup.build(out, str(tmp_path / "checkpoints"), rows, rate=3000, ordered=None, interval_ms=250,
                       parallelism=2, restore=path).execute("async-lookup")
    for mode in ("unordered", "ordered"):
        got = sorted(r for f in committed(os.path.join(out, mode)) for r in f)
        assert got == async_lookup.expected_rows(rows), mode


def test_a_failing_call_fails_the_job_naming_the_operator_and_the_record(spark_slots):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)

    class Lookup(AsyncFunction):
        async def async_invoke(self, value):
            if value == 1234:
                raise KeyError(f"no customer {value}")
            return [value]

    stream = AsyncDataStream.unordered_wait(env.from_source(DataGenSource(lambda i: i, count=5000)), Lookup(),
                                            Time.seconds(5))
    stream.name("customers").sink_to(DiscardingSink())
    with pytest.raises(JobExecutionError) as info:
        env.execute("failing-lookup")
    message = str(info.value)
    assert "operator 'customers'" in message
    assert "async_invoke of record 1234 raised KeyError" in message
    assert info.value.operator == "customers"
