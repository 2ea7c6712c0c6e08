"""What the e2e tests use: settings from the environment, the cluster (the `kubernetes` client on
$KUBECONFIG), the object store (boto3), StreamJob specs for the e2e job, and polling.

Nothing here knows what is behind the kubeconfig: a kind cluster, a real one, or the Kubernetes
API test server of tests/kube (tests/test_e2e_suite.py). Where a cluster may lack something a
test needs (a pod proxy, schema validation), the test finds out and skips saying so.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
GROUP, VERSION, PLURAL = "streamjob.io", "v1alpha1", "streamjobs"
SAVEPOINT_ANNOTATION = "streamjob.io/savepoint"
JOB_LABEL = "streamjob.io/job"

sys.path.insert(0, str(Path(__file__).resolve().parent / "jobs"))
import counter  # noqa: E402 - the job's own expected output (e2e/jobs/counter.py)


def _env(name: str, default: str = "") -> str:
    return os.environ.get(name, "").strip() or default


@dataclass(frozen=True)
class Settings:
    """Every knob of the suite; the names are documented in e2e/README.md."""

    image: str = field(default_factory=lambda: _env("E2E_IMAGE", "streamjob:0.1.0"))
    pull_policy: str = field(default_factory=lambda: _env("E2E_IMAGE_PULL_POLICY", "IfNotPresent"))
    namespace: str = field(default_factory=lambda: _env("E2E_NAMESPACE", "default"))
    modes: tuple[str, ...] = field(default_factory=lambda: tuple(
        m.strip() for m in _env("E2E_MODES", "local,kubernetes").split(",") if m.strip()))
    # Where the image holds e2e/jobs (the job file is a path inside the image).
    jobs_dir: str = field(default_factory=lambda: _env("E2E_JOBS_DIR", "/opt/streamjob/e2e/jobs"))
    # Object storage: the endpoint as the job's pods reach it, and as this test process reaches it.
    s3_endpoint: str = field(default_factory=lambda: _env("E2E_S3_ENDPOINT"))
    s3_test_endpoint: str = field(default_factory=lambda: _env("E2E_S3_TEST_ENDPOINT", _env("E2E_S3_ENDPOINT")))
    s3_bucket: str = field(default_factory=lambda: _env("E2E_S3_BUCKET", "streamjob-e2e"))
    s3_region: str = field(default_factory=lambda: _env("E2E_S3_REGION", "us-east-1"))
    s3_access_key: str = field(default_factory=lambda: _env("E2E_S3_ACCESS_KEY_ID", _env("AWS_ACCESS_KEY_ID")))
    s3_secret_key: str = field(default_factory=lambda: _env("E2E_S3_SECRET_ACCESS_KEY", _env("AWS_SECRET_ACCESS_KEY")))
    s3_secret: str = field(default_factory=lambda: _env("E2E_S3_SECRET", "streamjob-e2e-s3"))
    # Resources of the job's pods (a kind node is small; the operator's defaults are 1 CPU / 2Gi).
    driver_cpu: str = field(default_factory=lambda: _env("E2E_DRIVER_CPU", "500m"))
    driver_memory: str = field(default_factory=lambda: _env("E2E_DRIVER_MEMORY", "2Gi"))
    executor_cpu: str = field(default_factory=lambda: _env("E2E_EXECUTOR_CPU", "500m"))
    executor_memory: str = field(default_factory=lambda: _env("E2E_EXECUTOR_MEMORY", "1Gi"))
    # Every wait is multiplied by this (a slow cluster, image pulls).
    timeout_scale: float = field(default_factory=lambda: float(_env("E2E_TIMEOUT_SCALE", "1")))
    # How the alert test reads a driver's /metrics: auto (pod proxy, else the pod IP), proxy, direct.
    metrics_access: str = field(default_factory=lambda: _env("E2E_METRICS", "auto"))
    alert_rules: str = field(default_factory=lambda: _env(
        "E2E_ALERT_RULES", str(REPO / "helm" / "streamjob-operator" / "files" / "alerts.rules.yaml")))
    alert_name: str = field(default_factory=lambda: _env("E2E_ALERT_NAME", "StreamJobCheckpointsFailing"))
    prometheus: str = field(default_factory=lambda: _env("E2E_PROMETHEUS", "prometheus"))
    keep: bool = field(default_factory=lambda: _env("E2E_KEEP") == "1")  # leave StreamJobs and S3 objects
    # Kafka (the Kafka scenario; skipped without a bootstrap address): the address as the job's pods
    # reach it and as this test process reaches it, the login if the cluster wants one, and the Secret
    # the suite writes them into (the StreamJob's pods get them as env from it).
    kafka_bootstrap: str = field(default_factory=lambda: _env("E2E_KAFKA_BOOTSTRAP"))
    kafka_test_bootstrap: str = field(default_factory=lambda: _env("E2E_KAFKA_TEST_BOOTSTRAP",
                                                                   _env("E2E_KAFKA_BOOTSTRAP")))
    kafka_username: str = field(default_factory=lambda: _env("E2E_KAFKA_USERNAME"))
    kafka_password: str = field(default_factory=lambda: _env("E2E_KAFKA_PASSWORD"))
    kafka_mechanism: str = field(default_factory=lambda: _env("E2E_KAFKA_SASL_MECHANISM", "SCRAM-SHA-512"))
    kafka_security_protocol: str = field(default_factory=lambda: _env("E2E_KAFKA_SECURITY_PROTOCOL", "SASL_SSL"))
    kafka_secret: str = field(default_factory=lambda: _env("E2E_KAFKA_SECRET", "streamjob-e2e-kafka"))
    # Where the image holds examples/ (the Kafka scenario runs examples/kafka_click_counts.py).
    examples_dir: str = field(default_factory=lambda: _env("E2E_EXAMPLES_DIR", "/opt/streamjob/examples"))

    @property
    def s3_configured(self) -> bool:
        return bool(self.s3_endpoint or os.environ.get("E2E_S3_BUCKET"))


def phase(pod: Any) -> str:
    """A pod's phase; a pod no kubelet has reported on yet (no status) is Pending."""
    return (pod.status.phase if pod.status else None) or "Pending"


