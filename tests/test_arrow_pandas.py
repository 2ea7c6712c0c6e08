"""Task workers load pandas only for jobs that use it (runtime/arrow_pandas.py, batch.to_array / numbers,
the daemon's preload of the job's own modules): pyarrow's conversions load pandas the first time they run
(~37 MB of each worker's memory); with the deferral they do not, and once anything imports pandas
pyarrow knows pandas' types as always. Real interpreters (the deferral is per process), a real `streamjob
run` whose workers and daemon are looked at through /proc.
"""

from __future__ import annotations

import datetime
import json
import os
import random
import subprocess
import sys
import textwrap

import numpy as np
import pyarrow as pa
import pytest

from streamjob.runtime.batch import numbers, to_array


def _python(code: str) -> dict:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_without_the_deferral_pyarrow_loads_pandas_on_its_first_conversion():
    """Why the deferral exists (if a pyarrow release stops doing this, the deferral can go)."""
    seen = _python("""
        import json, sys, pyarrow as pa
        pa.array([1, 2]).to_numpy()
        print(json.dumps({"pandas": "pandas" in sys.modules}))
    """)
    assert seen == {"pandas": True}


# What pyarrow makes of pandas' objects: the same with the deferral as without it.
PANDAS_SIDE = """
import pandas as pd
ts = pd.Timestamp("2020-01-01 00:00:00.000000001")
frame = pd.DataFrame({"a": [1, 2], "t": ["p", None], "when": [ts, pd.NaT]})
pandas_side = {
    "loader": type(pd.__loader__).__name__,
    "category": str(pa.array(pd.Series(["x", "y", "x"], dtype="category")).type),
    "nullable": pa.array(pd.Series([1, None], dtype="Int64")).to_pylist(),
    "sentinels": [str(v) for v in pa.array([pd.NaT, ts, pd.NA, float("nan")], from_pandas=True).to_pylist()],
    "scalars": [str(pa.array([ts]).type), str(pa.array([pd.Timedelta(1)]).to_pylist())],
    "series": str(pa.array(pd.Series([ts, pd.NaT])).type),
    "round_trip": pa.Table.from_pandas(frame).to_pandas().equals(frame),
    "objects": [str(v) for v in pa.array([ts, None], pa.timestamp("ns")).to_pandas()],
}
"""


def test_the_engine_converts_without_loading_pandas_and_pyarrow_knows_pandas_once_it_is_imported():
    seen = _python("""
        import io, json, sys
        import pyarrow as pa
        from streamjob.runtime import arrow_pandas
        from streamjob.runtime.batch import numbers, to_array, to_rows, try_columnar
        from streamjob.runtime.connectors.files import rows_to_batch

        deferred = arrow_pandas.defer()
        rows = [{"k": i % 7, "v": i * 0.5, "s": str(i), "b": i % 2 == 0, "n": None if i % 3 else i} for i in range(100)]
        batch = try_columnar(rows)
        written = rows_to_batch(rows, None)
        keys = numbers(batch.column(0))
        sink = io.BytesIO()
        with pa.ipc.new_stream(sink, batch.schema) as w:
            w.write_batch(batch)
        back = pa.ipc.open_stream(sink.getvalue()).read_next_batch()
        before = "pandas" in sys.modules
        exec(PANDAS_SIDE_HERE)
        print(json.dumps({"deferred": deferred, "before": before, "schema": str(batch.schema),
                          "same": written.equals(batch), "rows": to_rows(back) == rows,
                          "keys": keys.tolist() == [i % 7 for i in range(100)], "pandas_side": pandas_side}))
    """.replace("PANDAS_SIDE_HERE", repr(PANDAS_SIDE)))
    assert seen["deferred"] and not seen["before"], seen
    assert seen["schema"] == "k: int64\nv: double\ns: string\nb: bool\nn: int64", seen["schema"]
    assert seen["same"] and seen["rows"] and seen["keys"]
    # pandas loaded as itself, and pyarrow sees its types, nulls and nanoseconds exactly as without the deferral
    plain = _python("""
        import json, pyarrow as pa
        exec(PANDAS_SIDE_HERE)
        print(json.dumps({"pandas_side": pandas_side}))
    """.replace("PANDAS_SIDE_HERE", repr(PANDAS_SIDE)))
    assert seen["pandas_side"] == plain["pandas_side"]
    assert seen["pandas_side"]["loader"] == "SourceFileLoader" and seen["pandas_side"]["round_trip"] is True


def test_with_pandas_imported_first_nothing_is_deferred():
    seen = _python("""
        import json, sys, pandas, pyarrow as pa
        from streamjob.runtime import arrow_pandas
        print(json.dumps({"deferred": arrow_pandas.defer(), "finders": sum(type(f).__module__ == arrow_pandas.__name__
                                                                          for f in sys.meta_path)}))
    """)
    assert seen == {"deferred": False, "finders": 0}


