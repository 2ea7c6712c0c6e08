"""``Time`` (window sizes, as PyFlink's ``pyflink.common.time.Time``) and ``Duration``
(watermark bounds and idleness, as ``pyflink.common.Duration``): both whole milliseconds.
``Instant`` (a point in time, as ``pyflink.common.time.Instant``) and ``TimeCharacteristic``
(``env.set_stream_time_characteristic``, Flink 1.x)."""

from __future__ import annotations

from enum import Enum
from functools import total_ordering


@total_ordering
class _Millis:
    __slots__ = ("_ms",)

    def __init__(self, milliseconds: int):
        if isinstance(milliseconds, bool) or not isinstance(milliseconds, int):
            raise TypeError(f"{type(self).__name__} needs whole milliseconds, got {milliseconds!r}")
        self._ms = milliseconds

    def to_milliseconds(self) -> int:
        return self._ms

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other._ms == self._ms

    def __lt__(self, other: "_Millis") -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._ms < other._ms

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._ms))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._ms} ms)"


class Time(_Millis):
    @staticmethod
    def milliseconds(milliseconds: int) -> "Time":
        return Time(milliseconds)

    @staticmethod
    def seconds(seconds: int) -> "Time":
        return Time(seconds * 1000)

    @staticmethod
    def minutes(minutes: int) -> "Time":
        return Time(minutes * 60_000)

    @staticmethod
    def hours(hours: int) -> "Time":
        return Time(hours * 3_600_000)

    @staticmethod
    def days(days: int) -> "Time":
        return Time(days * 86_400_000)


class Duration(_Millis):
    @staticmethod
    def of_millis(millis: int) -> "Duration":
        return Duration(millis)

    @staticmethod
    def of_seconds(seconds: int) -> "Duration":
        return Duration(seconds * 1000)

    @staticmethod
    def of_minutes(minutes: int) -> "Duration":
        return Duration(minutes * 60_000)

    @staticmethod
    def of_hours(hours: int) -> "Duration":
        return Duration(hours * 3_600_000)

    @staticmethod
    def of_days(days: int) -> "Duration":
        return Duration(days * 86_400_000)

    @staticmethod
    def of_nanos(nanos: int) -> "Duration":
        return Duration(nanos // 1_000_000)


class Instant:
    """A point on the time-line, seconds and nanoseconds since the epoch (Java's Instant), as PyFlink's."""

    __slots__ = ("seconds", "nanos")

    def __init__(self, seconds: int, nanos: int):
        self.seconds = seconds
        self.nanos = nanos

    def to_epoch_milli(self) -> int:
        return self.seconds * 1000 + self.nanos // 1_000_000

    @staticmethod
    def of_epoch_milli(epoch_milli: int) -> "Instant":
        return Instant(epoch_milli // 1000, epoch_milli % 1000 * 1_000_000)

    def __eq__(self, other: object) -> bool:
        return type(other) is Instant and (self.seconds, self.nanos) == (other.seconds, other.nanos)

    def __hash__(self) -> int:
        return hash((self.seconds, self.nanos))

    def __repr__(self) -> str:
        return f"Instant<{self.seconds}, {self.nanos}>"


class TimeCharacteristic(Enum):
    """Flink 1.x's stream time characteristic (``env.set_stream_time_characteristic``). As in Flink
    since 1.12, it only sets the periodic watermark interval: ``ProcessingTime`` turns periodic
    watermarks off, the others set 200 ms; windows say their time domain themselves
    (``TumblingEventTimeWindows`` / ``TumblingProcessingTimeWindows``)."""

    ProcessingTime = 0
    IngestionTime = 1
    EventTime = 2


__all__ = ["Duration", "Instant", "Time", "TimeCharacteristic"]
