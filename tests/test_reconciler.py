"""The operator's decisions, table-tested without Kubernetes: every transition and every lesson
from the flink-kubernetes-operator's and spark-operator's issue trackers.

``World`` is a deliberately small stand-in for the cluster and the job managers (pods appear
when deployed, savepoints complete when the test says so); it only carries out the plan's
actions, so what is tested is the pure ``decide`` / ``decide_delete`` logic itself. The same
flows run against real local jobs and kopf in tests/test_operator_e2e.py.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest

from streamjob.operator import reconciler as R
from streamjob.operator.model import StreamJobSpec, StreamJobStatus
from streamjob.operator.observation import (CheckpointObservation, JobObservation, Observation, PodObservation,
                                            RescaleObservation, SavepointObservation)

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
BASE = {"image": "streamjob:1", "job": {"file": "/jobs/count.py"}, "parallelism": 2,
        "checkpointing": {"interval": "10s"}, "checkpointDir": "s3://b/chk", "savepointDir": "s3://b/sp",
        "upgradeMode": "savepoint"}


class World:
    """Pods, job managers and savepoints, changed only by the plan's actions and the test."""

    def __init__(self, spec: dict | None = None, annotations: dict | None = None):
        self.spec = dict(spec or BASE)
        self.annotations = dict(annotations or {})
        self.generation = 1
        self.status = StreamJobStatus()
        self.now = T0
        self.pods: dict[str, dict] = {}
        self.jobs: dict[str, dict] = {}  # pod -> job manager state
        self.triggers: dict[str, list] = {}  # request id -> [stop, status, path, error] (one savepoint per id)
        self.savepoints_taken = 0
        self.deploys: list[R.Deploy] = []
        self.events: list[R.Event] = []
        self.disposed: set[str] = set()
        self.feedback_disposed: set[str] = set()
        self.trigger_errors: dict[str, str] = {}
        self.ids = itertools.count(1)
        self.dispose_fails = False
        self.dispose_errors: dict[str, str] = {}
        self.refuse_triggers = False
        self.rescale_errors: dict[int, str] = {}
        self.slot_limit: int | None = None  # the most slots a job manager can rescale to in place (None: any)

    # -- the test's levers ---------------------------------------------------------------------
    def edit(self, **changes) -> None:
        self.spec.update(changes)
        self.generation += 1

    def job(self) -> dict:
        return self.jobs[self.status.deployment.pod_name]

    def complete_savepoints(self) -> None:
        for rid, t in self.triggers.items():
            if t[1] in ("QUEUED", "IN_PROGRESS"):
                t[1], t[2] = "COMPLETED", f"s3://b/sp/savepoint-{rid}"
                if t[0]:  # stop-with-savepoint: the job finishes
                    for job in self.jobs.values():
                        if job.get("rid") == rid:
                            job["state"], job["final_savepoint"] = "FINISHED", t[2]

    def fail_savepoints(self, error: str = "storage down") -> None:
        for t in self.triggers.values():
            if t[1] in ("QUEUED", "IN_PROGRESS"):
                t[1], t[3] = "FAILED", error

    def checkpoint(self, n: int) -> None:
        job = self.job()
        job["checkpoint"] = CheckpointObservation(n, f"s3://b/chk/{job['id']}/chk-{n}", self.now.timestamp())

    # -- one operator tick ---------------------------------------------------------------------
    def observe(self) -> Observation:
        st = self.status
        name = st.deployment.pod_name
        pod = job = sp = None
        if name in self.pods:
            p = self.pods[name]
            j = self.jobs[name]
            ended = j["state"] in ("FINISHED", "FAILED", "CANCELED") and p.get("exited")
            pod = PodObservation(name, "Succeeded" if ended and j["state"] != "FAILED" else
                                 "Failed" if ended else p.get("phase", "Running"), ready=True, ip="10.0.0.1",
                                 waiting_reason=p.get("waiting"),
                                 final_state=j["state"] if ended else None,
                                 final_savepoint=j.get("final_savepoint") if ended else None,
                                 final_error=p.get("error") if ended else None)
            if p.get("unreachable") or ended or p.get("waiting"):
                job = JobObservation(False, unreachable_reason="connection refused")
            else:
                r = j.get("rescale")
                job = JobObservation(True, j["state"], j["id"], j["restarts"], self.now.timestamp() - j["age"],
                                     j["parallelism"], j.get("checkpoint"), j.get("final_savepoint"),
                                     slots=j.get("slots"), executors=j.get("executors"),
                                     queryable_state=j.get("queryable_state"),
                                     rescale=RescaleObservation(r["id"], r["status"], r["parallelism"], r.get("checkpoint"))
                                     if r else None)
                if r and r["status"] == "RESTARTING":  # the job manager's rescale completes by the next look
                    r["status"], r["checkpoint"], j["parallelism"] = "COMPLETED", 9, r["parallelism"]
        rid = (st.upgrade.savepoint_request_id if st.upgrade and st.upgrade.savepoint_request_id else
               st.savepoint_trigger.request_id if st.savepoint_trigger else None)
        if rid is not None and job is not None and job.reachable:
            t = self.triggers.get(rid) if self.jobs[name].get("rids", set()) & {rid} else None
            sp = SavepointObservation(rid, t[1], t[2], t[3]) if t else SavepointObservation(rid, "UNKNOWN")
        obs = Observation(self.now, pod, job, sp, disposed=frozenset(self.feedback_disposed),
                          dispose_errors=dict(self.dispose_errors), trigger_errors=dict(self.trigger_errors),
                          rescale_errors=dict(self.rescale_errors),
                          other_pods=tuple(sorted(n for n in self.pods if n != name)))
        self.feedback_disposed, self.trigger_errors, self.dispose_errors, self.rescale_errors = set(), {}, {}, {}
        return obs

    def resource(self) -> R.Resource:
        return R.Resource("wc", "ns", "uid-1", self.generation, StreamJobSpec.model_validate(self.spec),
                          dict(self.annotations))

    def tick(self, seconds: float = 1.0, *, lose_actions: bool = False) -> R.Plan:
        self.now += timedelta(seconds=seconds)
        plan = R.decide(self.resource(), self.status, self.observe())
        self.status = StreamJobStatus.model_validate(plan.status.model_dump(mode="json", by_alias=True))
        self.events += plan.events
        if not lose_actions:
            for action in plan.actions:
                self.apply(action)
        return plan

    def apply(self, action) -> None:
        if isinstance(action, R.Deploy):
            if action.pod_name in self.pods:
                return
            self.deploys.append(action)
            claim = action.restore is not None and action.restore.kind == "checkpoint"
            job_id = action.restore.path.rsplit("/", 1)[1] if claim else f"job{next(self.ids)}"
            self.pods[action.pod_name] = {}
            if action.spec["image"].startswith("missing"):
                self.pods[action.pod_name] = {"waiting": "ImagePullBackOff", "phase": "Pending"}
            if action.spec["job"].get("file") == "/missing.py":
                self.pods[action.pod_name] = {"exited": True, "error": "no such job file: /missing.py"}
            if action.restore is not None and action.restore.path.endswith("/gone"):
                self.pods[action.pod_name] = {"exited": True, "error": f"--from-savepoint: {action.restore.path}: "
                                                                       "no _metadata (not a completed checkpoint)"}
            self.jobs[action.pod_name] = {"state": "FAILED" if self.pods[action.pod_name].get("exited") else "RUNNING",
                                          "id": job_id, "restarts": 0, "age": 0.0,
                                          "parallelism": action.parallelism, "rids": set()}
        elif isinstance(action, R.DeletePod):
            self.pods.pop(action.name, None)
        elif isinstance(action, R.TriggerSavepoint):
            job = self.job() if self.status.deployment.pod_name in self.jobs else None
            if self.refuse_triggers or job is None or job["state"] != "RUNNING":
                self.trigger_errors[action.request_id] = "409 the job is not running"
                return
            job["rids"].add(action.request_id)
            if action.request_id not in self.triggers:  # the job manager de-duplicates request ids
                self.triggers[action.request_id] = [action.stop, "IN_PROGRESS", None, None]
                self.savepoints_taken += 1
                if action.stop:
                    job["rid"] = action.request_id
        elif isinstance(action, R.RescaleJob):
            self.rescales_asked = getattr(self, "rescales_asked", 0) + 1
            job = self.job() if self.status.deployment.pod_name in self.jobs else None
            if job is None or job["state"] != "RUNNING":
                self.rescale_errors[action.parallelism] = "409 the job is not running"
            elif self.slot_limit is not None and action.parallelism > self.slot_limit:
                self.rescale_errors[action.parallelism] = (f"409 not enough slots: the job needs {action.parallelism} "
                                                           f"slots, and Spark (local) has {self.slot_limit}")
            elif (job.get("rescale") or {}).get("parallelism") != action.parallelism:
                job["rescale"] = {"id": f"r{next(self.ids)}", "status": "RESTARTING", "parallelism": action.parallelism}
        elif isinstance(action, R.CancelJob):
            job = self.jobs[action.pod_name]
            if job["state"] in ("RUNNING", "RESTARTING"):
                job["state"] = "CANCELED"
        elif isinstance(action, R.DisposeSavepoint):
            if self.dispose_fails:
                self.dispose_errors[action.path] = "503 slow down"
            else:
                self.disposed.add(action.path)
                self.feedback_disposed.add(action.path)

    def run_until(self, predicate, ticks: int = 50, seconds: float = 1.0) -> None:
        for _ in range(ticks):
            if predicate():
                return
            self.tick(seconds)
        raise AssertionError(f"not reached after {ticks} ticks; status: {self.status.model_dump(exclude_none=True)}")

    def reasons(self) -> list[str]:
        return [e.reason.value for e in self.events]

    def running(self) -> None:
        """Deploy and let the job run (pods come up at the next tick)."""
        self.run_until(lambda: self.status.job_status.state == "RUNNING")


