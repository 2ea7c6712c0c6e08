"""A StreamJob's life on a cluster, as a user drives it (each API call is what the kubectl command
in its comment sends), checked from outside: the StreamJob's status, the objects it owns, the
savepoints on S3, and the job's committed output on S3 compared row for row with the one
correct result (e2e/jobs/counter.py: any lost or repeated row, or lost state, changes it).

Every test runs in mode local (the job in the driver pod) and mode kubernetes (Spark executor
pods); see conftest.py for how a mode is left out.
"""

from __future__ import annotations

import uuid

import pytest

from harness import SAVEPOINT_ANNOTATION, consistent_prefix, exactly_once, phase, streamjob, wait_for

# Waits are generous for a real cluster (image pulls, pod scheduling) and scale with E2E_TIMEOUT_SCALE.
START, STEP, FINISH = 240, 180, 300
pytestmark = pytest.mark.timeout(1200)


@pytest.fixture
def t(settings):
    return lambda seconds: seconds * settings.timeout_scale


def job_state(cluster, name: str) -> str | None:
    return not_failed(cluster, name).get("jobStatus", {}).get("state")


def not_failed(cluster, name: str) -> dict:
    """The status; a FAILED StreamJob ends the wait at once (it will not recover by itself)."""
    st = cluster.status(name)
    if st.get("lifecycleState") == "FAILED":
        raise AssertionError(f"{name} FAILED: {st.get('error')}\n{cluster.describe(name)}")
    return st


def running_with_checkpoint(cluster, name: str, min_id: int = 1) -> bool:
    st = not_failed(cluster, name)
    return (st.get("jobStatus", {}).get("state") == "RUNNING"
            and (st.get("lastCheckpoint") or {}).get("id", 0) >= min_id)


def deployment(cluster, name: str) -> dict:
    return not_failed(cluster, name).get("deployment") or {}


def wait_running(cluster, name, timeout, min_id: int = 1) -> dict:
    wait_for(lambda: running_with_checkpoint(cluster, name, min_id), timeout,
             lambda: f"{name} to run and complete a checkpoint\n{cluster.describe(name)}")
    return cluster.status(name)


def wait_finished(cluster, name, timeout) -> dict:
    wait_for(lambda: job_state(cluster, name) == "FINISHED", timeout,
             lambda: f"{name}'s input to end (job FINISHED)\n{cluster.describe(name)}")
    return cluster.status(name)


def wait_deployment(cluster, name, number, timeout) -> dict:
    wait_for(lambda: deployment(cluster, name).get("number", 0) >= number, timeout,
             lambda: f"deployment {number} of {name}\n{cluster.describe(name)}")
    return cluster.status(name)


