"""Batches as records: what per-record functions see of an Arrow batch."""

import datetime
import decimal
import random

import pyarrow as pa
import pytest

from streamjob.runtime.batch import to_rows


def _column(kind: str, n: int, rng: random.Random) -> pa.Array:
    values = {
        "int": lambda: rng.choice([None, 0, -(2**63), 2**63 - 1, rng.randint(-1000, 1000)]),
        "str": lambda: rng.choice([None, "", "a", "é\n\"\\", "x" * 40]),
        "float": lambda: rng.choice([None, 1.5, -0.0, float("nan"), float("inf")]),
        "bool": lambda: rng.choice([None, True, False]),
        "null": lambda: None,
        "timestamp": lambda: rng.choice([None, datetime.datetime(2026, 11, 29, 10, 35, 17, 123456)]),
        "list": lambda: rng.choice([None, [], [1, 2]]),
        "struct": lambda: rng.choice([None, {"a": 1, "b": "x"}]),
        "decimal": lambda: rng.choice([None, decimal.Decimal("1.23")]),
    }[kind]
    return pa.array([values() for _ in range(n)])


def test_rows_of_an_arrow_batch_are_what_to_pylist_gives():
    """Columns of every kind (nulls, nested, NaN), any names (keywords, spaces, digits), one to
    many fields, empty and sliced batches: the same dicts, in the same order, as pyarrow's."""
    rng = random.Random(34)
    kinds = ["int", "str", "float", "bool", "null", "timestamp", "list", "struct", "decimal"]
    for _ in range(300):
        n = rng.choice([0, 1, 2, rng.randint(3, 300)])
        fields = rng.choice([1, 2, rng.randint(3, 9), 70])  # 70: beyond the generated row makers
        names = [rng.choice(["key", "value", "class", "x y", "1", "é"]) + str(i) for i in range(fields)]
        batch = pa.RecordBatch.from_arrays([_column(rng.choice(kinds), n, rng) for _ in names], names=names)
        for b in (batch, batch.slice(min(2, n)), batch.slice(0, n // 2)):
            rows = to_rows(b)
            assert repr(rows) == repr(b.to_pylist())  # repr: NaN != NaN
            assert all(type(r) is dict for r in rows) and len({id(r) for r in rows}) == len(rows)


def test_rows_of_a_batch_with_a_repeated_column_name_are_what_to_pylist_gives():
    batch = pa.RecordBatch.from_arrays([pa.array([1, 2]), pa.array(["a", "b"])], names=["k", "k"])
    assert to_rows(batch) == batch.to_pylist()


def test_python_records_pass_as_they_are():
    records = [{"a": 1}, (1, 2), "x"]
    assert to_rows(records) is records


def test_rows_become_a_batch_as_from_pylist_makes_it_and_rows_it_cannot_write_are_refused():
    """``rows_to_batch`` (a sink's rows -> Arrow, a column at a time) against pyarrow's own
    ``from_pylist``: dict rows, rows lacking a field (null there), mappings that are not dicts, with
    and without a schema; a row with a field the others lack is refused, rows of another kind still
    go through ``from_pylist`` as before."""
    import random
    from types import MappingProxyType

    from streamjob.runtime.connectors.files import rows_to_batch

    rng = random.Random(7)
    schema = pa.schema([("k", pa.int64()), ("v", pa.float64()), ("s", pa.string())])
    for _ in range(200):
        n = rng.randint(1, 50)
        rows = [{"k": rng.randint(-5, 5), "v": rng.random(), "s": rng.choice(["a", "", None])} for _ in range(n)]
        if rng.random() < 0.3:
            del rows[rng.randrange(n)]["v"]  # a missing field: null
        if rng.random() < 0.3:
            i = rng.randrange(n)
            rows[i] = MappingProxyType(rows[i])  # a read-only mapping is a row too
        for given in (schema, None):
            expected = pa.RecordBatch.from_pylist([dict(r) for r in rows], schema=given or schema)
            got = rows_to_batch(rows, given)
            if given is None and "v" not in rows[0]:
                continue  # the first row's fields are the batch's: no "v" column at all
            assert got.to_pylist() == expected.to_pylist()
            assert given is None or got.schema == schema
    with pytest.raises(ValueError, match=r"field\(s\) \['extra'\] beyond"):
        rows_to_batch([{"k": 1, "v": 1.0, "s": "a"}, {"k": 2, "v": 2.0, "extra": 3}], schema)
    mixed = [{"k": 1, "v": 1.0, "s": "a"}, (2, 2.0, "b")]  # what from_pylist makes of it, as before
    assert rows_to_batch(mixed, schema).to_pylist() == pa.RecordBatch.from_pylist(mixed, schema=schema).to_pylist()
    assert rows_to_batch([], schema).num_rows == 0
