"""Queryable state (issue 31, part 1): a running job's keyed state looked up by key from outside it.

Without Spark: keys given as JSON convert with the job's key type (or fail naming it), values go back as
JSON, a key routes to the subtask records with that key go to, names are unique per job (at build time),
and a subtask's lookup reads its live backend as the function does (both backends; TTL: an expired
value is absent) without changing the key the function sees.
On Spark (tests/jobs/queryable_counts.py, both backends): at quiescence every user's count, last values
and per-parity map equal what the input says, live and from the latest checkpoint; the REST API's
errors (unknown name 404 listing the names, a key of the wrong type 400 naming it); a task killed
mid-run: lookups answer 200 or 503 with Retry-After while the job restarts, and the same values after;
`streamjob state query` and QueryableStateClient give the same answers. Ten random task kills while
input arrives and a client looks up without pause: only 200s and 503s (Retry-After), checkpoint-consistent
values never go back, and at quiescence both modes equal the input."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from streamjob.runtime import queryable_frames as frames
from streamjob.runtime import StreamExecutionEnvironment, Types
from streamjob.runtime.api.functions import KeyedProcessFunction
from streamjob.runtime.api.queryable import KeyTypeError, convert_key, to_json
from streamjob.runtime.api.state import (ListStateDescriptor, MapStateDescriptor, StateTtlConfig,
                                         ValueStateDescriptor)
from streamjob.runtime.api.types import Row
from streamjob.runtime.cluster.queryable_state import KeyedOperator, QueryError, QueryRouter, route, url_key
from streamjob.runtime.connectors import DataGenSource
from streamjob.runtime.graph.job_graph import JobDefinitionError
from streamjob.runtime.rest_client import RestError
from streamjob.runtime.keygroups import assign_key_groups, operator_index_for_key_group

JOB = Path(__file__).parent / "jobs" / "queryable_counts.py"


# -- without Spark ------------------------------------------------------------------------------------
def test_keys_convert_with_the_jobs_key_type_or_say_which_type_they_need():
    assert convert_key("u1", Types.STRING()) == "u1"
    assert convert_key(7, Types.INT()) == 7 and convert_key("7", Types.LONG()) == 7
    assert convert_key(2, Types.DOUBLE()) == 2.0 and convert_key(True, Types.BOOLEAN()) is True
    assert convert_key([1, "a"], Types.TUPLE([Types.INT(), Types.STRING()])) == (1, "a")
    row = convert_key({"id": 3, "region": "eu"}, Types.ROW_NAMED(["id", "region"], [Types.INT(), Types.STRING()]))
    assert row == Row(id=3, region="eu")
    assert convert_key([3, "eu"], Types.ROW_NAMED(["id", "region"], [Types.INT(), Types.STRING()])) == row
    assert convert_key([1, [2, 3]]) == (1, (2, 3))  # no key type: JSON's own, arrays as tuples
    for raw, t, words in (("abc", Types.INT(), "expected a key of type Integer: an integer"),
                          (7, Types.STRING(), "expected a key of type String: a JSON string"),
                          ([1], Types.TUPLE([Types.INT(), Types.INT()]), "an array of 2 values"),
                          ({"id": 1}, Types.ROW_NAMED(["id", "r"], [Types.INT(), Types.STRING()]), "fields ['id', 'r']")):
        with pytest.raises(KeyTypeError, match=re.escape(words)):
            convert_key(raw, t)
    with pytest.raises(KeyTypeError, match="needs the job's key type"):
        convert_key({"a": 1})
    # a URL's key: JSON, or a bare word as a string; a string key type takes digits as text
    assert url_key("42", None) == 42 and url_key("alice", None) == "alice" and url_key("42", Types.STRING()) == "42"
    assert url_key('"42"', Types.STRING()) == "42" and url_key("[1,2]", None) == [1, 2]


def test_values_go_back_as_json():
    import datetime
    import decimal

    assert to_json(Row(a=1, b=Row(2, "x"))) == {"a": 1, "b": [2, "x"]}
    assert to_json({"k": (1, 2), 3: {"x"}}) == {"k": [1, 2], "3": ["x"]}
    assert to_json(datetime.date(2026, 11, 27)) == "2026-11-27" and to_json(decimal.Decimal("1.50")) == "1.50"
    assert to_json(b"\x00\x01") == {"base64": "AAE="} and to_json(float("nan")) == "nan"
    assert to_json(KeyedOperator(1, "a", "b", 2, 128, 0)) == {"id": 1, "name": "a", "uid": "b", "parallelism": 2,
                                                              "max_parallelism": 128, "first_slot": 0, "key_type": None}
    assert to_json(Path("/x"))["repr"] == "PosixPath('/x')"  # no JSON shape: its repr
    import numpy as np

    assert to_json(np.int64(5)) == 5 and to_json(np.float32(0.5)) == 0.5


def test_a_key_routes_where_its_records_go():
    op = KeyedOperator(4, "count", "count", parallelism=3, max_parallelism=128, first_slot=1)
    keys = [f"user-{i}" for i in range(200)] + list(range(200))
    groups = assign_key_groups(keys, 128)
    for key, group in zip(keys, groups):
        assert route(op, key) == (group, operator_index_for_key_group(128, 3, group),
                                  1 + operator_index_for_key_group(128, 3, group))


def test_the_router_names_what_is_wrong():
    op = KeyedOperator(4, "count", "count", 2, 128, 0, Types.INT())
    other = KeyedOperator(9, "other", "other-uid", 2, 128, 0, None)
    router = QueryRouter({4: op, 9: other})
    with pytest.raises(QueryError, match="no queryable state 'c' in this job; queryable states: none yet") as e:
        router.find("c")
    assert e.value.status == 404
    assert router.register([{"name": "c", "op": 4, "kind": "value", "state": "count"}]) == []
    problems = router.register([{"name": "c", "op": 9, "kind": "value", "state": "x"}])
    assert problems and "declared by two operators: 'count' (uid 'count') and 'other' (uid 'other-uid')" in problems[0]
    with pytest.raises(QueryError) as e:
        router.find("c")
    assert e.value.status == 409
    router.register([{"name": "d", "op": 4, "kind": "value", "state": "count"}])
    with pytest.raises(QueryError, match=r"key 'x': expected a key of type Integer") as e:
        router.keys(router.find("d"), ["x"])
    assert e.value.status == 400 and e.value.extra == {"expected": "Integer"}


class _Holds(KeyedProcessFunction):
    declared = ValueStateDescriptor("count").set_queryable("counts")

    def process_element(self, value, ctx):
        yield value


class _AlsoHolds(KeyedProcessFunction):
    def __init__(self):
        self.d = ValueStateDescriptor("other").set_queryable("counts")

    def process_element(self, value, ctx):
        yield value


def test_a_name_declared_twice_fails_where_the_job_is_built():
    env = StreamExecutionEnvironment.get_execution_environment()
    s = env.from_source(DataGenSource(lambda i: {"k": i % 3}, count=10), name="gen")
    s.key_by(lambda r: r["k"]).process(_Holds()).name("first").print()
    s.key_by(lambda r: r["k"]).process(_AlsoHolds()).name("second").print()
    with pytest.raises(JobDefinitionError, match="queryable state name 'counts' is declared by two operators: "
                                                 "'first' and 'second'"):
        env._build("clash")
    for bad in ("", "a/b", "x y"):
        with pytest.raises(ValueError, match="set_queryable"):
            ValueStateDescriptor("v").set_queryable(bad)


@pytest.mark.parametrize("backend_type", ["hashmap", "rocksdb"])
def test_a_lookup_reads_the_live_backend_as_the_function_does(tmp_path, backend_type):
    from streamjob.runtime.config import Configuration
    from streamjob.runtime.keygroups import key_group_range
    from streamjob.runtime.state.backends import create_keyed_backend
    from streamjob.runtime.task import queryable

    backend = create_keyed_backend(Configuration({"state.backend.type": backend_type,
                                                  "state.backend.rocksdb.localdir": str(tmp_path)}),
                                   "op", 128, key_group_range(128, 1, 0), str(tmp_path))
    now = [1_000_000]
    backend.ttl_clock = lambda: now[0]
    ttl = StateTtlConfig.new_builder(1000).build()
    value = ValueStateDescriptor("v").set_queryable("v")
    listed = ListStateDescriptor("l").set_queryable("l")
    mapped = MapStateDescriptor("m").set_queryable("m")
    expiring = ValueStateDescriptor("t")
    expiring.enable_time_to_live(ttl)
    expiring.set_queryable("t")
    for key in ("a", "b"):
        backend.current_key = key
        backend.get_state(value).update(len(key) * 10)
        backend.get_list_state(listed).add(key)
        backend.get_map_state(mapped).put("x", key)
        backend.get_state(expiring).update("fresh")

    class Op:  # what lookup needs of an operator
        keyed_backend = backend

    assert [r["name"] for r in queryable.registrations({3: Op()}, set())] == ["v", "l", "m", "t"]
    backend.current_key = "b"  # the function's key stays as it was
    got = queryable.lookup(Op(), "v", ["a", "zzz"], None)
    assert [(r["key"], r["found"], r["value"]) for r in got] == [("a", True, 10), ("zzz", False, None)]
    assert queryable.lookup(Op(), "l", ["a"], None)[0]["value"] == ["a"]
    assert queryable.lookup(Op(), "m", ["b"], None)[0]["value"] == {"x": "b"}
    assert queryable.lookup(Op(), "t", ["a"], None)[0]["value"] == "fresh"
    now[0] += 5000  # past the TTL: absent, as the function would see it
    assert queryable.lookup(Op(), "t", ["a"], None)[0]["found"] is False
    assert backend.current_key == "b"
    backend.dispose()


@pytest.mark.parametrize("use_signals", [True, False], ids=["sigio-in-the-task-thread", "lookup-thread"])
def test_the_query_server_answers_between_two_bytecodes_of_a_busy_task_thread(tmp_path, use_signals):
    """The task thread is busy in Python (as in a batch): a lookup sent to it is answered meanwhile, by
    SIGIO's handler in that very thread (no other thread), or by the lookup thread where signals are off."""
    import socket
    import threading

    from streamjob.runtime.config import Configuration
    from streamjob.runtime.keygroups import key_group_range
    from streamjob.runtime.state.backends import create_keyed_backend
    from streamjob.runtime.task import queryable

    backend = create_keyed_backend(Configuration({"state.backend.type": "hashmap"}), "op", 128,
                                   key_group_range(128, 1, 0), str(tmp_path))
    counts = ValueStateDescriptor("c").set_queryable("counts")
    backend.current_key = "k"
    backend.get_state(counts).update(7)

    class Op:
        keyed_backend = backend
        node = None

    jm = socket.create_server(("127.0.0.1", 0))
    server = queryable.QueryServer(jm.getsockname(), 0, 0, {5: Op()}, lambda node: None, lambda: 3,
                                   use_signals=use_signals)
    conn, _ = jm.accept()
    reader = conn.makefile("rb")
    assert json.loads(reader.readline())["type"] == "query_channel"
    threads = {t.name for t in threading.enumerate()}
    assert any(n.startswith("queryable-state") for n in threads) is (not use_signals)
    answered: list = []

    def ask() -> None:
        conn.sendall((json.dumps({"type": "query", "batch": [{"id": "q1", "op": 5, "name": "counts",
                                                                "keys": ["k", "x"]}]}) + "\n").encode())
        answered.append(json.loads(reader.readline()))

    def ask_directly() -> None:  # a client on the subtask's own lookup port, with and without its ticket
        host, port, ticket = server.port
        with socket.create_connection((host, port), timeout=10) as c:
            c.sendall(frames.encode({"ticket": "guess"}))
            answered.append(frames.recv(c))
            assert c.recv(1) == b"", "the connection closes after a wrong ticket"
        with socket.create_connection((host, port), timeout=10) as c:
            c.sendall(frames.encode({"ticket": ticket}))
            answered.append(frames.recv(c))
            c.sendall(frames.encode({"id": 1, "name": "counts", "keys": ["k", "x"]})
                      + frames.encode({"id": 2, "name": "nope", "keys": ["k"]}))
            answered.extend([frames.recv(c), frames.recv(c)])

    for target in (ask, ask_directly):
        asker = threading.Thread(target=target)
        deadline = time.monotonic() + 10
        asker.start()
        while asker.is_alive() and time.monotonic() < deadline:
            sum(range(1000))  # the task thread computing, never waiting on the query connection
        asker.join(1)
    try:
        msg, refused, hello, direct, unknown = answered
        assert msg["checkpoint"] == 3 and [(r["key"], r["found"], r["value"]) for r in msg["batch"][0]["results"]] \
            == [("k", True, 7), ("x", False, None)]
        assert refused["status"] == 401 and "ticket" in refused["error"]
        assert hello == {"slot": 0, "attempt": 0}
        assert direct["id"] == 1 and direct["status"] == 200 and direct["checkpoint"] == 3
        assert [(r["key"], r["found"], r["value"]) for r in direct["results"]] == [("k", True, 7), ("x", False, None)]
        assert unknown["id"] == 2 and unknown["status"] == 404 and "nope" in unknown["error"]
    finally:
        server.close()
        conn.close()
        jm.close()
        backend.dispose()
    import signal

    assert signal.getsignal(signal.SIGIO) == signal.SIG_DFL


