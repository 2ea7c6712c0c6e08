"""Every manifest in examples/k8s passes what the API server would check: the StreamJob CRD's
schema (strict: no unknown fields), its defaulting and CEL rules, and the models; other kinds
against the Kubernetes schemas."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import latest_version

from crd_schema import apply_defaults, cel_violations, strict_validator
from streamjob.operator.crd import openapi_schema
from streamjob.operator.model import StreamJobSpec

EXAMPLES = sorted((Path(__file__).parent.parent / "examples" / "k8s").glob("*.yaml"))
SCHEMA = openapi_schema()


def documents():
    for path in EXAMPLES:
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                yield pytest.param(doc, id=f"{path.name}:{doc['metadata']['name']}")


def test_there_are_examples_for_every_flow():
    specs = [d.values[0]["spec"] for d in documents() if d.values[0]["kind"] == "StreamJob"]
    assert {s.get("upgradeMode", "stateless") for s in specs} == {"stateless", "savepoint", "last-state"}
    assert {s.get("mode", "local") for s in specs} == {"local", "kubernetes"}


@pytest.mark.parametrize("doc", list(documents()))
def test_example_is_accepted(doc):
    if doc["kind"] != "StreamJob":
        kubernetes_validate.validate(doc, latest_version(), strict=True)
        return
    obj = apply_defaults(doc, SCHEMA)
    errors = [e.message for e in strict_validator(SCHEMA).iter_errors(obj)]
    assert errors == [] and cel_violations(SCHEMA, obj) == []
    StreamJobSpec.model_validate(obj["spec"])


def test_the_kafka_example_takes_its_address_and_login_from_a_secret():
    """examples/k8s/kafka-click-counts.yaml: the driver pod the operator renders gets the bootstrap
    address and the SASL login as env from the Secret of the same file (nothing secret in the spec),
    and the job file reads those names."""
    from streamjob.operator import resources as r

    path = Path(__file__).parent.parent / "examples" / "k8s" / "kafka-click-counts.yaml"
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    secret = next(d for d in docs if d["kind"] == "Secret")
    job = next(d for d in docs if d["kind"] == "StreamJob")
    spec = StreamJobSpec.model_validate(apply_defaults(job, SCHEMA)["spec"])
    pod = r.driver_pod(r.Owner(job["metadata"]["name"], "default", "uid-1"), spec, r.DeploymentTarget(1, 2))
    env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
    refs = {name: env[name]["valueFrom"]["secretKeyRef"] for name in
            ("KAFKA_BOOTSTRAP_SERVERS", "KAFKA_SASL_USERNAME", "KAFKA_SASL_PASSWORD")}
    assert {ref["name"] for ref in refs.values()} == {secret["metadata"]["name"]}
    assert {ref["key"] for ref in refs.values()} <= set(secret["stringData"])
    assert secret["stringData"]["password"] not in path.read_text().split("---", 1)[1]
    job_file = (path.parent.parent / Path(spec.job.file).name).read_text()
    assert all(f'"{name}"' in job_file for name in refs)
