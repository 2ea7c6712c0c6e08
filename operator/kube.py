"""Kubernetes API I/O of the operator: the only module that talks to the API server (besides kopf).

A thin async layer (aiohttp, with the official ``kubernetes`` client's
configuration: kubeconfig or in-cluster service account): read and list, create-if-absent, replace-if-changed,
delete-if-present, and the StreamJob status write — a *replace* of the status
subresource carrying the resourceVersion the decision was based on, so a
decision made on stale data is refused (409) instead of overwriting newer
status (a blind merge patch would).
"""

from __future__ import annotations

import json
import ssl
from typing import Any

import aiohttp
import kubernetes

from .model import PLURAL
from .version import API_GROUP, API_VERSION

# kind -> (path prefix of its API group/version, plural): the objects a StreamJob owns.
_KINDS = {
    "Pod": ("/api/v1", "pods"),
    "Service": ("/api/v1", "services"),
    "ConfigMap": ("/api/v1", "configmaps"),
    "Secret": ("/api/v1", "secrets"),
    "ServiceAccount": ("/api/v1", "serviceaccounts"),
    "Role": ("/apis/rbac.authorization.k8s.io/v1", "roles"),
    "RoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "rolebindings"),
    "StreamJob": (f"/apis/{API_GROUP}/{API_VERSION}", PLURAL),
}
# Objects whose content may follow the spec; a pod is replaced by a new deployment instead, a
# Secret's token is made once and never rotated under a running job.
_UPDATABLE = {"Service", "ConfigMap", "ServiceAccount", "Role", "RoleBinding"}


class Conflict(Exception):
    """The object changed since it was read: decide again on fresh data."""


class KubeError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(f"{status}: {message}")
        self.status = status


def configure() -> kubernetes.client.ApiClient:
    """In a pod: the service account; elsewhere: the kubeconfig (KUBECONFIG or ~/.kube/config)."""
    try:
        kubernetes.config.load_incluster_config()
    except kubernetes.config.ConfigException:
        kubernetes.config.load_kube_config()
    return kubernetes.client.ApiClient()


