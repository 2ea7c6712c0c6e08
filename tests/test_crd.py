"""The StreamJob CRD: generated from the models, structural, valid for Kubernetes, and refusing
(schema and CEL rules) what the models refuse. No cluster: tests/crd_schema.py plays the API server."""

from __future__ import annotations

import json
from pathlib import Path

import kubernetes_validate
import pydantic
import pytest
import yaml
from kubernetes_validate.utils import latest_version

from crd_schema import (apply_defaults, cel_violations, is_transition_rule, iterations, nodes, strict_validator,
                        structural_problems)
from streamjob.operator import model
from streamjob.operator.crd import CRD_FILENAME, build_crd, crd_yaml

CRD_FILE = Path(__file__).resolve().parent.parent / "crds" / CRD_FILENAME
CRD = build_crd()
(VERSION,) = CRD["spec"]["versions"]
SCHEMA = VERSION["schema"]["openAPIV3Schema"]
SPEC, STATUS = SCHEMA["properties"]["spec"], SCHEMA["properties"]["status"]
RULES = [rule for _, node in nodes(SCHEMA) for rule in node.get("x-kubernetes-validations", [])]

MINIMAL = {"image": "registry.example/job:1", "job": {"file": "/app/job.py"}, "parallelism": 2}
FULL = {
    "image": "registry.example/job:1", "imagePullPolicy": "Always",
    "job": {"module": "jobs.wordcount", "args": ["--input", "s3://in"]},
    "parallelism": 4, "maxParallelism": 256, "state": "running", "upgradeMode": "savepoint", "mode": "kubernetes",
    "checkpointing": {"interval": "30s", "mode": "AT_LEAST_ONCE", "timeout": "5m", "minPause": "500ms",
                      "tolerableFailures": 2, "retained": 5, "incremental": True},
    "stateBackend": "rocksdb", "checkpointDir": "s3://b/cp", "savepointDir": "s3://b/sp",
    "initialSavepointPath": "s3://b/sp/savepoint-1", "allowNonRestoredState": True,
    "restartStrategy": {"type": "fixed-delay", "attempts": 3, "delay": "10s"},
    "driver": {"resources": {"cpu": "500m", "memory": "1Gi"}},
    "executor": {"cores": 2, "resources": {"cpu": "2", "cpuLimit": "4", "memory": "4Gi"}},
    "sparkConf": {"spark.sql.shuffle.partitions": "8"}, "config": {"rest.port": "8081"},
    "pod": {"labels": {"team": "data"}, "annotations": {"a": "b"},
            "env": [{"name": "LOG", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}],
            "envFrom": [{"secretRef": {"name": "s"}}], "volumes": [{"name": "v", "emptyDir": {}}],
            "volumeMounts": [{"name": "v", "mountPath": "/data"}], "serviceAccountName": "streamjob",
            "nodeSelector": {"pool": "stream"}, "tolerations": [{"key": "k", "operator": "Exists"}],
            "affinity": {"nodeAffinity": {}}, "securityContext": {"runAsUser": 1000},
            "containerSecurityContext": {"readOnlyRootFilesystem": True}, "imagePullSecrets": [{"name": "r"}]},
    "s3": {"endpoint": "http://minio:9000", "region": "us-east-1", "pathStyleAccess": True,
           "accessKeyId": {"name": "s3", "key": "id"}, "secretAccessKey": {"name": "s3", "key": "secret"}},
    "savepoints": {"periodicInterval": "1h", "timeout": "10m", "historyMaxCount": 5, "historyMaxAge": "24h"},
    "savepointOnDeletion": True, "redeploy": {"maxRedeploys": 5, "backoff": "5s", "maxBackoff": "1m"},
    "health": {"restartsThreshold": 3, "restartsWindow": "5m", "stableAfter": "2m", "rollback": True,
               "rollbackTimeout": "10m"},
    "restartNonce": 7,
}
DELETE = object()


def spec(base=MINIMAL, **changes):
    """``base`` with top-level fields changed (``DELETE`` removes one)."""
    out = {**base, **changes}
    return {k: v for k, v in out.items() if v is not DELETE}