def test_the_pacer_batches_an_open_loop_lets_a_sequential_client_be_and_stops_a_flood():
    """Pure decisions (task/queryable.py's Pacer): requests 1 ms apart are answered in timed passes; a
    client that asks only after each answer is let go back to a signal per request (and held there,
    longer each time it comes back); a pass cut by its budget batches even then; quiet ends batching."""
    from streamjob.runtime.task.queryable import Pacer

    p = Pacer(wait=0.002, judge_after=4, hold=0.05, max_hold=0.2)
    assert p.after(10.000, 1, False) == Pacer.NONE  # the first request: answered at its signal
    assert p.after(10.001, 1, False) == Pacer.BATCH  # the next 1 ms later: timed passes from now on
    t = 10.001
    for _ in range(10):  # an open loop: ~2 requests a pass
        t += 0.002
        assert p.after(t, 2, False) == Pacer.BATCH
    assert p.after(t + 0.002, 0, False) == Pacer.BATCH  # one quiet pass is not yet quiet
    assert p.after(t + 0.004, 0, False) == Pacer.SIGNALS  # two are
    assert not p.batching

    # A sequential client: one request per pass, passes close together.
    t = 20.0
    assert p.after(t, 1, False) == Pacer.NONE
    t += 0.0005
    assert p.after(t, 1, False) == Pacer.BATCH
    steps = []
    for _ in range(4):
        t += 0.002
        steps.append(p.after(t, 1, False))
    assert steps == [Pacer.BATCH] * 3 + [Pacer.SIGNALS]  # judged after 4 passes: nothing gained
    for _ in range(20):  # held: its requests are answered at their signals however close
        t += 0.0005
        assert p.after(t, 1, False) == Pacer.NONE
    t += 0.05
    assert p.after(t, 1, False) == Pacer.NONE
    t += 0.0005
    assert p.after(t, 1, False) == Pacer.BATCH  # the hold is over: tried again, and let go again
    for _ in range(4):
        t += 0.002
        last = p.after(t, 1, False)
    assert last == Pacer.SIGNALS and p.hold_until == pytest.approx(t + 0.1)  # held twice as long
    assert p.after(t + 0.001, 3, True) == Pacer.BATCH  # a pass cut by its budget: batched even when held
    for _ in range(4):  # a flood: cut passes are never judged a waste
        t += 0.002
        assert p.after(t, 1, True) == Pacer.BATCH
    assert Pacer(enabled=False).after(1.0, 5, True) == Pacer.NONE


