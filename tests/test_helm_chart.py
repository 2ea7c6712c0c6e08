"""The Helm chart helm/streamjob-operator, rendered and linted by Helm's own Go library (helm-python-sdk).

Offline: no cluster. Every rendered manifest is validated against the Kubernetes OpenAPI schemas
(kubernetes-validate, strict), the Prometheus Operator kinds against minimal schemas of our own
(tests/helm_monitoring_schemas.py), kopf's peering objects against their CRD. The operator's RBAC
is evaluated here by a small model of RBAC (union of the rules bound to its service account, per
namespace) against what the code calls, so a rule that goes missing or one too many fails.
Not covered (no API server): admission, RBAC's escalation check as the server does it, CRD
installation, the Prometheus Operator's real CRDs.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import warnings
from pathlib import Path
from typing import Any

import helm_python as helm
import jsonschema
import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import latest_version

from helm_monitoring_schemas import SCHEMAS as MONITORING_SCHEMAS
from streamjob.operator import kube, resources
from streamjob.operator.cli import operator as operator_cli
from streamjob.operator.crd import crd_yaml

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "helm" / "streamjob-operator"
GENERATED_CRD = ROOT / "crds" / "streamjob.io_streamjobs.yaml"
RELEASE, NAMESPACE = "streamjob-operator", "streamjob-system"
FULLNAME = RELEASE  # the release name contains the chart name: no "<release>-<chart>"
# The chart's kubeVersion floor and the newest schemas kubernetes-validate ships.
K8S_VERSIONS = ["1.30.0", latest_version()]
RULES_FILE, DASHBOARD_FILE = "files/alerts.rules.yaml", "files/dashboard.json"

helm.disable_logging()

# Stand-ins for the two files another change brings (a plain Prometheus rules file and a Grafana
# dashboard), used only while the chart does not have them yet. The rule carries {{ $labels }} on
# purpose: the chart must pass it to Prometheus untouched, not evaluate it as a Helm template.
FIXTURE_RULES = """\
groups:
  - name: streamjob
    rules:
      - alert: StreamJobCheckpointsFailing
        expr: increase(streamjob_checkpoints_failed_total[10m]) > 0
        for: 5m
        labels:
          severity: warning
        annotations:
          summary: 'Checkpoints of {{ $labels.namespace }}/{{ $labels.pod }} fail ({{ $value }} in 10m)'
