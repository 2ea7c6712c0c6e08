"""The job autoscaler's decision: a pure function of (job topology, metrics history, settings, what it did
before, now) -> per-operator parallelism, with the rates it used and why.

The flink-kubernetes-operator's algorithm (FLIP-271) and its vocabulary, applied per job vertex (a task:
a chain of operators):

* **True processing rate**: what the vertex could process if it were busy all the time, its records in
  per second divided by its busy share (``busyTimeMsPerSecond / 1000``, task/task_time.py). Measured,
  not guessed: a vertex half busy at 10k records/s could do 20k.
* **Target data rate**: what it must process. At a source, the records read per second plus the growth
  of its backlog (``pendingRecords``, Kafka's lag), plus what catches up the backlog (and the records that
  arrive while the job restarts, ``restartTime``) within ``catchUpDuration``. Downstream, the sum over its
  inputs of their target rate times their output ratio (records out per record in).
* **Scaling**: utilization = target rate / true processing rate. Outside ``targetUtilization`` +-
  ``targetUtilizationBoundary`` the vertex gets the parallelism that puts it at ``targetUtilization``:
  ``ceil(parallelism * utilization / targetUtilization)``, bounded by the scale-up and scale-down max
  factors, ``minParallelism`` / ``maxParallelism``, the job's max parallelism (key groups), a source's
  partition count; a keyed vertex rounded up to a divisor of the max parallelism (so key groups spread
  evenly), a source to a divisor of its partitions.
* **Timing**: nothing until the metrics window is full; nothing for ``stabilizationInterval`` after the
  job (re)started; a scale-down only once recommended for ``scaleDownInterval`` without a break (a
  scale-up acts at once, and resets pending scale-downs).

No I/O: ``operator/handlers.py`` collects the samples from the job's REST API and applies the plan.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable

# Below this busy share a vertex's true processing rate is not measurable (it is nearly idle): its
# utilization counts as 0 (scale down as far as the bounds allow) rather than a rate divided by ~0.
MIN_BUSY_RATIO = 0.001


@dataclass(frozen=True)
class Vertex:
    """A job vertex (task) as the autoscaler sees it (from the job's /v1/job)."""

    id: str  # stable across rescales: the head operator's uid, else its name
    name: str
    parallelism: int
    max_parallelism: int
    inputs: tuple[str, ...] = ()  # upstream vertex ids
    keyed: bool = False  # a keyed input: its parallelism should divide the max parallelism
    partitions: int | None = None  # a source's split count (Kafka partitions): no use beyond it

    @property
    def source(self) -> bool:
        return not self.inputs


@dataclass(frozen=True)
class Sample:
    """One vertex's metrics at one moment, over its subtasks."""

    records_in_per_second: float  # numRecordsInPerSecond of the head operator, summed over subtasks
    records_out_per_second: float  # numRecordsOutPerSecond of the last operator of the chain, summed
    busy_ms_per_second: float  # busyTimeMsPerSecond, the subtasks' average
    pending_records: float | None = None  # a source's backlog (pendingRecords), summed; None: unknown


@dataclass(frozen=True)
class Collected:
    at: float  # seconds (any clock shared with ``now``)
    samples: dict[str, Sample]


@dataclass(frozen=True)
class Settings:
    """``spec.autoscaler``, durations in seconds."""

    enabled: bool = False
    dry_run: bool = False
    target_utilization: float = 0.7
    target_utilization_boundary: float = 0.3
    metrics_window: float = 600.0
    stabilization_interval: float = 300.0
    scale_down_interval: float = 3600.0
    catch_up_duration: float = 900.0
    restart_time: float = 300.0  # until restarts have been measured
    min_parallelism: int = 1
    max_parallelism: int | None = None
    scale_up_max_factor: float = 100000.0
    scale_down_max_factor: float = 0.6
    excluded_operators: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Memory:
    """What the autoscaler remembers between decisions (kept in ``status.autoscaler``)."""

    stable_since: float | None = None  # the job has been running since (a deploy, a rescale, a restart)
    scale_down_since: dict[str, float] = field(default_factory=dict)  # vertex -> first recommended lower
    restart_times: tuple[float, ...] = ()  # measured rescale downtimes, newest last


@dataclass(frozen=True)
class Evaluation:
    """A vertex's numbers over the window, and what they call for."""

    vertex: str
    current: int
    recommended: int
    true_processing_rate: float  # records/s at full busy, all subtasks (inf: not measurable)
    target_data_rate: float
    utilization: float  # target / true processing rate
    busy_ratio: float
    lag: float | None = None
    reason: str = ""


@dataclass
class Decision:
    """``parallelism``: vertex -> the parallelism to run at (only what changes); empty: nothing to do."""

    evaluations: dict[str, Evaluation] = field(default_factory=dict)
    parallelism: dict[str, int] = field(default_factory=dict)
    why: str = ""
    memory: Memory = field(default_factory=Memory)
    act: bool = False  # apply now (enabled, not a dry run, something changes)


def restart_time(settings: Settings, memory: Memory) -> float:
    """The downtime a rescale is expected to cost: the longest of the last five measured, else the setting."""
    measured = memory.restart_times[-5:]
    return max(measured) if measured else settings.restart_time


def decide(vertices: Iterable[Vertex], history: list[Collected], settings: Settings, memory: Memory,
           now: float) -> Decision:
    vertices = list(vertices)
    by_id = {v.id: v for v in vertices}
    if not settings.enabled:
        return Decision(why="the autoscaler is disabled", memory=memory)
    if memory.stable_since is not None and now - memory.stable_since < settings.stabilization_interval:
        left = settings.stabilization_interval - (now - memory.stable_since)
        return Decision(why=f"stabilizing after the last (re)start: {left:.0f} s of stabilizationInterval left",
                        memory=memory)
    since = max(now - settings.metrics_window, memory.stable_since or -math.inf)
    window = [c for c in history if c.at >= since]
    if len(window) < 2 or window[-1].at - window[0].at < settings.metrics_window * 0.9:
        span = window[-1].at - window[0].at if len(window) >= 2 else 0.0
        return Decision(why=f"collecting metrics: {span:.0f} of {settings.metrics_window:.0f} s of metricsWindow",
                        memory=memory)
    averages = {v.id: _average(v.id, window) for v in vertices}
    if any(a is None for a in averages.values()):
        missing = sorted(v for v, a in averages.items() if a is None)
        return Decision(why=f"no metrics for {', '.join(missing)} in the window", memory=memory)
    targets = _target_rates(vertices, by_id, averages, window, settings, restart_time(settings, memory))
    evaluations: dict[str, Evaluation] = {}
    for v in vertices:
        evaluations[v.id] = _evaluate(v, averages[v.id], targets[v.id], _lag(v.id, window), settings)
    return _timed(vertices, evaluations, settings, memory, now)


def _average(vertex: str, window: list[Collected]) -> Sample | None:
    samples = [c.samples[vertex] for c in window if vertex in c.samples]
    if not samples:
        return None
    n = len(samples)
    return Sample(sum(s.records_in_per_second for s in samples) / n, sum(s.records_out_per_second for s in samples) / n,
                  sum(s.busy_ms_per_second for s in samples) / n)


def _lag(vertex: str, window: list[Collected]) -> tuple[float, float] | None:
    """(backlog now, its growth per second over the window), for a source that reports one."""
    points = [(c.at, c.samples[vertex].pending_records) for c in window
              if vertex in c.samples and c.samples[vertex].pending_records is not None]
    if not points:
        return None
    (t0, first), (t1, last) = points[0], points[-1]
    return last, (last - first) / (t1 - t0) if t1 > t0 else 0.0


def _target_rates(vertices: list[Vertex], by_id: dict[str, Vertex], averages: dict[str, Sample],
                  window: list[Collected], settings: Settings, restart: float) -> dict[str, float]:
    """Target data rate per vertex, sources first (FLIP-271: input rate + catch-up, then output ratios)."""
    targets: dict[str, float] = {}
    pending = list(vertices)
    while pending:
        progressed = False
        for v in list(pending):
            if any(u not in targets for u in v.inputs if u in by_id):
                continue
            if v.source:
                a = averages[v.id]
                lag = _lag(v.id, window)
                input_rate = a.records_in_per_second + (max(0.0, lag[1]) if lag else 0.0)
                backlog = (lag[0] if lag else 0.0) + input_rate * restart
                targets[v.id] = input_rate + backlog / settings.catch_up_duration
            else:
                total = 0.0
                for u in v.inputs:
                    if u not in by_id:
                        continue
                    up = averages[u]
                    ratio = up.records_out_per_second / up.records_in_per_second if up.records_in_per_second > 0 else 0.0
                    total += targets[u] * ratio
                targets[v.id] = total
            pending.remove(v)
            progressed = True
        if not progressed:  # a cycle (an iteration's back-edge): what the vertex takes in now
            for v in pending:
                targets[v.id] = averages[v.id].records_in_per_second
            break
    return targets


def _evaluate(v: Vertex, a: Sample, target: float, lag: tuple[float, float] | None, s: Settings) -> Evaluation:
    busy = min(1.0, a.busy_ms_per_second / 1000.0)
    true_rate = a.records_in_per_second / busy if busy >= MIN_BUSY_RATIO else math.inf
    utilization = 0.0 if true_rate == math.inf else (target / true_rate if true_rate > 0 else math.inf)
    common = dict(vertex=v.id, current=v.parallelism, true_processing_rate=true_rate, target_data_rate=target,
                  utilization=utilization, busy_ratio=busy, lag=None if lag is None else lag[0])
    if v.id in s.excluded_operators or v.name in s.excluded_operators:
        return Evaluation(recommended=v.parallelism, reason="excluded (excludedOperators)", **common)
    low, high = s.target_utilization - s.target_utilization_boundary, s.target_utilization + s.target_utilization_boundary
    if low <= utilization <= high:
        return Evaluation(recommended=v.parallelism, reason=f"utilization {utilization:.2f} within "
                                                            f"{max(low, 0):.2f}..{high:.2f}", **common)
    wanted = v.parallelism * utilization / s.target_utilization if utilization != math.inf else math.inf
    recommended, bound = _bounded(v, wanted, s)
    direction = "up" if recommended > v.parallelism else "down" if recommended < v.parallelism else "kept"
    reason = (f"utilization {utilization:.2f} outside {max(low, 0):.2f}..{high:.2f}: scale {direction} to "
              f"{recommended}" + (f" ({bound})" if bound else ""))
    return Evaluation(recommended=recommended, reason=reason, **common)


def _bounded(v: Vertex, wanted: float, s: Settings) -> tuple[int, str]:
    """The parallelism for ``wanted`` (fractional), within every bound; and the bound that decided, if any."""
    p, bound = (math.ceil(wanted - 1e-9) if wanted != math.inf else v.max_parallelism), ""
    floor = max(1, math.ceil(v.parallelism * (1 - s.scale_down_max_factor) - 1e-9))
    ceiling = math.ceil(v.parallelism * (1 + s.scale_up_max_factor) - 1e-9)
    if p < floor:
        p, bound = floor, f"scaleDownMaxFactor {s.scale_down_max_factor:g}"
    if p > ceiling:
        p, bound = ceiling, f"scaleUpMaxFactor {s.scale_up_max_factor:g}"
    upper = min(v.max_parallelism, s.max_parallelism or v.max_parallelism)
    if v.partitions:
        if v.partitions < upper:
            upper, limit = v.partitions, f"{v.partitions} partitions"
        else:
            limit = "maxParallelism"
    else:
        limit = "maxParallelism"
    if p > upper:
        p, bound = upper, limit
    if p < s.min_parallelism:
        p, bound = min(s.min_parallelism, upper), "minParallelism"
    # Even spreading: a keyed vertex's key groups, a source's partitions.
    if v.keyed:
        p = _divisor_at_or_above(p, v.max_parallelism, upper)
    elif v.source and v.partitions:
        p = _divisor_at_or_above(p, v.partitions, upper)
    return p, bound


def _divisor_at_or_above(p: int, n: int, upper: int) -> int:
    """The smallest divisor of ``n`` from ``p`` up to ``upper`` (and at most n/2, as Flink's), else ``p``."""
    for candidate in range(p, min(upper, n // 2) + 1):
        if n % candidate == 0:
            return candidate
    return p


def _timed(vertices: list[Vertex], evaluations: dict[str, Evaluation], s: Settings, memory: Memory,
           now: float) -> Decision:
    """Scale-ups at once; a scale-down only after scaleDownInterval of asking for it without a break."""
    ups = {v: e.recommended for v, e in evaluations.items() if e.recommended > e.current}
    downs = {v: e.recommended for v, e in evaluations.items() if e.recommended < e.current}
    since = {v: t for v, t in memory.scale_down_since.items() if v in downs}
    for v in downs:
        since.setdefault(v, now)
    due = {v: p for v, p in downs.items() if now - since[v] >= s.scale_down_interval}
    parallelism = {**ups, **due}
    act = bool(parallelism) and not s.dry_run
    notes = []
    if ups:
        notes.append("scale up " + ", ".join(f"{v} {evaluations[v].current} -> {p}" for v, p in sorted(ups.items())))
    if due:
        notes.append("scale down " + ", ".join(f"{v} {evaluations[v].current} -> {p}" for v, p in sorted(due.items())))
    for v in sorted(set(downs) - set(due)):
        if not ups:
            left = s.scale_down_interval - (now - since[v])
            notes.append(f"{v} would scale down to {downs[v]} in {left:.0f} s (scaleDownInterval)")
    if not notes:
        notes.append("every vertex within its target utilization")
    if s.dry_run and parallelism:
        notes.append("dry run: nothing applied")
    # A rescale starts pending scale-downs over (and the stabilization interval: the caller's stable_since).
    new_memory = Memory(stable_since=memory.stable_since, scale_down_since={} if act else since,
                        restart_times=memory.restart_times)
    return Decision(evaluations=evaluations, parallelism=parallelism, why="; ".join(notes), memory=new_memory,
                    act=act)


__all__ = ["Collected", "Decision", "Evaluation", "Memory", "Sample", "Settings", "Vertex", "decide", "restart_time"]
