"""How records become Kafka records: PyFlink's ``KafkaRecordSerializationSchema`` and the value formats.

``KafkaRecordSerializationSchema.builder()`` takes a topic (or a topic per record), a value
serialization schema, and optionally a key schema, a partitioner and a header provider. A
serialization schema is anything with ``serialize(element) -> bytes`` (PyFlink's interface), or a
plain function of the element. ``SimpleStringSchema`` (``str(element)`` in UTF-8) is the one of
``connectors/serialization.py``, shared with the KafkaSource.
"""

from __future__ import annotations

import datetime as _dt
import decimal
from typing import Any, Callable

import pyarrow as pa

from ...api.types import Row
from ..json_text import json_objects, row_encoder
from ..serialization import SerializationSchema, SimpleStringSchema


def _json_default(value: Any) -> Any:
    if isinstance(value, Row):
        return value.as_dict() if value._fields is not None else list(value)
    if isinstance(value, (_dt.datetime, _dt.date, _dt.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


class JsonRowSerializationSchema(SerializationSchema):
    """One JSON object per record (PyFlink's ``JsonRowSerializationSchema``): dicts and named Rows as
    objects, with ``with_type_info(Types.ROW_NAMED(...))`` positional rows and tuples get the names."""

    def __init__(self, field_names: list[str] | None = None):
        self.field_names = field_names
        self._encode = row_encoder(",", ":", ensure_ascii=False, default=_json_default)

    def __getstate__(self) -> dict:
        return {"field_names": self.field_names}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["field_names"])  # type: ignore[misc]

    @staticmethod
    def builder() -> "JsonRowSerializationSchemaBuilder":
        return JsonRowSerializationSchemaBuilder()

    def serialize(self, element: Any) -> bytes:
        if self.field_names is not None and not isinstance(element, dict):
            if isinstance(element, Row) and element._fields is not None:
                element = element.as_dict()
            else:
                element = dict(zip(self.field_names, element))
        try:
            return self._encode(element).encode()
        except (TypeError, ValueError) as e:
            raise ValueError(f"JsonRowSerializationSchema: cannot write {element!r} as JSON: {e}") from None

    def serialize_batch(self, batch: Any) -> list[bytes] | None:
        """``serialize`` of each row of an Arrow batch, built a column at a time by Arrow's kernels
        (the same bytes); None when a column's type or text needs the encoder row by row."""
        if not isinstance(batch, pa.RecordBatch) or type(self).serialize is not JsonRowSerializationSchema.serialize:
            return None  # (a subclass's own serialize is called for each record)
        objects = json_objects(batch, ",", ":", ensure_ascii=False)
        return None if objects is None else objects.cast(pa.binary()).to_pylist()


class JsonRowSerializationSchemaBuilder:
    def __init__(self) -> None:
        self._names: list[str] | None = None

    def with_type_info(self, type_info: Any) -> "JsonRowSerializationSchemaBuilder":
        names = getattr(type_info, "field_names", None)  # RowTypeInfo (Types.ROW_NAMED / Types.ROW)
        self._names = list(names) if names else None
        return self

    def build(self) -> JsonRowSerializationSchema:
        return JsonRowSerializationSchema(self._names)


def _as_function(schema: Any, what: str) -> Callable[[Any], bytes | None]:
    if schema is None:
        raise ValueError(f"{what} is None")
    if hasattr(schema, "serialize"):
        return schema.serialize
    if callable(schema):
        return schema
    raise TypeError(f"{what} must have serialize(element) -> bytes (e.g. SimpleStringSchema()) or be a function, "
                    f"got {schema!r}")


class KafkaRecordSerializationSchema:
    """Turns an element into (topic, key, value, partition, headers)."""

    def __init__(self, topic: str | None, topic_selector: Any, value_schema: Any, key_schema: Any = None,
                 partitioner: Any = None, header_provider: Any = None):
        if (topic is None) == (topic_selector is None):
            raise ValueError("KafkaRecordSerializationSchema needs exactly one of set_topic(topic) and "
                             "set_topic_selector(selector)")
        if value_schema is None:
            raise ValueError("KafkaRecordSerializationSchema needs set_value_serialization_schema(...), "
                             "e.g. SimpleStringSchema() or JsonRowSerializationSchema.builder().build()")
        self.topic = topic
        self.topic_selector = topic_selector
        self.value_schema = value_schema
        self.key_schema = key_schema
        self.partitioner = partitioner
        self.header_provider = header_provider
        self._open()

    def _open(self) -> None:
        selector = self.topic_selector
        if selector is not None and hasattr(selector, "apply"):  # PyFlink's KafkaTopicSelector
            selector = selector.apply
        if selector is not None and not callable(selector):
            raise TypeError(f"set_topic_selector needs a function of the element (or a KafkaTopicSelector), got "
                            f"{selector!r}")
        self._select = selector
        self._value = _as_function(self.value_schema, "the value serialization schema")
        self._key = _as_function(self.key_schema, "the key serialization schema") if self.key_schema is not None else None
        p = self.partitioner
        self._partition = p.partition if p is not None and hasattr(p, "partition") else p
        h = self.header_provider
        self._headers = h.get_headers if h is not None and hasattr(h, "get_headers") else h

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_")}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._open()

    @staticmethod
    def builder() -> "KafkaRecordSerializationSchemaBuilder":
        return KafkaRecordSerializationSchemaBuilder()

    @property
    def needs_partitions(self) -> bool:
        return self._partition is not None

    @property
    def is_plain(self) -> bool:
        """One topic, no partitioner, no headers: records need only a key and a value."""
        return self._select is None and self._partition is None and self._headers is None

    @property
    def key_function(self) -> Callable[[Any], bytes | None] | None:
        return self._key

    @property
    def value_function(self) -> Callable[[Any], bytes | None]:
        return self._value

    def values_of_batch(self, batch: Any) -> list[bytes] | None:
        """The values of all the batch's records at once, when the value schema can (``serialize_batch``:
        ``JsonRowSerializationSchema`` on an Arrow batch); None: ``value_function`` a record at a time."""
        serialize_batch = getattr(self.value_schema, "serialize_batch", None)
        return serialize_batch(batch) if serialize_batch is not None else None

    def serialize(self, element: Any, partitions: Callable[[str], list[int]] | None = None
                  ) -> tuple[str, bytes | None, bytes | None, int | None, list | None]:
        topic = self.topic if self._select is None else self._select(element)
        if not isinstance(topic, str) or not topic:
            raise ValueError(f"the topic selector returned {topic!r} for {element!r}: it must return a topic name")
        key = self._key(element) if self._key is not None else None
        value = self._value(element)
        partition = None
        if self._partition is not None:
            parts = partitions(topic) if partitions is not None else []
            partition = self._partition(element, key, value, topic, parts)
            if partition is not None:
                partition = int(partition)
        headers = None
        if self._headers is not None:
            h = self._headers(element)
            if h:
                items = h.items() if isinstance(h, dict) else h
                headers = [(str(k), v if isinstance(v, (bytes, type(None))) else str(v).encode()) for k, v in items]
        return topic, key, value, partition, headers


class KafkaRecordSerializationSchemaBuilder:
    def __init__(self) -> None:
        self._topic: str | None = None
        self._selector: Any = None
        self._value: Any = None
        self._key: Any = None
        self._partitioner: Any = None
        self._headers: Any = None

    def set_topic(self, topic: str) -> "KafkaRecordSerializationSchemaBuilder":
        self._topic = topic
        return self

    def set_topic_selector(self, topic_selector: Any) -> "KafkaRecordSerializationSchemaBuilder":
        """A topic per record: ``fn(element) -> topic`` (or a KafkaTopicSelector with ``apply``)."""
        self._selector = topic_selector
        return self

    def set_value_serialization_schema(self, schema: Any) -> "KafkaRecordSerializationSchemaBuilder":
        self._value = schema
        return self

    def set_key_serialization_schema(self, schema: Any) -> "KafkaRecordSerializationSchemaBuilder":
        """Serializes the whole element into the key (write a schema or function that picks a field)."""
        self._key = schema
        return self

    def set_partitioner(self, partitioner: Any) -> "KafkaRecordSerializationSchemaBuilder":
        """Flink's FlinkKafkaPartitioner: ``partition(record, key, value, target_topic, partitions) -> int``
        (or such a function). Without one, Kafka's default partitioner places records by key."""
        self._partitioner = partitioner
        return self

    def set_header_provider(self, header_provider: Any) -> "KafkaRecordSerializationSchemaBuilder":
        """Flink's HeaderProvider: ``get_headers(element)`` (or a function) returning a dict or
        (name, value) pairs; str values are written as UTF-8."""
        self._headers = header_provider
        return self

    def build(self) -> KafkaRecordSerializationSchema:
        return KafkaRecordSerializationSchema(self._topic, self._selector, self._value, self._key,
                                              self._partitioner, self._headers)


__all__ = ["JsonRowSerializationSchema", "KafkaRecordSerializationSchema", "SerializationSchema",
           "SimpleStringSchema"]
