"""FileSource and FileSink over a directory, through fsspec (local paths, file://, memory://, s3://...).

Files whose names start with ``.`` or ``_`` are hidden, as in Flink and Hadoop:
the source skips them, and the sink writes its in-progress files that way, so a
source reading a sink's directory never sees a partly written file.
"""

from __future__ import annotations

import datetime as _dt
import json
import posixpath
import time
import zlib
from typing import Any, Iterator

import fsspec
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.json as pa_json
import pyarrow.parquet as pq

from ..batch import to_rows, try_columnar
from .base import END, Sink, SinkWriter, Source, SourceReader, batch_size_of, share

FORMATS = ("parquet", "csv", "jsonl")


class FileFormatError(ValueError):
    """A file could not be read or written; the message names the file."""


def _is_hidden(path: str) -> bool:
    return posixpath.basename(path).startswith((".", "_"))


def _seconds(interval: Any) -> float | None:
    if interval is None:
        return None
    if isinstance(interval, _dt.timedelta):
        return interval.total_seconds()
    value = float(interval)
    if value <= 0:
        raise ValueError(f"monitor_interval must be > 0 seconds, got {interval!r}")
    return value


class FileSource(Source):
    """Records of every file in a directory (or one file), split across subtasks by file.

    Bounded by default; with ``monitor_interval`` (seconds or a timedelta) it
    keeps watching the directory and reads files that appear later.
    """

    def __init__(self, path: str, fmt: str, monitor_interval: Any = None, **options: Any):
        if fmt not in FORMATS:
            raise ValueError(f"FileSource format must be one of {FORMATS}, got {fmt!r}")
        self.path = str(path)
        self.format = fmt
        self.monitor_interval = _seconds(monitor_interval)
        self.options = options
        self.default_name = f"FileSource({fmt})"

    @staticmethod
    def parquet(path: str, monitor_interval: Any = None) -> "FileSource":
        return FileSource(path, "parquet", monitor_interval)

    @staticmethod
    def csv(path: str, monitor_interval: Any = None, **options: Any) -> "FileSource":
        return FileSource(path, "csv", monitor_interval, **options)

    @staticmethod
    def jsonl(path: str, monitor_interval: Any = None) -> "FileSource":
        return FileSource(path, "jsonl", monitor_interval)

    def create_reader(self, ctx) -> "FileSourceReader":
        k, p = share(ctx)
        return FileSourceReader(self, k, p, batch_size_of(ctx))