def schema_errors(obj, schema=SPEC) -> list[str]:
    """What the API server's OpenAPI validation (field validation Strict) says of ``obj``, after defaulting."""
    return [e.message for e in strict_validator(schema).iter_errors(apply_defaults(obj, schema))]


def model_accepts(obj) -> bool:
    """The operator's own verdict: strict, as JSON comes from the API server ("2" is no integer)."""
    try:
        model.StreamJobSpec.model_validate_json(json.dumps(obj), strict=True)
        return True
    except pydantic.ValidationError:
        return False


def path_node(path: str) -> dict:
    """The schema node of a simple JSONPath like ``.status.jobStatus.state``."""
    node = SCHEMA
    for name in path.lstrip(".").split("."):
        node = node["properties"][name]  # KeyError: the path names no field of the models
    return node


# -- the generated file ------------------------------------------------------------------------
def test_crd_file_is_generated_from_the_models():
    regenerate = (f"streamjob operator crd -o crds/{CRD_FILENAME}  (or: python -c 'from streamjob.operator.crd "
                  f"import write_crd; write_crd(\"crds/{CRD_FILENAME}\")')")
    assert CRD_FILE.exists(), f"missing {CRD_FILE}: run {regenerate}"
    assert CRD_FILE.read_bytes() == crd_yaml().encode(), f"{CRD_FILE} is stale: run {regenerate}"


def test_yaml_is_the_crd():
    assert yaml.safe_load(crd_yaml()) == CRD
    assert crd_yaml().startswith("# Generated by `streamjob operator crd`")


def test_names_and_version():
    assert CRD["metadata"]["name"] == "streamjobs.streamjob.io"
    assert CRD["spec"]["group"] == "streamjob.io" and CRD["spec"]["scope"] == "Namespaced"
    assert CRD["spec"]["names"] == {"kind": "StreamJob", "listKind": "StreamJobList", "plural": "streamjobs",
                                    "singular": "streamjob", "shortNames": ["sj"], "categories": model.CATEGORIES}
    assert (VERSION["name"], VERSION["served"], VERSION["storage"]) == ("v1alpha1", True, True)
    assert SCHEMA["required"] == ["spec"]


# -- valid for Kubernetes ----------------------------------------------------------------------
def test_schema_is_structural():
    assert structural_problems(SCHEMA) == []


@pytest.mark.parametrize("k8s_version", ["1.30.0", latest_version()])
def test_crd_manifest_is_a_valid_customresourcedefinition(k8s_version):
    kubernetes_validate.validate(CRD, k8s_version, strict=True)


def test_defaults_are_valid():
    # The API server refuses a CRD whose defaults (after their own defaulting) do not validate.
    for path, node in nodes(SCHEMA):
        if "default" in node:
            assert schema_errors(node["default"], node) == [], path


def test_status_keeps_kopf_bookkeeping_and_validates_the_models_dump():
    status = model.StreamJobStatus(
        lifecycle_state="STABLE", parallelism=4, selector="streamjob.io/name=wc",
        last_checkpoint={"id": 7, "time": "2025-01-01T00:00:00Z", "path": "s3://b/cp/chk-7"},
        conditions=[{"type": "Ready", "status": "True", "reason": "Stable",
                     "last_transition_time": "2025-01-01T00:00:00Z"}],
    ).model_dump(by_alias=True, exclude_none=True)
    assert schema_errors({**status, "kopf": {"progress": {}}}, STATUS) == []
    assert schema_errors({**status, "parallelism": "4"}, STATUS) != []


def test_rules_iterate_only_bounded_lists_and_maps():
    # The API server estimates each rule's worst cost from the sizes it can infer, and refuses a CRD
    # with a rule over budget: a list or map a rule iterates (all/exists/map/filter) needs maxItems or
    # maxProperties, else it counts as big as a whole request.
    iterated = set()
    for rule, _, path, node in iterations(SCHEMA):
        assert node is not None, f"cannot tell what {rule!r} iterates: name it as self.field..."
        bound = "maxItems" if node.get("type") == "array" else "maxProperties"
        assert bound in node, f"{path} has no {bound}, and {rule!r} iterates it"
        iterated.add(path)
    assert iterated >= {".spec.config", ".spec.sparkConf"}  # the walk finds them


