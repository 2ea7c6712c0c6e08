"""Every Kubernetes object a StreamJob owns, as plain dicts: pure builders, no I/O.

The operator's edge code creates/applies what these functions return; the reconciler decides
*when* (which deployment number, which parallelism, what to restore), these functions decide
*what*. Same input, same output, byte for byte (dicts built in a fixed order, the job
configuration sorted), so the edge can compare hashes instead of diffing live objects.

What one StreamJob ``<name>`` owns (all with an ownerReference to it, so deleting the StreamJob
deletes everything; apply order of ``owned_objects``):

- mode kubernetes only: ServiceAccount, Role and RoleBinding ``<name>-driver`` — what Spark's
  Kubernetes backend (client mode: the driver runs in our pod) needs to manage executor pods;
- Secret ``<name>-rest-token``: the bearer token of the job manager's REST API;
- ConfigMap ``<name>-config``: ``job.conf`` (``key=value`` lines) and, mode kubernetes, the executor
  pod template;
- headless Service ``<name>``: names the fixed ports of the current deployment's driver pod;
- driver pod ``<name>-driver-<n>``: a new pod per deployment, so a redeploy never races a
  terminating pod, and what an old pod reports can never be mistaken for the new one's.

Precedence, everywhere the user can give what we also set: the user wins for configuration keys
and environment variables (an escape hatch; overriding the ports, ``rest.address`` or ``POD_IP``
breaks the operator's contract with the pod), the operator wins for the labels it selects on.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal, NamedTuple

from .model import KIND, DeploymentMode, Resources, S3Spec, StreamJobSpec, seconds
from .version import API_GROUP, API_VERSION

# -- the contract with the image and the runtime (one place) ----------------------------------------
ENTRYPOINT = "/opt/streamjob/entrypoint.sh"  # the image's entrypoint: operator | driver | executor
KUBERNETES_MASTER = "k8s://https://kubernetes.default.svc"  # the API server, from inside the cluster
IMAGE_UID = 185  # the image's fixed non-root user (Spark images' convention)

REST_PORT = 8081  # job manager REST API and /metrics
RPC_PORT = 6123  # job manager control server (tasks register, acks, triggers)
QUERY_PROXY_PORT = 9069  # the queryable state proxy (Flink's queryable-state.proxy.ports default)
SPARK_DRIVER_PORT = 7078
SPARK_BLOCK_MANAGER_PORT = 7079
# Port names are IANA_SVC_NAMEs: at most 15 characters, lowercase.
PORTS = (("rest", REST_PORT), ("jobmanager-rpc", RPC_PORT), ("spark-driver", SPARK_DRIVER_PORT),
         ("spark-blockmgr", SPARK_BLOCK_MANAGER_PORT), ("queryable-state", QUERY_PROXY_PORT))
READINESS_PATH = "/metrics"  # unauthenticated: the REST API answers = the job manager is up

CONFIG_DIR = "/etc/streamjob"  # the ConfigMap, read-only
JOB_CONF = "job.conf"
EXECUTOR_POD_TEMPLATE = "executor-pod-template.yaml"
TMP_DIR = "/tmp"  # the root filesystem is read-only: Spark scratch, RocksDB working dirs, Python temp files
REST_TOKEN_KEY = "token"
TERMINATION_LOG = "/dev/termination-log"  # the job manager's final result (JSON) goes here
REST_RESULT_LINGER_MS = 300_000  # the REST API keeps serving the final result: the operator reads it in time

DRIVER_CONTAINER = "driver"
EXECUTOR_CONTAINER = "executor"
VOLUME_CONFIG = "streamjob-config"  # prefixed: user volumes share the pod's volume namespace
VOLUME_TMP = "streamjob-tmp"
# The executors' /tmp, named so that Spark takes it as its local directory: Spark's Kubernetes backend
# adds an emptyDir named spark-local-dir-1 at SPARK_LOCAL_DIRS (/tmp in the image) unless the template
# already mounts a volume of that name, and two mounts at /tmp make the API server refuse the pod.
VOLUME_EXECUTOR_TMP = "spark-local-dir-1"

LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_JOB = f"{API_GROUP}/job"
LABEL_DEPLOYMENT = f"{API_GROUP}/deployment"
ANNOTATION_SPEC_HASH = f"{API_GROUP}/spec-hash"
APP_NAME = "streamjob"
MANAGED_BY = "streamjob-operator"

# Env variables the operator sets (the user's spec.pod.env replaces any of them by name).
ENV_POD_IP = "POD_IP"
ENV_POD_NAME = "POD_NAME"
ENV_POD_NAMESPACE = "POD_NAMESPACE"
ENV_IMAGE = "STREAMJOB_IMAGE"  # the executors' image (Spark on Kubernetes)
ENV_REST_TOKEN = "STREAMJOB_REST_TOKEN"  # the runtime's REST token when rest.auth.token(-file) is unset

# Least privilege for Spark's Kubernetes backend in client mode: it creates, watches and deletes its
# executor pods (patch: decommissioning labels), their ConfigMap of Spark configuration and, when asked
# for, PVCs; it deletes them by label on stop (deletecollection). Services are listed for completeness
# of Spark's feature steps; the driver needs no cluster-wide rights.
DRIVER_ROLE_RULES = (
    {"apiGroups": [""], "resources": ["pods"],
     "verbs": ["get", "list", "watch", "create", "delete", "deletecollection", "patch"]},
    {"apiGroups": [""], "resources": ["services", "configmaps", "persistentvolumeclaims"],
     "verbs": ["get", "list", "watch", "create", "delete", "deletecollection"]},
)


# -- inputs ---------------------------------------------------------------------------------------
class Restore(NamedTuple):
    """What a deployment starts from; a plain ``("savepoint", path)`` tuple works too."""

    kind: Literal["savepoint", "checkpoint"]
    path: str


@dataclass(frozen=True)
class DeploymentTarget:
    """One deployment as the reconciler decided it (written to status before the edge acts)."""

    number: int  # 1, 2, ...: the driver pod's name suffix
    parallelism: int  # may differ from spec.parallelism while a rescale is carried out
    restore: Restore | tuple[str, str] | None = None
    overrides: tuple[tuple[str, int], ...] = ()  # operator (uid) -> parallelism above ``parallelism``
    # operator settings
    entrypoint: str = ENTRYPOINT
    kubernetes_master: str = KUBERNETES_MASTER

    def __post_init__(self) -> None:
        if self.number < 1:
            raise ValueError(f"deployment number must be >= 1, got {self.number}")
        if self.parallelism < 1:
            raise ValueError(f"parallelism must be >= 1, got {self.parallelism}")
        if self.restore is not None:
            restore = Restore(*self.restore)
            if restore.kind not in ("savepoint", "checkpoint") or not restore.path:
                raise ValueError(f"restore must be ('savepoint' | 'checkpoint', path), got {self.restore!r}")
            object.__setattr__(self, "restore", restore)


@dataclass(frozen=True)
class Owner:
    """The StreamJob every object belongs to."""

    name: str
    namespace: str
    uid: str


# The Service is named <name>, so the StreamJob's name must be a DNS-1035 label (the strictest of the
# name rules of what it owns); it is also a label value, which has the same 63-character limit.
_DNS_1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def name_problem(name: str) -> str | None:
    """Why a StreamJob of this name cannot own its objects, or None."""
    if len(name) > 63 or not _DNS_1035_LABEL.match(name):
        return (f"name {name!r}: must be at most 63 lowercase letters, digits and '-', start with a letter and "
                f"end with a letter or digit (it names the job's Service)")
    return None


# -- names and labels (part of the contract: users see them with kubectl) -------------------------------
class names:  # noqa: N801 - a namespace of functions: names.driver_pod(name, n)
    @staticmethod
    def driver_pod(name: str, n: int) -> str:
        return f"{name}-driver-{n}"

    @staticmethod
    def service(name: str) -> str:
        return name

    @staticmethod
    def config_map(name: str) -> str:
        return f"{name}-config"

    @staticmethod
    def rest_token_secret(name: str) -> str:
        return f"{name}-rest-token"

    @staticmethod
    def driver_service_account(name: str) -> str:
        return f"{name}-driver"

    @staticmethod
    def driver_role(name: str) -> str:
        return f"{name}-driver"

    @staticmethod
    def driver_role_binding(name: str) -> str:
        return f"{name}-driver"


def selector(name: str) -> str:
    """Label selector of all the job's pods (status.selector, the scale subresource)."""
    return f"{LABEL_JOB}={name}"


