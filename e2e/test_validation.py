"""What the API server itself refuses, from the CRD (crds/streamjob.io_streamjobs.yaml): schema
types and minimums, unknown fields (kubectl's default server-side field validation, Strict), and
the CEL rules (parallelism <= maxParallelism; maxParallelism fixed once set).

Mode independent: these never reach the operator. A Kubernetes API test server that validates
nothing (tests/kube/apiserver.py) is detected by a probe every real API server refuses, and the
test is skipped there saying so; the schema and CEL rules themselves are also tested offline
(tests/test_crd.py with jsonschema and cel-python).
"""

from __future__ import annotations

import pytest

from harness import streamjob, unique_name, wait_for

pytestmark = pytest.mark.timeout(300)


def test_api_server_refuses_invalid_specs(cluster, settings):
    created: list[str] = []

    def attempt(strict: bool = False, **spec):
        """Create a StreamJob with `spec` merged in (server-side dry run): the API error, or None."""
        name = unique_name("invalid", "any")
        body = streamjob(settings, name, "local", 10, 10, **spec)
        try:
            cluster.create(body, dry_run="All", field_validation="Strict" if strict else "Ignore")
        except cluster.ApiException as e:
            return e
        created.append(name)  # a server that ignores dryRun stored it: remove it below
        return None

    try:
        # A plain schema violation (parallelism has minimum 1) that every real API server refuses.
        probe = attempt(parallelism=0)
        if probe is None:
            pytest.skip(f"the API server at {cluster.host} does not validate custom resources (it accepted "
                        "spec.parallelism: 0 against the CRD's minimum 1): a test API server without schema/CEL "
                        "validation; tests/test_crd.py checks the schema and CEL rules offline")
        assert probe.status == 422, (probe.status, probe.body)
        assert "spec.parallelism" in probe.body, probe.body

        cel = attempt(parallelism=200, maxParallelism=128)
        assert cel is not None, "parallelism > maxParallelism was accepted: is the installed CRD older than crds/?"
        assert cel.status == 422 and "parallelism must not exceed maxParallelism" in cel.body, (cel.status, cel.body)

        # kubectl apply's default (--validate=strict): the server refuses fields the schema does not declare.
        unknown = attempt(strict=True, paralelism=3)
        assert unknown is not None, "an unknown field (spec.paralelism) was accepted with fieldValidation=Strict"
        assert unknown.status in (400, 422) and "unknown field" in unknown.body and "paralelism" in unknown.body, \
            (unknown.status, unknown.body)

        # maxParallelism is fixed for the job's life (a transition rule: needs a stored object). Created
        # suspended, so the operator deploys nothing for it.
        name = unique_name("invalid", "any")
        cluster.create(streamjob(settings, name, "local", 10, 10, state="suspended"))
        created.append(name)
        with pytest.raises(cluster.ApiException) as changed:
            cluster.patch(name, {"spec": {"maxParallelism": 256}})
        assert changed.value.status == 422 and "maxParallelism cannot change" in changed.value.body, changed.value.body
        assert cluster.get(name)["spec"]["maxParallelism"] == 128  # nothing changed
    finally:
        for name in created:
            cluster.delete(name)
        for name in created:
            wait_for(lambda: cluster.get(name) is None, 120 * settings.timeout_scale, f"{name} to be deleted")
