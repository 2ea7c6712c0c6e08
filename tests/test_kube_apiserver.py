"""The in-process Kubernetes API server (tests/kube/apiserver.py) with the kubernetes client and kopf.

Run alone: `pytest tests/test_kube_apiserver.py -p no:kmock` (kmock's pytest plugin imports
pytest_asyncio, which is not installed; we do not use that plugin).
"""

from __future__ import annotations

import json
import logging
import socket
import subprocess
import textwrap
import threading
import time

import kopf
import kubernetes
import pytest
from kubernetes.client.rest import ApiException

from kube.apiserver import KOPF_PEERING_CRDS, STREAMJOBS, KubeAPI, kube_api, operator_settings, run_operator, \
    spawn_operator, wait_for

assert kube_api  # the fixture, imported for pytest

GROUP, VERSION, PLURAL = "streamjob.io", "v1alpha1", "streamjobs"


def streamjob(name: str, parallelism: int = 1, **meta) -> dict:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "StreamJob", "metadata": {"name": name, **meta},
            "spec": {"parallelism": parallelism, "job": {"module": "jobs.counting"}}}


def status_of(api: KubeAPI, name: str, namespace: str = "default") -> dict:
    return (api.objects.get("sj", namespace, name) or {}).get("status", {})


# -- (a) the kubernetes client ------------------------------------------------------------------
def test_kubernetes_client_crud_and_conflicts(kube_api):
    core = kubernetes.client.CoreV1Api(kube_api.client())
    created = core.create_namespaced_config_map("default", {"metadata": {"name": "cm", "labels": {"app": "a"}},
                                                            "data": {"k": "v"}})
    assert created.metadata.uid and created.metadata.creation_timestamp
    rv1 = int(created.metadata.resource_version)

    fetched = core.read_namespaced_config_map("cm", "default")
    assert fetched.data == {"k": "v"} and fetched.metadata.resource_version == str(rv1)

    # Strategic merge (the client's default for built-ins) is a merge-patch here: null deletes.
    patched = core.patch_namespaced_config_map("cm", "default", {"data": {"k": None, "j": "w"}})
    assert patched.data == {"j": "w"} and int(patched.metadata.resource_version) > rv1

    # A replace with the stale resourceVersion of `fetched` is a conflict; with the fresh one, fine.
    fetched.data = {"x": "1"}
    with pytest.raises(ApiException) as err:
        core.replace_namespaced_config_map("cm", "default", fetched)
    assert err.value.status == 409 and '"reason": "Conflict"' in err.value.body
    patched.data = {"x": "1"}
    replaced = core.replace_namespaced_config_map("cm", "default", patched)
    assert replaced.data == {"x": "1"}

    # JSON patch, with a failing `test` op (as kopf sends): 422, and nothing changes.
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_config_map("cm", "default", [
            {"op": "test", "path": "/metadata/resourceVersion", "value": "1"},
            {"op": "add", "path": "/data/y", "value": "2"}])
    assert err.value.status == 422
    core.patch_namespaced_config_map("cm", "default", [{"op": "add", "path": "/data/y", "value": "2"}])
    assert kube_api.objects.get("configmaps", "default", "cm")["data"] == {"x": "1", "y": "2"}

    with pytest.raises(ApiException) as err:
        core.create_namespaced_config_map("default", {"metadata": {"name": "cm"}})
    assert err.value.status == 409 and '"reason": "AlreadyExists"' in err.value.body

    core.create_namespaced_config_map("default", {"metadata": {"generateName": "cm-", "labels": {"app": "b"}}})
    assert [c.metadata.name for c in core.list_namespaced_config_map("default", label_selector="app=a").items] == ["cm"]
    assert len(core.list_namespaced_config_map("default", label_selector="app in (a,b)").items) == 2
    assert len(core.list_namespaced_config_map("default", label_selector="app,app!=a").items) == 1

    core.delete_namespaced_config_map("cm", "default")
    with pytest.raises(ApiException) as err:
        core.read_namespaced_config_map("cm", "default")
    assert err.value.status == 404