class Kube:
    def __init__(self, client: kubernetes.client.ApiClient | None = None):
        # The official client only for its configuration (kubeconfig, in-cluster token and CA); the
        # calls go through aiohttp on the operator's own loop: no thread per request (measured with
        # bench/operator_scale.py, the blocking client in threads was a third of the operator's CPU).
        self.config = (client or configure()).configuration
        self._session: aiohttp.ClientSession | None = None

    def _ssl(self) -> ssl.SSLContext | bool:
        c = self.config
        if not c.host.startswith("https"):
            return False
        context = ssl.create_default_context(cafile=c.ssl_ca_cert) if c.ssl_ca_cert else ssl.create_default_context()
        if c.cert_file:
            context.load_cert_chain(c.cert_file, c.key_file)
        if not c.verify_ssl:
            context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        return context

    def _headers(self, content_type: str) -> dict[str, str]:
        headers = {"Accept": "application/json", "Content-Type": content_type}
        # The client's own auth settings, as its generated API classes apply them: where it keeps the
        # token moved between releases ("authorization" up to 2x.x, "BearerToken" since), and reading
        # a key by name sent no token at all with the newer client (every in-cluster request got 401).
        # Reading it runs the refresh hook: a rotated service-account token or an exec plugin's
        # expired credential is renewed here.
        for setting in self.config.auth_settings().values():
            if setting.get("in") == "header" and setting.get("value"):
                headers[setting["key"].title()] = setting["value"]
        if "Authorization" not in headers and self.config.username:
            headers["Authorization"] = self.config.get_basic_auth_token()
        return headers

    # -- raw calls ---------------------------------------------------------------------------------
    async def _call(self, method: str, path: str, body: Any = None, query: list | None = None,
                    content_type: str = "application/json") -> Any:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=self._ssl(), limit=32),
                                                  timeout=aiohttp.ClientTimeout(total=30))
        url = self.config.host.rstrip("/") + path
        data = None if body is None else json.dumps(body)
        async with self._session.request(method, url, params=query or None, data=data,
                                         headers=self._headers(content_type)) as response:
            raw = await response.read()
            status, reason = response.status, response.reason
        if status == 409:
            raise Conflict(_message(raw, reason))
        if status >= 400:
            raise KubeError(status, _message(raw, reason))
        return json.loads(raw) if raw else None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    @staticmethod
    def path(kind: str, namespace: str, name: str | None = None, sub: str | None = None) -> str:
        prefix, plural = _KINDS[kind]
        path = f"{prefix}/namespaces/{namespace}/{plural}"
        return path + (f"/{name}" if name else "") + (f"/{sub}" if sub else "")

    # -- objects -------------------------------------------------------------------------------------
    async def get(self, kind: str, namespace: str, name: str) -> dict | None:
        try:
            return await self._call("GET", self.path(kind, namespace, name))
        except KubeError as e:
            if e.status == 404:
                return None
            raise

    async def list(self, kind: str, namespace: str, selector: str) -> list[dict]:
        data = await self._call("GET", self.path(kind, namespace), query=[("labelSelector", selector)])
        return list((data or {}).get("items") or [])

    async def ensure(self, obj: dict) -> str:
        """Create ``obj`` if absent; bring an updatable one in line if it differs. Returns what it did.
        Creating first: a new job's objects cost one request each, an existing one a read more."""
        kind, meta = obj["kind"], obj["metadata"]
        try:
            await self._call("POST", self.path(kind, meta["namespace"]), obj)
            return "created"
        except Conflict:
            pass  # it exists (made before a restart, or by an earlier deployment)
        if kind not in _UPDATABLE:
            return "exists"
        current = await self.get(kind, meta["namespace"], meta["name"])
        if current is not None and _differs(obj, current):
            body = json.loads(json.dumps(obj))
            body["metadata"]["resourceVersion"] = current["metadata"].get("resourceVersion")
            await self._call("PUT", self.path(kind, meta["namespace"], meta["name"]), body)
            return "updated"
        return "unchanged"

    async def delete(self, kind: str, namespace: str, name: str, grace_seconds: int | None = None) -> bool:
        """Delete if present; False when it was not there."""
        body = {"propagationPolicy": "Background"}
        if grace_seconds is not None:
            body["gracePeriodSeconds"] = grace_seconds
        try:
            await self._call("DELETE", self.path(kind, namespace, name), body)
            return True
        except KubeError as e:
            if e.status == 404:
                return False
            raise

    async def replace_status(self, body: dict, status: dict) -> dict:
        """PUT the StreamJob's status subresource, conditional on the resourceVersion in ``body``."""
        meta = body["metadata"]
        new = {"apiVersion": f"{API_GROUP}/{API_VERSION}", "kind": "StreamJob",
               "metadata": {"name": meta["name"], "namespace": meta["namespace"],
                            "resourceVersion": meta.get("resourceVersion")},
               "spec": body.get("spec", {}), "status": status}
        return await self._call("PUT", self.path("StreamJob", meta["namespace"], meta["name"], "status"), new)

    async def read_secret_value(self, namespace: str, name: str, key: str) -> str | None:
        import base64

        secret = await self.get("Secret", namespace, name)
        if secret is None:
            return None
        if key in (secret.get("stringData") or {}):  # an API server test double may keep stringData as given
            return secret["stringData"][key]
        raw = (secret.get("data") or {}).get(key)
        return None if raw is None else base64.b64decode(raw).decode()


def _differs(desired: dict, current: dict) -> bool:
    """Does ``current`` lack something ``desired`` states? (The API server adds fields of its own.)"""
    def covered(want: Any, have: Any) -> bool:
        if isinstance(want, dict):
            return isinstance(have, dict) and all(covered(v, have.get(k)) for k, v in want.items())
        if isinstance(want, list):
            return isinstance(have, list) and len(want) == len(have) and all(map(covered, want, have))
        return want == have

    desired = {k: v for k, v in desired.items() if k != "metadata"} | {
        "metadata": {k: desired["metadata"].get(k) for k in ("labels", "annotations") if k in desired["metadata"]}}
    return not covered(desired, current)


def _message(raw: Any, reason: Any) -> str:
    """The API server's Status message of an error response, else the HTTP reason."""
    try:
        return json.loads(raw or "{}").get("message") or str(reason)
    except (ValueError, AttributeError, TypeError):
        return str(reason)
