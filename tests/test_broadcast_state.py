"""Broadcast state: ``stream.connect(stream.broadcast(MapStateDescriptor(...))).process(f)``.

The first part drives the broadcast operators directly (no Spark): read-only broadcast state on
the element side, writable on the broadcast side, several descriptors, keyed state, timers and
``apply_to_keyed_state`` on both state backends, and a snapshot restored at another parallelism
through the operators' real snapshot and restore code. The second part runs real jobs on local
Spark: a PyFlink documentation-style program and its printed output, exactly-once under random
task kills with broadcast state open (both backends), and a 2 -> 3 rescale through a savepoint.
"""

from __future__ import annotations

import base64
import glob
import json
import os
import random
import runpy
import time

import numpy as np
import pytest

from jobs import broadcast_rules
from streamjob.runtime import (
    BroadcastProcessFunction,
    BroadcastStream,
    DataStream,
    KeyedBroadcastProcessFunction,
    KeyedProcessFunction,
    MapStateDescriptor,
    OutputTag,
    PyFlinkNotSupported,
    StreamExecutionEnvironment,
    TimeDomain,
    Types,
    ValueStateDescriptor,
)
from streamjob.runtime.api import transformations as T
from streamjob.runtime.api.functions import RuntimeContext
from streamjob.runtime.checkpoint.storage import StateLocation
from streamjob.runtime.connectors import DiscardingSink
from streamjob.runtime.graph.job_graph import build_job_graph
from streamjob.runtime.state.operator_state import BROADCAST, OperatorStateStore
from streamjob.runtime.state.snapshot import serialize
from streamjob.runtime.task.operators import create_operator
from test_checkpointing import kill_tasks_at_random

RULES = MapStateDescriptor("rules", Types.STRING(), Types.INT())
NAMES = MapStateDescriptor("names", Types.STRING(), Types.STRING())
UNKNOWN = OutputTag("unknown")


class Harness:
    """The broadcast operator of a small job, subtask ``index`` of ``parallelism``, fed by hand:
    input 0 is the (keyed) stream, input 1 the broadcast stream."""

    def __init__(self, fn, keyed: bool, backend: str = "hashmap", index: int = 0, parallelism: int = 1,
                 state_root: str | None = None):
        env = StreamExecutionEnvironment.get_execution_environment()
        env.get_config().set("state.backend.type", backend)
        env.set_parallelism(parallelism)
        items = env.from_collection([("a", 1)])
        if keyed:
            items = items.key_by(lambda r: r[0])
        stream = items.connect(env.from_collection(["r"]).broadcast(RULES, NAMES)).process(fn)
        stream.sink_to(DiscardingSink())
        g = build_job_graph(env._transformations, env.get_config(), "t")
        self.node = g.operators[stream._t.id]
        ctx = RuntimeContext(self.node.name, index, parallelism, 128, job_parameters=g.config)
        ctx._state_root = state_root
        self.op = create_operator(self.node, ctx)
        self.out: list = []
        self.side: list = []
        self.op.output.connect(lambda b, ts: self.out.extend(b), None)
        self.op.output.connect(lambda b, ts: self.side.extend(b), UNKNOWN.tag_id)

    def open(self) -> "Harness":
        self.op.open()
        return self

    def element(self, *rows, ts=None) -> "Harness":
        self.op.process_batch(list(rows), 0, None if ts is None else np.array(ts, dtype=np.int64))
        return self

    def rule(self, *rows, ts=None) -> "Harness":
        self.op.process_batch(list(rows), 1, None if ts is None else np.array(ts, dtype=np.int64))
        return self

    def take(self) -> list:
        out, self.out = self.out, []
        return out


class Threshold(BroadcastProcessFunction):
    """Items above their color's threshold; rules ("color", limit) set thresholds."""

    def process_element(self, value, ctx):
        rules = ctx.get_broadcast_state(RULES)
        limit = rules.get(value[0])
        if limit is None:
            ctx.output(UNKNOWN, value)  # side outputs work as in every process function
        elif value[1] > limit:
            yield value[0], value[1], ctx.get_broadcast_state(NAMES).get(value[0])

    def process_broadcast_element(self, value, ctx):
        ctx.get_broadcast_state(RULES).put(value[0], value[1])
        ctx.get_broadcast_state(NAMES)[value[0]] = value[0].upper()
        yield "rule", value[0]


