"""User-defined metrics, named as in PyFlink (``pyflink.metrics``): ``MetricGroup``, ``Counter``,
``Meter``, ``Distribution``; a gauge is a callable.

A function reaches its operator's group with ``runtime_context.get_metrics_group()`` in ``open``::

    self.seen = runtime_context.get_metrics_group().add_group("parser").counter("records_seen")
    ...
    self.seen.inc()

The metrics live in the task (plain Python numbers: ``inc`` costs an attribute add); the task's
periodic metric report carries their values to the job manager, which shows them on ``/metrics``
(Prometheus) and in the REST API. Like Flink's, they belong to the task: a restarted task starts
them from zero.

Groups are a path (``add_group("a").add_group("b")``: Prometheus label ``group="a.b"``); a
key-value group (``add_group("topic", "clicks")``, PyFlink's ``extra``) is a *user variable*, as in
Flink: a label ``topic="clicks"`` in Prometheus.

Connectors register their own metrics the same way on a *system* group (``system_group``): those
are Flink's connector metrics (``pendingRecords``, ``KafkaSourceReader.topic.partition.currentOffset``)
and are named without the ``user`` prefix.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections import deque
from typing import Any, Callable

log = logging.getLogger("streamjob.metrics")

COUNTER, GAUGE, METER, DISTRIBUTION = "counter", "gauge", "meter", "distribution"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# A key-value group's key becomes a Prometheus label name: these are taken by the labels every metric has.
RESERVED_LABELS = frozenset({"job", "job_id", "operator", "subtask", "group"})


class Counter:
    """PyFlink's ``Counter``: ``inc(n=1)``, ``dec(n=1)``, ``get_count()``."""

    __slots__ = ("_count",)

    def __init__(self) -> None:
        self._count = 0

    def inc(self, n: int = 1) -> None:
        self._count += n

    def dec(self, n: int = 1) -> None:
        self._count -= n

    def get_count(self) -> int:
        return self._count

    def _value(self, now: float) -> Any:
        return self._count


class Meter:
    """PyFlink's ``Meter``: ``mark_event(n=1)``, ``get_count()``; its rate is events per second over
    the last ``time_span_in_seconds`` (Flink's MeterView), worked out at each metric report."""

    __slots__ = ("_count", "span", "_samples")

    def __init__(self, time_span_in_seconds: int = 60):
        self._count = 0
        self.span = float(time_span_in_seconds)
        # (time, count then), oldest first: from its creation, then one per metric report
        self._samples: deque[tuple[float, int]] = deque([(time.monotonic(), 0)])

    def mark_event(self, n: int = 1) -> None:
        self._count += n

    def get_count(self) -> int:
        return self._count

    def rate(self, now: float) -> float:
        """Events per second since the oldest sample still inside the time span (``now``: time.monotonic())."""
        samples = self._samples
        samples.append((now, self._count))
        # Keep one sample at or before the span's start, so the window covers the whole span once it can.
        while len(samples) > 2 and samples[1][0] <= now - self.span:
            samples.popleft()
        t0, c0 = samples[0]
        return (self._count - c0) / (now - t0) if now > t0 else 0.0

    def _value(self, now: float) -> Any:
        return [self._count, self.rate(now)]


class Distribution:
    """PyFlink's ``Distribution``: ``update(value)``; reported as count, sum, min and max."""

    __slots__ = ("count", "sum", "min", "max")

    def __init__(self) -> None:
        self.count = 0
        self.sum = 0
        self.min: Any = None
        self.max: Any = None

    def update(self, value: int) -> None:
        self.count += 1
        self.sum += value
        if self.min is None or value < self.min:
            self.min = value
        if self.max is None or value > self.max:
            self.max = value

    def _value(self, now: float) -> Any:
        return [self.count, self.sum, self.min, self.max]


class _Gauge:
    __slots__ = ("fn", "where", "failed")

    def __init__(self, fn: Callable[[], Any], where: str):
        self.fn = fn
        self.where = where
        self.failed = False

    def _value(self, now: float) -> Any:
        # A gauge's callable that raises must not fail the job (Flink's reporters skip it too):
        # the value is absent, and the first failure is logged with the gauge's name.
        try:
            value = self.fn()
            return None if value is None else float(value)
        except Exception as e:  # noqa: BLE001 - user code, reported and skipped
            if not self.failed:
                self.failed = True
                log.warning("gauge %s raised %s: %s (its value is left out)", self.where, type(e).__name__, e)
            return None


