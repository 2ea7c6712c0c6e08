"""``SavepointWriter``: a new savepoint from DataFrames and an existing savepoint (Flink's State Processor API).

    writer = SavepointWriter.from_existing_savepoint(spark, "s3://bucket/savepoints/savepoint-1a2b3c-...")
    writer.remove_operator("count")
    writer.with_operator("count", OperatorTransformation.bootstrap_with(df).key_by("user").transform(Fn()))
    writer.write("s3://bucket/savepoints/migrated")

``write`` runs on Spark. Each bootstrapped operator is one Spark job: the DataFrame's rows get their
key's subtask (the key group by the runtime's own hash, as a running job routes the record), are
shuffled so that each Spark task holds exactly one subtask's key groups, and each task runs the
function over them in the runtime's state backend and writes that subtask's state file
(``bootstrap``); only the handles come back. The kept operators' files are copied by Spark tasks too
(``files``), checked as they are read. The driver writes ``_metadata`` last (put-if-absent), as a
job manager completes a savepoint; until then the directory holds no savepoint, and a failed write
removes what it wrote. The source savepoint is never written to.
"""

from __future__ import annotations

import json
import posixpath
from typing import Any, Iterator

import numpy as np
import pyarrow as pa

from streamjob.runtime.checkpoint.metadata import CheckpointMetadata
from streamjob.runtime.checkpoint.storage import METADATA, SavepointTarget, load_checkpoint, normalize_url
from streamjob.runtime.keygroups import DEFAULT_MAX_PARALLELISM, check_max_parallelism, subtasks_for_keys

from . import bootstrap, rewrite
from .transformation import BootstrapTransformation, uid_of

ROUTE = "__streamjob_subtask"  # the column a row's subtask travels in through the shuffle
DRIVER_COPY_BYTES = 64 << 20  # kept operators' files up to this much in all are copied by the driver itself


def backend_name(state_backend: Any) -> str:
    """``"hashmap"`` / ``"rocksdb"``, or the runtime's backend objects (``HashMapStateBackend()``,
    ``EmbeddedRocksDBStateBackend()``); None: hashmap."""
    if state_backend is None:
        return "hashmap"
    name = state_backend if isinstance(state_backend, str) else getattr(state_backend, "type_name", None)
    if name not in bootstrap.BACKENDS:
        raise ValueError(f"state backend must be one of {', '.join(bootstrap.BACKENDS)} (or HashMapStateBackend(), "
                         f"EmbeddedRocksDBStateBackend()), got {state_backend!r}")
    return name