def wait_for(condition: Callable[[], Any], timeout: float, message: str | Callable[[], str] = "",
             interval: float = 0.5) -> Any:
    """Poll until condition() is truthy and return it; fail after `timeout` s (a callable message
    is called then, to show the state at the failure)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            what = message() if callable(message) else message
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what or condition}")
        time.sleep(interval)


def merge(base: dict, patch: dict) -> dict:
    """Deep merge (dicts merge, anything else replaces): a spec with a test's changes."""
    out = copy.deepcopy(base)
    for key, value in patch.items():
        out[key] = merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


# -- the cluster -----------------------------------------------------------------------------------
class Cluster:
    """The cluster $KUBECONFIG names, through the `kubernetes` client (what kubectl would do, as API
    calls: `kubectl scale` is a patch of the scale subresource, `kubectl annotate` a merge patch)."""

    def __init__(self, settings: Settings, kubeconfig: str):
        import kubernetes

        self.settings, self.ns = settings, settings.namespace
        self.client = kubernetes.config.new_client_from_config(config_file=kubeconfig)
        self.host = self.client.configuration.host
        self.k = kubernetes.client
        self.core = kubernetes.client.CoreV1Api(self.client)
        self.custom = kubernetes.client.CustomObjectsApi(self.client)
        self.rbac = kubernetes.client.RbacAuthorizationV1Api(self.client)
        self.ApiException = kubernetes.client.ApiException

    # -- StreamJobs --
    def create(self, body: dict, **kwargs: Any) -> dict:
        return self.custom.create_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, body, **kwargs)

    def get(self, name: str) -> dict | None:
        try:
            return self.custom.get_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, name)
        except self.ApiException as e:
            if e.status == 404:
                return None
            raise

    def status(self, name: str) -> dict:
        return (self.get(name) or {}).get("status") or {}

    def patch(self, name: str, patch: dict) -> dict:
        return self.custom.patch_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, name, patch)

    def annotate(self, name: str, key: str, value: str) -> dict:
        """kubectl annotate NAME key=value --overwrite"""
        return self.patch(name, {"metadata": {"annotations": {key: value}}})

    def scale(self, name: str, replicas: int) -> dict:
        """kubectl scale sj NAME --replicas=N: a patch of the scale subresource."""
        return self.custom.patch_namespaced_custom_object_scale(GROUP, VERSION, self.ns, PLURAL, name,
                                                               {"spec": {"replicas": replicas}})

    def get_scale(self, name: str) -> dict:
        return self.custom.get_namespaced_custom_object_scale(GROUP, VERSION, self.ns, PLURAL, name)

    def delete(self, name: str) -> None:
        try:
            self.custom.delete_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, name)
        except self.ApiException as e:
            if e.status != 404:
                raise

    # -- what a StreamJob owns --
    def pods(self, name: str, component: str | None = None) -> list[Any]:
        selector = f"{JOB_LABEL}={name}" + (f",app.kubernetes.io/component={component}" if component else "")
        return self.core.list_namespaced_pod(self.ns, label_selector=selector).items

    def pod(self, name: str) -> Any | None:
        try:
            return self.core.read_namespaced_pod(name, self.ns)
        except self.ApiException as e:
            if e.status == 404:
                return None
            raise

    def delete_pod(self, name: str) -> None:
        """kubectl delete pod NAME (graceful, the pod's own grace period)."""
        self.core.delete_namespaced_pod(name, self.ns)

    def owned(self, uid: str) -> list[str]:
        """Every object in the namespace (of the kinds a StreamJob owns) with an ownerReference to uid,
        and every pod owned by those (executor pods are owned by the driver pod)."""
        found: list[str] = []
        lists = [("Pod", self.core.list_namespaced_pod), ("Service", self.core.list_namespaced_service),
                 ("ConfigMap", self.core.list_namespaced_config_map), ("Secret", self.core.list_namespaced_secret),
                 ("ServiceAccount", self.core.list_namespaced_service_account),
                 ("Role", self.rbac.list_namespaced_role), ("RoleBinding", self.rbac.list_namespaced_role_binding)]
        owners = {uid}
        for kind, lister in lists:
            try:
                items = lister(self.ns).items
            except self.ApiException as e:
                if e.status == 404:  # a test API server without RBAC resources
                    continue
                raise
            for obj in items:
                refs = obj.metadata.owner_references or []
                if any(r.uid in owners for r in refs):
                    found.append(f"{kind}/{obj.metadata.name}")
                    owners.add(obj.metadata.uid)
        return found

    def events(self, name: str) -> list[Any]:
        items = self.core.list_namespaced_event(self.ns, field_selector=f"involvedObject.name={name}").items
        return [e for e in items if e.involved_object.name == name]  # a server may ignore the selector

    def reasons(self, name: str) -> set[str]:
        return {e.reason for e in self.events(name)}

    def logs(self, pod: str, tail: int = 40) -> str:
        try:
            return self.core.read_namespaced_pod_log(pod, self.ns, tail_lines=tail)
        except Exception as e:  # noqa: BLE001 - diagnostics only (a test server has no logs)
            return f"(no logs: {type(e).__name__})"

    def ensure_namespace(self) -> None:
        try:
            self.core.read_namespace(self.ns)
        except self.ApiException as e:
            if e.status != 404:
                raise
            self.core.create_namespace({"metadata": {"name": self.ns}})

    def put_secret(self, name: str, data: dict[str, str]) -> None:
        # data (base64), not stringData: every reader sees it as a real API server stores it.
        body = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "labels": {"app": "streamjob-e2e"}},
                "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}
        try:
            self.core.create_namespaced_secret(self.ns, body)
        except self.ApiException as e:
            if e.status != 409:
                raise
            self.core.replace_namespaced_secret(name, self.ns, body)

    def describe(self, name: str) -> str:
        """The state worth seeing when a wait fails: status, events, pods and their logs' tails."""
        lines = [f"StreamJob {self.ns}/{name} status: {json.dumps(self.status(name), indent=1)[:6000]}"]
        try:
            for e in sorted(self.events(name), key=lambda e: str(e.last_timestamp or e.event_time or ""))[-25:]:
                lines.append(f"  event {e.type} {e.reason}: {e.message}")
            for p in self.pods(name):
                lines.append(f"  pod {p.metadata.name}: {phase(p)}")
                lines.append("    " + self.logs(p.metadata.name).replace("\n", "\n    ")[-3000:])
        except Exception as e:  # noqa: BLE001
            lines.append(f"  (could not list events/pods: {e})")
        return "\n".join(lines)


