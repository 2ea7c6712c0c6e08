"""File connectors read and written directly (no Spark): formats, monitoring, hidden files, errors."""

import json
import time

import pyarrow as pa
import pytest

from streamjob.runtime.api.functions import RuntimeContext
from streamjob.runtime.connectors import END, DataGenSource, FileFormatError, FileSink, FileSource


def ctx(index=0, parallelism=1, batch_size=8192):
    return RuntimeContext("t", index, parallelism, 128, job_parameters={"execution.batch-size": batch_size})


def read_all(reader, until=None):
    rows = []
    deadline = time.monotonic() + (until or 0)
    while True:
        b = reader.poll()
        if b is END:
            return rows
        if b is None:
            if time.monotonic() > deadline:
                return rows
            time.sleep(0.02)
            continue
        rows.extend(b.to_pylist() if isinstance(b, pa.RecordBatch) else b)


def test_csv_and_jsonl_sources_read_every_file_split_across_subtasks(tmp_path):
    (tmp_path / "a.csv").write_text("k,v\n1,10\n2,20\n")
    (tmp_path / "b.csv").write_text("k,v\n3,30\n")
    (tmp_path / ".hidden.csv").write_text("k,v\n9,90\n")
    (tmp_path / "_SUCCESS").write_text("")
    rows = [read_all(FileSource.csv(str(tmp_path)).create_reader(ctx(i, 2))) for i in range(2)]
    assert sorted(r["k"] for part in rows for r in part) == [1, 2, 3]
    assert all(part for part in rows)  # each subtask got a file

    j = tmp_path / "j"
    j.mkdir()
    (j / "x.jsonl").write_text('{"a": 1, "s": "x"}\n{"a": 2, "s": "y"}\n')
    assert read_all(FileSource.jsonl(str(j)).create_reader(ctx())) == [{"a": 1, "s": "x"}, {"a": 2, "s": "y"}]


def test_monitored_source_picks_up_new_files(tmp_path):
    (tmp_path / "1.jsonl").write_text('{"n": 1}\n')
    reader = FileSource.jsonl(str(tmp_path), monitor_interval=0.05).create_reader(ctx())
    assert read_all(reader, until=0.1) == [{"n": 1}]
    (tmp_path / "2.jsonl").write_text('{"n": 2}\n')
    assert read_all(reader, until=0.5) == [{"n": 2}]


def test_a_malformed_file_is_reported_with_its_path(tmp_path):
    (tmp_path / "bad.parquet").write_bytes(b"not parquet at all")
    with pytest.raises((FileFormatError, pa.ArrowInvalid), match="bad.parquet"):
        read_all(FileSource.parquet(str(tmp_path)).create_reader(ctx()))
    with pytest.raises(FileNotFoundError, match="no such file"):
        FileSource.parquet(str(tmp_path / "nope")).create_reader(ctx())


def test_file_sink_commits_part_files_and_hides_in_progress_ones(tmp_path):
    writer = FileSink.jsonl(str(tmp_path), max_rows_per_file=2).create_writer(ctx())
    writer.write([{"a": 1}, {"a": 2}, {"a": 3}])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["part-0-0.jsonl"]
    writer.write(pa.RecordBatch.from_pylist([{"a": 4}]))
    assert any(p.name.startswith(".") for p in tmp_path.iterdir())  # in progress, hidden
    FileSink.jsonl(str(tmp_path)).commit(writer.prepare_commit())  # end of input, no checkpointing
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["part-0-0.jsonl", "part-0-1.jsonl"]
    rows = [json.loads(line) for n in names for line in (tmp_path / n).read_text().splitlines()]
    assert rows == [{"a": 1}, {"a": 2}, {"a": 3}, {"a": 4}]


def test_datagen_splits_indices_across_subtasks_and_limits_rate():
    parts = [read_all(DataGenSource(lambda i: i, count=10).create_reader(ctx(k, 3, batch_size=2))) for k in range(3)]
    assert parts == [[0, 3, 6, 9], [1, 4, 7], [2, 5, 8]]
    reader = DataGenSource(lambda i: i, rows_per_second=100).create_reader(ctx())
    started = time.monotonic()
    got = read_all(reader, until=0.3)
    elapsed = time.monotonic() - started
    assert got == list(range(len(got)))
    assert len(got) <= 100 * elapsed + 2  # never ahead of the rate