"""
FIXTURE_DASHBOARD = json.dumps({"title": "StreamJob", "uid": "streamjob", "panels": [
    {"type": "timeseries", "title": "{{ not a template }}", "targets": [{"expr": "up"}]}]}, indent=2) + "\n"


@pytest.fixture(scope="module")
def chart_dir(tmp_path_factory) -> Path:
    """The real chart when it has its rules and dashboard files; else a copy with stand-ins for
    what is missing (the real files win as soon as they exist)."""
    missing = {name: text for name, text in ((RULES_FILE, FIXTURE_RULES), (DASHBOARD_FILE, FIXTURE_DASHBOARD))
               if not (CHART / name).is_file()}
    if not missing:
        return CHART
    copy = tmp_path_factory.mktemp("chart") / CHART.name
    shutil.copytree(CHART, copy)  # symlinks=False: the copy holds the CRD's content
    for name, text in missing.items():
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        (copy / name).write_text(text)
    return copy


@functools.lru_cache(maxsize=None)
def _load(path: str) -> helm.Chart:
    return helm.Chart.load(path)


def render(chart: Path, values: dict | None = None, namespace: str = NAMESPACE,
           release: str = RELEASE) -> dict[str, Any]:
    """{"docs": every rendered object, "notes": NOTES.txt}."""
    manifests = _load(str(chart)).render(values or {}, name=release, namespace=namespace)
    docs, notes = [], ""
    for path, text in sorted(manifests.items()):
        if path.endswith("NOTES.txt"):
            notes = text
            continue
        docs += [d for d in yaml.safe_load_all(text) if d]
    return {"docs": docs, "notes": notes}


def of_kind(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[dict], kind: str, name: str | None = None) -> dict:
    found = [d for d in of_kind(docs, kind) if name is None or d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind} {name}: {len(found)} found"
    return found[0]


def operator_container(docs: list[dict]) -> dict:
    (container,) = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    return container


# -- the documented switches: each is rendered, linted and validated ----------------------------------
SCENARIOS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "watch-namespaces": {"watchNamespaces": ["team-a", "team-b"]},
    "replicas-2": {"replicas": 2},
    "replicas-2-namespaced": {"replicas": 2, "watchNamespaces": ["team-a", "team-b"]},
    "leader-election-1-replica": {"leaderElection": {"enabled": True, "peeringName": "sj-leader", "lifetime": 30}},
    "monitoring-all-on": {"metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}},
                                      "podMonitor": {"enabled": True, "interval": "15s"},
                                      "prometheusRule": {"enabled": True, "labels": {"release": "prom"}}},
                          "grafanaDashboard": {"enabled": True, "namespace": "monitoring",
                                               "annotations": {"grafana_folder": "StreamJob"}}},
    "monitoring-namespaced": {"watchNamespaces": ["team-a"],
                              "metrics": {"serviceMonitor": {"enabled": True}, "podMonitor": {"enabled": True},
                                          "prometheusRule": {"enabled": True}},
                              "grafanaDashboard": {"enabled": True, "labels": {"dashboards": "streamjob"}}},
    "annotations-and-service-off": {"metrics": {"podAnnotations": {"enabled": False},
                                                "service": {"enabled": False}}},
    "custom-pod": {
        "image": {"repository": "registry.example/streamjob", "tag": "0.1.0-rc1", "pullPolicy": "Always"},
        "imagePullSecrets": [{"name": "regcred"}],
        "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ops", "effect": "NoSchedule"}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}]}}},
        "podAnnotations": {"example.com/team": "data"}, "podLabels": {"team": "data"},
        "env": [{"name": "TZ", "value": "UTC"}], "priorityClassName": "system-cluster-critical",
        "operator": {"deleteTimeout": 120, "idleInterval": 5, "maxConcurrentReconciles": 2, "verbose": True},
        "serviceAccount": {"annotations": {"example.com/role": "ops"}},
        "driver": {"serviceAccount": {"annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/x"}}},
    },
    "owner-references-enforced": {"watchNamespaces": ["team-a"], "replicas": 2,
                                  "rbac": {"ownerReferencesPermissionEnforcement": True}},
    "existing-accounts-no-rbac": {"serviceAccount": {"create": False, "name": "ops-made"}, "rbac": {"create": False},
                                  "driver": {"serviceAccount": {"create": False}, "rbac": {"create": False}}},
    "driver-identity-only": {"driver": {"rbac": {"create": False}}, "fullnameOverride": "sj"},
}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_lint_strict(chart_dir, scenario):
    report = helm.lint(str(chart_dir), SCENARIOS[scenario], strict=True, namespace=NAMESPACE, kube_version="v1.30.0")
    problems = [m for m in report["messages"] if m["severity"] >= 2]  # 2 warning, 3 error; 1 is info ("icon")
    assert report["errors"] == [] and problems == []


def _validate(obj: dict, peering_schema: dict) -> None:
    group = obj["apiVersion"].split("/")[0]
    if group == "monitoring.coreos.com":
        jsonschema.validate(obj, MONITORING_SCHEMAS[obj["kind"]])
    elif group == "kopf.dev":  # a custom resource: its CRD's schema, and a metadata of a name only
        assert set(obj["metadata"]) <= {"name", "namespace", "labels"}
        jsonschema.validate({k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")},
                            peering_schema[obj["kind"]])
    else:
        for version in K8S_VERSIONS:
            kubernetes_validate.validate(obj, version, strict=True)


@pytest.fixture(scope="module")
def peering_schema() -> dict[str, dict]:
    crds = yaml.safe_load_all((CHART / "crds" / "kopf.dev_peerings.yaml").read_text())
    return {c["spec"]["names"]["kind"]: c["spec"]["versions"][0]["schema"]["openAPIV3Schema"] for c in crds}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_rendered_manifest_validates(chart_dir, scenario, peering_schema):
    docs = render(chart_dir, SCENARIOS[scenario])["docs"]
    assert docs
    for obj in docs:
        _validate(obj, peering_schema)
        labels = obj["metadata"].get("labels", {})
        assert labels.get("app.kubernetes.io/instance") == RELEASE, obj["metadata"]
    names = [(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]) for d in docs]
    assert len(names) == len(set(names)), "two objects of the same kind and name"


def test_the_validators_are_not_vacuous(chart_dir, peering_schema):
    docs = render(chart_dir, SCENARIOS["monitoring-all-on"] | {"replicas": 2})["docs"]
    broken = json.loads(json.dumps(one(docs, "Deployment")))
    broken["spec"]["template"]["spec"]["containers"][0]["comand"] = ["typo"]
    with pytest.raises(kubernetes_validate.ValidationError):
        _validate(broken, peering_schema)
    for kind, field in (("ServiceMonitor", "endpoint"), ("PodMonitor", "podMetricEndpoints"),
                        ("PrometheusRule", "group")):
        broken = json.loads(json.dumps(one(docs, kind)))
        broken["spec"][field] = []
        with pytest.raises(jsonschema.ValidationError):
            _validate(broken, peering_schema)
    broken = json.loads(json.dumps(one(docs, "ClusterKopfPeering")))
    broken["status"] = "not an object"
    with pytest.raises(jsonschema.ValidationError):
        _validate(broken, peering_schema)


# -- the CRDs: the generated one, not a copy ---------------------------------------------------------
def test_chart_crd_is_the_generated_crd():
    link = CHART / "crds" / GENERATED_CRD.name
    # A relative symlink into crds/ (the generator's output): one file, nothing to keep in sync.
    assert link.is_symlink() and not os.path.isabs(os.readlink(link))
    assert link.resolve() == GENERATED_CRD.resolve()
    crds = {Path(c["name"]).name: c["data"] for c in _load(str(CHART)).crds}
    assert set(crds) == {GENERATED_CRD.name, "kopf.dev_peerings.yaml"}
    # What Helm loaded (it follows the link) is, byte for byte, what the generator writes now.
    assert crds[GENERATED_CRD.name] == crd_yaml() == GENERATED_CRD.read_text()


def test_packaged_chart_carries_the_crd_content(tmp_path):
    # `helm package` (and a chart repository) must ship the CRD itself, not a dangling link.
    archive = helm.package(str(CHART), destination=str(tmp_path))
    with helm.Chart.load_archive(Path(archive).read_bytes()) as packaged:
        crds = {Path(c["name"]).name: c["data"] for c in packaged.crds}
        assert packaged.version == packaged.metadata["appVersion"] == "0.1.0"
    assert crds[GENERATED_CRD.name] == crd_yaml()


def test_crds_are_valid_customresourcedefinitions():
    docs = [d for c in _load(str(CHART)).crds for d in yaml.safe_load_all(c["data"]) if d]
    assert sorted(d["metadata"]["name"] for d in docs) == [
        "clusterkopfpeerings.kopf.dev", "kopfpeerings.kopf.dev", "streamjobs.streamjob.io"]
    for doc in docs:
        for version in K8S_VERSIONS:
            kubernetes_validate.validate(doc, version, strict=True)
    scopes = {d["spec"]["names"]["kind"]: d["spec"]["scope"] for d in docs}
    assert scopes == {"StreamJob": "Namespaced", "KopfPeering": "Namespaced", "ClusterKopfPeering": "Cluster"}
    # kopf patches the peering object's status through the object itself: no status subresource.
    for doc in docs:
        if doc["spec"]["group"] == "kopf.dev":
            (version,) = doc["spec"]["versions"]
            assert version["name"] == "v1" and "subresources" not in version


def test_chart_version_is_the_project_version():
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    meta = _load(str(CHART)).metadata
    assert meta["apiVersion"] == "v2" and meta["version"] == meta["appVersion"] == project


# -- the operator's command line --------------------------------------------------------------------
def parse_operator_args(docs: list[dict]) -> dict[str, Any]:
    """The container's args as the real `streamjob operator` CLI parses them."""
    container = operator_container(docs)
    assert container["command"] == [resources.ENTRYPOINT]
    role, *args = container["args"]
    assert role == "operator"  # the entrypoint's role
    ctx = operator_cli.make_context("operator", list(args))
    with warnings.catch_warnings():  # Click 8.2 deprecates protected_args (a group's leftover words)
        warnings.simplefilter("ignore", DeprecationWarning)
        leftover = [*ctx.protected_args, *ctx.args]
    assert leftover == []  # no word taken for a subcommand: every one is a flag the CLI knows
    params = ctx.params
    assert bool(params["namespaces"]) != params["all_namespaces"]  # what the CLI insists on
    return params


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_operator_args_follow_the_values(chart_dir, scenario):
    values = SCENARIOS[scenario]
    docs = render(chart_dir, values)["docs"]
    params = parse_operator_args(docs)
    watched = values.get("watchNamespaces", [])
    assert list(params["namespaces"]) == watched and params["all_namespaces"] == (not watched)
    assert params["health_address"] == "0.0.0.0:8080"
    operator_values = values.get("operator", {})
    assert params["delete_timeout"] == operator_values.get("deleteTimeout", 300)
    assert params["idle_interval"] == operator_values.get("idleInterval", 10)
    assert params["max_concurrent_reconciles"] == operator_values.get("maxConcurrentReconciles", 8)
    assert params["verbose"] == operator_values.get("verbose", False)
    election = values.get("leaderElection", {})
    elected = values.get("replicas", 1) > 1 or election.get("enabled", False)
    deployment = one(docs, "Deployment")
    assert deployment["spec"]["replicas"] == values.get("replicas", 1)
    if elected:
        assert params["peering"] == (election.get("peeringName") or FULLNAME)
        assert params["peering_lifetime"] == election.get("lifetime", 60)
        assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    else:
        assert params["peering"] is None
        # Standalone: never two operators at once, not even during a rollout.
        assert deployment["spec"]["strategy"] == {"type": "Recreate"}


