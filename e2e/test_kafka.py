"""Kafka on a cluster: the click event count of docs/connectors/kafka.md (examples/kafka_click_counts.py) as a
StreamJob whose Kafka address and login come from a Secret, its driver pod deleted while it runs,
and its output topic, read as a read_committed consumer reads it, exact.

Needs a Kafka cluster (E2E_KAFKA_BOOTSTRAP and, for a SASL login, E2E_KAFKA_USERNAME /
E2E_KAFKA_PASSWORD; e2e/README.md): skipped, saying so, without one.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
import uuid

import pytest

from harness import REPO, streamjob, wait_for

pytestmark = pytest.mark.timeout(900)
START, STEP, FINISH = 240, 180, 300


@pytest.fixture
def t(settings):
    return lambda seconds: seconds * settings.timeout_scale


def example(name: str):
    sys.path.insert(0, str(REPO / "examples"))
    spec = importlib.util.spec_from_file_location(name, REPO / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def kafka_env(settings) -> list[dict]:
    """The pods' env: the address and the login from the Secret, as examples/k8s/kafka-click-counts.yaml."""
    def ref(name: str, key: str) -> dict:
        return {"name": name, "valueFrom": {"secretKeyRef": {"name": settings.kafka_secret, "key": key}}}

    env = [ref("KAFKA_BOOTSTRAP_SERVERS", "bootstrap-servers")]
    if settings.kafka_username:
        env += [ref("KAFKA_SASL_USERNAME", "username"), ref("KAFKA_SASL_PASSWORD", "password"),
                {"name": "KAFKA_SASL_MECHANISM", "value": settings.kafka_mechanism},
                {"name": "KAFKA_SECURITY_PROTOCOL", "value": settings.kafka_security_protocol}]
    return env


def test_kafka_click_counts_survive_a_lost_driver_exactly_once(cluster, store, kafka, jobs, settings, mode, t,
                                                               monkeypatch):
    """Clicks are written while the job runs; its driver pod is deleted after a checkpoint; the
    redeployed job restores it, commits or aborts what the lost one left, and the output topic holds
    every closed window's count once: 1000 per page."""
    if settings.kafka_username:  # the example reads the login from the env, here as in the pods
        monkeypatch.setenv("KAFKA_SASL_USERNAME", settings.kafka_username)
        monkeypatch.setenv("KAFKA_SASL_PASSWORD", settings.kafka_password)
        monkeypatch.setenv("KAFKA_SASL_MECHANISM", settings.kafka_mechanism)
        monkeypatch.setenv("KAFKA_SECURITY_PROTOCOL", settings.kafka_security_protocol)
    generator, counts = example("kafka_click_generator"), example("kafka_click_counts")
    name = jobs.new("kafka", mode)
    clicks, output = f"{name}-input-{uuid.uuid4().hex[:6]}", f"{name}-output-{uuid.uuid4().hex[:6]}"
    generator.ensure_topics(kafka, [clicks, output])
    windows, start = 3, 1_700_000_010_000
    # Window 0 now; windows 1..3 while the job runs (about 9 s at 2000 clicks/s), the last only to
    # close window 2 (a window fires when a later click moves the watermark past it).
    generator.generate(kafka, clicks, 1, rate=0, start_ms=start)
    job = streamjob(settings, name, mode, 0, 0, job={
        "file": f"{settings.examples_dir}/kafka_click_counts.py",
        "args": ["--input-topic", clicks, "--output-topic", output]}, pod={"env": kafka_env(settings)})
    cluster.create(job)  # kubectl apply -f
    wait_for(lambda: (cluster.status(name).get("lastCheckpoint") or {}).get("id", 0) >= 1, t(START),
             lambda: f"{name} to run and complete a checkpoint\n{cluster.describe(name)}")
    rest = threading.Thread(target=generator.generate, args=(kafka, clicks, windows, 2000),
                            kwargs={"start_ms": start + 15_000}, daemon=True)
    rest.start()
    cluster.delete_pod(f"{name}-driver-1")  # kubectl delete pod NAME-driver-1
    wait_for(lambda: (cluster.status(name).get("deployment") or {}).get("number", 0) >= 2, t(STEP),
             lambda: f"the redeploy of {name}\n{cluster.describe(name)}")
    rest.join(t(STEP))

    def done() -> bool:
        return len({c["windowStart"] for c in counts.read_counts(kafka, output)}) >= windows

    wait_for(done, t(FINISH), lambda: f"{windows} windows in {output}\n{cluster.describe(name)}")
    got = counts.read_counts(kafka, output)
    assert counts.check(got, len(generator.PAGES)) == []
    assert sorted((c["windowStart"], c["page"], c["count"]) for c in got if c["windowStart"] < start + windows * 15_000) \
        == sorted((start + w * 15_000, page, 1000) for w in range(windows) for page in generator.PAGES)
    assert (cluster.status(name).get("deployment") or {}).get("restoreKind") == "checkpoint"
