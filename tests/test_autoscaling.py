"""The autoscaler in the operator's decision: ``spec.autoscaler`` -> evaluations in ``status.autoscaler``,
ScalingReport events, a rescale in place of the vertices that need it (the job manager's PUT with their
uids), its completion, refusal and dry run; and the operator's Prometheus series of it.

``LoadWorld`` extends the reconciler tests' ``World`` with a job of two vertices whose metrics follow a
load model (a source of 8 Kafka partitions reading up to 1,000 records/s per subtask, a keyed count
processing 400/s per subtask, 128 key groups): the busy time, rates and backlog a real job manager would
report at that input rate. The same decision runs against a real job's /v1/job in tests/test_task_time.py
(the autoscaler's view of it) and the algorithm itself in tests/test_autoscaler.py.
"""

from __future__ import annotations

from dataclasses import replace

from prometheus_client import CollectorRegistry

from streamjob.operator import reconciler as R
from streamjob.operator import resources
from streamjob.operator.autoscaler import Collected, Sample, Vertex
from streamjob.operator.metrics import OperatorMetrics
from streamjob.operator.model import StreamJobSpec
from streamjob.operator.observation import AUTOSCALE, RescaleObservation

from test_reconciler import BASE, World

AUTOSCALER = {"enabled": True, "metricsWindow": "60s", "metricsInterval": "5s", "stabilizationInterval": "30s",
              "scaleDownInterval": "120s", "catchUpDuration": "60s", "restartTime": "5s"}
CAPACITY = {"src": 1000.0, "count": 400.0}  # records/s one subtask processes, busy all the time


class LoadWorld(World):
    def __init__(self, autoscaler: dict | None = None, rate: float = 300.0, **spec):
        super().__init__({**BASE, "autoscaler": {**AUTOSCALER, **(autoscaler or {})}, **spec})
        self.rate = rate  # records/s into the source's topic
        self.parallelism = {"src": 2, "count": 2}
        self.lag = 0.0
        self.history: list[Collected] = []
        self.refuse_rescales: str | None = None
        self.rescales: list[dict[str, int]] = []

    def vertices(self) -> tuple[Vertex, ...]:
        return (Vertex("src", "Source: clicks", self.parallelism["src"], 128, partitions=8),
                Vertex("count", "count -> Sink: out", self.parallelism["count"], 128, inputs=("src",), keyed=True))

    def sample(self, seconds: float) -> Collected:
        """What the job does in the last ``seconds`` at ``rate``: each vertex processes what it can."""
        src_cap = CAPACITY["src"] * self.parallelism["src"]
        count_cap = CAPACITY["count"] * self.parallelism["count"]
        read = min(self.rate + self.lag / max(seconds, 1.0), src_cap, count_cap)  # back pressure reaches the source
        self.lag = max(0.0, self.lag + (self.rate - read) * seconds)
        return Collected(self.now.timestamp(), {
            "src": Sample(read, read, 1000.0 * read / src_cap, self.lag),
            "count": Sample(read, read, 1000.0 * read / count_cap)})

    def observe(self):
        obs = super().observe()
        job = obs.job
        if job is None or not job.reachable or job.state != "RUNNING":
            return obs
        r = self.job().get("autoscale")
        rescale = None
        if r is not None:
            rescale = RescaleObservation(r["id"], r["status"], None, 9 if r["status"] == "COMPLETED" else None,
                                         operators=dict(r["operators"]), restart_s=1.5)
            if r["status"] == "RESTARTING":  # done by the next look
                r["status"] = "COMPLETED"
                self.parallelism.update(r["operators"])
        self.history.append(self.sample(5.0))
        return replace(obs, job=replace(job, vertices=self.vertices(), sample=self.history[-1], rescale=rescale),
                       metrics_history=tuple(self.history))

    def apply(self, action) -> None:
        if isinstance(action, R.RescaleJob) and action.operators:
            if self.refuse_rescales:
                self.rescale_errors[AUTOSCALE] = self.refuse_rescales
                return
            operators = dict(action.operators)
            if (self.job().get("autoscale") or {}).get("operators") != operators:
                self.rescales.append(operators)
                self.job()["autoscale"] = {"id": f"r{next(self.ids)}", "status": "RESTARTING", "operators": operators}
            return
        super().apply(action)
        if isinstance(action, R.Deploy) and len(self.deploys) > 1:  # a new job: the spec's parallelism and
            # the overrides it was deployed with
            self.parallelism = {"src": action.parallelism, "count": action.parallelism, **dict(action.overrides)}

    def run(self, seconds: float) -> None:
        for _ in range(int(seconds / 5)):
            self.tick(5.0)