def test_rules_traverse_only_bounded_strings():
    # Also a string a rule reads in each iteration needs maxLength: without it the estimate is a
    # whole request (3 MiB), so a `.contains` on each of 256 map values costs ~80M of the 10M
    # one rule may cost (and the CRD's 100M in all): the API server would refuse the CRD.
    for rule, target, path, node in iterations(SCHEMA):
        items = node.get("items") if node.get("type") == "array" else node.get("additionalProperties")
        read = node.get("type") == "array" or f"{target}[" in rule  # list items, or map values by key
        if read and items.get("type") == "string":
            assert "maxLength" in items, f"{path}: its strings have no maxLength, and {rule!r} reads them"


# -- agrees with the models --------------------------------------------------------------------
def test_rules_sit_on_the_objects_of_their_models():
    def rules_of(model_class):
        return model_class.model_config["json_schema_extra"]["x-kubernetes-validations"]

    assert SPEC["x-kubernetes-validations"] == rules_of(model.StreamJobSpec)
    assert SPEC["properties"]["job"]["x-kubernetes-validations"] == rules_of(model.JobSource)
    assert SPEC["properties"]["autoscaler"]["x-kubernetes-validations"] == rules_of(model.AutoscalerSpec)
    # The name's, on the object itself (the API server lets root rules read metadata.name).
    assert [r["message"] for r in SCHEMA["x-kubernetes-validations"]] == [NAME]
    assert "self.metadata.name" in SCHEMA["x-kubernetes-validations"][0]["rule"]
    assert len(RULES) == (len(rules_of(model.StreamJobSpec)) + len(rules_of(model.JobSource))
                          + len(rules_of(model.AutoscalerSpec)) + 1)


def _without_empty(value):
    """Drops empty lists and maps: absent means the same, and the CRD does not default them."""
    if isinstance(value, dict):
        value = {k: _without_empty(v) for k, v in value.items()}
        return {k: v for k, v in value.items() if v not in ({}, [])}
    return [_without_empty(v) for v in value] if isinstance(value, list) else value


@pytest.mark.parametrize("obj", [MINIMAL, spec(checkpointing={}, s3={}, restartStrategy={})],
                         ids=["minimal", "empty-optional-sections"])
def test_api_server_defaults_are_the_model_defaults(obj):
    parsed = model.StreamJobSpec.model_validate(obj).model_dump(by_alias=True, exclude_none=True)
    assert _without_empty(apply_defaults(obj, SPEC)) == _without_empty(parsed)