def common_labels(name: str) -> dict[str, str]:
    return {LABEL_NAME: APP_NAME, LABEL_INSTANCE: name, LABEL_MANAGED_BY: MANAGED_BY, LABEL_JOB: name}


def driver_labels(name: str, n: int) -> dict[str, str]:
    return {**common_labels(name), LABEL_COMPONENT: "driver", LABEL_DEPLOYMENT: str(n)}


def executor_labels(name: str) -> dict[str, str]:
    return {**common_labels(name), LABEL_COMPONENT: "executor"}


def driver_selector_labels(name: str, n: int) -> dict[str, str]:
    """The Service selects the *current* deployment's driver only: an old pod still terminating never answers."""
    return {LABEL_JOB: name, LABEL_COMPONENT: "driver", LABEL_DEPLOYMENT: str(n)}


def owner_reference(owner: Owner) -> dict[str, Any]:
    return {"apiVersion": f"{API_GROUP}/{API_VERSION}", "kind": KIND, "name": owner.name, "uid": owner.uid,
            "controller": True, "blockOwnerDeletion": True}


def _metadata(owner: Owner, name: str, labels: dict[str, str],
              annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": owner.namespace, "labels": labels}
    if annotations:
        meta["annotations"] = annotations
    meta["ownerReferences"] = [owner_reference(owner)]
    return meta


# -- conversions ----------------------------------------------------------------------------------
_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(m|k|M|G|T|Ki|Mi|Gi|Ti)?$")
_QUANTITY_FACTOR = {None: Decimal(1), "m": Decimal("0.001"), "k": Decimal(10) ** 3, "M": Decimal(10) ** 6,
                    "G": Decimal(10) ** 9, "T": Decimal(10) ** 12, "Ki": Decimal(2) ** 10, "Mi": Decimal(2) ** 20,
                    "Gi": Decimal(2) ** 30, "Ti": Decimal(2) ** 40}
_MIB = 2 ** 20
_GIB = 2 ** 30


def duration_ms(duration: str) -> str:
    """``10s`` -> ``"10000"``: the runtime reads plain milliseconds (it does not read Go's ``5m``)."""
    return str(int(round(seconds(duration) * 1000)))


def quantity_bytes(quantity: str) -> int:
    m = _QUANTITY.match(quantity)
    if not m:
        raise ValueError(f"not a Kubernetes quantity: {quantity!r}")
    return int(Decimal(m.group(1)) * _QUANTITY_FACTOR[m.group(2)])


def spark_memory(quantity: str) -> str:
    """A Kubernetes memory quantity as Spark writes sizes (binary units): ``2Gi`` -> ``2g``, ``512Mi`` ->
    ``512m``, decimal units rounded down to whole MiB (``2G`` -> ``1907m``: Spark has no decimal units)."""
    size = quantity_bytes(quantity)
    if size % _GIB == 0 and size:
        return f"{size // _GIB}g"
    if size < _MIB:
        raise ValueError(f"memory {quantity!r}: less than 1Mi")
    return f"{size // _MIB}m"


def _bool(value: bool) -> str:
    return "true" if value else "false"


# -- the job configuration (ConfigMap job.conf) ------------------------------------------------------
def job_configuration(spec: StreamJobSpec) -> dict[str, str]:
    """The runtime configuration a deployment reads (``--conf-file``), by precedence: the operator's
    derived keys, then ``spec.sparkConf``, then ``spec.config`` (user keys win; see the module doc)."""
    conf: dict[str, str] = {}
    conf.update(_checkpointing_conf(spec))
    conf["state.backend.type"] = spec.state_backend
    if spec.max_parallelism is not None:
        conf["pipeline.max-parallelism"] = str(spec.max_parallelism)
    conf.update(_restart_strategy_conf(spec))
    if spec.s3 is not None:
        conf.update(_s3_conf(spec.s3))
    conf.update(_pod_conf())
    if spec.mode == DeploymentMode.KUBERNETES.value:
        conf.update(_kubernetes_conf(spec))
    conf.update(spec.spark_conf)
    conf.update(spec.config)
    return dict(sorted(conf.items()))



def _checkpointing_conf(spec: StreamJobSpec) -> dict[str, str]:
    conf: dict[str, str] = {}
    c = spec.checkpointing
    if c is not None:
        prefix = "execution.checkpointing."
        conf.update({
            prefix + "interval": duration_ms(c.interval),
            prefix + "mode": c.mode,
            prefix + "timeout": duration_ms(c.timeout),
            prefix + "min-pause": duration_ms(c.min_pause),
            prefix + "tolerable-failed-checkpoints": str(c.tolerable_failures),
            prefix + "num-retained": str(c.retained),
            prefix + "incremental": _bool(c.incremental),
            # A last-state upgrade cancels the job and restores its newest retained checkpoint:
            # cancelling must not delete it.
            prefix + "externalized-checkpoint-retention": "RETAIN_ON_CANCELLATION",
        })
    if spec.checkpoint_dir:
        conf["execution.checkpointing.dir"] = spec.checkpoint_dir
    if spec.savepoint_dir:
        conf["execution.checkpointing.savepoint-dir"] = spec.savepoint_dir
    return conf


def _restart_strategy_conf(spec: StreamJobSpec) -> dict[str, str]:
    r = spec.restart_strategy
    if r is None:
        return {}
    prefix = f"restart-strategy.{r.type}."
    fields: dict[str, Any] = {}
    if r.type == "fixed-delay":
        fields = {"attempts": r.attempts, "delay": r.delay}
    elif r.type == "exponential-delay":
        fields = {"initial-backoff": r.initial_backoff, "max-backoff": r.max_backoff}
    elif r.type == "failure-rate":
        fields = {"max-failures-per-interval": r.max_failures_per_interval,
                  "failure-rate-interval": r.failure_rate_interval, "delay": r.delay}
    conf = {"restart-strategy.type": r.type}
    for key, value in fields.items():
        if value is not None:  # unset: the runtime's default for that strategy
            conf[prefix + key] = str(value) if isinstance(value, int) else duration_ms(value)
    return conf


def _s3_conf(s3: S3Spec) -> dict[str, str]:
    conf = {"s3.path.style.access": _bool(s3.path_style_access)}
    if s3.endpoint:
        conf["s3.endpoint"] = s3.endpoint
    return conf


def _pod_conf() -> dict[str, str]:
    """What makes the pod's ports and final result what the operator and the Service expect."""
    return {
        "rest.address": f"0.0.0.0:{REST_PORT}",
        "rest.result-linger": str(REST_RESULT_LINGER_MS),
        "jobmanager.rpc.port": str(RPC_PORT),
        "queryable-state.proxy.ports": str(QUERY_PROXY_PORT),
        "spark.driver.port": str(SPARK_DRIVER_PORT),
        "spark.driver.blockManager.port": str(SPARK_BLOCK_MANAGER_PORT),
        "kubernetes.termination-log": TERMINATION_LOG,
    }


def _kubernetes_conf(spec: StreamJobSpec) -> dict[str, str]:
    """Executor pods. Spark sizes the pod itself from these keys (it overrides a template's resources):
    the pod's memory is spark.executor.memory *plus* Spark's memory overhead (spark.executor.memoryOverhead,
    by default max(384Mi, 10%); 40% for non-JVM jobs), so the executor pod asks for more than
    spec.executor.resources.memory. spark.executor.cores is left unset on purpose: the runtime sizes
    executors (slots, spark.executor.instances) from kubernetes.executor.cores unless a user sets it."""
    res = spec.executor.resources
    conf = {
        "kubernetes.executor.cores": str(spec.executor.cores),
        "kubernetes.executor.pod-template-file": f"{CONFIG_DIR}/{EXECUTOR_POD_TEMPLATE}",
        "spark.kubernetes.executor.podTemplateContainerName": EXECUTOR_CONTAINER,
        "spark.kubernetes.container.image.pullPolicy": spec.image_pull_policy,
        "spark.kubernetes.executor.request.cores": res.cpu,  # Spark takes Kubernetes CPU quantities as they are
        "spark.executor.memory": spark_memory(res.memory),
    }
    if res.cpu_limit:
        conf["spark.kubernetes.executor.limit.cores"] = res.cpu_limit
    return conf


def render_job_conf(conf: dict[str, str]) -> str:
    """``key=value`` lines, sorted; a line break inside a key or value would forge another key."""
    lines = []
    for key, value in sorted(conf.items()):
        if not key.strip() or "=" in key or any(c in key + value for c in "\r\n"):
            raise ValueError(f"configuration {key!r}: keys need no '=' and neither key nor value a line break")
        lines.append(f"{key}={value}\n")
    return "".join(lines)


# -- pod pieces -----------------------------------------------------------------------------------------
def _field_env(name: str, field_path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": field_path}}}


def _secret_env(name: str, secret: str, key: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}


def _downward_env() -> list[dict[str, Any]]:
    """The runtime binds all interfaces and advertises POD_IP; POD_NAME makes Spark's executor pods
    owned by the driver pod."""
    return [_field_env(ENV_POD_IP, "status.podIP"), _field_env(ENV_POD_NAME, "metadata.name"),
            _field_env(ENV_POD_NAMESPACE, "metadata.namespace")]


def _s3_env(s3: S3Spec | None) -> list[dict[str, Any]]:
    """Credentials through the standard AWS variables (s3fs and every AWS SDK read them); executors need
    them as much as the driver: tasks write their state to checkpoint storage."""
    if s3 is None:
        return []
    env = []
    if s3.access_key_id:
        env.append(_secret_env("AWS_ACCESS_KEY_ID", s3.access_key_id.name, s3.access_key_id.key))
    if s3.secret_access_key:
        env.append(_secret_env("AWS_SECRET_ACCESS_KEY", s3.secret_access_key.name, s3.secret_access_key.key))
    if s3.endpoint:
        env.append({"name": "AWS_ENDPOINT_URL_S3", "value": s3.endpoint})
    if s3.region:
        # botocore (s3fs) reads AWS_DEFAULT_REGION; most other SDKs AWS_REGION.
        env += [{"name": "AWS_REGION", "value": s3.region}, {"name": "AWS_DEFAULT_REGION", "value": s3.region}]
    return env


def merge_env(ours: list[dict[str, Any]], user: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Ours first (so the user's values can refer to them as $(POD_IP)), then the user's; a user entry
    replaces ours of the same name (the API server would keep duplicates, the kubelet the last one)."""
    user_names = {e.get("name") for e in user}
    return [e for e in ours if e["name"] not in user_names] + copy.deepcopy(user)


def _user_pod_labels(spec: StreamJobSpec, ours: dict[str, str]) -> dict[str, str]:
    return {**spec.pod.labels, **ours}  # ours win: Services, selectors and the operator find pods by them


def _pod_security_context(spec: StreamJobSpec) -> dict[str, Any]:
    if spec.pod.security_context is not None:
        return copy.deepcopy(spec.pod.security_context)
    return {"runAsNonRoot": True, "runAsUser": IMAGE_UID, "runAsGroup": IMAGE_UID, "fsGroup": IMAGE_UID,
            "seccompProfile": {"type": "RuntimeDefault"}}


def _container_security_context(spec: StreamJobSpec) -> dict[str, Any]:
    if spec.pod.container_security_context is not None:
        return copy.deepcopy(spec.pod.container_security_context)
    return {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}}


def container_resources(res: Resources) -> dict[str, Any]:
    """Memory: request = limit (a pod over its memory request is the first the kubelet evicts). CPU: a
    limit only when cpuLimit is given (a CPU limit throttles checkpoints and barrier alignment)."""
    limits: dict[str, str] = {"memory": res.memory}
    if res.cpu_limit:
        limits["cpu"] = res.cpu_limit
    return {"requests": {"cpu": res.cpu, "memory": res.memory}, "limits": limits}


def _tmp_volume(name: str = VOLUME_TMP) -> dict[str, Any]:
    return {"name": name, "emptyDir": {}}


def _tmp_mount(name: str = VOLUME_TMP) -> dict[str, Any]:
    return {"name": name, "mountPath": TMP_DIR}


def _pod_placement(spec: StreamJobSpec) -> dict[str, Any]:
    """Scheduling and pulling, as the user gave them (empty ones left out, so a diff shows only what is set)."""
    pod = spec.pod
    out: dict[str, Any] = {}
    if pod.node_selector:
        out["nodeSelector"] = dict(pod.node_selector)
    if pod.tolerations:
        out["tolerations"] = copy.deepcopy(pod.tolerations)
    if pod.affinity:
        out["affinity"] = copy.deepcopy(pod.affinity)
    if pod.image_pull_secrets:
        out["imagePullSecrets"] = copy.deepcopy(pod.image_pull_secrets)
    return out


PARALLELISM_OVERRIDES = "pipeline.jobvertex-parallelism-overrides"  # the runtime's Options.PARALLELISM_OVERRIDES


def driver_args(spec: StreamJobSpec, target: DeploymentTarget) -> list[str]:
    """The entrypoint's ``driver`` followed by a ``streamjob run`` command line."""
    job = spec.job
    args = ["driver", "run"]
    args += [job.file] if job.file else ["--module", job.module or ""]
    args += ["--parallelism", str(target.parallelism)]
    # Mode local: no master, so the runtime takes local[N] with N the slots its job graph needs (operators
    # may set_parallelism above spec.parallelism); mode kubernetes: it sizes the executors likewise.
    if spec.mode == DeploymentMode.KUBERNETES.value:
        args += ["--master", target.kubernetes_master]
    elif spec.autoscaler is not None and spec.autoscaler.enabled:
        # The autoscaler rescales in place, within the driver pod: local Spark gets the slots it may scale
        # to up front (its task threads start as they are used), not only what the first graph needs.
        args += ["--master", f"local[{spec.autoscaler.max_parallelism or spec.max_parallelism}]"]
    args += ["--conf-file", f"{CONFIG_DIR}/{JOB_CONF}"]
    if target.overrides:
        # On top of the user's own (spec.config): the runtime reads the pairs in order, the later one wins.
        pairs = [str(spec.config.get(PARALLELISM_OVERRIDES) or "").strip(" ,"), *(f"{k}:{n}" for k, n in target.overrides)]
        args += ["--conf", f"{PARALLELISM_OVERRIDES}=" + ",".join(p for p in pairs if p)]
    if target.restore is not None:
        args += [f"--from-{target.restore.kind}", target.restore.path]
        if target.restore.kind == "checkpoint":
            # Continue as the same job in its own directory (Flink's CLAIM): its retained checkpoints
            # stay under retention instead of piling up as a new job's leftovers on every redeploy.
            args += ["--conf", "execution.state-recovery.claim-mode=CLAIM"]
    if spec.allow_non_restored_state:
        args.append("--allow-non-restored-state")
    args.append("--no-progress")  # a pod's log is no terminal
    return [*args, "--", *job.args]


def _driver_env(name: str, spec: StreamJobSpec) -> list[dict[str, Any]]:
    ours = [*_downward_env(), {"name": ENV_IMAGE, "value": spec.image},
            _secret_env(ENV_REST_TOKEN, names.rest_token_secret(name), REST_TOKEN_KEY), *_s3_env(spec.s3)]
    return merge_env(ours, spec.pod.env)


def driver_container(name: str, spec: StreamJobSpec, target: DeploymentTarget) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": DRIVER_CONTAINER,
        "image": spec.image,
        "imagePullPolicy": spec.image_pull_policy,
        "command": [target.entrypoint],  # explicit: a custom image's CMD/ENTRYPOINT must not change what runs
        "args": driver_args(spec, target),
        "env": _driver_env(name, spec),
    }
    if spec.pod.env_from:
        container["envFrom"] = copy.deepcopy(spec.pod.env_from)
    container.update({
        "ports": [{"name": port_name, "containerPort": port, "protocol": "TCP"} for port_name, port in PORTS],
        # No liveness probe: a restart would start the job without its state (restartPolicy Never makes the
        # pod fail instead, and the operator redeploys from the latest checkpoint).
        # Short period: Spark on Kubernetes waits for the driver pod to be Ready before asking for executors.
        "readinessProbe": {"httpGet": {"path": READINESS_PATH, "port": "rest"},
                           "periodSeconds": 2, "timeoutSeconds": 2, "failureThreshold": 5},
        "resources": container_resources(spec.driver.resources),
        "securityContext": _container_security_context(spec),
        "terminationMessagePath": TERMINATION_LOG,
        # The job manager writes its final result there; a crash before that leaves the log's tail.
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [
            {"name": VOLUME_CONFIG, "mountPath": CONFIG_DIR, "readOnly": True},
            _tmp_mount(),
            *copy.deepcopy(spec.pod.volume_mounts),
        ],
    })
    return container


def _driver_service_account(name: str, spec: StreamJobSpec) -> dict[str, Any]:
    if spec.mode == DeploymentMode.KUBERNETES.value:
        return {"serviceAccountName": names.driver_service_account(name)}
    if spec.pod.service_account_name:
        return {"serviceAccountName": spec.pod.service_account_name}
    # mode local talks to no API server: no token in the pod
    return {"automountServiceAccountToken": False}


def driver_pod(owner: Owner, spec: StreamJobSpec, target: DeploymentTarget) -> dict[str, Any]:
    name = owner.name
    pod_spec: dict[str, Any] = {
        # The operator owns redeploys: a restarted container would start the job without its state.
        "restartPolicy": "Never",
        **_driver_service_account(name, spec),
        # No <SERVICE>_PORT variables from every Service in the namespace (a Service named "spark" would
        # hand the job SPARK_* variables).
        "enableServiceLinks": False,
        "securityContext": _pod_security_context(spec),
        "containers": [driver_container(name, spec, target)],
        "volumes": [
            {"name": VOLUME_CONFIG, "configMap": {"name": names.config_map(name)}},
            _tmp_volume(),
            *copy.deepcopy(spec.pod.volumes),
        ],
        **_pod_placement(spec),
    }
    # What the pod runs: its spec and its job configuration (the ConfigMap is shared by deployments).
    spec_hash = content_hash({"spec": pod_spec, "config": config_map_data(name, spec, target.entrypoint)})
    annotations = {**spec.pod.annotations, ANNOTATION_SPEC_HASH: spec_hash}
    labels = _user_pod_labels(spec, driver_labels(name, target.number))
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": _metadata(owner, names.driver_pod(name, target.number), labels, annotations),
            "spec": pod_spec}


# -- executor pod template (mode kubernetes) ----------------------------------------------------------------
def executor_pod_template(name: str, spec: StreamJobSpec, entrypoint: str = ENTRYPOINT) -> dict[str, Any]:
    """Spark's executor pod template (client mode). Spark fills in name, owner (the driver pod), image,
    pull policy, resources, args ``executor`` and its SPARK_* variables; the template adds what Spark
    cannot know: our entrypoint, security, the user's pod overrides, our labels."""
    ours_env = [*_downward_env(), *_s3_env(spec.s3)]
    container: dict[str, Any] = {
        "name": EXECUTOR_CONTAINER,
        "command": [entrypoint],  # Spark appends the args: executor
        "env": merge_env(ours_env, spec.pod.env),
    }
    if spec.pod.env_from:
        container["envFrom"] = copy.deepcopy(spec.pod.env_from)
    container["securityContext"] = _container_security_context(spec)
    container["volumeMounts"] = [_tmp_mount(VOLUME_EXECUTOR_TMP), *copy.deepcopy(spec.pod.volume_mounts)]
    pod_spec: dict[str, Any] = {}
    if spec.pod.service_account_name:  # e.g. cloud identity for object storage; else no API token
        pod_spec["serviceAccountName"] = spec.pod.service_account_name
    else:
        pod_spec["automountServiceAccountToken"] = False
    pod_spec.update({
        "enableServiceLinks": False,
        "securityContext": _pod_security_context(spec),
        "containers": [container],
        "volumes": [_tmp_volume(VOLUME_EXECUTOR_TMP), *copy.deepcopy(spec.pod.volumes)],
        **_pod_placement(spec),
    })
    metadata: dict[str, Any] = {"labels": _user_pod_labels(spec, executor_labels(name))}
    if spec.pod.annotations:
        metadata["annotations"] = dict(spec.pod.annotations)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": pod_spec}


def render_pod_template(template: dict[str, Any]) -> str:
    """JSON, which is YAML too (Spark's parser reads it): deterministic, and no YAML library needed."""
    return json.dumps(template, indent=2, sort_keys=True) + "\n"


# -- objects --------------------------------------------------------------------------------------------
def config_map_data(name: str, spec: StreamJobSpec, entrypoint: str = ENTRYPOINT) -> dict[str, str]:
    data = {JOB_CONF: render_job_conf(job_configuration(spec))}
    if spec.mode == DeploymentMode.KUBERNETES.value:
        data[EXECUTOR_POD_TEMPLATE] = render_pod_template(executor_pod_template(name, spec, entrypoint))
    return data


def config_map(owner: Owner, spec: StreamJobSpec, entrypoint: str = ENTRYPOINT) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": _metadata(owner, names.config_map(owner.name), common_labels(owner.name)),
            "data": config_map_data(owner.name, spec, entrypoint)}


def rest_token_secret(owner: Owner, token: str) -> dict[str, Any]:
    """The edge generates the token once (secrets.token_urlsafe) and never rotates it: a running job
    manager read it at start."""
    if not token:
        raise ValueError("the REST token must not be empty (an empty token turns authentication off)")
    return {"apiVersion": "v1", "kind": "Secret",
            "metadata": _metadata(owner, names.rest_token_secret(owner.name), common_labels(owner.name)),
            "type": "Opaque", "stringData": {REST_TOKEN_KEY: token}}


def service(owner: Owner, target: DeploymentTarget) -> dict[str, Any]:
    """Headless: stable DNS for the current driver pod. publishNotReadyAddresses: executors must reach the
    driver before its REST API (the readiness probe) is up."""
    labels = {**common_labels(owner.name), LABEL_COMPONENT: "driver"}
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": _metadata(owner, names.service(owner.name), labels),
            "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                     "selector": driver_selector_labels(owner.name, target.number),
                     "ports": [{"name": port_name, "port": port, "targetPort": port_name, "protocol": "TCP"}
                               for port_name, port in PORTS]}}


