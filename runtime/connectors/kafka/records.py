"""Kafka messages to batches: a value-only deserializer (PyFlink's ``set_value_only_deserializer``)
or whole records with their key, partition, offset, timestamp and headers.

A batch is built from one run of messages of one partition, so its records share a split.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from ...batch import Batch
from ..serialization import DeserializationSchema

RAW_SCHEMA = pa.schema([
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", pa.int64()),
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("headers", pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))),
])


class KafkaRecordDeserializationSchema:
    """How messages become records: ``value_only(schema)`` (the value decoded by ``schema``;
    tombstones, messages without a value, are skipped as in Flink) or ``raw()`` (dict records
    ``topic, partition, offset, timestamp, key, value, headers``, as an Arrow batch)."""

    def __init__(self, value_schema: DeserializationSchema | None):
        self.value_schema = value_schema

    @staticmethod
    def value_only(value_schema: DeserializationSchema) -> "KafkaRecordDeserializationSchema":
        if not hasattr(value_schema, "deserialize_values"):
            raise TypeError(f"a value deserializer is a DeserializationSchema (SimpleStringSchema(), "
                            f"JsonRowDeserializationSchema...), got {value_schema!r}")
        return KafkaRecordDeserializationSchema(value_schema)

    @staticmethod
    def raw() -> "KafkaRecordDeserializationSchema":
        return KafkaRecordDeserializationSchema(None)

    def deserialize(self, run: list, topic: str, partition: int,
                    failures: list | None = None) -> tuple[Batch, np.ndarray]:
        """(batch, event timestamps) of one run of messages of one partition.

        An undecodable value fails (the error names topic, partition and offset), unless
        ``failures`` is given: then the run's good values make the batch and each bad message is
        appended there as ``undecodable_record(message, error)`` (the source's side output)."""
        def where(i: int) -> str:
            return f"topic {topic} partition {partition} offset {run[i].offset()}"

        if self.value_schema is None:
            return _raw_batch(run, topic, partition), _timestamps(run)
        values = [m.value() for m in run]
        if None in values:  # tombstones carry no record
            run = [m for m in run if m.value() is not None]
            values = [v for v in values if v is not None]
        decode = self.value_schema.deserialize_values
        if failures is None:
            return decode(values, where), _timestamps(run)
        try:
            return decode(values, where), _timestamps(run)
        except Exception:  # noqa: BLE001 - user schemas raise what they raise; sorted out one value at a time
            pass
        # The slow path, only for a run with a bad value: which ones fail alone, then the rest at once
        # (so the good records stay one batch, columnar for a row type).
        good: list[int] = []
        for i, v in enumerate(values):
            try:
                decode([v], lambda _j, i=i: where(i))
            except Exception as e:  # noqa: BLE001
                failures.append(undecodable_record(run[i], e))
            else:
                good.append(i)
        kept = [run[i] for i in good]
        return decode([values[i] for i in good], lambda j: where(good[j])), _timestamps(kept)


def undecodable_record(m: Any, error: BaseException) -> dict:
    """What the side output of undecodable records carries: the message as it was, and why."""
    return {"topic": m.topic(), "partition": m.partition(), "offset": m.offset(), "timestamp": m.timestamp()[1],
            "key": m.key(), "value": m.value(), "headers": list(m.headers() or ()),
            "error": f"{type(error).__name__}: {error}"}


def _timestamps(run: list) -> np.ndarray:
    return np.fromiter((m.timestamp()[1] for m in run), dtype=np.int64, count=len(run))


def _raw_batch(run: list, topic: str, partition: int) -> pa.RecordBatch:
    n = len(run)
    headers: list[Any] = []
    for m in run:
        h = m.headers()
        headers.append(None if h is None else [{"key": k, "value": v} for k, v in h])
    return pa.RecordBatch.from_arrays([
        pa.array([topic] * n, pa.string()),
        pa.array(np.full(n, partition, dtype=np.int32)),
        pa.array(np.fromiter((m.offset() for m in run), dtype=np.int64, count=n)),
        pa.array(_timestamps(run)),
        pa.array([m.key() for m in run], pa.binary()),
        pa.array([m.value() for m in run], pa.binary()),
        pa.array(headers, RAW_SCHEMA.field("headers").type),
    ], schema=RAW_SCHEMA)

