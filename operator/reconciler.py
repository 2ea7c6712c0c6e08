"""The operator's decisions: pure functions of (resource, status, observation) -> plan.

Modelled on the flink-kubernetes-operator, with the status as a write-ahead
log: a plan's status is written (and the write confirmed) *before* its actions
run, and every action is idempotent (create-if-absent, delete-if-present,
savepoint triggers carrying a request id the job manager de-duplicates). So an
operator that dies between any two steps, or loses a status write, reaches the
same decision again and repeats only harmless steps: nothing is lost and no
savepoint is taken twice.

One decision per tick: ``decide`` records what was observed, then advances the
one thing in progress (an upgrade, a savepoint), else starts the next one
(redeploy after a failure, an upgrade for a changed spec, a savepoint asked for
by annotation or period), then tends the savepoint history and health.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from .events import Reason
from . import scaling
from .model import (AutoscalerStatus, CheckpointInfo, Condition, Deployment, JobInfo, JobStatusState, LifecycleState,
                    SavepointInfo, SavepointTrigger, StreamJobSpec, StreamJobStatus, TriggerType, Upgrade, UpgradeMode,
                    seconds)
from .observation import AUTOSCALE, Observation
from .resources import names
from .times import from_epoch, iso, parse_time

SAVEPOINT_ANNOTATION = "streamjob.io/savepoint"
MAX_SAVEPOINT_ATTEMPTS = 3  # per manual/periodic savepoint; upgrades retry until the spec changes
SAVEPOINT_BACKOFF = 10.0  # s before the first retry of a failed savepoint; doubles, at most 5 min
MAX_BACKOFF = 300.0

# Fields whose change needs no new deployment: the operator's own policies.
OPERATOR_ONLY_FIELDS = frozenset({"upgradeMode", "savepoints", "savepointOnDeletion", "redeploy", "health",
                                  "initialSavepointPath", "allowNonRestoredState", "state", "autoscaler"})
IMAGE_ERRORS = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull",
                          "CreateContainerConfigError", "CreateContainerError", "RunContainerError"})


# -- inputs and outputs ------------------------------------------------------------------------
@dataclass(frozen=True)
class Resource:
    """What the decision needs of the StreamJob object itself."""

    name: str
    namespace: str
    uid: str
    generation: int
    spec: StreamJobSpec | None  # None: the spec does not parse (spec_error says why)
    annotations: dict[str, str] = field(default_factory=dict)
    spec_error: str | None = None


@dataclass(frozen=True)
class Restore:
    kind: Literal["savepoint", "checkpoint"]
    path: str  # a savepoint directory, or a job's checkpoint directory (the newest is restored)


@dataclass(frozen=True)
class Deploy:
    """Create the deployment's driver pod (and the objects it needs) if absent."""

    number: int
    pod_name: str
    spec: dict[str, Any]  # the spec it runs (status.lastReconciledSpec)
    parallelism: int
    restore: Restore | None
    overrides: tuple[tuple[str, int], ...] = ()  # operator -> parallelism above the spec's (the autoscaler's)


@dataclass(frozen=True)
class DeletePod:
    name: str


@dataclass(frozen=True)
class TriggerSavepoint:
    request_id: str
    target_dir: str
    stop: bool


@dataclass(frozen=True)
class CancelJob:
    pod_name: str


@dataclass(frozen=True)
class RescaleJob:
    """PUT /v1/jobs/{id}/parallelism on the running job (idempotent: the same target twice is one rescale):
    the job's parallelism, or (the autoscaler) some vertices' by their head operator's uid / op<n>."""

    parallelism: int | None
    operators: tuple[tuple[str, int], ...] = ()

    @property
    def key(self) -> int | str:
        """How a refusal is fed back (Observation.rescale_errors)."""
        return AUTOSCALE if self.operators else int(self.parallelism or 0)


@dataclass(frozen=True)
class DisposeSavepoint:
    path: str


@dataclass(frozen=True)
class Event:
    reason: Reason
    message: str
    type: Literal["Normal", "Warning"] = "Normal"


Action = Deploy | DeletePod | TriggerSavepoint | CancelJob | DisposeSavepoint | RescaleJob


@dataclass
class Plan:
    status: StreamJobStatus
    actions: list[Action] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    requeue_after: float = 10.0  # s until the next decision, unless something changes first

    def act(self, action: Action) -> None:
        self.actions.append(action)

    def event(self, reason: Reason, message: str, warning: bool = False) -> None:
        self.events.append(Event(reason, message, "Warning" if warning else "Normal"))

    def soon(self, after: float = 1.0) -> None:
        self.requeue_after = min(self.requeue_after, after)


# -- time --------------------------------------------------------------------------------------
def _age(now: datetime, text: str | None) -> float:
    t = parse_time(text)
    return float("inf") if t is None else (now - t).total_seconds()


def backoff(attempts: int, first: float, most: float) -> float:
    return min(most, first * (2 ** max(0, attempts - 1)))


# -- names -------------------------------------------------------------------------------------
def request_id(resource: Resource, kind: str, token: str, attempt: int = 0) -> str:
    """A savepoint request id the job manager de-duplicates: the same (resource, kind, token, attempt)
    always gives the same id, so a trigger repeated after an operator restart takes no second savepoint."""
    digest = hashlib.sha256(f"{resource.uid}/{kind}/{token}".encode()).hexdigest()[:16]
    return f"sj-{kind}-{digest}" + (f"-a{attempt}" if attempt else "")


def spec_dict(spec: StreamJobSpec) -> dict[str, Any]:
    return spec.model_dump(mode="json", by_alias=True, exclude_none=True)


# -- spec changes ------------------------------------------------------------------------------
def classify(old: dict[str, Any] | None, new: dict[str, Any]) -> Literal["none", "deploy", "suspend", "resume",
                                                                         "rescale", "upgrade"]:
    """What a spec change needs, as in Flink's operator: a new deployment only when something the
    job runs with changed; operator policies (upgrade mode, savepoint policy, ...) apply in place."""
    if old is None:
        return "deploy"
    was, now = old.get("state", "running"), new.get("state", "running")
    if was != now:
        return "suspend" if now == "suspended" else "resume"
    changed = {k for k in set(old) | set(new) if old.get(k) != new.get(k)} - OPERATOR_ONLY_FIELDS
    if not changed:
        return "none"
    return "rescale" if changed == {"parallelism"} else "upgrade"


# -- the decision ------------------------------------------------------------------------------
def decide(res: Resource, current: StreamJobStatus, obs: Observation) -> Plan:
    plan = Plan(current.model_copy(deep=True))
    st = plan.status
    spec = _valid_spec(res, obs, plan)
    _record_observation(res, st, obs, plan)
    running = st.deployment.spec or st.last_reconciled_spec
    running_spec = StreamJobSpec.model_validate(running) if running else spec
    if spec is not None:
        st.observed_generation = res.generation
    if st.upgrade is not None:
        _advance_upgrade(res, spec, st, obs, plan)
    elif st.savepoint_trigger is not None:
        _advance_savepoint(res, running_spec, st, obs, plan)
    if st.upgrade is None and st.savepoint_trigger is None and spec is not None:
        _start_next(res, spec, st, obs, plan)
    for pod in obs.other_pods:
        if st.upgrade is None or pod != st.deployment.pod_name:
            plan.act(DeletePod(pod))  # drivers of earlier deployments: their job was stopped or is lost
    if running_spec is not None:
        _tend_history(running_spec, st, obs, plan)
        _health(running_spec, st, obs, plan)
    _conditions(res, st, obs, plan)
    return plan


