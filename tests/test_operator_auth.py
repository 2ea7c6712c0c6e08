"""The operator authenticates with every credential the kubernetes client supports.

The operator's calls go through its own aiohttp layer (operator/kube.py) with the client's
configuration only, so the header it sends is ours to get right: with kubernetes 37.x the client
keeps the token under "BearerToken", and reading it under its old name sent no token at all (the
chart's operator got 401 on every call). The test API server here refuses requests without known
credentials, as a real one does; its TLS port checks client certificates against its own CA.
What it cannot show: token review against ServiceAccounts (the server knows a fixed set of tokens)
and RBAC (403); both are the cluster's, not the operator's, part.
"""

from __future__ import annotations

import asyncio
import json
import sys

import kubernetes
import pytest
from kube.apiserver import KubeAPI

from streamjob.operator.kube import Kube, KubeError

POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "auth-probe", "namespace": "default"},
       "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


@pytest.fixture(scope="module")
def tls_api():
    with KubeAPI(tls=True) as api:
        yield api


async def _round_trip(kube: Kube) -> list[str]:
    """A write and two reads, as a reconcile does them."""
    try:
        await kube.ensure(dict(POD))
        got = await kube.get("Pod", "default", "auth-probe")
        listed = await kube.list("Pod", "default", "")
        await kube.delete("Pod", "default", "auth-probe")
        return [got["metadata"]["name"], *(p["metadata"]["name"] for p in listed)]
    finally:
        await kube.close()


def _from_kubeconfig(path: str) -> Kube:
    return Kube(kubernetes.config.new_client_from_config(config_file=path))


def test_requests_without_credentials_are_refused(tls_api, tmp_path):
    """The server side of every test below: no token, or a wrong one, is a 401 that changes nothing."""
    anonymous = tls_api.write_kubeconfig(tmp_path / "anon", user={}, default=False)
    with pytest.raises(KubeError) as e:
        asyncio.run(_round_trip(_from_kubeconfig(anonymous)))
    assert e.value.status == 401
    wrong = tls_api.write_kubeconfig(tmp_path / "wrong", user={"token": "not-a-token"}, default=False)
    with pytest.raises(KubeError) as e:
        asyncio.run(_round_trip(_from_kubeconfig(wrong)))
    assert e.value.status == 401
    assert ("POST", "/api/v1/namespaces/default/pods", "no credentials") in tls_api.emulator.unauthorized
    assert tls_api.objects.get("pods", "default", "auth-probe") is None


def test_token_kubeconfig(tls_api, tmp_path):
    path = tls_api.write_kubeconfig(tmp_path / "kubeconfig", default=False)
    assert asyncio.run(_round_trip(_from_kubeconfig(path))) == ["auth-probe", "auth-probe"]


def test_token_kubeconfig_over_tls(tls_api, tmp_path):
    path = tls_api.write_kubeconfig(tmp_path / "kubeconfig", tls=True, default=False)
    assert asyncio.run(_round_trip(_from_kubeconfig(path))) == ["auth-probe", "auth-probe"]


def test_exec_plugin_kubeconfig(tls_api, tmp_path):
    """An exec credential plugin (as cloud providers' kubeconfigs use): the client runs it for a token."""
    credential = {"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                  "status": {"token": KubeAPI.TOKEN}}
    user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
                     "args": ["-c", f"print({json.dumps(json.dumps(credential))})"], "interactiveMode": "Never"}}
    path = tls_api.write_kubeconfig(tmp_path / "kubeconfig", user=user, tls=True, default=False)
    assert asyncio.run(_round_trip(_from_kubeconfig(path))) == ["auth-probe", "auth-probe"]


def test_client_certificate_kubeconfig(tls_api, tmp_path):
    pki = tls_api.pki
    user = {"client-certificate": pki.client_cert, "client-key": pki.client_key}
    path = tls_api.write_kubeconfig(tmp_path / "kubeconfig", user=user, tls=True, default=False)
    assert asyncio.run(_round_trip(_from_kubeconfig(path))) == ["auth-probe", "auth-probe"]


def test_in_cluster_service_account(tls_api, tmp_path):
    """What the Helm chart's operator pod does: KUBERNETES_SERVICE_HOST/PORT, the mounted token and
    CA (the loader reads them from files; here from a temporary directory instead of
    /var/run/secrets/kubernetes.io/serviceaccount, which is the loader's only difference)."""
    from kubernetes.config.incluster_config import InClusterConfigLoader

    token, ca = tmp_path / "token", tmp_path / "ca.crt"
    token.write_text(KubeAPI.TOKEN)
    ca.write_bytes(open(tls_api.pki.ca_cert, "rb").read())
    port = tls_api.tls_url.rsplit(":", 1)[1]
    configuration = kubernetes.client.Configuration()
    InClusterConfigLoader(token_filename=str(token), cert_filename=str(ca),
                          environ={"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": port},
                          ).load_and_set(configuration)
    assert configuration.host == tls_api.tls_url
    kube = Kube(kubernetes.client.ApiClient(configuration))
    assert asyncio.run(_round_trip(kube)) == ["auth-probe", "auth-probe"]