SCHEMA_CASES = [  # id, spec, valid
    ("minimal", MINIMAL, True),
    ("full", FULL, True),
    ("explicit-null-is-absent", spec(savepointDir=None, checkpointing=None, s3=None), True),
    ("durations", spec(checkpointing={"interval": "1h30m", "timeout": "1.5s", "minPause": "0s"}), True),
    ("quantities", spec(driver={"resources": {"cpu": "0.5", "memory": "512M"}}), True),
    ("missing-image", spec(image=DELETE), False),
    ("missing-job", spec(job=DELETE), False),
    ("missing-parallelism", spec(parallelism=DELETE), False),
    ("empty-image", spec(image=""), False),
    ("parallelism-0", spec(parallelism=0), False),
    ("parallelism-too-big", spec(parallelism=32769), False),
    ("max-parallelism-0", spec(maxParallelism=0), False),
    ("negative-tolerable-failures", spec(checkpointing={"tolerableFailures": -1}), False),
    ("retained-0", spec(checkpointing={"retained": 0}), False),
    ("executor-cores-65", spec(executor={"cores": 65}), False),
    ("upgrade-mode-foo", spec(upgradeMode="foo"), False),
    ("state-paused", spec(state="paused"), False),
    ("state-backend-unknown", spec(stateBackend="memory"), False),
    ("duration-words", spec(checkpointing={"interval": "10 seconds"}), False),
    ("duration-no-unit", spec(savepoints={"timeout": "10"}), False),
    ("quantity-spaced", spec(driver={"resources": {"memory": "2 GiB"}}), False),
    ("quantity-unit", spec(executor={"resources": {"cpu": "1.5cores"}}), False),
    ("module-not-a-module", spec(job={"module": "my-job"}), False),
    ("empty-file", spec(job={"file": ""}), False),
    ("parallelism-string", spec(parallelism="2"), False),
    ("job-string", spec(job="/app/job.py"), False),
    ("label-not-string", spec(pod={"labels": {"team": 1}}), False),
    ("env-not-list", spec(pod={"env": "LOG=1"}), False),
    ("args-not-strings", spec(job={"file": "j.py", "args": [1]}), False),
    ("secret-ref-without-key", spec(s3={"accessKeyId": {"name": "s3"}}), False),
    ("unknown-field", spec(paralelism=2), False),
    ("unknown-nested-field", spec(job={"file": "j.py", "entrypoint": "main"}), False),
    ("config-256-entries", spec(config={f"k{i}": "v" for i in range(256)}), True),
    ("config-257-entries", spec(config={f"k{i}": "v" for i in range(257)}), False),
    ("spark-conf-257-entries", spec(sparkConf={f"spark.k{i}": "v" for i in range(257)}), False),
    ("autoscaler-utilization-0", spec(autoscaler={"targetUtilization": 0}), False),
    ("autoscaler-scale-down-factor-1", spec(autoscaler={"scaleDownMaxFactor": 1}), False),
    ("autoscaler-window-words", spec(autoscaler={"metricsWindow": "10 minutes"}), False),
    ("autoscaler-unknown-field", spec(autoscaler={"targetUtilisation": 0.5}), False),
]


@pytest.mark.parametrize("obj, valid", [c[1:] for c in SCHEMA_CASES], ids=[c[0] for c in SCHEMA_CASES])
def test_schema(obj, valid):
    assert (schema_errors(obj) == []) == valid, schema_errors(obj)
    assert model_accepts(obj) == valid, "the models and the CRD disagree"


# -- CEL rules ---------------------------------------------------------------------------------
PARALLELISM = "parallelism must not exceed maxParallelism"
MAX_PARALLELISM_FIXED = "maxParallelism cannot change once set (it is the number of key groups of the job's state)"
SAVEPOINT_MODE = "upgradeMode savepoint needs savepointDir"
LAST_STATE_MODE = "upgradeMode last-state needs checkpointDir"
LAST_STATE_CHECKPOINTING = "upgradeMode last-state needs checkpointing (it restores the latest checkpoint)"
SPARK_CONF_KEYS = ("sparkConf: keys start with spark., and the ports, addresses and master the operator sets cannot "
                   "be overridden")
CONFIG_KEYS = "config: the ports, addresses and files the operator sets cannot be overridden"
LINES = "config and sparkConf: keys cannot contain '=' or line breaks, values cannot contain line breaks"
ON_DELETION = "savepointOnDeletion needs savepointDir"
PERIODIC = "periodic savepoints need savepointDir"
ONE_SOURCE = "job: give exactly one of file or module"
AUTOSCALER_CHECKPOINTS = "autoscaler: it rescales the job in place from checkpoints; enable checkpointing"
AUTOSCALER_STATELESS = ("autoscaler: a stateless job would lose its state on every rescale; use upgradeMode savepoint "
                        "or last-state")
AUTOSCALER_MAX = "autoscaler.maxParallelism must not exceed maxParallelism (the job's key groups)"
AUTOSCALER_MIN_MAX = "autoscaler: minParallelism must not exceed maxParallelism"
AUTOSCALER_TARGET = ("autoscaler: targetUtilization - targetUtilizationBoundary must be below 1 (else no load is ever "
                     "too high)")
