"""Mode kubernetes end to end: the operator's driver pod runs Spark on Kubernetes in client mode
against the test API server, Spark's Kubernetes backend creates the executor pods from the job's
pod template, and the fake kubelet runs them as processes (tests/kube/kubelet.py).

Real: the operator, Spark's own Kubernetes client (fabric8) and executor allocator, the executor
pods as Spark builds them (checked with the API server's pod rules, tests/kube/validation.py, the
check that refused them on a real cluster), Spark executors (KubernetesExecutorBackend, started by
docker/entrypoint.sh) registering with the driver, the barrier stage's tasks in them exchanging data
over the pods' own addresses, checkpoints and the exactly-once sink.
Stood in for: the API server (kmock's emulator, tests/kube/apiserver.py), the kubelet (processes
instead of containers, each pod on its own loopback address, no images), and the in-cluster
service-account login of the driver (it reaches the API server with the test's kubeconfig token).
"""

from __future__ import annotations

import logging

import kopf
import pytest

from jobs.counting import expected_rows
from kube.apiserver import kube_api, run_operator, wait_for  # noqa: F401 - kube_api
from kube.kubelet import FakeKubelet
from kube.validation import pod_problems
from streamjob.operator.handlers import OperatorConfig
from test_checkpointing import committed_rows
from test_operator_e2e import ENTRYPOINT, NS, job_state, status, streamjob

pytestmark = pytest.mark.spark


def executor_pods(api, name: str) -> list[dict]:
    return [p for p in api.objects.list("v1/pods", NS)
            if p["metadata"].get("labels", {}).get("spark-role") == "executor"
            and p["metadata"]["labels"].get("streamjob.io/job") == name]


def test_executors_run_as_pods_and_a_lost_one_restores_exactly_once(kube_api, tmp_path, caplog):
    rows, rate = 12_000, 600
    memo = kopf.Memo(config=OperatorConfig(idle_interval=1.0, kubernetes_master=f"k8s://{kube_api.url}"))
    spec = streamjob("execs", tmp_path, rows, rate, mode="kubernetes", parallelism=1,
                     executor={"cores": 1, "resources": {"cpu": "500m", "memory": "512Mi"}})
    # spec.parallelism is 1, but the counting operator runs at 2 (its own set_parallelism): the driver
    # asks for the 2 slots its job graph needs, not 1.
    spec["spec"]["job"]["args"].append("2")
    with FakeKubelet(kube_api, commands=ENTRYPOINT) as kubelet, \
            run_operator(kube_api, module="streamjob.operator.handlers", memo=memo):
        kube_api.objects.create("sj", spec, namespace=NS)
        wait_for(lambda: job_state(kube_api, "execs") == "RUNNING" and status(kube_api, "execs").get("lastCheckpoint"),
                 timeout=180, message=lambda: f"the job runs on executor pods; driver log: "
                                              f"{kubelet.logs(NS, 'execs-driver-1')[-3000:]}")
        pods = executor_pods(kube_api, "execs")
        assert len(pods) == 2, [p["metadata"]["name"] for p in pods]
        st = status(kube_api, "execs")
        assert (st["parallelism"], st["slots"], st["executors"]) == (1, 2, 2)
        for pod in pods:
            assert pod_problems(pod) == []
            assert pod["metadata"]["ownerReferences"][0]["name"] == "execs-driver-1"
            mounts = pod["spec"]["containers"][0]["volumeMounts"]
            assert [m["name"] for m in mounts if m["mountPath"] == "/tmp"] == ["spark-local-dir-1"]
            assert "Got assigned task" in kubelet.logs(NS, pod["metadata"]["name"])  # the stage runs there
        # A normal start logs no ERROR (Spark used to log one while it waited for its driver pod to be Ready).
        started = kubelet.logs(NS, "execs-driver-1")
        assert " ERROR " not in started, started[-3000:]
        # An executor pod is lost (its node died): the job restores from its checkpoint on a new executor.
        lost = pods[0]["metadata"]["name"]
        kubelet.lose(NS, lost)
        wait_for(lambda: status(kube_api, "execs").get("jobStatus", {}).get("restarts", 0) >= 1, timeout=120,
                 message=lambda: f"a restart; driver log: {kubelet.logs(NS, 'execs-driver-1')[-3000:]}")
        wait_for(lambda: job_state(kube_api, "execs") == "FINISHED", timeout=180,
                 message=lambda: f"the input ends; driver log: {kubelet.logs(NS, 'execs-driver-1')[-3000:]}")
        replacements = [p["metadata"]["name"] for p in executor_pods(kube_api, "execs")
                        if p["metadata"]["name"] not in {q["metadata"]["name"] for q in pods}]
        assert replacements, "Spark created a new executor pod"
        assert status(kube_api, "execs")["deployment"]["number"] == 1  # restored inside the deployment
        kube_api.objects.delete("sj", NS, "execs")
        wait_for(lambda: kube_api.objects.get("sj", NS, "execs") is None, timeout=60, message="deleted")
    # Normal paths log no ERROR: a deletion that waits for its pods is not a failure (kopf logs every
    # TemporaryError as one), and an executor lost is a WARNING of the operator's, not an error.
    errors = [f"{r.name}: {r.getMessage()}" for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, errors
    assert committed_rows(str(tmp_path / "out")) == expected_rows(rows)