def test_custom_resource_status_generation_and_scale(kube_api):
    co = kubernetes.client.CustomObjectsApi(kube_api.client())
    args = (GROUP, VERSION, "default", PLURAL)
    body = dict(streamjob("j"), status={"ignored": True})
    created = co.create_namespaced_custom_object(*args, body)
    assert "status" not in created and created["metadata"]["generation"] == 1  # POST drops .status

    # The main resource ignores .status; .../status changes only .status; generation follows .spec.
    co.patch_namespaced_custom_object(*args, "j", {"status": {"x": 1}, "metadata": {"labels": {"a": "b"}}})
    after_status = co.patch_namespaced_custom_object_status(*args, "j", {"status": {"x": 2},
                                                                         "spec": {"parallelism": 9}})
    assert after_status["status"] == {"x": 2} and after_status["spec"]["parallelism"] == 1
    assert after_status["metadata"]["generation"] == 1 and after_status["metadata"]["labels"] == {"a": "b"}
    after_spec = co.patch_namespaced_custom_object(*args, "j", {"spec": {"parallelism": 2}})
    assert after_spec["metadata"]["generation"] == 2 and after_spec["status"] == {"x": 2}

    # Scale subresource <-> .spec.parallelism / .status.parallelism / .status.selector.
    co.patch_namespaced_custom_object_status(*args, "j", {"status": {"parallelism": 2, "selector": "sj=j"}})
    scale = co.get_namespaced_custom_object_scale(*args, "j")
    assert scale["kind"] == "Scale" and scale["spec"] == {"replicas": 2}
    assert scale["status"] == {"replicas": 2, "selector": "sj=j"}
    co.patch_namespaced_custom_object_scale(*args, "j", {"spec": {"replicas": 4}})
    assert kube_api.objects.get("sj", "default", "j")["spec"]["parallelism"] == 4
    scale["spec"]["replicas"] = 5  # stale resourceVersion: conflict
    with pytest.raises(ApiException) as err:
        co.replace_namespaced_custom_object_scale(*args, "j", scale)
    assert err.value.status == 409
    scale = co.get_namespaced_custom_object_scale(*args, "j")
    scale["spec"]["replicas"] = 5
    assert co.replace_namespaced_custom_object_scale(*args, "j", scale)["spec"]["replicas"] == 5

    # A replace (PUT) with a stale resourceVersion is refused; the current one is accepted.
    stale = dict(created, spec={"parallelism": 7})
    with pytest.raises(ApiException) as err:
        co.replace_namespaced_custom_object(*args, "j", stale)
    assert err.value.status == 409
    current = co.get_namespaced_custom_object(*args, "j")
    current["spec"]["parallelism"] = 7
    assert co.replace_namespaced_custom_object(*args, "j", current)["spec"]["parallelism"] == 7

    # Discovery shows the CRD's resource with its subresources (this is how kopf finds them).
    resources = kubernetes.client.CustomObjectsApi(kube_api.client()).get_api_resources(GROUP, VERSION).resources
    assert {r.name for r in resources} == {"streamjobs", "streamjobs/status", "streamjobs/scale"}
    assert next(r for r in resources if r.name == "streamjobs").short_names == ["sj"]


def test_builtin_leases_events_and_namespaces(kube_api):
    client = kube_api.client()
    leases = kubernetes.client.CoordinationV1Api(client)
    lease = leases.create_namespaced_lease("default", {"metadata": {"name": "leader"},
                                                       "spec": {"holderIdentity": "a", "leaseDurationSeconds": 5}})
    lease.spec.holder_identity = "b"
    leases.replace_namespaced_lease("leader", "default", lease)  # wins the lease
    lease.spec.holder_identity = "c"
    with pytest.raises(ApiException) as err:  # c read the lease before b took it: conflict
        leases.replace_namespaced_lease("leader", "default", lease)
    assert err.value.status == 409
    assert leases.read_namespaced_lease("leader", "default").spec.holder_identity == "b"

    events = kubernetes.client.EventsV1Api(client)
    events.create_namespaced_event("default", {"metadata": {"generateName": "ev-"}, "reason": "Started",
                                               "eventTime": "2026-01-01T00:00:00.000000Z", "action": "Start",
                                               "reportingController": "test", "reportingInstance": "t"})
    assert [e["reason"] for e in kube_api.objects.list("events.k8s.io/v1/events", "default")] == ["Started"]
    assert kube_api.objects.list("v1/events") == []  # a different resource than core v1 events

    core = kubernetes.client.CoreV1Api(client)
    assert {ns.metadata.name for ns in core.list_namespace().items} == {"default", "kube-system"}
    core.create_namespace({"metadata": {"name": "gone"}})
    core.create_namespaced_secret("gone", {"metadata": {"name": "s"}, "stringData": {"k": "v"}})
    core.delete_namespace("gone")  # takes its objects along
    assert kube_api.objects.get("secrets", "gone", "s") is None


