"""The StreamJob custom resource: pydantic models of its spec and status.

These models are the source of truth: the CRD in ``crds/`` is generated from
them (``streamjob operator crd``), the operator parses every resource it reads
with them, and the API server's own schema and CEL rules (``x-kubernetes-
validations``, declared here next to the fields they guard) refuse what can be
refused before the operator ever sees it. Field names are camelCase, as in
every Kubernetes API; Python attributes are snake_case.

Durations are Kubernetes/Go style strings (``30s``, ``5m``, ``1h30m``, ``500ms``).
"""

from __future__ import annotations

import re
from enum import Enum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator
from pydantic.alias_generators import to_camel

from .version import API_GROUP, API_VERSION

KIND = "StreamJob"
PLURAL = "streamjobs"
SINGULAR = "streamjob"
SHORT_NAMES = ["sj"]
CATEGORIES = ["all", "streamjob"]

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}

Duration = Annotated[str, StringConstraints(pattern=DURATION_PATTERN)]
# Kubernetes quantities (CPU "500m", "2"; memory "2Gi", "512M").
Quantity = Annotated[str, StringConstraints(pattern=r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|Ki|Mi|Gi|Ti)?$")]
ConfValue = Annotated[str, StringConstraints(max_length=4096)]
MemoryQuantity = Annotated[str, StringConstraints(pattern=r"^[0-9]+(k|M|G|T|Ki|Mi|Gi|Ti)?$")]


def seconds(duration: str) -> float:
    """``1h30m`` -> 5400.0 (the string already passed ``DURATION_PATTERN``)."""
    return sum(float(n) * _UNIT_SECONDS[u] for n, u in _DURATION_PART.findall(duration))


class _Model(BaseModel):
    # validate_default: enum defaults become their values too, so a dump is plain JSON.
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid",
                              use_enum_values=True, validate_default=True)


# Kubernetes' own object types (env vars, volumes, affinity, ...) are passed through to the
# pods as given: the API server validates them there, and copying their schemas here would
# only drift. The CRD marks them x-kubernetes-preserve-unknown-fields.
K8sObject = Annotated[dict[str, Any], Field(json_schema_extra={"x-kubernetes-preserve-unknown-fields": True})]


# -- spec --------------------------------------------------------------------------------------
class JobState(str, Enum):
    RUNNING = "running"
    SUSPENDED = "suspended"


class UpgradeMode(str, Enum):
    STATELESS = "stateless"  # redeploy fresh: state is dropped
    SAVEPOINT = "savepoint"  # stop-with-savepoint, redeploy from it
    LAST_STATE = "last-state"  # cancel, redeploy from the latest retained checkpoint


class DeploymentMode(str, Enum):
    LOCAL = "local"  # the whole job in the driver pod on local[N] Spark
    KUBERNETES = "kubernetes"  # Spark's Kubernetes backend creates executor pods


