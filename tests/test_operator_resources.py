"""The objects a StreamJob owns (operator/resources.py): pure builders, checked offline.

Every manifest is validated against the Kubernetes OpenAPI schema that kubernetes-validate ships
(strict: unknown fields are errors), so a typo in a field name fails here, not in a cluster.
"""

from __future__ import annotations

import json

import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import latest_version

from kube.validation import pod_problems
from pydantic import ValidationError

from streamjob.operator import resources as r
from streamjob.operator.model import RESERVED_MOUNT_PATHS, RESERVED_VOLUME_PREFIXES, StreamJobSpec

K8S_VERSION = latest_version()
NAME, NAMESPACE, UID, TOKEN = "wordcount", "jobs", "0f6b3c1e-7c1a-4a55-9d0e-3b1f8d9c2a11", "s3cr3t-t0ken"
CONF_FILE = "/etc/streamjob/job.conf"


def make_spec(**fields) -> StreamJobSpec:
    base = {"image": "registry.example/wordcount:1.2", "job": {"file": "/app/wordcount.py"}, "parallelism": 2}
    return StreamJobSpec.model_validate({**base, **fields})


def target(n: int = 1, parallelism: int = 2, restore=None, overrides=()) -> r.DeploymentTarget:
    return r.DeploymentTarget(number=n, parallelism=parallelism, restore=restore, overrides=overrides)


def objects(spec: StreamJobSpec, tgt: r.DeploymentTarget | None = None) -> list[dict]:
    return r.owned_objects(NAME, NAMESPACE, UID, spec, tgt or target(), TOKEN)


def by_kind(objs: list[dict]) -> dict[str, dict]:
    return {o["kind"]: o for o in objs}


def pod_of(spec: StreamJobSpec, tgt: r.DeploymentTarget | None = None) -> dict:
    return by_kind(objects(spec, tgt))["Pod"]


def container_of(spec: StreamJobSpec, tgt: r.DeploymentTarget | None = None) -> dict:
    return pod_of(spec, tgt)["spec"]["containers"][0]


def executor_template(spec: StreamJobSpec) -> dict:
    return yaml.safe_load(by_kind(objects(spec))["ConfigMap"]["data"]["executor-pod-template.yaml"])


S3 = {"endpoint": "http://minio.storage:9000", "region": "eu-west-1", "pathStyleAccess": True,
      "accessKeyId": {"name": "minio", "key": "user"}, "secretAccessKey": {"name": "minio", "key": "password"}}

VARIANTS = {
    "minimal": {},
    "kubernetes": {"mode": "kubernetes", "executor": {"cores": 2, "resources": {"cpu": "1500m", "memory": "3Gi"}}},
    "module": {"job": {"module": "jobs.wordcount", "args": ["--window", "5s"]}},
    "s3-checkpointing": {"s3": S3, "checkpointing": {"interval": "30s", "incremental": True},
                         "stateBackend": "rocksdb", "checkpointDir": "s3://ckpt/wc", "savepointDir": "s3://sp/wc",
                         "upgradeMode": "last-state"},
    "everything": {
        "mode": "kubernetes", "s3": S3, "maxParallelism": 256, "allowNonRestoredState": True,
        "checkpointing": {"interval": "1m", "minPause": "500ms"}, "checkpointDir": "s3://ckpt/wc",
        "restartStrategy": {"type": "fixed-delay", "attempts": 5, "delay": "15s"},
        "driver": {"resources": {"cpu": "2", "cpuLimit": "4", "memory": "4Gi"}},
        "sparkConf": {"spark.sql.shuffle.partitions": "4"}, "config": {"execution.batch-size": "1024"},
        "pod": {"labels": {"team": "data", "app.kubernetes.io/name": "mine"}, "annotations": {"a": "b"},
                "env": [{"name": "LOG_LEVEL", "value": "debug"}, {"name": "POD_IP", "value": "1.2.3.4"}],
                "envFrom": [{"configMapRef": {"name": "extra"}}],
                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                "serviceAccountName": "workload-identity", "nodeSelector": {"pool": "stream"},
                "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "stream", "effect": "NoSchedule"}],
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}},
                "securityContext": {"runAsUser": 1000, "runAsNonRoot": True},
                "containerSecurityContext": {"privileged": False},
                "imagePullSecrets": [{"name": "regcred"}]},
    },
}


