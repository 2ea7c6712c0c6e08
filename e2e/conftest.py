"""Fixtures of the e2e suite: the cluster $KUBECONFIG names (skipped, with the reason, when there
is none or it cannot be reached), the object store, the deployment modes, and clean-up.

Run: `pytest e2e` (settings by environment: e2e/README.md). `-m "not kubernetes_mode"` or
E2E_MODES=local leaves out mode kubernetes (a cluster that cannot run Spark executor pods).
"""

from __future__ import annotations

import os
import socket
import urllib.parse

import pytest

from harness import Cluster, Settings, Store, unique_name, wait_for

MODES = ("local", "kubernetes")


def pytest_configure(config):
    config.addinivalue_line("markers", "kubernetes_mode: runs the job with mode kubernetes (Spark executor pods)")
    config.addinivalue_line("markers", "e2e: needs a cluster (KUBECONFIG), the operator and the image")


def pytest_generate_tests(metafunc):
    """Every test that takes `mode` runs in both deployment modes."""
    if "mode" in metafunc.fixturenames:
        # indirect: the `mode` fixture below decides whether the mode was selected (E2E_MODES).
        metafunc.parametrize("mode", [pytest.param(m, marks=[pytest.mark.kubernetes_mode] if m == "kubernetes" else [])
                                      for m in MODES], indirect=True)


def pytest_collection_modifyitems(items):
    for item in items:
        item.add_marker(pytest.mark.e2e)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test's report gets the cluster's side: each of its StreamJobs' status, events,
    pods and their logs (before the clean-up deletes them)."""
    report = yield
    tracker = getattr(item, "e2e_jobs", None)
    if report.when == "call" and report.failed and tracker is not None:
        for name in tracker.names:
            try:
                text = tracker.cluster.describe(name)
            except Exception as e:  # noqa: BLE001 - the report must not fail for it
                text = f"(could not describe {name}: {e!r})"
            report.sections.append((f"cluster state of {name}", text))
    return report


@pytest.fixture(scope="session")
def settings() -> Settings:
    return Settings()


def _kubeconfig() -> str | None:
    path = os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or os.path.expanduser("~/.kube/config")
    return path if os.path.isfile(path) else None


@pytest.fixture(scope="session")
def cluster(settings) -> Cluster:
    """The cluster, or a skip that says why there is none: no kubeconfig, or an API server that
    does not answer. A cluster that answers but lacks the StreamJob CRD is a failed set-up, not a
    skip (a suite that silently skips on a broken cluster would prove nothing)."""
    kubeconfig = _kubeconfig()
    if kubeconfig is None:
        pytest.skip("no cluster: KUBECONFIG is not set (or names no file) and ~/.kube/config does not exist; "
                    "see e2e/README.md")
    try:
        c = Cluster(settings, kubeconfig)
    except Exception as e:  # noqa: BLE001 - a kubeconfig the client cannot use
        pytest.skip(f"no cluster: the kubeconfig {kubeconfig} cannot be used: {type(e).__name__}: {e}")
    url = urllib.parse.urlsplit(c.host)
    try:  # a quick TCP check first: the client's own retries take long on a dead address
        socket.create_connection((url.hostname, url.port or (443 if url.scheme == "https" else 80)), timeout=5).close()
        # Listing StreamJobs tells both: the API server answers, and it serves the CRD.
        c.custom.list_namespaced_custom_object("streamjob.io", "v1alpha1", settings.namespace, "streamjobs",
                                               limit=1, _request_timeout=10)
    except c.ApiException as e:
        if e.status == 404:
            pytest.fail(f"the cluster at {c.host} serves no StreamJobs: install the CRD (kubectl apply -f crds/) "
                        "and run the operator (e2e/README.md)", pytrace=False)
        if e.status in (502, 503, 504):
            pytest.skip(f"no cluster: the API server at {c.host} (from {kubeconfig}) is unavailable: {e.status} {e.reason}")
        raise  # it answers, but refuses us (401/403): a broken set-up, not a missing cluster
    except Exception as e:  # noqa: BLE001 - refused, timed out, TLS, DNS: nothing answers there
        pytest.skip(f"no cluster: the API server at {c.host} (from {kubeconfig}) cannot be reached: "
                    f"{type(e).__name__}: {e}")
    c.ensure_namespace()
    return c


@pytest.fixture(scope="session")
def store(settings, cluster) -> Store:
    """The bucket, and the Secret with its credentials that the StreamJobs name in spec.s3."""
    if not settings.s3_configured:
        pytest.skip("no object store: set E2E_S3_ENDPOINT (and E2E_S3_BUCKET, credentials): the job's output, "
                    "checkpoints and savepoints are on S3 (see e2e/README.md)")
    s = Store(settings)
    s.ensure_bucket()
    cluster.put_secret(settings.s3_secret, {"access-key-id": settings.s3_access_key,
                                            "secret-access-key": settings.s3_secret_key})
    return s


@pytest.fixture(scope="session")
def kafka(settings, cluster) -> str:
    """The Kafka cluster's bootstrap address as this process reaches it; its address (as the pods
    reach it) and login go into the Secret the Kafka StreamJobs name (keys bootstrap-servers,
    username, password)."""
    if not settings.kafka_bootstrap:
        pytest.skip("no Kafka: set E2E_KAFKA_BOOTSTRAP (and E2E_KAFKA_USERNAME / E2E_KAFKA_PASSWORD for a "
                    "cluster that wants a SASL login) to run the Kafka scenario (see e2e/README.md)")
    data = {"bootstrap-servers": settings.kafka_bootstrap}
    if settings.kafka_username:
        data.update({"username": settings.kafka_username, "password": settings.kafka_password})
    cluster.put_secret(settings.kafka_secret, data)
    return settings.kafka_test_bootstrap


@pytest.fixture
def mode(request, settings) -> str:
    m = request.param
    if m not in settings.modes:
        pytest.skip(f"mode {m} not selected: E2E_MODES={','.join(settings.modes)} (set it to include {m} on a "
                    f"cluster that can run Spark's executor pods)")
    return m


@pytest.fixture
def jobs(request, settings, cluster, store):
    """Names for this test's StreamJobs (`jobs.new(scenario, mode)`); afterwards they are deleted,
    with their S3 prefix (unless E2E_KEEP=1); a failure's report shows their state."""

    class Jobs:
        def __init__(self) -> None:
            self.names: list[str] = []
            self.cluster = cluster

        def new(self, scenario: str, mode: str) -> str:
            name = unique_name(scenario, mode)
            self.names.append(name)
            return name

    tracker = request.node.e2e_jobs = Jobs()
    yield tracker
    for name in tracker.names:
        if settings.keep:
            continue
        cluster.delete(name)
        try:
            wait_for(lambda: cluster.get(name) is None, 120 * settings.timeout_scale, f"{name} to be deleted")
        except AssertionError as e:
            print(f"clean-up: {e}")
        store.delete_prefix(f"{name}/")
