"""Built-in AggregateFunctions (api/aggregations.py): real AggregateFunctions on the per-record
window operator, and the same results from the columnar window operator, which takes
``aggregate(Aggregations(...))`` of columns keyed by a column."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from streamjob.runtime import (
    Aggregations,
    Avg,
    Count,
    EventTimeSessionWindows,
    First,
    Max,
    Min,
    Row,
    SlidingEventTimeWindows,
    Sum,
    Time,
    TumblingEventTimeWindows,
)
from streamjob.runtime.network.events import MAX_WATERMARK
from test_event_time import Harness

AGGS = dict(key=First("k"), n=Count(), total=Sum("v"), low=Min("v"), high=Max("x"), mean=Avg("v"),
            first_x=First("x"), flag=Max("b"), flags=Sum("b"))


def _rows(keys: str, n: int = 600):
    rng = random.Random(5)
    pool = list(range(-3, 9)) if keys == "int" else [f"k{i}" for i in range(12)]
    rows = [{"k": rng.choice(pool), "v": rng.randrange(-100, 100), "x": rng.random(), "b": rng.random() < 0.3}
            for _ in range(n)]
    stamps = [i // 6 + rng.randrange(4) for i in range(n)]
    return rows, stamps


def _run(build, backend, rows, stamps, arrow: bool):
    h = Harness(build, backend)
    for lo in range(0, len(rows), 40):
        part = rows[lo:lo + 40]
        batch = pa.RecordBatch.from_pylist(part) if arrow else part
        h.op.process_batch(batch, 0, np.array(stamps[lo:lo + 40], dtype=np.int64))
        h.watermark(stamps[lo] - 2)
    h.watermark(MAX_WATERMARK)
    return h, sorted((tuple(r.items()), t) for r, t in h.out)


# every columnar-vs-per-record comparison runs on both backends and on both window shapes
EVERY_BACKEND = pytest.mark.parametrize("backend", ["hashmap", "rocksdb"])
EVERY_ASSIGNER = pytest.mark.parametrize("assigner", [TumblingEventTimeWindows.of(Time.milliseconds(10)),
                                                      SlidingEventTimeWindows.of(Time.milliseconds(10),
                                                                                 Time.milliseconds(5))],
                                         ids=["tumbling", "sliding"])


@EVERY_BACKEND
@pytest.mark.parametrize("keys", ["int", "str"])
@EVERY_ASSIGNER
def test_columnar_aggregations_equal_the_per_record_aggregate_function(backend, keys, assigner):
    rows, stamps = _rows(keys)
    columnar, got = _run(lambda s: s.key_by("k").window(assigner).aggregate(Aggregations(**AGGS)),
                         backend, rows, stamps, arrow=True)
    assert type(columnar.op).__name__ == "ColumnarWindowAggregateOperator"
    per_record, expected = _run(lambda s: s.key_by(lambda r: r["k"]).window(assigner).aggregate(Aggregations(**AGGS)),
                                backend, rows, stamps, arrow=False)
    assert type(per_record.op).__name__ == "WindowOperator"
    assert len(expected) > 100
    assert [name for name, _ in got[0][0]] == list(AGGS)  # the outputs in the order they were named
    assert got == expected


def test_named_rows_take_the_columnar_path_and_only_the_key_is_enough():
    rows, stamps = _rows("str", 200)
    assigner = TumblingEventTimeWindows.of(Time.milliseconds(10))
    as_rows = [Row(**r) for r in rows]
    h, got = _run(lambda s: s.key_by("k").window(assigner).aggregate(Aggregations(total=Sum("v"), mean=Avg("v"))),
                  "hashmap", as_rows, stamps, arrow=False)
    assert type(h.op).__name__ == "ColumnarWindowAggregateOperator"
    _, expected = _run(lambda s: s.key_by(lambda r: r["k"]).window(assigner).aggregate(
        Aggregations(total=Sum("v"), mean=Avg("v"))), "hashmap", rows, stamps, arrow=False)
    assert got == expected
    h, keys_only = _run(lambda s: s.key_by("k").window(assigner).aggregate(Aggregations(k=First("k"))),
                        "hashmap", rows, stamps, arrow=True)
    assert type(h.op).__name__ == "ColumnarWindowAggregateOperator"
    _, expected = _run(lambda s: s.key_by(lambda r: r["k"]).window(assigner).aggregate(Aggregations(k=First("k"))),
                       "hashmap", rows, stamps, arrow=False)
    assert keys_only == expected and len(keys_only) > 20


def test_builtin_aggregates_are_ordinary_aggregate_functions():
    agg = Aggregations(n=Count(), total=Sum(1), low=Min(1), high=Max(1), mean=Avg(1), first=First(0))
    acc = agg.create_accumulator()
    for r in [("a", 3), ("b", -1), ("c", 7)]:
        acc = agg.add(r, acc)
    assert agg.get_result(acc) == {"n": 3, "total": 9, "low": -1, "high": 7, "mean": 3.0, "first": "a"}
    other = agg.add(("d", 10), agg.create_accumulator())
    assert agg.get_result(agg.merge(acc, other)) == {"n": 4, "total": 19, "low": -1, "high": 10, "mean": 4.75,
                                                      "first": "a"}
    assert agg.get_result(agg.create_accumulator())["mean"] is None
    with pytest.raises(TypeError, match="built-in aggregate"):
        Aggregations(n=len)
    with pytest.raises(KeyError, match=r"Sum\('nope'\): the record has no such field"):
        Sum("nope").add({"v": 1}, 0)


def test_session_windows_merge_the_builtin_accumulators():
    h = Harness(lambda s: s.key_by(lambda r: r["k"]).window(EventTimeSessionWindows.with_gap(Time.milliseconds(5)))
                .aggregate(Aggregations(n=Count(), total=Sum("v"), low=Min("v"))))
    h.feed(({"k": "a", "v": 5}, 0), ({"k": "a", "v": 2}, 10), ({"k": "a", "v": 9}, 5))  # 5 bridges the two
    h.watermark(MAX_WATERMARK)
    assert [r for r, _ in h.out] == [{"n": 3, "total": 16, "low": 2}]


def test_columnar_aggregations_name_a_missing_or_text_column():
    assigner = TumblingEventTimeWindows.of(Time.milliseconds(10))
    h = Harness(lambda s: s.key_by("k").window(assigner).aggregate(Aggregations(t=Sum("nope"))))
    with pytest.raises(Exception, match=r"no column 'nope' for sum; columns: \['k', 'v'\]"):
        h.op.process_batch(pa.RecordBatch.from_pylist([{"k": 1, "v": 2}]), 0, np.array([1], dtype=np.int64))
    h = Harness(lambda s: s.key_by("k").window(assigner).aggregate(Aggregations(t=Max("s"))))
    with pytest.raises(Exception, match=r"column 's' is string; the columnar window aggregation takes numeric"):
        h.op.process_batch(pa.RecordBatch.from_pylist([{"k": 1, "s": "x"}]), 0, np.array([1], dtype=np.int64))


@EVERY_BACKEND
@pytest.mark.parametrize("how", ["min_by", "max_by"])
@EVERY_ASSIGNER
def test_columnar_min_by_max_by_keep_the_whole_first_best_record(backend, how, assigner):
    rows, stamps = _rows("str")
    for i, r in enumerate(rows):
        r["v"] = r["v"] % 7  # many ties: the first of equal ones must win, in a batch and across batches
        r["i"] = i
    columnar, got = _run(lambda s: getattr(s.key_by("k").window(assigner), how)("v"), backend, rows, stamps, arrow=True)
    assert type(columnar.op).__name__ == "ColumnarWindowAggregateOperator"
    per_record, expected = _run(lambda s: getattr(s.key_by(lambda r: r["k"]).window(assigner), how)("v"),
                                backend, rows, stamps, arrow=False)
    assert type(per_record.op).__name__ == "WindowOperator"
    assert len(expected) > 100 and got == expected


# -- rolling sum/min/max on a keyed stream: the other fields are the key's FIRST record's --------------
# PyFlink 1.20 (KeyedStream._accumulate in pyflink/datastream/data_stream.py) reduces with
# v1[pos] = v1[pos] + v2[pos] (or the min/max of the two) and returns v1: every output of a key
# carries its first record's other fields. min_by/max_by return the whole record with the min/max
# (the first of equal ones).
RECORDS = [("a", 1, "x"), ("a", 5, "y"), ("b", 2, "z"), ("a", 3, "w"), ("a", 5, "v")]
EXPECTED = {
    "sum": [("a", 1, "x"), ("a", 6, "x"), ("b", 2, "z"), ("a", 9, "x"), ("a", 14, "x")],
    "min": [("a", 1, "x"), ("a", 1, "x"), ("b", 2, "z"), ("a", 1, "x"), ("a", 1, "x")],
    "max": [("a", 1, "x"), ("a", 5, "x"), ("b", 2, "z"), ("a", 5, "x"), ("a", 5, "x")],
    "min_by": [("a", 1, "x"), ("a", 1, "x"), ("b", 2, "z"), ("a", 1, "x"), ("a", 1, "x")],
    "max_by": [("a", 1, "x"), ("a", 5, "y"), ("b", 2, "z"), ("a", 5, "y"), ("a", 5, "y")],
}


def _rolling(how, field, key, batches, backend="hashmap"):
    h = Harness(lambda s: getattr(s.key_by(key), how)(field), backend)
    for b in batches:
        h.op.process_batch(b, 0, None)
    return [r for r, _ in h.take()]


@pytest.mark.parametrize("how", list(EXPECTED))
def test_rolling_aggregates_of_tuples_keep_the_first_records_other_fields(how):
    # two batches: the key "a" is new in the first, known in the second (its first record is in state)
    got = _rolling(how, 1, lambda t: t[0], [RECORDS[:2], RECORDS[2:]])
    assert got == EXPECTED[how]
    assert all(type(r) is tuple for r in got)


@pytest.mark.parametrize("how", list(EXPECTED))
def test_rolling_aggregates_of_named_rows_keep_the_first_records_other_fields(how):
    rows = [Row(k=k, v=v, tag=t) for k, v, t in RECORDS]
    got = _rolling(how, "v", lambda r: r["k"], [rows[:3], rows[3:]])
    assert [tuple(r) for r in got] == EXPECTED[how]
    assert all(isinstance(r, Row) and r.field_names() == ["k", "v", "tag"] for r in got)


@pytest.mark.parametrize("backend", ["hashmap", "rocksdb"])
@pytest.mark.parametrize("arrow", [True, False], ids=["columnar", "dicts"])
@pytest.mark.parametrize("how", ["sum", "min", "max"])
def test_rolling_aggregates_of_columns_keep_the_first_records_other_columns(how, arrow, backend):
    dicts = [{"k": k, "v": v, "tag": t} for k, v, t in RECORDS]
    batches = [dicts[:2], dicts[2:4], dicts[4:]]
    if arrow:  # the columnar path: the first records' other columns, per distinct key, not per record
        batches = [pa.RecordBatch.from_pylist(b) for b in batches]
    got = _rolling(how, "v", "k", batches, backend)
    assert [(r["k"], r["v"], r["tag"]) for r in got] == EXPECTED[how]


def test_columnar_rolling_sum_of_only_a_key_and_a_value_stays_as_it_was():
    batch = pa.RecordBatch.from_pylist([{"k": i % 3, "v": i} for i in range(9)])
    got = _rolling("sum", "v", "k", [batch, batch])
    assert [r["v"] for r in got] == [0, 1, 2, 3, 5, 7, 9, 12, 15, 9, 13, 17, 12, 17, 22, 18, 24, 30]


def test_rolling_sum_of_plain_values_is_the_whole_value_and_a_field_of_an_object_is_refused():
    # PyFlink: a record that is not a tuple, list or Row is a basic type; position 0 is the value
    assert _rolling("sum", 0, lambda x: x % 2, [[3, 4, 5], [6]]) == [3, 4, 8, 10]
    assert _rolling("max", 0, lambda x: x % 2, [[3, 4, 1, 8]]) == [3, 4, 3, 8]

    class Order:
        def __init__(self, k, amount):
            self.k, self.amount = k, amount

    # PyFlink raises "The amount field selected on a basic type..." for sum("amount") of objects
    with pytest.raises(Exception, match="TypeError: sum\\('amount'\\): the 'amount' field selected on a basic type"):
        _rolling("sum", "amount", lambda o: o.k, [[Order("a", 1), Order("a", 2)]])
