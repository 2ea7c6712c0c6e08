"""FileSource and FileSink over a directory, through fsspec (local paths, file://, memory://, s3://...).

Files whose names start with ``.`` or ``_`` are hidden, as in Flink and Hadoop:
the source skips them, and the sink writes its in-progress files that way, so a
source reading a sink's directory never sees a partly written file.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import io
import os
import posixpath
import queue
import re
import threading
import time
import uuid
from concurrent.futures import Future
from typing import Any, Callable, Iterator

import fsspec
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.json as pa_json
import pyarrow.parquet as pq

from ..batch import num_rows, to_array, to_rows
from ..checkpoint.storage import is_local, sync_directory
from .base import END, Sink, SinkWriter, Source, SourceReader, batch_size_of, share
from .json_text import json_bytes, json_objects, row_encoder

FORMATS = ("parquet", "csv", "jsonl", "text")  # text: lines as strings (StreamFormat.text_line_format)
# A Parquet part file's row groups, as pq.write_table makes them: rows are buffered (as Arrow) until
# one is full or the part closes. Batches of a few thousand rows as row groups of their own make files
# that are slow to write (every row group restarts dictionary encoding) and to read.
ROW_GROUP_ROWS = 1 << 20
ROW_GROUP_BYTES = 64 << 20


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


def _owner(path: str, parallelism: int) -> int:
    return int.from_bytes(hashlib.blake2b(path.encode(), digest_size=8).digest(), "big") % parallelism


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
        from .file_formats import FileSourceBuilder

        return FileSourceBuilder(stream_format, paths, FileSource)

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
    union_state = True  # see restore_state

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
            # computes alike without talking to the others. Not crc32: it is linear,
            # and names that differ in one character (part-1, part-2...) share its low
            # bits, so every new file went to the same subtask.
            owner = index % self.parallelism if initial else _owner(f, self.parallelism)
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
                # Without pre-buffering: pyarrow's read the whole file through ``f`` at the open (27 MB
                # a W1 file), for no gain on a file read front to back; each row group's column
                # chunks are read as its batches are.
                batches = pq.ParquetFile(f, pre_buffer=False).iter_batches(batch_size=self.batch_size)
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
        # One element per subtask: the files it still has to read (with positions), every file it
        # has listed, and who it is, so a restored reader neither rereads nor skips.
        return [{"queue": [list(e) for e in self.queue], "seen": sorted(self.seen),
                 "subtask": self.subtask, "parallelism": self.parallelism}]

    def restore_state(self, splits: list) -> None:
        """Union list state: every restored reader gets every old reader's element. Each takes
        all the files any of them listed as seen (a reader that got only its own share, or
        none after a scale-up, would list the old files again and reread them) and its share
        of the queued ones: at the same parallelism its own queue, else the old queues in
        order dealt round-robin, which every reader computes alike."""
        self.current = None
        self.seen = {str(p) for s in splits for p in s["seen"]}
        # Elements without their subtask were taken as split list state (checkpoints of 29 Nov 2026
        # and older): they are this reader's deal already.
        entries = [e for s in splits if "parallelism" not in s for e in s["queue"]]
        tagged = sorted((s for s in splits if "parallelism" in s), key=lambda s: int(s["subtask"]))
        if all(int(s["parallelism"]) == self.parallelism for s in tagged):
            entries += [e for s in tagged if int(s["subtask"]) == self.subtask for e in s["queue"]]
        else:
            entries += [e for s in tagged for e in s["queue"]][self.subtask::self.parallelism]
        self.queue = [[str(p), int(n)] for p, n in entries]
        self.seen |= {p for p, _ in self.queue}


class FileSink(Sink):
    """Part files ``part-<lineage>-<subtask>-<n>.<ext>`` in a directory; exactly-once with checkpointing.

    ``<lineage>`` is the job's id (Flink's FileSink puts a uuid of its own there): it stays the same
    across the failovers of a job and a resume that claims its retained checkpoint, and is new for a
    fresh run or a restore from a savepoint. Two jobs writing one directory so never write, commit or
    clean up each other's files.

    A part file is written hidden (``.part-...inprogress``). Two-phase commit:
    at a checkpoint barrier (or when the file rolls, or at the end of input) it
    is closed, still hidden (pre-commit); when the checkpoint is complete it is
    renamed to its final name (commit). After a failure the files the restored
    checkpoint pre-committed are committed, the hidden files this job wrote after
    it are deleted, and numbering continues from the checkpoint (at another
    parallelism: above every old subtask's number).

    ``FileSink.for_row_format(path, encoder)`` (PyFlink's builder, see
    ``file_system.py``) writes encoded rows, names parts ``<prefix>-<lineage>-<subtask>-<n><suffix>``,
    puts them in bucket directories and rolls them by its rolling policy.
    """

    exactly_once = True
    commit_in_background = True  # renames are I/O (on S3 a copy each): off the task thread

    def __init__(self, path: str, fmt: str, max_rows_per_file: int | None = None, *, encoder: Any = None,
                 part_prefix: str = "part", part_suffix: str | None = None, rolling_policy: Any = None,
                 bucket_assigner: Any = None, check_interval_ms: int = 60_000,
                 row_group_size: int = ROW_GROUP_ROWS, parquet_options: dict | None = None):
        if fmt not in ("parquet", "jsonl", "row"):
            raise ValueError(f"FileSink format must be parquet or jsonl, got {fmt!r}")
        if fmt == "row" and encoder is None:
            raise ValueError("a row-format FileSink needs an encoder: FileSink.for_row_format(path, Encoder...)")
        if max_rows_per_file is not None and max_rows_per_file < 1:
            raise ValueError("max_rows_per_file must be >= 1")
        if not isinstance(row_group_size, int) or isinstance(row_group_size, bool) or row_group_size < 1:
            raise ValueError(f"row_group_size must be a positive int, got {row_group_size!r}")
        self.parquet_options = dict(parquet_options or {})
        if self.parquet_options:
            try:  # an unknown option or value fails where the job is built, not in every task
                pq.ParquetWriter(pa.BufferOutputStream(), pa.schema([("x", pa.int64())]), **self.parquet_options).close()
            except (TypeError, ValueError, pa.ArrowException) as e:
                raise ValueError(f"FileSink.parquet: bad writer option in {self.parquet_options}: {e}") from e
        self.row_group_size = row_group_size
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
    def parquet(path: str, max_rows_per_file: int | None = None, *, row_group_size: int = ROW_GROUP_ROWS,
                **writer_options: Any) -> "FileSink":
        """``writer_options`` go to ``pyarrow.parquet.ParquetWriter`` (``compression``, ``use_dictionary``,
        ...); its defaults otherwise. A row group holds at most ``row_group_size`` rows (and about 64 MiB)."""
        return FileSink(path, "parquet", max_rows_per_file, row_group_size=row_group_size,
                        parquet_options=writer_options)

    @staticmethod
    def jsonl(path: str, max_rows_per_file: int | None = None) -> "FileSink":
        return FileSink(path, "jsonl", max_rows_per_file)

    @staticmethod
    def for_row_format(base_path: str, encoder: Any) -> Any:
        """PyFlink's way: ``FileSink.for_row_format(path, Encoder.simple_string_encoder()) ... .build()``."""
        from .file_formats import RowFormatBuilder

        return RowFormatBuilder(base_path, encoder, FileSink)

    @staticmethod
    def for_bulk_format(base_path: str, writer_factory: Any) -> Any:
        from ..api.unsupported import PyFlinkNotSupported

        raise PyFlinkNotSupported("FileSink.for_bulk_format()",
                                  "Java bulk writers do not exist here; use FileSink.parquet(path) (or .jsonl(path)) "
                                  "with sink_to")

    def create_writer(self, ctx) -> "FileSinkWriter":
        # Without checkpoints nothing would ever complete a two-phase commit: files are published when they roll.
        two_phase = ctx.is_checkpointing_enabled()
        # The sink operator's list of waits for work a pre-commit left running (see FileSinkWriter._roll);
        # a writer made elsewhere has none and completes its part files before prepare_commit returns.
        background = getattr(ctx, "_sink_background", None) if two_phase else None
        # The job's id (see the class): a writer made outside a job gets a lineage of its own.
        return FileSinkWriter(self, ctx.get_index_of_this_subtask(), two_phase, background,
                              ctx.get_number_of_parallel_subtasks(), getattr(ctx, "_job_id", None))

    def commit(self, committables: list) -> None:
        fs, _ = fsspec.core.url_to_fs(self.path)
        renamed: set[str] = set()
        for c in committables:
            tmp, final = c["pending"], c["final"]
            try:
                fs.mv(tmp, final)
                renamed.add(posixpath.dirname(final))
                continue
            except FileNotFoundError:
                pass
            if not fs.exists(final):  # else committed before (commits repeat after a restore)
                raise FileFormatError(
                    f"FileSink({self.path}): cannot commit {final}: its pending file {tmp} is gone "
                    "(deleted by someone else?); the records in it are lost"
                )
        if is_local(fs):  # the new names durable: a later checkpoint no longer holds these committables
            for directory in sorted(renamed):
                sync_directory(directory)


class _PartCloser:
    """Completes pre-committed Parquet part files in a thread of their own, one at a time.

    Closing a Parquet part encodes the row group it buffered (up to a second of output at 1 s
    checkpoints): done at the barrier on the task thread, it stalled the slot's loop, the
    source in it, and through backpressure the other slots (bench/w1.py). pyarrow encodes
    without the GIL, so here it overlaps the records after the barrier. The checkpoint is
    acknowledged only once its files are complete: the sink operator's snapshot waits for them
    in the snapshot writer's thread (``OperatorSnapshot.waits``).
    """

    def __init__(self, name: str):
        self._jobs: queue.SimpleQueue[tuple[Future, Callable[[], Any]] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=f"part-closer-{name}", daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[[], Any]) -> Future:
        future: Future = Future()
        self._jobs.put((future, fn))
        return future

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            future, fn = job
            try:
                future.set_result(fn())
            except BaseException as e:  # noqa: BLE001 - raised where the task thread or the snapshot waits
                future.set_exception(e)

    def close(self) -> None:
        self._jobs.put(None)


class FileSinkWriter(SinkWriter):
    def __init__(self, sink: FileSink, subtask: int, two_phase: bool = False, background: list | None = None,
                 parallelism: int = 1, lineage: str | None = None):
        self.sink = sink
        # In every part file's name: unique to the job (its id), so no other job takes the same names.
        self.lineage = lineage or uuid.uuid4().hex
        self.parallelism = parallelism
        self.two_phase = two_phase
        self.background = background  # where pre-commits put their waits (the sink operator's), or None
        self._closer: _PartCloser | None = None
        self._closing: list[tuple[str, Future]] = []  # (part file, its close) still running or unchecked
        self.subtask = subtask
        self.fs, self.root = fsspec.core.url_to_fs(sink.path)
        self.fs.makedirs(self.root, exist_ok=True)
        self.counter = 0
        self.parts: dict[str, _PartFile] = {}  # bucket (directory under the root; "" the root) -> open part file
        self.prepared: list[dict] = []  # closed part files (rolled) waiting for the next prepare_commit
        self.next_check = 0.0  # when open part files are next checked against the rolling policy's time limits
        # The schema of the last Parquet part: the next part converts Python rows with it (no inference)
        # and so keeps the same column types.
        self.schema: pa.Schema | None = None

    @property
    def part(self) -> "_PartFile | None":
        """The open part file of the base path (sinks without buckets have only that one)."""
        return self.parts.get("")

    def _next_name(self, directory: str) -> str:
        prefix, suffix = self.sink.part_prefix, self.sink.part_suffix
        while True:
            name = f"{prefix}-{self.lineage}-{self.subtask}-{self.counter}{suffix}"
            self.counter += 1
            if not self.fs.exists(posixpath.join(directory, name)):
                return name

    def write(self, batch) -> None:
        if self._closing:
            self._check_closing()
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
                                                  self.sink.encoder, now, self.sink, self.schema)
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
        if part is None:
            return
        if part.schema is not None:
            self.schema = part.schema
        if self.two_phase and self.background is not None and part.format == "parquet":
            # Pre-commit in the background (see _PartCloser); the checkpoint's acknowledgement waits for it.
            if self._closer is None:
                self._closer = _PartCloser(f"{self.sink.part_prefix}-{self.subtask}")
            future = self._closer.submit(part.close)
            self._closing.append((part.tmp, future))
            self.background.append(lambda: self._wait_closed(part.tmp, future))
            self.prepared.append(part.committable())
            return
        committable = part.close()
        if self.two_phase:
            self.prepared.append(committable)
        else:
            self.sink.commit([committable])

    def _wait_closed(self, path: str, future: Future) -> None:
        try:
            future.result()
        except BaseException as e:  # noqa: BLE001 - named: the checkpoint holding it is declined
            raise FileFormatError(f"FileSink({self.sink.path}): could not complete part file {path}: "
                                  f"{type(e).__name__}: {e}") from e

    def _check_closing(self, wait: bool = False) -> None:
        """On the task thread: a part file that could not be completed fails the task (its committable
        is in a checkpoint's pending state; committing the broken file would publish it). ``wait``:
        until every close has finished."""
        still = []
        for path, future in self._closing:
            if wait or future.done():
                self._wait_closed(path, future)
            else:
                still.append((path, future))
        self._closing = still

    def prepare_commit(self) -> list:
        # Every open part file closes here, whatever the rolling policy: an in-progress file cannot be
        # resumed after a failure on every filesystem (S3 has no truncate), so what the checkpoint covers
        # must be in closed (pending) files.
        if self._closing:
            self._check_closing()
        for bucket in list(self.parts):
            self._roll(bucket)
        out, self.prepared = self.prepared, []
        return out

    def snapshot_state(self) -> list:
        return [{"counter": self.counter, "subtask": self.subtask, "lineage": self.lineage}]

    def restore_state(self, state: list) -> None:
        if state:
            self.counter = max(int(s.get("counter", 0)) for s in state)
        # Drop what the failed attempt wrote after the checkpoint: the hidden part files numbered from the
        # counter its subtask had at the checkpoint on (in the root and in every bucket directory). The ones
        # below it are the checkpoint's pre-committed files: after a restore at another parallelism another
        # subtask may commit them (pending committables are redistributed), so they are kept. This subtask
        # also cleans for the old subtasks the new parallelism no longer has (index mod parallelism).
        # Only this job's own files: state of another lineage (a savepoint's: the job that took it may still
        # be running, writing into the same directory) names files that are not this job's to delete.
        # State without a lineage (taken before part names had one) cleans the names of then, part-<j>-<n>.
        state = state or []
        legacy = [s for s in state if "lineage" not in s]
        own = [s for s in state if s.get("lineage") == self.lineage]
        cleaned = [(f".{self.sink.part_prefix}-{self.lineage}-", self._cleaned_subtasks(own))]
        if legacy:
            cleaned.append((f".{self.sink.part_prefix}-", self._cleaned_subtasks(legacy)))
        try:
            names = self.fs.find(self.root)
        except FileNotFoundError:
            return
        for path in names:
            base = posixpath.basename(path)
            for stem, counters in cleaned:
                if self._after_checkpoint(base, stem, counters):
                    self.fs.rm(path)
                    break

    def _cleaned_subtasks(self, state: list) -> dict[int, int | None]:
        """Old subtask -> its counter at the checkpoint, for the ones this subtask cleans. None: all of its
        files (no counter in ``state``: taken before counters were recorded, or by a lower parallelism, or
        none of this lineage, a savepoint's: whatever this job wrote is newer than it)."""
        counters = {int(s["subtask"]): int(s.get("counter", 0)) for s in state if "subtask" in s}
        mine = {j for j in set(counters) | {self.subtask}
                if j == self.subtask or (j >= self.parallelism and j % self.parallelism == self.subtask)}
        return {j: counters.get(j) for j in mine}

    @staticmethod
    def _after_checkpoint(base: str, stem: str, counters: dict[int, int | None]) -> bool:
        """Whether hidden file ``base`` is ``<stem><j>-<n>...`` of a subtask j in ``counters``, numbered
        from its counter on."""
        if not base.startswith(stem):
            return False
        m = re.match(r"(\d+)-(\d+)", base[len(stem):])
        if m is None or int(m.group(1)) not in counters:
            return False
        first = counters[int(m.group(1))]
        return first is None or int(m.group(2)) >= first

    def close(self) -> None:
        try:
            if self._closing:
                self._check_closing(wait=True)
        finally:
            if self._closer is not None:
                self._closer.close()
            for part in self.parts.values():
                part.abort()
            self.parts = {}