def test_broadcast_side_writes_element_side_reads_several_descriptors():
    h = Harness(Threshold(), keyed=False).open()
    h.element(("red", 5))
    assert h.take() == [] and h.side == [("red", 5)]  # no rule yet
    h.rule(("red", 3), ("blue", 10))
    assert h.take() == [("rule", "red"), ("rule", "blue")]
    h.element(("red", 5), ("blue", 5), ("red", 2), ("green", 100))
    assert h.take() == [("red", 5, "RED")] and h.side == [("red", 5), ("green", 100)]

    class Writes(BroadcastProcessFunction):
        def process_element(self, value, ctx):
            ctx.get_broadcast_state(RULES).put("x", 1)

        def process_broadcast_element(self, value, ctx):
            ctx.get_broadcast_state(MapStateDescriptor("undeclared"))

    h = Harness(Writes(), keyed=False).open()
    with pytest.raises(Exception, match=r"broadcast state 'rules' is read-only here: put\(\)"):
        h.element(("a", 1))
    with pytest.raises(Exception, match=r"get_broadcast_state\(MapStateDescriptor\('undeclared'\)\).*declared: "
                                        r"\['names', 'rules'\]"):
        h.rule(("a", 1))


class Buffer(KeyedBroadcastProcessFunction):
    """Keyed: counts per key; a timer at the element's timestamp reports the count with the rule
    in force then; a rule change resets every key's count (apply_to_keyed_state)."""

    COUNT = ValueStateDescriptor("count", Types.INT())

    def open(self, ctx):
        self.count = ctx.get_state(self.COUNT)

    def process_element(self, value, ctx):
        self.count.update((self.count.value() or 0) + 1)
        ctx.timer_service().register_event_time_timer(ctx.timestamp())

    def process_broadcast_element(self, value, ctx):
        ctx.get_broadcast_state(RULES).put("factor", value)
        seen = []

        def reset(key, state):
            seen.append((key, state.value()))
            state.clear()
        ctx.apply_to_keyed_state(self.COUNT, reset)
        yield from sorted(seen)

    def on_timer(self, timestamp, ctx):
        assert ctx.time_domain() == TimeDomain.EVENT_TIME
        factor = ctx.get_broadcast_state(RULES).get("factor")
        yield ctx.get_current_key(), timestamp, (self.count.value() or 0) * factor


@pytest.mark.parametrize("backend", ["hashmap", "rocksdb"])
def test_keyed_broadcast_state_timers_and_apply_to_keyed_state(backend, tmp_path):
    h = Harness(Buffer(), keyed=True, backend=backend, state_root=str(tmp_path)).open()
    h.rule(10, ts=[0])
    assert h.take() == []  # no key has state yet
    h.element(("a", 1), ("b", 1), ("a", 1), ts=[5, 6, 7])
    h.op.process_watermark(6)
    assert h.take() == [("a", 5, 20), ("b", 6, 10)]
    h.rule(100, ts=[8])  # every key's count is reset
    assert h.take() == [("a", 2), ("b", 1)]
    h.element(("b", 1), ts=[9])
    h.op.process_watermark(10)
    assert h.take() == [("a", 7, 0), ("b", 9, 100)]

    class NoKey(KeyedBroadcastProcessFunction):
        def process_element(self, value, ctx):
            pass

        def process_broadcast_element(self, value, ctx):
            ctx.get_current_key()

    h2 = Harness(NoKey(), keyed=True, backend=backend, state_root=str(tmp_path)).open()
    with pytest.raises(Exception, match=r"get_current_key\(\): process_broadcast_element has no current key"):
        h2.rule(1)
    h.op.dispose()
    h2.op.dispose()