def service_account(owner: Owner) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": _metadata(owner, names.driver_service_account(owner.name), common_labels(owner.name))}


def role(owner: Owner) -> dict[str, Any]:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": _metadata(owner, names.driver_role(owner.name), common_labels(owner.name)),
            "rules": copy.deepcopy(list(DRIVER_ROLE_RULES))}


def role_binding(owner: Owner) -> dict[str, Any]:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": _metadata(owner, names.driver_role_binding(owner.name), common_labels(owner.name)),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                        "name": names.driver_role(owner.name)},
            "subjects": [{"kind": "ServiceAccount", "name": names.driver_service_account(owner.name),
                          "namespace": owner.namespace}]}


def owned_objects(name: str, namespace: str, uid: str, spec: StreamJobSpec, target: DeploymentTarget,
                  token: str) -> list[dict[str, Any]]:
    """Everything the deployment needs, in apply order: what the pod refers to exists before the pod."""
    problem = name_problem(name)
    if problem:
        raise ValueError(problem)
    owner = Owner(name, namespace, uid)
    objects: list[dict[str, Any]] = []
    if spec.mode == DeploymentMode.KUBERNETES.value:
        objects += [service_account(owner), role(owner), role_binding(owner)]
    objects += [rest_token_secret(owner, token), config_map(owner, spec, target.entrypoint), service(owner, target),
                driver_pod(owner, spec, target)]
    return objects


def content_hash(obj: Any) -> str:
    """A short stable hash of JSON-able data (key order does not matter)."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]
