"""``SavepointReader``: a savepoint or retained checkpoint as Spark DataFrames (Flink's State Processor API).

The driver reads ``_metadata`` only (checked as a restore checks it), and plans one Spark task per
subtask handle of the operator (``plan.Split``). The tasks read and decode the state files on the
executors (``source``, ``decode``) and hand Arrow batches to Spark (``mapInArrow``): nothing but the
plan goes out from the driver and nothing but small samples and counts come back to it.

The DataFrame is lazy: every action on it reads the files again (``.cache()`` it to read once).
"""

from __future__ import annotations

import itertools
import time
from typing import Any, Callable, Iterator

import pyarrow as pa

from streamjob.runtime.checkpoint.metadata import CheckpointMetadata
from streamjob.runtime.checkpoint.storage import load_checkpoint

from . import batches, decode, plan, source, types
from .plan import OperatorInfo, OperatorStateInfo, Split, StateInfo, StateNotFoundError

SAMPLE_ROWS = 200  # values decoded to infer a column's type
VALUE_FORMATS = ("infer", "text", "pickle")

KEY, MAP_KEY, VALUE, LAST_ACCESS = "key", "map_key", "value", "last_access_ms"


def _uid(operator: Any) -> str:
    """A uid string, or Flink's ``OperatorIdentifier.for_uid(uid)``-like object."""
    return operator if isinstance(operator, str) else str(getattr(operator, "uid", operator))