class JobSource(_Model):
    """Which program to run: a file in the image, or an importable module."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [
        {"rule": "has(self.file) != has(self.module)", "message": "job: give exactly one of file or module"}]})
    file: Annotated[str, Field(min_length=1, description="Path of the job file inside the image")] | None = None
    module: Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$",
                                 description="Python module to run (python -m)")] | None = None
    args: list[str] = Field(default_factory=list, description="Arguments passed to the job")


class Checkpointing(_Model):
    interval: Duration = Field("10s", description="Time between checkpoints")
    mode: Literal["EXACTLY_ONCE", "AT_LEAST_ONCE"] = "EXACTLY_ONCE"
    timeout: Duration = Field("10m", description="A checkpoint not complete by then fails")
    min_pause: Duration = Field("0s", description="Least time between the end of one checkpoint and the next")
    tolerable_failures: int = Field(0, ge=0, description="Failed checkpoints in a row before the job restarts")
    retained: int = Field(3, ge=1, description="Completed checkpoints kept (last-state upgrades use the newest)")
    incremental: bool = Field(False, description="RocksDB: upload only new SST files")


class RestartStrategy(_Model):
    """The runtime's own restart strategy (Flink's ``restart-strategy.*``): restarts inside one deployment."""

    type: Literal["none", "fixed-delay", "exponential-delay", "failure-rate"] = "exponential-delay"
    attempts: int | None = Field(None, ge=0, description="fixed-delay: restarts before the job fails")
    delay: Duration | None = Field(None, description="fixed-delay / failure-rate: wait between restarts")
    initial_backoff: Duration | None = None
    max_backoff: Duration | None = None
    max_failures_per_interval: int | None = Field(None, ge=1)
    failure_rate_interval: Duration | None = None


class Resources(_Model):
    cpu: Quantity = Field("1", description="CPU request")
    cpu_limit: Quantity | None = Field(None, description="CPU limit (none unless set)")
    memory: MemoryQuantity = Field("2Gi", description="Memory request and limit of the container (Spark adds its "
                                                      "memory overhead to executors)")


class DriverSpec(_Model):
    resources: Resources = Field(default_factory=Resources)


class ExecutorSpec(_Model):
    cores: int = Field(1, ge=1, le=64, description="Task slots per executor pod (mode: kubernetes)")
    resources: Resources = Field(default_factory=Resources)


# Where the operator's pods and Spark's executor pods mount volumes of their own (resources.py, and
# Spark's Kubernetes backend: its local directories and executor configuration): a user volume of such a
# name, or a mount at such a path, would make the API server refuse the pod when it is created.
RESERVED_VOLUME_PREFIXES = ("streamjob-", "spark-")
RESERVED_MOUNT_PATHS = ("/etc/streamjob", "/tmp", "/opt/spark/conf")


class PodOverrides(_Model):
    """Applied to the driver pod and, in mode kubernetes, to executor pods."""

    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    env: list[K8sObject] = Field(default_factory=list)
    env_from: list[K8sObject] = Field(default_factory=list)
    volumes: list[K8sObject] = Field(default_factory=list)
    volume_mounts: list[K8sObject] = Field(default_factory=list)
    service_account_name: str | None = Field(None, description="Mode local: the driver's; mode kubernetes: the "
                                                                "executors' (the driver uses the job's own)")
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[K8sObject] = Field(default_factory=list)
    affinity: K8sObject | None = None
    security_context: K8sObject | None = Field(None, description="Pod security context")
    container_security_context: K8sObject | None = None
    image_pull_secrets: list[K8sObject] = Field(default_factory=list)

    @model_validator(mode="after")
    def _volumes_fit_ours(self) -> PodOverrides:
        """Checked here, not left to the API server: it would refuse the pod only at deployment (an
        executor pod, only when Spark creates it, long after the spec was accepted)."""
        names: list[str] = []
        for i, volume in enumerate(self.volumes):
            name = volume.get("name")
            if not isinstance(name, str) or not name:
                raise ValueError(f"volumes[{i}]: a volume needs a name")
            if name.startswith(RESERVED_VOLUME_PREFIXES):
                raise ValueError(f"volumes[{i}]: the name {name!r} is reserved (names starting with "
                                 f"{' or '.join(RESERVED_VOLUME_PREFIXES)} are the operator's and Spark's)")
            if name in names:
                raise ValueError(f"volumes[{i}]: the name {name!r} is used twice")
            names.append(name)
        paths: list[str] = []
        for i, mount in enumerate(self.volume_mounts):
            if mount.get("name") not in names:
                raise ValueError(f"volumeMounts[{i}]: {mount.get('name')!r} is not one of pod.volumes {names}")
            path = str(mount.get("mountPath") or "").rstrip("/") or "/"
            if path in RESERVED_MOUNT_PATHS:
                raise ValueError(f"volumeMounts[{i}]: {path} is where the job's pods mount their own volume "
                                 f"({', '.join(RESERVED_MOUNT_PATHS)} are taken)")
            if path in paths:
                raise ValueError(f"volumeMounts[{i}]: {path} is mounted twice")
            paths.append(path)
        return self


class SecretKeyRef(_Model):
    name: str = Field(min_length=1)
    key: str = Field(min_length=1)


class S3Spec(_Model):
    endpoint: str | None = Field(None, description="S3 API endpoint (MinIO, Ceph, ...); empty: AWS")
    region: str | None = None
    path_style_access: bool = False
    access_key_id: SecretKeyRef | None = Field(None, description="Secret key holding AWS_ACCESS_KEY_ID")
    secret_access_key: SecretKeyRef | None = Field(None, description="Secret key holding AWS_SECRET_ACCESS_KEY")


class SavepointPolicy(_Model):
    periodic_interval: Duration | None = Field(None, description="Take a savepoint this often (empty: never)")
    timeout: Duration = Field("10m", description="A savepoint not complete by then counts as failed")
    history_max_count: int = Field(10, ge=1, description="Savepoints kept in status.savepointHistory")
    history_max_age: Duration | None = Field(None, description="Older savepoints are disposed (never the newest)")


class RedeployPolicy(_Model):
    """What the operator does when the job fails beyond its restart strategy or its driver pod is lost."""

    max_redeploys: int = Field(3, ge=0, description="Redeploys from the latest checkpoint before FAILED")
    backoff: Duration = Field("10s", description="Wait before the first redeploy; doubles each time")
    max_backoff: Duration = Field("5m")


class HealthPolicy(_Model):
    restarts_threshold: int = Field(5, ge=1, description="Restarts within restartsWindow that make the job Degraded")
    restarts_window: Duration = "10m"
    stable_after: Duration = Field("1m", description="Running this long after a deploy makes its spec the stable one")
    rollback: bool = Field(False, description="Roll back to status.lastStableSpec if an upgrade is not stable in time")
    rollback_timeout: Duration = "5m"


class AutoscalerSpec(_Model):
    """The job autoscaler (the flink-kubernetes-operator's, FLIP-271): per job vertex, the parallelism that
    puts its utilization (target data rate / true processing rate, from busy time) at targetUtilization,
    applied by rescaling in place. Durations as everywhere in the spec."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [
        {"rule": "!has(self.maxParallelism) || self.minParallelism <= self.maxParallelism",
         "message": "autoscaler: minParallelism must not exceed maxParallelism", "fieldPath": ".minParallelism"},
        {"rule": "self.targetUtilization - self.targetUtilizationBoundary < 1.0",
         "message": "autoscaler: targetUtilization - targetUtilizationBoundary must be below 1 (else no load "
                    "is ever too high)", "fieldPath": ".targetUtilizationBoundary"},
    ]})

    enabled: bool = Field(False, description="Rescale the job's vertices to their load")
    dry_run: bool = Field(False, description="Evaluate and report (status.autoscaler, ScalingReport events, "
                                             "metrics) without rescaling")
    target_utilization: float = Field(0.7, gt=0, le=1, description="Busy share each vertex is sized for")
    target_utilization_boundary: float = Field(0.3, ge=0, le=1, description="Utilization within targetUtilization "
                                                                            "+- this is left alone")
    metrics_window: Duration = Field("10m", description="Metrics averaged over this window before a decision")
    metrics_interval: Duration = Field("10s", description="How often the job's metrics are sampled")
    stabilization_interval: Duration = Field("5m", description="No decision for this long after the job (re)starts "
                                                               "or rescales")
    scale_down_interval: Duration = Field("1h", description="A scale-down acts only once recommended for this long")
    catch_up_duration: Duration = Field("15m", description="Time to work off a source's backlog (Kafka lag) after "
                                                           "a scale-up")
    restart_time: Duration = Field("5m", description="Expected rescale downtime until rescales have been measured")
    min_parallelism: int = Field(1, ge=1, le=32768)
    max_parallelism: int | None = Field(None, ge=1, le=32768, description="Upper bound per vertex (also bounded by "
                                                                          "spec.maxParallelism and Kafka partitions)")
    scale_up_max_factor: float = Field(100000.0, gt=0, description="A scale-up at most multiplies by 1 + this")
    scale_down_max_factor: float = Field(0.6, ge=0, lt=1, description="A scale-down at most divides by 1 - this")
    excluded_operators: list[Annotated[str, StringConstraints(min_length=1, max_length=253)]] = Field(
        default_factory=list, max_length=256, description="Operator uids (or vertex names) never rescaled")


