"""File connectors read and written directly (no Spark): formats, monitoring, hidden files, errors."""

import json
import re
import time

import pyarrow as pa
from pyarrow.compute import sum as pc_sum
import pytest

from streamjob.runtime.api.functions import RuntimeContext
from streamjob.runtime.api.time import Duration
from streamjob.runtime.connectors import END, DataGenSource, FileFormatError, FileSink, FileSource
from streamjob.runtime.connectors import StreamFormat


JOB = "5e0b9c2f47d14a8e9b3f6c1d2a7e8f90"  # the job id a task would give its operators: in FileSink's part names
OTHER = "0d6e1f3a9c8b47e2a5f4b3c2d1e0f9a8"  # another job writing into the same directory


def ctx(index=0, parallelism=1, batch_size=8192, job_id=JOB):
    c = RuntimeContext("t", index, parallelism, 128, job_parameters={"execution.batch-size": batch_size})
    c._job_id = job_id  # as SlotRuntime sets it
    return c


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


def test_a_parquet_file_is_read_a_row_group_at_a_time_not_whole(tmp_path):
    import tracemalloc

    import numpy as np
    import pyarrow.parquet as pq

    n = 2_000_000  # 16 row groups of ~1 MB (random values do not compress)
    values = np.random.default_rng(7).integers(0, 2**40, n)
    pq.write_table(pa.table({"k": np.arange(n), "v": values}), tmp_path / "big.parquet", row_group_size=n // 16)
    size = (tmp_path / "big.parquet").stat().st_size
    reader = FileSource.parquet(str(tmp_path)).create_reader(ctx())
    tracemalloc.start()
    try:
        total = seen = 0
        while (b := reader.poll()) is not END:
            if b is not None:
                total += int(pc_sum(b.column("v")))
                seen += b.num_rows
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert seen == n and total == int(values.sum())
    # pyarrow's pre-buffering read the whole file through the Python file object at its open
    assert peak < size / 4, f"{peak / 2**20:.1f} MB held reading a {size / 2**20:.1f} MB file"


def test_monitored_source_picks_up_new_files(tmp_path):
    (tmp_path / "1.jsonl").write_text('{"n": 1}\n')
    reader = FileSource.jsonl(str(tmp_path), monitor_interval=0.05).create_reader(ctx())
    assert read_all(reader, until=0.1) == [{"n": 1}]
    (tmp_path / "2.jsonl").write_text('{"n": 2}\n')
    assert read_all(reader, until=0.5) == [{"n": 2}]


def _through_a_checkpoint(readers, parallelism):
    """Each reader's splits snapshotted into its operator state (as SourceOperator does) and
    restored into ``parallelism`` new readers of the same source (as a restarted job's are)."""
    from streamjob.runtime.state.operator_state import OperatorStateStore
    from streamjob.runtime.task.source import SourceOperator

    snapshots = []
    for reader in readers:
        store = OperatorStateStore()
        getter = store.get_union_list_state if reader.union_state else store.get_list_state
        getter(SourceOperator.SPLITS).update(reader.snapshot_state())
        snapshots.append(store.snapshot())
    restored = []
    for k in range(parallelism):
        store = OperatorStateStore()
        store.restore(snapshots, k, parallelism)
        reader = readers[0].source.create_reader(ctx(k, parallelism, batch_size=readers[0].batch_size))
        getter = store.get_union_list_state if reader.union_state else store.get_list_state
        reader.restore_state(getter(SourceOperator.SPLITS).get())
        restored.append(reader)
    return restored


@pytest.mark.parametrize("before,after", [(2, 3), (3, 2), (2, 2), (1, 4)])
def test_a_monitored_source_restored_at_any_parallelism_reads_every_line_once(tmp_path, before, after):
    """Some files read, one half read, some queued, when the job stops; restored at another
    parallelism, the readers read the rest and files that appear later, each line once. A reader
    that got no old reader's list at a scale-up used to list the old files as new and reread
    those its name's hash gave it (the queryable state test's rescale saw every count doubled)."""
    lines = {}
    for f in range(7):
        lines[f] = [f"{f}.{i}" for i in range(10)]
        (tmp_path / f"{f}.txt").write_text("".join(x + "\n" for x in lines[f]))
    source = FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(tmp_path)) \
        .monitor_continuously(Duration.of_millis(50)).build()
    readers = [source.create_reader(ctx(k, before, batch_size=4)) for k in range(before)]
    read = []
    for reader in readers:  # each reads its first file and a batch of its second (if any)
        for _ in range(4):
            b = reader.poll()
            if b is not None and b is not END:
                read += b
    restored = _through_a_checkpoint(readers, after)
    (tmp_path / "late.txt").write_text("late.0\nlate.1\n")
    for reader in restored:
        read += read_all(reader, until=0.3)
    expected = [x for f in lines.values() for x in f] + ["late.0", "late.1"]
    assert sorted(read) == sorted(expected)


