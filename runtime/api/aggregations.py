"""Built-in AggregateFunctions over the fields of dict / Row / tuple records.

Each one is an ordinary ``AggregateFunction`` (``create_accumulator`` / ``add`` / ``get_result`` /
``merge``, immutable accumulators), so it works wherever one does: ``window(...).aggregate``,
``AggregatingStateDescriptor``, session windows (merge). ``Aggregations`` combines several
into one record::

    keyed.window(TumblingEventTimeWindows.of(Time.seconds(1))).aggregate(
        Aggregations(key=First("key"), total=Sum("value"), n=Count(), mean=Avg("value")))

emits ``{"key": ..., "total": ..., "n": ..., "mean": ...}`` per key and window. Because the
engine knows what these compute, that call runs on the columnar window operator (Arrow batches
in, one Arrow batch per fired window out, no Python per record) when the stream is keyed by a
column of dict records and the windows are tumbling or sliding event-time ones without a
trigger, evictor, allowed lateness or window function; otherwise it runs record by record with
the same results. ``First`` keeps the window's first record's field, as Flink's ``sum`` keeps
the first record's other fields.
"""

from __future__ import annotations

from typing import Any

from .functions import AggregateFunction

_NONE: tuple = ()  # "no value yet" (None could be a field's value)


class FieldAggregate(AggregateFunction):
    """One aggregate of one field (``how``: first, sum, min, max, avg) or of records (count)."""

    how = ""

    def __init__(self, field: str | int):
        if not isinstance(field, (str, int)) or isinstance(field, bool):
            raise TypeError(f"{type(self).__name__} needs a field name or a tuple position, got {field!r}")
        self.field = field

    def _value(self, record: Any) -> Any:
        try:
            return record[self.field]
        except (KeyError, IndexError, TypeError) as e:
            raise KeyError(f"{type(self).__name__}({self.field!r}): the record has no such field: "
                           f"{type(e).__name__}: {e} (record: {record!r})") from None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.field!r})"


class First(FieldAggregate):
    """The field of the first record added."""

    how = "first"

    def create_accumulator(self) -> Any:
        return _NONE

    def add(self, value: Any, accumulator: Any) -> Any:
        return (self._value(value),) if accumulator == _NONE else accumulator

    def get_result(self, accumulator: Any) -> Any:
        return accumulator[0] if accumulator != _NONE else None

    def merge(self, acc_a: Any, acc_b: Any) -> Any:
        return acc_a if acc_a != _NONE else acc_b


class Sum(FieldAggregate):
    how = "sum"

    def create_accumulator(self) -> Any:
        return 0

    def add(self, value: Any, accumulator: Any) -> Any:
        return accumulator + self._value(value)

    def get_result(self, accumulator: Any) -> Any:
        return accumulator

    def merge(self, acc_a: Any, acc_b: Any) -> Any:
        return acc_a + acc_b


class _Extreme(FieldAggregate):
    def create_accumulator(self) -> Any:
        return _NONE

    def _pick(self, a: Any, b: Any) -> Any:
        raise NotImplementedError

    def add(self, value: Any, accumulator: Any) -> Any:
        v = self._value(value)
        return (v,) if accumulator == _NONE else (self._pick(accumulator[0], v),)

    def get_result(self, accumulator: Any) -> Any:
        return accumulator[0] if accumulator != _NONE else None

    def merge(self, acc_a: Any, acc_b: Any) -> Any:
        if acc_a == _NONE or acc_b == _NONE:
            return acc_b if acc_a == _NONE else acc_a
        return (self._pick(acc_a[0], acc_b[0]),)


class Min(_Extreme):
    how = "min"

    def _pick(self, a: Any, b: Any) -> Any:
        return b if b < a else a


class Max(_Extreme):
    how = "max"

    def _pick(self, a: Any, b: Any) -> Any:
        return b if b > a else a


class Avg(FieldAggregate):
    """The mean of the field (a float); None over no records."""

    how = "avg"

    def create_accumulator(self) -> Any:
        return (0.0, 0)

    def add(self, value: Any, accumulator: Any) -> Any:
        return (accumulator[0] + self._value(value), accumulator[1] + 1)

    def get_result(self, accumulator: Any) -> Any:
        return accumulator[0] / accumulator[1] if accumulator[1] else None

    def merge(self, acc_a: Any, acc_b: Any) -> Any:
        return (acc_a[0] + acc_b[0], acc_a[1] + acc_b[1])


class Count(FieldAggregate):
    """The number of records."""

    how = "count"

    def __init__(self) -> None:
        self.field = None  # type: ignore[assignment]

    def create_accumulator(self) -> Any:
        return 0

    def add(self, value: Any, accumulator: Any) -> Any:
        return accumulator + 1

    def get_result(self, accumulator: Any) -> Any:
        return accumulator

    def merge(self, acc_a: Any, acc_b: Any) -> Any:
        return acc_a + acc_b

    def __repr__(self) -> str:
        return "Count()"


class Aggregations(AggregateFunction):
    """Several built-in aggregates under output names: the result is a dict in that order."""

    def __init__(self, **outputs: FieldAggregate):
        if not outputs:
            raise ValueError("Aggregations needs at least one output, e.g. Aggregations(n=Count())")
        for name, agg in outputs.items():
            if not isinstance(agg, FieldAggregate):
                raise TypeError(f"Aggregations({name}=...): needs a built-in aggregate (First, Sum, Min, Max, "
                                f"Avg, Count), got {agg!r}")
        self.outputs = dict(outputs)
        self._aggs = list(outputs.values())
        self._names = list(outputs)

    def create_accumulator(self) -> Any:
        return tuple(a.create_accumulator() for a in self._aggs)

    def add(self, value: Any, accumulator: Any) -> Any:
        return tuple(a.add(value, acc) for a, acc in zip(self._aggs, accumulator))

    def get_result(self, accumulator: Any) -> Any:
        return {n: a.get_result(acc) for n, a, acc in zip(self._names, self._aggs, accumulator)}

    def merge(self, acc_a: Any, acc_b: Any) -> Any:
        return tuple(a.merge(x, y) for a, x, y in zip(self._aggs, acc_a, acc_b))

    def specs(self) -> list[tuple[str, str, Any]]:
        """(output name, how, field) of each output: what the columnar operator computes."""
        return [(n, a.how, a.field) for n, a in self.outputs.items()]

    def __repr__(self) -> str:
        return f"Aggregations({', '.join(f'{n}={a!r}' for n, a in self.outputs.items())})"


__all__ = ["Aggregations", "Avg", "Count", "FieldAggregate", "First", "Max", "Min", "Sum"]