# Set by the operator so its pods, Service and job manager agree: a user's value would break the
# deployment (the ports the Service names, where the final result is written, the Spark master).
RESERVED_KEYS = frozenset({"rest.address", "jobmanager.rpc.port", "spark.driver.port", "spark.driver.blockManager.port",
                           "spark.driver.host", "spark.driver.bindAddress", "spark.master",
                           "kubernetes.termination-log", "rest.result-linger", "parallelism.default",
                           "execution.state-recovery.path", "spark.kubernetes.driver.pod.name"})


class StreamJobSpec(_Model):
    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [
        {"rule": "self.parallelism <= self.maxParallelism",
         "message": "parallelism must not exceed maxParallelism", "fieldPath": ".parallelism"},
        {"rule": "self.maxParallelism == oldSelf.maxParallelism",
         "message": "maxParallelism cannot change once set (it is the number of key groups of the job's state)",
         "fieldPath": ".maxParallelism"},
        {"rule": "self.upgradeMode != 'savepoint' || (has(self.savepointDir) && size(self.savepointDir) > 0)",
         "message": "upgradeMode savepoint needs savepointDir", "fieldPath": ".savepointDir"},
        {"rule": "self.upgradeMode != 'last-state' || (has(self.checkpointDir) && size(self.checkpointDir) > 0)",
         "message": "upgradeMode last-state needs checkpointDir", "fieldPath": ".checkpointDir"},
        {"rule": "self.upgradeMode != 'last-state' || has(self.checkpointing)",
         "message": "upgradeMode last-state needs checkpointing (it restores the latest checkpoint)",
         "fieldPath": ".checkpointing"},
        {"rule": "!has(self.sparkConf) || self.sparkConf.all(k, k.startsWith('spark.') && !(k in "
                 f"{sorted(RESERVED_KEYS)!r}))",
         "message": "sparkConf: keys start with spark., and the ports, addresses and master the operator "
                    "sets cannot be overridden", "fieldPath": ".sparkConf"},
        {"rule": "!has(self.config) || self.config.all(k, !(k in " f"{sorted(RESERVED_KEYS)!r}))",
         "message": "config: the ports, addresses and files the operator sets cannot be overridden",
         "fieldPath": ".config"},
        {"rule": "(!has(self.config) || self.config.all(k, !k.contains('=') && !k.contains('\\n') && "
                 "!self.config[k].contains('\\n'))) && (!has(self.sparkConf) || self.sparkConf.all(k, "
                 "!k.contains('=') && !k.contains('\\n') && !self.sparkConf[k].contains('\\n')))",
         "message": "config and sparkConf: keys cannot contain '=' or line breaks, values cannot contain line breaks",
         "fieldPath": ".config"},
        {"rule": "!self.savepointOnDeletion || (has(self.savepointDir) && size(self.savepointDir) > 0)",
         "message": "savepointOnDeletion needs savepointDir", "fieldPath": ".savepointDir"},
        {"rule": "!has(self.autoscaler) || !self.autoscaler.enabled || has(self.checkpointing)",
         "message": "autoscaler: it rescales the job in place from checkpoints; enable checkpointing",
         "fieldPath": ".autoscaler.enabled"},
        {"rule": "!has(self.autoscaler) || !self.autoscaler.enabled || self.upgradeMode != 'stateless'",
         "message": "autoscaler: a stateless job would lose its state on every rescale; use upgradeMode "
                    "savepoint or last-state", "fieldPath": ".upgradeMode"},
        {"rule": "!has(self.autoscaler) || !has(self.autoscaler.maxParallelism) || "
                 "self.autoscaler.maxParallelism <= self.maxParallelism",
         "message": "autoscaler.maxParallelism must not exceed maxParallelism (the job's key groups)",
         "fieldPath": ".autoscaler.maxParallelism"},
        {"rule": "!has(self.savepoints) || !has(self.savepoints.periodicInterval) || "
                 "(has(self.savepointDir) && size(self.savepointDir) > 0)",
         "message": "periodic savepoints need savepointDir", "fieldPath": ".savepointDir"},
    ]})

    image: str = Field(min_length=1, description="Image with streamjob and the job (one image for driver and executors)")
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"
    job: JobSource
    parallelism: int = Field(ge=1, le=32768)
    # Defaulted (to the runtime's own default) rather than optional, so the API server can hold it
    # fixed from the first apply: a job that ran without it must not get other key groups later.
    max_parallelism: int = Field(128, ge=1, le=32768, description="Key groups; fixed for the job's life")
    state: JobState = JobState.RUNNING
    upgrade_mode: UpgradeMode = UpgradeMode.STATELESS
    mode: DeploymentMode = DeploymentMode.LOCAL
    checkpointing: Checkpointing | None = Field(None, description="Off when absent")
    state_backend: Literal["hashmap", "rocksdb"] = "hashmap"
    checkpoint_dir: str | None = Field(None, description="file:// or s3:// directory for checkpoints")
    savepoint_dir: str | None = Field(None, description="file:// or s3:// directory for savepoints")
    initial_savepoint_path: str | None = Field(None, description="Savepoint the first deployment restores")
    allow_non_restored_state: bool = False
    restart_strategy: RestartStrategy | None = None
    driver: DriverSpec = Field(default_factory=DriverSpec)
    executor: ExecutorSpec = Field(default_factory=ExecutorSpec)
    # maxProperties bounds the CEL rules' cost over these maps (the API server refuses unbounded ones).
    # Bounded values too: without maxLength the API server costs every string as a whole request.
    spark_conf: dict[str, ConfValue] = Field(default_factory=dict, max_length=256,
                                             description="spark.* settings for the job's Spark")
    config: dict[str, ConfValue] = Field(default_factory=dict, max_length=256,
                                         description="Runtime options (as --conf key=value)")
    pod: PodOverrides = Field(default_factory=PodOverrides)
    s3: S3Spec | None = None
    savepoints: SavepointPolicy = Field(default_factory=SavepointPolicy)
    savepoint_on_deletion: bool = False
    redeploy: RedeployPolicy = Field(default_factory=RedeployPolicy)
    health: HealthPolicy = Field(default_factory=HealthPolicy)
    restart_nonce: int | None = Field(None, description="Change to redeploy with the same spec (as an upgrade)")
    autoscaler: AutoscalerSpec | None = Field(None, description="Size each job vertex to its load (off when absent)")


