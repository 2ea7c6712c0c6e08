"""The autoscaler between the StreamJob and ``autoscaler.decide``: settings from ``spec.autoscaler``, its
memory from and its evaluation into ``status.autoscaler``, the ScalingReport text. Pure, like the
reconciler that calls it (``reconciler._autoscale``), which turns a decision into a rescale in place.
"""

from __future__ import annotations

import math
from datetime import datetime

from . import autoscaler as A
from .model import AutoscalerSpec, AutoscalerStatus, AutoscalerVertex, seconds
from .times import from_epoch, parse_time

RESTART_TIMES_KEPT = 5  # the estimate is the longest of the last five measured (autoscaler.restart_time)


def settings_of(spec: AutoscalerSpec) -> A.Settings:
    return A.Settings(enabled=spec.enabled, dry_run=spec.dry_run, target_utilization=spec.target_utilization,
                      target_utilization_boundary=spec.target_utilization_boundary,
                      metrics_window=seconds(spec.metrics_window),
                      stabilization_interval=seconds(spec.stabilization_interval),
                      scale_down_interval=seconds(spec.scale_down_interval),
                      catch_up_duration=seconds(spec.catch_up_duration), restart_time=seconds(spec.restart_time),
                      min_parallelism=spec.min_parallelism, max_parallelism=spec.max_parallelism,
                      scale_up_max_factor=spec.scale_up_max_factor, scale_down_max_factor=spec.scale_down_max_factor,
                      excluded_operators=frozenset(spec.excluded_operators))


def _epoch(text: str | None) -> float | None:
    t = parse_time(text)
    return None if t is None else t.timestamp()


def evaluate(spec: AutoscalerSpec, status: AutoscalerStatus, vertices: tuple[A.Vertex, ...],
             history: tuple[A.Collected, ...], stable_since: str | None, now: datetime) -> tuple[A.Decision,
                                                                                                 AutoscalerStatus]:
    """One decision, and the status that records it. ``stable_since``: when the job last (re)started or
    was rescaled (ISO time; the stabilization interval and the metrics window count from there)."""
    memory = A.Memory(stable_since=_epoch(stable_since),
                      scale_down_since={v: _epoch(t) or 0.0 for v, t in status.scale_down_since.items()},
                      restart_times=tuple(status.restart_times))
    decision = A.decide(vertices, list(history), settings_of(spec), memory, now.timestamp())
    out = status.model_copy(deep=True)
    out.last_evaluation_time = from_epoch(now.timestamp())
    out.last_decision = decision.why
    out.stable_since = stable_since
    out.scale_down_since = {v: from_epoch(t) for v, t in decision.memory.scale_down_since.items()}
    if decision.evaluations:
        names = {v.id: v.name for v in vertices}
        out.vertices = [_vertex(e, names.get(e.vertex, e.vertex)) for e in decision.evaluations.values()]
    else:  # no evaluation now (stabilizing, collecting): what runs and its backlog, and why nothing is recommended
        latest = history[-1].samples if history else {}
        out.vertices = [_waiting(v, latest.get(v.id), decision.why) for v in vertices]
    return decision, out


def _finite(x: float) -> float | None:
    return None if math.isinf(x) or math.isnan(x) else round(x, 3)


def _vertex(e: A.Evaluation, name: str) -> AutoscalerVertex:
    return AutoscalerVertex(vertex=e.vertex, name=name, current_parallelism=e.current,
                            recommended_parallelism=e.recommended, true_processing_rate=_finite(e.true_processing_rate),
                            target_data_rate=round(e.target_data_rate, 3), utilization=_finite(e.utilization),
                            busy_ratio=round(e.busy_ratio, 3), lag=e.lag, reason=e.reason)


def _waiting(v: A.Vertex, sample: A.Sample | None, why: str) -> AutoscalerVertex:
    return AutoscalerVertex(vertex=v.id, name=v.name, current_parallelism=v.parallelism,
                            recommended_parallelism=v.parallelism,
                            busy_ratio=round(sample.busy_ms_per_second / 1000.0, 3) if sample else 0.0,
                            lag=sample.pending_records if sample else None, reason=why)


def report(decision: A.Decision, dry_run: bool) -> str:
    """The ScalingReport event: per vertex that changes, its parallelism and the rates behind it."""
    parts = []
    for vertex, p in sorted(decision.parallelism.items()):
        e = decision.evaluations[vertex]
        rate = "unmeasurable (idle)" if math.isinf(e.true_processing_rate) else f"{e.true_processing_rate:,.0f}/s"
        parts.append(f"{vertex}: {e.current} -> {p} (true processing rate {rate}, target data rate "
                     f"{e.target_data_rate:,.0f}/s, utilization {e.utilization:.2f})")
    return ("dry run: would rescale " if dry_run else "rescaling ") + "; ".join(parts)


def rescaled(status: AutoscalerStatus, operators: dict[str, int], restart_s: float | None,
             now: datetime) -> AutoscalerStatus:
    """A rescale of the autoscaler's completed: its parallelism is the vertices' own now, its downtime
    one more measurement for the restart time estimate, and the stabilization interval starts over."""
    out = status.model_copy(deep=True)
    out.overrides = {**out.overrides, **operators}
    out.pending = None
    out.error = None
    out.last_scaling_time = from_epoch(now.timestamp())
    out.scale_down_since = {}
    if restart_s is not None:
        out.restart_times = [*out.restart_times, round(float(restart_s), 3)][-RESTART_TIMES_KEPT:]
    return out


def not_rescaled(status: AutoscalerStatus, why: str, now: datetime) -> AutoscalerStatus:
    """Refused or failed: said in status; the next try comes after the stabilization interval."""
    out = status.model_copy(deep=True)
    out.pending = None
    out.error = why
    out.last_scaling_time = from_epoch(now.timestamp())
    return out