@pytest.mark.parametrize("scenario", ["replicas-2", "replicas-2-namespaced", "leader-election-1-replica",
                                      "defaults", "watch-namespaces"])
def test_peering_objects_exist_where_kopf_looks(chart_dir, scenario):
    values = SCENARIOS[scenario]
    docs = render(chart_dir, values)["docs"]
    peering = parse_operator_args(docs)["peering"]
    cluster, namespaced = of_kind(docs, "ClusterKopfPeering"), of_kind(docs, "KopfPeering")
    if peering is None:
        assert cluster == namespaced == []
    elif values.get("watchNamespaces"):  # kopf uses a KopfPeering in every namespace it serves
        assert cluster == []
        assert sorted((p["metadata"]["namespace"], p["metadata"]["name"]) for p in namespaced) == sorted(
            (ns, peering) for ns in values["watchNamespaces"])
    else:
        assert namespaced == [] and [p["metadata"]["name"] for p in cluster] == [peering]


# -- the operator pod -------------------------------------------------------------------------------
@pytest.mark.parametrize("scenario", ["defaults", "custom-pod", "annotations-and-service-off"])
def test_operator_pod(chart_dir, scenario):
    values = SCENARIOS[scenario]
    docs = render(chart_dir, values)["docs"]
    deployment = one(docs, "Deployment")
    pod = deployment["spec"]["template"]
    spec, container = pod["spec"], operator_container(docs)
    image = values.get("image", {})
    assert container["image"] == f"{image.get('repository', 'streamjob')}:{image.get('tag', '0.1.0')}"
    assert container["imagePullPolicy"] == image.get("pullPolicy", "IfNotPresent")
    # Security: the image's non-root user, nothing writable but /tmp, no capabilities.
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["runAsUser"] == resources.IMAGE_UID == 185
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    (mount,) = container["volumeMounts"]
    assert mount["mountPath"] == "/tmp"
    assert {"name": mount["name"], "emptyDir": {}} in spec["volumes"]
    # Probes on the health endpoint the --health-address serves.
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    for probe, path in (("livenessProbe", "/livez"), ("readinessProbe", "/healthz")):
        get = container[probe]["httpGet"]
        assert get["path"] == path and ports[get["port"]] == 8080
    # The Deployment selects its pods whatever podLabels say.
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert selector.items() <= pod["metadata"]["labels"].items()
    assert values.get("podLabels", {}).items() <= pod["metadata"]["labels"].items()
    annotations = pod["metadata"].get("annotations", {})
    assert values.get("podAnnotations", {}).items() <= annotations.items()
    scrape = {"prometheus.io/scrape": "true", "prometheus.io/port": "8080", "prometheus.io/path": "/metrics"}
    if values.get("metrics", {}).get("podAnnotations", {}).get("enabled", True):
        assert scrape.items() <= annotations.items()
    else:
        assert not set(scrape) & set(annotations)
    for key in ("resources", "nodeSelector", "tolerations", "affinity", "priorityClassName", "imagePullSecrets"):
        if key in values:
            assert (container if key == "resources" else spec)[key] == values[key]
    assert container.get("env", []) == values.get("env", [])
    assert spec["serviceAccountName"] == FULLNAME