def _valid_spec(res: Resource, obs: Observation, plan: Plan) -> StreamJobSpec | None:
    """The spec to act on, or None: then the last good spec keeps running and the status says why."""
    st = plan.status
    problems = ([res.spec_error] if res.spec_error else []) + [f"{k}: {v}" for k, v in sorted(obs.spec_errors.items())]
    if not problems:
        if st.error and st.error.startswith("invalid spec"):
            st.error = None
        return res.spec
    message = "invalid spec: " + "; ".join(problems)
    if st.error != message:
        keeps = " (the job keeps running its last good spec)" if st.last_reconciled_spec else ""
        plan.event(Reason.SPEC_INVALID, message + keeps, warning=True)
    st.error = message
    st.observed_generation = res.generation  # seen, and answered in status: never looks "not yet processed"
    return None


# -- what was seen -----------------------------------------------------------------------------
def _record_observation(res: Resource, st: StreamJobStatus, obs: Observation, plan: Plan) -> None:
    """Copy the observation into status.jobStatus: never a stale RUNNING when the job manager is silent."""
    js = st.job_status
    pod, job = obs.pod, obs.job
    if st.deployment.pod_name is None:
        js.state = JobStatusState.NOT_DEPLOYED.value
        return
    if job is not None and job.reachable:
        if job.job_id and job.job_id != js.job_id:
            js.restarts = 0
        elif job.restarts > js.restarts:
            st.restart_history.extend([iso(obs.now)] * (job.restarts - js.restarts))
        js.state, js.job_id, js.restarts = job.state, job.job_id or js.job_id, job.restarts
        if job.state == "RUNNING" and st.deployment.running_since is None:
            st.deployment.running_since = iso(obs.now)
        js.start_time = from_epoch(job.start_time) if job.start_time else js.start_time
        js.error = job.error
        if job.parallelism:
            st.parallelism = job.parallelism
        if job.slots:
            st.slots, st.executors = job.slots, job.executors
        if job.queryable_state is not None:
            st.queryable_state = list(job.queryable_state)
        if job.latest_checkpoint is not None:
            cp = job.latest_checkpoint
            st.last_checkpoint = CheckpointInfo(id=cp.id, time=from_epoch(cp.completed_time), path=cp.path)
        return
    if pod is None:
        js.state = JobStatusState.UNKNOWN.value if st.upgrade is None else JobStatusState.DEPLOYING.value
        return
    if pod.ended:
        js.state = pod.final_state or ("FINISHED" if pod.phase == "Succeeded" else "FAILED")
        js.error = pod.final_error or (None if pod.phase == "Succeeded" else
                                       f"driver pod {pod.name} ended with exit code {pod.exit_code}")
        js.job_id = pod.final_job_id or js.job_id
    elif pod.phase == "Pending" or not pod.ip:
        js.state = JobStatusState.DEPLOYING.value
    else:
        js.state = JobStatusState.UNKNOWN.value
        js.error = f"job manager of {pod.name} unreachable: {job.unreachable_reason if job else 'not asked'}"


def _job_running(st: StreamJobStatus, obs: Observation) -> bool:
    return bool(obs.pod and not obs.pod.ended and obs.job and obs.job.reachable and obs.job.state == "RUNNING")


def _final_savepoint(obs: Observation) -> str | None:
    """A stop-with-savepoint that completed, even if the job failed or the operator missed the answer."""
    if obs.job is not None and obs.job.reachable and obs.job.final_savepoint:
        return obs.job.final_savepoint
    return obs.pod.final_savepoint if obs.pod is not None else None


def _job_dir(checkpoint_path: str) -> str:
    return checkpoint_path.rstrip("/").rsplit("/", 1)[0]


def latest_restore_point(st: StreamJobStatus) -> Restore | None:
    """The newest durable state of the current job: restoring an older one would repeat output that
    a newer checkpoint already committed."""
    candidates: list[tuple[datetime, Restore]] = []
    if st.last_checkpoint is not None:
        candidates.append((parse_time(st.last_checkpoint.time), Restore("checkpoint", _job_dir(st.last_checkpoint.path))))
    deployed = parse_time(st.deployment.deploy_time)
    if st.last_savepoint is not None and deployed is not None and parse_time(st.last_savepoint.time) >= deployed:
        candidates.append((parse_time(st.last_savepoint.time), Restore("savepoint", st.last_savepoint.path)))
    if st.deployment.restore_path and st.deployment.restore_kind and deployed is not None:
        candidates.append((deployed - timedelta(seconds=1), Restore(st.deployment.restore_kind, st.deployment.restore_path)))
    return max(candidates, key=lambda c: c[0])[1] if candidates else None


# -- the next thing to do ----------------------------------------------------------------------
def _start_next(res: Resource, spec: StreamJobSpec, st: StreamJobStatus, obs: Observation, plan: Plan) -> None:
    new = spec_dict(spec)
    change = classify(st.last_reconciled_spec, new)
    if change == "deploy":
        st.last_reconciled_spec = new
        if spec.state == "suspended":
            _set_lifecycle(st, LifecycleState.SUSPENDED, plan, Reason.SUSPENDED, "created suspended: nothing deployed")
            return
        initial = Restore("savepoint", spec.initial_savepoint_path) if spec.initial_savepoint_path else None
        _begin_deploy(res, spec, st, obs, plan, "upgrade", initial, first=True)
        return
    if st.lifecycle_state == LifecycleState.FAILED.value and change == "none" and new != st.last_reconciled_spec:
        change = "upgrade"  # any edit of a failed job is a new attempt (initialSavepointPath included)
    startup = startup_failure(st, obs)
    if startup is not None and st.lifecycle_state != LifecycleState.FAILED.value and change in ("none", "rescale"):
        _after_startup_failure(res, spec, st, obs, plan, *startup)
        return
    if change == "none":
        st.last_reconciled_spec = new  # operator-only fields take effect in place
        if _should_roll_back(spec, st, obs):
            plan.event(Reason.ROLLING_BACK, f"not stable within {spec.health.rollback_timeout}: "
                       "rolling back to the last spec that ran", warning=True)
            _begin_upgrade(res, spec, st.deployment.previous_spec or {}, st, obs, plan, "rollback")
            return
        if _failed(st, obs) and st.lifecycle_state not in (LifecycleState.SUSPENDED.value, LifecycleState.FAILED.value):
            _redeploy_after_failure(res, spec, st, obs, plan)
        elif _job_running(st, obs):
            _maybe_savepoint(res, spec, st, obs, plan)
            if st.savepoint_trigger is None:
                _autoscale(spec, st, obs, plan)
        if spec.autoscaler is None:
            st.autoscaler = None
        return
    if change == "resume":
        st.last_reconciled_spec = new
        restore = None if spec.upgrade_mode == UpgradeMode.STATELESS.value else latest_restore_point(st)
        plan.event(Reason.RESUMING, f"resuming from {restore.kind} {restore.path}" if restore else "resuming without state")
        _begin_deploy(res, spec, st, obs, plan, "upgrade", restore)
        return
    if st.lifecycle_state == LifecycleState.SUSPENDED.value and change != "suspend":
        st.last_reconciled_spec = new  # applied on resume
        return
    if change == "rescale" and _rescalable_in_place(spec, st, obs):
        _begin_rescale_in_place(spec, new, st, obs, plan)
        return
    reason = {"suspend": "suspend", "rescale": "rescale"}.get(change, "upgrade")
    _begin_upgrade(res, spec, new, st, obs, plan, reason)