def test_every_request_is_answered_through_bursts_sequences_and_pauses_while_the_task_thread_computes(tmp_path):
    """The signal-driven server under each pattern the pacer tells apart: a burst of pipelined requests
    (passes cut by their budget), a sequential client, an open loop, pauses (back to signals): every
    request answered once, in order, with its value, while the task thread computes all along; the pacer
    batched at some point and ends back on signals."""
    import socket
    import threading

    from streamjob.runtime.config import Configuration
    from streamjob.runtime.keygroups import key_group_range
    from streamjob.runtime.state.backends import create_keyed_backend
    from streamjob.runtime.task import queryable

    backend = create_keyed_backend(Configuration({"state.backend.type": "hashmap"}), "op", 128,
                                   key_group_range(128, 1, 0), str(tmp_path))
    counts = ValueStateDescriptor("c").set_queryable("counts")
    for k in range(1000):
        backend.current_key = k
        backend.get_state(counts).update(k * 3)

    class Op:
        keyed_backend = backend
        node = None

    jm = socket.create_server(("127.0.0.1", 0))
    server = queryable.QueryServer(jm.getsockname(), 0, 0, {5: Op()}, lambda node: None, lambda: 1)
    conn, _ = jm.accept()
    steps: list = []  # per pass: (its decision, cut by the budget, how far the task thread had got)
    spins = [0]
    decide = server._pacer.after
    server._pacer.after = lambda now, answered, cut: steps.append(  # type: ignore[method-assign]
        (decide(now, answered, cut), cut, spins[0])) or steps[-1][0]
    host, port, ticket = server.port
    got: list = []
    failure: list = []

    def client() -> None:
        try:
            with socket.create_connection((host, port), timeout=20) as c:
                c.sendall(frames.encode({"ticket": ticket}))
                frames.recv(c)
                n = 0

                def ask(count: int) -> None:
                    nonlocal n
                    c.sendall(b"".join(frames.encode({"id": n + i, "name": "counts", "keys": [(n + i) % 1000]})
                                       for i in range(count)))
                    n += count

                ask(3000)  # a burst, pipelined
                got.extend(frames.recv(c) for _ in range(3000))
                for _ in range(200):  # a sequential client
                    ask(1)
                    got.append(frames.recv(c))
                time.sleep(0.05)  # a pause
                for _ in range(300):  # an open loop, ~2,000/s, answers read as they come
                    ask(1)
                    time.sleep(0.0005)
                got.extend(frames.recv(c) for _ in range(300))
                time.sleep(0.05)
                ask(1)  # one more after the quiet: answered at its own signal
                got.append(frames.recv(c))
        except Exception as e:  # noqa: BLE001 - reported by the assertion below
            failure.append(e)

    asker = threading.Thread(target=client)
    asker.start()
    deadline = time.monotonic() + 60
    try:
        while asker.is_alive() and time.monotonic() < deadline:
            sum(range(1000))  # the task thread computing
            spins[0] += 1
        asker.join(1)
        # Back on signals takes two empty timed passes (``wait`` apart) after the last answer; they run in
        # this thread's signal handler, so it computes on until then (a loaded machine delays them).
        settle = time.monotonic() + 10
        while server._pacer.batching and time.monotonic() < settle:
            sum(range(1000))
        assert not failure, failure
        assert [d["id"] for d in got] == list(range(3501))
        assert all(d["status"] == 200 and d["results"][0]["value"] == (d["id"] % 1000) * 3 for d in got)
        cut = [at for _, was_cut, at in steps if was_cut]
        assert len(cut) >= 2 and cut[-1] > cut[0], "the burst is answered in passes, the task computing between"
        assert queryable.Pacer.BATCH in [step for step, _, _ in steps] and not server._pacer.batching
    finally:
        server.close()
        conn.close()
        jm.close()
        backend.dispose()