def scaling_reports(w: World) -> list[str]:
    return [e.message for e in w.events if e.reason.value == "ScalingReport"]


def test_a_rate_step_scales_the_busy_vertex_up_in_place_then_stabilizes():
    w = LoadWorld(rate=300.0)
    w.running()
    w.run(90)  # a full metrics window at 300/s: the count runs at 300 / 800 = 0.375, within 0.4..1.0
    a = w.status.autoscaler
    assert a.vertices and not w.rescales, a
    count = next(v for v in a.vertices if v.vertex == "count")
    assert count.current_parallelism == count.recommended_parallelism == 2 and 0.3 < count.utilization < 0.45
    assert count.true_processing_rate == 800.0  # 300/s at 37.5% busy
    assert "within" in count.reason

    w.rate = 900.0  # 3x: the count (800/s in all) falls behind, the backlog grows
    w.run_until(lambda: "Rescaled" in w.reasons(), ticks=24, seconds=5.0)  # within the 60 s metrics window
    first = w.rescales[0]
    # 900/s and the backlog to catch up within catchUpDuration, at 0.7 of 400/s per subtask: 4, rounded up to a
    # divisor of the 128 key groups; the source (8 partitions) to a divisor of 8 as well.
    assert first["count"] >= 4 and 128 % first["count"] == 0, first
    assert all(8 % p == 0 for v, p in first.items() if v == "src"), first
    assert w.parallelism["count"] == first["count"]
    assert w.reasons().count("ScalingReport") >= 1 and "Rescaled" in w.reasons()
    report = scaling_reports(w)[0]
    assert report.startswith("rescaling ") and "count: 2 -> " in report and "true processing rate 800/s" in report
    a = w.status.autoscaler
    assert a.overrides["count"] >= first["count"] and a.pending is None and a.restart_times == [1.5]
    assert w.status.upgrade is None and w.status.lifecycle_state in ("DEPLOYED", "STABLE")
    assert len(w.deploys) == 1  # in place: never a new driver
    # Stabilization: right after the rescale no decision is taken; then the metrics window starts over.
    assert w.status.autoscaler.last_decision.startswith("stabilizing after the last (re)start")
    waiting = {v.vertex: v for v in w.status.autoscaler.vertices}  # what runs now, and why nothing is recommended
    assert waiting["count"].current_parallelism == waiting["count"].recommended_parallelism == first["count"]
    assert waiting["count"].reason.startswith("stabilizing") and waiting["count"].target_data_rate is None
    assert waiting["src"].lag is not None
    w.run(40)
    assert w.status.autoscaler.last_decision.startswith("collecting metrics")
    w.run(60)
    assert w.lag == 0 and len(w.rescales) == 1  # the backlog is worked off, and nothing oscillates
    assert w.status.autoscaler.last_decision == "every vertex within its target utilization"


def test_a_scale_down_waits_for_the_scale_down_interval_and_a_dry_run_only_reports():
    w = LoadWorld(rate=100.0)
    w.parallelism["count"] = 8
    w.running()
    w.run(90)
    a = w.status.autoscaler
    count = next(v for v in a.vertices if v.vertex == "count")
    assert count.recommended_parallelism < 8 and not w.rescales
    assert "would scale down" in a.last_decision and a.scale_down_since.get("count")
    w.run(130)  # scaleDownInterval 120 s of asking for it without a break
    assert w.rescales and w.rescales[-1]["count"] < 8, a.last_decision
    # A scale-down is bounded by scaleDownMaxFactor (0.6): 8 -> at least ceil(8 * 0.4) = 4
    assert w.rescales[-1]["count"] >= 4

    dry = LoadWorld({"dryRun": True}, rate=900.0)
    dry.running()
    dry.run(150)
    assert not dry.rescales and dry.status.upgrade is None
    reports = scaling_reports(dry)
    assert reports and reports[0].startswith("dry run: would rescale"), reports
    assert len(reports) <= 3, reports  # when the recommendation changes, not every metricsInterval
    assert "dry run" in dry.status.autoscaler.last_decision
    assert next(v for v in dry.status.autoscaler.vertices if v.vertex == "count").recommended_parallelism > 2