def test_files_that_appear_later_are_spread_over_the_readers(tmp_path):
    """Files found after the first listing go by a hash of their name, each to one reader, and
    names that differ in one character land on several readers."""
    readers = [FileSource.jsonl(str(tmp_path), monitor_interval=0.05).create_reader(ctx(k, 4)) for k in range(4)]
    for i in range(40):
        (tmp_path / f"part-{i}.jsonl").write_text(json.dumps({"i": i}) + "\n")
    got = [[r["i"] for r in read_all(reader, until=0.3)] for reader in readers]
    assert sorted(i for part in got for i in part) == list(range(40))
    assert all(len(part) >= 4 for part in got), [len(part) for part in got]
    # crc32 % 4 gave all of these one owner (fixed names: the hash is stable, the test is too)
    from streamjob.runtime.connectors.files import _owner

    owners = [_owner(f"/data/in/{i}.jsonl", 4) for i in range(8)]
    assert len(set(owners)) >= 3, owners


def test_a_file_source_checkpoint_of_split_list_state_still_restores(tmp_path):
    """Checkpoints taken before the readers' state was union list state (elements without the
    subtask that took them) restore as they did: each reader continues its dealt queue."""
    for f in range(4):
        (tmp_path / f"{f}.txt").write_text(f"{f}.a\n{f}.b\n")
    source = FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(tmp_path)).build()
    readers = [source.create_reader(ctx(k, 2, batch_size=1)) for k in range(2)]
    read = [x for r in readers for x in r.poll()]
    legacy = [[{"queue": e["queue"], "seen": e["seen"]} for e in r.snapshot_state()] for r in readers]
    resumed = [source.create_reader(ctx(k, 2)) for k in range(2)]
    for r, state in zip(resumed, legacy):
        r.restore_state(state)
        read += read_all(r)
    assert sorted(read) == sorted(f"{f}.{x}" for f in range(4) for x in "ab")


def test_a_malformed_file_is_reported_with_its_path(tmp_path):
    (tmp_path / "bad.parquet").write_bytes(b"not parquet at all")
    with pytest.raises((FileFormatError, pa.ArrowInvalid), match="bad.parquet"):
        read_all(FileSource.parquet(str(tmp_path)).create_reader(ctx()))
    with pytest.raises(FileNotFoundError, match="no such file"):
        FileSource.parquet(str(tmp_path / "nope")).create_reader(ctx())