# -- every manifest is a valid Kubernetes object -----------------------------------------------------
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("restore", [None, ("savepoint", "s3://sp/wc/savepoint-1"), ("checkpoint", "s3://ckpt/wc")])
def test_every_manifest_validates(variant, restore):
    spec = make_spec(**VARIANTS[variant])
    objs = objects(spec, target(n=3, parallelism=4, restore=restore))
    for obj in objs:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        if obj["kind"] == "Pod":
            assert pod_problems(obj) == []  # what no schema says: unique names and mount paths
    if spec.mode == "kubernetes":
        template = executor_template(spec)
        kubernetes_validate.validate(template, K8S_VERSION, strict=True)
        assert pod_problems(template) == []


def test_the_validator_is_not_vacuous():
    pod = pod_of(make_spec())
    pod["spec"]["containers"][0]["comand"] = ["typo"]
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(pod, K8S_VERSION, strict=True)


# -- which objects, in which order, owned by the StreamJob ----------------------------------------------
def test_apply_order_and_names():
    local = [(o["kind"], o["metadata"]["name"]) for o in objects(make_spec())]
    assert local == [("Secret", "wordcount-rest-token"), ("ConfigMap", "wordcount-config"), ("Service", "wordcount"),
                     ("Pod", "wordcount-driver-1")]
    k8s = [(o["kind"], o["metadata"]["name"]) for o in objects(make_spec(mode="kubernetes"), target(n=7))]
    assert k8s == [("ServiceAccount", "wordcount-driver"), ("Role", "wordcount-driver"),
                   ("RoleBinding", "wordcount-driver"), *local[:3], ("Pod", "wordcount-driver-7")]
    assert r.names.driver_pod(NAME, 7) == "wordcount-driver-7"
    assert r.selector(NAME) == "streamjob.io/job=wordcount"


@pytest.mark.parametrize("variant", VARIANTS)
def test_everything_is_owned_namespaced_and_labelled(variant):
    for obj in objects(make_spec(**VARIANTS[variant])):
        meta = obj["metadata"]
        assert meta["namespace"] == NAMESPACE
        assert meta["ownerReferences"] == [{"apiVersion": "streamjob.io/v1alpha1", "kind": "StreamJob",
                                            "name": NAME, "uid": UID, "controller": True,
                                            "blockOwnerDeletion": True}]
        assert meta["labels"]["app.kubernetes.io/name"] == "streamjob"  # ours win over the user's
        assert meta["labels"]["app.kubernetes.io/instance"] == NAME
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "streamjob-operator"
        assert meta["labels"]["streamjob.io/job"] == NAME


def test_driver_pod_labels_and_annotations():
    pod = pod_of(make_spec(**VARIANTS["everything"]), target(n=4))
    assert pod["metadata"]["labels"] == {
        "team": "data", "app.kubernetes.io/name": "streamjob", "app.kubernetes.io/instance": NAME,
        "app.kubernetes.io/managed-by": "streamjob-operator", "streamjob.io/job": NAME,
        "app.kubernetes.io/component": "driver", "streamjob.io/deployment": "4"}
    annotations = pod["metadata"]["annotations"]
    assert annotations["a"] == "b" and len(annotations["streamjob.io/spec-hash"]) == 16