# -- status ------------------------------------------------------------------------------------
class LifecycleState(str, Enum):
    CREATED = "CREATED"  # seen, nothing deployed yet
    DEPLOYED = "DEPLOYED"  # a deployment is running, not yet stable
    STABLE = "STABLE"  # running its spec for health.stableAfter
    UPGRADING = "UPGRADING"  # stopping the old deployment to start a new spec
    SUSPENDED = "SUSPENDED"
    ROLLING_BACK = "ROLLING_BACK"
    ROLLED_BACK = "ROLLED_BACK"
    FAILED = "FAILED"
    DELETING = "DELETING"


class JobStatusState(str, Enum):
    """The job manager's state, as its REST API reports it, plus what the operator alone can know."""

    CREATED = "CREATED"
    RUNNING = "RUNNING"
    RESTARTING = "RESTARTING"
    FINISHED = "FINISHED"
    FAILED = "FAILED"
    CANCELED = "CANCELED"
    DEPLOYING = "DEPLOYING"  # the driver pod exists, the job manager does not answer yet
    UNKNOWN = "UNKNOWN"  # the job manager cannot be reached: never a stale RUNNING
    NOT_DEPLOYED = "NOT_DEPLOYED"


class TriggerType(str, Enum):
    MANUAL = "manual"  # the streamjob.io/savepoint annotation
    PERIODIC = "periodic"
    UPGRADE = "upgrade"
    SUSPEND = "suspend"
    DELETE = "delete"