def test_apply_savepoint_and_rescale_keep_state_and_output_exactly_once(cluster, store, jobs, settings, mode, t):
    """kubectl apply -> RUNNING with everything it owns; kubectl annotate streamjob.io/savepoint=NONCE
    -> a savepoint on S3 recorded with that nonce; kubectl scale --replicas=3 -> in mode kubernetes a
    rescale in place (a third executor pod, the same driver, no savepoint); in mode local (local[2] has no
    third slot) stop-with-savepoint and a deployment at parallelism 3 restored from it; the output is
    exactly one run's."""
    name = jobs.new("scale", mode)
    rows, rate = 16_000, 800
    cluster.create(streamjob(settings, name, mode, rows, rate))  # kubectl apply -f
    st = wait_running(cluster, name, t(START))
    assert st["parallelism"] == 2 and st["deployment"]["number"] == 1
    assert st["lifecycleState"] in ("DEPLOYED", "STABLE")
    sj = cluster.get(name)
    owned = set(cluster.owned(sj["metadata"]["uid"]))
    expected = {f"Pod/{name}-driver-1", f"Service/{name}", f"ConfigMap/{name}-config", f"Secret/{name}-rest-token"}
    if mode == "kubernetes":
        expected |= {f"ServiceAccount/{name}-driver", f"Role/{name}-driver", f"RoleBinding/{name}-driver"}
        # Spark's Kubernetes backend: ceil(parallelism / executor.cores) = 2 executor pods.
        wait_for(lambda: len([p for p in cluster.pods(name, "executor") if phase(p) == "Running"]) >= 2,
                 t(STEP), lambda: f"2 running executor pods\n{cluster.describe(name)}")
    assert expected <= owned, f"missing: {expected - owned}"

    nonce = f"e2e-{uuid.uuid4().hex[:8]}"
    cluster.annotate(name, SAVEPOINT_ANNOTATION, nonce)  # kubectl annotate sj NAME streamjob.io/savepoint=NONCE
    manual = wait_for(lambda: (sp := cluster.status(name).get("lastSavepoint") or {}).get("nonce") == nonce and sp,
                      t(STEP), lambda: f"the savepoint of nonce {nonce}\n{cluster.describe(name)}")
    assert manual["triggerType"] == "manual"
    assert manual["path"].startswith(f"s3://{settings.s3_bucket}/{name}/savepoints/"), manual
    assert store.is_savepoint(manual["path"]), f"no {manual['path']}/_metadata on S3"
    assert nonce in [h.get("nonce") for h in cluster.status(name).get("savepointHistory", [])]

    cluster.scale(name, 3)  # kubectl scale sj NAME --replicas=3
    assert cluster.get(name)["spec"]["parallelism"] == 3  # the scale subresource is spec.parallelism
    if mode == "kubernetes":
        # In place: the job manager asks Spark for a third executor pod and restarts the job from its next
        # checkpoint at parallelism 3; the same driver, no savepoint.
        wait_for(lambda: "Rescaled" in cluster.reasons(name), t(START),
                 lambda: f"the rescale in place\n{cluster.describe(name)}")
        st = cluster.status(name)
        assert st["parallelism"] == 3 and st["deployment"]["number"] == 1 and st["deployment"]["parallelism"] == 3
        assert st["lastSavepoint"]["path"] == manual["path"]
        assert cluster.pod(f"{name}-driver-1") is not None
        expected_savepoints = 1  # the annotation's
    else:
        # local[2] in the driver pod has no third slot: refused in place, so stop-with-savepoint and a new deployment.
        st = wait_deployment(cluster, name, 2, t(STEP))
        upgrade_sp = st["lastSavepoint"]
        assert upgrade_sp["triggerType"] == "upgrade" and upgrade_sp["path"] != manual["path"]
        assert (st["deployment"]["restoreKind"], st["deployment"]["restorePath"]) == ("savepoint", upgrade_sp["path"])
        assert store.is_savepoint(upgrade_sp["path"])
        wait_for(lambda: cluster.pod(f"{name}-driver-1") is None, t(STEP), "the first driver pod to go")
        expected_savepoints = 2  # the annotation's and the rescale's, each taken once
    wait_for(lambda: cluster.status(name).get("parallelism") == 3 and job_state(cluster, name) in ("RUNNING", "FINISHED"),
             t(START), lambda: f"the job at parallelism 3\n{cluster.describe(name)}")
    assert cluster.get_scale(name)["status"]["replicas"] == 3  # what kubectl get --subresource=scale shows

    wait_finished(cluster, name, t(FINISH))
    problem = exactly_once(store.committed_rows(f"{name}/out/"), rows)
    assert problem is None, problem
    assert len(store.savepoints(f"{name}/savepoints/")) == expected_savepoints, store.savepoints(f"{name}/savepoints/")
    reasons = cluster.reasons(name)
    assert {"SavepointCompleted", "Rescaling"} <= reasons, reasons


