"""The operator walk-through of the documentation (docs/kubernetes/operator.md), run with this machine's
`kubectl` as written there, one command line at a time, checking what each line's comment says.

There is no cluster here, so (mocked, as for the other operator tests):

* the API server is the Kubernetes API test server (tests/kube/apiserver.py), on its TLS port:
  kubectl sends its bearer token only over TLS (over plain http it sends none and gets 401);
* the pods run on the stand-in kubelet (tests/kube/kubelet.py): the driver pod is a real
  `streamjob run` process of examples/rolling_sum.py through docker/entrypoint.sh;
* moto's S3 server on 127.0.0.1 stands in for MinIO: the test makes the bucket `streamjob` (what
  the manifest's Job does with `mc mb`), so the block's `kind` and MinIO lines are not run;
  in the copies of the manifests the commands apply, MinIO's endpoint becomes moto's address and
  the job file path in the image (/opt/streamjob/examples) this checkout's examples/;
* `streamjob operator --namespace default &` runs as a real operator process, with the test's
  flags added (no health server, a 1 s idle interval, Spark's master address of the test server).

Everything else is real: the operator, Spark, RocksDB, the savepoints on (moto's) S3.
Run time: three driver starts (apply, rescale, resume) and four savepoints, 2-4 minutes on 2 cores.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kube.apiserver import KubeAPI, spawn_process, wait_for
from kube.kubelet import FakeKubelet
from s3server import MotoServer
from streamjob.operator import resources

REPO = Path(__file__).resolve().parent.parent
NAME = "rolling-sum"
START = 240  # a driver pod's Spark start and first checkpoint on a busy 2-core machine
MARKER = "<!-- readme-test: cluster"

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="no kubectl on this machine")


def walkthrough_lines() -> list[str]:
    """The command lines of the walk-through block (the one after the cluster marker that applies the
    StreamJob CRD) of the README or a page of docs/, without their comments."""
    for page in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]:
        text = page.read_text()
        for match in re.finditer(re.escape(MARKER) + r"[^\n]*\n```bash\n(.*?)```", text, re.S):
            if "streamjob operator crd | kubectl apply" in match.group(1):
                return [strip_comment(line) for line in match.group(1).splitlines() if line.strip()]
    raise AssertionError("neither README.md nor docs/ has a walk-through block after a readme-test: cluster marker")


def strip_comment(line: str) -> str:
    """`cmd   # comment` -> `cmd` (no line of the block has a # inside quotes)."""
    return re.sub(r"\s+#.*$", "", line).strip()


def test_the_walkthrough_block_is_the_one_job_with_its_store():
    """One StreamJob from apply to delete, and MinIO (with its bucket) before it."""
    lines = walkthrough_lines()
    assert lines.index("kubectl apply -f examples/k8s/minio.yaml") < next(
        i for i, line in enumerate(lines) if "rolling-sum-savepoints.yaml" in line)
    named = {m for line in lines for m in re.findall(r"\bsj[/ ]([a-z0-9-]+)", line)}
    assert named == {NAME}, named
    assert lines[-1] == f"kubectl delete sj {NAME}"


def test_the_walkthrough_runs_against_the_test_api_server(tmp_path):
    lines = walkthrough_lines()
    assert lines[0].startswith("kind create cluster")
    assert lines[1] == "streamjob operator crd | kubectl apply -f -"
    assert lines[2] == "streamjob operator --namespace default &"
    assert lines[3].startswith("kubectl apply -f examples/k8s/minio.yaml")
    assert lines[4].startswith("kubectl -n minio wait")
    steps = lines[5:]

    moto = MotoServer()
    api = KubeAPI(tls=True).start()
    try:
        moto.client().create_bucket(Bucket="streamjob")  # examples/k8s/minio.yaml's Job: mc mb local/streamjob
        kubeconfig_tls = api.write_kubeconfig(tmp_path / "kubeconfig-tls", tls=True, default=False)
        api.write_kubeconfig(tmp_path / "kubeconfig")  # for the operator and the kubelet
        # The manifests as the commands name them, relative to a working directory: copies with
        # the two substitutions said above.
        work = tmp_path / "work"
        (work / "examples" / "k8s").mkdir(parents=True)
        for path in (REPO / "examples" / "k8s").glob("*.yaml"):
            text = path.read_text().replace("http://minio.minio.svc:9000", moto.url)
            (work / "examples" / "k8s" / path.name).write_text(
                text.replace("/opt/streamjob/examples/", f"{REPO / 'examples'}/"))
        env = {**os.environ, "KUBECONFIG": kubeconfig_tls, "HOME": str(tmp_path),  # kubectl's cache
               "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}

        def sh(line: str, timeout: float = 60) -> str:
            proc = subprocess.run(["bash", "-c", line], cwd=work, env=env, capture_output=True, text=True,
                                  timeout=timeout)
            assert proc.returncode == 0, f"{line}\nexit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
            return proc.stdout

        def sj() -> dict:
            return api.objects.get("streamjobs", "default", NAME) or {}

        def status() -> dict:
            return sj().get("status") or {}

        def describe() -> str:
            return json.dumps(status(), indent=1)[-4000:]

        out = sh(lines[1])  # the CRD, through kubectl, as the walk-through applies it
        assert "customresourcedefinition.apiextensions.k8s.io/streamjobs.streamjob.io created" in out, out

        commands = {resources.ENTRYPOINT: [str(REPO / "docker" / "entrypoint.sh")]}
        with FakeKubelet(api, commands=commands) as kubelet, \
                spawn_process(api, ["-m", "streamjob.runtime.cli", "operator", "--namespace", "default",
                                    "--health-address", "off", "--idle-interval", "1",
                                    "--kubernetes-master", f"k8s://{api.url}"], log_dir=tmp_path) as op:
            wait_for(lambda: api.requests(resource="sj", watch=True), timeout=60,
                     message=f"the operator to watch StreamJobs; its log: {op.log_path}")
            step = iter(steps)

            line = next(step)
            assert line.startswith("kubectl apply -f examples/k8s/s3-credentials.yaml")
            out = sh(line)
            assert "secret/s3-credentials created" in out and f"streamjob.streamjob.io/{NAME} created" in out, out

            line = next(step)
            assert "jobStatus.state}'=RUNNING" in line
            sh(line, timeout=START + 60)
            assert status()["parallelism"] == 2 and status()["deployment"]["number"] == 1, describe()
            assert kubelet.pid("default", f"{NAME}-driver-1"), "no driver process"

            line = next(step)
            assert line == "kubectl get sj"
            out = sh(line)  # the CRD's printer columns: lifecycle, job state, parallelism, last checkpoint age
            assert re.search(r"^NAME\s+LIFECYCLE\s+JOB\s+PARALLELISM\s+LAST CHECKPOINT\s+AGE$", out, re.M), out
            assert re.search(rf"^{NAME}\s+(DEPLOYED|STABLE)\s+RUNNING\s+2\s", out, re.M), out

            line = next(step)
            assert line.startswith(f"kubectl annotate sj {NAME} streamjob.io/savepoint=")
            sh(line)
            nonce = sj()["metadata"]["annotations"]["streamjob.io/savepoint"]
            assert re.fullmatch(r"\d{10}", nonce), nonce  # "$(date +%s)"
            manual = wait_for(lambda: (sp := status().get("lastSavepoint") or {}).get("nonce") == nonce
                              and sp.get("path") and sp, timeout=START, message=describe)

            line = next(step)
            assert "lastSavepoint.path" in line
            path = sh(line).strip()
            assert path == manual["path"] and path.startswith("s3://streamjob/savepoints/savepoint-"), path
            assert savepoint_exists(moto, path), f"no {path}/_metadata on S3"

            line = next(step)
            assert line == f"kubectl scale sj {NAME} --replicas=3"
            sh(line)
            assert sj()["spec"]["parallelism"] == 3
            line = next(step)
            assert "parallelism}'=3" in line
            sh(line, timeout=2 * START)
            deployment = status()["deployment"]
            rescale = status()["lastSavepoint"]
            assert deployment["number"] == 2 and rescale["triggerType"] == "upgrade", describe()
            assert (deployment["restoreKind"], deployment["restorePath"]) == ("savepoint", rescale["path"]), describe()
            assert savepoint_exists(moto, rescale["path"])
            wait_for(lambda: api.objects.get("pods", "default", f"{NAME}-driver-1") is None, timeout=60,
                     message="the first driver pod to go")
            wait_for(lambda: (status().get("jobStatus") or {}).get("state") == "RUNNING", timeout=START,
                     message=describe)

            line = next(step)
            assert line == f"kubectl describe sj {NAME}"
            out = sh(line)
            assert f"Name:         {NAME}" in out and "Events:" in out, out

            line = next(step)
            assert '"state":"suspended"' in line
            sh(line)
            wait_for(lambda: status().get("lifecycleState") == "SUSPENDED"
                     and not api.objects.list("pods", "default"), timeout=START, message=describe)
            suspended = status()["lastSavepoint"]
            assert suspended["path"] != rescale["path"] and savepoint_exists(moto, suspended["path"]), describe()

            line = next(step)
            assert '"state":"running"' in line
            sh(line)
            wait_for(lambda: (status().get("jobStatus") or {}).get("state") == "RUNNING"
                     and status()["deployment"]["number"] == 3, timeout=START, message=describe)
            assert (status()["deployment"]["restoreKind"], status()["deployment"]["restorePath"]) == (
                "savepoint", suspended["path"]), describe()

            line = next(step)
            assert line == f"kubectl delete sj {NAME}"
            before = set(savepoints(moto))
            sh(line, timeout=START)  # kubectl waits until the StreamJob is gone (the operator's finalizer)
            assert not sj()
            assert not api.objects.list("pods", "default"), "pods left behind"
            final = set(savepoints(moto)) - before
            assert len(final) == 1, f"savepointOnDeletion: one final savepoint, got {final}"
            assert next(step, None) is None
        # The job's output went to s3://streamjob/output/rolling-sum (spec.pod.env OUT).
        listed = moto.client().list_objects_v2(Bucket="streamjob", Prefix="output/rolling-sum/")
        assert listed.get("KeyCount", 0) > 0, "no output written"
    finally:
        api.stop()
        moto.close()


def savepoints(moto: MotoServer) -> list[str]:
    listed = moto.client().list_objects_v2(Bucket="streamjob", Prefix="savepoints/")
    return sorted({key["Key"].split("/")[1] for key in listed.get("Contents", []) if key["Key"].endswith("/_metadata")})


def savepoint_exists(moto: MotoServer, path: str) -> bool:
    return path.removeprefix("s3://streamjob/savepoints/").strip("/") in savepoints(moto)