SCALED = {"upgradeMode": "savepoint", "savepointDir": "s3://b/sp", "checkpointing": {}}
NAME = ("metadata.name: at most 45 lowercase letters, digits and '-', starting with a letter and ending with a letter "
        "or digit (it names the job's Service and prefixes its pods)")

CREATE_CASES = [  # id, spec, messages of the broken rules
    ("minimal", MINIMAL, []),
    ("full", FULL, []),
    ("parallelism-at-max", spec(parallelism=128, maxParallelism=128), []),
    ("parallelism-over-max", spec(parallelism=200, maxParallelism=128), [PARALLELISM]),
    ("no-max-parallelism", spec(parallelism=200), [PARALLELISM]),  # the default is 128
    ("max-parallelism-on-create", spec(maxParallelism=64), []),  # transition rules skip creates
    ("savepoint-mode", spec(upgradeMode="savepoint", savepointDir="s3://b/sp"), []),
    ("savepoint-mode-no-dir", spec(upgradeMode="savepoint"), [SAVEPOINT_MODE]),
    ("savepoint-mode-empty-dir", spec(upgradeMode="savepoint", savepointDir=""), [SAVEPOINT_MODE]),
    ("savepoint-mode-checkpoint-dir-only", spec(upgradeMode="savepoint", checkpointDir="s3://b/cp"), [SAVEPOINT_MODE]),
    ("last-state", spec(upgradeMode="last-state", checkpointDir="s3://b/cp", checkpointing={}), []),
    ("last-state-no-dir", spec(upgradeMode="last-state", savepointDir="s3://b/sp", checkpointing={}),
     [LAST_STATE_MODE]),
    ("last-state-no-checkpointing", spec(upgradeMode="last-state", checkpointDir="s3://b/cp"),
     [LAST_STATE_CHECKPOINTING]),
    ("last-state-null-checkpointing", spec(upgradeMode="last-state", checkpointDir="s3://b/cp", checkpointing=None),
     [LAST_STATE_CHECKPOINTING]),  # null is pruned: absent
    ("last-state-neither", spec(upgradeMode="last-state"), [LAST_STATE_MODE, LAST_STATE_CHECKPOINTING]),
    ("checkpointing-without-last-state", spec(checkpointing={}), []),
    ("savepoint-on-deletion", spec(savepointOnDeletion=True, savepointDir="s3://b/sp"), []),
    ("savepoint-on-deletion-no-dir", spec(savepointOnDeletion=True), [ON_DELETION]),
    ("periodic-savepoints", spec(savepoints={"periodicInterval": "1h"}, savepointDir="s3://b/sp"), []),
    ("periodic-savepoints-no-dir", spec(savepoints={"periodicInterval": "1h"}), [PERIODIC]),
    ("savepoint-policy-without-period", spec(savepoints={"historyMaxCount": 3}), []),
    ("job-module", spec(job={"module": "jobs.wc"}), []),
    ("job-file-and-module", spec(job={"file": "j.py", "module": "jobs.wc"}), [ONE_SOURCE]),
    ("job-neither", spec(job={"args": ["x"]}), [ONE_SOURCE]),
    ("job-null-module", spec(job={"file": "j.py", "module": None}), []),  # null is pruned: absent
    ("empty-maps", spec(config={}, sparkConf={}), []),
    ("spark-conf", spec(sparkConf={"spark.executor.memoryOverhead": "1g", "spark.driver.extraJavaOptions": "-Da=b"}),
     []),
    ("spark-conf-not-spark", spec(sparkConf={"sql.shuffle.partitions": "8"}), [SPARK_CONF_KEYS]),
    ("spark-conf-prefix-only-in-name", spec(sparkConf={"sparkling.x": "1"}), [SPARK_CONF_KEYS]),
    ("spark-conf-reserved", spec(sparkConf={"spark.master": "local[2]"}), [SPARK_CONF_KEYS]),
    ("spark-conf-near-reserved", spec(sparkConf={"spark.driver.portMaxRetries": "3"}), []),
    ("config", spec(config={"taskmanager.slots": "2", "rest.port": "8081"}), []),
    ("config-reserved", spec(config={"rest.address": "0.0.0.0"}), [CONFIG_KEYS]),
    ("config-spark-reserved", spec(config={"spark.master": "local[2]"}), [CONFIG_KEYS]),
    ("config-key-with-equals", spec(config={"a=b": "c"}), [LINES]),
    ("config-value-with-equals", spec(config={"a": "b=c"}), []),  # split at the first '='
    ("config-key-with-newline", spec(config={"a\nb": "c"}), [LINES]),
    ("config-value-with-newline", spec(config={"a": "b\nc"}), [LINES]),
    ("config-value-with-backslash-n", spec(config={"a": "b\\nc"}), []),  # the rule's '\n' is a newline
    ("spark-conf-key-with-equals", spec(sparkConf={"spark.a=b": "c"}), [LINES]),
    ("spark-conf-key-with-newline", spec(sparkConf={"spark.a\nb": "c"}), [LINES]),
    ("spark-conf-value-with-newline", spec(sparkConf={"spark.a": "b\nc"}), [LINES]),
    ("config-and-spark-conf", spec(config={"rest.address": "x\ny"}, sparkConf={"spark.master": "local"}),
     [SPARK_CONF_KEYS, CONFIG_KEYS, LINES]),
    ("autoscaler", spec(**SCALED, autoscaler={"enabled": True, "maxParallelism": 64, "minParallelism": 2}), []),
    ("autoscaler-disabled-anywhere", spec(autoscaler={"enabled": False}), []),
    ("autoscaler-no-checkpointing", spec(**{**SCALED, "checkpointing": DELETE}, autoscaler={"enabled": True}),
     [AUTOSCALER_CHECKPOINTS]),
    ("autoscaler-stateless", spec(checkpointing={}, autoscaler={"enabled": True}), [AUTOSCALER_STATELESS]),
    ("autoscaler-max-over-key-groups", spec(**SCALED, autoscaler={"enabled": True, "maxParallelism": 256}),
     [AUTOSCALER_MAX]),
    ("autoscaler-min-over-max", spec(**SCALED, autoscaler={"enabled": True, "minParallelism": 8, "maxParallelism": 4}),
     [AUTOSCALER_MIN_MAX]),
    ("autoscaler-no-upper-band", spec(**SCALED, autoscaler={"targetUtilization": 1.0, "targetUtilizationBoundary": 0}),
     [AUTOSCALER_TARGET]),
    ("several", spec(parallelism=9, maxParallelism=8, upgradeMode="savepoint", savepointOnDeletion=True,
                     job={}), [PARALLELISM, SAVEPOINT_MODE, ON_DELETION, ONE_SOURCE]),
]

