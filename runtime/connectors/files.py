"""FileSource and FileSink over a directory, through fsspec (local paths, file://, memory://, s3://...).

Files whose names start with ``.`` or ``_`` are hidden, as in Flink and Hadoop:
the source skips them, and the sink writes its in-progress files that way, so a
source reading a sink's directory never sees a partly written file.
"""

from __future__ import annotations

import datetime as _dt
import io
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

from ..batch import num_rows, to_rows, try_columnar
from .base import END, Sink, SinkWriter, Source, SourceReader, batch_size_of, share

FORMATS = ("parquet", "csv", "jsonl", "text")  # text: lines as strings (StreamFormat.text_line_format)


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

    def __init__(self, path: str, fmt: str, monitor_interval: Any = None, *, paths: list[str] | None = None,
                 charset: str = "UTF-8", **options: Any):
        if fmt not in FORMATS:
            raise ValueError(f"FileSource format must be one of {FORMATS}, got {fmt!r}")
        self.path = str(path)
        self.paths = [str(p) for p in paths] if paths else [self.path]  # files or directories, read alike
        self.format = fmt
        self.monitor_interval = _seconds(monitor_interval)
        self.charset = charset
        self.options = options
        self.default_name = f"FileSource({fmt})"

    @staticmethod
    def for_record_stream_format(stream_format: Any, *paths: str) -> Any:
        """PyFlink's way: ``FileSource.for_record_stream_format(StreamFormat.text_line_format(), path).build()``."""
        from .file_system import FileSourceBuilder

        return FileSourceBuilder(stream_format, paths)

    @staticmethod
    def for_bulk_file_format(bulk_format: Any, *paths: str) -> Any:
        from ..api.unsupported import PyFlinkNotSupported

        raise PyFlinkNotSupported("FileSource.for_bulk_file_format()",
                                  "Java bulk formats do not exist here; use FileSource.parquet(path), .csv(path) or "
                                  ".jsonl(path), or for_record_stream_format(StreamFormat.text_line_format(), path)")

    @staticmethod
    def parquet(path: str, monitor_interval: Any = None) -> "FileSource":
        return FileSource(path, "parquet", monitor_interval)

    @staticmethod
    def csv(path: str, monitor_interval: Any = None, **options: Any) -> "FileSource":
        return FileSource(path, "csv", monitor_interval, **options)

    @staticmethod
    def jsonl(path: str, monitor_interval: Any = None) -> "FileSource":
        return FileSource(path, "jsonl", monitor_interval)

    def is_bounded(self) -> bool:
        return self.monitor_interval is None

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
        self.roots = [self.root] + [fsspec.core.url_to_fs(p)[1] for p in source.paths[1:]]
        for url, root in zip(source.paths, self.roots):
            if not self.fs.exists(root):
                raise FileNotFoundError(f"FileSource: no such file or directory: {url}")
        self.seen: set[str] = set()
        self.queue: list[list] = []  # [path, records already read], the current file first
        self.current: Iterator[pa.RecordBatch] | None = None
        self.next_listing = 0.0
        self._list(initial=True)

    def _files(self) -> list[str]:
        files: set[str] = set()
        for root in self.roots:
            if self.fs.isfile(root):
                files.add(root)
                continue
            files.update(f for f in self.fs.find(root)
                         if not any(_is_hidden(part) for part in posixpath.relpath(f, root).split("/")))
        return sorted(files)

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

    def _open(self, path: str, skip: int) -> Iterator[Any]:
        fmt = self.source.format
        if fmt == "text":
            yield from self._lines(path, skip)
            return
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

    def _lines(self, path: str, skip: int) -> Iterator[list[str]]:
        """Batches of the file's lines (compressed by extension: .gz, .bz2, .xz...); ``skip`` lines
        were read before the restored checkpoint."""
        with self.fs.open(path, "rb", compression="infer") as raw:
            text = io.TextIOWrapper(raw, encoding=self.source.charset, newline=None)
            batch: list[str] = []
            for line in text:
                if skip:
                    skip -= 1
                    continue
                batch.append(line[:-1] if line.endswith("\n") else line)
                if len(batch) >= self.batch_size:
                    yield batch
                    batch = []
            if batch:
                yield batch

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
                except (pa.ArrowException, OSError, ValueError, EOFError) as e:  # UnicodeDecodeError is a ValueError
                    raise FileFormatError(f"cannot read {self.source.format} file {entry[0]}: {e}") from e
                n = num_rows(batch)
                if n:
                    entry[1] += n
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

    ``FileSink.for_row_format(path, encoder)`` (PyFlink's builder, see
    ``file_system.py``) writes encoded rows, names parts ``<prefix>-<subtask>-<n><suffix>``,
    puts them in bucket directories and rolls them by its rolling policy.
    """

    exactly_once = True

    def __init__(self, path: str, fmt: str, max_rows_per_file: int | None = None, *, encoder: Any = None,
                 part_prefix: str = "part", part_suffix: str | None = None, rolling_policy: Any = None,
                 bucket_assigner: Any = None, check_interval_ms: int = 60_000):
        if fmt not in ("parquet", "jsonl", "row"):
            raise ValueError(f"FileSink format must be parquet or jsonl, got {fmt!r}")
        if fmt == "row" and encoder is None:
            raise ValueError("a row-format FileSink needs an encoder: FileSink.for_row_format(path, Encoder...)")
        if max_rows_per_file is not None and max_rows_per_file < 1:
            raise ValueError("max_rows_per_file must be >= 1")
        self.path = str(path)
        self.format = fmt
        self.max_rows_per_file = max_rows_per_file
        self.encoder = encoder
        self.part_prefix = part_prefix
        self.part_suffix = part_suffix if part_suffix is not None else ("" if fmt == "row" else f".{fmt}")
        self.rolling_policy = rolling_policy
        self.bucket_assigner = bucket_assigner
        self.check_interval_ms = check_interval_ms
        self.default_name = f"FileSink({fmt})"

    @staticmethod
    def parquet(path: str, max_rows_per_file: int | None = None) -> "FileSink":
        return FileSink(path, "parquet", max_rows_per_file)

    @staticmethod
    def jsonl(path: str, max_rows_per_file: int | None = None) -> "FileSink":
        return FileSink(path, "jsonl", max_rows_per_file)

    @staticmethod
    def for_row_format(base_path: str, encoder: Any) -> Any:
        """PyFlink's way: ``FileSink.for_row_format(path, Encoder.simple_string_encoder()) ... .build()``."""
        from .file_system import RowFormatBuilder

        return RowFormatBuilder(base_path, encoder)

    @staticmethod
    def for_bulk_format(base_path: str, writer_factory: Any) -> Any:
        from ..api.unsupported import PyFlinkNotSupported

        raise PyFlinkNotSupported("FileSink.for_bulk_format()",
                                  "Java bulk writers do not exist here; use FileSink.parquet(path) (or .jsonl(path)) "
                                  "with sink_to")

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
        self.parts: dict[str, _PartFile] = {}  # bucket (directory under the root; "" the root) -> open part file
        self.prepared: list[dict] = []  # closed part files (rolled) waiting for the next prepare_commit
        self.next_check = 0.0  # when open part files are next checked against the rolling policy's time limits

    @property
    def part(self) -> "_PartFile | None":
        """The open part file of the base path (sinks without buckets have only that one)."""
        return self.parts.get("")

    def _next_name(self, directory: str) -> str:
        prefix, suffix = self.sink.part_prefix, self.sink.part_suffix
        while True:
            name = f"{prefix}-{self.subtask}-{self.counter}{suffix}"
            self.counter += 1
            if not self.fs.exists(posixpath.join(directory, name)):
                return name

    def write(self, batch) -> None:
        now = time.time()
        assigner = self.sink.bucket_assigner
        # One bucket per batch: a batch is written within milliseconds, so the time of its first record decides.
        bucket = assigner.bucket_id(now) if assigner is not None else ""
        part = self.parts.get(bucket)
        if part is None:
            directory = posixpath.join(self.root, bucket) if bucket else self.root
            if bucket:
                self.fs.makedirs(directory, exist_ok=True)
            part = self.parts[bucket] = _PartFile(self.fs, directory, self._next_name(directory), self.sink.format,
                                                  self.sink.encoder, now)
        part.write(batch, now)
        limit = self.sink.max_rows_per_file
        policy = self.sink.rolling_policy
        if limit is not None and part.rows >= limit or policy is not None and policy.should_roll_on_event(part.size):
            self._roll(bucket)
        if policy is not None and now >= self.next_check:
            self.next_check = now + self.sink.check_interval_ms / 1000.0
            for b, p in list(self.parts.items()):
                if policy.should_roll_on_processing_time(now * 1000.0, p.created * 1000.0, p.last_write * 1000.0):
                    self._roll(b)

    def _roll(self, bucket: str = "") -> None:
        part = self.parts.pop(bucket, None)
        if part is not None:
            committable = part.close()
            if self.two_phase:
                self.prepared.append(committable)
            else:
                self.sink.commit([committable])

    def prepare_commit(self) -> list:
        # Every open part file closes here, whatever the rolling policy: an in-progress file cannot be
        # resumed after a failure on every filesystem (S3 has no truncate), so what the checkpoint covers
        # must be in closed (pending) files.
        for bucket in list(self.parts):
            self._roll(bucket)
        out, self.prepared = self.prepared, []
        return out

    def snapshot_state(self) -> list:
        return [{"counter": self.counter}]

    def restore_state(self, state: list) -> None:
        if state:
            self.counter = max(int(s.get("counter", 0)) for s in state)
        # Drop what the failed attempt wrote after the checkpoint: every hidden part file of this subtask
        # (in the root and in every bucket directory).
        prefix = f".{self.sink.part_prefix}-{self.subtask}-"
        try:
            names = self.fs.find(self.root)
        except FileNotFoundError:
            return
        for path in names:
            if posixpath.basename(path).startswith(prefix):
                self.fs.rm(path)

    def close(self) -> None:
        for part in self.parts.values():
            part.abort()
        self.parts = {}


class _PartFile:
    def __init__(self, fs: Any, root: str, name: str, fmt: str, encoder: Any = None, now: float | None = None):
        self.fs = fs
        self.final = posixpath.join(root, name)
        self.tmp = posixpath.join(root, f".{name}.inprogress")
        self.format = fmt
        self.encoder = encoder
        self.rows = 0
        self.size = 0  # bytes written (row formats; what the rolling policy's part size counts)
        self.created = self.last_write = now if now is not None else time.time()
        self.file = fs.open(self.tmp, "wb")
        self.writer: pq.ParquetWriter | None = None

    def write(self, batch, now: float | None = None) -> None:
        self.last_write = now if now is not None else time.time()
        if self.format in ("jsonl", "row"):
            rows = to_rows(batch)
            data = (self.encoder.encode(rows) if self.format == "row"
                    else "".join(json.dumps(r, default=str) + "\n" for r in rows).encode())
            self.file.write(data)
            self.rows += len(rows)
            self.size += len(data)
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