def test_broadcast_state_is_snapshotted_by_every_subtask_and_restored_whole_at_any_parallelism():
    # each of 2 old subtasks holds the same map (and a keyed count of its own keys)
    handles = []
    for i in range(2):
        h = Harness(Buffer(), keyed=True, index=i, parallelism=2).open()
        h.rule(3, ts=[0])
        keys = [k for k in "abcdefgh" if h.op.keyed_backend.key_groups.start <= _kg(k) < h.op.keyed_backend.key_groups.stop]
        h.element(*[(k, 1) for k in keys], ts=[5] * len(keys))
        snap = h.op.snapshot_state(1)
        assert snap.operator_state == {"rules": (BROADCAST, {"factor": 3}), "names": (BROADCAST, {})}
        h.op.operator_state.get_broadcast_state("rules").put("factor", 99)  # after the barrier: not in it
        assert snap.operator_state["rules"][1] == {"factor": 3}
        data, index = serialize(snap.keyed, snap.max_parallelism, snap.operator_state)
        snap.done()
        handles.append({"data": base64.b64encode(data).decode(), "index": index})
    # restored at 3: every new subtask has the whole map, and the counts of its own keys
    out = []
    for i in range(3):
        h = Harness(Buffer(), keyed=True, index=i, parallelism=3)
        h.op.initialize_state(handles, StateLocation("memory://broadcast-test"), 1)
        h.open()
        assert h.op.operator_state.get_broadcast_state("rules").items() == [("factor", 3)]
        h.op.process_watermark(10)
        out += h.take()
    assert sorted(out) == [(k, 5, 3) for k in "abcdefgh"]


def _kg(key: str) -> int:
    from streamjob.runtime.keygroups import key_hash

    return key_hash(key) % 128


def test_operator_state_store_gives_each_new_subtask_one_whole_copy():
    old = []
    for i in range(3):
        store = OperatorStateStore()
        store.get_broadcast_state("rules").put_all({"x": [1], "y": i})  # copies differ only to show whose it is
        store.get_list_state("splits").update([i])
        old.append(store.snapshot())
    old[1] = {}  # old subtask 1 wrote no snapshot: its successor takes the next copy
    got = []
    for i in range(2):
        store = OperatorStateStore()
        store.restore(old, i, 2)
        got.append((store.get_broadcast_state("rules").items(), store.get_list_state("splits").get()))
    assert got == [([("x", [1]), ("y", 0)], [0]), ([("x", [1]), ("y", 2)], [2])]
    same = OperatorStateStore()
    same.restore(old, 2, 3)  # same parallelism: its own copy
    assert same.get_broadcast_state("rules").get("y") == 2 and same.get_list_state("splits").get() == [2]
    with pytest.raises(ValueError, match="list state, not broadcast state"):
        same.get_broadcast_state("splits")
    with pytest.raises(ValueError, match="broadcast state, not union list state"):
        same.get_union_list_state("rules")


def test_api_builds_broadcast_connected_streams_as_pyflink():
    env = StreamExecutionEnvironment.get_execution_environment()
    items, rules = env.from_collection([("a", 1)]), env.from_collection(["r"])
    assert isinstance(rules.broadcast(), DataStream) and isinstance(rules.broadcast(RULES), BroadcastStream)
    b = rules.broadcast(RULES, NAMES)
    with pytest.raises(TypeError, match="needs a KeyedBroadcastProcessFunction"):
        items.key_by(lambda r: r[0]).connect(b).process(Threshold())
    with pytest.raises(TypeError, match="KeyedBroadcastProcessFunction needs a keyed stream"):
        items.connect(b).process(Buffer())
    with pytest.raises(PyFlinkNotSupported, match=r"KeyedStream.broadcast\(\) .*before key_by"):
        items.key_by(lambda r: r[0]).broadcast(RULES)  # as in PyFlink: a keyed stream keeps its partitioning
    with pytest.raises(TypeError, match="broadcast needs MapStateDescriptors"):
        rules.broadcast(ValueStateDescriptor("v"))
    with pytest.raises(TypeError, match=r"process_broadcast_element\(\) is missing"):
        items.connect(b).process(KeyedProcessFunction())
    keyed = items.key_by(lambda r: r[0]).connect(b).process(Buffer())
    plain = items.connect(b).process(Threshold())
    keyed.union(plain).sink_to(DiscardingSink())
    g = build_job_graph(env._transformations, env.get_config(), "t")
    for out, first in ((keyed, T.HASH), (plain, T.FORWARD)):
        node = g.operators[out._t.id]
        parts = sorted((g.edges[e].input_index, g.edges[e].partitioner) for e in node.inputs)
        assert parts == [(0, first), (1, T.BROADCAST)]
        assert node.params["descriptors"] == [RULES, NAMES]