def _values(rng: random.Random) -> list:
    pick = rng.choice(["int", "float", "str", "bool", "bytes", "mixed", "none", "big", "numpy", "date"])
    n = rng.randint(0, 30)
    make = {
        "int": lambda: rng.randint(-10**12, 10**12), "float": lambda: rng.uniform(-1e9, 1e9),
        "str": lambda: "".join(rng.choice("abcé€") for _ in range(rng.randint(0, 5))), "bool": lambda: rng.random() < .5,
        "bytes": lambda: bytes(rng.randint(0, 255) for _ in range(3)),
        "mixed": lambda: rng.choice([1, 2.5, True, None]), "none": lambda: None, "big": lambda: rng.choice([1, 1 << 70]),
        "numpy": lambda: np.int32(rng.randint(0, 9)), "date": lambda: datetime.date(2020, 1, rng.randint(1, 28)),
    }[pick]
    return [None if rng.random() < 0.2 else make() for _ in range(n)]


def test_to_array_names_the_type_pyarrow_would_infer_and_converts_the_same():
    rng = random.Random(7)
    for _ in range(500):
        values = _values(rng)
        try:
            expected = pa.array(values)
        except (pa.ArrowException, OverflowError, TypeError) as e:
            with pytest.raises(type(e)):
                to_array(values)
            continue
        got = to_array(values)
        assert got.type == expected.type and got.equals(expected), values
    assert to_array([1, 2], pa.float64()).type == pa.float64()  # a type given is the type


@pytest.mark.parametrize("arrow_type", [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(),
                                        pa.uint32(), pa.uint64(), pa.float32(), pa.float64(), pa.bool_(), pa.string()])
def test_numbers_is_to_numpy_and_read_only(arrow_type):
    values = [True, False, True, True, False, True, False] if arrow_type == pa.bool_() else [3, 1, 4, 1, 5, 9, 2]
    if arrow_type == pa.string():
        values = [str(v) for v in values]
    whole = pa.array(values, arrow_type)
    for col in (whole, whole.slice(2, 4), pa.array(values[:3] + [None], arrow_type), pa.chunked_array([whole, whole])):
        got, expected = numbers(col), col.to_numpy(zero_copy_only=False)
        assert got.dtype == expected.dtype, (got, expected)
        assert np.array_equal(got, expected, equal_nan=got.dtype.kind == "f"), (got, expected)
        # a view of Arrow's buffer is read-only (pyarrow's own conversion copies: nulls, bools, strings, chunks)
        assert not got.flags.writeable or col.null_count or arrow_type in (pa.bool_(), pa.string()) or isinstance(
            col, pa.ChunkedArray)


JOB = """
import os, sys
from streamjob.runtime import StreamExecutionEnvironment
from streamjob.runtime.connectors import DataGenSource, PrintSink


def daemon_has_pandas() -> bool:
    with open(f"/proc/{os.getppid()}/maps") as f:  # the worker's parent: the daemon it was forked from
        return "pandas/_libs" in f.read()


class Look:
    def __call__(self, row):
        if row["i"] < 2:
            print(f"LOOK worker={'pandas' in sys.modules} daemon={daemon_has_pandas()}", flush=True)
        return row


env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(2)
stream = env.from_source(DataGenSource(lambda i: {"i": i, "k": i % 5, "v": 1}, count=400)).key_by("k")
if os.environ["AGGREGATE"] == "1":
    stream = stream.sum("v")
else:
    stream = stream.map(lambda row: row)
stream.map(Look()).filter(lambda row: False).sink_to(PrintSink())
env.execute("pandas-or-not")
"""


@pytest.mark.parametrize("aggregate", [False, True], ids=["per-record", "keyed-sum"])
def test_a_job_s_workers_and_daemon_load_pandas_only_when_its_operators_use_it(tmp_path, aggregate):
    """A per-record job: neither its workers nor the daemon they fork from hold pandas. A keyed sum (its
    kernel is pandas'): the daemon loaded it before it forked them (the zygote, told by the run)."""
    job = tmp_path / "job.py"
    job.write_text(JOB)
    run = subprocess.run([sys.executable, "-m", "streamjob.runtime.cli", "run", str(job), "--no-progress"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "AGGREGATE": "1" if aggregate else "0"})
    assert run.returncode == 0, run.stderr[-3000:]
    looks = {line.strip() for line in run.stdout.splitlines() if line.startswith("LOOK")}
    expected = "LOOK worker=True daemon=True" if aggregate else "LOOK worker=False daemon=False"
    assert looks == {expected}, (looks, run.stdout[-2000:])
