"""The autoscaler on a cluster: a Kafka -> keyed -> Kafka job (e2e/jobs/autoscaled.py: a fixed cost per record
at its keyed operator "work") whose input steps from a low rate to 3x and back. The operator's autoscaler
(spec.autoscaler, short windows) scales "work" up in place within its metrics window, the backlog stops
growing and the two vertices run at different parallelism (the source needs one subtask); it scales down once
the scale-down interval has passed, and the output topic, read as a read_committed consumer reads it,
holds every input record once with its key's count: row for row.

Needs a Kafka cluster (E2E_KAFKA_BOOTSTRAP, e2e/README.md): skipped, saying so, without one.
"""

from __future__ import annotations

import sys
import time
import uuid

import pytest

from harness import REPO, streamjob, wait_for
from test_kafka import example, kafka_env

sys.path.insert(0, str(REPO / "e2e" / "jobs"))
import autoscaled  # noqa: E402 - the job's own expected output

pytestmark = pytest.mark.timeout(1200)
LOW, COST_MS = 30.0, 10.0  # records/s; a subtask of "work" does 70-100/s: at LOW within the band, 3x is more
AUTOSCALER = {"enabled": True, "targetUtilization": 0.4, "targetUtilizationBoundary": 0.2,
              "metricsWindow": "20s", "metricsInterval": "2s", "stabilizationInterval": "10s",
              "scaleDownInterval": "40s", "catchUpDuration": "30s", "restartTime": "5s", "maxParallelism": 8}


@pytest.fixture
def t(settings):
    return lambda seconds: seconds * settings.timeout_scale


def autoscaler(cluster, name: str) -> dict:
    return cluster.status(name).get("autoscaler") or {}


def work_parallelism(cluster, name: str) -> int:
    return int(autoscaler(cluster, name).get("overrides", {}).get("work", 1))


def test_autoscaler_sizes_a_kafka_job_to_a_rate_step_and_back_exactly_once(cluster, store, kafka, jobs, settings,
                                                                            mode, t):
    name = jobs.new("autoscale", mode)
    source, output = f"{name}-in-{uuid.uuid4().hex[:6]}", f"{name}-out-{uuid.uuid4().hex[:6]}"
    autoscaled.create_topics(kafka, [source, output])
    producer = autoscaled.StepProducer(kafka, source, LOW)
    producer.start()
    try:
        job = streamjob(settings, name, mode, 0, 0, parallelism=1, autoscaler=AUTOSCALER,
                        job={"file": f"{settings.jobs_dir}/autoscaled.py",
                             "args": ["--input-topic", source, "--output-topic", output, "--cost-ms", str(COST_MS)]},
                        pod={"env": kafka_env(settings)})
        if mode == "kubernetes":
            job["spec"]["executor"]["cores"] = 2
        cluster.create(job)  # kubectl apply -f
        # At LOW every vertex is within its target utilization once a full window has been seen.
        wait_for(lambda: autoscaler(cluster, name).get("lastDecision") == "every vertex within its target utilization",
                 t(300), lambda: f"{name}'s autoscaler to evaluate a full window\n{cluster.describe(name)}")
        assert work_parallelism(cluster, name) == 1

        producer.rate = 3 * LOW  # the step
        stepped = time.monotonic()
        wait_for(lambda: work_parallelism(cluster, name) > 1, t(120),
                 lambda: f"{name} to scale work up\n{autoscaler(cluster, name)}\n{cluster.describe(name)}")
        up, took = work_parallelism(cluster, name), time.monotonic() - stepped
        print(f"scaled up to {up} {took:.0f} s after the step")
        assert "ScalingReport" in cluster.reasons(name) and "Rescaled" in cluster.reasons(name)
        # The backlog stops growing: the source's lag (pendingRecords) comes down to a few seconds of input.

        def lag() -> float:
            src = next((v for v in autoscaler(cluster, name).get("vertices", []) if v["vertex"] == "events"), {})
            return src.get("lag") if src.get("lag") is not None else float("inf")

        wait_for(lambda: lag() < 3 * LOW * 3, t(120), lambda: f"{name}'s lag to come down: {lag()}")

        # Each operator at its own parallelism: the source needs one subtask at this rate, the work more.
        vertices = {v["vertex"]: v for v in autoscaler(cluster, name)["vertices"]}
        assert vertices["events"]["currentParallelism"] == 1 < vertices["work"]["currentParallelism"] == up, vertices

        producer.rate = LOW  # and back
        wait_for(lambda: work_parallelism(cluster, name) < up, t(180),
                 lambda: f"{name} to scale work down\n{autoscaler(cluster, name)}\n{cluster.describe(name)}")
        assert (cluster.status(name).get("deployment") or {}).get("number") == 1  # in place: one driver all along
    finally:
        events = producer.stop()
    want = autoscaled.expected(events)
    read = example("kafka_click_counts").read_counts  # read_committed, to the end of every partition
    wait_for(lambda: len(read(kafka, output)) >= len(want), t(180),
             lambda: f"{len(want)} records in {output}\n{cluster.describe(name)}")
    got = autoscaled.output_rows(read(kafka, output))
    assert got == want, next(((g, w) for g, w in zip(got, want) if g != w), (len(got), len(want)))