# -- real jobs on local Spark -----------------------------------------------------------------
# Flink's broadcast state example (docs: "The Broadcast State Pattern"): items of a color and a
# shape, keyed by color, matched against broadcast rules "a shape followed by a shape". Here each
# rule takes effect at its timestamp and items wait for the watermark (an event-time timer), so
# the matches do not depend on how the two inputs interleave; a second, non-keyed function shows
# that every broadcast record reaches every subtask.
PYFLINK_DOC_PROGRAM = '''
from streamjob.runtime import *

rule_state_descriptor = MapStateDescriptor("RulesBroadcastState", Types.STRING(), Types.PICKLED_BYTE_ARRAY())

class PatternMatch(KeyedBroadcastProcessFunction):
    def open(self, runtime_context):
        # rule name -> items waiting for the rule's second shape
        self.matches = runtime_context.get_map_state(MapStateDescriptor("items", Types.STRING(), Types.PICKLED_BYTE_ARRAY()))
        self.waiting = runtime_context.get_map_state(MapStateDescriptor("waiting", Types.LONG(), Types.PICKLED_BYTE_ARRAY()))

    def process_broadcast_element(self, value, ctx):
        ctx.get_broadcast_state(rule_state_descriptor).put(value[0], value)

    def process_element(self, value, ctx):
        self.waiting.put(ctx.timestamp(), value)
        ctx.timer_service().register_event_time_timer(ctx.timestamp())

    def on_timer(self, timestamp, ctx):
        value = self.waiting.get(timestamp)
        self.waiting.remove(timestamp)
        shape = value[1]
        for rule_name, rule in ctx.get_broadcast_state(rule_state_descriptor).items():
            if rule[3] > timestamp:
                continue  # not in force yet
            stored = self.matches.get(rule_name) or []
            if shape == rule[2] and stored:
                for i in stored:
                    yield "MATCH: " + str(i) + " - " + str(value)
                stored = []
            if shape == rule[1]:
                stored.append(value)
            if stored:
                self.matches.put(rule_name, stored)
            else:
                self.matches.remove(rule_name)

class Announce(BroadcastProcessFunction):
    def process_element(self, value, ctx):
        yield value.upper() + " knows " + str(len(ctx.get_broadcast_state(rule_state_descriptor).keys()) >= 0)

    def process_broadcast_element(self, value, ctx):
        ctx.get_broadcast_state(rule_state_descriptor).put(value[0], value)
        yield "rule " + value[0]

env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(2)
by_timestamp = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda e: e[-1])
items = env.from_collection([("red", "RECTANGLE", 10), ("blue", "CIRCLE", 11), ("red", "TRIANGLE", 20),
                             ("blue", "CIRCLE", 21), ("red", "RECTANGLE", 30), ("blue", "CIRCLE", 31),
                             ("red", "TRIANGLE", 40), ("red", "TRIANGLE", 60), ("red", "RECTANGLE", 70),
                             ("blue", "TRIANGLE", 80)]).assign_timestamps_and_watermarks(by_timestamp)
rules = env.from_collection([("Rectangle->Triangle", "RECTANGLE", "TRIANGLE", 0),
                             ("Circle->Circle", "CIRCLE", "CIRCLE", 0),
                             ("Triangle->Rectangle", "TRIANGLE", "RECTANGLE", 50)]).assign_timestamps_and_watermarks(by_timestamp)
rule_broadcast_stream = rules.broadcast(rule_state_descriptor)
items.key_by(lambda item: item[0]).connect(rule_broadcast_stream).process(PatternMatch()).print("match")
env.from_collection(["a", "b"]).connect(rule_broadcast_stream).process(Announce()).print("announce")
env.execute("broadcast-state-pattern")
'''