def test_service_selects_the_current_driver_and_names_the_ports():
    objs = by_kind(objects(make_spec(), target(n=5)))
    svc, pod = objs["Service"], objs["Pod"]
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"] is True
    selector = svc["spec"]["selector"]
    assert selector == {"streamjob.io/job": NAME, "app.kubernetes.io/component": "driver",
                        "streamjob.io/deployment": "5"}
    assert selector.items() <= pod["metadata"]["labels"].items()
    assert [(p["name"], p["port"], p["targetPort"]) for p in svc["spec"]["ports"]] == [
        ("rest", 8081, "rest"), ("jobmanager-rpc", 6123, "jobmanager-rpc"), ("spark-driver", 7078, "spark-driver"),
        ("spark-blockmgr", 7079, "spark-blockmgr"), ("queryable-state", 9069, "queryable-state")]
    assert [(p["name"], p["containerPort"]) for p in pod["spec"]["containers"][0]["ports"]] == [
        (p["name"], p["port"]) for p in svc["spec"]["ports"]]


def test_secret_holds_the_given_token():
    secret = by_kind(objects(make_spec()))["Secret"]
    assert secret["type"] == "Opaque" and secret["stringData"] == {"token": TOKEN}
    with pytest.raises(ValueError):
        r.rest_token_secret(r.Owner(NAME, NAMESPACE, UID), "")


def test_rbac_for_spark_on_kubernetes():
    objs = by_kind(objects(make_spec(mode="kubernetes")))
    pods_rule, others_rule = objs["Role"]["rules"]
    assert pods_rule["resources"] == ["pods"] and "deletecollection" in pods_rule["verbs"]
    assert "patch" in pods_rule["verbs"] and "update" not in pods_rule["verbs"]
    assert others_rule["resources"] == ["services", "configmaps", "persistentvolumeclaims"]
    assert "*" not in json.dumps(objs["Role"]["rules"])
    binding = objs["RoleBinding"]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "wordcount-driver"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "wordcount-driver", "namespace": NAMESPACE}]


# -- the driver container -----------------------------------------------------------------------------
ARGS_CASES = {
    "file, local": (make_spec(), target(parallelism=3),
                    ["driver", "run", "/app/wordcount.py", "--parallelism", "3",
                     "--conf-file", CONF_FILE, "--no-progress", "--"]),
    "module with args, kubernetes": (
        make_spec(mode="kubernetes", job={"module": "jobs.wc", "args": ["--in", "s3://x", "--"]}), target(),
        ["driver", "run", "--module", "jobs.wc", "--parallelism", "2", "--master",
         "k8s://https://kubernetes.default.svc", "--conf-file", CONF_FILE, "--no-progress", "--", "--in", "s3://x",
         "--"]),
    "from savepoint, allow non-restored": (
        make_spec(allowNonRestoredState=True), target(parallelism=8, restore=("savepoint", "s3://sp/savepoint-7")),
        ["driver", "run", "/app/wordcount.py", "--parallelism", "8", "--conf-file", CONF_FILE,
         "--from-savepoint", "s3://sp/savepoint-7", "--allow-non-restored-state", "--no-progress", "--"]),
    # The autoscaler rescales in place: mode local reserves the slots it may scale to.
    "local, autoscaled": (
        make_spec(checkpointing={}, upgradeMode="savepoint", savepointDir="s3://sp",
                  autoscaler={"enabled": True, "maxParallelism": 8}), target(),
        ["driver", "run", "/app/wordcount.py", "--parallelism", "2", "--master", "local[8]",
         "--conf-file", CONF_FILE, "--no-progress", "--"]),
    "local, autoscaled up to the key groups": (
        make_spec(checkpointing={}, upgradeMode="savepoint", savepointDir="s3://sp", maxParallelism=16,
                  autoscaler={"enabled": True}), target(),
        ["driver", "run", "/app/wordcount.py", "--parallelism", "2", "--master", "local[16]",
         "--conf-file", CONF_FILE, "--no-progress", "--"]),
    # A redeploy keeps what the autoscaler chose, on top of the user's own overrides (the later pair wins).
    "redeployed, autoscaled": (
        make_spec(checkpointing={}, upgradeMode="savepoint", savepointDir="s3://sp", autoscaler={"enabled": True},
                  config={"pipeline.jobvertex-parallelism-overrides": "sink:1,count:3"}),
        target(restore=r.Restore("checkpoint", "s3://ckpt/wc"), overrides=(("count", 4), ("src", 2))),
        ["driver", "run", "/app/wordcount.py", "--parallelism", "2", "--master", "local[128]",
         "--conf-file", CONF_FILE, "--conf", "pipeline.jobvertex-parallelism-overrides=sink:1,count:3,count:4,src:2",
         "--from-checkpoint", "s3://ckpt/wc", "--conf", "execution.state-recovery.claim-mode=CLAIM", "--no-progress",
         "--"]),
    "from checkpoint": (
        make_spec(), target(restore=r.Restore("checkpoint", "s3://ckpt/wc")),
        ["driver", "run", "/app/wordcount.py", "--parallelism", "2", "--conf-file", CONF_FILE,
         "--from-checkpoint", "s3://ckpt/wc", "--conf", "execution.state-recovery.claim-mode=CLAIM", "--no-progress",
         "--"]),
}


