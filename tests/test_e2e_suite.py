"""The e2e suite (e2e/, `pytest e2e` against a real cluster) is run here too, so that it is not
dead code: as a pytest subprocess against what this machine has in place of a cluster —

* the Kubernetes API test server (tests/kube/apiserver.py), reached through a kubeconfig, as
  the suite reaches any cluster;
* the fake kubelet (tests/kube/kubelet.py), which runs the pods the operator (and the suite)
  create as local processes: the image's entrypoint /opt/streamjob/entrypoint.sh is this repo's
  docker/entrypoint.sh, and E2E_JOBS_DIR points the job files at this repo's e2e/jobs;
* a real operator process (`streamjob operator`);
* moto's S3 server on 127.0.0.1 as the object store, for the pods and the suite alike;
* the real Apache Kafka broker of the ``kafka_broker`` fixture, for the Kafka scenario (its address
  reaches the job's pod through a Secret, as on a cluster).

Mode local only (E2E_MODES=local): Spark's Kubernetes backend cannot create executor pods here.
What the test API server cannot do is found out by the suite itself, which then skips with the
reason (no schema/CEL validation; no pod proxy, so /metrics is read from the pod's IP); the
assertions below pin which tests pass and which are skipped for which reason, so a scenario that
stops running here (skipped, or silently passing nothing) fails this test.

Run time: each scenario starts one or more Spark drivers (about 30-100 s each on 2 cores). CI runs
a representative subset (CI_SCENARIOS: about 3-4 minutes on a 2-core machine shared with the rest of
the suite, the rescale in mode kubernetes half of it);
STREAMJOB_E2E_ALL=1 runs them all (about 8 minutes, and the alert test then also waits for its
`for: 1m` to fire); STREAMJOB_E2E_SCENARIOS=name,name runs the ones named.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from kube.apiserver import kube_api, spawn_process, wait_for  # noqa: F401 - kube_api: a fixture
from kube.kubelet import FakeKubelet
from s3server import CREDENTIALS, MotoServer, free_port
from streamjob.operator import resources

REPO = Path(__file__).resolve().parent.parent
NS = "default"

# The CI subset: the rescale (apply, savepoint by annotation, kubectl scale, exactly once), the
# API server refusals (skipped here: no validation) and Kafka (the click event count example, its
# address from a Secret, a lost driver pod redeployed from its checkpoint, an exact output topic).
# The others (the lost driver pod of the file-sink job, which the Kafka scenario's lost driver covers;
# suspend/resume + upgrade, delete with savepointOnDeletion, missing job file) exercise the same
# machinery as the operator's own e2e tests (tests/test_operator_e2e.py), and the storage-outage alert
# the shipped rule that tests/test_alert_delivery.py fires through real Prometheus and Alertmanager
# on a real S3 outage; they run with STREAMJOB_E2E_ALL=1 (the whole suite keeps under 30 minutes).
CI_SCENARIOS = ("test_apply_savepoint_and_rescale_keep_state_and_output_exactly_once",
                "test_api_server_refuses_invalid_specs",
                "test_kafka_click_counts_survive_a_lost_driver_exactly_once")
ALL_SCENARIOS = CI_SCENARIOS + ("test_checkpoint_alert_fires_when_storage_fails",
                                "test_deleted_driver_pod_is_redeployed_from_the_latest_checkpoint",
                                "test_suspend_resume_and_upgrade_restore_savepoints",
                                "test_delete_with_savepoint_on_deletion_leaves_a_savepoint_and_nothing_else",
                                "test_missing_job_file_is_reported_on_the_field_and_nothing_else_is_lost",
                                "test_autoscaler_sizes_a_kafka_job_to_a_rate_step_and_back_exactly_once")
# Scenarios run in mode kubernetes too (Spark's executor pods run by the stand-in kubelet); the others
# run in mode local only here (each kubernetes-mode scenario costs about as much again).
KUBERNETES_SCENARIOS = ("test_apply_savepoint_and_rescale_keep_state_and_output_exactly_once",
                        "test_autoscaler_sizes_a_kafka_job_to_a_rate_step_and_back_exactly_once")
# What cannot pass here, and must be skipped saying why (a substring of the skip reason).
SKIPPED_HERE = {"test_api_server_refuses_invalid_specs": "does not validate custom resources"}


def run_suite(tmp_path: Path, env: dict[str, str], *args: str, timeout: float) -> tuple[dict, str]:
    """`pytest e2e ARGS` in a subprocess: ({test id: (outcome, message)}, its output)."""
    report = tmp_path / "e2e-junit.xml"
    # One process, whatever pyproject's addopts say (`-n 2` would put the suite's scenarios side by
    # side on this machine's one operator and API server): pytest-xdist's -n 0, when it is installed.
    serial = ["-n", "0"] if importlib.util.find_spec("xdist") else []
    proc = subprocess.run([sys.executable, "-m", "pytest", "e2e", "-p", "no:cacheprovider", "-q", "-rA", "--durations=0",
                           *serial, f"--junitxml={report}", *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=timeout)
    output = proc.stdout + proc.stderr
    assert report.exists(), output[-5000:]
    results = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("skipped", "failure", "error"):
                outcome, message = child.tag, child.get("message", "")
        results[case.get("name")] = (outcome, message)
    return results, output


def suite_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("E2E_") and k != "KUBECONFIG"}
    return {**env, **extra}


def test_without_a_cluster_every_e2e_test_is_skipped_saying_why(tmp_path):
    """No kubeconfig, or one naming an API server that does not answer: all skipped, none passed."""
    home = tmp_path / "home"
    home.mkdir()
    results, output = run_suite(tmp_path, suite_env(HOME=str(home)), timeout=120)
    assert results and all(outcome == "skipped" and "no cluster: KUBECONFIG is not set" in message
                           for outcome, message in results.values()), output[-3000:]

    port = free_port()  # nothing listens there
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "x",
        "clusters": [{"name": "x", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "x", "user": {}}], "contexts": [{"name": "x", "context": {"cluster": "x", "user": "x"}}]}))
    results, output = run_suite(tmp_path, suite_env(HOME=str(home), KUBECONFIG=str(kubeconfig)), timeout=120)
    assert results and all(outcome == "skipped" and "cannot be reached" in message
                           for outcome, message in results.values()), output[-3000:]


@pytest.mark.spark
@pytest.mark.timeout(1500)
def test_e2e_suite_passes_against_the_test_api_server_and_fake_kubelet(kube_api, tmp_path, request):
    every = os.environ.get("STREAMJOB_E2E_ALL") == "1"
    scenarios = ALL_SCENARIOS if every else CI_SCENARIOS
    if os.environ.get("STREAMJOB_E2E_SCENARIOS"):  # a developer's choice: comma-separated test names
        scenarios = tuple(os.environ["STREAMJOB_E2E_SCENARIOS"].split(","))
    kafka = {}
    if any("kafka" in name for name in scenarios):  # the broker starts only for the Kafka scenario
        broker = request.getfixturevalue("kafka_broker")
        kafka = {"E2E_KAFKA_BOOTSTRAP": broker.bootstrap, "E2E_EXAMPLES_DIR": str(REPO / "examples")}
    moto = MotoServer()
    try:
        env = suite_env(
            KUBECONFIG=kube_api.kubeconfig, E2E_NAMESPACE=NS, E2E_MODES="local,kubernetes", E2E_IMAGE="streamjob:e2e",
            E2E_JOBS_DIR=str(REPO / "e2e" / "jobs"), E2E_S3_ENDPOINT=moto.url, E2E_S3_BUCKET="streamjob-e2e",
            E2E_S3_ACCESS_KEY_ID=CREDENTIALS["AWS_ACCESS_KEY_ID"],
            E2E_S3_SECRET_ACCESS_KEY=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            # The alert test waits for "pending" (the expression true at every evaluation) and not for
            # its `for: 1m` on top: firing is the same evaluation a minute later, and CI time is scarce.
            E2E_ALERT_WAIT_FIRING="1" if every else "0", **kafka)
        commands = {resources.ENTRYPOINT: [str(REPO / "docker" / "entrypoint.sh")]}
        with FakeKubelet(kube_api, commands=commands), \
                spawn_process(kube_api, ["-m", "streamjob.runtime.cli", "operator", "--namespace", NS,
                                         "--health-address", "off", "--idle-interval", "1",
                                         "--kubernetes-master", f"k8s://{kube_api.url}"], log_dir=tmp_path) as op:
            wait_for(lambda: kube_api.requests(resource="sj", watch=True), timeout=60,
                     message=f"the operator to watch StreamJobs; its log: {op.log_path}")
            selected = [f"({name} and not kubernetes)" for name in scenarios]
            selected += [f"({name} and kubernetes)" for name in scenarios if name in KUBERNETES_SCENARIOS]
            results, output = run_suite(tmp_path, env, "-k", " or ".join(selected), timeout=1400)
    finally:
        moto.close()

    problems = []
    for name in scenarios:
        for mode in (("local", "kubernetes") if name != "test_api_server_refuses_invalid_specs" else (None,)):
            test_id = f"{name}[{mode}]" if mode else name
            outcome, message = results.get(test_id, ("missing", ""))
            if mode == "kubernetes" and name not in KUBERNETES_SCENARIOS:
                want, reason = "missing", ""  # deselected
            elif name in SKIPPED_HERE:
                want, reason = "skipped", SKIPPED_HERE[name]
            elif name == "test_checkpoint_alert_fires_when_storage_fails" and not shutil.which("prometheus"):
                want, reason = "skipped", "no Prometheus binary"
            else:
                want, reason = "passed", ""
            if outcome != want or reason not in message:
                problems.append(f"{test_id}: {outcome} {message[:int(os.environ.get('E2E_MSG', '300'))]!r}, expected {want} {reason!r}")
    assert not problems, "\n".join(problems) + "\n\n" + output[-12000:]


def test_the_walkthrough_s3_server_manifest_is_valid():
    """e2e/README.md applies e2e/k8s/s3-server.yaml to a kind cluster: check it against the
    Kubernetes schemas here (strict: no unknown fields), and that its pod names its command."""
    import kubernetes_validate
    import yaml
    from kubernetes_validate.utils import latest_version

    docs = [d for d in yaml.safe_load_all((REPO / "e2e" / "k8s" / "s3-server.yaml").read_text()) if d]
    assert {d["kind"] for d in docs} == {"Namespace", "Deployment", "Service"}
    for doc in docs:
        kubernetes_validate.validate(doc, latest_version(), strict=True)
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    assert all(c.get("command") for c in deployment["spec"]["template"]["spec"]["containers"])