class FileSourceReader(SourceReader):
    def __init__(self, source: FileSource, subtask: int, parallelism: int, batch_size: int):
        self.source = source
        self.subtask = subtask
        self.parallelism = parallelism
        self.batch_size = batch_size
        self.fs, self.root = fsspec.core.url_to_fs(source.path)
        if not self.fs.exists(self.root):
            raise FileNotFoundError(f"FileSource: no such file or directory: {source.path}")
        self.seen: set[str] = set()
        self.queue: list[list] = []  # [path, records already read], the current file first
        self.current: Iterator[pa.RecordBatch] | None = None
        self.next_listing = 0.0
        self._list(initial=True)

    def _files(self) -> list[str]:
        if self.fs.isfile(self.root):
            return [self.root]
        found = self.fs.find(self.root)
        return sorted(f for f in found if not any(_is_hidden(part) for part in posixpath.relpath(f, self.root).split("/")))

    def _list(self, initial: bool = False) -> None:
        files = [f for f in self._files() if f not in self.seen]
        for index, f in enumerate(files):
            self.seen.add(f)
            # The first listing is dealt round-robin (even shares); files found
            # later go by a stable hash of their name, which every subtask
            # computes alike without talking to the others.
            owner = index % self.parallelism if initial else zlib.crc32(f.encode()) % self.parallelism
            if owner == self.subtask:
                self.queue.append([f, 0])
        if self.source.monitor_interval:
            self.next_listing = time.monotonic() + self.source.monitor_interval

    def _open(self, path: str, skip: int) -> Iterator[pa.RecordBatch]:
        fmt = self.source.format
        f = self.fs.open(path, "rb")
        try:
            if fmt == "parquet":
                batches = pq.ParquetFile(f).iter_batches(batch_size=self.batch_size)
            elif fmt == "csv":
                batches = iter(pa_csv.open_csv(f, **self.source.options))
            else:
                batches = iter(pa_json.read_json(f).to_batches(max_chunksize=self.batch_size))
            for batch in batches:
                if skip >= batch.num_rows:  # read before the checkpoint this reader restored
                    skip -= batch.num_rows
                    continue
                if skip:
                    batch = batch.slice(skip)
                    skip = 0
                yield batch
        finally:
            f.close()

    def poll(self):
        while True:
            if self.current is not None:
                entry = self.queue[0]
                try:
                    batch = next(self.current)
                except StopIteration:
                    self.current = None
                    self.queue.pop(0)
                    continue
                except (pa.ArrowException, OSError, ValueError) as e:
                    raise FileFormatError(f"cannot read {self.source.format} file {entry[0]}: {e}") from e
                if batch.num_rows:
                    entry[1] += batch.num_rows
                    return batch
                continue
            if self.queue:
                path, skip = self.queue[0]
                self.current = self._open(path, skip)
                continue
            if self.source.monitor_interval is None:
                return END
            if time.monotonic() >= self.next_listing:
                self._list()
                if self.queue:
                    continue
            return None

    def wakeup_at(self, now: float) -> float:
        return max(now, self.next_listing)

    def snapshot_state(self) -> list:
        # One element per subtask: the files it still has to read (with positions) and
        # every file it has listed, so a restored reader neither rereads nor skips.
        return [{"queue": [list(e) for e in self.queue], "seen": sorted(self.seen)}]

    def restore_state(self, splits: list) -> None:
        self.current = None
        self.queue = [[str(p), int(n)] for s in splits for p, n in s["queue"]]
        self.seen = {str(p) for s in splits for p in s["seen"]} | {p for p, _ in self.queue}


class FileSink(Sink):
    """Part files ``part-<subtask>-<n>.<ext>`` in a directory; exactly-once with checkpointing.

    A part file is written hidden (``.part-...inprogress``). Two-phase commit:
    at a checkpoint barrier (or when the file rolls, or at the end of input) it
    is closed, still hidden (pre-commit); when the checkpoint is complete it is
    renamed to its final name (commit). After a failure the files the restored
    checkpoint pre-committed are committed, every other hidden file of the
    subtask is deleted, and numbering continues from the checkpoint.
    """

    exactly_once = True

    def __init__(self, path: str, fmt: str, max_rows_per_file: int | None = None):
        if fmt not in ("parquet", "jsonl"):
            raise ValueError(f"FileSink format must be parquet or jsonl, got {fmt!r}")
        if max_rows_per_file is not None and max_rows_per_file < 1:
            raise ValueError("max_rows_per_file must be >= 1")
        self.path = str(path)
        self.format = fmt
        self.max_rows_per_file = max_rows_per_file
        self.default_name = f"FileSink({fmt})"

    @staticmethod
    def parquet(path: str, max_rows_per_file: int | None = None) -> "FileSink":
        return FileSink(path, "parquet", max_rows_per_file)

    @staticmethod
    def jsonl(path: str, max_rows_per_file: int | None = None) -> "FileSink":
        return FileSink(path, "jsonl", max_rows_per_file)

    def create_writer(self, ctx) -> "FileSinkWriter":
        # Without checkpoints nothing would ever complete a two-phase commit: files are published when they roll.
        two_phase = ctx.is_checkpointing_enabled()
        return FileSinkWriter(self, ctx.get_index_of_this_subtask(), two_phase)

    def commit(self, committables: list) -> None:
        fs, _ = fsspec.core.url_to_fs(self.path)
        for c in committables:
            tmp, final = c["pending"], c["final"]
            if fs.exists(tmp):
                fs.mv(tmp, final)
            elif not fs.exists(final):
                raise FileFormatError(
                    f"FileSink({self.path}): cannot commit {final}: its pending file {tmp} is gone "
                    "(deleted by someone else?); the records in it are lost"
                )