def lifecycle(w: World) -> str:
    return w.status.lifecycle_state


# -- create, observe -----------------------------------------------------------------------------
def test_create_deploys_one_pod_and_records_the_running_job():
    w = World()
    plan = w.tick()
    assert [type(a) for a in plan.actions] == [R.Deploy]
    assert w.status.deployment.pod_name == "wc-driver-1" and lifecycle(w) == "CREATED"
    w.tick()
    assert lifecycle(w) == "DEPLOYED" and w.status.job_status.state == "RUNNING"
    assert w.status.parallelism == 2 and w.status.selector == "streamjob.io/job=wc"
    assert w.status.observed_generation == 1
    assert w.status.slots is None  # a job manager that does not say
    # The job's graph needs more slots than spec.parallelism (an operator's set_parallelism(5)): the
    # status shows what it asked for, and parallelism (the scale subresource's replicas) stays the spec's.
    w.job().update(slots=5, executors=3, queryable_state=("clicks", "latest"))
    w.tick(5)
    assert (w.status.parallelism, w.status.slots, w.status.executors) == (2, 5, 3)
    assert w.status.queryable_state == ["clicks", "latest"]  # what its Service answers lookups of
    assert len(w.deploys) == 1  # nothing more to do
    assert {c.type: c.status for c in w.status.conditions} == {"Ready": "True", "Progressing": "False",
                                                               "Degraded": "False"}
    w.job()["age"] = 120
    w.checkpoint(3)
    w.tick(60)
    assert lifecycle(w) == "STABLE" and w.status.last_stable_spec == w.status.last_reconciled_spec
    assert w.status.last_checkpoint.id == 3