class _PartFile:
    def __init__(self, fs: Any, root: str, name: str, fmt: str, encoder: Any = None, now: float | None = None,
                 sink: FileSink | None = None, schema: pa.Schema | None = None):
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
        self.hint = schema  # the previous part's schema, to convert Python rows without inference
        self.schema: pa.Schema | None = None  # this part's, set by its first batch
        self.row_group_size = sink.row_group_size if sink is not None else ROW_GROUP_ROWS
        self.options = sink.parquet_options if sink is not None else {}
        self.buffered: list[pa.RecordBatch] = []  # the row group being filled
        self.buffered_rows = 0
        self.buffered_bytes = 0

    def write(self, batch, now: float | None = None) -> None:
        self.last_write = now if now is not None else time.time()
        if self.format == "jsonl":
            data = _json_lines(batch)
            self.file.write(data)
            self.rows += num_rows(batch)
            self.size += len(data)
            return
        if self.format == "row":
            rows = to_rows(batch)
            data = self.encoder.encode(rows)
            self.file.write(data)
            self.rows += len(rows)
            self.size += len(data)
            return
        if not isinstance(batch, pa.RecordBatch):
            batch = self._from_rows(batch)
        if self.schema is None:
            self.schema = batch.schema
        elif not batch.schema.equals(self.schema):
            try:
                batch = batch.cast(self.schema)
            except (pa.ArrowException, ValueError) as e:
                raise FileFormatError(
                    f"FileSink({self.final}): records changed schema from {self.schema} to {batch.schema}"
                ) from e
        self.buffered.append(batch)
        self.buffered_rows += batch.num_rows
        self.buffered_bytes += batch.nbytes
        self.rows += batch.num_rows
        if self.buffered_rows >= self.row_group_size or self.buffered_bytes >= ROW_GROUP_BYTES:
            self._flush(everything=False)

    def _from_rows(self, rows: list) -> pa.RecordBatch:
        """Python rows as Arrow, a column at a time (one pyarrow call per column, not per row)."""
        schema = self.schema or self.hint
        try:
            return rows_to_batch(rows, schema)
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as e:
            if schema is not None and self.schema is None:
                try:  # a new part whose records no longer fit the previous part's types: its own schema
                    return rows_to_batch(rows, None)
                except (pa.ArrowException, TypeError, ValueError, OverflowError):
                    pass
            raise FileFormatError(f"FileSink({self.final}): records cannot be written as parquet: {e}") from e

    def _flush(self, everything: bool = True) -> None:
        """Write the buffered rows as row groups of ``row_group_size`` rows; all of them, or (while the
        part is open) only full ones, keeping the rest buffered."""
        if not self.buffered:
            return
        if self.writer is None:
            self.writer = pq.ParquetWriter(self.file, self.schema, **self.options)
        table = pa.Table.from_batches(self.buffered, self.schema)
        size = self.row_group_size
        keep = 0 if everything or self.buffered_bytes >= ROW_GROUP_BYTES else table.num_rows % size
        rest = table.slice(table.num_rows - keep)
        self.writer.write_table(table.slice(0, table.num_rows - keep), row_group_size=size)
        self.buffered = rest.to_batches() if keep else []
        self.buffered_rows = keep
        self.buffered_bytes = rest.nbytes if keep else 0

    def committable(self) -> dict:
        """How to publish the file once it is complete (``close``) and its checkpoint is."""
        return {"pending": self.tmp, "final": self.final}

    def close(self) -> dict:
        """Pre-commit: complete the file, still hidden; the committable says how to publish it. On a
        local file system the file and its name are made durable first, as Flink's FileSink does: the
        checkpoint that holds it completes only after this, and the records in it are never written
        again, so a machine that crashed after the checkpoint must still have them."""
        self._flush()
        if self.writer is not None:
            self.writer.close()
        if is_local(self.fs):
            self.file.flush()
            os.fsync(self.file.fileno())
            self.file.close()
            sync_directory(posixpath.dirname(self.tmp))
        else:
            self.file.close()
        return self.committable()

    def abort(self) -> None:
        self.buffered = []
        try:
            if self.writer is not None:
                self.writer.close()
            self.file.close()
        finally:
            if self.fs.exists(self.tmp):
                self.fs.rm(self.tmp)