class JobInfo(_Model):
    state: JobStatusState = JobStatusState.NOT_DEPLOYED
    job_id: str | None = None
    start_time: str | None = None
    restarts: int = 0
    error: str | None = None
    update_time: str | None = None


class CheckpointInfo(_Model):
    id: int
    time: str
    path: str


class SavepointInfo(_Model):
    path: str
    time: str
    trigger_type: TriggerType
    nonce: str | None = None
    request_id: str | None = None


class SavepointTrigger(_Model):
    """The savepoint in flight: written before it is triggered, so a restart resumes it, never repeats it."""

    request_id: str
    trigger_type: TriggerType
    nonce: str | None = None
    stop: bool = False
    target_dir: str
    trigger_time: str
    attempts: int = 0
    last_error: str | None = None
    next_attempt_time: str | None = None


class Deployment(_Model):
    """The deployment the operator made last: what it runs and what it restored."""

    number: int = 0  # 1, 2, ...: each redeploy is a new driver pod (name suffix)
    pod_name: str | None = None
    parallelism: int | None = None
    restore_kind: Literal["savepoint", "checkpoint"] | None = None
    restore_path: str | None = None
    deploy_time: str | None = None
    running_since: str | None = None  # when its job was first seen RUNNING; None: it never started
    spec: K8sObject | None = Field(None, description="The spec this deployment runs")
    overrides: dict[str, int] = Field(default_factory=dict, description="Operator (uid) -> parallelism this deployment "
                                      "runs above the spec's: the autoscaler's, kept by a redeploy")
    previous_spec: K8sObject | None = Field(None, description="The spec of the last deployment whose job ran: "
                                                              "what a rollback deploys")


class Upgrade(_Model):
    """An upgrade (or rescale, suspend, rollback, redeploy) in progress: the write-ahead record."""

    # RESCALING: in place (the job manager restarts the job from its next checkpoint at the new
    # parallelism: no savepoint, no new driver); the others: stop-with-savepoint or cancel, then redeploy.
    phase: Literal["STOPPING", "CANCELING", "DEPLOYING", "RESCALING"]
    reason: Literal["upgrade", "rescale", "suspend", "rollback", "redeploy", "autoscale"]
    mode: UpgradeMode
    savepoint_request_id: str | None = None
    restore_kind: Literal["savepoint", "checkpoint"] | None = None
    restore_path: str | None = None
    started_time: str
    phase_time: str
    target_spec: K8sObject = Field(description="The spec the next deployment runs")
    operators: dict[str, int] | None = Field(None, description="RESCALING by the autoscaler: vertex -> parallelism")
    attempts: int = 0  # failed stop-with-savepoint attempts; the old job keeps running meanwhile
    last_error: str | None = None
    next_attempt_time: str | None = None