def test_created_suspended_deploys_nothing():
    w = World({**BASE, "state": "suspended"})
    w.tick()
    assert lifecycle(w) == "SUSPENDED" and not w.deploys


def test_initial_savepoint_is_restored_by_the_first_deployment():
    w = World({**BASE, "initialSavepointPath": "s3://b/sp/savepoint-old"})
    w.tick()
    assert w.deploys[0].restore == R.Restore("savepoint", "s3://b/sp/savepoint-old")


def test_unreachable_job_manager_is_unknown_never_a_stale_running():
    w = World()
    w.running()
    w.pods["wc-driver-1"]["unreachable"] = True
    w.tick()
    assert w.status.job_status.state == "UNKNOWN"
    assert "unreachable" in w.status.job_status.error
    assert {c.type: c.status for c in w.status.conditions}["Ready"] == "False"


# -- savepoints by annotation --------------------------------------------------------------------
def test_annotation_takes_one_savepoint_per_nonce_and_records_it():
    w = World()
    w.running()
    w.annotations[R.SAVEPOINT_ANNOTATION] = "first"
    w.tick()
    assert w.status.savepoint_trigger.nonce == "first" and w.savepoints_taken == 1
    w.tick()
    w.complete_savepoints()
    w.tick()
    assert w.status.savepoint_trigger is None and w.status.last_handled_nonce == "first"
    assert w.status.last_savepoint.nonce == "first" and w.status.last_savepoint.trigger_type == "manual"
    for _ in range(5):
        w.tick()
    assert w.savepoints_taken == 1  # the same nonce never triggers twice
    w.annotations[R.SAVEPOINT_ANNOTATION] = "second"
    w.run_until(lambda: w.status.savepoint_trigger is not None)
    w.complete_savepoints()
    w.run_until(lambda: w.status.last_handled_nonce == "second")
    assert [s.nonce for s in w.status.savepoint_history] == ["first", "second"]
    assert "SavepointCompleted" in w.reasons()


def test_trigger_lost_by_an_operator_restart_is_repeated_with_the_same_request_id():
    """Lesson: a trigger lost or repeated after an operator restart. The status was written, the
    POST never happened (the operator died): the next operator re-sends the same request id."""
    w = World()
    w.running()
    w.annotations[R.SAVEPOINT_ANNOTATION] = "n1"
    w.tick(lose_actions=True)
    rid = w.status.savepoint_trigger.request_id
    assert w.savepoints_taken == 0
    w.tick()  # the job manager does not know rid: trigger it again, same id
    assert set(w.triggers) == {rid} and w.savepoints_taken == 1
    w.tick()
    w.tick()  # and a repeated POST of a known id takes no second savepoint
    assert w.savepoints_taken == 1


def test_status_write_lost_after_trigger_repeats_the_same_request_id():
    """The POST happened but the status write recording it was lost: the decision is made again
    from the old status and yields the same request id, which the job manager de-duplicates."""
    w = World()
    w.running()
    w.annotations[R.SAVEPOINT_ANNOTATION] = "n1"
    before = w.status
    w.tick()
    w.status = before  # lost update
    w.tick()
    assert w.savepoints_taken == 1 and len(w.triggers) == 1


def test_failed_savepoint_is_retried_with_backoff_then_given_up_never_wedging():
    w = World()
    w.running()
    w.annotations[R.SAVEPOINT_ANNOTATION] = "x"
    w.tick()
    for attempt in range(1, R.MAX_SAVEPOINT_ATTEMPTS + 1):
        w.fail_savepoints()
        w.tick()
        if attempt < R.MAX_SAVEPOINT_ATTEMPTS:
            assert w.status.savepoint_trigger.attempts == attempt
            wait = (R.parse_time(w.status.savepoint_trigger.next_attempt_time) - w.now).total_seconds()
            assert wait == R.backoff(attempt, R.SAVEPOINT_BACKOFF, R.MAX_BACKOFF)
            taken = w.savepoints_taken
            w.tick(wait / 2)
            assert w.savepoints_taken == taken  # backing off
            w.run_until(lambda: w.savepoints_taken == taken + 1, seconds=wait / 2)
    assert w.status.savepoint_trigger is None and w.status.last_handled_nonce == "x"
    assert w.reasons().count("SavepointFailed") == R.MAX_SAVEPOINT_ATTEMPTS
    # not wedged: an upgrade goes ahead
    w.edit(image="streamjob:2")
    w.tick()
    assert w.status.upgrade is not None


