"""Event time: ``WatermarkStrategy`` and ``TimestampAssigner``, as in PyFlink (``pyflink.common``).

A strategy says where each record's event timestamp comes from and how far the
watermark trails the largest timestamp seen: ``for_monotonous_timestamps()``
(not at all), ``for_bounded_out_of_orderness(Duration)`` (by the bound), or
``no_watermarks()``. Watermarks go out every ``pipeline.auto-watermark-interval``
(200 ms by default), as Flink's periodic generators do.

Beyond PyFlink, ``with_timestamp_assigner`` also takes a column name: on Arrow
batches the timestamps are then read as one column, with no Python per record
(the columnar path); on Python records it reads ``record[name]``.
"""

from __future__ import annotations

from typing import Any

from .time import Duration


class TimestampAssigner:
    """``extract_timestamp(value, record_timestamp)``: the record's event time in milliseconds."""

    def extract_timestamp(self, value: Any, record_timestamp: int) -> int:
        raise NotImplementedError


def _millis(d: Any, what: str) -> int:
    if isinstance(d, Duration):
        return d.to_milliseconds()
    if isinstance(d, int) and not isinstance(d, bool):
        return d
    raise TypeError(f"WatermarkStrategy.{what} needs a Duration (e.g. Duration.of_seconds(5)), got {d!r}")


class WatermarkStrategy:
    MONOTONOUS = "monotonous"
    BOUNDED = "bounded"
    NONE = "none"

    def __init__(self, kind: str, out_of_orderness_ms: int = 0, assigner: Any = None, idleness_ms: int | None = None):
        self.kind = kind
        self.out_of_orderness_ms = out_of_orderness_ms
        self.assigner = assigner
        self.idleness_ms = idleness_ms

    @staticmethod
    def for_monotonous_timestamps() -> "WatermarkStrategy":
        return WatermarkStrategy(WatermarkStrategy.MONOTONOUS)

    @staticmethod
    def for_bounded_out_of_orderness(max_out_of_orderness: Duration) -> "WatermarkStrategy":
        ms = _millis(max_out_of_orderness, "for_bounded_out_of_orderness")
        if ms < 0:
            raise ValueError(f"WatermarkStrategy.for_bounded_out_of_orderness: the bound must not be negative, got {ms} ms")
        return WatermarkStrategy(WatermarkStrategy.BOUNDED, ms)

    @staticmethod
    def no_watermarks() -> "WatermarkStrategy":
        return WatermarkStrategy(WatermarkStrategy.NONE)

    def with_timestamp_assigner(self, timestamp_assigner: Any) -> "WatermarkStrategy":
        if not (isinstance(timestamp_assigner, (TimestampAssigner, str))
                or callable(getattr(timestamp_assigner, "extract_timestamp", None)) or callable(timestamp_assigner)):
            raise TypeError("with_timestamp_assigner needs a TimestampAssigner (extract_timestamp(value, "
                            f"record_timestamp)), a function of the record or a column name, got {timestamp_assigner!r}")
        return WatermarkStrategy(self.kind, self.out_of_orderness_ms, timestamp_assigner, self.idleness_ms)

    def with_idleness(self, idle_timeout: Duration) -> "WatermarkStrategy":
        ms = _millis(idle_timeout, "with_idleness")
        if ms <= 0:
            raise ValueError(f"WatermarkStrategy.with_idleness needs a positive timeout, got {ms} ms")
        return WatermarkStrategy(self.kind, self.out_of_orderness_ms, self.assigner, ms)

    def with_watermark_alignment(self, *args: Any, **kwargs: Any) -> "WatermarkStrategy":
        raise NotImplementedError(
            "WatermarkStrategy.with_watermark_alignment is not supported by streamjob: sources are not paused "
            "by watermark groups. Remove the call; backpressure already bounds how far a source runs ahead.")

    def describe(self) -> str:
        if self.kind == self.BOUNDED:
            return f"BoundedOutOfOrderness({self.out_of_orderness_ms} ms)"
        return {"monotonous": "MonotonousTimestamps", "none": "NoWatermarks"}[self.kind]

    def __repr__(self) -> str:
        return f"WatermarkStrategy({self.describe()})"


__all__ = ["TimestampAssigner", "WatermarkStrategy"]