class SavepointWriter:
    """``SavepointWriter.from_existing_savepoint(spark, path)`` or ``SavepointWriter.new_savepoint(spark,
    state_backend, max_parallelism)``; then ``with_operator``, ``remove_operator``,
    ``change_operator_identifier`` in any order, and ``write(path)``.

    ``state_backend`` is where bootstrap tasks keep state while they build it: ``hashmap`` (memory:
    fastest) or ``rocksdb`` (local disk: a subtask's share of the state larger than memory). The
    savepoint written is the same either way (canonical), and restores into either backend."""

    def __init__(self, spark: Any, source: str | None, source_root: str | None, metadata: CheckpointMetadata | None,
                 max_parallelism: int, state_backend: Any, storage_options: dict | None):
        self.spark = spark
        self.source = source
        self.source_root = source_root
        self.backend = backend_name(state_backend)
        self.storage_options = storage_options
        where = f"{metadata.kind} {source}" if metadata is not None else "the new savepoint"
        self.plan = rewrite.Rewrite(metadata, max_parallelism, where)
        self.transformations: dict[str, BootstrapTransformation] = {}

    @staticmethod
    def from_existing_savepoint(spark: Any, path: str, state_backend: Any = None,
                                storage_options: dict | None = None) -> "SavepointWriter":
        """Start from a savepoint (or a retained aligned checkpoint); it is only read, never changed."""
        url = normalize_url(path)
        root, meta = load_checkpoint(url, storage_options)
        rewrite.check_source(meta, f"{meta.kind} {url}")
        return SavepointWriter(spark, url, root, meta, meta.max_parallelism, state_backend, storage_options)

    @staticmethod
    def new_savepoint(spark: Any, state_backend: Any = None, max_parallelism: int = DEFAULT_MAX_PARALLELISM,
                      storage_options: dict | None = None) -> "SavepointWriter":
        """A savepoint with only the operators given. ``max_parallelism``: the key groups, which the job that
        restores it must have as its max parallelism (the runtime's default is 128)."""
        return SavepointWriter(spark, None, None, None, max_parallelism, state_backend, storage_options)

    # -- what the new savepoint holds ------------------------------------------------------------
    def with_operator(self, uid: Any, transformation: BootstrapTransformation) -> "SavepointWriter":
        """Bootstrap operator ``uid``'s keyed state (a uid the savepoint does not have yet)."""
        uid = uid_of(uid)
        if not isinstance(transformation, BootstrapTransformation):
            raise TypeError(f"with_operator({uid!r}, ...) needs OperatorTransformation.bootstrap_with(df).key_by(...)"
                            f".transform(fn), got {transformation!r}")
        self.plan.add(uid)
        self.transformations[uid] = transformation
        return self

    def remove_operator(self, uid: Any) -> "SavepointWriter":
        """Leave out all state of operator ``uid``."""
        uid = uid_of(uid)
        self.plan.remove(uid)
        self.transformations.pop(uid, None)
        return self

    def change_operator_identifier(self, from_uid: Any, to_uid: Any) -> "SavepointWriter":
        """Operator ``from_uid``'s state restores into the job's operator with uid ``to_uid``."""
        old, new = uid_of(from_uid), uid_of(to_uid)
        self.plan.rename(old, new)
        if old in self.transformations:
            self.transformations[new] = self.transformations.pop(old)
        return self

    # -- writing -----------------------------------------------------------------------------------
    def write(self, path: str) -> str:
        """Write the savepoint into directory ``path`` (new or empty); returns its URL."""
        url = normalize_url(path)
        root = self.source_root.rstrip("/") if self.source_root else None
        if root and (url.rstrip("/") == root or url.startswith(root + "/") or root.startswith(url.rstrip("/") + "/")):
            raise ValueError(f"cannot write the savepoint into {url}: it would overlap the source {self.source}, "
                             f"which is never modified; write a new directory")
        target = SavepointTarget(url, storage_options=self.storage_options)
        if target.fs.exists(target.path(METADATA)):
            raise FileExistsError(f"{url} already holds a savepoint ({METADATA}); write a new directory")
        if target.fs.exists(target.root) and target.fs.ls(target.root, detail=False):
            raise FileExistsError(f"{url} is not empty; a savepoint is written into a new or empty directory")
        try:
            target.fs.makedirs(target.root, exist_ok=True)
            self._copy(url)
            written = {uid: self._bootstrap(uid, t, url) for uid, t in self.transformations.items()}
            meta = self.plan.metadata(written)
            self._sweep(target, meta)
            target.write_metadata(meta)
        except BaseException:
            target.discard()  # ours from the start (new or empty): nothing of a savepoint is left half-written
            raise
        return url

    def _copy(self, url: str) -> None:
        copies = self.plan.copies()
        if not copies:
            return
        from .files import copy_file

        source, options = self.source_root, self.storage_options
        if sum(c.size or 0 for c in copies) <= DRIVER_COPY_BYTES:  # a Spark job would cost more than it saves
            for c in copies:
                copy_file(c, source, url, options)
            return
        tasks = min(len(copies), 4 * int(self.spark.sparkContext.defaultParallelism))
        self.spark.sparkContext.parallelize(copies, tasks).foreach(lambda c: copy_file(c, source, url, options))

    def _bootstrap(self, uid: str, t: BootstrapTransformation, url: str) -> dict[str, Any]:
        maxp = t.max_parallelism or self.plan.max_parallelism
        p = t.parallelism or min(int(self.spark.sparkContext.defaultParallelism), maxp)
        check_max_parallelism(maxp, p)
        df = t.data
        names = list(df.columns)
        if ROUTE in names:
            raise ValueError(f"operator {uid!r}: the DataFrame has a column named {ROUTE!r}, which the writer uses")
        key = t.key
        bootstrap.key_getter(names, key.column, key.position, key.fn)  # an unknown column: here, not on Spark
        routes = _route_values(p)
        subtask_of = {r: i for i, r in enumerate(routes)}
        route_array = np.asarray(routes, dtype=np.int64)

        def route_of(keys: Any) -> np.ndarray:
            return route_array[subtasks_for_keys(keys, maxp, p)]

        from pyspark.sql import functions as F
        from pyspark.sql.types import LongType, StructField, StructType

        if key.column is not None and hasattr(F, "arrow_udf"):
            # only the key column goes through Python (Spark >= 4.1), the rest stays in the JVM
            @F.arrow_udf(LongType())  # type: ignore[misc]
            def route(keys: pa.Array) -> pa.Array:
                return pa.array(route_of(_values(keys)), pa.int64())

            with_route = df.withColumn(ROUTE, route(df[key.column]))
        else:
            def add_route(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
                getter = bootstrap.key_getter(names, key.column, key.position, key.fn)
                for batch in batches:
                    if batch.num_rows:
                        keys = _values(batch.column(names.index(key.column))) if key.column is not None else \
                            [k for k, _ in bootstrap.elements([batch], getter)]
                        yield batch.append_column(ROUTE, pa.array(route_of(keys), pa.int64()))

            with_route = df.mapInArrow(add_route, StructType(list(df.schema.fields)
                                                             + [StructField(ROUTE, LongType(), False)]))
        routed = with_route.repartition(p, ROUTE)
        fn, backend, options = t.function, self.backend, self.storage_options

        def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            batches = iter(batches)
            first = next((b for b in batches if b.num_rows), None)
            if first is None:
                return
            route = first.column(ROUTE)[0].as_py()
            spec = bootstrap.SubtaskSpec(uid, subtask_of[route], p, maxp, backend, url, options)

            def rows() -> Iterator[pa.RecordBatch]:
                for b in _chain(first, batches):
                    if np.any(b.column(ROUTE).to_numpy() != route):
                        raise bootstrap.BootstrapError(f"{spec.owner}: rows of another subtask reached its task "
                                                       f"(the shuffle by {ROUTE} is not exact)")
                    yield b.drop_columns([ROUTE])

            getter = bootstrap.key_getter(names, key.column, key.position, key.fn)
            handle = bootstrap.bootstrap_subtask(spec, fn, bootstrap.elements(rows(), getter))
            yield pa.RecordBatch.from_pydict({"subtask": [spec.subtask], "handle": [json.dumps(handle)]})

        got = routed.mapInArrow(write, "subtask long, handle string").collect()
        subtasks: list[dict | None] = [None] * p
        for row in got:
            subtasks[row["subtask"]] = json.loads(row["handle"])
        return {"name": uid, "subtasks": subtasks, "max_parallelism": maxp}

    def _sweep(self, target: SavepointTarget, meta: CheckpointMetadata) -> None:
        """Remove files a retried Spark task left that no handle names (the directory is ours alone)."""
        wanted = set(meta.files()) | set(meta.shared_files())
        for found in target.fs.find(target.root):
            relative = posixpath.relpath(found, target.root)
            if relative not in wanted:
                target.fs.rm(found)


def _chain(first: pa.RecordBatch, rest: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    yield first
    yield from rest


def _values(keys: Any) -> Any:
    """A key column's values: ints without nulls as a numpy array (hashed vectorised, the same hash
    each Python int gets), else the Python values the bootstrap function sees as keys."""
    if pa.types.is_integer(keys.type) and not keys.null_count:
        return keys.to_numpy()
    return keys.to_pylist()


def _route_values(p: int) -> list[int]:
    """For each subtask i, a value whose Spark hash partition among p is i: ``repartition(p, ROUTE)``
    then puts every row of subtask i, and only those, into one partition (the write task checks it).
    Spark's partition of a bigint is ``pmod(murmur3_x86_32(value, seed 42), p)`` (HashPartitioning);
    computed here rather than by a Spark job (tests/test_state_processor_writer.py compares them)."""
    found: dict[int, int] = {}
    value = 0
    while len(found) < p:
        found.setdefault(spark_partition(value, p), value)
        value += 1
    return [found[i] for i in range(p)]


def spark_partition(value: int, p: int) -> int:
    """``pmod(hash(value), p)`` of Spark SQL for a bigint ``value``: Murmur3_x86_32.hashLong, seed 42."""
    h = _mix_h1(_mix_h1(42, _mix_k1(value & _M32)), _mix_k1((value >> 32) & _M32))
    h ^= 8  # the input's length in bytes
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _M32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _M32
    h ^= h >> 16
    signed = h - (1 << 32) if h & 0x80000000 else h
    return signed % p  # Python's % of a positive p is pmod


_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def _mix_k1(k: int) -> int:
    return (_rotl((k * 0xCC9E2D51) & _M32, 15) * 0x1B873593) & _M32


def _mix_h1(h: int, k: int) -> int:
    return (_rotl(h ^ k, 13) * 5 + 0xE6546B64) & _M32


__all__ = ["SavepointWriter", "backend_name"]