@pytest.mark.parametrize("case", ARGS_CASES)
def test_driver_command_and_args(case):
    spec, tgt, args = ARGS_CASES[case]
    container = container_of(spec, tgt)
    assert container["name"] == "driver"
    assert container["command"] == ["/opt/streamjob/entrypoint.sh"]
    assert container["args"] == args


def test_target_is_checked():
    with pytest.raises(ValueError):
        r.DeploymentTarget(number=0, parallelism=1)
    with pytest.raises(ValueError):
        r.DeploymentTarget(number=1, parallelism=1, restore=("snapshot", "s3://x"))
    assert r.DeploymentTarget(1, 1, ("savepoint", "p")).restore == r.Restore("savepoint", "p")


DOWNWARD = [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}]
IMAGE_ENV = {"name": "STREAMJOB_IMAGE", "value": "registry.example/wordcount:1.2"}
TOKEN_ENV = {"name": "STREAMJOB_REST_TOKEN",
             "valueFrom": {"secretKeyRef": {"name": "wordcount-rest-token", "key": "token"}}}
S3_ENV = [{"name": "AWS_ACCESS_KEY_ID", "valueFrom": {"secretKeyRef": {"name": "minio", "key": "user"}}},
          {"name": "AWS_SECRET_ACCESS_KEY", "valueFrom": {"secretKeyRef": {"name": "minio", "key": "password"}}},
          {"name": "AWS_ENDPOINT_URL_S3", "value": "http://minio.storage:9000"},
          {"name": "AWS_REGION", "value": "eu-west-1"}, {"name": "AWS_DEFAULT_REGION", "value": "eu-west-1"}]

ENV_CASES = {
    "defaults": ({}, [*DOWNWARD, IMAGE_ENV, TOKEN_ENV]),
    "s3 secret refs": ({"s3": S3}, [*DOWNWARD, IMAGE_ENV, TOKEN_ENV, *S3_ENV]),
    "s3 without credentials (IAM role)": ({"s3": {"region": "us-east-1"}},
                                          [*DOWNWARD, IMAGE_ENV, TOKEN_ENV, {"name": "AWS_REGION", "value": "us-east-1"},
                                           {"name": "AWS_DEFAULT_REGION", "value": "us-east-1"}]),
    "user env wins and comes last": (
        {"pod": {"env": [{"name": "STREAMJOB_IMAGE", "value": "other"}, {"name": "X", "value": "$(POD_IP)"}]}},
        [*DOWNWARD, TOKEN_ENV, {"name": "STREAMJOB_IMAGE", "value": "other"}, {"name": "X", "value": "$(POD_IP)"}]),
}


@pytest.mark.parametrize("case", ENV_CASES)
def test_driver_env(case):
    fields, env = ENV_CASES[case]
    assert container_of(make_spec(**fields))["env"] == env