def rows_to_batch(rows: list, schema: pa.Schema | None) -> pa.RecordBatch:
    """Dict rows as a RecordBatch with ``schema`` (None: the first row's fields, types inferred).

    A column at a time: one ``pa.array`` call per column, with its type when known,
    instead of Arrow's per-row conversion of dicts. A row lacking a field gives null
    there; a row with a field the others lack is refused (writing it would drop it).
    Rows that are not dicts go through ``pa.RecordBatch.from_pylist``.
    """
    if not rows or (schema is None and type(rows[0]) is not dict):
        return pa.RecordBatch.from_pylist(rows, schema=schema)
    names = schema.names if schema is not None else list(rows[0])
    columns = None
    try:  # the usual case: every row a dict with exactly these fields
        if sum(map(len, rows)) == len(names) * len(rows):
            columns = [[r[k] for r in rows] for k in names]
    except (KeyError, TypeError):  # a row without one of them; a row that is no mapping
        pass
    if columns is None:
        if set(map(type, rows)) != {dict}:
            return pa.RecordBatch.from_pylist(rows, schema=schema)
        known = set(names)
        for r in rows:
            extra = r.keys() - known
            if extra:
                raise ValueError(f"a record has field(s) {sorted(extra)} beyond {names}: {r!r}")
        columns = [[r.get(k) for r in rows] for k in names]
    arrays = []
    for i, (name, column) in enumerate(zip(names, columns)):
        try:
            arrays.append(to_array(column, None if schema is None else schema.field(i).type))
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as e:
            raise ValueError(f"field {name!r}: {e}") from e
    if schema is None:
        return pa.RecordBatch.from_arrays(arrays, names=names)
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


_JSON = row_encoder(default=str)  # what json.dumps(r, default=str) makes, without a new encoder per row


def _json_lines(batch) -> bytes:
    if isinstance(batch, pa.RecordBatch):
        lines = json_objects(batch, end="\n")  # what json.dumps writes, by Arrow's kernels
        if lines is not None:
            return json_bytes(lines)
    encode = _JSON
    return "".join([encode(r) + "\n" for r in to_rows(batch)]).encode()