def test_annotation_without_savepoint_dir_is_refused_in_an_event():
    spec = {k: v for k, v in BASE.items() if k != "savepointDir"} | {"upgradeMode": "stateless"}
    w = World(spec)
    w.running()
    w.annotations[R.SAVEPOINT_ANNOTATION] = "x"
    w.tick()
    assert w.savepoints_taken == 0 and w.status.last_handled_nonce == "x"
    assert "savepointDir" in w.events[-1].message


def test_periodic_savepoints():
    w = World({**BASE, "savepoints": {"periodicInterval": "1m"}})
    w.running()
    w.tick(61)
    assert w.status.savepoint_trigger.trigger_type == "periodic"
    w.complete_savepoints()
    w.tick()
    w.tick(30)
    assert w.savepoints_taken == 1
    w.tick(31)
    assert w.savepoints_taken == 2


# -- rescale and upgrade ---------------------------------------------------------------------------
def test_rescale_of_a_healthy_job_is_in_place_no_savepoint_no_new_driver():
    w = World()
    w.running()
    w.edit(parallelism=4)
    plan = w.tick()
    assert w.status.upgrade.phase == "RESCALING" and lifecycle(w) == "UPGRADING"
    assert [a for a in plan.actions if isinstance(a, R.RescaleJob)] == [R.RescaleJob(4)]
    w.run_until(lambda: w.status.upgrade is None)
    assert len(w.deploys) == 1 and w.savepoints_taken == 0 and "wc-driver-1" in w.pods
    assert w.status.parallelism == 4 and w.status.deployment.parallelism == 4
    assert w.status.last_reconciled_spec["parallelism"] == 4 and w.status.deployment.spec["parallelism"] == 4
    assert lifecycle(w) in ("DEPLOYED", "STABLE")
    assert {"Rescaling", "Rescaled"} <= set(w.reasons())
    w.tick()
    assert len(w.deploys) == 1 and w.status.upgrade is None  # nothing more to do
    # a redeploy after that (the driver lost) runs at the new parallelism
    del w.pods["wc-driver-1"]
    w.run_until(lambda: len(w.deploys) == 2)
    assert w.deploys[1].parallelism == 4


def test_an_edit_beyond_the_parallelism_during_an_in_place_rescale_becomes_an_upgrade():
    w = World()
    w.running()
    w.edit(parallelism=4)
    w.tick(lose_actions=True)  # the PUT never reached the job manager
    assert w.status.upgrade.phase == "RESCALING"
    w.edit(image="streamjob:2")
    w.tick()
    assert w.status.upgrade.phase == "STOPPING" and w.status.upgrade.target_spec["image"] == "streamjob:2"
    w.complete_savepoints()
    w.run_until(lambda: len(w.deploys) == 2)
    assert w.deploys[1].parallelism == 4 and w.deploys[1].spec["image"] == "streamjob:2"


def test_rescale_with_savepoint_mode_stops_with_savepoint_then_restores_it():
    """Where the job manager refuses in place (local[N] has too few slots), today's path: stop-with-savepoint."""
    w = World()
    w.slot_limit = 2
    w.running()
    w.edit(parallelism=3)
    w.tick()
    assert w.status.upgrade.phase == "RESCALING"
    w.tick()
    up = w.status.upgrade
    assert up.phase == "STOPPING" and up.reason == "rescale" and lifecycle(w) == "UPGRADING"
    assert w.triggers[up.savepoint_request_id][0] is True  # stop-with-savepoint
    w.tick()
    assert len(w.deploys) == 1  # the old job runs until the savepoint completes
    w.complete_savepoints()
    w.run_until(lambda: len(w.deploys) == 2)
    new = w.deploys[1]
    assert new.parallelism == 3 and new.restore.kind == "savepoint" and new.pod_name == "wc-driver-2"
    assert "wc-driver-1" not in w.pods  # the old driver went first
    w.run_until(lambda: w.status.job_status.state == "RUNNING")
    assert lifecycle(w) == "DEPLOYED" and w.status.parallelism == 3
    assert w.status.last_savepoint.trigger_type == "upgrade" and w.savepoints_taken == 1


def test_upgrade_with_last_state_cancels_and_restores_the_latest_checkpoint_dir():
    w = World({**BASE, "upgradeMode": "last-state"})
    w.running()
    job_id = w.job()["id"]
    w.checkpoint(7)
    w.tick()
    w.edit(image="streamjob:2")
    w.run_until(lambda: len(w.deploys) == 2)
    assert w.savepoints_taken == 0
    assert w.deploys[1].restore == R.Restore("checkpoint", f"s3://b/chk/{job_id}")
    assert w.jobs["wc-driver-1"]["state"] == "CANCELED"