def test_env_from_ports_probe_and_termination_message():
    c = container_of(make_spec(**VARIANTS["everything"]))
    assert c["envFrom"] == [{"configMapRef": {"name": "extra"}}]
    assert c["readinessProbe"]["httpGet"] == {"path": "/metrics", "port": "rest"}
    assert "livenessProbe" not in c
    assert c["terminationMessagePath"] == "/dev/termination-log"
    assert c["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert c["imagePullPolicy"] == "IfNotPresent" and c["image"] == "registry.example/wordcount:1.2"
    assert "envFrom" not in container_of(make_spec())


RESOURCE_CASES = {
    "defaults: no cpu limit": ({}, {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"memory": "2Gi"}}),
    "cpuLimit": ({"driver": {"resources": {"cpu": "500m", "cpuLimit": "2", "memory": "1536Mi"}}},
                 {"requests": {"cpu": "500m", "memory": "1536Mi"}, "limits": {"memory": "1536Mi", "cpu": "2"}}),
}


@pytest.mark.parametrize("case", RESOURCE_CASES)
def test_driver_resources(case):
    fields, resources = RESOURCE_CASES[case]
    assert container_of(make_spec(**fields))["resources"] == resources


def test_volumes_and_mounts():
    pod = pod_of(make_spec(**VARIANTS["everything"]))
    assert pod["spec"]["volumes"] == [
        {"name": "streamjob-config", "configMap": {"name": "wordcount-config"}},
        {"name": "streamjob-tmp", "emptyDir": {}},
        {"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]
    assert pod["spec"]["containers"][0]["volumeMounts"] == [
        {"name": "streamjob-config", "mountPath": "/etc/streamjob", "readOnly": True},
        {"name": "streamjob-tmp", "mountPath": "/tmp"},
        {"name": "data", "mountPath": "/data"}]


def test_default_security():
    pod = pod_of(make_spec())
    assert pod["spec"]["securityContext"] == {"runAsNonRoot": True, "runAsUser": 185, "runAsGroup": 185,
                                              "fsGroup": 185, "seccompProfile": {"type": "RuntimeDefault"}}
    assert pod["spec"]["containers"][0]["securityContext"] == {
        "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}}
    assert pod["spec"]["restartPolicy"] == "Never"
    assert pod["spec"]["enableServiceLinks"] is False


def test_security_overrides_replace_ours():
    spec = make_spec(**VARIANTS["everything"])
    pod = pod_of(spec)
    assert pod["spec"]["securityContext"] == {"runAsUser": 1000, "runAsNonRoot": True}
    assert pod["spec"]["containers"][0]["securityContext"] == {"privileged": False}
    template = executor_template(spec)
    assert template["spec"]["securityContext"] == {"runAsUser": 1000, "runAsNonRoot": True}
    assert template["spec"]["containers"][0]["securityContext"] == {"privileged": False}


SERVICE_ACCOUNT_CASES = {
    "local": ({}, {"automountServiceAccountToken": False}),
    "local, user's account": ({"pod": {"serviceAccountName": "reader"}}, {"serviceAccountName": "reader"}),
    "kubernetes: ours": ({"mode": "kubernetes", "pod": {"serviceAccountName": "reader"}},
                         {"serviceAccountName": "wordcount-driver"}),
}


@pytest.mark.parametrize("case", SERVICE_ACCOUNT_CASES)
def test_service_account(case):
    fields, expected = SERVICE_ACCOUNT_CASES[case]
    pod_spec = pod_of(make_spec(**fields))["spec"]
    got = {k: pod_spec[k] for k in ("serviceAccountName", "automountServiceAccountToken") if k in pod_spec}
    assert got == expected


def test_placement_passes_through():
    spec = make_spec(**VARIANTS["everything"])
    pod_spec = pod_of(spec)["spec"]
    for key, value in (("nodeSelector", {"pool": "stream"}), ("imagePullSecrets", [{"name": "regcred"}])):
        assert pod_spec[key] == value == executor_template(spec)["spec"][key]
    assert pod_spec["tolerations"] == spec.pod.tolerations and pod_spec["affinity"] == spec.pod.affinity
    assert pod_spec["tolerations"] is not spec.pod.tolerations  # copies: the output never aliases the spec
    bare = pod_of(make_spec())["spec"]
    assert not {"nodeSelector", "tolerations", "affinity", "imagePullSecrets"} & bare.keys()


# -- the executor pod template -------------------------------------------------------------------------
def test_executor_pod_template():
    spec = make_spec(**VARIANTS["everything"])
    template = executor_template(spec)
    assert template["metadata"]["labels"]["streamjob.io/job"] == NAME
    assert template["metadata"]["labels"]["app.kubernetes.io/component"] == "executor"
    assert template["metadata"]["labels"]["team"] == "data"
    container = template["spec"]["containers"][0]
    assert container["name"] == "executor" and container["command"] == ["/opt/streamjob/entrypoint.sh"]
    assert "args" not in container and "image" not in container  # Spark sets them
    names = [e["name"] for e in container["env"]]
    assert names == ["POD_NAME", "POD_NAMESPACE", *[e["name"] for e in S3_ENV], "LOG_LEVEL", "POD_IP"]
    # Spark takes a template volume named spark-local-dir-1 as its local directory instead of adding one
    assert {"name": "spark-local-dir-1", "mountPath": "/tmp"} in container["volumeMounts"]
    assert {"name": "data", "persistentVolumeClaim": {"claimName": "data"}} in template["spec"]["volumes"]
    assert template["spec"]["serviceAccountName"] == "workload-identity"
    assert "STREAMJOB_REST_TOKEN" not in names  # executors never call the REST API


def test_local_mode_has_no_executor_template():
    assert set(by_kind(objects(make_spec()))["ConfigMap"]["data"]) == {"job.conf"}


# -- the job configuration ------------------------------------------------------------------------------
def parse_job_conf(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines())


def test_job_conf_in_the_config_map_is_sorted_key_value_lines():
    spec = make_spec(**VARIANTS["everything"])
    text = by_kind(objects(spec))["ConfigMap"]["data"]["job.conf"]
    keys = [line.split("=", 1)[0] for line in text.splitlines()]
    assert keys == sorted(keys) and text.endswith("\n")
    assert parse_job_conf(text) == r.job_configuration(spec)


def test_job_configuration_defaults():
    conf = r.job_configuration(make_spec())
    assert conf == {
        "jobmanager.rpc.port": "6123", "kubernetes.termination-log": "/dev/termination-log",
        "rest.address": "0.0.0.0:8081", "queryable-state.proxy.ports": "9069",
        "rest.result-linger": "300000", "spark.driver.blockManager.port": "7079", "spark.driver.port": "7078",
        "state.backend.type": "hashmap", "pipeline.max-parallelism": "128"}


def test_checkpointing_durations_in_milliseconds():
    conf = r.job_configuration(make_spec(
        checkpointing={"interval": "1m30s", "mode": "AT_LEAST_ONCE", "timeout": "1h", "minPause": "250ms",
                       "tolerableFailures": 2, "retained": 5, "incremental": True},
        checkpointDir="s3://ckpt/wc", savepointDir="s3://sp/wc", maxParallelism=512, stateBackend="rocksdb"))
    prefix = "execution.checkpointing."
    assert {k[len(prefix):]: v for k, v in conf.items() if k.startswith(prefix)} == {
        "interval": "90000", "mode": "AT_LEAST_ONCE", "timeout": "3600000", "min-pause": "250",
        "tolerable-failed-checkpoints": "2", "num-retained": "5", "incremental": "true",
        "externalized-checkpoint-retention": "RETAIN_ON_CANCELLATION", "dir": "s3://ckpt/wc",
        "savepoint-dir": "s3://sp/wc"}
    assert conf["pipeline.max-parallelism"] == "512" and conf["state.backend.type"] == "rocksdb"


RESTART_CASES = {
    "none": ({"type": "none"}, {"restart-strategy.type": "none"}),
    "fixed-delay": ({"type": "fixed-delay", "attempts": 3, "delay": "10s"},
                    {"restart-strategy.type": "fixed-delay", "restart-strategy.fixed-delay.attempts": "3",
                     "restart-strategy.fixed-delay.delay": "10000"}),
    "exponential-delay": ({"initialBackoff": "1s", "maxBackoff": "2m"},
                          {"restart-strategy.type": "exponential-delay",
                           "restart-strategy.exponential-delay.initial-backoff": "1000",
                           "restart-strategy.exponential-delay.max-backoff": "120000"}),
    "failure-rate": ({"type": "failure-rate", "maxFailuresPerInterval": 4, "failureRateInterval": "5m", "delay": "1s"},
                     {"restart-strategy.type": "failure-rate",
                      "restart-strategy.failure-rate.max-failures-per-interval": "4",
                      "restart-strategy.failure-rate.failure-rate-interval": "300000",
                      "restart-strategy.failure-rate.delay": "1000"}),
}


@pytest.mark.parametrize("case", RESTART_CASES)
def test_restart_strategy(case):
    strategy, expected = RESTART_CASES[case]
    conf = r.job_configuration(make_spec(restartStrategy=strategy))
    assert {k: v for k, v in conf.items() if k.startswith("restart-strategy.")} == expected


def test_s3_configuration():
    conf = r.job_configuration(make_spec(s3=S3))
    assert conf["s3.endpoint"] == "http://minio.storage:9000" and conf["s3.path.style.access"] == "true"
    assert "s3.access-key" not in conf  # credentials only through the environment (Secret refs)


def test_kubernetes_mode_configuration():
    conf = r.job_configuration(make_spec(**VARIANTS["kubernetes"], imagePullPolicy="Always"))
    assert {k: v for k, v in conf.items() if k.startswith(("kubernetes.executor", "spark.k", "spark.executor"))} == {
        "kubernetes.executor.cores": "2",
        "kubernetes.executor.pod-template-file": "/etc/streamjob/executor-pod-template.yaml",
        "spark.kubernetes.executor.podTemplateContainerName": "executor",
        "spark.kubernetes.container.image.pullPolicy": "Always",
        "spark.kubernetes.executor.request.cores": "1500m",
        "spark.executor.memory": "3g"}
    assert "spark.executor.cores" not in conf  # the runtime sizes executors from kubernetes.executor.cores
    limited = r.job_configuration(make_spec(mode="kubernetes", executor={"resources": {"cpuLimit": "3"}}))
    assert limited["spark.kubernetes.executor.limit.cores"] == "3"


def test_user_configuration_wins():
    conf = r.job_configuration(make_spec(
        mode="kubernetes", checkpointing={"interval": "10s"},
        sparkConf={"spark.executor.memory": "6g", "spark.driver.port": "7000", "spark.ui.enabled": "true"},
        config={"execution.checkpointing.interval": "1 min", "spark.driver.port": "7001", "custom.key": "x"}))
    assert conf["spark.executor.memory"] == "6g"  # sparkConf over ours
    assert conf["spark.driver.port"] == "7001"  # config over sparkConf
    assert conf["execution.checkpointing.interval"] == "1 min"
    assert conf["spark.ui.enabled"] == "true" and conf["custom.key"] == "x"


@pytest.mark.parametrize("quantity, spark", [
    ("2Gi", "2g"), ("512Mi", "512m"), ("1536Mi", "1536m"), ("1.5Gi", "1536m"), ("1Ti", "1024g"),
    ("2G", "1907m"), ("1000M", "953m"), ("2147483648", "2g"), ("1048576k", "1000m")])
def test_spark_memory(quantity, spark):
    assert r.spark_memory(quantity) == spark


@pytest.mark.parametrize("quantity", ["512Ki", "500m", "0", "2GB", "lots"])
def test_spark_memory_refuses(quantity):
    with pytest.raises(ValueError):
        r.spark_memory(quantity)


@pytest.mark.parametrize("duration, ms", [("10s", "10000"), ("5m", "300000"), ("1h30m", "5400000"),
                                          ("500ms", "500"), ("1.5s", "1500"), ("0s", "0")])
def test_duration_ms(duration, ms):
    assert r.duration_ms(duration) == ms


@pytest.mark.parametrize("conf", [{"a": "x\ny=z"}, {"a=b": "c"}, {"a": "b\r"}, {" ": "x"}])
def test_job_conf_refuses_what_would_forge_lines(conf):
    with pytest.raises(ValueError):
        r.render_job_conf(conf)


# -- names, determinism ----------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["1job", "Job", "job_1", "job-", "a" * 64, ""])
def test_names_that_cannot_name_a_service_are_refused(name):
    assert r.name_problem(name)
    with pytest.raises(ValueError):
        r.owned_objects(name, NAMESPACE, UID, make_spec(), target(), TOKEN)


def test_same_input_same_output():
    for variant in VARIANTS:
        first = objects(make_spec(**VARIANTS[variant]), target(restore=("savepoint", "s3://sp/1")))
        again = objects(make_spec(**VARIANTS[variant]), target(restore=("savepoint", "s3://sp/1")))
        assert json.dumps(first) == json.dumps(again)
        assert r.content_hash(first) == r.content_hash(again)


def test_spec_hash_follows_what_the_pod_runs():
    def spec_hash(spec, tgt=None):
        return pod_of(spec, tgt)["metadata"]["annotations"]["streamjob.io/spec-hash"]

    base = spec_hash(make_spec())
    assert spec_hash(make_spec()) == base
    assert spec_hash(make_spec(image="registry.example/wordcount:1.3")) != base
    assert spec_hash(make_spec(config={"execution.batch-size": "1024"})) != base  # the ConfigMap counts
    assert spec_hash(make_spec(), target(parallelism=3)) != base
    assert spec_hash(make_spec(pod={"annotations": {"note": "x"}})) == base  # metadata only


# -- user volumes cannot collide with ours (or Spark's) -----------------------------------------------
def test_our_volumes_are_the_reserved_ones():
    spec = make_spec(**VARIANTS["everything"])
    user = {v["name"] for v in spec.pod.volumes}
    for pod in (pod_of(spec), executor_template(spec)):
        ours = [v for v in pod["spec"]["volumes"] if v["name"] not in user]
        assert ours and all(v["name"].startswith(RESERVED_VOLUME_PREFIXES) for v in ours)
        paths = [m["mountPath"] for m in pod["spec"]["containers"][0]["volumeMounts"] if m["name"] not in user]
        assert paths and set(paths) <= set(RESERVED_MOUNT_PATHS)


@pytest.mark.parametrize("pod, message", [
    ({"volumes": [{"name": "streamjob-tmp", "emptyDir": {}}]}, "volumes[0]: the name 'streamjob-tmp' is reserved"),
    ({"volumes": [{"name": "spark-local-dir-1", "emptyDir": {}}]}, "volumes[0]: the name 'spark-local-dir-1' is reserved"),
    ({"volumes": [{"name": "d", "emptyDir": {}}, {"name": "d", "emptyDir": {}}]}, "volumes[1]: the name 'd' is used twice"),
    ({"volumes": [{"name": "d", "emptyDir": {}}], "volumeMounts": [{"name": "d", "mountPath": "/tmp/"}]},
     "volumeMounts[0]: /tmp is where the job's pods mount their own volume"),
    ({"volumes": [{"name": "d", "emptyDir": {}}], "volumeMounts": [{"name": "e", "mountPath": "/data"}]},
     "volumeMounts[0]: 'e' is not one of pod.volumes ['d']"),
    ({"volumes": [{"name": "d", "emptyDir": {}}],
      "volumeMounts": [{"name": "d", "mountPath": "/data"}, {"name": "d", "mountPath": "/data"}]},
     "volumeMounts[1]: /data is mounted twice"),
])
def test_colliding_user_volumes_are_refused_naming_the_entry(pod, message):
    with pytest.raises(ValidationError) as e:
        make_spec(pod=pod)
    assert message in str(e.value)