def test_watch_resumes_from_a_resource_version(kube_api):
    core = kubernetes.client.CoreV1Api(kube_api.client())
    core.create_namespaced_config_map("default", {"metadata": {"name": "before"}})
    listed = core.list_namespaced_config_map("default")
    core.create_namespaced_config_map("default", {"metadata": {"name": "after", "labels": {"w": "1"}}})
    core.delete_namespaced_config_map("before", "default")

    started = time.monotonic()
    events = [(e["type"], e["object"].metadata.name) for e in kubernetes.watch.Watch().stream(
        core.list_namespaced_config_map, "default", resource_version=listed.metadata.resource_version,
        timeout_seconds=1)]
    assert events == [("ADDED", "after"), ("DELETED", "before")]
    assert time.monotonic() - started < 3  # the server ended the stream at timeoutSeconds

    selected = [(e["type"], e["object"].metadata.name) for e in kubernetes.watch.Watch().stream(
        core.list_namespaced_config_map, "default", label_selector="w=1", timeout_seconds=1)]
    assert selected == [("ADDED", "after")]  # no resourceVersion: the current objects first


def test_finalizers_and_owner_garbage_collection(kube_api):
    objects = kube_api.objects
    owner = objects.create("sj", streamjob("owner", finalizers=["test/hold"]), namespace="default")
    ref = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "StreamJob", "name": "owner", "uid": owner["metadata"]["uid"]}
    objects.create("configmaps", {"metadata": {"name": "owned", "ownerReferences": [ref]}}, namespace="default")
    objects.create("pods", {"metadata": {"name": "owned-held", "ownerReferences": [ref], "finalizers": ["test/hold"]},
                            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}, namespace="default")
    objects.create("secrets", {"metadata": {"name": "unrelated"}}, namespace="default")

    deleting = objects.delete("sj", "default", "owner")
    assert deleting["metadata"]["deletionTimestamp"]  # held by its finalizer
    assert objects.get("configmaps", "default", "owned")  # dependents stay while the owner exists

    objects.patch("sj", "default", "owner", [{"op": "remove", "path": "/metadata/finalizers"}],
                  content_type="application/json-patch+json")
    assert objects.get("sj", "default", "owner") is None
    assert objects.get("configmaps", "default", "owned") is None  # cascaded
    held = objects.get("pods", "default", "owned-held")  # cascaded too, but waits for its finalizer
    assert held["metadata"]["deletionTimestamp"]
    assert objects.get("secrets", "default", "unrelated")
    assert [v is None for v in objects.history("configmaps", "default", "owned")] == [False, True]

    # Orphan propagation keeps the dependents.
    owner2 = objects.create("sj", streamjob("owner2"), namespace="default")
    objects.create("configmaps", {"metadata": {"name": "orphan", "ownerReferences": [
        dict(ref, name="owner2", uid=owner2["metadata"]["uid"])]}}, namespace="default")
    objects.delete("sj", "default", "owner2", propagationPolicy="Orphan")
    assert objects.get("configmaps", "default", "orphan")