UPDATE_CASES = [  # id, old spec, new spec, messages of the broken rules
    ("unchanged", FULL, FULL, []),
    ("rescale-within-max", spec(maxParallelism=128), spec(maxParallelism=128, parallelism=64), []),
    ("rescale-over-max", spec(maxParallelism=128), spec(maxParallelism=128, parallelism=200), [PARALLELISM]),
    ("max-parallelism-changed", spec(maxParallelism=128), spec(maxParallelism=256), [MAX_PARALLELISM_FIXED]),
    ("max-parallelism-removed", spec(maxParallelism=64), MINIMAL, [MAX_PARALLELISM_FIXED]),
    ("max-parallelism-removed-default", spec(maxParallelism=128), MINIMAL, []),  # defaulted back to 128
    ("max-parallelism-nulled", spec(maxParallelism=64), spec(maxParallelism=None), [MAX_PARALLELISM_FIXED]),
    # A job that ran without maxParallelism has the default's 128 key groups: it cannot get others later.
    ("max-parallelism-set-later", MINIMAL, spec(maxParallelism=256), [MAX_PARALLELISM_FIXED]),
    ("max-parallelism-default-spelled-out", MINIMAL, spec(maxParallelism=128), []),
    ("never-set", MINIMAL, spec(parallelism=3), []),
]