def test_last_state_waits_for_a_first_checkpoint_instead_of_dropping_state():
    """Lesson: no implicit stateful -> stateless upgrade."""
    w = World({**BASE, "upgradeMode": "last-state"})
    w.running()
    w.edit(image="streamjob:2")  # (a parallelism edit alone is done in place, by the job manager)
    for _ in range(3):
        w.tick()
    assert len(w.deploys) == 1 and w.status.upgrade is None
    assert "first completed checkpoint" in w.status.error and "UpgradeBlocked" in w.reasons()
    w.checkpoint(1)
    w.run_until(lambda: len(w.deploys) == 2)
    assert w.deploys[1].restore.kind == "checkpoint" and w.deploys[1].spec["image"] == "streamjob:2"


def test_stateless_upgrade_starts_fresh():
    w = World({**BASE, "upgradeMode": "stateless"})
    w.running()
    w.checkpoint(2)
    w.edit(image="streamjob:2")
    w.run_until(lambda: len(w.deploys) == 2)
    assert w.deploys[1].restore is None and w.savepoints_taken == 0


def test_operator_only_changes_need_no_redeploy():
    w = World()
    w.running()
    w.edit(savepoints={"historyMaxCount": 2}, health={"restartsThreshold": 9})
    for _ in range(3):
        w.tick()
    assert len(w.deploys) == 1 and w.status.observed_generation == w.generation
    assert w.status.last_reconciled_spec["savepoints"]["historyMaxCount"] == 2


def test_failed_stop_with_savepoint_keeps_the_old_job_running_and_says_why():
    """Lesson: a resource wedged in UPGRADING when a savepoint fails. The old job runs on, the
    status says why, the operator retries with backoff, and the user can revert, suspend or delete."""
    w = World()
    w.running()
    w.edit(image="streamjob:2")
    w.tick()
    w.fail_savepoints()
    w.tick()
    assert w.job()["state"] == "RUNNING" and len(w.deploys) == 1
    assert "keeps running its previous spec" in w.status.error and w.status.upgrade.attempts == 1
    assert w.status.observed_generation == w.generation
    # revert the spec: the upgrade is abandoned, the job simply runs on
    w.edit(image="streamjob:1")
    w.tick()
    assert w.status.upgrade is None and lifecycle(w) in ("DEPLOYED", "STABLE") and len(w.deploys) == 1


def test_switching_to_last_state_while_savepoints_fail_gets_the_upgrade_through():
    w = World()
    w.running()
    w.checkpoint(4)
    w.edit(image="streamjob:2")
    w.tick()
    w.fail_savepoints()
    w.tick()
    w.edit(upgradeMode="last-state")
    w.run_until(lambda: len(w.deploys) == 2)
    assert w.deploys[1].restore.kind == "checkpoint"


def test_completed_savepoint_is_used_even_if_the_job_failed_while_stopping():
    """Lesson: a completed savepoint ignored because the job failed while stopping."""
    w = World()
    w.running()
    w.edit(parallelism=1, image="streamjob:2")  # an upgrade, not only a rescale
    w.tick()
    rid = w.status.upgrade.savepoint_request_id
    w.triggers[rid][1:3] = ["COMPLETED", "s3://b/sp/savepoint-final"]
    job = w.job()
    job["state"], job["final_savepoint"] = "FAILED", "s3://b/sp/savepoint-final"
    w.pods["wc-driver-1"]["exited"] = True  # and the pod is gone before the operator asked the REST API
    w.run_until(lambda: len(w.deploys) == 2)
    assert w.deploys[1].restore == R.Restore("savepoint", "s3://b/sp/savepoint-final")


def test_job_lost_while_stopping_restores_the_latest_checkpoint_not_nothing():
    w = World()
    w.running()
    w.checkpoint(9)
    w.tick()
    job_id = w.job()["id"]
    w.edit(image="streamjob:2")
    w.tick()
    del w.pods["wc-driver-1"]  # node lost mid-savepoint
    w.run_until(lambda: len(w.deploys) == 2)
    assert w.deploys[1].restore == R.Restore("checkpoint", f"s3://b/chk/{job_id}")


def test_operator_restart_mid_upgrade_resumes_it_with_one_savepoint():
    """Lesson: a savepoint trigger repeated after an operator restart. Every tick's actions are
    lost once (the operator died right after writing status) and then replayed from status."""
    w = World()
    w.running()
    w.edit(parallelism=3, image="streamjob:2")  # an upgrade, not only a rescale
    for _ in range(4):
        w.tick(lose_actions=True)
        w.tick()
        if w.status.upgrade and w.status.upgrade.phase == "STOPPING" and w.triggers:
            w.complete_savepoints()
    w.run_until(lambda: w.status.job_status.state == "RUNNING" and w.status.deployment.number == 2)
    assert w.savepoints_taken == 1 and len(w.deploys) == 2 and w.deploys[1].parallelism == 3


# -- suspend and resume ------------------------------------------------------------------------------
def test_suspend_takes_a_savepoint_and_resume_restores_it():
    w = World()
    w.running()
    w.edit(state="suspended")
    w.tick()
    assert w.status.upgrade.reason == "suspend"
    w.complete_savepoints()
    w.run_until(lambda: lifecycle(w) == "SUSPENDED")
    assert not w.pods and w.status.last_savepoint.trigger_type == "suspend"
    assert w.status.job_status.state == "NOT_DEPLOYED"
    path = w.status.last_savepoint.path
    w.edit(state="running", parallelism=5)
    w.run_until(lambda: len(w.deploys) == 2)
    assert w.deploys[1].restore == R.Restore("savepoint", path) and w.deploys[1].parallelism == 5