def test_a_refused_rescale_keeps_the_job_and_says_why_and_disabling_clears_the_status():
    w = LoadWorld(rate=900.0)
    w.refuse_rescales = "409: not enough slots: the job needs 6 slots, and Spark (local[4]) has 4"
    w.running()
    w.run(120)
    a = w.status.autoscaler
    assert a.error and "not enough slots" in a.error and a.pending is None
    assert "AutoscalerError" in w.reasons() and w.status.upgrade is None
    assert len(w.deploys) == 1 and w.status.lifecycle_state in ("DEPLOYED", "STABLE")  # no redeploy for it
    w.refuse_rescales = None
    w.run(120)  # after the stabilization interval it tries again, and succeeds
    assert w.rescales and w.status.autoscaler.error is None

    w.edit(autoscaler={**AUTOSCALER, "enabled": False})
    asked = len(w.rescales)
    w.rate = 3000.0
    w.run(120)
    assert len(w.rescales) == asked  # disabled: nothing more
    spec = dict(w.spec)
    spec.pop("autoscaler")
    w.spec = spec
    w.generation += 1
    w.tick(5)
    assert w.status.autoscaler is None


def test_the_operator_exports_the_autoscaler_s_evaluation_per_vertex():
    w = LoadWorld(rate=300.0)
    w.running()
    w.run(90)
    metrics = OperatorMetrics(CollectorRegistry())
    metrics.observe_reconcile(0.01, w.status, "uid-1", "ns", "wc")
    samples = {(s.labels["vertex"], s.labels["metric"]): s.value
               for s in metrics.registry.collect() for s in s.samples if s.name == "streamjob_operator_autoscaler"}
    assert samples[("count", "currentParallelism")] == 2 and samples[("count", "recommendedParallelism")] == 2
    assert samples[("count", "trueProcessingRate")] == 800.0 and ("src", "lag") in samples
    metrics.forget("uid-1", "ns", "wc")
    assert not [s for f in metrics.registry.collect() for s in f.samples if s.name == "streamjob_operator_autoscaler"]


def test_a_redeploy_keeps_the_parallelism_the_autoscaler_chose_and_an_upgrade_starts_over():
    """A lost driver's redeploy runs the same spec: its job gets the autoscaler's parallelism back (the driver's
    --conf pipeline.jobvertex-parallelism-overrides; tests/test_examples.py resumes a real job so), instead of
    the spec's, which had it fall behind and be rescaled all over again. A user's upgrade runs the user's."""
    w = LoadWorld(rate=900.0)
    w.running()
    w.run_until(lambda: "Rescaled" in w.reasons(), ticks=24, seconds=5.0)
    chosen = dict(w.status.autoscaler.overrides)
    assert chosen.get("count", 2) > 2, chosen
    w.checkpoint(5)
    w.tick()
    del w.pods[w.status.deployment.pod_name]  # the driver is lost
    w.run_until(lambda: len(w.deploys) == 2, seconds=5)
    redeploy = w.deploys[1]
    assert redeploy.restore is not None and redeploy.restore.kind == "checkpoint"
    assert dict(redeploy.overrides) == chosen and w.status.deployment.overrides == chosen
    args = resources.driver_args(StreamJobSpec.model_validate(redeploy.spec), resources.DeploymentTarget(
        number=2, parallelism=redeploy.parallelism, restore=(redeploy.restore.kind, redeploy.restore.path), overrides=redeploy.overrides))
    assert "pipeline.jobvertex-parallelism-overrides=" + ",".join(f"{k}:{n}" for k, n in sorted(chosen.items())) \
        in args, args
    w.running()
    assert w.parallelism["count"] == chosen["count"] and w.status.autoscaler.overrides == chosen
    w.run(60)
    assert len(w.rescales) == 1, w.rescales  # it keeps up at once: nothing to rescale again

    w.edit(image="streamjob:2")  # an upgrade: the spec's parallelism, and the autoscaler starts over
    w.run_until(lambda: w.complete_savepoints() or len(w.deploys) == 3, seconds=5)
    assert w.deploys[2].overrides == () and w.status.deployment.overrides == {}
    assert w.status.autoscaler.overrides == {}