# -- rescaling in place ------------------------------------------------------------------------------
def _rescalable_in_place(spec: StreamJobSpec, st: StreamJobStatus, obs: Observation) -> bool:
    """A healthy job with checkpointing is rescaled by its job manager (Flink's adaptive scheduler); anything
    else takes today's path (stop-with-savepoint or cancel, then a new deployment)."""
    return (spec.checkpointing is not None and spec.upgrade_mode != UpgradeMode.STATELESS.value
            and _job_running(st, obs) and st.lifecycle_state in (LifecycleState.DEPLOYED.value,
                                                                 LifecycleState.STABLE.value))


def _begin_rescale_in_place(spec: StreamJobSpec, new: dict, st: StreamJobStatus, obs: Observation, plan: Plan) -> None:
    now = iso(obs.now)
    st.upgrade = Upgrade(phase="RESCALING", reason="rescale", mode=spec.upgrade_mode, started_time=now, phase_time=now,
                         target_spec=new)
    st.lifecycle_state = LifecycleState.UPGRADING.value
    plan.act(RescaleJob(spec.parallelism))
    plan.event(Reason.RESCALING, f"rescaling in place to parallelism {spec.parallelism}: the job restarts from its "
                                 f"next checkpoint, no savepoint, same driver")
    plan.soon()


def _rescaling(res: Resource, spec: StreamJobSpec | None, st: StreamJobStatus, obs: Observation, plan: Plan) -> None:
    up = st.upgrade
    assert up is not None
    if up.reason == "autoscale":
        _autoscale_rescaling(st, obs, plan)
        return
    if classify(st.last_reconciled_spec, up.target_spec) != "rescale":
        # Edited meanwhile beyond the parallelism (or back): that needs a new deployment (or nothing).
        st.upgrade = None
        st.lifecycle_state = LifecycleState.DEPLOYED.value
        if spec is not None and classify(st.last_reconciled_spec, up.target_spec) != "none":
            _begin_upgrade(res, spec, dict(up.target_spec), st, obs, plan, "upgrade")
        return
    target = int(up.target_spec.get("parallelism") or 1)
    seen = obs.job.rescale if obs.job is not None and obs.job.reachable else None
    mine = seen if seen is not None and seen.parallelism == target else None
    refused = obs.rescale_errors.get(target) or (f"{mine.status}: {mine.error}" if mine and mine.status == "FAILED"
                                                 else None)
    if mine is not None and mine.status == "COMPLETED":
        st.last_reconciled_spec = st.deployment.spec = dict(up.target_spec)
        st.deployment.parallelism = st.parallelism = target
        st.upgrade = None
        _settle_lifecycle(st, obs)
        plan.event(Reason.RESCALED, f"rescaled in place to parallelism {target} from checkpoint {mine.checkpoint_id}")
        return
    if refused is None and not _job_running(st, obs) and not (obs.job and obs.job.reachable
                                                             and obs.job.state == "RESTARTING"):
        refused = f"the job is {st.job_status.state}"
    if refused is not None:
        # Not in place, then: today's upgrade (stop-with-savepoint, or the latest checkpoint) does it.
        st.upgrade = None
        plan.event(Reason.RESCALING, f"rescaling in place to parallelism {target} was not possible ({refused}): "
                                     f"rescaling by a new deployment instead", warning=True)
        if spec is not None:
            st.lifecycle_state = LifecycleState.DEPLOYED.value
            _begin_upgrade(res, spec, dict(up.target_spec), st, obs, plan, "rescale")
        return
    if mine is None:
        plan.act(RescaleJob(target))  # not yet seen by the job manager (or the request was lost): ask again
    plan.soon()


# -- the autoscaler ------------------------------------------------------------------------------------
def _stable_since(st: StreamJobStatus) -> str | None:
    """When the job last started, restarted or was rescaled: its metrics before then describe another job."""
    times = [t for t in (st.deployment.running_since, st.restart_history[-1] if st.restart_history else None,
                         st.autoscaler.last_scaling_time if st.autoscaler else None) if t]
    return max(times, key=lambda t: parse_time(t)) if times else None


def _autoscale(spec: StreamJobSpec, st: StreamJobStatus, obs: Observation, plan: Plan) -> None:
    """A running, settled job with ``spec.autoscaler``: evaluate its vertices (``autoscaler.decide``), record it
    in ``status.autoscaler``, report a scaling decision (event ScalingReport) and, unless a dry run, rescale
    the vertices in place (PUT /v1/jobs/{id}/parallelism with their uids)."""
    a = spec.autoscaler
    if a is None or not a.enabled or obs.job is None or not obs.job.vertices:
        return
    if st.lifecycle_state not in (LifecycleState.DEPLOYED.value, LifecycleState.STABLE.value):
        return
    plan.soon(seconds(a.metrics_interval))
    before = {v.vertex: v.recommended_parallelism for v in (st.autoscaler.vertices if st.autoscaler else [])}
    decision, st.autoscaler = scaling.evaluate(a, st.autoscaler or AutoscalerStatus(), obs.job.vertices,
                                               obs.metrics_history, _stable_since(st), obs.now)
    if not decision.parallelism:
        return
    if decision.act or any(before.get(v) != p for v, p in decision.parallelism.items()):
        # A dry run reports a recommendation when it changes, not at every metricsInterval.
        plan.event(Reason.SCALING_REPORT, scaling.report(decision, a.dry_run))
    if not decision.act:
        return
    now = iso(obs.now)
    st.autoscaler.pending = dict(decision.parallelism)
    st.upgrade = Upgrade(phase="RESCALING", reason="autoscale", mode=spec.upgrade_mode, started_time=now,
                         phase_time=now, target_spec=dict(st.last_reconciled_spec or spec_dict(spec)),
                         operators=dict(decision.parallelism))
    st.lifecycle_state = LifecycleState.UPGRADING.value
    plan.act(RescaleJob(None, tuple(sorted(decision.parallelism.items()))))
    plan.soon()


def _autoscale_rescaling(st: StreamJobStatus, obs: Observation, plan: Plan) -> None:
    """The autoscaler's rescale in place under way: done when the job manager says so; refused or failed, the
    job keeps its parallelism (no redeploy for a recommendation) and the autoscaler tries again later."""
    up = st.upgrade
    assert up is not None and up.operators is not None
    ast = st.autoscaler or AutoscalerStatus()
    seen = obs.job.rescale if obs.job is not None and obs.job.reachable else None
    mine = seen if seen is not None and seen.operators == up.operators and seen.parallelism is None else None
    refused = obs.rescale_errors.get(AUTOSCALE) or (f"{mine.status}: {mine.error}" if mine and mine.status == "FAILED"
                                                     else None)
    changes = ", ".join(f"{v} -> {p}" for v, p in sorted(up.operators.items()))
    if mine is not None and mine.status == "COMPLETED":
        st.autoscaler = scaling.rescaled(ast, up.operators, mine.restart_s, obs.now)
        st.upgrade = None
        _settle_lifecycle(st, obs)
        plan.event(Reason.RESCALED, f"autoscaler: rescaled in place ({changes}) from checkpoint {mine.checkpoint_id}"
                   + (f", the job ran again {mine.restart_s:.1f} s after it" if mine.restart_s is not None else ""))
        return
    if refused is None and not _job_running(st, obs) and not (obs.job and obs.job.reachable
                                                             and obs.job.state == "RESTARTING"):
        refused = f"the job is {st.job_status.state}"
    if refused is not None:
        st.autoscaler = scaling.not_rescaled(ast, refused, obs.now)
        st.upgrade = None
        _settle_lifecycle(st, obs)
        plan.event(Reason.AUTOSCALER_ERROR, f"autoscaler: rescaling in place ({changes}) was not possible: {refused}",
                   warning=True)
        return
    if mine is None:
        plan.act(RescaleJob(None, tuple(sorted(up.operators.items()))))  # not yet seen, or the request was lost
    plan.soon()