# -- the object store ---------------------------------------------------------------------------------
class Store:
    """The S3 bucket the jobs write to, as this test process reaches it."""

    def __init__(self, settings: Settings):
        import boto3
        from botocore.config import Config

        self.settings, self.bucket = settings, settings.s3_bucket
        self.s3 = boto3.client("s3", endpoint_url=settings.s3_test_endpoint or None, region_name=settings.s3_region,
                               aws_access_key_id=settings.s3_access_key or None,
                               aws_secret_access_key=settings.s3_secret_key or None,
                               config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 3}))

    def ensure_bucket(self, bucket: str | None = None) -> None:
        bucket = bucket or self.bucket
        try:
            self.s3.head_bucket(Bucket=bucket)
        except self.s3.exceptions.ClientError:
            self.s3.create_bucket(Bucket=bucket)

    def url(self, key: str, bucket: str | None = None) -> str:
        return f"s3://{bucket or self.bucket}/{key}"

    def keys(self, prefix: str, bucket: str | None = None) -> list[str]:
        pages = self.s3.get_paginator("list_objects_v2").paginate(Bucket=bucket or self.bucket, Prefix=prefix)
        return [o["Key"] for page in pages for o in page.get("Contents", [])]

    def exists(self, url: str) -> bool:
        bucket, _, key = url.removeprefix("s3://").partition("/")
        try:
            self.s3.head_object(Bucket=bucket, Key=key)
            return True
        except self.s3.exceptions.ClientError:
            return False

    def is_savepoint(self, url: str) -> bool:
        return self.exists(url.rstrip("/") + "/_metadata")

    def savepoints(self, prefix: str) -> list[str]:
        """The complete savepoints under s3://bucket/prefix (directories with a _metadata)."""
        return sorted({k.rsplit("/", 1)[0] for k in self.keys(prefix) if k.endswith("/_metadata")})

    def committed_rows(self, prefix: str) -> list[tuple]:
        """Every row in the sink's published part files (hidden .inprogress/pending files are not
        output: the two-phase commit publishes a file by renaming it to its visible name)."""
        rows = []
        for key in self.keys(prefix):
            if key.rsplit("/", 1)[-1].startswith("."):
                continue
            body = self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read().decode()
            rows += [tuple(json.loads(line)[f] for f in counter.FIELDS) for line in body.splitlines() if line.strip()]
        return sorted(rows)

    def delete_prefix(self, prefix: str, bucket: str | None = None) -> None:
        bucket = bucket or self.bucket
        keys = self.keys(prefix, bucket)
        for i in range(0, len(keys), 1000):
            self.s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys[i:i + 1000]]})


