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
