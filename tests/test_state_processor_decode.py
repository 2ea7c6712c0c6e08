"""The State Processor API's pure half, without Spark: chunks into rows by kind (TTL unwrapped,
expired left out), type inference and its fallbacks, Arrow batches and what a misfit says."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pyarrow as pa
import pytest

from streamjob.runtime.api.types import Row, Types
from streamjob.runtime.state.snapshot import serialize
from streamjob.runtime.state.tables import FrozenDict, KeyOrder
from streamjob.state import batches, decode, types


def test_chunks_become_rows_by_kind():
    assert decode.chunk_columns("value", {"a": 1, "b": 2}).rows() == [("a", 1), ("b", 2)]
    assert decode.chunk_columns("list", {"a": [1, 2], "b": []}).rows() == [("a", 1), ("a", 2)]
    assert decode.chunk_columns("map", {"a": {"x": 1, "y": 2}}).rows() == [("a", "x", 1), ("a", "y", 2)]
    assert decode.chunk_columns("accumulators", (["a"], np.array([1.5]))).rows() == [("a", 1.5)]
    assert decode.chunk_columns("map", {}).columns == [[], [], []]
    with pytest.raises(ValueError, match="unknown state kind"):
        decode.chunk_columns("queue", {})


def test_ttl_values_are_unwrapped_and_expired_ones_left_out():
    now, ttl = 10_000, 1_000
    chunk = {"fresh": (1, 9_500), "stale": (2, 8_000)}
    assert decode.chunk_columns("value+ttl", chunk).rows() == [("fresh", 1, 9_500), ("stale", 2, 8_000)]
    assert decode.chunk_columns("value+ttl", chunk, (ttl, now)).rows() == [("fresh", 1, 9_500)]
    lists = {"k": [(1, 9_500), (2, 8_000)]}
    assert decode.chunk_columns("list+ttl", lists, (ttl, now)).rows() == [("k", 1, 9_500)]
    maps = {"k": {"a": (1, 8_000), "b": (2, 9_999)}}
    assert decode.chunk_columns("map+ttl", maps, (ttl, now)).rows() == [("k", "b", 2, 9_999)]


def test_a_columnar_table_is_read_without_python_objects():
    keys = list(range(1000))
    data, index = serialize({"v": ("value", FrozenDict({k: k * 2 for k in keys}, KeyOrder()))}, 128, None)
    assert "columnar" in index["keyed"]["v"]
    parts = list(decode.state_parts(data, index, "v", range(128), "test"))
    assert all(isinstance(p, decode.Columns) for p in parts)
    got = {int(k): int(v) for p in parts for k, v in zip(p.keys, p.values)}
    assert got == {k: k * 2 for k in keys}
    half = list(decode.state_parts(data, index, "v", range(64), "test"))  # key groups 0-63 only
    assert 0 < sum(len(p.keys) for p in half) < 1000


def test_inference_picks_a_type_when_the_sample_agrees():
    assert types.infer([1, 2, None], "v").type == pa.int64()
    assert types.infer([1, 2.5], "v").type == pa.float64()
    assert types.infer(["a"], "v").type == pa.string()
    assert types.infer([b"a"], "v").type == pa.binary()
    assert types.infer([True], "v").type == pa.bool_()
    assert types.infer([[1, 2], []], "v").type == pa.list_(pa.int64())
    assert types.infer([{"a": 1}], "v").type == pa.map_(pa.string(), pa.int64())
    assert types.infer([(1, "a")], "v").type == pa.struct([("f0", pa.int64()), ("f1", pa.string())])
    assert types.infer([Row(count=1, last="x")], "v").type == pa.struct([("count", pa.int64()), ("last", pa.string())])


def test_inference_falls_back_to_json_or_repr_text():
    mixed = types.infer([1, "a"], "v")
    assert mixed.type == pa.string() and "inferred text" in mixed.how
    assert mixed.array([1, "a"]).to_pylist() == ["1", "a"]
    uneven = types.infer([{"n": 1, "s": "x"}], "v")  # a dict of mixed values: no map type
    assert json.loads(uneven.array([{"n": 1, "s": "x"}])[0].as_py()) == {"n": 1, "s": "x"}
    obj = types.infer([object()], "v")
    assert obj.array([complex(1, 2)]).to_pylist() == ["(1+2j)"]  # not JSON-able: its repr
    assert types.infer([1 << 70], "v").type == pa.string()  # beyond int64


def test_declared_types_and_pickled_bytes():
    assert types.of_type_info(Types.LONG()).type == pa.int64()
    row = types.of_type_info(Types.ROW_NAMED(["a", "b"], [Types.INT(), Types.STRING()]))
    assert row.array([Row(a=1, b="x"), {"a": 2, "b": "y"}]).to_pylist() == [{"a": 1, "b": "x"}, {"a": 2, "b": "y"}]
    pickled = types.of_type_info(Types.PICKLED_BYTE_ARRAY())
    assert pickle.loads(pickled.array([{1, 2}])[0].as_py()) == {1, 2}


def test_a_value_that_does_not_fit_its_inferred_column_is_named():
    schema = pa.schema([("key", pa.string()), ("value", pa.int64())])
    columns = [types.infer(["a"], "key"), types.infer([1], "value")]
    parts = [decode.ColumnLists([["a", "b"], [1, "two"]])]
    with pytest.raises(batches.ColumnMismatch, match=r"column 'value' is int64 .*'two' \(str\).*value_format='text'"):
        list(batches.record_batches(parts, schema, columns, "keyed state 'v'"))
    ok = list(batches.record_batches([decode.ColumnLists([["a"], [1]]), [("b", 2)]], schema, columns, "x"))
    assert pa.Table.from_batches(ok).to_pylist() == [{"key": "a", "value": 1}, {"key": "b", "value": 2}]
