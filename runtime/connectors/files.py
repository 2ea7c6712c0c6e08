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
        self.queue: list[str] = []
        self.current: Iterator[pa.RecordBatch] | None = None
        self.current_path: str | None = None
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
                self.queue.append(f)
        if self.source.monitor_interval:
            self.next_listing = time.monotonic() + self.source.monitor_interval

    def _open(self, path: str) -> Iterator[pa.RecordBatch]:
        fmt = self.source.format
        f = self.fs.open(path, "rb")
        try:
            if fmt == "parquet":
                yield from pq.ParquetFile(f).iter_batches(batch_size=self.batch_size)
            elif fmt == "csv":
                reader = pa_csv.open_csv(f, **self.source.options)
                for batch in reader:
                    yield batch
            else:
                table = pa_json.read_json(f)
                yield from table.to_batches(max_chunksize=self.batch_size)
        finally:
            f.close()

    def poll(self):
        while True:
            if self.current is not None:
                try:
                    batch = next(self.current)
                except StopIteration:
                    self.current = None
                    continue
                except (pa.ArrowException, OSError, ValueError) as e:
                    raise FileFormatError(f"cannot read {self.source.format} file {self.current_path}: {e}") from e
                if batch.num_rows:
                    return batch
                continue
            if self.queue:
                self.current_path = self.queue.pop(0)
                self.current = self._open(self.current_path)
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


class FileSink(Sink):
    """Part files ``part-<subtask>-<n>.<ext>`` in a directory.

    A part file is written hidden (``.part-...inprogress``) and renamed to its
    final name when it is complete (rolled or at the end of input), so readers
    never see half a file.
    """

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
        return FileSinkWriter(self, ctx.get_index_of_this_subtask())


class FileSinkWriter(SinkWriter):
    def __init__(self, sink: FileSink, subtask: int):
        self.sink = sink
        self.subtask = subtask
        self.fs, self.root = fsspec.core.url_to_fs(sink.path)
        self.fs.makedirs(self.root, exist_ok=True)
        self.counter = 0
        self.part: _PartFile | None = None

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
            self.part.commit()
            self.part = None

    def finish(self) -> None:
        self._roll()

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

    def commit(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.file.close()
        self.fs.mv(self.tmp, self.final)

    def abort(self) -> None:
        try:
            if self.writer is not None:
                self.writer.close()
            self.file.close()
        finally:
            if self.fs.exists(self.tmp):
                self.fs.rm(self.tmp)
