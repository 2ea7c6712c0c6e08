"""kopf glue: one reconcile loop per StreamJob, woken by its changes; nothing decides here.

Each StreamJob gets a kopf daemon that repeats observe -> decide -> write status
-> act until the resource goes: one loop per resource, so no two decisions about
it ever run at once. Changes to the resource wake it at once; otherwise it comes
back when the plan asks (sooner while something is in progress). Deletion runs
``decide_delete`` behind the operator's finalizer until it says done.

Only ``reconciler`` decides; ``observer`` reads; ``kube`` and the job manager
client write; this module wires them to kopf.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, AsyncIterator

import aiohttp
import kopf
from pydantic import ValidationError

from . import reconciler as R
from . import resources, storage
from .kube import Conflict, Kube, KubeError
from .metrics import OperatorMetrics
from .model import PLURAL, StreamJobSpec, StreamJobStatus
from .observation import Observation
from .observer import JobManagerClient, observe
from .slots import ROUTINE, URGENT, ReconcileSlots
from .version import API_GROUP, API_VERSION

FINALIZER = "streamjob.io/finalizer"


@dataclass
class OperatorConfig:
    """Settings of one operator process (from its command line)."""

    delete_timeout: float = 300.0  # s a deletion may take before the finalizer goes regardless
    idle_interval: float = 10.0  # s between observations of a job with nothing in progress
    max_concurrent_reconciles: int = 8  # passes at once; the rest wait in line (changes first)
    entrypoint: str = resources.ENTRYPOINT
    # The API server as driver pods reach it (Spark's master in mode kubernetes): in-cluster by default.
    kubernetes_master: str = resources.KUBERNETES_MASTER


@dataclass
class JobContext:
    """Per-StreamJob memory of the operator process: what a restart may lose without harm."""

    wake: asyncio.Event = field(default_factory=asyncio.Event)
    seen: tuple = ()  # (generation, annotations) last looked at: status writes alone wake nothing
    feedback: dict[str, Any] = field(default_factory=dict)  # action results for the next observation
    token: str | None = None
    checked: tuple[int, float] = (0, 0.0)  # (generation, monotonic time) of the last storage check
    # The autoscaler's samples of the job's metrics (observer._remember): a restart of the operator
    # starts its metrics window over, as it would after a rescale.
    history: list = field(default_factory=list)


def operator_config(memo: Any) -> OperatorConfig:
    return getattr(memo, "config", None) or OperatorConfig()


class NoDiffBase(kopf.DiffBaseStorage):
    """No "last handled configuration": nothing here reacts to kopf's diffs (the reconciler compares
    the spec with ``status.lastReconciledSpec`` itself, and deletion is told by deletionTimestamp).
    kopf's default would PATCH an annotation on every spec change, and that write would make our
    status write, with the resourceVersion read just before, fail and be decided again."""

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> None:  # type: ignore[override]
        return None

    def fetch(self, *, body: kopf.Body) -> None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: Any) -> None:
        pass


# -- lifecycle of the operator process -------------------------------------------------------------
@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    # kopf's own bookkeeping goes into annotations: the status belongs to the reconciler, which
    # replaces it as a whole (with its resourceVersion) and would wipe anything kopf kept there.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=API_GROUP)
    settings.persistence.diffbase_storage = NoDiffBase()
    settings.persistence.finalizer = FINALIZER
    # Our own events go out whatever the level (kopf.event); kopf's log lines become events only
    # from WARNING up (a handler failing), not one per handled watch event.
    settings.posting.level = logging.WARNING
    memo.kube = getattr(memo, "kube", None) or Kube()
    memo.session = aiohttp.ClientSession()
    memo.jm = JobManagerClient(memo.session)
    memo.metrics = getattr(memo, "metrics", None) or OperatorMetrics()
    memo.jobs = {}
    memo.slots = ReconcileSlots(operator_config(memo).max_concurrent_reconciles)


@kopf.on.cleanup()
async def cleanup(memo: kopf.Memo, **_: Any) -> None:
    session = getattr(memo, "session", None)
    if session is not None:
        await session.close()
    if getattr(memo, "kube", None) is not None:
        await memo.kube.close()


def _context(memo: kopf.Memo, uid: str) -> JobContext:
    return memo.jobs.setdefault(uid, JobContext())


# -- the loop ----------------------------------------------------------------------------------------
@kopf.daemon(API_GROUP, API_VERSION, PLURAL, id="reconcile", cancellation_timeout=10.0,
             when=lambda meta, **_: not meta.get("deletionTimestamp"))
async def reconcile_loop(body: kopf.Body, memo: kopf.Memo, stopped: kopf.DaemonStopped, logger: logging.Logger,
                         **_: Any) -> None:
    ctx = _context(memo, body["metadata"]["uid"])
    idle = operator_config(memo).idle_interval
    priority = URGENT
    while not stopped:
        async with _slot(memo, priority):
            ctx.wake.clear()  # in the slot: a change made while waiting for it is in this snapshot
            try:
                after = await reconcile_once(_snapshot(body), memo, ctx, logger)
            except (KubeError, aiohttp.ClientError, OSError) as e:
                logger.warning(f"reconcile of {body['metadata']['name']} failed, retrying: {e}")
                memo.metrics.reconcile_errors.inc()
                after = 5.0
        try:
            await asyncio.wait_for(ctx.wake.wait(), timeout=min(after, idle))
            priority = URGENT
        except asyncio.TimeoutError:
            priority = URGENT if after < idle else ROUTINE  # a step in progress asked to be back soon


@contextlib.asynccontextmanager
async def _slot(memo: kopf.Memo, priority: int) -> AsyncIterator[None]:
    """A reconcile slot; the wait for it is the queue time, reported apart from the pass."""
    asked = time.perf_counter()
    async with memo.slots.slot(priority):
        memo.metrics.reconcile_queue_seconds.observe(time.perf_counter() - asked)
        yield


@kopf.on.event(API_GROUP, API_VERSION, PLURAL)
async def wake_on_change(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """Any change (spec, annotations, scale) is looked at right away, not at the next tick."""
    meta = body.get("metadata", {})
    if not meta.get("uid") or not hasattr(memo, "jobs"):
        return
    ctx = _context(memo, meta["uid"])
    seen = (meta.get("generation"), json.dumps(meta.get("annotations") or {}, sort_keys=True))
    if seen != ctx.seen:  # not our own status writes: those would make the loop spin
        ctx.seen = seen
        ctx.wake.set()


def _snapshot(body: kopf.Body) -> dict:
    """A plain copy of the live body: one decision sees one version of the resource."""
    return json.loads(json.dumps(dict(body), default=str))


def resource_view(obj: dict) -> R.Resource:
    meta = obj["metadata"]
    spec, error = None, None
    try:
        spec = StreamJobSpec.model_validate(obj.get("spec") or {})
    except ValidationError as e:
        error = "; ".join(f"spec.{'.'.join(map(str, err['loc']))}: {err['msg']}" for err in e.errors())
    return R.Resource(name=meta["name"], namespace=meta["namespace"], uid=meta["uid"],
                      generation=int(meta.get("generation") or 1), spec=spec,
                      annotations=dict(meta.get("annotations") or {}), spec_error=error)


def _status_of(obj: dict) -> StreamJobStatus:
    try:
        return StreamJobStatus.model_validate(obj.get("status") or {})
    except ValidationError:
        return StreamJobStatus()  # written by something else: start over rather than wedge


def _dump(status: StreamJobStatus) -> dict:
    return status.model_dump(mode="json", by_alias=True, exclude_none=True)


async def reconcile_once(obj: dict, memo: kopf.Memo, ctx: JobContext, logger: logging.Logger) -> float:
    started = time.perf_counter()
    res = resource_view(obj)
    current = _status_of(obj)
    if ctx.token is None and current.deployment.pod_name:  # there is a job manager to ask
        ctx.token = await memo.kube.read_secret_value(res.namespace, resources.names.rest_token_secret(res.name), "token")
    await _check_storage(res, current, memo, ctx)
    obs = await observe(memo.kube, memo.jm, res.name, res.namespace, current, ctx.token, _now(), ctx.feedback,
                        ctx.history)
    plan = R.decide(res, current, obs)
    for _ in range(3):
        if await _write_status(memo, obj, current, plan.status, logger):
            break
        # The resource changed since it was read (often kopf's own annotations): decide again on
        # the fresh object; what was observed a moment ago still stands.
        obj = await memo.kube.get("StreamJob", res.namespace, res.name)
        if obj is None or obj["metadata"].get("deletionTimestamp"):
            return 0.5
        res, current = resource_view(obj), _status_of(obj)
        plan = R.decide(res, current, obs)
    else:
        return 0.5
    await _carry_out(plan, res, obs, memo, ctx, logger)
    _post_events(obj, plan.events)
    memo.metrics.observe_reconcile(time.perf_counter() - started, plan.status, res.uid, res.namespace, res.name)
    return plan.requeue_after


STORAGE_RECHECK = 30.0  # s between checks of a spec whose storage had a problem


async def _check_storage(res: R.Resource, current: StreamJobStatus, memo: kopf.Memo, ctx: JobContext) -> None:
    """Object-store locations of a new spec, once per generation (again while they have problems)."""
    generation, at = ctx.checked
    problems = ctx.feedback.get("spec_errors")
    if res.spec is None or (generation == res.generation and (not problems or time.monotonic() - at < STORAGE_RECHECK)):
        return

    async def secret(name: str, key: str) -> str | None:
        return await memo.kube.read_secret_value(res.namespace, name, key)

    ctx.feedback["spec_errors"] = await storage.spec_errors(res.spec, current.deployment.number == 0, secret)
    ctx.checked = (res.generation, time.monotonic())


async def _write_status(memo: kopf.Memo, obj: dict, current: StreamJobStatus, new: StreamJobStatus,
                        logger: logging.Logger) -> bool:
    """Write-ahead: the plan's status is stored before any of its actions runs. False: the resource
    changed since it was read (409), so the decision is made again on fresh data."""
    old = obj.get("status") or {}
    new_doc = {**{k: v for k, v in old.items() if k == "kopf"}, **_dump(new)}
    if new_doc == old:
        return True
    try:
        written = await memo.kube.replace_status(obj, new_doc)
    except Conflict:
        logger.debug("status write conflict: deciding again")
        return False
    obj["metadata"]["resourceVersion"] = (written or {}).get("metadata", {}).get("resourceVersion")
    return True


def _now() -> datetime:
    return datetime.now(timezone.utc)


# -- actions (idempotent) ------------------------------------------------------------------------------
async def _carry_out(plan: R.Plan, res: R.Resource, obs: Observation, memo: kopf.Memo, ctx: JobContext,
                     logger: logging.Logger) -> None:
    for action in plan.actions:
        try:
            await _act(action, res, obs, memo, ctx, logger)
        except (KubeError, aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
            # The next decision sees the world as it is and asks again: every action is idempotent.
            logger.warning(f"{type(action).__name__} for {res.name} failed: {e}")


async def _act(action: R.Action, res: R.Resource, obs: Observation, memo: kopf.Memo, ctx: JobContext,
               logger: logging.Logger) -> None:
    kube: Kube = memo.kube
    if isinstance(action, R.Deploy):
        token = ctx.token or secrets.token_urlsafe(32)
        spec = StreamJobSpec.model_validate(action.spec)
        restore = (action.restore.kind, action.restore.path) if action.restore else None
        config = operator_config(memo)
        target = resources.DeploymentTarget(number=action.number, parallelism=action.parallelism, restore=restore,
                                            overrides=action.overrides, kubernetes_master=config.kubernetes_master)
        for obj in resources.owned_objects(res.name, res.namespace, res.uid, spec, target, token):
            done = await kube.ensure(obj)
            if obj["kind"] == "Secret":
                # The token that counts is the one stored (a Secret made before a restart is kept).
                ctx.token = token if done == "created" else await kube.read_secret_value(
                    res.namespace, obj["metadata"]["name"], resources.REST_TOKEN_KEY)
    elif isinstance(action, R.DeletePod):
        await kube.delete("Pod", res.namespace, action.name)
    elif isinstance(action, R.CancelJob):
        if obs.pod is not None and obs.pod.ip:
            await memo.jm.call(obs.pod, ctx.token or "", "POST", "/v1/cancel")
    elif isinstance(action, R.TriggerSavepoint):
        await _trigger(action, obs, memo, ctx)
    elif isinstance(action, R.DisposeSavepoint):
        await _dispose(action.path, res, memo, ctx)
    elif isinstance(action, R.RescaleJob):
        await _rescale(action, obs, memo, ctx)


async def _rescale(action: R.RescaleJob, obs: Observation, memo: kopf.Memo, ctx: JobContext) -> None:
    if obs.pod is None or not obs.pod.ip or obs.job is None or not obs.job.job_id:
        return  # next tick
    body: dict[str, Any] = {"parallelism": action.parallelism} if action.parallelism is not None else {}
    if action.operators:
        body["operators"] = dict(action.operators)
    code, doc = await memo.jm.call(obs.pod, ctx.token or "", "PUT", f"/v1/jobs/{obs.job.job_id}/parallelism", body)
    if code >= 400:
        ctx.feedback.setdefault("rescale_errors", {})[action.key] = f"{code}: {doc.get('error', '')}"


async def _trigger(action: R.TriggerSavepoint, obs: Observation, memo: kopf.Memo, ctx: JobContext) -> None:
    if obs.pod is None or not obs.pod.ip:
        return  # next tick: the job manager does not know the id, and the trigger is sent again
    body = {"request_id": action.request_id, "target_dir": action.target_dir, "stop": action.stop}
    code, doc = await memo.jm.call(obs.pod, ctx.token or "", "POST", "/v1/savepoints", body)
    memo.metrics.savepoints_triggered.inc()
    if code >= 400:
        ctx.feedback.setdefault("trigger_errors", {})[action.request_id] = f"{code}: {doc.get('error', '')}"
        memo.metrics.savepoints_failed.inc()


async def _dispose(path: str, res: R.Resource, memo: kopf.Memo, ctx: JobContext) -> None:
    from streamjob.runtime.checkpoint.metadata import CheckpointFormatError
    from streamjob.runtime.checkpoint.storage import dispose_savepoint

    def dispose(options: dict | None) -> None:
        try:
            dispose_savepoint(path, options)
        except CheckpointFormatError as e:
            if "no _metadata" not in str(e):
                raise  # gone already counts as disposed; anything else is kept and retried

    try:
        options = None  # file:// lives in the job's volume (the operator's own view of the path)
        if path.startswith("s3://") and res.spec is not None:
            # the job's endpoint and credentials, not the operator's own AWS chain
            options = await storage.job_s3_options(
                res.spec, lambda name, key: memo.kube.read_secret_value(res.namespace, name, key))
        await asyncio.to_thread(dispose, options)
        ctx.feedback.setdefault("disposed", set()).add(path)
    except Exception as e:  # noqa: BLE001 - storage errors of any kind: reported, retried next tick
        ctx.feedback.setdefault("dispose_errors", {})[path] = f"{type(e).__name__}: {e}"


def _post_events(obj: dict, events: list[R.Event]) -> None:
    # kopf posts in the background and only logs a failure (a 403 in a terminating namespace):
    # events never block or fail a decision.
    for ev in events:
        kopf.event(obj, type=ev.type, reason=ev.reason.value, message=ev.message)


# -- deletion ------------------------------------------------------------------------------------------
@kopf.on.delete(API_GROUP, API_VERSION, PLURAL, id="teardown")
async def teardown(body: kopf.Body, memo: kopf.Memo, logger: logging.Logger, **_: Any) -> None:
    obj = _snapshot(body)
    while True:
        async with _slot(memo, URGENT):
            delay = await _teardown_once(obj, memo, logger)
        if delay is None:
            return
        # Waited for here, not by raising kopf.TemporaryError: kopf logs every temporary failure as an
        # ERROR, and waiting for a savepoint or for pods to stop is the normal course of a deletion.
        await asyncio.sleep(delay)
        fresh = await memo.kube.get("StreamJob", obj["metadata"]["namespace"], obj["metadata"]["name"])
        if fresh is None or fresh["metadata"].get("uid") != obj["metadata"]["uid"]:
            return  # gone already (the finalizer was removed by another replica)
        obj = fresh


async def _teardown_once(obj: dict, memo: kopf.Memo, logger: logging.Logger) -> float | None:
    """One pass of the deletion: None when it is done, else the seconds until the next pass."""
    res = resource_view(obj)
    ctx = _context(memo, res.uid)
    since = R.parse_time(obj["metadata"].get("deletionTimestamp")) or _now()
    current = _status_of(obj)
    if ctx.token is None:
        ctx.token = await memo.kube.read_secret_value(res.namespace, resources.names.rest_token_secret(res.name), "token")
    obs = await observe(memo.kube, memo.jm, res.name, res.namespace, current, ctx.token, _now(), ctx.feedback,
                        ctx.history)
    plan, done = R.decide_delete(res, current, obs, (_now() - since).total_seconds(),
                                 operator_config(memo).delete_timeout)
    try:
        await _write_status(memo, obj, current, plan.status, logger)
    except KubeError as e:  # the namespace may be terminating: deletion goes on regardless
        logger.warning(f"status write during deletion failed: {e}")
    await _carry_out(plan, res, obs, memo, ctx, logger)
    _post_events(obj, plan.events)
    if not done:
        return plan.requeue_after or 1.0
    memo.jobs.pop(res.uid, None)
    memo.metrics.forget(res.uid, res.namespace, res.name)
    return None