def rule_messages(new, old=None) -> list[str]:
    """Defaulting, then OpenAPI validation (which the cases must pass), then the CEL rules."""
    new = apply_defaults(new, SCHEMA)
    old = None if old is None else apply_defaults(old, SCHEMA)
    assert strict_validator(SCHEMA).is_valid(new), "a CEL case must pass the schema"
    return cel_violations(SCHEMA, new, old)


def resource(obj, name="wc"):
    return {"apiVersion": "streamjob.io/v1alpha1", "kind": "StreamJob",
            "metadata": {"name": name, "namespace": "data", "labels": {"team": "data"}}, "spec": obj}


@pytest.mark.parametrize("obj, messages", [c[1:] for c in CREATE_CASES], ids=[c[0] for c in CREATE_CASES])
def test_rules_on_create(obj, messages):
    assert rule_messages(resource(obj)) == messages


@pytest.mark.parametrize("old, new, messages", [c[1:] for c in UPDATE_CASES], ids=[c[0] for c in UPDATE_CASES])
def test_rules_on_update(old, new, messages):
    assert rule_messages(resource(new), resource(old)) == messages


@pytest.mark.parametrize("key", sorted(model.RESERVED_KEYS))
def test_reserved_keys_are_refused(key):
    assert rule_messages(resource(spec(config={key: "x"}))) == [CONFIG_KEYS]
    assert rule_messages(resource(spec(sparkConf={key: "x"}))) == [SPARK_CONF_KEYS]


NAME_CASES = [  # id, metadata.name, messages of the broken rules
    ("ok", "wordcount-2", []),
    ("one-letter", "w", []),
    ("45-characters", "w" * 45, []),
    ("46-characters", "w" * 46, [NAME]),
    ("uppercase", "WordCount", [NAME]),
    ("starts-with-a-digit", "2wordcount", [NAME]),
    ("starts-with-dash", "-wc", [NAME]),
    ("ends-with-dash", "wordcount-", [NAME]),
    ("dot", "word.count", [NAME]),  # a DNS-1123 subdomain, but no DNS-1035 label
    ("underscore", "word_count", [NAME]),
]


@pytest.mark.parametrize("name, messages", [c[1:] for c in NAME_CASES], ids=[c[0] for c in NAME_CASES])
def test_name_rule(name, messages):
    assert rule_messages(resource(MINIMAL, name=name)) == messages
    assert rule_messages(resource(MINIMAL, name=name), resource(MINIMAL, name=name)) == messages  # on update too


def test_root_rules_see_only_name_and_generate_name_of_the_metadata():
    schema = {"type": "object", "properties": {"metadata": {"type": "object"}}, "x-kubernetes-validations": [
        {"rule": "has(self.metadata.name) && has(self.metadata.generateName) && !has(self.metadata.labels)"
                 " && !has(self.metadata.namespace)", "message": "m"}]}
    obj = {"metadata": {"name": "wc-x7k2p", "generateName": "wc-", "namespace": "data", "labels": {"a": "b"}}}
    assert cel_violations(schema, obj) == []


def test_every_rule_has_a_failing_case():
    failing = {m for *_, messages in CREATE_CASES + UPDATE_CASES + NAME_CASES for m in messages}
    assert {r["message"] for r in RULES} == failing
    assert [r["message"] for r in RULES if is_transition_rule(r)] == [MAX_PARALLELISM_FIXED]


# -- printer columns and scale -----------------------------------------------------------------
@pytest.mark.parametrize("column", VERSION["additionalPrinterColumns"], ids=lambda c: c["name"])
def test_printer_column_shows_a_field(column):
    if column["jsonPath"] == ".metadata.creationTimestamp":
        return  # ObjectMeta's, always there
    expected = {"integer": "integer", "string": "string", "date": "string"}[column["type"]]
    assert path_node(column["jsonPath"])["type"] == expected


def test_scale_subresource_paths():
    scale = VERSION["subresources"]["scale"]
    assert VERSION["subresources"]["status"] == {}
    assert path_node(scale["specReplicasPath"])["type"] == "integer"
    assert path_node(scale["statusReplicasPath"])["type"] == "integer"
    assert path_node(scale["labelSelectorPath"])["type"] == "string"