def test_injected_failures_leave_the_state_alone(kube_api):
    core = kubernetes.client.CoreV1Api(kube_api.client())
    event = {"metadata": {"generateName": "e-"}, "involvedObject": {"kind": "Pod", "name": "p"}, "reason": "R"}
    rule = kube_api.fail_next(403, count=2, method="create", resource="events", namespace="terminating",
                              message="unable to create new content in namespace terminating "
                                      "because it is being terminated")
    for _ in range(2):
        with pytest.raises(ApiException) as err:
            core.create_namespaced_event("terminating", event)
        assert err.value.status == 403 and "being terminated" in err.value.body
    assert rule.remaining == 0 and len(rule.requests) == 2
    assert core.create_namespaced_event("other", event)  # other namespaces were never affected
    assert core.create_namespaced_event("terminating", event)  # the rule is used up
    assert len(kube_api.objects.list("events")) == 2

    kube_api.objects.create("configmaps", {"metadata": {"name": "cm"}, "data": {"a": "1"}}, namespace="default")
    kube_api.fail_next(500, method="patch", resource="v1/configmaps", name="cm")
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_config_map("cm", "default", {"data": {"a": "2"}})
    assert err.value.status == 500
    assert kube_api.objects.get("configmaps", "default", "cm")["data"] == {"a": "1"}


# -- (b) kopf against it ------------------------------------------------------------------------
def test_kopf_operator_create_field_annotation_delete(kube_api):
    registry = kopf.OperatorRegistry()
    calls: list[tuple] = []

    @kopf.on.create(GROUP, VERSION, PLURAL, registry=registry)
    def created(name, namespace, body, patch, **_):
        calls.append(("create", name))
        # Handler code can use the kubernetes client: $KUBECONFIG points at the test server.
        configmap = {"metadata": {"name": f"{name}-config"}, "data": {"parallelism": "1"}}
        kopf.adopt(configmap, owner=body)
        core = kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config())
        core.create_namespaced_config_map(namespace, configmap)
        patch.status["lifecycleState"] = "created"

    @kopf.on.field(GROUP, VERSION, PLURAL, field="spec.parallelism", registry=registry)
    def rescaled(old, new, patch, **_):
        calls.append(("parallelism", old, new))
        patch.status["parallelism"] = new

    @kopf.on.field(GROUP, VERSION, PLURAL, registry=registry,
                   field=("metadata", "annotations", "streamjob.io/restart"))  # a tuple: the key has dots
    def restart_requested(old, new, patch, **_):
        calls.append(("restart", old, new))
        if new:
            patch.status["restartNonce"] = new

    @kopf.on.delete(GROUP, VERSION, PLURAL, registry=registry)
    def deleted(name, **_):
        calls.append(("delete", name))

    settings = operator_settings()
    settings.watching.server_timeout = 1  # the server ends kopf's watches every second
    # The first status write fails with a 500 (kopf retries it): failures work with kopf too.
    failure = kube_api.fail_next(500, method="patch", resource=STREAMJOBS, subresource="status")
    with run_operator(kube_api, registry=registry, settings=settings):
        kube_api.objects.create("sj", streamjob("j1"), namespace="default")
        wait_for(lambda: status_of(kube_api, "j1").get("lifecycleState") == "created")
        assert failure.remaining == 0
        assert kube_api.objects.get("configmaps", "default", "j1-config")
        # Status was written through the status subresource, and did not bump the generation.
        assert kube_api.requests("PATCH", "sj", name="j1", subresource="status")
        assert kube_api.objects.get("sj", "default", "j1")["metadata"]["generation"] == 1
        finalizers = kube_api.objects.get("sj", "default", "j1")["metadata"]["finalizers"]
        assert "kopf.zalando.org/KopfFinalizerMarker" in finalizers

        # kopf resumed its watch from the last resourceVersion it saw, and misses nothing after it.
        wait_for(lambda: len(kube_api.requests("GET", "sj", watch=True)) >= 2)
        assert kube_api.requests("GET", "sj", watch=True)[-1].params.get("resourceVersion")
        kube_api.objects.patch("sj", "default", "j1", {"spec": {"parallelism": 3}})
        wait_for(lambda: status_of(kube_api, "j1").get("parallelism") == 3)

        kube_api.objects.patch("sj", "default", "j1", {"metadata": {"annotations": {"streamjob.io/restart": "n1"}}})
        wait_for(lambda: status_of(kube_api, "j1").get("restartNonce") == "n1")

        kube_api.objects.delete("sj", "default", "j1")
        wait_for(lambda: kube_api.objects.get("sj", "default", "j1") is None)
        assert kube_api.objects.get("configmaps", "default", "j1-config") is None  # garbage-collected

    # on.field handlers also run at creation when the field has a value (old=None).
    assert calls == [("create", "j1"), ("parallelism", None, 1), ("parallelism", 1, 3),
                     ("restart", None, "n1"), ("delete", "j1")]


