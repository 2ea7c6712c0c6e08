"""What the observer saw of one StreamJob's deployment, as plain values the reconciler decides on.

The observer (``observer.py``) fills these from the driver pod and the job
manager's REST API; it records, it never acts. Everything here is immutable so
a decision is a pure function of (spec, status, observation).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from .autoscaler import Collected, Vertex


@dataclass(frozen=True)
class PodObservation:
    name: str
    phase: str  # Pending, Running, Succeeded, Failed, Unknown
    ready: bool = False
    ip: str | None = None
    terminating: bool = False
    # Why the container does not start (ErrImagePull, ImagePullBackOff, CreateContainerConfigError, ...).
    waiting_reason: str | None = None
    waiting_message: str | None = None
    exit_code: int | None = None
    # The job manager's final word, from the container's termination message (JSON) when it ended.
    final_state: str | None = None
    final_savepoint: str | None = None
    final_error: str | None = None
    final_job_id: str | None = None

    @property
    def ended(self) -> bool:
        return self.phase in ("Succeeded", "Failed")


@dataclass(frozen=True)
class CheckpointObservation:
    id: int
    path: str
    completed_time: float  # epoch seconds


@dataclass(frozen=True)
class JobObservation:
    """``GET /v1/job`` of the deployment's job manager; ``reachable=False`` when it did not answer."""

    reachable: bool
    state: str | None = None  # CREATED, RUNNING, RESTARTING, FINISHED, FAILED, CANCELED
    job_id: str | None = None
    restarts: int = 0
    start_time: float | None = None
    parallelism: int | None = None  # the job's own (spec.parallelism as deployed)
    latest_checkpoint: CheckpointObservation | None = None
    final_savepoint: str | None = None
    error: str | None = None
    unreachable_reason: str | None = None
    slots: int | None = None  # what its job graph needs (operators of their own parallelism, slot sharing groups)
    executors: int | None = None  # executor pods requested for them (mode kubernetes)
    queryable_state: tuple[str, ...] | None = None  # names its REST API answers lookups of (None: not said)
    rescale: "RescaleObservation | None" = None  # the latest rescale in place it was asked for
    vertices: tuple[Vertex, ...] = ()  # its job vertices as the autoscaler sees them
    sample: Collected | None = None  # their metrics now (records in/out per second, busy time, backlog)


AUTOSCALE = "autoscale"  # rescale_errors' key for the autoscaler's rescale


@dataclass(frozen=True)
class RescaleObservation:
    """``/v1/job``'s ``rescale``: the latest in-place rescale (PUT /v1/jobs/{id}/parallelism)."""

    id: str
    status: str  # CHECKPOINTING, RESTARTING, COMPLETED, FAILED
    parallelism: int | None  # the job's parallelism it was asked for
    checkpoint_id: int | None = None
    error: str | None = None
    operators: dict[str, int] | None = None  # per vertex (uid or op<n>), when it named them
    restart_s: float | None = None  # from its checkpoint until every new task ran (the downtime it cost)


@dataclass(frozen=True)
class SavepointObservation:
    """``GET /v1/savepoints/{request id}`` for the trigger in flight."""

    request_id: str
    status: str  # QUEUED, IN_PROGRESS, COMPLETED, FAILED, UNKNOWN (not known to this job manager)
    path: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class Observation:
    now: datetime
    pod: PodObservation | None = None  # the current deployment's driver pod; None: it does not exist
    job: JobObservation | None = None  # None: not asked (no pod or no IP yet)
    savepoint: SavepointObservation | None = None
    # Results of actions the edge carried out since the last decision (idempotent if lost).
    disposed: frozenset[str] = frozenset()  # savepoint paths whose disposal succeeded
    dispose_errors: dict[str, str] = field(default_factory=dict)
    trigger_errors: dict[str, str] = field(default_factory=dict)  # request id -> why the trigger was refused
    # parallelism (AUTOSCALE: the autoscaler's per-vertex one) -> why a rescale in place was refused
    rescale_errors: dict[int | str, str] = field(default_factory=dict)
    # The job's samples over the autoscaler's metrics window, oldest first (kept by the glue, this one last).
    metrics_history: tuple[Collected, ...] = ()
    # Problems with the spec the API server could not see: field path -> message.
    spec_errors: dict[str, str] = field(default_factory=dict)
    other_pods: tuple[str, ...] = ()  # driver pods of earlier deployments still present