def test_spec_edits_while_suspended_apply_on_resume():
    w = World({**BASE, "upgradeMode": "stateless"})
    w.running()
    w.edit(state="suspended")
    w.run_until(lambda: lifecycle(w) == "SUSPENDED")
    w.edit(image="streamjob:3")
    w.tick()
    assert len(w.deploys) == 1
    w.edit(state="running")
    w.run_until(lambda: len(w.deploys) == 2)
    assert w.deploys[1].spec["image"] == "streamjob:3"


# -- failures -------------------------------------------------------------------------------------
def test_lost_driver_is_redeployed_from_the_latest_checkpoint_with_backoff_then_failed():
    w = World({**BASE, "redeploy": {"maxRedeploys": 2, "backoff": "10s"}})
    w.running()
    w.checkpoint(5)
    w.tick()
    job_id = w.job()["id"]
    del w.pods["wc-driver-1"]
    w.tick()
    assert "DriverLost" in w.reasons() and w.status.next_redeploy_time is not None
    w.tick(5)
    assert len(w.deploys) == 1  # backing off
    w.run_until(lambda: len(w.deploys) == 2, seconds=5)
    assert w.deploys[1].restore == R.Restore("checkpoint", f"s3://b/chk/{job_id}")
    w.run_until(lambda: w.status.job_status.state == "RUNNING")
    w.job()["state"] = "FAILED"  # beyond its restart strategy
    w.run_until(lambda: len(w.deploys) == 3, seconds=10)
    w.run_until(lambda: w.status.job_status.state == "RUNNING")
    w.job()["state"] = "FAILED"
    w.run_until(lambda: lifecycle(w) == "FAILED", seconds=10)
    assert len(w.deploys) == 3 and "gave up after 2 redeploys" in w.status.error


def test_driver_failed_by_its_spark_jvm_s_death_is_redeployed_from_the_latest_checkpoint_saying_why():
    """On a cluster master the driver's JVM cannot be replaced in the pod: the job fails fast, its
    termination message names the JVM's death, and the operator redeploys from the latest checkpoint
    (the runtime's side: tests/test_jvm_failover.py)."""
    w = World()
    w.running()
    w.checkpoint(7)
    w.tick()
    job_id = w.job()["id"]
    error = (f"Job 'wc' ({job_id}) failed: the Spark JVM exited (killed by signal 9); it cannot be replaced on "
             f"master k8s://https://kubernetes.default.svc: that JVM is the Spark driver")
    w.pods["wc-driver-1"].update({"exited": True, "error": error})
    w.job()["state"] = "FAILED"
    w.tick()
    assert w.status.job_status.state == "FAILED" and "the Spark JVM exited (killed by signal 9)" in w.status.error
    [event] = [e for e in w.events if e.reason.value == "JobFailed"]
    assert "the Spark JVM exited (killed by signal 9)" in event.message and "redeploying" in event.message
    w.run_until(lambda: len(w.deploys) == 2, seconds=5)
    assert w.deploys[1].restore == R.Restore("checkpoint", f"s3://b/chk/{job_id}")
    w.run_until(lambda: w.status.job_status.state == "RUNNING")


def test_finished_job_is_not_redeployed():
    w = World()
    w.running()
    w.job()["state"] = "FINISHED"
    for _ in range(5):
        w.tick(30)
    assert len(w.deploys) == 1 and w.status.job_status.state == "FINISHED"


# -- history and health -------------------------------------------------------------------------------
def test_history_is_trimmed_only_after_disposal_succeeded_and_never_the_newest():
    """Lesson: history entries dropped before disposal succeeded (storage leak), or the last
    savepoint disposed."""
    w = World({**BASE, "savepoints": {"historyMaxCount": 2}})
    w.running()
    w.dispose_fails = True
    for n in range(4):
        w.annotations[R.SAVEPOINT_ANNOTATION] = f"n{n}"
        w.run_until(lambda: w.status.savepoint_trigger is not None)
        w.complete_savepoints()
        w.run_until(lambda: w.status.savepoint_trigger is None)
    paths = [s.path for s in w.status.savepoint_history]
    assert len(paths) == 4  # not dropped while disposal fails
    assert w.status.pending_disposal == paths[:2] and "SavepointDisposeFailed" in w.reasons()
    w.dispose_fails = False
    w.tick()  # disposes
    w.tick()  # sees it done
    assert [s.path for s in w.status.savepoint_history] == paths[2:] and w.disposed == set(paths[:2])
    assert not w.status.pending_disposal and w.status.last_savepoint.path == paths[-1]


def test_history_max_age_never_disposes_the_newest():
    w = World({**BASE, "savepoints": {"historyMaxAge": "1h"}})
    w.running()
    w.annotations[R.SAVEPOINT_ANNOTATION] = "only"
    w.run_until(lambda: w.status.savepoint_trigger is not None)
    w.complete_savepoints()
    w.tick()
    w.tick(7200)
    assert not w.disposed and len(w.status.savepoint_history) == 1