# What a driver's first words say: (pattern of its error, what to blame: a spec field, or "spark" when Spark
# itself could not start: the cluster's side, e.g. executor pods the API server refused).
_STARTUP_ERRORS = (("could not start Spark", "spark"), ("not enough slots", "spec.executor"),
                   ("slots (parallelism", "spec.executor"),  # a driver older than "not enough slots"
                   ("no such job file", "spec.job.file"), ("no such module", "spec.job.module"),
                   ("--from-savepoint", "spec.initialSavepointPath"), ("--from-checkpoint", "status.deployment.restorePath"),
                   ("cannot be restored", "status.deployment.restorePath"),
                   # a damaged checkpoint or savepoint (runtime/checkpoint/recovery.py)
                   ("cannot restore savepoint", "spec.initialSavepointPath"),
                   ("cannot restore checkpoint", "status.deployment.restorePath"))


def startup_failure(st: StreamJobStatus, obs: Observation) -> tuple[str, str] | None:
    """(field, message) when the current deployment failed before its job ever ran: a spec the
    API server could not refuse (an image that cannot start, a job file not in the image, a
    savepoint that is not there). Redeploying the same spec would only fail again."""
    pod = obs.pod
    if pod is None or st.deployment.running_since is not None or st.upgrade is not None:
        return None
    if pod.waiting_reason in IMAGE_ERRORS:
        return ("spec.image", f"driver pod {pod.name} cannot start: {pod.waiting_reason}"
                + (f": {pod.waiting_message}" if pod.waiting_message else ""))
    if not pod.ended or pod.final_state in (None, "FINISHED", "CANCELED"):
        return None
    error = (pod.final_error or f"exit code {pod.exit_code}").strip()
    field_ = next((f for pattern, f in _STARTUP_ERRORS if pattern in error), "spec.job")
    if field_ == "spec.initialSavepointPath" and st.deployment.restore_path and st.deployment.number > 1:
        field_ = "status.deployment.restorePath"
    return field_, f"the job did not start: {error.splitlines()[0][:500]}"


def _after_startup_failure(res: Resource, spec: StreamJobSpec, st: StreamJobStatus, obs: Observation, plan: Plan,
                           field_: str, message: str) -> None:
    """Roll back to the last spec that ran (from the state this deployment was to restore), or,
    with none, stop at FAILED with the field named: the same spec would fail the same way."""
    st.error = f"{field_}: {message}"
    previous = st.deployment.previous_spec
    if previous:
        plan.event(Reason.ROLLING_BACK, f"{st.error}; rolling back to the last spec that ran", warning=True)
        _begin_upgrade(res, spec, previous, st, obs, plan, "rollback")
        st.error = f"{field_}: {message} (rolled back to the last spec that ran)"
        return
    if obs.pod is not None and obs.pod.waiting_reason in IMAGE_ERRORS:
        return  # the kubelet keeps pulling (it runs if the image appears); _health reports it Degraded
    _set_lifecycle(st, LifecycleState.FAILED, plan, Reason.FAILED, st.error, warning=True)


def _should_roll_back(spec: StreamJobSpec, st: StreamJobStatus, obs: Observation) -> bool:
    """health.rollback: a new spec that did not become stable within health.rollbackTimeout."""
    return (spec.health.rollback and st.deployment.previous_spec is not None
            and st.lifecycle_state == LifecycleState.DEPLOYED.value
            and _age(obs.now, st.deployment.deploy_time) > seconds(spec.health.rollback_timeout))


def _failed(st: StreamJobStatus, obs: Observation) -> bool:
    """The deployment is gone or its job failed beyond its own restart strategy."""
    if st.deployment.pod_name is None:
        return False
    if obs.pod is None:
        return True
    if obs.pod.ended:
        return (obs.pod.final_state or ("FINISHED" if obs.pod.phase == "Succeeded" else "FAILED")) == "FAILED"
    return bool(obs.job and obs.job.reachable and obs.job.state == "FAILED")


def _restore_after(spec: StreamJobSpec, st: StreamJobStatus) -> Restore | None:
    """What a new deployment restores when no savepoint can be taken: the newest durable state; for a
    job whose first deployment never ran, what the (maybe corrected) spec says to start from."""
    if st.deployment.running_since is None and st.last_checkpoint is None and st.deployment.previous_spec is None:
        return Restore("savepoint", spec.initial_savepoint_path) if spec.initial_savepoint_path else None
    return latest_restore_point(st)


def _begin_upgrade(res: Resource, spec: StreamJobSpec, new: dict, st: StreamJobStatus, obs: Observation, plan: Plan,
                   reason: str) -> None:
    mode = UpgradeMode(spec.upgrade_mode)
    what = {"suspend": "suspending", "rescale": f"rescaling to parallelism {spec.parallelism}",
            "rollback": "rolling back"}.get(reason, "upgrading")
    running = _job_running(st, obs)
    if mode == UpgradeMode.LAST_STATE and running and latest_restore_point(st) is None:
        # Canceling now would drop the state the job built since it started: wait for a checkpoint.
        msg = (f"{what} waits for the job's first completed checkpoint (upgradeMode last-state restores it)"
               if spec.checkpointing is not None else
               "upgradeMode last-state needs checkpointing: set spec.checkpointing, or use upgradeMode savepoint")
        if st.error != msg:
            plan.event(Reason.UPGRADE_BLOCKED, msg, warning=True)
        st.error = msg
        return
    now = iso(obs.now)
    if mode == UpgradeMode.SAVEPOINT and running:
        rid = request_id(res, reason, f"{res.generation}-{st.deployment.number}")
        st.upgrade = Upgrade(phase="STOPPING", reason=reason, mode=mode.value, savepoint_request_id=rid,
                             started_time=now, phase_time=now, target_spec=new)
        plan.act(TriggerSavepoint(rid, spec.savepoint_dir or "", stop=True))
        plan.event(Reason.SAVEPOINT_TRIGGERED, f"{what}: stop-with-savepoint into {spec.savepoint_dir} (request {rid})")
    else:
        restore = None if mode == UpgradeMode.STATELESS else _restore_after(spec, st)
        if mode != UpgradeMode.STATELESS and not running:
            plan.event(Reason.UPGRADE_BLOCKED if restore is None else Reason.UPGRADING,
                       f"{what}: the job is not running ({st.job_status.state}), so no savepoint can be taken; "
                       + (f"restoring its latest {restore.kind} {restore.path}" if restore else
                          "it has no checkpoint or savepoint: starting without state"), warning=restore is None)
        st.upgrade = Upgrade(phase="CANCELING", reason=reason, mode=mode.value, started_time=now, phase_time=now,
                             restore_kind=restore.kind if restore else None, restore_path=restore.path if restore else None,
                             target_spec=new)
        _cancel_step(res, st, obs, plan)
    reason_event = {"suspend": Reason.SUSPENDING, "rescale": Reason.RESCALING}.get(reason, Reason.UPGRADING)
    if reason != "rollback":  # a rollback's event says why
        plan.event(reason_event, f"{what} (upgradeMode {mode.value})")
    st.lifecycle_state = (LifecycleState.ROLLING_BACK if reason == "rollback" else LifecycleState.UPGRADING).value
    st.error = None
    plan.soon()


