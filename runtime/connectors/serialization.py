"""Value formats of message connectors (PyFlink's ``SimpleStringSchema``, ``JsonRowDeserializationSchema``).

A deserialization schema turns the values of one run of messages into one batch at a time:
``deserialize_values(values, where)`` gets the raw bytes and ``where(i)`` naming the message ``i``
came from (topic, partition and offset for Kafka), so an undecodable value fails the job with its
address. ``JsonRowDeserializationSchema`` with a row type decodes a whole run with Arrow's JSON
reader into columns (no Python per record), so what follows stays columnar.
"""

from __future__ import annotations

import io
import json
from typing import Any, Callable

import pyarrow as pa
import pyarrow.json as pa_json

from ..batch import Batch


class DeserializationError(ValueError):
    """A message value could not be decoded; the message names where it came from."""


class DeserializationSchema:
    def deserialize_values(self, values: list[bytes], where: Callable[[int], str]) -> Batch:
        raise NotImplementedError


class SerializationSchema:
    def serialize(self, value: Any) -> bytes:
        raise NotImplementedError


class SimpleStringSchema(DeserializationSchema, SerializationSchema):
    """Values as strings (records are ``str``), and strings as values, in ``charset`` (UTF-8)."""

    def __init__(self, charset: str = "UTF-8"):
        self.charset = charset

    def deserialize_values(self, values: list[bytes], where: Callable[[int], str]) -> list[str]:
        charset = self.charset
        try:
            return [v.decode(charset) for v in values]
        except UnicodeDecodeError:
            for i, v in enumerate(values):
                try:
                    v.decode(charset)
                except UnicodeDecodeError as e:
                    raise DeserializationError(f"cannot decode the value of {where(i)} as {charset}: {e}") from e
            raise

    def serialize(self, value: Any) -> bytes:
        return str(value).encode(self.charset)


class JsonRowDeserializationSchema(DeserializationSchema):
    """JSON objects as rows of a declared row type: ``JsonRowDeserializationSchema.builder()
    .type_info(Types.ROW_NAMED(["user", "amount"], [Types.STRING(), Types.LONG()])).build()``.

    Fields the row type does not name are ignored; fields a record lacks are null. A value that is
    not a JSON object, or a field of another type, fails the job naming the message.
    """

    def __init__(self, type_info: Any):
        schema = _arrow_schema(type_info)
        self.type_info = type_info
        self.schema = schema
        self._options = pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
        self._options_nl = pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore",
                                                newlines_in_values=True)

    @staticmethod
    def builder() -> "JsonRowDeserializationSchemaBuilder":
        return JsonRowDeserializationSchemaBuilder()

    def deserialize_values(self, values: list[bytes], where: Callable[[int], str]) -> pa.RecordBatch:
        if not values:
            return self.schema.empty_table().to_batches()[0] if self.schema else pa.record_batch([])
        data = b"\n".join(values)
        # A value may itself span lines (pretty-printed JSON): then the slower reader that allows it.
        options = self._options if data.count(b"\n") == len(values) - 1 else self._options_nl
        try:
            table = pa_json.read_json(io.BytesIO(data), parse_options=options,
                                      # one block (one chunk); no threads: each subtask decodes its own
                                      read_options=pa_json.ReadOptions(block_size=max(1 << 20, len(data) + 1),
                                                                       use_threads=False))
        except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
            self._find_bad(values, where, e)
            raise DeserializationError(f"cannot decode JSON values of {where(0)} .. {where(len(values) - 1)}: {e}") from e
        if table.num_rows != len(values):  # e.g. an empty value or two objects in one: find which
            self._find_bad(values, where, None)
            raise DeserializationError(f"{len(values)} JSON values of {where(0)} .. {where(len(values) - 1)} "
                                       f"decoded to {table.num_rows} rows")
        batches = table.combine_chunks().to_batches()
        return batches[0] if batches else self.schema.empty_table().to_batches()[0]

    def _find_bad(self, values: list[bytes], where: Callable[[int], str], cause: Exception | None) -> None:
        """The slow path, only after a failure: decode one value at a time to name the bad one."""
        for i, v in enumerate(values):
            try:
                doc = json.loads(v)
            except (ValueError, UnicodeDecodeError) as e:
                raise DeserializationError(f"the value of {where(i)} is not JSON: {e}: {_preview(v)}") from cause
            if not isinstance(doc, dict):
                raise DeserializationError(f"the value of {where(i)} is not a JSON object: {_preview(v)}") from cause
            try:
                pa_json.read_json(io.BytesIO(v.replace(b"\n", b" ")), parse_options=self._options)
            except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
                fields = ", ".join(f"{f.name}: {f.type}" for f in self.schema)
                raise DeserializationError(f"the value of {where(i)} does not fit the row type ({fields}): {e}: "
                                           f"{_preview(v)}") from cause


class JsonRowDeserializationSchemaBuilder:
    def __init__(self) -> None:
        self._type_info: Any = None

    def type_info(self, type_info: Any) -> "JsonRowDeserializationSchemaBuilder":
        self._type_info = type_info
        return self

    def build(self) -> JsonRowDeserializationSchema:
        if self._type_info is None:
            raise ValueError("JsonRowDeserializationSchema needs a row type: .type_info(Types.ROW_NAMED([...], [...]))")
        return JsonRowDeserializationSchema(self._type_info)


def _arrow_schema(type_info: Any) -> pa.Schema:
    if isinstance(type_info, pa.Schema):
        return type_info
    schema = getattr(type_info, "arrow_schema", lambda: None)()
    if schema is None:
        raise TypeError(f"JsonRowDeserializationSchema needs a row type of Arrow-typed fields "
                        f"(Types.ROW_NAMED with Types.STRING(), LONG(), DOUBLE(), ...) or a pyarrow schema, "
                        f"got {type_info!r}")
    return schema


def _preview(value: bytes, limit: int = 80) -> str:
    text = repr(value[:limit])
    return text + ("..." if len(value) > limit else "")