def _peering_setup(api: KubeAPI, name: str = "test") -> None:
    for crd in KOPF_PEERING_CRDS:
        api.apply_crd(crd)
    api.objects.create("kopfpeerings", {"metadata": {"name": name}}, namespace="default")


def _peers(api: KubeAPI) -> dict:
    return (api.objects.get("kopfpeerings", "default", "test") or {}).get("status", {})


def _logged(caplog, thread: str, text: str) -> bool:
    return any(r.threadName == thread and text in r.getMessage() for r in list(caplog.records))


def _handled_by(registry: kopf.OperatorRegistry, handled: list) -> None:
    @kopf.on.create(GROUP, VERSION, PLURAL, registry=registry)
    def created(name, memo, patch, **_):
        handled.append((memo.who, name))
        patch.status["handledBy"] = memo.who


def test_kopf_peering_standby_takes_over_when_the_active_operator_stops(kube_api, caplog):
    caplog.set_level(logging.DEBUG, logger="kopf")  # "Pausing the watch-stream" is a debug message
    _peering_setup(kube_api)
    registry, handled = kopf.OperatorRegistry(), []
    _handled_by(registry, handled)

    def settings():
        s = operator_settings()
        s.peering.lifetime = 3  # keep-alives every second
        return s

    common = dict(registry=registry, namespaces=["default"], standalone=False, peering="test")
    with run_operator(kube_api, settings=settings(), priority=100, identity="op-a", memo=kopf.Memo(who="a"),
                      **common) as a:
        wait_for(lambda: "op-a" in _peers(kube_api))
        with run_operator(kube_api, settings=settings(), priority=50, identity="op-b", memo=kopf.Memo(who="b"),
                          **common):
            wait_for(lambda: "op-b" in _peers(kube_api))
            wait_for(lambda: _logged(caplog, "kopf-op-b", "Pausing the watch-stream for streamjobs"))

            kube_api.objects.create("sj", streamjob("j1"), namespace="default")
            wait_for(lambda: status_of(kube_api, "j1").get("handledBy") == "a")

            a.stop()  # graceful: A removes itself from the peering object on exit
            assert "op-a" not in _peers(kube_api)
            wait_for(lambda: _logged(caplog, "kopf-op-b", "Resuming operations"))
            kube_api.objects.create("sj", streamjob("j2"), namespace="default")
            wait_for(lambda: status_of(kube_api, "j2").get("handledBy") == "b")
    assert handled == [("a", "j1"), ("b", "j2")]


PEER_MODULE = """
    import logging
    import kopf

    @kopf.on.startup()
    def configure(settings, **_):
        settings.peering.lifetime = 3
        settings.watching.server_timeout = 10
        settings.posting.level = logging.WARNING

    @kopf.on.create("streamjob.io", "v1alpha1", "streamjobs")
    def created(patch, **_):
        patch.status["handledBy"] = "subprocess"
"""