def test_deleted_driver_pod_is_redeployed_from_the_latest_checkpoint(cluster, store, jobs, settings, mode, t):
    """kubectl delete pod NAME-driver-1: the operator sees its deployment lost and redeploys from
    the latest checkpoint of the same job (its directory, claimed): status counts the redeploy,
    and the output is still exactly one run's."""
    name = jobs.new("lost", mode)
    rows, rate = 16_000, 800
    cluster.create(streamjob(settings, name, mode, rows, rate))
    st = wait_running(cluster, name, t(START), min_id=2)
    job_id = st["jobStatus"]["jobId"]

    cluster.delete_pod(f"{name}-driver-1")  # kubectl delete pod NAME-driver-1
    st = wait_deployment(cluster, name, 2, t(STEP))
    assert st["redeploys"] >= 1, st
    assert st["deployment"]["restoreKind"] == "checkpoint", st["deployment"]
    assert st["deployment"]["restorePath"] == f"s3://{settings.s3_bucket}/{name}/checkpoints/{job_id}", st["deployment"]
    # Events follow the status write (the status is the write-ahead log; events are posted after acting).
    wait_for(lambda: {"DriverLost", "Redeploying"} <= cluster.reasons(name), t(STEP),
             lambda: f"DriverLost and Redeploying events, got {cluster.reasons(name)}")
    wait_for(lambda: job_state(cluster, name) in ("RUNNING", "FINISHED"), t(START),
             lambda: f"the redeployed job to run\n{cluster.describe(name)}")
    assert cluster.status(name)["jobStatus"]["jobId"] == job_id  # the same job, continued

    wait_finished(cluster, name, t(FINISH))
    problem = exactly_once(store.committed_rows(f"{name}/out/"), rows)
    assert problem is None, problem


def test_suspend_resume_and_upgrade_restore_savepoints(cluster, store, jobs, settings, mode, t):
    """spec.state suspended -> a savepoint, then nothing runs; running -> restored from it. Then an
    upgrade (new job args and config) with upgradeMode savepoint -> stop-with-savepoint and the new
    spec restored from it. Output exactly once across all three deployments."""
    name = jobs.new("susp", mode)
    rows, rate = 24_000, 600
    cluster.create(streamjob(settings, name, mode, rows, rate))
    wait_running(cluster, name, t(START))

    cluster.patch(name, {"spec": {"state": "suspended"}})  # kubectl patch sj NAME --type merge -p ...
    wait_for(lambda: cluster.status(name).get("lifecycleState") == "SUSPENDED", t(STEP),
             lambda: f"SUSPENDED\n{cluster.describe(name)}")
    suspended = cluster.status(name)["lastSavepoint"]
    assert suspended["triggerType"] == "suspend" and store.is_savepoint(suspended["path"]), suspended
    # Nothing runs: the stopped driver may stay as a finished (Succeeded) pod, none is Pending/Running.
    wait_for(lambda: not [p for p in cluster.pods(name) if phase(p) in ("Pending", "Running")], t(STEP),
             lambda: f"no running pods while suspended: {[(p.metadata.name, phase(p)) for p in cluster.pods(name)]}")

    cluster.patch(name, {"spec": {"state": "running"}})
    st = wait_deployment(cluster, name, 2, t(STEP))
    assert (st["deployment"]["restoreKind"], st["deployment"]["restorePath"]) == ("savepoint", suspended["path"])
    wait_running(cluster, name, t(START))

    faster = str(rate * 4)
    cluster.patch(name, {"spec": {"job": {"args": [f"s3://{settings.s3_bucket}/{name}/out", str(rows), faster]},
                                  "config": {"execution.buffer-timeout": "10"}}})
    st = wait_deployment(cluster, name, 3, t(STEP))
    upgrade_sp = st["lastSavepoint"]
    assert upgrade_sp["triggerType"] == "upgrade" and store.is_savepoint(upgrade_sp["path"]), upgrade_sp
    assert (st["deployment"]["restoreKind"], st["deployment"]["restorePath"]) == ("savepoint", upgrade_sp["path"])
    pod = wait_for(lambda: cluster.pod(f"{name}-driver-3"), t(STEP), "the upgraded driver pod")
    assert pod.spec.containers[0].args[-1] == faster, pod.spec.containers[0].args  # it runs the new spec

    wait_finished(cluster, name, t(FINISH))
    problem = exactly_once(store.committed_rows(f"{name}/out/"), rows)
    assert problem is None, problem
    assert len(store.savepoints(f"{name}/savepoints/")) == 2  # the suspension's and the upgrade's


