"""Rolling aggregations on real local Spark, compared with pandas row for row."""

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from streamjob.runtime import KeyedProcessFunction, StreamExecutionEnvironment
from streamjob.runtime.connectors import FileSink, FileSource

pytestmark = pytest.mark.spark

N_FILES = 6
ROWS_PER_FILE = 4000


@pytest.fixture(scope="module")
def input_dir(tmp_path_factory):
    """Parquet files with disjoint key sets, so each key's order is fixed by its file."""
    d = tmp_path_factory.mktemp("input")
    for f in range(N_FILES):
        i = pd.RangeIndex(ROWS_PER_FILE)
        df = pd.DataFrame({
            "key": (f * 1000 + (i * 7919) % 97).astype("int64"),
            "value": ((i * 31 + f) % 1000).astype("int64"),
            "seq": (f * ROWS_PER_FILE + i).astype("int64"),
        })
        pq.write_table(pa.Table.from_pandas(df, preserve_index=False), d / f"part-{f}.parquet", row_group_size=700)
    return d


def expected(input_dir, how, first_record=True):
    """The rolling aggregate of each record; with ``first_record`` (KeyedStream.sum/min/max, as Flink and
    PyFlink) every output carries its key's first record's other fields (here: ``seq``), so rows are
    ordered by (seq, value): per key the sum and max only grow and the min only shrinks."""
    df = pd.concat([pd.read_parquet(input_dir / f"part-{f}.parquet") for f in range(N_FILES)]).sort_values("seq")
    g = df.groupby("key")["value"]
    df["value"] = {"sum": g.cumsum, "min": g.cummin, "max": g.cummax}[how]()
    if first_record:
        df["seq"] = df.groupby("key")["seq"].transform("first")
    return df.sort_values(["seq", "value"]).reset_index(drop=True)


def read_output(path):
    files = sorted(path.glob("part-*.parquet"))
    assert files, f"no committed part files in {path}"
    assert not list(path.glob(".*inprogress")), "in-progress files left behind"
    return pd.concat([pd.read_parquet(f) for f in files]).sort_values(["seq", "value"]).reset_index(drop=True)


@pytest.mark.parametrize("parallelism", [1, 2, 4])
def test_rolling_sum_equals_pandas(spark_slots, input_dir, tmp_path, parallelism):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    out = tmp_path / "out"
    env.from_source(FileSource.parquet(str(input_dir))).key_by("key").sum("value").sink_to(FileSink.parquet(str(out)))
    result = env.execute(f"rolling-sum-p{parallelism}")
    got = read_output(out)
    pd.testing.assert_frame_equal(got, expected(input_dir, "sum"), check_dtype=False)
    assert result.operators["Sum('value')"]["records_in"] == N_FILES * ROWS_PER_FILE


@pytest.mark.parametrize("how", ["min", "max"])
def test_rolling_min_max_equal_pandas(spark_slots, input_dir, tmp_path, how):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(3)
    out = tmp_path / "out"
    keyed = env.from_source(FileSource.parquet(str(input_dir))).key_by("key")
    getattr(keyed, how)("value").sink_to(FileSink.parquet(str(out)))
    env.execute()
    pd.testing.assert_frame_equal(read_output(out), expected(input_dir, how), check_dtype=False)


class RowSum(KeyedProcessFunction):
    """The per-row path: a KeyedProcessFunction keeping the sum in a dict."""

    def open(self, ctx):
        self.sums = {}

    def process_element(self, row, ctx):
        key = ctx.get_current_key()
        assert key == row["key"]
        self.sums[key] = self.sums.get(key, 0) + row["value"]
        yield {**row, "value": self.sums[key]}


def test_keyed_process_function_matches_columnar_sum(spark_slots, input_dir, tmp_path):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    out = tmp_path / "out"
    env.from_source(FileSource.parquet(str(input_dir))).key_by("key").process(RowSum()).sink_to(FileSink.parquet(str(out)))
    env.execute()
    pd.testing.assert_frame_equal(read_output(out), expected(input_dir, "sum", first_record=False), check_dtype=False)


def test_tuple_records_sum_by_position(spark_slots, tmp_path):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    words = ["a", "b", "a", "c", "a", "b"] * 50
    out = tmp_path / "out"
    (env.from_collection(words).map(lambda w: (w, 1)).key_by(lambda t: t[0]).sum(1)
        .map(lambda t: {"word": t[0], "count": t[1]}).sink_to(FileSink.jsonl(str(out))))
    env.execute()
    got = pd.concat([pd.read_json(f, lines=True) for f in out.glob("part-*.jsonl")])
    finals = got.groupby("word")["count"].max().to_dict()
    assert finals == {"a": 150, "b": 100, "c": 50}
    # every intermediate count appears exactly once per key
    for word, n in finals.items():
        assert sorted(got[got.word == word]["count"]) == list(range(1, n + 1))


def test_reduce_and_union_and_filter(spark_slots, tmp_path):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    a = env.from_collection([("x", 1), ("y", 2)] * 10)
    b = env.from_collection([("x", 10), ("z", 5)] * 10).filter(lambda t: t[0] != "z")
    out = tmp_path / "out"
    (a.union(b).key_by(lambda t: t[0]).reduce(lambda u, v: (u[0], u[1] + v[1]))
        .map(lambda t: {"k": t[0], "v": t[1]}).sink_to(FileSink.jsonl(str(out))))
    env.execute()
    got = pd.concat([pd.read_json(f, lines=True) for f in out.glob("part-*.jsonl")])
    assert got.groupby("k")["v"].max().to_dict() == {"x": 110, "y": 20}
    assert len(got) == 30