def _advance_upgrade(res: Resource, spec: StreamJobSpec | None, st: StreamJobStatus, obs: Observation,
                     plan: Plan) -> None:
    up = st.upgrade
    assert up is not None
    if spec is not None and up.reason != "redeploy" and classify(st.last_reconciled_spec, spec_dict(spec)) != "none":
        up.target_spec = spec_dict(spec)  # edited again meanwhile: the next deployment runs the newest
        up.reason = "upgrade" if up.reason == "rollback" else up.reason
    if up.phase == "STOPPING":
        _stopping(res, spec, st, obs, plan)
    elif up.phase == "CANCELING":
        _cancel_step(res, st, obs, plan)
    elif up.phase == "DEPLOYING":
        _deploying(st, obs, plan)
    elif up.phase == "RESCALING":
        _rescaling(res, spec, st, obs, plan)


def _stopping(res: Resource, spec: StreamJobSpec | None, st: StreamJobStatus, obs: Observation, plan: Plan) -> None:
    """Stop-with-savepoint in flight. The old job keeps running until it completes."""
    up = st.upgrade
    assert up is not None and up.savepoint_request_id
    rid = up.savepoint_request_id
    sp = obs.savepoint if obs.savepoint is not None and obs.savepoint.request_id == rid else None
    path = sp.path if sp is not None and sp.status == "COMPLETED" else _final_savepoint(obs)
    if path:
        _record_savepoint(st, obs, plan, path, TriggerType.SUSPEND if up.reason == "suspend" else TriggerType.UPGRADE,
                          None, rid)
        up.phase, up.phase_time = "CANCELING", iso(obs.now)
        up.restore_kind, up.restore_path = "savepoint", path
        _cancel_step(res, st, obs, plan)
        return
    if spec is not None and up.attempts and classify(st.last_reconciled_spec, spec_dict(spec)) == "none":
        # The user took the change back while its savepoint kept failing: nothing to upgrade.
        st.upgrade = None
        _settle_lifecycle(st, obs)
        plan.event(Reason.SPEC_CHANGED, "spec reverted: upgrade abandoned, the job runs on")
        return
    if spec is not None and spec.upgrade_mode != up.mode:
        st.upgrade = None  # the user chose another upgrade mode: start over with it
        _begin_upgrade(res, spec, spec_dict(spec), st, obs, plan, up.reason)
        return
    error = None
    if not _job_running(st, obs) and (obs.pod is None or obs.pod.ended):
        # The job is gone without a savepoint: keep its state, restore the latest checkpoint.
        restore = latest_restore_point(st)
        plan.event(Reason.SAVEPOINT_FAILED, "the job ended before its stop-with-savepoint completed; "
                   + (f"restoring its latest {restore.kind} {restore.path}" if restore else "no state to restore"),
                   warning=True)
        up.phase, up.phase_time = "CANCELING", iso(obs.now)
        up.restore_kind, up.restore_path = (restore.kind, restore.path) if restore else (None, None)
        _cancel_step(res, st, obs, plan)
        return
    if rid in obs.trigger_errors:
        error = obs.trigger_errors[rid]
    elif sp is not None and sp.status == "FAILED":
        error = sp.error or "savepoint failed"
    elif sp is not None and sp.status in ("QUEUED", "IN_PROGRESS") and \
            _age(obs.now, up.phase_time) > seconds((spec or _spec_of(st)).savepoints.timeout):
        error = f"stop-with-savepoint did not complete within {(spec or _spec_of(st)).savepoints.timeout}"
    elif sp is not None and sp.status == "UNKNOWN" and up.next_attempt_time is None:
        plan.act(TriggerSavepoint(rid, _spec_of(st, spec).savepoint_dir or "", stop=True))  # our trigger was lost
    if error is not None:
        up.attempts += 1
        up.last_error = error
        wait = backoff(up.attempts, SAVEPOINT_BACKOFF, MAX_BACKOFF)
        up.next_attempt_time = iso(obs.now + timedelta(seconds=wait))
        st.error = f"stop-with-savepoint failed (attempt {up.attempts}): {error}; the job keeps running its " \
                   f"previous spec; retrying in {wait:.0f} s (change the spec or upgradeMode to do otherwise)"
        plan.event(Reason.SAVEPOINT_FAILED, st.error, warning=True)
        up.savepoint_request_id = rid  # kept until the retry: a late answer for it still counts
        plan.soon(wait)
        return
    if up.next_attempt_time and obs.now >= parse_time(up.next_attempt_time):
        new_rid = request_id(res, up.reason, f"{res.generation}-{st.deployment.number}", up.attempts)
        up.savepoint_request_id, up.next_attempt_time, up.phase_time = new_rid, None, iso(obs.now)
        plan.act(TriggerSavepoint(new_rid, _spec_of(st, spec).savepoint_dir or "", stop=True))
    plan.soon()


def _spec_of(st: StreamJobStatus, spec: StreamJobSpec | None = None) -> StreamJobSpec:
    return spec if spec is not None else StreamJobSpec.model_validate(st.last_reconciled_spec)


def _cancel_step(res: Resource, st: StreamJobStatus, obs: Observation, plan: Plan) -> None:
    """Make sure the old job is stopped and its pod gone before the next one starts: two jobs writing
    one sink would break exactly-once."""
    up = st.upgrade
    assert up is not None
    pod = obs.pod
    if pod is not None and not pod.terminating:
        if obs.job is not None and obs.job.reachable and obs.job.state in ("RUNNING", "RESTARTING", "CREATED"):
            plan.act(CancelJob(pod.name))  # idempotent: the job manager answers 409 once it is canceling
        else:
            plan.act(DeletePod(pod.name))
        plan.soon()
        return
    if pod is not None:
        plan.soon()
        return  # terminating: wait until it is gone
    spec = StreamJobSpec.model_validate(up.target_spec)
    if up.reason == "suspend":
        st.last_reconciled_spec = up.target_spec
        st.upgrade = None
        st.deployment.pod_name = None
        st.deployment.restore_kind, st.deployment.restore_path = up.restore_kind, up.restore_path
        _set_lifecycle(st, LifecycleState.SUSPENDED, plan, Reason.SUSPENDED,
                       f"suspended; resume restores {up.restore_kind} {up.restore_path}" if up.restore_path
                       else "suspended")
        st.job_status = JobInfo(state=JobStatusState.NOT_DEPLOYED.value, job_id=st.job_status.job_id)
        return
    restore = Restore(up.restore_kind, up.restore_path) if up.restore_kind and up.restore_path else None
    _new_deployment(res, st, obs, spec, restore, plan)