class FileSinkWriter(SinkWriter):
    def __init__(self, sink: FileSink, subtask: int, two_phase: bool = False):
        self.sink = sink
        self.two_phase = two_phase
        self.subtask = subtask
        self.fs, self.root = fsspec.core.url_to_fs(sink.path)
        self.fs.makedirs(self.root, exist_ok=True)
        self.counter = 0
        self.part: _PartFile | None = None
        self.prepared: list[dict] = []  # closed part files (rolled) waiting for the next prepare_commit

    def _next_name(self) -> str:
        ext = self.sink.format
        while True:
            name = f"part-{self.subtask}-{self.counter}.{ext}"
            self.counter += 1
            if not self.fs.exists(posixpath.join(self.root, name)):
                return name

    def write(self, batch) -> None:
        if self.part is None:
            self.part = _PartFile(self.fs, self.root, self._next_name(), self.sink.format)
        self.part.write(batch)
        limit = self.sink.max_rows_per_file
        if limit is not None and self.part.rows >= limit:
            self._roll()

    def _roll(self) -> None:
        if self.part is not None:
            committable = self.part.close()
            self.part = None
            if self.two_phase:
                self.prepared.append(committable)
            else:
                self.sink.commit([committable])

    def prepare_commit(self) -> list:
        self._roll()
        out, self.prepared = self.prepared, []
        return out

    def snapshot_state(self) -> list:
        return [{"counter": self.counter}]

    def restore_state(self, state: list) -> None:
        if state:
            self.counter = max(int(s.get("counter", 0)) for s in state)
        # Drop what the failed attempt wrote after the checkpoint: every hidden part file of this subtask.
        prefix = f".part-{self.subtask}-"
        try:
            names = self.fs.ls(self.root, detail=False)
        except FileNotFoundError:
            return
        for path in names:
            if posixpath.basename(path).startswith(prefix):
                self.fs.rm(path)

    def close(self) -> None:
        if self.part is not None:
            self.part.abort()
            self.part = None


class _PartFile:
    def __init__(self, fs: Any, root: str, name: str, fmt: str):
        self.fs = fs
        self.final = posixpath.join(root, name)
        self.tmp = posixpath.join(root, f".{name}.inprogress")
        self.format = fmt
        self.rows = 0
        self.file = fs.open(self.tmp, "wb")
        self.writer: pq.ParquetWriter | None = None

    def write(self, batch) -> None:
        if self.format == "jsonl":
            rows = to_rows(batch)
            self.file.write("".join(json.dumps(r, default=str) + "\n" for r in rows).encode())
            self.rows += len(rows)
            return
        if not isinstance(batch, pa.RecordBatch):
            converted = try_columnar(batch)
            try:
                batch = converted if converted is not None else pa.RecordBatch.from_pylist(batch)
            except (pa.ArrowException, TypeError) as e:
                raise FileFormatError(f"FileSink({self.final}): records cannot be written as parquet: {e}") from e
        if self.writer is None:
            self.writer = pq.ParquetWriter(self.file, batch.schema)
        elif not batch.schema.equals(self.writer.schema):
            try:
                batch = batch.cast(self.writer.schema)
            except (pa.ArrowException, ValueError) as e:
                raise FileFormatError(
                    f"FileSink({self.final}): records changed schema from {self.writer.schema} to {batch.schema}"
                ) from e
        self.writer.write_batch(batch)
        self.rows += batch.num_rows

    def close(self) -> dict:
        """Pre-commit: complete the file, still hidden; the committable says how to publish it."""
        if self.writer is not None:
            self.writer.close()
        self.file.close()
        return {"pending": self.tmp, "final": self.final}

    def abort(self) -> None:
        try:
            if self.writer is not None:
                self.writer.close()
            self.file.close()
        finally:
            if self.fs.exists(self.tmp):
                self.fs.rm(self.tmp)