def test_restart_loop_makes_the_job_degraded():
    w = World({**BASE, "health": {"restartsThreshold": 3, "restartsWindow": "5m"}})
    w.running()
    for _ in range(3):
        w.job()["restarts"] += 1
        w.tick(10)
    cond = {c.type: c for c in w.status.conditions}["Degraded"]
    assert cond.status == "True" and cond.reason == "RestartLoop" and "RestartLoop" in w.reasons()
    w.tick(400)
    assert {c.type: c for c in w.status.conditions}["Degraded"].status == "False"


def test_stalled_checkpoints_make_the_job_degraded():
    w = World({**BASE, "checkpointing": {"interval": "10s", "timeout": "20s", "tolerableFailures": 1}})
    w.running()
    w.checkpoint(1)
    w.tick(30)
    assert {c.type: c for c in w.status.conditions}["Degraded"].status == "False"
    w.tick(31)  # 61 s > max(10, 20) * (1 + 2)
    cond = {c.type: c for c in w.status.conditions}["Degraded"]
    assert cond.status == "True" and cond.reason == "CheckpointsStalled"


def test_image_that_cannot_be_pulled_is_reported():
    w = World()
    w.tick()
    w.tick()
    w.pods["wc-driver-1"]["waiting"] = "ImagePullBackOff"
    w.pods["wc-driver-1"]["phase"] = "Pending"
    w.tick()
    assert w.status.job_status.state == "DEPLOYING"


# -- invalid specs --------------------------------------------------------------------------------------
def test_invalid_spec_keeps_the_last_good_one_running():
    w = World()
    w.running()
    w.generation += 1
    plan = R.decide(replace(w.resource(), spec=None, spec_error="spec.parallelism: must be >= 1"), w.status,
                    w.observe())
    assert not any(isinstance(a, (R.Deploy, R.DeletePod, R.CancelJob)) for a in plan.actions)
    assert plan.status.error.startswith("invalid spec") and plan.status.observed_generation == w.generation
    assert plan.events[0].reason.value == "SpecInvalid"


def test_spec_problem_found_by_the_observer_blocks_the_change():
    w = World()
    w.running()
    w.edit(savepointDir="s3://nope/sp", parallelism=4)
    obs = replace(w.observe(), spec_errors={"spec.savepointDir": "bucket nope does not exist"})
    plan = R.decide(w.resource(), w.status, obs)
    assert plan.status.upgrade is None and "spec.savepointDir" in plan.status.error


# -- deletion -------------------------------------------------------------------------------------
def _delete(w: World, for_seconds: float = 1.0, timeout: float = 300.0) -> bool:
    w.now += timedelta(seconds=1)
    plan, done = R.decide_delete(w.resource(), w.status, w.observe(), for_seconds, timeout)
    w.status = plan.status
    w.events += plan.events
    for a in plan.actions:
        w.apply(a)
    return done


def test_delete_with_savepoint_on_deletion():
    w = World({**BASE, "savepointOnDeletion": True})
    w.running()
    assert not _delete(w)
    assert w.status.savepoint_trigger.trigger_type == "delete" and w.triggers
    assert not _delete(w)
    w.complete_savepoints()
    assert not _delete(w)  # savepoint recorded, pod deleted
    assert _delete(w)
    assert w.status.last_savepoint.trigger_type == "delete" and not w.pods and w.savepoints_taken == 1


def test_delete_goes_on_when_the_savepoint_fails():
    w = World({**BASE, "savepointOnDeletion": True})
    w.running()
    _delete(w)
    w.fail_savepoints()
    _delete(w)
    assert _delete(w) and not w.pods and "SavepointFailed" in w.reasons()


def test_delete_never_hangs():
    """Lesson: deletion hanging (a terminating namespace, a stuck job): after the timeout the
    finalizer goes regardless, and the event says so."""
    w = World({**BASE, "savepointOnDeletion": True})
    w.running()
    _delete(w)
    assert _delete(w, for_seconds=301, timeout=300)
    assert "DeleteTimeout" in w.reasons()


@pytest.mark.parametrize("old,new,kind", [
    (None, {"parallelism": 1}, "deploy"),
    ({"parallelism": 1}, {"parallelism": 1}, "none"),
    ({"parallelism": 1}, {"parallelism": 2}, "rescale"),
    ({"parallelism": 1, "image": "a"}, {"parallelism": 2, "image": "b"}, "upgrade"),
    ({"image": "a", "upgradeMode": "savepoint"}, {"image": "a", "upgradeMode": "stateless"}, "none"),
    ({"state": "running"}, {"state": "suspended"}, "suspend"),
    ({"state": "suspended"}, {"state": "running", "image": "x"}, "resume"),
    ({"config": {"a": "1"}}, {"config": {"a": "2"}}, "upgrade"),
    ({"savepoints": {"historyMaxCount": 1}}, {"savepoints": {"historyMaxCount": 2}}, "none"),
])
def test_classify(old, new, kind):
    assert R.classify(old, new) == kind