# -- on Spark -------------------------------------------------------------------------------------------
def _get(url: str, path: str, body: dict | None = None) -> tuple[int, dict, dict]:
    request = urllib.request.Request(url + path, data=None if body is None else json.dumps(body).encode(),
                                     method="GET" if body is None else "POST")
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            return r.status, json.load(r), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}"), dict(e.headers)


def _expected(rows: list[dict]) -> tuple[dict, dict, dict, dict]:
    counts, recent, parity, latest = Counter(), defaultdict(list), defaultdict(Counter), {}
    for r in rows:
        counts[r["user"]] += 1
        recent[r["user"]] = (recent[r["user"]] + [r["n"]])[-3:]
        parity[r["user"]]["even" if r["n"] % 2 == 0 else "odd"] += 1
        latest[r["n"] % 5] = r
    return counts, recent, parity, latest


def assert_proxy_refuses_a_malformed_frame(port: int) -> None:
    """A frame that is not JSON is answered with an error naming it, and the connection closes."""
    import socket
    import struct

    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(struct.pack(">I", 2) + b"{}" + struct.pack(">I", 5) + b"nope!")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    first = struct.unpack(">I", data[:4])[0]
    hello, second = json.loads(data[4:4 + first]), data[4 + first:]
    assert "job_id" in hello
    error = json.loads(second[4:])
    assert error["status"] == 400 and "not JSON" in error["error"], error