@pytest.mark.spark
def test_pyflink_documentation_program_prints_what_pyflink_prints(spark_slots, tmp_path, capfd):
    # Run as a program's __main__ on the test session's Spark (`streamjob run` itself is tested by
    # the event-time documentation programs; a second Spark start here would cost ~15 s).
    job = tmp_path / "broadcast.py"
    job.write_text(PYFLINK_DOC_PROGRAM)
    capfd.readouterr()
    runpy.run_path(str(job), run_name="__main__")
    lines = [ln for ln in capfd.readouterr().out.splitlines() if ">" in ln]
    by = {p: sorted(ln.split("> ", 1)[1] for ln in lines if ln.startswith(p)) for p in ("match", "announce")}
    assert by["match"] == sorted([
        "MATCH: ('red', 'RECTANGLE', 10) - ('red', 'TRIANGLE', 20)",
        "MATCH: ('red', 'RECTANGLE', 30) - ('red', 'TRIANGLE', 40)",
        "MATCH: ('red', 'TRIANGLE', 60) - ('red', 'RECTANGLE', 70)",  # the third rule is in force from 50
        "MATCH: ('blue', 'CIRCLE', 11) - ('blue', 'CIRCLE', 21)",
        "MATCH: ('blue', 'CIRCLE', 21) - ('blue', 'CIRCLE', 31)",
    ])
    # each rule reaches both subtasks; each item one
    rules = ["rule Circle->Circle", "rule Rectangle->Triangle", "rule Triangle->Rectangle"]
    assert by["announce"] == sorted(["A knows True", "B knows True"] + rules * 2)
    announcing = {ln.split(">", 1)[0] for ln in lines if ln.startswith("announce") and "rule " in ln}
    assert len(announcing) == 2, announcing  # printed by two different subtasks


def committed(out: str) -> list[dict]:
    rows = []
    for path in glob.glob(os.path.join(out, "*")):  # glob skips the sink's hidden in-progress files
        with open(path) as f:
            rows += [json.loads(line) for line in f]
    return rows


def _result(out: str) -> list[tuple]:
    return sorted((r["key"], r["i"], r["v"], r["rule"]) for r in committed(out))


@pytest.mark.spark
@pytest.mark.parametrize("backend", ["hashmap", "rocksdb"])
def test_broadcast_state_is_exactly_once_under_random_task_kills(spark_slots, tmp_path, backend):
    rng = random.Random(int(time.time()))
    rows = 16_000
    out = str(tmp_path / "out")
    env = broadcast_rules.build(out, str(tmp_path / "checkpoints"), rows, rate=4000, backend=backend,
                                interval_ms=rng.randint(200, 400))
    client = env.execute_async("broadcast-rules")
    killed = kill_tasks_at_random(client, 2, rng)
    result = client.get_job_execution_result(300)
    assert len(killed) >= 2 and result.restarts >= 2, "the job finished before the test could kill 2 tasks"
    assert _result(out) == broadcast_rules.expected(rows)


@pytest.mark.spark
def test_rescale_2_to_3_through_a_savepoint_with_broadcast_state(spark_slots, tmp_path):
    rows, rate = 8_000, 4_000
    out, savepoints = str(tmp_path / "out"), str(tmp_path / "savepoints")
    env = broadcast_rules.build(out, str(tmp_path / "checkpoints"), rows, rate, parallelism=2, interval_ms=250)
    client = env.execute_async("broadcast-rules")
    assert client.wait_until_running(60)
    time.sleep(1.0)
    restore = client.stop_with_savepoint(False, savepoints, timeout=120)
    client.get_job_execution_result(120)
    assert len(_result(out)) < rows  # stopped halfway: broadcast state and pending rows in the savepoint
    env = broadcast_rules.build(out, str(tmp_path / "checkpoints"), rows, rate, parallelism=3, interval_ms=250,
                                restore=restore)
    env.execute("broadcast-rules")
    assert _result(out) == broadcast_rules.expected(rows)