class AutoscalerVertex(_Model):
    """One job vertex as the autoscaler last evaluated it (rates in records per second, all subtasks)."""

    vertex: str = Field(description="The vertex's head operator: its uid, else op<n> (what the rescale names)")
    name: str
    current_parallelism: int
    recommended_parallelism: int
    true_processing_rate: float | None = Field(None, description="Records in per second / busy share (None: too "
                                                                 "idle to measure)")
    target_data_rate: float | None = Field(None, description="None: not evaluated now (see reason)")
    utilization: float | None = None
    busy_ratio: float
    lag: float | None = Field(None, description="A source's backlog (pendingRecords)")
    reason: str = ""


class AutoscalerStatus(_Model):
    """What the autoscaler saw, decided and did (its memory between decisions, too)."""

    vertices: list[AutoscalerVertex] = Field(default_factory=list)
    last_evaluation_time: str | None = None
    last_decision: str | None = Field(None, description="The last decision and why")
    last_scaling_time: str | None = None
    overrides: dict[str, int] = Field(default_factory=dict, description="Vertex -> parallelism the autoscaler set")
    pending: dict[str, int] | None = Field(None, description="The rescale in place under way")
    stable_since: str | None = Field(None, description="The job has run without a (re)start or rescale since")
    scale_down_since: dict[str, str] = Field(default_factory=dict, description="Vertex -> since when a lower "
                                                                               "parallelism is recommended")
    restart_times: list[float] = Field(default_factory=list, description="Measured rescale downtimes, s")
    error: str | None = None


class Condition(_Model):
    type: Literal["Ready", "Progressing", "Degraded"]
    status: Literal["True", "False", "Unknown"]
    reason: str
    message: str = ""
    last_transition_time: str
    observed_generation: int | None = None


class StreamJobStatus(_Model):
    model_config = ConfigDict(extra="ignore")  # kopf keeps its own bookkeeping in status too

    lifecycle_state: LifecycleState = LifecycleState.CREATED
    job_status: JobInfo = Field(default_factory=JobInfo)
    parallelism: int = 0
    slots: int | None = Field(None, description="Task slots the running job's graph needs and asked Spark for: its "
                              "largest operator parallelism (set_parallelism may go above spec.parallelism), summed "
                              "over slot sharing groups")
    executors: int | None = Field(None, description="Executor pods requested for those slots (mode kubernetes)")
    selector: str | None = Field(None, description="Label selector of the job's pods (scale subresource)")
    last_checkpoint: CheckpointInfo | None = None
    last_savepoint: SavepointInfo | None = None
    savepoint_history: list[SavepointInfo] = Field(default_factory=list)
    pending_disposal: list[str] = Field(default_factory=list, description="Savepoints being disposed")
    savepoint_trigger: SavepointTrigger | None = None
    last_handled_nonce: str | None = None
    savepoint_failures: int = 0
    deployment: Deployment = Field(default_factory=Deployment)
    upgrade: Upgrade | None = None
    redeploys: int = 0
    next_redeploy_time: str | None = None
    conditions: Annotated[list[Condition], Field(json_schema_extra={
        "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]})] = Field(default_factory=list)
    error: str | None = None
    observed_generation: int = 0
    last_reconciled_spec: K8sObject | None = None
    last_stable_spec: K8sObject | None = None
    restart_history: list[str] = Field(default_factory=list, description="Times of recent job restarts")
    queryable_state: list[str] = Field(default_factory=list, description="Queryable state names the running job "
                                       "answers lookups of through its Service: GET /v1/state/<name>?key=<JSON>")
    autoscaler: AutoscalerStatus | None = None


class StreamJob(BaseModel):
    """A whole resource as the API server returns it."""

    model_config = ConfigDict(extra="ignore")
    api_version: str = Field(f"{API_GROUP}/{API_VERSION}", alias="apiVersion")
    kind: str = KIND
    metadata: dict[str, Any]
    spec: StreamJobSpec
    status: StreamJobStatus = Field(default_factory=StreamJobStatus)