def test_kopf_peering_standby_takes_over_when_the_active_operator_is_killed(kube_api, caplog, tmp_path):
    caplog.set_level(logging.INFO, logger="kopf")
    _peering_setup(kube_api)
    registry, handled = kopf.OperatorRegistry(), []
    _handled_by(registry, handled)
    settings = operator_settings()
    settings.peering.lifetime = 3
    (tmp_path / "peer.py").write_text(textwrap.dedent(PEER_MODULE))

    with run_operator(kube_api, registry=registry, settings=settings, namespaces=["default"], standalone=False,
                      peering="test", priority=50, identity="op-b", memo=kopf.Memo(who="b")):
        wait_for(lambda: "op-b" in _peers(kube_api))
        with spawn_operator(kube_api, tmp_path / "peer.py", "--namespace=default", "--peering=test",
                            "--priority=100") as proc:
            wait_for(lambda: len(_peers(kube_api)) == 2, timeout=20, message="the subprocess operator to join")
            wait_for(lambda: _logged(caplog, "kopf-op-b", "Pausing operations"))
            kube_api.objects.create("sj", streamjob("j1"), namespace="default")
            wait_for(lambda: status_of(kube_api, "j1").get("handledBy") == "subprocess",
                     message=f"the subprocess to handle j1; its log: {proc.log_path}")

            proc.kill()  # SIGKILL: no goodbye in the peering object; B waits for its lifetime to pass
            proc.wait()
            killed_at = time.monotonic()
            wait_for(lambda: _logged(caplog, "kopf-op-b", "Resuming operations"), timeout=10)
            assert time.monotonic() - killed_at < 6
            kube_api.objects.create("sj", streamjob("j2"), namespace="default")
            wait_for(lambda: status_of(kube_api, "j2").get("handledBy") == "b")
    assert handled == [("b", "j2")]
    assert list(_peers(kube_api)) == []  # the dead peer was cleaned up, B said goodbye


# -- the fake kubelet ---------------------------------------------------------------------------
POD_SCRIPT = """
import os, sys
# The kubelet rewrote the mountPath and the terminationMessagePath here and in the mounted file.
conf = dict(line.split("=", 1) for line in open("/etc/job/conf.properties").read().splitlines())
assert conf["termination"] == os.environ["STREAMJOB_TERMINATION_LOG"] and os.path.exists(conf["termination"])
open(conf["termination"], "w").write("done: " + os.environ["POD_NAME"])
print(os.environ["POD_IP"], os.environ["POD_NAMESPACE"], os.environ["PASSWORD"], os.environ["MODE"], conf["a"],
      flush=True)
sys.exit(int(os.environ.get("EXIT", "0")))
"""


def _pod(name: str, *command: str, env: list | None = None, **spec) -> dict:
    container = {"name": "main", "image": "streamjob:test", "command": list(command), "env": env or [],
                 "volumeMounts": [{"name": "conf", "mountPath": "/etc/job"}]}
    return {"metadata": {"name": name}, "spec": {"restartPolicy": "Never", "containers": [container],
                                                 "volumes": [{"name": "conf", "configMap": {"name": "job-conf"}}],
                                                 **spec}}