def exactly_once(rows: list[tuple], total: int) -> str | None:
    """Why `rows` is not exactly the job's complete output of `total` rows, or None."""
    expected = counter.expected_rows(total)
    if rows == expected:
        return None
    got, want = set(rows), set(expected)
    dupes = len(rows) - len(got)
    missing, extra = sorted(want - got), sorted(got - want)
    return (f"{len(rows)} rows committed, {total} expected: {dupes} duplicated, {len(missing)} missing "
            f"(first {missing[:5]}), {len(extra)} wrong (first {extra[:5]})")


def consistent_prefix(rows: list[tuple]) -> str | None:
    """For a job stopped before its input ended: no row twice, none wrong, and for each key the
    rows committed are its first ones (counts 1..n): nothing lost before what was committed."""
    if len(rows) != len(set(rows)):
        return f"{len(rows) - len(set(rows))} rows committed twice"
    per_key: dict[int, list[tuple]] = {}
    for r in rows:
        per_key.setdefault(r[0], []).append(r)
    for key, key_rows in per_key.items():
        key_rows.sort(key=lambda r: r[2])
        for n, (k, i, count, prev) in enumerate(key_rows, start=1):
            want_i = key + (n - 1) * counter.KEYS
            want_prev = -1 if n == 1 else want_i - counter.KEYS
            if (count, i, prev) != (n, want_i, want_prev):
                return f"key {key}: row {n} is {(k, i, count, prev)}, expected {(key, want_i, n, want_prev)}"
    return None


# -- specs -----------------------------------------------------------------------------------------------
def unique_name(scenario: str, mode: str) -> str:
    """DNS-1035, short: the Service is named after the StreamJob."""
    return f"e2e-{scenario}-{mode[:3]}-{uuid.uuid4().hex[:5]}"


def streamjob(settings: Settings, name: str, mode: str, rows: int, rate: float, **spec: Any) -> dict:
    """A StreamJob running e2e/jobs/counter.py with its output, checkpoints and savepoints under
    s3://BUCKET/NAME/ (upgradeMode savepoint; `spec` is merged in)."""
    root = f"s3://{settings.s3_bucket}/{name}"
    base: dict[str, Any] = {
        "image": settings.image, "imagePullPolicy": settings.pull_policy, "mode": mode,
        "job": {"file": f"{settings.jobs_dir}/counter.py", "args": [f"{root}/out", str(rows), str(rate)]},
        "parallelism": 2, "upgradeMode": "savepoint",
        "checkpointing": {"interval": "1s", "retained": 2},
        "checkpointDir": f"{root}/checkpoints", "savepointDir": f"{root}/savepoints",
        "s3": {"pathStyleAccess": True, "region": settings.s3_region,
               "accessKeyId": {"name": settings.s3_secret, "key": "access-key-id"},
               "secretAccessKey": {"name": settings.s3_secret, "key": "secret-access-key"}},
        "redeploy": {"maxRedeploys": 3, "backoff": "1s"},
        "config": {"execution.buffer-timeout": "20"},
        "driver": {"resources": {"cpu": settings.driver_cpu, "memory": settings.driver_memory}},
    }
    if settings.s3_endpoint:
        base["s3"]["endpoint"] = settings.s3_endpoint
    if mode == "kubernetes":
        base["executor"] = {"cores": 1, "resources": {"cpu": settings.executor_cpu, "memory": settings.executor_memory}}
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "StreamJob", "metadata": {"name": name, "labels": {
        "app": "streamjob-e2e"}}, "spec": merge(base, spec)}
