"""PyFlink's Row, RowKind, Types, Time and Duration: behaviour and printed form as PyFlink's."""

from __future__ import annotations

import pickle
from pathlib import Path

import pyarrow as pa
import pytest

from conftest import run_cli
from streamjob.runtime import Duration, Row, RowKind, RowTypeInfo, Time, TypeInformation, Types

JOBS = Path(__file__).parent / "jobs"


def test_row_named_positional_and_row_classes_behave_as_pyflinks():
    row = Row(name="Alice", age=11)
    # named fields in the order given: PyFlink's docstring says sorted, its code (1.20 and 2.x) keeps the order
    assert repr(row) == "Row(name='Alice', age=11)"
    assert (row.name, row.age, row["name"], row[0], len(row)) == ("Alice", 11, "Alice", "Alice", 2)
    assert list(row.as_dict().items()) == [("name", "Alice"), ("age", 11)] and "Alice" in row
    assert row.get_fields_by_names(["age", "name"]) == [11, "Alice"]  # PyFlink's: values by names
    nested = Row(key=1, value=Row(name="a", age=2))
    assert nested.as_dict(True) == {"key": 1, "value": {"name": "a", "age": 2}}
    person = Row("name", "age")
    assert repr(person) == "<Row('name', 'age')>"
    alice = person("Alice", 11)
    assert repr(alice) == "Row(name='Alice', age=11)" and alice.age == 11
    assert repr(Row(1, "a")) == "<Row(1, 'a')>" and Row(1, "a")[1] == "a"
    with pytest.raises(ValueError, match="not both"):
        Row(1, name="x")
    with pytest.raises(AttributeError):
        _ = row.missing
    with pytest.raises(KeyError, match="not a field"):
        _ = row["missing"]
    with pytest.raises(TypeError, match="no dict form"):
        Row(1, 2).as_dict()
    row["age"] = 12
    assert row.age == 12


def test_row_equality_kind_pickling_and_flinks_printed_form():
    a, b = Row(name="x", n=1), Row(name="x", n=1)
    assert a == b and hash(a) == hash(b) and a != Row(1, "x") and a != (1, "x")
    assert a == Row(n=1, name="x") and hash(a) == hash(Row(n=1, name="x"))  # named rows compare by name, as PyFlink
    b.set_row_kind(RowKind.DELETE)
    assert a != b and b.get_row_kind() == RowKind.DELETE
    assert pickle.loads(pickle.dumps(b)) == b
    assert Row(1, "aaa|bb").to_flink_string() == "+I[1, aaa|bb]"
    assert b.to_flink_string() == "-D[x, 1]"
    assert Row(None, True, [1, 2], Row(3)).to_flink_string() == "+I[null, true, [1, 2], +I[3]]"
    assert [k.short_string() for k in RowKind] == ["+I", "-U", "+U", "-D"]


def test_every_pyflink_type_constructor_and_its_arrow_form():
    simple = {"STRING": pa.string(), "INT": pa.int32(), "LONG": pa.int64(), "FLOAT": pa.float32(),
              "DOUBLE": pa.float64(), "BOOLEAN": pa.bool_(), "BYTE": pa.int8(), "SHORT": pa.int16(),
              "SQL_TIMESTAMP": pa.timestamp("us"), "INSTANT": pa.timestamp("us", tz="UTC"),
              "BIG_DEC": None, "PICKLED_BYTE_ARRAY": None}
    for name, arrow in simple.items():
        t = getattr(Types, name)()
        assert isinstance(t, TypeInformation) and t.to_arrow() == arrow, name
    assert Types.PRIMITIVE_ARRAY(Types.INT()).to_arrow() == pa.list_(pa.int32())
    assert Types.BASIC_ARRAY(Types.STRING()).to_arrow() == pa.list_(pa.string())
    assert Types.OBJECT_ARRAY(Types.BIG_DEC()).to_arrow() is None
    assert Types.LIST(Types.LONG()).to_arrow() == pa.list_(pa.int64())
    assert Types.MAP(Types.STRING(), Types.INT()).to_arrow() == pa.map_(pa.string(), pa.int32())
    assert Types.TUPLE([Types.INT(), Types.STRING()]).to_arrow() is None
    row = Types.ROW([Types.INT(), Types.STRING()])
    assert isinstance(row, RowTypeInfo) and row.get_field_names() == ["f0", "f1"]
    named = Types.ROW_NAMED(["name", "age"], [Types.STRING(), Types.INT()])
    assert named.arrow_schema() == pa.schema([("name", pa.string()), ("age", pa.int32())])
    assert named.get_field_index("age") == 1 and named == Types.ROW_NAMED(["name", "age"], [Types.STRING(), Types.INT()])
    with pytest.raises(ValueError, match="2 names for 1 types"):
        Types.ROW_NAMED(["a", "b"], [Types.INT()])
    with pytest.raises(TypeError, match="TypeInformation fields"):
        Types.ROW([int])


def test_time_and_duration_are_milliseconds():
    assert Time.seconds(5).to_milliseconds() == 5000 and Time.minutes(1) == Time.milliseconds(60_000)
    assert Time.hours(1) > Time.minutes(59) and Time.days(1).to_milliseconds() == 86_400_000
    assert Duration.of_seconds(2).to_milliseconds() == 2000 and Duration.of_millis(7) == Duration(7)
    assert Duration.of_minutes(1) == Duration.of_seconds(60) and Duration.of_nanos(3_000_000).to_milliseconds() == 3
    assert Duration.of_hours(1).to_milliseconds() == 3_600_000 and Duration.of_days(1) == Duration.of_hours(24)
    with pytest.raises(TypeError, match="whole milliseconds"):
        Time(1.5)


def test_from_collection_with_a_row_type_makes_rows_and_names_bad_elements():
    from streamjob.runtime import StreamExecutionEnvironment

    env = StreamExecutionEnvironment.get_execution_environment()
    with pytest.raises(ValueError, match=r"element 1: .* has no field\(s\) \['age'\]"):
        env.from_collection([{"name": "a", "age": 1}, {"name": "b"}],
                            type_info=Types.ROW_NAMED(["name", "age"], [Types.STRING(), Types.INT()]))
    with pytest.raises(ValueError, match="element 0: 3 values for the 2 fields"):
        env.from_collection([(1, 2, 3)], type_info=Types.ROW([Types.INT(), Types.INT()]))


def test_a_pyflink_program_with_only_its_imports_changed_prints_what_pyflink_prints():
    r = run_cli("run", str(JOBS / "pyflink_rows.py"), "--no-progress")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    # What real PyFlink 1.20.5 printed for this program (its imports changed back): a row type prints
    # as PyFlink formats it (no spaces), a named Row's fields taken by the type's names.
    assert [x for x in lines if x.startswith("+I[")] == ["+I[10,AAA|BB]", "+I[20,BB|A]", "+I[30,AAA|A]"]
    assert [x for x in lines if x.startswith("adult> ")] == ["adult> +I[4,Bob]"]
    assert sorted(x for x in lines if x.startswith("minor> ")) == ["minor> Alice is 11", "minor> Carol is 7"]