def test_fake_kubelet_runs_pods_as_processes(kube_api):
    from kube.kubelet import FakeKubelet

    objects = kube_api.objects
    objects.create("configmaps", {"metadata": {"name": "job-conf"}, "data": {
        "conf.properties": "a=1\ntermination=/dev/termination-log", "mode": "x"}}, namespace="default")
    objects.create("secrets", {"metadata": {"name": "creds"}, "data": {"password": "c2VjcmV0"}}, namespace="default")
    env = [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
           {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
           {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
           {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "password"}}},
           {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "job-conf", "key": "mode"}}}]

    def phase(name):
        return (objects.get("pods", "default", name) or {}).get("status", {}).get("phase")

    with FakeKubelet(kube_api) as kubelet:
        objects.create("pods", _pod("ok", "python", "-c", POD_SCRIPT, env=env), namespace="default")
        objects.create("pods", _pod("fails", "python", "-c", POD_SCRIPT, env=[*env, {"name": "EXIT", "value": "3"}]),
                       namespace="default")
        objects.create("pods", _pod("sleeper", "python", "-c", "import time; time.sleep(60)",
                                    terminationGracePeriodSeconds=1), namespace="default")
        objects.create("pods", _pod("lost", "python", "-c", "import time; time.sleep(60)"), namespace="default")

        wait_for(lambda: phase("ok") == "Succeeded" and phase("fails") == "Failed")
        ok = objects.get("pods", "default", "ok")["status"]
        ips = {objects.get("pods", "default", n)["status"]["podIP"] for n in ("ok", "fails", "sleeper", "lost")}
        assert len(ips) == 4 and all(ip.startswith("127.") for ip in ips)  # a loopback address of its own
        assert ok["containerStatuses"][0]["state"]["terminated"]["message"] == "done: ok"
        assert kubelet.logs("default", "ok") == f"{ok['podIP']} default secret x 1\n"
        failed = objects.get("pods", "default", "fails")["status"]["containerStatuses"][0]["state"]["terminated"]
        assert (failed["exitCode"], failed["reason"]) == (3, "Error")

        wait_for(lambda: phase("sleeper") == "Running" and phase("lost") == "Running")
        sleeper_pid = kubelet.pid("default", "sleeper")
        objects.delete("pods", "default", "sleeper")
        wait_for(lambda: subprocess.run(["kill", "-0", str(sleeper_pid)], capture_output=True).returncode != 0,
                 message="the deleted pod's process to end")

        kubelet.lose("default", "lost")
        lost = objects.get("pods", "default", "lost")["status"]
        assert (lost["phase"], lost["reason"]) == ("Failed", "NodeLost")
        assert lost["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 137


HANDLERS_MODULE = """
    import kopf

    @kopf.on.create("streamjob.io", "v1alpha1", "streamjobs")
    def created(patch, **_):
        patch.status["lifecycleState"] = "created"
"""


def test_run_operator_from_a_module(kube_api, tmp_path, monkeypatch):
    """The recipe for the operator's tests: run_operator(kube_api, module="streamjob.operator.handlers")."""
    (tmp_path / "sj_test_handlers.py").write_text(textwrap.dedent(HANDLERS_MODULE))
    monkeypatch.syspath_prepend(tmp_path)
    with run_operator(kube_api, module="sj_test_handlers") as op:
        kube_api.objects.create("sj", streamjob("j1"), namespace="default")
        wait_for(lambda: status_of(kube_api, "j1").get("lifecycleState") == "created")
    assert op.registry is not kopf.get_default_registry()  # the module's handlers have their own registry
    assert kube_api.requests("PATCH", "sj", by=op.identity)


# -- (c) clean start and stop -------------------------------------------------------------------
def test_server_and_operator_stop_cleanly():
    threads_before = set(threading.enumerate())
    api = KubeAPI().start()
    port = int(api.url.rsplit(":", 1)[1])
    watch_done = threading.Event()

    def watch_forever():  # a client watch without a timeout: the server must end it on stop
        core = kubernetes.client.CoreV1Api(api.client())
        try:
            for _ in kubernetes.watch.Watch().stream(core.list_namespaced_pod, "default"):
                pass
        except Exception:  # the client's reconnection finds the port closed
            pass
        finally:
            watch_done.set()

    watcher = threading.Thread(target=watch_forever, daemon=True)
    watcher.start()
    with run_operator(api, registry=kopf.OperatorRegistry()):
        pass
    started = time.monotonic()
    api.stop()
    assert time.monotonic() - started < 5
    assert watch_done.wait(5)
    watcher.join(5)
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port), timeout=1):
        pass
    assert set(threading.enumerate()) - threads_before == set()


def test_pods_are_checked_with_the_api_servers_rules(kube_api):
    """What a real API server refuses and no schema says: here, the mount Spark adds at /tmp when the
    pod template mounts its own volume there (the defect a real cluster showed)."""
    pod = {"metadata": {"name": "dup"}, "spec": {
        "containers": [{"name": "executor", "image": "x", "volumeMounts": [
            {"name": "tmp", "mountPath": "/tmp"}, {"name": "spark-local-dir-1", "mountPath": "/tmp"},
            {"name": "nowhere", "mountPath": "/data"}]}],
        "volumes": [{"name": "tmp", "emptyDir": {}}, {"name": "spark-local-dir-1", "emptyDir": {}}]}}
    with pytest.raises(kubernetes.client.ApiException) as e:
        kubernetes.client.CoreV1Api(kube_api.client()).create_namespaced_pod("default", pod)
    assert e.value.status == 422
    message = json.loads(e.value.body)["message"]
    assert message == ('Pod "dup" is invalid: [spec.containers[0].volumeMounts[1].mountPath: Invalid value: "/tmp": '
                       'must be unique, spec.containers[0].volumeMounts[2].name: Not found: "nowhere"]')
    assert kube_api.objects.get("pods", "default", "dup") is None