def test_delete_with_savepoint_on_deletion_leaves_a_savepoint_and_nothing_else(cluster, store, jobs, settings, mode, t):
    """kubectl delete sj NAME with savepointOnDeletion: a final savepoint on S3, then the StreamJob
    and every object it owned (pods, Service, ConfigMap, Secret, RBAC; executor pods) are gone.
    What was committed until then is a consistent prefix of the output: nothing twice or lost."""
    name = jobs.new("del", mode)
    rows, rate = 400_000, 500  # never ends during the test
    cluster.create(streamjob(settings, name, mode, rows, rate, savepointOnDeletion=True))
    wait_running(cluster, name, t(START), min_id=2)
    uid = cluster.get(name)["metadata"]["uid"]
    assert cluster.owned(uid)

    cluster.delete(name)  # kubectl delete sj NAME
    wait_for(lambda: cluster.get(name) is None, t(STEP), lambda: f"{name} to be deleted\n{cluster.describe(name)}")
    savepoints = store.savepoints(f"{name}/savepoints/")
    assert len(savepoints) == 1, savepoints  # the deletion's
    # Garbage collection is asynchronous on a real cluster: wait for it.
    wait_for(lambda: not cluster.owned(uid) and not cluster.pods(name), t(STEP),
             lambda: f"everything {name} owned to go: {cluster.owned(uid)}")
    committed = store.committed_rows(f"{name}/out/")
    assert 0 < len(committed) < rows
    problem = consistent_prefix(committed)
    assert problem is None, problem


def test_missing_job_file_is_reported_on_the_field_and_nothing_else_is_lost(cluster, store, jobs, settings, mode, t):
    """A spec the API server cannot refuse: a job file that is not in the image. As a new StreamJob:
    FAILED, the error names spec.job.file. As an upgrade of a running job: stop-with-savepoint,
    the new deployment fails, the operator rolls back to the last spec that ran (restoring the
    savepoint), the error names spec.job.file, and the output is still exactly one run's."""
    missing = f"{settings.jobs_dir}/no-such-job.py"
    bad = jobs.new("nofile", mode)
    name = jobs.new("rollbk", mode)
    rows, rate = 16_000, 600
    cluster.create(streamjob(settings, bad, mode, 100, 100, job={"file": missing}))
    cluster.create(streamjob(settings, name, mode, rows, rate))

    wait_for(lambda: cluster.status(bad).get("lifecycleState") == "FAILED", t(START),
             lambda: f"{bad} FAILED\n{cluster.describe(bad)}")
    error = cluster.status(bad).get("error") or ""
    assert error.startswith("spec.job.file") and missing in error, error
    assert cluster.get(bad)["spec"]["job"]["file"] == missing  # the user's spec is left as it was

    wait_running(cluster, name, t(START))
    cluster.patch(name, {"spec": {"job": {"file": missing}}})
    wait_for(lambda: cluster.status(name).get("lifecycleState") == "ROLLED_BACK", t(START),
             lambda: f"{name} ROLLED_BACK\n{cluster.describe(name)}")
    st = cluster.status(name)
    assert st["error"].startswith("spec.job.file") and missing in st["error"], st["error"]
    upgrade_sp = st["lastSavepoint"]
    assert upgrade_sp["triggerType"] == "upgrade"
    assert (st["deployment"]["restoreKind"], st["deployment"]["restorePath"]) == ("savepoint", upgrade_sp["path"])
    assert st["deployment"]["spec"]["job"]["file"].endswith("/counter.py")  # runs the last spec that ran
    assert cluster.get(name)["spec"]["job"]["file"] == missing

    wait_finished(cluster, name, t(FINISH))
    problem = exactly_once(store.committed_rows(f"{name}/out/"), rows)
    assert problem is None, problem