def _committed(out: Path) -> int:
    return sum(len(f.read_text().splitlines()) for f in out.glob("part-*"))


@pytest.mark.spark
@pytest.mark.timeout(600)
@pytest.mark.parametrize("backend_type", ["hashmap", "rocksdb"])
def test_lookups_equal_the_input_live_from_checkpoints_and_across_a_failover(tmp_path, backend_type):
    in_dir, out, ck, marker = tmp_path / "in", tmp_path / "out", tmp_path / "ck", tmp_path / "kill"
    in_dir.mkdir()
    rows = [{"user": f"u{i % 40}", "n": i} for i in range(2000)]
    (in_dir / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    proc = subprocess.Popen([sys.executable, "-m", "streamjob.runtime.cli", "run", str(JOB), "--no-progress", "--",
                             str(in_dir), str(out), str(ck), backend_type, str(marker)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    log: list[str] = []
    import threading

    threading.Thread(target=lambda: log.extend(proc.stderr), daemon=True).start()
    try:
        deadline = time.monotonic() + 240
        while not (m := re.search(r"REST API and metrics at (http://\S+)", "".join(log))):
            assert proc.poll() is None and time.monotonic() < deadline, "".join(log)
            time.sleep(0.1)
        url = m.group(1)

        def quiescent(expected_rows: int) -> None:
            deadline = time.monotonic() + 180
            while _committed(out) < expected_rows:
                assert proc.poll() is None and time.monotonic() < deadline, "".join(log)[-3000:]
                time.sleep(0.2)

        def check(consistency: str, input_rows: list[dict]) -> None:
            counts, recent, parity, latest = _expected(input_rows)
            users = sorted(counts) + ["nobody"]
            for name, want in (("counts", counts), ("recent", recent), ("parity", parity)):
                status, doc, _ = _get(url, f"/v1/state/{name}", {"keys": users, "consistency": consistency})
                assert status == 200, doc
                got = {r["key"]: r["value"] for r in doc["results"] if r["found"]}
                assert got == {u: (dict(v) if name == "parity" else v) for u, v in want.items()}, (name, consistency)
                assert not doc["results"][-1]["found"] and doc["consistency"] == consistency
            status, doc, _ = _get(url, "/v1/state/latest", {"keys": list(range(6)), "consistency": consistency})
            assert status == 200 and {r["key"]: r["value"] for r in doc["results"] if r["found"]} == latest

        quiescent(len(rows))
        check("live", rows)
        # One key by GET: the operator, subtask and key group that answered, the checkpoint it is at or after.
        status, doc, _ = _get(url, "/v1/state/counts?key=u7")
        assert status == 200 and doc["value"] == 50 and doc["operator"] == "counts" and doc["kind"] == "value"
        assert doc["checkpoint"] >= 1 and 0 <= doc["subtask"] < 2 and 0 <= doc["key_group"] < 128
        # From the latest completed checkpoint: once one completed after quiescence, the same values.
        first = doc["checkpoint"]
        while _get(url, "/v1/job")[1]["latest_checkpoint"]["id"] <= first + 1:
            time.sleep(0.1)
        check("checkpoint", rows)
        # Errors say what is wrong.
        status, doc, _ = _get(url, "/v1/state/latest?key=abc")
        assert status == 400 and "expected a key of type Integer" in doc["error"] and doc["expected"] == "Integer"
        status, doc, _ = _get(url, "/v1/state/nope?key=1")
        assert status == 404 and doc["queryable"] == ["counts", "latest", "parity", "recent"]
        status, doc, _ = _get(url, "/v1/state/counts?key=u1&consistency=eventual")
        assert status == 400 and "consistency must be live or checkpoint" in doc["error"]
        # The command line and the client.
        r = subprocess.run([sys.executable, "-m", "streamjob.runtime.cli", "state", "query", "x", "counts", "u1",
                            "u2", "nobody", "--address", url], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and r.stdout.splitlines() == ["u1\t50", "u2\t50", "nobody\t(none)"], r.stderr
        from streamjob.runtime import QueryableStateClient

        client = QueryableStateClient(url)
        job_id = _get(url, "/v1/job?peek=true")[1]["id"]
        assert client.get_kv_state(job_id, "recent", "u3", Types.STRING(),
                                   ListStateDescriptor("recent", Types.LONG())) == [1883, 1923, 1963]
        assert client.get_kv_states(job_id, "counts", ["u1", "nobody"]) == [50, None]
        # The same through the queryable state proxy's port (Flink's client shape: host, port).
        port = _get(url, "/v1/job?peek=true")[1]["queryable_state_proxy_port"]
        with QueryableStateClient("127.0.0.1", port) as proxy:
            assert proxy.get_kv_states(job_id, "counts", ["u1", "nobody"]) == [50, None]
            assert not proxy._proxy._tasks, "without the job's key type, through the job manager"
            assert proxy.get_kv_state(job_id, "recent", "u3", Types.STRING(),
                                      ListStateDescriptor("recent", Types.LONG())) == [1883, 1923, 1963]
            # With it, straight from the owning subtasks' lookup ports: the same answers, the same fields.
            assert proxy._proxy._tasks, "the client asked the subtask directly"
            direct = proxy.lookup(None, "counts", ["u1", "nobody"], "live", Types.STRING())
            via_jm = proxy.lookup(None, "counts", ["u1", "nobody"], "live")
            # The same, but for the checkpoint each answer is at or after: one may complete between the two.
            def without_checkpoint(doc: dict) -> dict:
                return {**doc, "results": [{k: v for k, v in r.items() if k != "checkpoint"} for r in doc["results"]]}

            assert without_checkpoint(direct) == without_checkpoint(via_jm), (direct, via_jm)
            assert direct["results"][0]["value"] == 50
            assert [r["checkpoint"] for r in direct["results"]] <= [r["checkpoint"] for r in via_jm["results"]]
            answer = proxy.lookup(None, "counts", ["u2"], "checkpoint")["results"][0]
            assert answer["found"] and answer["value"] == 50 and answer["checkpoint"] >= 1
            for name, key, status, words in (("latest", "abc", 400, "expected a key of type Integer"),
                                             ("nope", 1, 404, "queryable")):
                with pytest.raises(RestError) as e:
                    proxy.get_kv_state(None, name, key)
                assert e.value.status == status and words in str(e.value), e.value
            with pytest.raises(RestError) as e:
                proxy.get_kv_state("another-job", "counts", "u1")
            assert e.value.status == 404
        assert_proxy_refuses_a_malformed_frame(port)

        # A task killed while more input arrives: lookups answer 200 or 503 (Retry-After) while the job
        # restarts, never another error, and equal the input again after.
        more = [{"user": f"u{i % 40}", "n": i} for i in range(2000, 3000)]
        marker.touch()
        (in_dir / "b.jsonl").write_text("".join(json.dumps(r) + "\n" for r in more))
        seen = Counter()
        deadline = time.monotonic() + 180
        while _committed(out) < len(rows) + len(more) or marker.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "".join(log)[-3000:]
            status, doc, headers = _get(url, "/v1/state/counts", {"keys": ["u1", "u2"]})
            seen[status] += 1
            assert status in (200, 503), doc
            if status == 503:
                assert headers.get("Retry-After") and doc["error"], (doc, headers)
            try:
                proxy.get_kv_states(None, "counts", ["u1", "u2"], Types.STRING())  # to the subtasks, else the proxy
                seen["proxy 200"] += 1
            except RestError as e:
                assert e.status == 503, e
            time.sleep(0.05)
        assert "Attempt 1 failed" in "".join(log), "".join(log)[-3000:]
        quiescent(len(rows) + len(more))
        check("live", rows + more)
        assert seen[200] > 0 and seen["proxy 200"] > 0
        assert proxy.get_kv_state(None, "counts", "u1") == Counter(r["user"] for r in rows + more)["u1"]
        assert proxy.get_kv_state(None, "counts", "u1", Types.STRING()) == Counter(r["user"] for r in rows + more)["u1"]
        assert proxy._proxy._tasks, "the new attempt's subtasks asked directly"
    finally:
        if proc.poll() is None:
            subprocess.run([sys.executable, "-m", "streamjob.runtime.cli", "cancel", "--address", url],
                           capture_output=True, timeout=120) if "url" in locals() else None
        if proc.poll() is None:
            proc.kill()
        proc.wait(60)


@pytest.mark.spark
@pytest.mark.timeout(600)
def test_lookups_after_a_rescale_through_a_savepoint_equal_the_input(tmp_path):
    """Stopped with a savepoint at parallelism 2, resumed at 3 on RocksDB: keys route to their new owners
    (other key-group ranges) and every value is the input's."""
    in_dir, out, ck, sp = tmp_path / "in", tmp_path / "out", tmp_path / "ck", tmp_path / "sp"
    in_dir.mkdir()
    rows = [{"user": f"u{i % 40}", "n": i} for i in range(1200)]
    (in_dir / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    def start(*extra: str, env: dict | None = None) -> tuple[subprocess.Popen, str, list]:
        proc = subprocess.Popen([sys.executable, "-m", "streamjob.runtime.cli", "run", str(JOB), "--no-progress",
                                 *extra, "--", str(in_dir), str(out), str(ck), "rocksdb", str(tmp_path / "kill")],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, **(env or {})})
        log: list[str] = []
        import threading

        threading.Thread(target=lambda: log.extend(proc.stderr), daemon=True).start()
        deadline = time.monotonic() + 240
        while not (m := re.search(r"REST API and metrics at (http://\S+)", "".join(log))):
            assert proc.poll() is None and time.monotonic() < deadline, "".join(log)
            time.sleep(0.1)
        return proc, m.group(1), log

    def counts(url: str) -> dict:
        deadline = time.monotonic() + 180
        while True:
            status, doc, _ = _get(url, "/v1/state/counts", {"keys": [f"u{i}" for i in range(40)]})
            if status == 200 and all(r["found"] for r in doc["results"]) and \
                    sum(r["value"] for r in doc["results"]) == len(rows):
                return doc
            # on failure: missing keys, or a sum short of (lost) or beyond (duplicated) the input's, and the log
            assert time.monotonic() < deadline, (status, len(rows), [(r.get("key"), r.get("found"), r.get("value"))
                                                                     for r in (doc.get("results", []) if isinstance(doc, dict) else [])],
                                                 "".join(log)[-3000:])
            time.sleep(0.2)

    first, url, log = start()
    try:
        before = counts(url)
        assert {r["subtask"] for r in before["results"]} == {0, 1}
        r = subprocess.run([sys.executable, "-m", "streamjob.runtime.cli", "stop", "-p", str(sp), "--address", url],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        savepoint = r.stdout.strip().splitlines()[0]
        first.wait(120)
    finally:
        if first.poll() is None:
            first.kill()
    second, url, log = start("-s", savepoint, env={"PARALLELISM": "3"})
    try:
        after = counts(url)
        assert {r["subtask"] for r in after["results"]} == {0, 1, 2}
        assert {r["key"]: r["value"] for r in after["results"]} == dict(Counter(r["user"] for r in rows))
    finally:
        if second.poll() is None:
            subprocess.run([sys.executable, "-m", "streamjob.runtime.cli", "cancel", "--address", url],
                           capture_output=True, timeout=120)
        if second.poll() is None:
            second.kill()
        second.wait(60)


@pytest.mark.spark
@pytest.mark.timeout(600)
def test_lookups_under_ten_random_task_kills_answer_200_or_503_and_checkpoint_values_never_go_back(
        spark_slots, tmp_path):
    """Ten task kills at random moments while input arrives and a client looks the counts up without
    pause, live and from the latest checkpoint. Every answer is a 200 or a 503 with Retry-After (the
    job restarting); a checkpoint-consistent value never goes back (a completed checkpoint is never
    rolled back: a value of a dead attempt's working state would, once the restored attempt's
    checkpoints answer); once the input is all processed the live and checkpoint values equal it."""
    import random
    import threading

    from jobs import queryable_counts
    from test_checkpointing import kill_tasks_at_random

    in_dir, out, ck = tmp_path / "in", tmp_path / "out", tmp_path / "ck"
    in_dir.mkdir()
    rows = [{"user": f"u{i % 40}", "n": i} for i in range(6000)]
    users = sorted({r["user"] for r in rows})

    def add_file(k: int, part: list[dict]) -> None:  # whole: written hidden, then renamed into view
        tmp = in_dir / f".f{k:03d}.jsonl"
        tmp.write_text("".join(json.dumps(r) + "\n" for r in part))
        tmp.rename(in_dir / f"f{k:03d}.jsonl")

    env = queryable_counts.build(str(in_dir), str(out), str(ck), "hashmap", str(tmp_path / "no-marker"),
                                 parallelism=3, restarts=40)
    client = env.execute_async("queryable kills")
    assert client.wait_until_running(120)  # the job manager is there; its REST API and tasks follow
    deadline = time.monotonic() + 120
    while not (client.job_manager.rest is not None and client.job_manager.all_running()):
        assert time.monotonic() < deadline and not client._finished.is_set()
        time.sleep(0.05)
    url = client.job_manager.rest.url
    stop = threading.Event()
    seen: Counter = Counter()
    problems: list[str] = []
    high: dict[str, tuple[int, int]] = {}  # user -> (checkpoint, value) of the newest checkpoint answer

    def look() -> None:
        consistency = "live"
        while not stop.is_set():
            consistency = "checkpoint" if consistency == "live" else "live"
            status, doc, headers = _get(url, "/v1/state/counts", {"keys": users, "consistency": consistency})
            seen[(status, consistency)] += 1
            if status == 503 and not headers.get("Retry-After"):
                problems.append(f"503 without Retry-After: {doc}")
            elif status not in (200, 503):
                problems.append(f"{status} ({consistency}): {doc}")
            elif status == 200 and consistency == "checkpoint":
                for r in doc["results"]:
                    value = r["value"] if r["found"] else 0
                    before = high.get(r["key"], (0, 0))
                    if r["checkpoint"] < before[0] or value < before[1]:
                        problems.append(f"{r['key']}: {value} at checkpoint {r['checkpoint']} after "
                                        f"{before[1]} at checkpoint {before[0]}")
                    high[r["key"]] = (r["checkpoint"], value)
            time.sleep(0.05)

    looker = threading.Thread(target=look, daemon=True)
    try:
        looker.start()
        # The input arrives in 20 files while the kills go on (each kill once the job runs again).
        chunks = [rows[i:i + 300] for i in range(0, len(rows), 300)]
        feeder = threading.Thread(target=lambda: [add_file(k, c) or time.sleep(1.0) for k, c in enumerate(chunks)],
                                  daemon=True)
        feeder.start()
        killed = kill_tasks_at_random(client, 10, random.Random(int(time.time())), pause=(0.3, 1.5), within=300)
        assert len(killed) == 10
        feeder.join(60)
        deadline = time.monotonic() + 180
        while _committed(out) < len(rows):
            assert not client._finished.is_set() and time.monotonic() < deadline, f"{_committed(out)} rows committed"
            time.sleep(0.2)
        counts = _expected(rows)[0]
        while (answer := _get(url, "/v1/state/counts", {"keys": users}))[0] == 503:  # the last kill's restart
            assert time.monotonic() < deadline, answer
            time.sleep(0.2)
        status, doc, _ = answer
        assert status == 200 and {r["key"]: r["value"] for r in doc["results"]} == counts
        assert _committed(out) == len(rows)  # and none twice
        newest = _get(url, "/v1/job")[1]["latest_checkpoint"]["id"]
        while _get(url, "/v1/job")[1]["latest_checkpoint"]["id"] <= newest:  # one taken after quiescence
            time.sleep(0.1)
        status, doc, _ = _get(url, "/v1/state/counts", {"keys": users, "consistency": "checkpoint"})
        assert status == 200 and {r["key"]: r["value"] for r in doc["results"]} == counts
    finally:
        stop.set()
        looker.join(30) if looker.is_alive() else None
        client.cancel()
    assert not problems, problems[:10]
    assert client.job_manager.restarts >= 10
    # Lookups were answered throughout, and some during restarts.
    assert seen[(200, "live")] and seen[(200, "checkpoint")] and sum(n for (s, _), n in seen.items() if s == 503), seen