def _begin_deploy(res: Resource, spec: StreamJobSpec, st: StreamJobStatus, obs: Observation, plan: Plan,
                  reason: str, restore: Restore | None, first: bool = False) -> None:
    now = iso(obs.now)
    st.upgrade = Upgrade(phase="DEPLOYING", reason=reason, mode=spec.upgrade_mode, started_time=now, phase_time=now,
                         restore_kind=restore.kind if restore else None, restore_path=restore.path if restore else None,
                         target_spec=spec_dict(spec))
    _new_deployment(res, st, obs, spec, restore, plan)


def _new_deployment(res: Resource, st: StreamJobStatus, obs: Observation, spec: StreamJobSpec, restore: Restore | None,
                    plan: Plan) -> None:
    """Record the next deployment (write-ahead), then create it."""
    up = st.upgrade
    assert up is not None
    number = st.deployment.number + 1
    old = st.deployment
    if up.reason not in ("rollback", "redeploy"):
        st.last_reconciled_spec = up.target_spec  # a rollback runs another spec than the one asked for
    # What a rollback would go back to: the spec of the last deployment whose job ran (never the
    # spec a rollback just left).
    if up.reason == "rollback":
        previous = None
    elif up.reason == "redeploy":
        previous = old.previous_spec
    else:
        previous = old.spec if old.running_since else old.previous_spec
    # A redeploy runs the same spec again: the job keeps the parallelism the autoscaler gave its operators
    # (the runtime's pipeline.jobvertex-parallelism-overrides), as it restores the state they wrote. Any
    # other deployment runs a spec of the user's: its parallelism, and the autoscaler starts over.
    kept = dict(st.autoscaler.overrides) if st.autoscaler is not None and up.reason == "redeploy" and \
        spec.autoscaler is not None and spec.autoscaler.enabled else {}
    st.deployment = Deployment(number=number, pod_name=names.driver_pod(res.name, number),
                               parallelism=spec.parallelism, restore_kind=restore.kind if restore else None,
                               restore_path=restore.path if restore else None, deploy_time=iso(obs.now),
                               spec=up.target_spec, previous_spec=previous, overrides=kept)
    st.last_checkpoint = None  # belongs to the job that stopped; the new one reports its own
    if st.autoscaler is not None:
        st.autoscaler.overrides, st.autoscaler.pending, st.autoscaler.scale_down_since = dict(kept), None, {}
    st.job_status = JobInfo(state=JobStatusState.DEPLOYING.value, job_id=st.job_status.job_id if restore and
                            restore.kind == "checkpoint" else None)
    st.restart_history = []
    up.phase, up.phase_time = "DEPLOYING", iso(obs.now)
    st.lifecycle_state = (LifecycleState.CREATED if number == 1 else LifecycleState.ROLLING_BACK
                          if up.reason == "rollback" else LifecycleState.UPGRADING).value
    _deploying(st, obs, plan)
    plan.event(Reason.DEPLOYING, f"deployment {number}: driver pod {st.deployment.pod_name}, parallelism "
               f"{spec.parallelism}" + (f", restoring {restore.kind} {restore.path}" if restore else ", no state"))


def _deploying(st: StreamJobStatus, obs: Observation, plan: Plan) -> None:
    up = st.upgrade
    assert up is not None
    pod = obs.pod
    if pod is not None and pod.name == st.deployment.pod_name:
        rollback = up.reason == "rollback"
        st.upgrade = None
        if rollback:
            _set_lifecycle(st, LifecycleState.ROLLED_BACK, plan, Reason.ROLLED_BACK,
                           f"rolled back: driver pod {pod.name} runs the last spec that ran; fix the spec to go on")
        else:
            _set_lifecycle(st, LifecycleState.DEPLOYED, plan, Reason.DEPLOYED, f"driver pod {pod.name} created")
        return
    if obs.other_pods:
        plan.soon()  # an earlier driver is still going away (deleted in decide)
        return
    restore = Restore(st.deployment.restore_kind, st.deployment.restore_path) \
        if st.deployment.restore_kind and st.deployment.restore_path else None
    plan.act(Deploy(st.deployment.number, st.deployment.pod_name or "", st.deployment.spec or {},
                    st.deployment.parallelism or 1, restore, tuple(sorted(st.deployment.overrides.items()))))
    plan.soon()


def _redeploy_after_failure(res: Resource, spec: StreamJobSpec, st: StreamJobStatus, obs: Observation,
                            plan: Plan) -> None:
    pod = obs.pod
    lost = pod is None or (pod.ended and pod.final_state is None)  # no word from its job manager
    why = (f"driver pod {st.deployment.pod_name} is gone" if pod is None else
           f"driver pod {pod.name} died (exit code {pod.exit_code}) without a result from its job manager"
           if lost else f"job failed: {st.job_status.error or 'no error reported'}")
    if st.next_redeploy_time is None:
        if st.redeploys >= spec.redeploy.max_redeploys:
            st.error = f"{why}; gave up after {st.redeploys} redeploys (spec.redeploy.maxRedeploys)"
            _set_lifecycle(st, LifecycleState.FAILED, plan, Reason.FAILED, st.error, warning=True)
            return
        wait = backoff(st.redeploys + 1, seconds(spec.redeploy.backoff), seconds(spec.redeploy.max_backoff))
        st.next_redeploy_time = iso(obs.now + timedelta(seconds=wait))
        st.error = why
        plan.event(Reason.DRIVER_LOST if lost else Reason.JOB_FAILED,
                   f"{why}; redeploying from the latest checkpoint in {wait:.0f} s "
                   f"({st.redeploys + 1}/{spec.redeploy.max_redeploys})", warning=True)
        plan.soon(wait)
        return
    if obs.now < parse_time(st.next_redeploy_time):
        plan.soon((parse_time(st.next_redeploy_time) - obs.now).total_seconds())
        return
    st.next_redeploy_time = None
    st.redeploys += 1
    restore = latest_restore_point(st)
    plan.event(Reason.REDEPLOYING, f"redeploy {st.redeploys}: " +
               (f"restoring {restore.kind} {restore.path}" if restore else "no checkpoint yet: starting without state"))
    now = iso(obs.now)
    st.upgrade = Upgrade(phase="CANCELING", reason="redeploy", mode=spec.upgrade_mode, started_time=now,
                         phase_time=now, restore_kind=restore.kind if restore else None,
                         restore_path=restore.path if restore else None, target_spec=st.deployment.spec or st.last_reconciled_spec or {})
    _cancel_step(res, st, obs, plan)


# -- savepoints --------------------------------------------------------------------------------
def _maybe_savepoint(res: Resource, spec: StreamJobSpec, st: StreamJobStatus, obs: Observation, plan: Plan) -> None:
    nonce = res.annotations.get(SAVEPOINT_ANNOTATION)
    if nonce is not None and nonce != st.last_handled_nonce:
        if not spec.savepoint_dir:
            st.last_handled_nonce = nonce
            plan.event(Reason.SAVEPOINT_FAILED, f"annotation {SAVEPOINT_ANNOTATION}={nonce!r}: spec.savepointDir "
                       "is not set, so there is nowhere to write the savepoint", warning=True)
            return
        _trigger(res, spec, st, obs, plan, TriggerType.MANUAL, nonce)
        return
    interval = spec.savepoints.periodic_interval
    if interval and spec.savepoint_dir:
        last = max((parse_time(s.time) for s in st.savepoint_history), default=None)
        since = max(t for t in (last, parse_time(st.deployment.deploy_time)) if t is not None)
        if (obs.now - since).total_seconds() >= seconds(interval):
            _trigger(res, spec, st, obs, plan, TriggerType.PERIODIC, None)