# -- RBAC ---------------------------------------------------------------------------------------------
CLUSTER = None  # the scope of a ClusterRoleBinding's grants: every namespace, and cluster-scoped objects


def grants(docs: list[dict], account: str, namespace: str) -> set[tuple]:
    """Every (scope, apiGroup, resource, verb) bound to the service account: a ClusterRoleBinding
    grants its ClusterRole's rules everywhere (scope CLUSTER), a RoleBinding its Role's in its
    namespace. Rules must be plain (no resourceNames, no wildcards): the tests refuse others."""
    roles = {(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]): d.get("rules", [])
             for d in docs if d["kind"] in ("Role", "ClusterRole")}
    out = set()
    for binding in docs:
        if binding["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        if {"kind": "ServiceAccount", "name": account, "namespace": namespace} not in binding["subjects"]:
            continue
        scope = binding["metadata"].get("namespace") if binding["kind"] == "RoleBinding" else CLUSTER
        ref = binding["roleRef"]
        rules = roles[(ref["kind"], scope if ref["kind"] == "Role" else None, ref["name"])]
        for rule in rules:
            assert set(rule) == {"apiGroups", "resources", "verbs"}, rule  # no resourceNames/nonResourceURLs
            out |= {(scope, g, r, v) for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    return out


def allowed(granted: set[tuple], namespace: str | None, group: str, resource: str, verb: str) -> bool:
    return (CLUSTER, group, resource, verb) in granted or (
        namespace is not None and (namespace, group, resource, verb) in granted)


def _kind_resource(kind: str) -> tuple[str, str]:
    prefix, plural = kube._KINDS[kind]
    group = "" if prefix == "/api/v1" else prefix.split("/")[2]
    return group, plural


def operator_needs(peering: bool, namespaced: bool, owner_references_enforced: bool = False) -> dict[tuple, str]:
    """What the operator's code and kopf do, per (apiGroup, resource, verb), with why; derived from
    operator/kube.py where it can be, so a kind the operator starts to manage shows up here."""
    needs: dict[tuple, str] = {}
    for kind in kube._KINDS:
        if kind == "StreamJob":
            continue
        group, plural = _kind_resource(kind)
        needs[(group, plural, "create")] = "Kube.ensure creates it (POST)"
        if kind in kube._UPDATABLE:
            needs[(group, plural, "get")] = "Kube.ensure reads it to compare"
            needs[(group, plural, "update")] = "Kube.ensure replaces it (PUT)"
    needs |= {
        ("", "pods", "list"): "observer lists the job's driver pods by label",
        ("", "pods", "delete"): "DeletePod on redeploy / teardown",
        ("", "secrets", "get"): "the REST token and the user's S3 credentials (read_secret_value)",
        ("streamjob.io", "streamjobs", "list"): "kopf", ("streamjob.io", "streamjobs", "watch"): "kopf",
        ("streamjob.io", "streamjobs", "patch"): "kopf: finalizer and annotations",
        ("streamjob.io", "streamjobs", "get"): "reconcile_once re-reads after a conflict",
        ("streamjob.io", "streamjobs/status", "update"): "Kube.replace_status (PUT with resourceVersion)",
        ("streamjob.io", "streamjobs/status", "patch"): "kopf patches status",
        ("", "events", "create"): "kopf.event (POST core v1 events)",
    }
    # Escalation prevention: creating (and updating) the per-job driver Role needs every permission it grants.
    for rule in resources.DRIVER_ROLE_RULES:
        for g in rule["apiGroups"]:
            for r in rule["resources"]:
                for v in rule["verbs"]:
                    needs.setdefault((g, r, v), "granted by the per-job driver Role (DRIVER_ROLE_RULES)")
    if owner_references_enforced:
        # OwnerReferencesPermissionEnforcement: an ownerReference on an object needs delete on it,
        # blockOwnerDeletion (resources.owner_reference sets it) update on the owner's finalizers.
        assert resources.owner_reference(resources.Owner("n", "ns", "u"))["blockOwnerDeletion"] is True
        needs |= {(*_kind_resource(kind), "delete"): "owner reference on it" for kind in kube._KINDS
                  if kind != "StreamJob"}
        needs[("streamjob.io", "streamjobs/finalizers", "update")] = "blockOwnerDeletion"
    if peering:
        plural = "kopfpeerings" if namespaced else "clusterkopfpeerings"
        needs |= {("kopf.dev", plural, v): "kopf peering: watch heartbeats, patch ours"
                  for v in ("list", "watch", "patch")}
    return needs


def cluster_needs(namespaced: bool) -> set[tuple]:
    needs = {("apiextensions.k8s.io", "customresourcedefinitions", "list"),
             ("apiextensions.k8s.io", "customresourcedefinitions", "watch")}
    if namespaced:  # kopf's namespace observer runs only for a namespaced operator
        needs |= {("", "namespaces", "list"), ("", "namespaces", "watch")}
    return needs


RBAC_SCENARIOS = ["defaults", "watch-namespaces", "replicas-2", "replicas-2-namespaced", "leader-election-1-replica",
                  "owner-references-enforced"]


@pytest.mark.parametrize("scenario", RBAC_SCENARIOS)
def test_operator_rbac_is_exactly_what_the_code_needs(chart_dir, scenario):
    values = SCENARIOS[scenario]
    docs = render(chart_dir, values)["docs"]
    params = parse_operator_args(docs)
    granted = grants(docs, FULLNAME, NAMESPACE)
    watched = values.get("watchNamespaces", [])
    enforced = values.get("rbac", {}).get("ownerReferencesPermissionEnforcement", False)
    namespaced_needs = operator_needs(params["peering"] is not None, bool(watched), enforced)
    if watched:
        expected = {(CLUSTER, *need) for need in cluster_needs(True)}
        expected |= {(ns, *need) for ns in watched for need in namespaced_needs}
        # Nothing in a namespace it does not watch (the release namespace included).
        assert not allowed(granted, "elsewhere", "", "pods", "create")
        assert not allowed(granted, NAMESPACE, "", "secrets", "get")
    else:
        expected = {(CLUSTER, *need) for need in cluster_needs(False) | set(namespaced_needs)}
    missing, extra = expected - granted, granted - expected
    assert not missing, f"missing: {sorted(missing, key=str)}"
    assert not extra, f"more than needed: {sorted(extra, key=str)}"


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_no_wildcards_in_rbac(chart_dir, scenario):
    docs = render(chart_dir, SCENARIOS[scenario])["docs"]
    for role in docs:
        if role["kind"] not in ("Role", "ClusterRole"):
            continue
        assert role.get("rules")
        for rule in role["rules"]:
            for field, items in rule.items():
                assert "*" not in json.dumps(items), f"{role['metadata']['name']}: {field} {items}"
    if SCENARIOS[scenario].get("rbac", {}).get("create", True) is False:
        assert not [d for d in docs if d["kind"] in ("ClusterRole", "ClusterRoleBinding") or (
            d["kind"] in ("Role", "RoleBinding") and d["metadata"]["name"] == FULLNAME)]


@pytest.mark.parametrize("scenario", ["defaults", "watch-namespaces", "replicas-2-namespaced", "custom-pod",
                                      "driver-identity-only", "existing-accounts-no-rbac"])
def test_driver_accounts(chart_dir, scenario):
    values = SCENARIOS[scenario]
    docs = render(chart_dir, values)["docs"]
    fullname = values.get("fullnameOverride", FULLNAME)
    name = f"{fullname}-driver"
    namespaces = values.get("watchNamespaces") or [NAMESPACE]
    driver = values.get("driver", {})
    accounts = [d for d in of_kind(docs, "ServiceAccount") if d["metadata"]["name"] == name]
    if driver.get("serviceAccount", {}).get("create", True):
        assert sorted(a["metadata"]["namespace"] for a in accounts) == sorted(namespaces)
        for account in accounts:
            assert account["metadata"].get("annotations", {}) == driver.get("serviceAccount", {}).get("annotations", {})
    else:
        assert accounts == []
    if driver.get("rbac", {}).get("create", True):
        for ns in namespaces:
            granted = grants(docs, name, ns)
            expected = {(ns, g, r, v) for rule in resources.DRIVER_ROLE_RULES for g in rule["apiGroups"]
                        for r in rule["resources"] for v in rule["verbs"]}
            assert granted == expected  # the same rules the operator gives a mode: kubernetes job's driver
    else:
        assert not [d for d in docs if d["kind"] in ("Role", "RoleBinding") and d["metadata"]["name"] == name]


def test_operator_account_can_be_brought_along(chart_dir):
    docs = render(chart_dir, SCENARIOS["existing-accounts-no-rbac"])["docs"]
    assert [d["metadata"]["name"] for d in of_kind(docs, "ServiceAccount")] == []
    assert one(docs, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"] == "ops-made"
    with pytest.raises(helm.HelmError, match="serviceAccount.name"):
        render(chart_dir, {"serviceAccount": {"create": False}})


# -- metrics and monitoring -----------------------------------------------------------------------------
def test_metrics_service_selects_the_operator_pods(chart_dir):
    docs = render(chart_dir)["docs"]
    service = one(docs, "Service", f"{FULLNAME}-metrics")
    (port,) = service["spec"]["ports"]
    assert (port["name"], port["port"]) == ("metrics", 8080)
    pod = one(docs, "Deployment")["spec"]["template"]
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert port["targetPort"] in {p["name"] for p in operator_container(docs)["ports"]}
    assert not of_kind(docs, "ServiceMonitor") and not of_kind(docs, "PodMonitor")
    assert not of_kind(docs, "PrometheusRule") and not of_kind(docs, "ConfigMap")


def test_service_monitor_scrapes_the_metrics_service(chart_dir):
    docs = render(chart_dir, SCENARIOS["monitoring-all-on"])["docs"]
    monitor, service = one(docs, "ServiceMonitor"), one(docs, "Service", f"{FULLNAME}-metrics")
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]} and endpoint["path"] == "/metrics"
    # The operator's per-StreamJob series carry the StreamJob's `namespace`: it must not be renamed.
    assert endpoint["honorLabels"] is True
    with pytest.raises(helm.HelmError, match="metrics.service.enabled"):
        render(chart_dir, {"metrics": {"service": {"enabled": False}, "serviceMonitor": {"enabled": True}}})


@pytest.mark.parametrize("scenario", ["monitoring-all-on", "monitoring-namespaced"])
def test_pod_monitor_selects_the_driver_pods_the_operator_makes(chart_dir, scenario):
    values = SCENARIOS[scenario]
    monitor = one(render(chart_dir, values)["docs"], "PodMonitor")
    selector = monitor["spec"]["selector"]["matchLabels"]
    # The labels operator/resources.py gives a driver pod: every deployment's driver matches,
    # executors do not (they serve no /metrics).
    for n in (1, 7):
        assert selector.items() <= resources.driver_labels("any-job", n).items()
    assert not selector.items() <= resources.executor_labels("any-job").items()
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert dict(resources.PORTS)[endpoint["port"]] == resources.REST_PORT == 8081
    assert endpoint["path"] == "/metrics"
    assert endpoint["honorLabels"] is True  # a job's own `job` label (its name) is what the rules group by
    watched = values.get("watchNamespaces")
    assert monitor["spec"]["namespaceSelector"] == ({"matchNames": watched} if watched else {"any": True})


@pytest.mark.parametrize("scenario", ["monitoring-all-on", "monitoring-namespaced"])
def test_prometheus_rule_is_the_rules_file_as_is(chart_dir, scenario):
    rule = one(render(chart_dir, SCENARIOS[scenario])["docs"], "PrometheusRule")
    source = (chart_dir / RULES_FILE).read_text()
    # The same groups, to the character: templates like {{ $labels.pod }} are Prometheus', not Helm's.
    assert rule["spec"] == {"groups": yaml.safe_load(source)["groups"]}
    if "{{" in source:
        assert "{{" in json.dumps(rule["spec"])


def test_prometheus_rule_needs_the_rules_file(chart_dir, tmp_path):
    bare = tmp_path / CHART.name
    shutil.copytree(chart_dir, bare)
    (bare / RULES_FILE).unlink()
    with pytest.raises(helm.HelmError, match="alerts.rules.yaml"):
        render(bare, {"metrics": {"prometheusRule": {"enabled": True}}})
    listed = tmp_path / "listed" / CHART.name  # another directory: render() caches loaded charts by path
    shutil.copytree(chart_dir, listed)
    (listed / RULES_FILE).write_text("- just\n- a list\n")
    with pytest.raises(helm.HelmError, match="not a YAML mapping"):
        render(listed, {"metrics": {"prometheusRule": {"enabled": True}}})
    no_groups = tmp_path / "no-groups" / CHART.name
    shutil.copytree(chart_dir, no_groups)
    (no_groups / RULES_FILE).write_text("rule_files: []\n")
    with pytest.raises(helm.HelmError, match="no top-level groups"):
        render(no_groups, {"metrics": {"prometheusRule": {"enabled": True}}})
    # Off, nothing reads the file: the chart renders without it.
    assert not of_kind(render(bare)["docs"], "PrometheusRule")


@pytest.mark.parametrize("scenario", ["monitoring-all-on", "monitoring-namespaced"])
def test_dashboard_config_map(chart_dir, scenario):
    values = SCENARIOS[scenario]
    config_map = one(render(chart_dir, values)["docs"], "ConfigMap")
    dashboard = values["grafanaDashboard"]
    assert config_map["metadata"]["namespace"] == dashboard.get("namespace", NAMESPACE)
    assert dashboard.get("labels", {"grafana_dashboard": "1"}).items() <= config_map["metadata"]["labels"].items()
    assert config_map["metadata"].get("annotations", {}) == dashboard.get("annotations", {})
    source = (chart_dir / DASHBOARD_FILE).read_text()
    assert config_map["data"] == {"streamjob.json": source}
    json.loads(config_map["data"]["streamjob.json"])


# -- values and their schema ------------------------------------------------------------------------------
BAD_VALUES = {
    "unknown top-level key": {"replica": 2},
    "unknown nested key": {"metrics": {"serviceMonitor": {"enabled": True, "intervall": "30s"}}},
    "replicas not an integer": {"replicas": "2"},
    "namespace pattern (RBAC needs names)": {"watchNamespaces": ["team-*"]},
    "duplicate namespace": {"watchNamespaces": ["a", "a"]},
    "pull policy": {"image": {"pullPolicy": "Sometimes"}},
    "switch not a boolean": {"grafanaDashboard": {"enabled": "yes"}},
    "label value not a string": {"podLabels": {"tier": 1}},
    "bad duration": {"metrics": {"podMonitor": {"enabled": True, "interval": "30 seconds"}}},
    "negative timeout": {"operator": {"deleteTimeout": -1}},
    "no reconcile slot": {"operator": {"maxConcurrentReconciles": 0}},
}


@pytest.mark.parametrize("bad", BAD_VALUES)
def test_schema_refuses_bad_values_on_render(chart_dir, bad):
    with pytest.raises(helm.HelmValuesError):
        render(chart_dir, BAD_VALUES[bad])


def test_schema_is_strict_everywhere():
    """Every object node of values.schema.json that has properties refuses unknown keys, and every
    value in values.yaml has a schema node (so additionalProperties: false cannot refuse a default)."""
    schema = json.loads((CHART / "values.schema.json").read_text())

    def walk(node: dict, path: str) -> None:
        if "$ref" in node:
            node = schema["definitions"][node["$ref"].rsplit("/", 1)[1]]
        if "properties" in node:
            assert node.get("additionalProperties") is False, path
            for key, child in node["properties"].items():
                walk(child, f"{path}.{key}")

    walk(schema, "")
    _load(str(CHART)).validate_schema(_load(str(CHART)).values)


def _leaf_paths(values: dict, prefix: str = "") -> list[str]:
    out = []
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value and key not in ("resources", "podSecurityContext", "securityContext",
                                                              "labels"):
            out += _leaf_paths(value, path + ".")
        else:
            out.append(path)
    return out


def test_chart_readme_lists_every_value():
    readme = (CHART / "README.md").read_text()
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    undocumented = [p for p in _leaf_paths(values) if f"`{p}`" not in readme]
    assert undocumented == []


def test_notes(chart_dir):
    notes = render(chart_dir, SCENARIOS["replicas-2-namespaced"])["notes"]
    assert "kubectl get sj" in notes and "team-a, team-b" in notes and "KopfPeering" in notes
    assert "examples/k8s/" in notes