class MetricRegistry:
    """The metrics of one operator subtask, and the entries of the task's metric report."""

    def __init__(self, operator: str = "", subtask: int = 0):
        self.operator = operator
        self.subtask = subtask
        # (system, identifier path, name) -> (kind, metric, the fixed head of its report entry)
        self.metrics: dict[tuple, tuple[str, Any, list]] = {}

    def group(self, system: bool = False) -> "MetricGroup":
        return MetricGroup(self, system, (), (), ())

    def register(self, group: "MetricGroup", name: Any, kind: str, make: Callable[[], Any]) -> Any:
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ValueError(f"operator {self.operator!r}: metric name {name!r} must be letters, digits and "
                             f"underscores, not starting with a digit (it is part of a Prometheus metric name)")
        key = (group._system, group._path, name)
        there = self.metrics.get(key)
        if there is not None:
            if there[0] != kind:
                raise ValueError(f"operator {self.operator!r}: metric {'.'.join([*group._path, name])!r} is a "
                                 f"{there[0]} already; a {kind} needs another name")
            return there[1]  # the same metric again (open() asked twice): one metric, as Flink keeps the first
        metric = make()
        head = [group._system, list(group._path), list(group._groups), dict(group._variables), name, kind]
        self.metrics[key] = (kind, metric, head)
        return metric

    def report(self, now: float | None = None) -> list[list]:
        """One entry per metric: [system, identifier path, plain group names, variables, name, kind, value].
        The value is a number (counter, gauge; None: a gauge without a value), [count, rate] (meter) or
        [count, sum, min, max] (distribution)."""
        now = time.monotonic() if now is None else now
        return [[*head, metric._value(now)] for _kind, metric, head in self.metrics.values()]


class MetricGroup:
    """PyFlink's ``MetricGroup``: ``add_group``, ``counter``, ``gauge``, ``meter``, ``distribution``."""

    __slots__ = ("_registry", "_system", "_path", "_groups", "_variables")

    def __init__(self, registry: MetricRegistry, system: bool, path: tuple, groups: tuple, variables: tuple):
        self._registry = registry
        self._system = system
        self._path = path  # Flink's identifier: every group name, a key-value group's key and value
        self._groups = groups  # the plain groups (a Prometheus name, or the ``group`` label of a user's)
        self._variables = variables  # the key-value groups: (key, value) pairs, sorted (Prometheus labels)

    def add_group(self, name: str, extra: str | None = None) -> "MetricGroup":
        """A subgroup ``name``; with ``extra``, a key-value group: the user variable ``name=extra``
        (a Prometheus label), as PyFlink's ``add_group(key, value)``."""
        if not isinstance(name, str) or not name or "." in name:
            raise ValueError(f"add_group needs a non-empty name without dots, got {name!r}")
        if extra is None:
            return MetricGroup(self._registry, self._system, (*self._path, name), (*self._groups, name),
                               self._variables)
        if not _NAME.fullmatch(name) or name in RESERVED_LABELS or name.startswith("__"):
            raise ValueError(f"add_group({name!r}, {extra!r}): the key of a key-value group becomes a Prometheus "
                             f"label, so it must be letters, digits and underscores and not one of "
                             f"{', '.join(sorted(RESERVED_LABELS))}")
        variables = tuple(sorted({**dict(self._variables), name: str(extra)}.items()))
        return MetricGroup(self._registry, self._system, (*self._path, name, str(extra)), self._groups, variables)

    def counter(self, name: str) -> Counter:
        return self._registry.register(self, name, COUNTER, Counter)

    def gauge(self, name: str, obj: Callable[[], int]) -> None:
        """Registers a gauge: ``obj()`` is read at each metric report (in the task)."""
        if not callable(obj):
            raise TypeError(f"gauge {name!r} needs a callable that returns its value, got {obj!r}")
        where = f"{self._registry.operator}:{'.'.join([*self._path, str(name)])}"
        self._registry.register(self, name, GAUGE, lambda: _Gauge(obj, where))

    def meter(self, name: str, time_span_in_seconds: int = 60) -> Meter:
        if not isinstance(time_span_in_seconds, (int, float)) or not time_span_in_seconds > 0 \
                or math.isinf(time_span_in_seconds):
            raise ValueError(f"meter {name!r}: time_span_in_seconds must be a positive number of seconds, "
                             f"got {time_span_in_seconds!r}")
        return self._registry.register(self, name, METER, lambda: Meter(time_span_in_seconds))

    def distribution(self, name: str) -> Distribution:
        return self._registry.register(self, name, DISTRIBUTION, Distribution)


__all__ = ["Counter", "Distribution", "Meter", "MetricGroup", "MetricRegistry"]
