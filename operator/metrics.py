"""The operator's own Prometheus metrics (prometheus-client), served with its health endpoint."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from .model import LifecycleState, StreamJobStatus

CONDITIONS = ("Ready", "Progressing", "Degraded")


class OperatorMetrics:
    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        self.reconciles = Counter("streamjob_operator_reconciles", "Reconcile passes (observe, decide, act)",
                                  registry=self.registry)
        self.reconcile_errors = Counter("streamjob_operator_reconcile_errors",
                                        "Reconcile passes that failed on an API error", registry=self.registry)
        self.reconcile_seconds = Histogram("streamjob_operator_reconcile_duration_seconds",
                                           "Time of one reconcile pass", registry=self.registry,
                                           buckets=(.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10))
        self.reconcile_queue_seconds = Histogram("streamjob_operator_reconcile_queue_seconds",
                                                 "Wait for a reconcile slot (--max-concurrent-reconciles)",
                                                 registry=self.registry,
                                                 buckets=(.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30))
        self.savepoints_triggered = Counter("streamjob_operator_savepoints_triggered",
                                            "Savepoint triggers sent to job managers", registry=self.registry)
        self.savepoints_failed = Counter("streamjob_operator_savepoints_failed",
                                         "Savepoint triggers a job manager refused", registry=self.registry)
        self.jobs = Gauge("streamjob_operator_streamjobs", "StreamJobs per lifecycle state", ["lifecycle_state"],
                          registry=self.registry)
        # Per StreamJob, so an alert names the job (label cardinality: one series per job and condition).
        self.conditions = Gauge("streamjob_operator_streamjob_condition",
                                "1 while the StreamJob's condition is True (Ready, Progressing, Degraded)",
                                ["namespace", "name", "condition"], registry=self.registry)
        # The autoscaler's evaluation per job vertex (status.autoscaler.vertices), as the flink-kubernetes-
        # operator's AutoScaler metrics: one series per job, vertex and metric.
        self.autoscaler = Gauge("streamjob_operator_autoscaler", "The autoscaler's last evaluation of a job vertex: "
                                "currentParallelism, recommendedParallelism, trueProcessingRate, targetDataRate, "
                                "utilization, busyRatio, lag", ["namespace", "name", "vertex", "metric"],
                                registry=self.registry)
        self._autoscaled: dict[tuple[str, str], set[tuple[str, str]]] = {}  # (namespace, name) -> its series
        self._states: dict[str, str] = {}  # uid -> lifecycle state
        for state in LifecycleState:
            self.jobs.labels(state.value).set(0)

    def observe_reconcile(self, seconds: float, status: StreamJobStatus, uid: str, namespace: str, name: str) -> None:
        self.reconciles.inc()
        self.reconcile_seconds.observe(seconds)
        self.set_state(uid, status.lifecycle_state)
        true = {c.type for c in status.conditions if c.status == "True"}
        for condition in CONDITIONS:
            self.conditions.labels(namespace, name, condition).set(1.0 if condition in true else 0.0)
        self._autoscaler(status, namespace, name)

    def _autoscaler(self, status: StreamJobStatus, namespace: str, name: str) -> None:
        series: set[tuple[str, str]] = set()
        for v in status.autoscaler.vertices if status.autoscaler is not None else []:
            for metric, value in (("currentParallelism", v.current_parallelism),
                                  ("recommendedParallelism", v.recommended_parallelism),
                                  ("trueProcessingRate", v.true_processing_rate), ("targetDataRate", v.target_data_rate),
                                  ("utilization", v.utilization), ("busyRatio", v.busy_ratio), ("lag", v.lag)):
                if value is not None:
                    self.autoscaler.labels(namespace, name, v.vertex, metric).set(value)
                    series.add((v.vertex, metric))
        for vertex, metric in self._autoscaled.pop((namespace, name), set()) - series:
            self.autoscaler.remove(namespace, name, vertex, metric)
        if series:
            self._autoscaled[(namespace, name)] = series

    def forget(self, uid: str, namespace: str, name: str) -> None:
        """A deleted StreamJob leaves every per-job series."""
        self.set_state(uid, None)
        for vertex, metric in self._autoscaled.pop((namespace, name), set()):
            self.autoscaler.remove(namespace, name, vertex, metric)
        for condition in CONDITIONS:
            try:
                self.conditions.remove(namespace, name, condition)
            except KeyError:
                pass

    def set_state(self, uid: str, state: str | None) -> None:
        old = self._states.pop(uid, None)
        if old is not None:
            self.jobs.labels(old).dec()
        if state is not None:
            self._states[uid] = state
            self.jobs.labels(state).inc()