class SavepointReader:
    """Reads the state of a savepoint (``savepoint-...``) or a retained checkpoint (``chk-N``):
    ``SavepointReader.read(spark, path)``. Local paths, ``file://`` and ``s3://`` (fsspec; s3 settings
    from the standard AWS variables, or ``storage_options``)."""

    def __init__(self, spark: Any, url: str, root: str, metadata: CheckpointMetadata,
                 storage_options: dict | None = None):
        self.spark = spark
        self.url = url
        self.root = root
        self.metadata = metadata
        self.storage_options = storage_options
        self.tasks: int | None = None  # Spark tasks a keyed state read aims for; None: defaultParallelism

    @classmethod
    def read(cls, spark: Any, path: str, state_backend: Any = None, storage_options: dict | None = None,
             ) -> "SavepointReader":
        """``state_backend`` is accepted as Flink's ``SavepointReader.read(env, path, backend)`` takes it,
        and ignored: the backend that wrote each handle is recorded in ``_metadata``."""
        from streamjob.runtime.checkpoint.storage import normalize_url

        url = normalize_url(path)
        root, meta = load_checkpoint(url, storage_options)
        return cls(spark, url, root, meta, storage_options)

    # -- what is there --------------------------------------------------------------------------
    def _splits(self, uid: str) -> list[Split]:
        return plan.splits(self.metadata, self.root, uid, self.storage_options)

    def _keyed_splits(self, uid: str) -> list[Split]:
        """At least as many tasks as the Spark the reader runs on has slots (``defaultParallelism``)."""
        tasks = self.tasks or int(self.spark.sparkContext.defaultParallelism)
        return plan.keyed_splits(self.metadata, self.root, uid, tasks, self.storage_options)

    def operators(self, count: bool = True) -> list[OperatorInfo]:
        """Every operator with its keyed and operator states, their kinds, sizes and (``count``:
        read in one Spark job, a task per handle) key and entry counts and operator state names.
        Without ``count`` only ``_metadata`` is read (operator state names are then unknown)."""
        meta = self.metadata
        infos: dict[str, OperatorInfo] = {}
        every: list[Split] = []
        for uid, op in meta.operators.items():
            handles = op["subtasks"]
            native = any((h or {}).get("index", {}).get(plan.NATIVE) for h in handles)
            info = infos[uid] = OperatorInfo(uid, str(op.get("name", uid)), len(handles),
                                             meta.operator_max_parallelism(uid),
                                             sum(plan.handle_bytes(h) for h in handles),
                                             "rocksdb" if native else "canonical")
            for name, kind in plan.keyed_state_kinds(meta, uid).items():
                sizes = [plan.state_bytes((h or {}).get("index") or {}, name) for h in handles if h]
                info.keyed_states.append(StateInfo(name, kind, bytes=None if None in sizes else sum(sizes)))
            every += self._splits(uid)
        if count and every:
            stats = self.spark.sparkContext.parallelize(every, len(every)).map(_split_stats).collect()
            for uid, keyed, operator in stats:
                info = infos[uid]
                by_name = {s.name: s for s in info.keyed_states}
                for name, keys, entries in keyed:
                    s = by_name[name]
                    s.keys, s.entries = (s.keys or 0) + keys, (s.entries or 0) + entries
                known = {s.name: s for s in info.operator_states}
                for name, mode, entries in operator:
                    if name not in known:
                        known[name] = OperatorStateInfo(name, mode, 0)
                        info.operator_states.append(known[name])
                    if mode == "broadcast":  # every subtask holds a copy: the state is one copy
                        known[name].entries = max(known[name].entries or 0, entries)
                    else:
                        known[name].entries = (known[name].entries or 0) + entries
            for info in infos.values():
                for s in info.keyed_states:
                    s.keys = s.keys or 0
                    s.entries = s.entries or 0
        return list(infos.values())

    # -- keyed state -----------------------------------------------------------------------------
    def read_keyed_state(self, uid: Any, state: Any, key_type_info: Any = None, value_type_info: Any = None,
                         value_format: str = "infer", output_type: Any = None) -> Any:
        """Keyed state of operator ``uid`` as a DataFrame.

        ``state``: a state name, a state descriptor (its ``type_info`` types the value column and its
        TTL, if any, leaves expired values out), or a ``KeyedStateReaderFunction`` (rows it emits;
        ``output_type``: their ``Types.ROW_NAMED(...)``, else inferred).

        Columns: ``key``, ``value`` (one row per key of a value, reducing or aggregating state, one per
        element of a list state), or ``key``, ``map_key``, ``value`` (one per entry of a map state);
        states with a TTL add ``last_access_ms``. ``value_format``: ``infer`` (see ``types``),
        ``text`` (JSON or repr) or ``pickle`` (the pickled bytes, exact)."""
        uid = _uid(uid)
        from .functions import KeyedStateReaderFunction

        if isinstance(state, KeyedStateReaderFunction):
            from .functions import read_with_function

            return read_with_function(self, uid, state, key_type_info, output_type)
        descriptor = None if isinstance(state, str) else state
        name = state if isinstance(state, str) else state.get_name()
        if value_format not in VALUE_FORMATS:
            raise ValueError(f"value_format must be one of {', '.join(VALUE_FORMATS)}, got {value_format!r}")
        kind = plan.state_kind(self.metadata, uid, name)
        shape = decode.shape(kind)
        base = kind.removesuffix("+ttl")
        if descriptor is not None and getattr(descriptor, "kind", base) not in (base, "value" if base == "accumulators"
                                                                                 else base):
            raise TypeError(f"state {name!r} of operator {uid!r} is {base} state, not {descriptor.kind} "
                            f"({type(descriptor).__name__})")
        timed = kind.endswith("+ttl")
        drop = _ttl_drop(descriptor)
        if value_type_info is None and descriptor is not None:
            value_type_info = descriptor.type_info
        splits = self._keyed_splits(uid)
        names = [KEY] + ([MAP_KEY] if shape == "map" else []) + [VALUE] + ([LAST_ACCESS] if timed else [])
        map_key_info = value_info = value_type_info
        if shape == "map" and isinstance(value_type_info, tuple):  # MapStateDescriptor: (key info, value info)
            map_key_info, value_info = value_type_info
        elif shape == "map":
            map_key_info = None
        declared: list[Any] = [key_type_info] + ([map_key_info] if shape == "map" else []) + [value_info]
        columns: list[types.Column | None] = [None if t is None else types.of_type_info(t) for t in declared]
        if value_format != "infer":
            columns[-1] = types.text_column("value_format='text'") if value_format == "text" else types.pickle_column()
        dtype = plan.columnar(self.metadata, uid, name)
        if dtype is not None:  # int64 keys and numeric values, known from the index
            columns[0] = columns[0] or types.of_dtype("<i8")
            columns[-1] = columns[-1] or types.of_dtype(dtype)
        if timed:
            columns.append(types.Column(pa.int64(), None, "TTL timestamp"))
        if any(c is None for c in columns):
            sample = self._sample(splits, lambda s: _keyed_rows(s, name, drop))
            for i, c in enumerate(columns):
                if c is None:
                    columns[i] = types.infer([r[i] for r in sample], names[i])
        what = f"keyed state {name!r} of operator {uid!r}"
        return self._frame(splits, names, columns, what, lambda s: source.keyed_parts(s, name, drop))

    # -- operator state ---------------------------------------------------------------------------
    def read_list_state(self, uid: Any, name: str, type_info: Any = None, value_format: str = "infer") -> Any:
        """Operator list state (``get_list_state``): one row per element of every subtask's list."""
        return self._operator_list(_uid(uid), name, "split", type_info, value_format)

    def read_union_state(self, uid: Any, name: str, type_info: Any = None, value_format: str = "infer") -> Any:
        """Union list state (``get_union_list_state``): the union a restored subtask sees, one row per
        element (each subtask's list once)."""
        return self._operator_list(_uid(uid), name, "union", type_info, value_format)

    def read_broadcast_state(self, uid: Any, name: str, key_type_info: Any = None, value_type_info: Any = None,
                             value_format: str = "infer") -> Any:
        """Broadcast state: ``key``, ``value``, one row per entry of one copy (every subtask holds the same)."""
        uid = _uid(uid)
        splits = self._splits(uid)
        # one task reads the subtasks in order and stops at the first copy, as a restore takes one copy
        task = [tuple(splits)]
        read = _broadcast_reader(name, uid)
        columns = [None if key_type_info is None else types.of_type_info(key_type_info),
                   None if value_type_info is None else types.of_type_info(value_type_info)]
        if value_format != "infer":
            columns[1] = types.text_column("value_format='text'") if value_format == "text" else types.pickle_column()
        if any(c is None for c in columns):
            sample = self._sample(task, lambda t: itertools.chain.from_iterable(read(t)))
            for i, n in enumerate((KEY, VALUE)):
                columns[i] = columns[i] or types.infer([r[i] for r in sample], n)
        return self._frame(task, [KEY, VALUE], columns, f"broadcast state {name!r} of operator {uid!r}", read)

    def _operator_list(self, uid: str, name: str, mode: str, type_info: Any, value_format: str) -> Any:
        splits = self._splits(uid)
        read = _list_reader(name, mode, uid)
        if value_format != "infer":
            column = types.text_column("value_format='text'") if value_format == "text" else types.pickle_column()
        elif type_info is not None:
            column = types.of_type_info(type_info)
        else:
            sample = self._sample(splits, lambda s: itertools.chain.from_iterable(read(s)))
            column = types.infer([r[0] for r in sample], VALUE)
        what = f"{'union' if mode == 'union' else 'list'} state {name!r} of operator {uid!r}"
        return self._frame(splits, [VALUE], [column], what, read)

    # -- Spark ---------------------------------------------------------------------------------------
    def _sample(self, tasks: list, rows: Callable[[Any], Iterator[tuple]]) -> list[tuple]:
        """Up to SAMPLE_ROWS decoded rows, for type inference: ``take`` reads the first task, then more
        only while it has too few rows; each task stops decoding once it has enough."""
        if not tasks:
            return []
        rdd = self.spark.sparkContext.parallelize(tasks, len(tasks))
        return rdd.mapPartitions(lambda it: itertools.islice(
            itertools.chain.from_iterable(rows(t) for t in it), SAMPLE_ROWS)).take(SAMPLE_ROWS)

    def _frame(self, tasks: list, names: list[str], columns: list[types.Column], what: str,
               parts: Callable[[Any], Iterator[Any]]) -> Any:
        from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema

        spark_schema = from_arrow_schema(pa.schema([pa.field(n, c.type) for n, c in zip(names, columns)]))
        arrow_schema = to_arrow_schema(spark_schema)  # Spark's own spelling (list item names, nullability)
        columns = [types.Column(f.type, c.prepare, c.how) for f, c in zip(arrow_schema, columns)]
        tasks = list(tasks)

        def read(id_batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for b in id_batches:
                for i in b.column(0).to_pylist():
                    yield from batches.record_batches(parts(tasks[i]), arrow_schema, columns, what)

        if not tasks:
            return self.spark.createDataFrame([], spark_schema)
        # one row, one partition, one task per split (range's partitions are exact)
        ids = self.spark.range(0, len(tasks), 1, len(tasks))
        df = ids.mapInArrow(read, spark_schema)
        df.column_types = {n: c.how for n, c in zip(names, columns)}  # where each column's type came from
        return df


def _ttl_drop(descriptor: Any) -> tuple[int, int] | None:
    """(ttl ms, now ms) when the descriptor has a TTL: expired values are left out, as a restored job
    would never return them (the savepoint records timestamps, not the TTL)."""
    get = getattr(descriptor, "get_ttl_config", None)
    config = get() if get is not None else None
    if config is None:
        return None
    return config.ttl_milliseconds(), time.time_ns() // 1_000_000


def _keyed_rows(split: Split, name: str, drop: tuple[int, int] | None) -> Iterator[tuple]:
    for part in source.keyed_parts(split, name, drop):
        if isinstance(part, decode.Columns):
            yield from zip(part.keys.tolist(), part.values.tolist())
        else:
            yield from part.rows()


def _list_reader(name: str, mode: str, uid: str) -> Callable[[Split], Iterator[list[tuple]]]:
    def read(split: Split) -> Iterator[list[tuple]]:
        state = source.operator_state(split).get(name)
        if state is None:
            return
        found, items = state
        if found != mode:
            call = {"split": "read_list_state", "union": "read_union_state", "broadcast": "read_broadcast_state"}
            raise StateNotFoundError(f"operator state {name!r} of operator {uid!r} is {found} state: read it "
                                     f"with {call.get(found, found)}")
        yield [(v,) for v in items]
    return read


def _broadcast_reader(name: str, uid: str) -> Callable[[tuple], Iterator[list[tuple]]]:
    def read(splits: tuple) -> Iterator[list[tuple]]:
        for split in splits:
            state = source.operator_state(split).get(name)
            if state is None:
                continue
            mode, entries = state
            if mode != "broadcast":
                raise StateNotFoundError(f"operator state {name!r} of operator {uid!r} is {mode} list state, "
                                         f"not broadcast state: read it with read_"
                                         f"{'union' if mode == 'union' else 'list'}_state")
            yield list(dict(entries).items())
            return
    return read


def _split_stats(split: Split) -> tuple[str, list[tuple[str, int, int]], list[tuple[str, str, int]]]:
    """(uid, [(keyed state, keys, rows)], [(operator state, mode, entries)]) of one handle."""
    index = split.handle.get("index") or {}
    keyed: list[tuple[str, int, int]] = []
    kinds = {n: str(t.get("kind")) for n, t in (index.get("keyed") or {}).items()}
    kinds.update({n: str(k) for n, k in ((index.get(plan.NATIVE) or {}).get("states") or {}).items()})
    if split.native:  # one download of the database for all its states
        counted: dict[str, list[int]] = {n: [0, 0] for n in kinds}
        for name, part in source.native_parts(split, kinds):
            counted[name][0] += len(set(part.columns[0]))
            counted[name][1] += len(part)
        kinds = {}
        keyed = [(n, k, r) for n, (k, r) in counted.items()]
    for name in kinds:
        n = plan.columnar_keys(index, name)
        if n is not None:
            keyed.append((name, n, n))
            continue
        keys, rows = 0, 0
        for part in source.keyed_parts(split, name):
            if isinstance(part, decode.Columns):
                keys, rows = keys + len(part.keys), rows + len(part.keys)
            else:
                keys += len(set(part.columns[0]))
                rows += len(part)
        keyed.append((name, keys, rows))
    operator = [(n, mode, len(items)) for n, (mode, items) in source.operator_state(split).items()]
    return split.uid, keyed, operator


__all__ = ["SavepointReader", "StateNotFoundError", "VALUE_FORMATS"]