def test_file_sink_commits_part_files_and_hides_in_progress_ones(tmp_path):
    writer = FileSink.jsonl(str(tmp_path), max_rows_per_file=2).create_writer(ctx())
    writer.write([{"a": 1}, {"a": 2}, {"a": 3}])
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"part-{JOB}-0-0.jsonl"]
    writer.write(pa.RecordBatch.from_pylist([{"a": 4}]))
    assert any(p.name.startswith(".") for p in tmp_path.iterdir())  # in progress, hidden
    FileSink.jsonl(str(tmp_path)).commit(writer.prepare_commit())  # end of input, no checkpointing
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [f"part-{JOB}-0-0.jsonl", f"part-{JOB}-0-1.jsonl"]
    rows = [json.loads(line) for n in names for line in (tmp_path / n).read_text().splitlines()]
    assert rows == [{"a": 1}, {"a": 2}, {"a": 3}, {"a": 4}]


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_file_sink_makes_a_part_durable_before_its_checkpoint_and_its_name_at_commit(tmp_path, monkeypatch, fmt):
    """On a local file system a part file's bytes and its (hidden) name are synced to disk before the
    pre-commit returns (the checkpoint that holds it completes only after that, and its records are
    never written again), and the published name once committed. The disk itself cannot be failed
    here: what is checked is that each sync is asked of the right file and directory, in that order."""
    import os

    synced = []
    real_fsync = os.fsync

    def fsync(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    sink = FileSink.parquet(str(tmp_path)) if fmt == "parquet" else FileSink.jsonl(str(tmp_path))
    checkpointing = RuntimeContext("t", 0, 1, 128, job_parameters={"execution.checkpointing.interval": 1000})
    checkpointing._job_id = JOB
    writer = sink.create_writer(checkpointing)
    writer.write(pa.RecordBatch.from_pylist([{"a": 1}, {"a": 2}]))
    assert not synced
    committables = writer.prepare_commit()
    (pending,) = [c["pending"] for c in committables]
    assert synced == [pending, str(tmp_path)]  # the file's bytes, then its name in the directory
    synced.clear()
    sink.commit(committables)
    assert synced == [str(tmp_path)] and not os.path.exists(pending)
    synced.clear()
    sink.commit(committables)  # again after a restore: nothing was renamed, nothing to sync
    assert synced == []


def test_datagen_splits_indices_across_subtasks_and_limits_rate():
    parts = [read_all(DataGenSource(lambda i: i, count=10).create_reader(ctx(k, 3, batch_size=2))) for k in range(3)]
    assert parts == [[0, 3, 6, 9], [1, 4, 7], [2, 5, 8]]
    reader = DataGenSource(lambda i: i, rows_per_second=100).create_reader(ctx())
    started = time.monotonic()
    got = read_all(reader, until=0.3)
    elapsed = time.monotonic() - started
    assert got == list(range(len(got)))
    assert len(got) <= 100 * elapsed + 2  # never ahead of the rate


def test_parquet_sink_buffers_rows_into_row_groups_and_keeps_types_across_parts(tmp_path):
    import pyarrow.parquet as pq

    writer = FileSink.parquet(str(tmp_path), row_group_size=1000).create_writer(ctx())
    for start in range(0, 2500, 300):  # Python rows and Arrow batches, mixed
        rows = [{"k": i, "v": float(i) if i % 2 else None} for i in range(start, min(start + 300, 2500))]
        writer.write(rows if start % 600 else pa.RecordBatch.from_pylist(rows))
    FileSink.parquet(str(tmp_path)).commit(writer.prepare_commit())
    meta = pq.ParquetFile(tmp_path / f"part-{JOB}-0-0.parquet").metadata
    # Row groups fill up to row_group_size; the rest goes out when the part closes.
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [1000, 1000, 500]
    assert pq.read_table(tmp_path / f"part-{JOB}-0-0.parquet").to_pylist() == \
        [{"k": i, "v": float(i) if i % 2 else None} for i in range(2500)]
    # The next part converts with the last part's schema: a first batch of all-None values stays double.
    writer.write([{"k": 1, "v": None}])
    writer.write([{"k": 2, "v": 3}])  # an int into the double column
    FileSink.parquet(str(tmp_path)).commit(writer.prepare_commit())
    table = pq.read_table(tmp_path / f"part-{JOB}-0-1.parquet")
    assert table.schema.field("v").type == pa.float64() and table.to_pylist() == [{"k": 1, "v": None}, {"k": 2, "v": 3.0}]
    # A new part whose records no longer fit the old types gets its own schema, as any first part does.
    writer.write([{"k": "a", "v": 1.5}])
    FileSink.parquet(str(tmp_path)).commit(writer.prepare_commit())
    assert pq.read_table(tmp_path / f"part-{JOB}-0-2.parquet").schema.field("k").type == pa.string()


def test_parquet_pre_commit_completes_part_files_in_the_background_and_the_checkpoint_waits(tmp_path):
    import pyarrow.parquet as pq

    checkpointing = RuntimeContext("t", 0, 1, 128, job_parameters={"execution.checkpointing.interval": "1 s"})
    checkpointing._sink_background = waits = []  # what the sink operator hands its writer
    checkpointing._job_id = JOB
    sink = FileSink.parquet(str(tmp_path))
    writer = sink.create_writer(checkpointing)
    writer.write([{"k": i, "v": i * 2} for i in range(5000)])
    committables = writer.prepare_commit()  # returns at once: the encoding runs in the writer's thread
    assert [c["final"].rsplit("/", 1)[1] for c in committables] == [f"part-{JOB}-0-0.parquet"] and len(waits) == 1
    writer.write([{"k": 1, "v": 1}])  # the next part is written meanwhile
    waits.pop()()  # what the checkpoint's snapshot does before it is acknowledged: the file is complete
    assert pq.ParquetFile(committables[0]["pending"]).metadata.num_rows == 5000
    sink.commit(committables)
    assert pq.read_table(tmp_path / f"part-{JOB}-0-0.parquet").to_pylist() == [{"k": i, "v": i * 2} for i in range(5000)]

    # A part that cannot be completed declines the checkpoint (the wait raises, naming the file) and
    # fails the task at its next record, before any later checkpoint could commit the broken file.
    part = writer.parts[""]
    part.writer = None
    part.file.close()  # the file's handle is gone: writing the row group fails
    broken = writer.prepare_commit()
    with pytest.raises(FileFormatError, match=rf"could not complete part file .*\.part-{JOB}-0-1\.parquet\.inprogress"):
        waits.pop()()
    with pytest.raises(FileFormatError, match=rf"\.part-{JOB}-0-1\.parquet\.inprogress"):
        writer.write([{"k": 2, "v": 2}])
    assert [c["final"].rsplit("/", 1)[1] for c in broken] == [f"part-{JOB}-0-1.parquet"]
    with pytest.raises(FileFormatError, match=f"part-{JOB}-0-1"):  # and at the end, still
        writer.close()
    # Without the sink operator's list (a writer made elsewhere) the pre-commit completes the file itself.
    plain = sink.create_writer(RuntimeContext("t", 1, 2, 128, job_parameters={"execution.checkpointing.interval": "1 s"}))
    plain.write([{"k": 0, "v": 0}])
    done = plain.prepare_commit()
    assert pq.ParquetFile(done[0]["pending"]).metadata.num_rows == 1


def test_parquet_sink_refuses_records_it_would_write_wrongly_naming_file_and_field(tmp_path):
    writer = FileSink.parquet(str(tmp_path)).create_writer(ctx())
    writer.write([{"k": 1, "v": 1}, {"k": 2}])  # a missing field is null
    with pytest.raises(FileFormatError, match=rf"part-{JOB}-0-0.parquet.*field\(s\) \['extra'\].*'extra': 3"):
        writer.write([{"k": 3, "v": 3, "extra": 3}])  # it would be dropped
    with pytest.raises(FileFormatError, match=rf"part-{JOB}-0-0.parquet.*field 'v'.*'x'"):
        writer.write([{"k": 4, "v": "x"}])
    FileSink.parquet(str(tmp_path)).commit(writer.prepare_commit())
    import pyarrow.parquet as pq

    assert pq.read_table(tmp_path / f"part-{JOB}-0-0.parquet").to_pylist() == [{"k": 1, "v": 1}, {"k": 2, "v": None}]


def test_parquet_sink_writer_options_reach_the_file_and_bad_ones_fail_where_the_job_is_built(tmp_path):
    import pyarrow.parquet as pq

    sink = FileSink.parquet(str(tmp_path), compression="zstd", use_dictionary=False)
    writer = sink.create_writer(ctx())
    writer.write([{"k": i} for i in range(10)])
    sink.commit(writer.prepare_commit())
    column = pq.ParquetFile(tmp_path / f"part-{JOB}-0-0.parquet").metadata.row_group(0).column(0)
    assert column.compression == "ZSTD" and "RLE_DICTIONARY" not in column.encodings
    with pytest.raises(ValueError, match="bad writer option"):
        FileSink.parquet(str(tmp_path), compression="nonsense")
    with pytest.raises(ValueError, match="bad writer option"):
        FileSink.parquet(str(tmp_path), no_such_option=1)
    with pytest.raises(ValueError, match="row_group_size"):
        FileSink.parquet(str(tmp_path), row_group_size=0)


def test_jsonl_sink_writes_arrow_batches_as_json_dumps_would(tmp_path):
    import random

    rng = random.Random(7)
    chars = ['a', '"', '\\', ' ', '~', 'é', '\n', '\x7f', '\x01', '😀']
    batches = []
    for n in range(0, 60, 3):
        text = ["".join(rng.choice(chars if n % 2 else chars[:5]) for _ in range(rng.randint(0, 4))) for _ in range(n)]
        batches.append(pa.RecordBatch.from_pydict({
            "i": pa.array([rng.choice([None, -2**63, 2**63 - 1, rng.randint(-9, 9)]) for _ in range(n)], pa.int64()),
            "u": pa.array([rng.randint(0, 2**64 - 1) for _ in range(n)], pa.uint64()),
            "b": [rng.choice([None, True, False]) for _ in range(n)],
            'quo"te': [rng.choice([None, t]) for t in text],
            "f": [rng.choice([None, 0.1, 1.0, 1e20, float("nan")]) for _ in range(n)] if n % 3 else [None] * n,
        }).slice(n // 3))  # sliced batches (an offset into their buffers) too
    writer = FileSink.jsonl(str(tmp_path)).create_writer(ctx())
    for b in batches:
        writer.write(b)
    FileSink.jsonl(str(tmp_path)).commit(writer.prepare_commit())
    expected = "".join(json.dumps(r, default=str) + "\n" for b in batches for r in b.to_pylist())
    assert (tmp_path / f"part-{JOB}-0-0.jsonl").read_text() == expected


def test_file_sink_restored_at_another_parallelism_keeps_the_checkpoints_pre_committed_files(tmp_path):
    """Restored at parallelism 2 from a checkpoint of parallelism 3: a pre-committed part file of the
    checkpoint may go to another new subtask to commit, so no subtask deletes it; what the failed attempt
    wrote after the checkpoint (numbered from its subtask's counter on) is deleted, old subtask 2's by new 0."""
    sink = FileSink.jsonl(str(tmp_path))
    counters = {0: 2, 1: 5, 2: 1}  # each old subtask's part counter at the checkpoint
    for j, n in ((0, 1), (0, 2), (1, 4), (1, 5), (1, 6), (2, 0), (2, 1)):
        (tmp_path / f".part-{JOB}-{j}-{n}.jsonl.inprogress").write_text("{}\n")
    state = [{"counter": c, "subtask": j, "lineage": JOB} for j, c in counters.items()]
    for k in range(2):
        writer = sink.create_writer(ctx(index=k, parallelism=2))
        writer.restore_state(state)
        assert writer.counter == 5  # numbering goes on above every old subtask's: no name is taken twice
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        f".part-{JOB}-0-1.jsonl.inprogress", f".part-{JOB}-1-4.jsonl.inprogress", f".part-{JOB}-2-0.jsonl.inprogress"]


def test_file_sink_part_names_carry_the_job_id_or_a_lineage_of_their_own(tmp_path):
    """Two jobs writing one directory take different names for the same subtask and number; a writer
    made outside a job (no job id) gets a random one, and its snapshot records it."""
    sink = FileSink.jsonl(str(tmp_path))
    names = []
    for c in (ctx(), ctx(job_id=OTHER), RuntimeContext("t", 0, 1, 128), RuntimeContext("t", 0, 1, 128)):
        writer = sink.create_writer(c)
        writer.write([{"a": 1}])
        writer.prepare_commit()  # without checkpointing: committed here
        assert writer.snapshot_state() == [{"counter": 1, "subtask": 0, "lineage": writer.lineage}]
        names.append(f"part-{writer.lineage}-0-0.jsonl")
    assert names[:2] == [f"part-{JOB}-0-0.jsonl", f"part-{OTHER}-0-0.jsonl"]
    assert all(re.fullmatch(r"part-[0-9a-f]{32}-0-0\.jsonl", n) for n in names[2:]) and len(set(names)) == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names)


def test_file_sink_restore_deletes_only_its_own_jobs_files_never_another_jobs(tmp_path):
    """Job OTHER runs on (hidden part files in progress and pre-committed, numbered as this job's are)
    while this job fails over, and while a new job restores OTHER's savepoint: neither deletes OTHER's
    files. A failover cleans what its own job wrote after the checkpoint (in bucket directories too);
    the job restored from the savepoint cleans what it wrote itself before a checkpoint of its own."""
    sink = FileSink.jsonl(str(tmp_path))
    (tmp_path / "2026-11-27").mkdir()
    others = [f".part-{OTHER}-{j}-{n}.jsonl.inprogress" for j in range(2) for n in range(5)]
    for name in others:
        (tmp_path / name).write_text("{}\n")
        (tmp_path / "2026-11-27" / name).write_text("{}\n")
    # The failover of this job (its checkpoint's state: its own lineage): its subtask 0 wrote 0-2 after it.
    for n in range(3):
        (tmp_path / "2026-11-27" / f".part-{JOB}-0-{n}.jsonl.inprogress").write_text("{}\n")
    state = [{"counter": 2, "subtask": 0, "lineage": JOB}, {"counter": 1, "subtask": 1, "lineage": JOB}]
    sink.create_writer(ctx(0, 2)).restore_state(state)
    assert sorted(p.name for p in (tmp_path / "2026-11-27").iterdir()) == sorted(
        others + [f".part-{JOB}-0-0.jsonl.inprogress", f".part-{JOB}-0-1.jsonl.inprogress"])
    # A new job (NEW) restored from OTHER's savepoint: its first attempt wrote part 3 and failed before
    # a checkpoint of its own, so the restore is from the savepoint again.
    new = "a" * 32
    (tmp_path / f".part-{new}-1-3.jsonl.inprogress").write_text("{}\n")
    savepoint = [{"counter": 3, "subtask": 0, "lineage": OTHER}, {"counter": 2, "subtask": 1, "lineage": OTHER}]
    writer = sink.create_writer(ctx(1, 2, job_id=new))
    writer.restore_state(savepoint)
    assert writer.counter == 3
    assert not (tmp_path / f".part-{new}-1-3.jsonl.inprogress").exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == sorted(others)
    writer.write([{"a": 1}])
    sink.commit(writer.prepare_commit())
    assert (tmp_path / f"part-{new}-1-3.jsonl").read_text() == '{"a": 1}\n'
    assert all((tmp_path / name).read_text() == "{}\n" for name in others)


def test_file_sink_restored_from_state_without_a_lineage_cleans_the_old_part_names(tmp_path):
    """A checkpoint taken before part names had a lineage restores as it did: the hidden part-<j>-<n>
    files numbered from its counters on are deleted (old subtask 1's by subtask 0 at parallelism 1),
    the pre-committed ones kept for their commit; files with a lineage are not the old job's."""
    sink = FileSink.jsonl(str(tmp_path))
    for j, n in ((0, 1), (0, 2), (1, 0), (1, 1)):
        (tmp_path / f".part-{j}-{n}.jsonl.inprogress").write_text("{}\n")
    (tmp_path / "part-0-0.jsonl").write_text("{}\n")
    (tmp_path / f".part-{OTHER}-0-2.jsonl.inprogress").write_text("{}\n")
    writer = sink.create_writer(ctx())
    writer.restore_state([{"counter": 2, "subtask": 0}, {"counter": 1, "subtask": 1}])
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".part-0-1.jsonl.inprogress", f".part-{OTHER}-0-2.jsonl.inprogress", ".part-1-0.jsonl.inprogress",
        "part-0-0.jsonl"]
    sink.commit([{"pending": str(tmp_path / ".part-0-1.jsonl.inprogress"), "final": str(tmp_path / "part-0-1.jsonl")}])
    writer.write([{"a": 1}])
    sink.commit(writer.prepare_commit())
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == [
        "part-0-0.jsonl", "part-0-1.jsonl", f"part-{JOB}-0-2.jsonl"]
