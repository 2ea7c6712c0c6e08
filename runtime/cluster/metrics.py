"""Prometheus metrics of one job, read from the job manager at scrape time (prometheus-client).

Names are Flink's job and checkpoint metrics in snake case with a ``streamjob_``
prefix, in Prometheus base units (seconds, bytes; counters end in ``_total``),
and every sample has a ``job`` label (the job name) and ``job_id``:

=============================================================  ==========================================
streamjob_number_of_completed_checkpoints_total               numberOfCompletedCheckpoints (+ savepoints)
streamjob_number_of_failed_checkpoints_total                  numberOfFailedCheckpoints
streamjob_number_of_in_progress_checkpoints                   numberOfInProgressCheckpoints
streamjob_checkpoint_interval_seconds                         execution.checkpointing.interval (for alert rules)
streamjob_number_of_completed_savepoints_total / failed       savepoints by outcome
streamjob_last_checkpoint_duration_seconds                    lastCheckpointDuration
streamjob_last_checkpoint_size_bytes                          lastCheckpointSize (bytes written)
streamjob_last_checkpoint_full_size_bytes                     lastCheckpointFullSize
streamjob_last_completed_checkpoint_id                        lastCompletedCheckpointId
streamjob_last_checkpoint_completed_timestamp_seconds         when the last one completed (for staleness)
streamjob_last_checkpoint_restore_timestamp_seconds           lastCheckpointRestoreTimestamp
streamjob_checkpoint_alignment_time_seconds                   checkpointAlignmentTime (slowest task, last)
streamjob_last_checkpoint_persisted_data_bytes                REST persisted_data of the last checkpoint: in-flight
                                                              bytes an unaligned checkpoint stored (channel state)
streamjob_last_checkpoint_processed_data_bytes                REST processed_data: bytes processed while overtaken
streamjob_last_checkpoint_feedback_logged_bytes               REST feedback_logged: fed-back records the loops' heads
                                                              logged with the last checkpoint (iterations)
streamjob_last_checkpoint_unaligned                           1 if the last checkpoint was UNALIGNED_CHECKPOINT
streamjob_checkpoint_start_delay_seconds                      checkpointStartDelayNanos (slowest task, last)
streamjob_num_restarts_total                                  numRestarts
streamjob_uptime_seconds / streamjob_job_state{state}          uptime, and 1 for the current state
streamjob_num_records_in_total / _out_total {operator}        numRecordsIn / numRecordsOut
streamjob_current_output_watermark {operator, subtask}        currentOutputWatermark (ms; event time only)
streamjob_busy_time_seconds_total {task, subtask}             busyTimeMsPerSecond, as a counter
streamjob_back_pressured_time_seconds_total {task, subtask}   backPressuredTimeMsPerSecond, as a counter
streamjob_idle_time_seconds_total {task, subtask}             idleTimeMsPerSecond, as a counter
streamjob_busy_time_ms_per_second {task, subtask}             busyTimeMsPerSecond (and the same for
streamjob_back_pressured_time_ms_per_second, _idle_time_...)  the other two): over the last few seconds
streamjob_is_back_pressured {task, subtask}                   isBackPressured
=============================================================  ==========================================

Metrics registered on an operator's ``MetricGroup`` (``api/metrics.py``) carry ``operator`` and
``subtask`` labels and a label per key-value group (``add_group("topic", "clicks")``: ``topic="clicks"``):

- a user's (``runtime_context.get_metrics_group()``) is ``streamjob_user_<name>`` with a ``group`` label
  (its groups, dot-joined; ``""`` for none): a counter ``..._total``; a gauge; a meter ``..._total`` (events)
  and ``..._per_second`` (its rate over its time span); a distribution ``..._count``, ``..._sum``,
  ``..._min``, ``..._max``;
- a connector's is named by its groups and name in snake case: ``streamjob_pending_records``,
  ``streamjob_kafka_source_reader_current_offset{topic, partition}`` (Flink's
  ``KafkaSourceReader.topic.<t>.partition.<p>.currentOffset``), counters with ``_total``.

A name taken by a metric of another type (two operators' metrics of one name) keeps the first
type; the others are left out (one Prometheus family has one type).
"""

from __future__ import annotations

import logging
import re
from typing import Any, Iterable, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from ..task.task_time import BACK_PRESSURED, METRICS