def _trigger(res: Resource, spec: StreamJobSpec, st: StreamJobStatus, obs: Observation, plan: Plan,
             kind: TriggerType, nonce: str | None) -> None:
    token = nonce if nonce is not None else iso(obs.now)
    rid = request_id(res, kind.value, token)
    st.savepoint_trigger = SavepointTrigger(request_id=rid, trigger_type=kind.value, nonce=nonce,
                                            target_dir=spec.savepoint_dir or "", trigger_time=iso(obs.now))
    plan.act(TriggerSavepoint(rid, spec.savepoint_dir or "", stop=False))
    plan.event(Reason.SAVEPOINT_TRIGGERED, f"{kind.value} savepoint into {spec.savepoint_dir}"
               + (f" (nonce {nonce!r})" if nonce is not None else "") + f", request {rid}")
    plan.soon()


def _advance_savepoint(res: Resource, spec: StreamJobSpec | None, st: StreamJobStatus, obs: Observation,
                       plan: Plan) -> None:
    tr = st.savepoint_trigger
    assert tr is not None
    sp = obs.savepoint if obs.savepoint is not None and obs.savepoint.request_id == tr.request_id else None
    if sp is not None and sp.status == "COMPLETED" and sp.path:
        _record_savepoint(st, obs, plan, sp.path, TriggerType(tr.trigger_type), tr.nonce, tr.request_id)
        st.savepoint_trigger = None
        st.savepoint_failures = 0
        if tr.nonce is not None:
            st.last_handled_nonce = tr.nonce
        return
    if tr.next_attempt_time is not None:
        if obs.now < parse_time(tr.next_attempt_time):
            plan.soon((parse_time(tr.next_attempt_time) - obs.now).total_seconds())
            return
        if not _job_running(st, obs):
            plan.soon(5.0)
            return
        tr.request_id = request_id(res, tr.trigger_type, tr.nonce or tr.trigger_time, tr.attempts)
        tr.next_attempt_time, tr.trigger_time = None, iso(obs.now)
        plan.act(TriggerSavepoint(tr.request_id, tr.target_dir, stop=False))
        plan.soon()
        return
    error = obs.trigger_errors.get(tr.request_id)
    if error is None and sp is not None and sp.status == "FAILED":
        error = sp.error or "savepoint failed"
    timeout = seconds(_spec_of(st, spec).savepoints.timeout)
    if error is None and _age(obs.now, tr.trigger_time) > timeout:
        error = f"not complete within {_spec_of(st, spec).savepoints.timeout}"
    if error is None and not _job_running(st, obs) and st.upgrade is None:
        error = f"the job is {st.job_status.state}"
    if error is None:
        if sp is not None and sp.status == "UNKNOWN":
            plan.act(TriggerSavepoint(tr.request_id, tr.target_dir, stop=False))  # our trigger was lost: repeat it
        plan.soon()
        return
    tr.attempts += 1
    tr.last_error = error
    st.savepoint_failures += 1
    if tr.attempts >= MAX_SAVEPOINT_ATTEMPTS:
        st.savepoint_trigger = None
        if tr.nonce is not None:
            st.last_handled_nonce = tr.nonce  # given up: the same nonce never triggers again
        plan.event(Reason.SAVEPOINT_FAILED, f"{tr.trigger_type} savepoint failed {tr.attempts} times, giving up: "
                   f"{error}", warning=True)
        return
    wait = backoff(tr.attempts, SAVEPOINT_BACKOFF, MAX_BACKOFF)
    tr.next_attempt_time = iso(obs.now + timedelta(seconds=wait))
    plan.event(Reason.SAVEPOINT_FAILED, f"{tr.trigger_type} savepoint failed (attempt {tr.attempts}/"
               f"{MAX_SAVEPOINT_ATTEMPTS}): {error}; retrying in {wait:.0f} s", warning=True)
    plan.soon(wait)


def _record_savepoint(st: StreamJobStatus, obs: Observation, plan: Plan, path: str, kind: TriggerType,
                      nonce: str | None, rid: str | None) -> None:
    if any(s.path == path for s in st.savepoint_history):
        return
    info = SavepointInfo(path=path, time=iso(obs.now), trigger_type=kind.value, nonce=nonce, request_id=rid)
    st.last_savepoint = info
    st.savepoint_history.append(info)
    plan.event(Reason.SAVEPOINT_COMPLETED, f"{kind.value} savepoint completed: {path}")


def _tend_history(spec: StreamJobSpec, st: StreamJobStatus, obs: Observation, plan: Plan) -> None:
    """Dispose savepoints beyond the history's count or age. An entry leaves the history only when its
    disposal succeeded (else its files would leak, unlisted), and the newest is never disposed."""
    for path in obs.disposed:
        if path in st.pending_disposal:
            st.pending_disposal.remove(path)
            st.savepoint_history = [s for s in st.savepoint_history if s.path != path]
            plan.event(Reason.SAVEPOINT_DISPOSED, f"disposed savepoint {path}")
    for path, error in sorted(obs.dispose_errors.items()):
        plan.event(Reason.SAVEPOINT_DISPOSE_FAILED, f"could not dispose savepoint {path}: {error}; retrying",
                   warning=True)
    history = sorted(st.savepoint_history, key=lambda s: s.time)
    st.savepoint_history = history
    if not history:
        return
    newest = history[-1]
    keep: set[str] = {newest.path}
    if st.deployment.restore_kind == "savepoint" and st.deployment.restore_path:
        keep.add(st.deployment.restore_path)  # the running job may still need to fall back on it
    live = [s for s in history if s.path not in st.pending_disposal]
    max_age = seconds(spec.savepoints.history_max_age) if spec.savepoints.history_max_age else None
    excess = len(live) - spec.savepoints.history_max_count
    for s in live:
        too_many = excess > 0
        too_old = max_age is not None and _age(obs.now, s.time) > max_age
        if s.path not in keep and (too_many or too_old):
            st.pending_disposal.append(s.path)
            excess -= 1
    for path in st.pending_disposal:
        plan.act(DisposeSavepoint(path))