# -- bad input the API server cannot refuse -------------------------------------------------------
def test_upgrade_to_an_image_that_cannot_start_rolls_back_and_keeps_the_job_running():
    w = World()
    w.running()
    w.job()["age"] = 120
    w.tick(61)
    assert lifecycle(w) == "STABLE"
    w.edit(image="missing/image:2")
    w.tick()
    w.complete_savepoints()
    w.run_until(lambda: len(w.deploys) == 2)
    upgrade_savepoint = w.deploys[1].restore
    w.run_until(lambda: len(w.deploys) == 3)
    rollback = w.deploys[2]
    assert rollback.spec["image"] == "streamjob:1" and rollback.restore == upgrade_savepoint
    w.run_until(lambda: w.status.job_status.state == "RUNNING")
    assert lifecycle(w) == "ROLLED_BACK" and w.status.error.startswith("spec.image: ")
    assert "ImagePullBackOff" in w.status.error and "RollingBack" in w.reasons()
    assert w.status.last_reconciled_spec["image"] == "missing/image:2"  # what was asked: not retried
    for _ in range(5):
        w.tick(30)
    assert len(w.deploys) == 3
    w.edit(image="streamjob:2")  # the fix goes ahead from the rolled-back job, with a savepoint
    w.tick()
    w.complete_savepoints()
    w.run_until(lambda: len(w.deploys) == 4)
    assert w.deploys[3].spec["image"] == "streamjob:2" and w.deploys[3].restore.kind == "savepoint"
    w.run_until(lambda: lifecycle(w) == "DEPLOYED")


@pytest.mark.parametrize("spec, field", [
    ({"job": {"file": "/missing.py"}}, "spec.job.file"),
    ({"initialSavepointPath": "s3://b/sp/gone"}, "spec.initialSavepointPath"),
])
def test_first_deployment_that_cannot_start_fails_naming_the_field_until_fixed(spec, field):
    w = World({**BASE, **spec})
    w.run_until(lambda: lifecycle(w) == "FAILED")
    assert w.status.error.startswith(f"{field}: the job did not start")
    for _ in range(3):
        w.tick(60)
    assert len(w.deploys) == 1  # the same spec would fail the same way: no redeploy loop
    w.edit(job={"file": "/jobs/count.py"}, initialSavepointPath=None)
    w.run_until(lambda: w.status.job_status.state == "RUNNING")
    assert len(w.deploys) == 2 and lifecycle(w) == "DEPLOYED"


def test_first_deployment_with_an_image_that_cannot_be_pulled_is_degraded_naming_the_image():
    w = World({**BASE, "image": "missing/image:1"})
    w.tick()
    w.tick()
    assert w.status.error.startswith("spec.image: ") and len(w.deploys) == 1
    assert {c.type: c for c in w.status.conditions}["Degraded"].reason == "ImageError"


def test_health_rollback_when_an_upgrade_is_not_stable_in_time():
    w = World({**BASE, "health": {"rollback": True, "rollbackTimeout": "2m", "stableAfter": "1m"}})
    w.running()
    w.job()["age"] = 120
    w.tick(61)
    w.edit(config={"x": "1"})
    w.tick()
    w.complete_savepoints()
    w.run_until(lambda: len(w.deploys) == 2)
    w.run_until(lambda: w.status.job_status.state == "RUNNING")
    for _ in range(3):
        w.job()["restarts"] += 1  # it restarts and never holds its start long enough
        w.job()["age"] = 0
        w.tick(50)
    w.complete_savepoints()
    w.run_until(lambda: len(w.deploys) == 3)
    assert w.deploys[2].spec.get("config", {}) == {}
    w.run_until(lambda: lifecycle(w) == "ROLLED_BACK")


@pytest.mark.parametrize("error, blamed", [
    ("could not start Spark with master k8s://https://kubernetes.default.svc: Pod \"j-exec-1\" is invalid: "
     "spec.containers[0].volumeMounts[2].mountPath: Invalid value: \"/tmp\": must be unique", "spark"),
    ("the job needs 4 slots (parallelism 4), but only 1 of the 4 executors requested registered", "spec.executor"),
    ("not enough slots: the job needs 3 slots, the sum over its 2 slot sharing groups of each one's largest "
     "parallelism: 2 for 'default' ('Source: clicks' at parallelism 2) + 1 for 'sink' ('Sink: files' at "
     "parallelism 1), but only 1 of the 2 executors requested registered", "spec.executor"),
    ("no such job file: /jobs/x.py", "spec.job.file"),
    ("ZeroDivisionError: division by zero", "spec.job"),
])
def test_a_driver_that_never_ran_is_blamed_on_what_failed(error, blamed):
    """Spark's own start-up failing (the cluster's side) is not the job's fault: it is not blamed on spec.job."""
    st = StreamJobStatus()
    st.deployment.number = 1
    pod = PodObservation(name="j-driver-1", phase="Failed", exit_code=1, final_state="FAILED", final_error=error)
    field_, message = R.startup_failure(st, Observation(now=T0, pod=pod))
    assert field_ == blamed and message == f"the job did not start: {error}"


def test_the_observer_reads_the_latest_rescale_of_the_job_manager():
    from streamjob.operator.observer import job_observation

    doc = {"state": "RUNNING", "id": "j", "parallelism": 3,
           "rescale": {"id": "r1", "status": "COMPLETED", "parallelism": 3, "checkpoint_id": 7, "error": None}}
    assert job_observation(doc).rescale == RescaleObservation("r1", "COMPLETED", 3, 7, None)
    assert job_observation({"state": "RUNNING", "rescale": None}).rescale is None
    assert job_observation({"state": "RUNNING"}).rescale is None  # a job manager of an older version