log = logging.getLogger("streamjob.metrics")

STATES = ("CREATED", "RUNNING", "RESTARTING", "FINISHED", "FAILED", "CANCELED")


class JobMetrics:
    """A registry of its own per job manager (several jobs in one process never mix)."""

    def __init__(self, jm: Any):
        self.jm = jm
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    def exposition(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST

    def collect(self) -> Iterator[Any]:
        jm = self.jm
        labels = ["job", "job_id"]
        values = [jm.job_name, jm.job_id]

        def gauge(name: str, doc: str, value: float | None) -> GaugeMetricFamily:
            g = GaugeMetricFamily(name, doc, labels=labels)
            if value is not None:
                g.add_metric(values, value)
            return g

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            c = CounterMetricFamily(name, doc, labels=labels)
            c.add_metric(values, value)
            return c

        snap = jm.metrics_snapshot()
        state = GaugeMetricFamily("streamjob_job_state", "1 for the job's current state", labels=[*labels, "state"])
        for s in STATES:
            state.add_metric([*values, s], 1.0 if snap["state"] == s else 0.0)
        yield state
        yield gauge("streamjob_uptime_seconds", "Seconds since the job started", snap["uptime"])
        yield counter("streamjob_num_restarts_total", "Restarts after failures (numRestarts)", snap["restarts"])
        cp = snap["checkpoints"]
        yield counter("streamjob_number_of_completed_checkpoints_total",
                      "Completed checkpoints and savepoints (numberOfCompletedCheckpoints)", cp["completed"])
        yield counter("streamjob_number_of_failed_checkpoints_total",
                      "Failed, expired or declined checkpoints and savepoints (numberOfFailedCheckpoints)",
                      cp["failed"])
        yield gauge("streamjob_checkpoint_interval_seconds",
                    "Configured checkpoint interval (absent when checkpointing is off): alerts scale with it",
                    snap["checkpoint_interval"])
        sp = snap["savepoints"]
        yield counter("streamjob_number_of_completed_savepoints_total", "Savepoints that completed", sp["COMPLETED"])
        yield counter("streamjob_number_of_failed_savepoints_total", "Savepoints that failed", sp["FAILED"])
        yield gauge("streamjob_number_of_in_progress_checkpoints", "Checkpoints in flight (numberOfInProgressCheckpoints)",
                    cp["in_progress"])
        last = cp["last"]
        yield gauge("streamjob_last_checkpoint_duration_seconds", "Trigger to completion of the last completed checkpoint",
                    None if last is None else last["duration_ms"] / 1000.0)
        yield gauge("streamjob_last_checkpoint_size_bytes", "Bytes the last completed checkpoint wrote (lastCheckpointSize)",
                    None if last is None else last["checkpointed_size"])
        yield gauge("streamjob_last_checkpoint_full_size_bytes", "Full state size of the last completed checkpoint",
                    None if last is None else last["state_size"])
        yield gauge("streamjob_last_completed_checkpoint_id", "Id of the last completed checkpoint",
                    None if last is None else last["id"])
        yield gauge("streamjob_last_checkpoint_completed_timestamp_seconds",
                    "Unix time the last checkpoint completed (alert when it gets old)",
                    None if last is None else last["completed_time"])
        yield gauge("streamjob_checkpoint_alignment_time_seconds",
                    "Barrier alignment of the slowest task in the last completed checkpoint",
                    None if last is None else last["max_alignment_ms"] / 1000.0)
        yield gauge("streamjob_last_checkpoint_persisted_data_bytes",
                    "In-flight bytes the last completed checkpoint persisted as channel state (persisted_data; "
                    "unaligned checkpoints)", None if last is None else last.get("persisted_data", 0))
        yield gauge("streamjob_last_checkpoint_processed_data_bytes",
                    "Bytes processed while the last completed checkpoint's barriers overtook them (processed_data)",
                    None if last is None else last.get("processed_data", 0))
        yield gauge("streamjob_last_checkpoint_feedback_logged_bytes",
                    "Bytes of fed-back records the loops' heads logged with the last completed checkpoint "
                    "(iterations; part of persisted_data)", None if last is None else last.get("feedback_logged", 0))
        yield gauge("streamjob_last_checkpoint_unaligned",
                    "1 if barriers overtook in-flight data in the last completed checkpoint (UNALIGNED_CHECKPOINT)",
                    None if last is None else float(last.get("checkpoint_type") == "UNALIGNED_CHECKPOINT"))
        yield gauge("streamjob_checkpoint_start_delay_seconds",
                    "Trigger to the snapshot of the task the barrier reached last, in the last completed checkpoint "
                    "(checkpointStartDelayNanos): grows with backpressure unless checkpoints are unaligned",
                    None if last is None else last.get("max_start_delay_ms", 0.0) / 1000.0)
        yield gauge("streamjob_last_checkpoint_restore_timestamp_seconds",
                    "Unix time the job last restored state from a checkpoint or savepoint",
                    snap["restored_time"])
        rin = CounterMetricFamily("streamjob_num_records_in", "Records into an operator (numRecordsIn)",
                                  labels=[*labels, "operator"])
        rout = CounterMetricFamily("streamjob_num_records_out", "Records out of an operator (numRecordsOut)",
                                   labels=[*labels, "operator"])
        for name, (i, o) in sorted(snap["records"].items()):
            rin.add_metric([*values, name], i)
            rout.add_metric([*values, name], o)
        yield rin
        yield rout
        wm = GaugeMetricFamily("streamjob_current_output_watermark",
                               "Event-time watermark an operator subtask last emitted, in ms since the epoch "
                               "(currentOutputWatermark); absent before its first watermark",
                               labels=[*labels, "operator", "subtask"])
        for name, per in sorted(snap["watermarks"].items()):
            for subtask, value in sorted(per.items()):
                wm.add_metric([*values, name, str(subtask)], float(value))
        yield wm
        task_labels = [*labels, "task", "subtask"]
        seconds = {
            "busy": CounterMetricFamily("streamjob_busy_time_seconds", "Time a task processed records and events "
                                        "(rate() * 1000 = busyTimeMsPerSecond)", labels=task_labels),
            "bp": CounterMetricFamily("streamjob_back_pressured_time_seconds", "Time a task could not go on because "
                                      "downstream had no room or was working off its output (rate() * 1000 = "
                                      "backPressuredTimeMsPerSecond)", labels=task_labels),
            "idle": CounterMetricFamily("streamjob_idle_time_seconds", "Time a task had no input (rate() * 1000 = "
                                        "idleTimeMsPerSecond)", labels=task_labels)}
        per_second = {name: GaugeMetricFamily(f"streamjob_{snake(name)}", f"Flink's {name} over the last few "
                                              f"seconds of the task's reports", labels=task_labels)
                      for name in METRICS.values()}
        is_bp = GaugeMetricFamily("streamjob_is_back_pressured", "1 while a task is back-pressured (isBackPressured)",
                                  labels=task_labels)
        for (task, subtask), (busy, bp, idle, state, rates) in sorted(snap["task_time"].items()):
            label_values = [*values, task, str(subtask)]
            for key, value in (("busy", busy), ("bp", bp), ("idle", idle)):
                seconds[key].add_metric(label_values, value)
            for name, value in rates.items():
                per_second[name].add_metric(label_values, value)
            is_bp.add_metric(label_values, 1.0 if state == BACK_PRESSURED else 0.0)
        yield from seconds.values()
        yield from per_second.values()
        yield is_bp
        yield from operator_families(labels, values, snap["user"])


def snake(name: str) -> str:
    """Flink's camelCase metric and group names as Prometheus ones: ``pendingRecords`` -> ``pending_records``."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def operator_families(labels: list[str], values: list[str], reported: Iterable[tuple]) -> list[Metric]:
    """The families of the user and connector metrics the tasks reported: (op id, operator, subtask,
    entries) as ``JobManager.operator_metrics`` gives them."""
    families: dict[str, Metric] = {}
    refused: set[str] = set()

    def add(name: str, kind: str, doc: str, suffix: str, sample_labels: dict, value: Any) -> None:
        if value is None:
            return
        family = families.get(name)
        if family is None:
            family = families[name] = Metric(name, doc, kind)
        elif family.type != kind:
            if name not in refused:
                refused.add(name)
                log.warning("metric %s is a %s already; a %s of that name is left out", name, family.type, kind)
            return
        family.add_sample(name + suffix, sample_labels, float(value))

    base = dict(zip(labels, values))
    for _op, operator, subtask, entries in reported:
        for system, _path, groups, variables, name, kind, value in entries:
            sample = {**base, "operator": operator, "subtask": str(subtask)}
            if system:
                metric = "streamjob_" + "_".join(snake(g) for g in [*groups, name])
                doc = f"{'.'.join([*groups, name])} (connector metric)"
            else:
                metric = f"streamjob_user_{name}"
                sample["group"] = ".".join(groups)
                doc = f"user metric {name}"
            sample.update(variables)
            if kind == "counter":
                add(metric, "counter", doc, "_total", sample, value)
            elif kind == "gauge":
                add(metric, "gauge", doc, "", sample, value)
            elif kind == "meter":
                add(metric, "counter", f"{doc}: events", "_total", sample, value[0])
                add(metric + "_per_second", "gauge", f"{doc}: events per second over its time span", "", sample,
                    value[1])
            elif kind == "distribution":
                count, total, low, high = value
                add(metric, "summary", f"{doc}: count and sum of its values", "_count", sample, count)
                add(metric, "summary", f"{doc}: count and sum of its values", "_sum", sample, total)
                add(metric + "_min", "gauge", f"{doc}: smallest value", "", sample, low)
                add(metric + "_max", "gauge", f"{doc}: largest value", "", sample, high)
    return list(families.values())



def vertex_metrics(plan: dict, reported: Iterable[tuple], vertex_id: int,
                   task_times: dict[tuple[str, int], dict[str, float]] | None = None) -> dict[str, str] | None:
    """The metrics of one task vertex by Flink's REST metric ids, with values as strings, as Flink's
    ``/jobs/:jobid/vertices/:vertexid/metrics``: its task's ``<subtask>.busyTimeMsPerSecond``,
    ``.backPressuredTimeMsPerSecond`` and ``.idleTimeMsPerSecond`` (``task_times``: (task name, subtask)
    -> those), and its operators' user and connector metrics, ``<subtask>.<operator>.<groups...>.<name>``
    (a key-value group is its key and value). A meter's value is its rate (its count is ``<id>.count``);
    a distribution has ``<id>.count``, ``.sum``, ``.min``, ``.max``. None: no such vertex."""
    vertex = next((v for v in plan["vertices"] if v["id"] == vertex_id), None)
    if vertex is None:
        return None
    ops = {o["id"] for o in vertex["operators"]}
    out: dict[str, str] = {}
    for (task, subtask), times in sorted((task_times or {}).items()):
        if task == vertex["name"]:
            for name, value in times.items():
                out[f"{subtask}.{name}"] = _text(value)
    for op, operator, subtask, entries in reported:
        if op not in ops:
            continue
        for _system, path, _groups, _variables, name, kind, value in entries:
            metric = ".".join([str(subtask), operator, *path, name])
            if kind == "meter":
                out[metric] = _text(value[1])
                out[metric + ".count"] = _text(value[0])
            elif kind == "distribution":
                for part, v in zip(("count", "sum", "min", "max"), value):
                    if v is not None:
                        out[f"{metric}.{part}"] = _text(v)
            elif value is not None:
                out[metric] = _text(value)
    return out


def _text(value: Any) -> str:
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


AGGREGATIONS = ("min", "max", "sum", "avg")


def subtask_aggregates(per_subtask: dict[str, str], wanted: list[str] | None,
                       aggregations: tuple[str, ...] = AGGREGATIONS) -> list[dict[str, Any]]:
    """Flink's ``/jobs/:jobid/vertices/:vertexid/subtasks/metrics``: a vertex's metrics aggregated over
    its subtasks, by their id without the subtask (``<operator>.<groups>.<name>``). ``per_subtask`` is
    ``vertex_metrics``'s answer; ``wanted`` None: the ids there are (``[{"id"}]``)."""
    by_id: dict[str, list[float]] = {}
    for metric, value in per_subtask.items():
        _subtask, _, rest = metric.partition(".")
        try:
            by_id.setdefault(rest, []).append(float(value))
        except ValueError:  # not a number: nothing to aggregate
            continue
    if wanted is None:
        return [{"id": k} for k in sorted(by_id)]
    out = []
    for metric in wanted:
        values = by_id.get(metric)
        if not values:
            continue
        agg = {"min": min(values), "max": max(values), "sum": sum(values), "avg": sum(values) / len(values)}
        out.append({"id": metric, **{a: agg[a] for a in aggregations}})
    return out