# -- health and conditions ---------------------------------------------------------------------
def _health(spec: StreamJobSpec, st: StreamJobStatus, obs: Observation, plan: Plan) -> None:
    window = seconds(spec.health.restarts_window)
    st.restart_history = [t for t in st.restart_history if _age(obs.now, t) <= window]
    problems: list[tuple[Reason, str]] = []
    if obs.pod is not None and obs.pod.waiting_reason in IMAGE_ERRORS:
        problems.append((Reason.IMAGE_ERROR, f"spec.image: driver pod {obs.pod.name} cannot start: "
                                             f"{obs.pod.waiting_reason}"))
    if len(st.restart_history) >= spec.health.restarts_threshold:
        problems.append((Reason.RESTART_LOOP, f"{len(st.restart_history)} job restarts within "
                                              f"{spec.health.restarts_window}"))
    if spec.checkpointing is not None and _job_running(st, obs):
        cp = spec.checkpointing
        limit = max(seconds(cp.interval), seconds(cp.timeout)) * (cp.tolerable_failures + 2)
        since = st.last_checkpoint.time if st.last_checkpoint else st.job_status.start_time
        if _age(obs.now, since) > limit:
            problems.append((Reason.CHECKPOINTS_STALLED, f"no completed checkpoint for {_age(obs.now, since):.0f} s "
                                                         f"(more than {limit:.0f} s)"))
    if problems:
        reason, message = problems[0]
        if _set_condition(st, "Degraded", "True", reason.value, "; ".join(m for _, m in problems), obs.now):
            plan.event(reason, message, warning=True)
    elif _set_condition(st, "Degraded", "False", Reason.HEALTHY.value, "", obs.now):
        plan.event(Reason.HEALTHY, "no longer degraded")
    if st.lifecycle_state == LifecycleState.DEPLOYED.value and _job_running(st, obs) and \
            _age(obs.now, st.job_status.start_time or st.deployment.deploy_time) >= seconds(spec.health.stable_after):
        st.last_stable_spec = st.last_reconciled_spec
        st.redeploys = 0
        st.error = None
        _set_lifecycle(st, LifecycleState.STABLE, plan, Reason.STABLE,
                       f"running for {spec.health.stable_after}: this spec is now the stable one")


def _set_condition(st: StreamJobStatus, type_: str, status: str, reason: str, message: str, now: datetime) -> bool:
    """Set a condition; True when its status changed (the moment worth an event)."""
    for c in st.conditions:
        if c.type == type_:
            changed = c.status != status
            if changed:
                c.last_transition_time = iso(now)
            c.status, c.reason, c.message = status, reason, message
            return changed
    st.conditions.append(Condition(type=type_, status=status, reason=reason, message=message,
                                   last_transition_time=iso(now)))
    return status == "True"


def _conditions(res: Resource, st: StreamJobStatus, obs: Observation, plan: Plan) -> None:
    running = st.job_status.state == "RUNNING"
    _set_condition(st, "Ready", "True" if running else "False", "JobRunning" if running else
                   f"Job{st.job_status.state.title().replace('_', '')}", st.job_status.error or "", obs.now)
    progressing = st.upgrade is not None or st.savepoint_trigger is not None
    what = (f"{st.upgrade.reason}: {st.upgrade.phase}" if st.upgrade else
            f"{st.savepoint_trigger.trigger_type} savepoint" if st.savepoint_trigger else "")
    _set_condition(st, "Progressing", "True" if progressing else "False",
                   st.upgrade.phase.title() if st.upgrade else ("Savepointing" if progressing else "Idle"), what, obs.now)
    for c in st.conditions:
        c.observed_generation = res.generation
    st.selector = f"streamjob.io/job={res.name}"


def _set_lifecycle(st: StreamJobStatus, state: LifecycleState, plan: Plan, reason: Reason, message: str,
                   warning: bool = False) -> None:
    if st.lifecycle_state != state.value:
        st.lifecycle_state = state.value
        plan.event(reason, message, warning=warning)


def _settle_lifecycle(st: StreamJobStatus, obs: Observation) -> None:
    st.lifecycle_state = (LifecycleState.STABLE.value if st.last_stable_spec == st.last_reconciled_spec
                          else LifecycleState.DEPLOYED.value)


# -- deletion ----------------------------------------------------------------------------------
def decide_delete(res: Resource, current: StreamJobStatus, obs: Observation, deleting_for: float,
                  timeout: float) -> tuple[Plan, bool]:
    """Tear down: a savepoint first when spec.savepointOnDeletion, then every driver pod; the rest is
    owned by the StreamJob and goes with it. Never hangs: after ``timeout`` seconds it finishes
    regardless and says so. Returns the plan and whether the finalizer may go."""
    plan = Plan(current.model_copy(deep=True))
    st = plan.status
    _record_observation(res, st, obs, plan)
    if st.lifecycle_state != LifecycleState.DELETING.value:
        st.upgrade = None
        _set_lifecycle(st, LifecycleState.DELETING, plan, Reason.DELETING, "deleting the job and its resources")
    spec = res.spec or (StreamJobSpec.model_validate(st.last_reconciled_spec) if st.last_reconciled_spec else None)
    if deleting_for > timeout:
        for pod in {*obs.other_pods, *([obs.pod.name] if obs.pod else [])}:
            plan.act(DeletePod(pod))
        plan.event(Reason.DELETE_TIMEOUT, f"deletion took more than {timeout:.0f} s: finishing without waiting "
                   "further (a savepoint or pod shutdown may be incomplete)", warning=True)
        return plan, True
    if spec is not None and spec.savepoint_on_deletion and spec.savepoint_dir and _savepoint_before_delete(
            res, spec, st, obs, plan):
        return plan, False
    pods = {*obs.other_pods, *([obs.pod.name] if obs.pod else [])}
    for pod in sorted(pods):
        plan.act(DeletePod(pod))
    plan.soon(2.0)
    return plan, not pods


def _savepoint_before_delete(res: Resource, spec: StreamJobSpec, st: StreamJobStatus, obs: Observation,
                             plan: Plan) -> bool:
    """True while the deletion savepoint is still in flight."""
    tr = st.savepoint_trigger
    if tr is None or tr.trigger_type != TriggerType.DELETE.value:
        if st.last_savepoint is not None and st.last_savepoint.trigger_type == TriggerType.DELETE.value:
            return False  # taken already
        if not _job_running(st, obs):
            plan.event(Reason.SAVEPOINT_FAILED, f"no savepoint on deletion: the job is {st.job_status.state}",
                       warning=True)
            return False
        rid = request_id(res, TriggerType.DELETE.value, "delete")
        st.savepoint_trigger = SavepointTrigger(request_id=rid, trigger_type=TriggerType.DELETE.value, stop=True,
                                                target_dir=spec.savepoint_dir or "", trigger_time=iso(obs.now))
        plan.act(TriggerSavepoint(rid, spec.savepoint_dir or "", stop=True))
        plan.event(Reason.SAVEPOINT_TRIGGERED, f"savepoint on deletion into {spec.savepoint_dir} (request {rid})")
        plan.soon()
        return True
    if tr.last_error is not None:
        return False  # it failed; the deletion goes on without it
    sp = obs.savepoint if obs.savepoint is not None and obs.savepoint.request_id == tr.request_id else None
    path = sp.path if sp is not None and sp.status == "COMPLETED" else _final_savepoint(obs)
    if path:
        _record_savepoint(st, obs, plan, path, TriggerType.DELETE, None, tr.request_id)
        st.savepoint_trigger = None
        return False
    failed = (tr.request_id in obs.trigger_errors or (sp is not None and sp.status == "FAILED")
              or _age(obs.now, tr.trigger_time) > seconds(spec.savepoints.timeout)
              or obs.pod is None or obs.pod.ended)
    if failed:
        error = obs.trigger_errors.get(tr.request_id) or (sp.error if sp else None) or "no savepoint completed"
        tr.last_error = error
        plan.event(Reason.SAVEPOINT_FAILED, f"savepoint on deletion failed: {error}; deleting anyway", warning=True)
        return False
    if sp is not None and sp.status == "UNKNOWN":
        plan.act(TriggerSavepoint(tr.request_id, tr.target_dir, stop=True))
    plan.soon()
    return True
