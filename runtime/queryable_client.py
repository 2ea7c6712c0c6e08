"""``QueryableStateClient``: Flink's queryable state client, over the job's queryable state proxy
port or its REST API.

    client = QueryableStateClient("127.0.0.1", 9069)              # the proxy (Flink's shape: host, port)
    client = QueryableStateClient("http://127.0.0.1:8081")         # the REST API
    count = client.get_kv_state(job_id, "clicks", "user-42", Types.STRING(), ValueStateDescriptor("count", Types.LONG()))

The proxy (``queryable-state.proxy.ports``, cluster/query_proxy.py) keeps one connection open and
costs the job manager a fraction of an HTTP request; ``/v1/job`` names its port
(``queryable_state_proxy_port``). Both answer the same. Given the job's key type (``key_type_info``),
the proxy's client sends live lookups straight to the subtasks that own the keys (Flink's client asks
a proxy on a TaskManager, which forwards to the state's server: one hop less here).

PyFlink never shipped a client; the names and the argument order are the Java client's
(``getKvState(jobId, queryableStateName, key, keyTypeInfo, stateDescriptor)``), with its blocking
result instead of a future. It returns the state's value as the state object would (``None`` where
the key has none): a ``Row`` for a row type, a tuple for a tuple type, a dict for a map state, a list
for a list state; other values as JSON gives them.
"""

from __future__ import annotations

import itertools
import socket
import threading
import urllib.parse
from typing import Any

from . import queryable_frames as frames
from .api.queryable import KeyTypeError, convert_key, to_json
from .api.types import Row, RowTypeInfo, _Composite
from .keygroups import assign_to_key_group, operator_index_for_key_group
from .rest_client import RestError, call

CONNECT_TIMEOUT_S = 1.0  # to a subtask's lookup port; then the proxy answers
_NOT_GIVEN = object()  # lookup() without the job's key type: through the proxy, which knows it


class QueryableStateClient:
    def __init__(self, address: str, port: int | None = None, token: str | None = None, timeout: float = 30.0):
        """``address``: the job manager's REST API (an ``http(s)://`` URL: ``streamjob run`` and ``streamjob
        list`` print it; on Kubernetes the job's Service), or the host of its queryable state proxy with
        ``port`` (or ``host:port``); ``token``: the job's rest.auth.token, if it sets one."""
        if isinstance(port, str) and token is None and not port.isdigit():
            port, token = None, port  # the earlier signature: (address, token)
        self.address = address
        self.token = token or ""
        self.timeout = timeout
        self._job_id: str | None = None
        self._proxy: _ProxyConnection | None = None
        if not address.startswith(("http://", "https://")):
            host, sep, tail = address.rpartition(":")
            if port is None and sep and tail.isdigit():
                address, port = host.strip("[]"), int(tail)
            if port is None:
                raise ValueError(f"QueryableStateClient({address!r}): give the REST API's URL (http://HOST:PORT) or "
                                 f"the proxy's host and port")
            self._proxy = _ProxyConnection(address, int(port), self.token, timeout)

    def get_kv_state(self, job_id: str | None, queryable_state_name: str, key: Any, key_type_info: Any = None,
                     state_descriptor: Any = None, consistency: str = "live") -> Any:
        """The value of ``key`` in the job's queryable state (None: the key has none)."""
        return self.get_kv_states(job_id, queryable_state_name, [key], key_type_info, state_descriptor,
                                  consistency)[0]

    def get_kv_states(self, job_id: str | None, queryable_state_name: str, keys: list, key_type_info: Any = None,
                      state_descriptor: Any = None, consistency: str = "live") -> list:
        """The values of many keys in one request, in the order given."""
        doc = self.lookup(job_id, queryable_state_name, keys, consistency, key_type_info)
        value_type = _value_type(state_descriptor)
        return [_from_json(r["value"], value_type) if r.get("found") else None for r in doc["results"]]

    def lookup(self, job_id: str | None, queryable_state_name: str, keys: list, consistency: str = "live",
               key_type_info: Any = _NOT_GIVEN) -> dict:
        """The API's whole answer: per key its value (JSON), key group, subtask and checkpoint. With the
        job's ``key_type_info`` (None for a job keyed without one), the proxy's client asks the owning
        subtasks directly."""
        if self._proxy is not None:
            return self._proxy.lookup(job_id, queryable_state_name, [to_json(k) for k in keys], consistency,
                                      key_type_info)
        self._check_job(job_id)
        name = urllib.parse.quote(queryable_state_name, safe="")
        return call(self.address, self.token, "POST", f"/v1/state/{name}",
                    {"keys": [to_json(k) for k in keys], "consistency": consistency}, timeout=self.timeout)

    def close(self) -> None:
        if self._proxy is not None:
            self._proxy.close()

    def __enter__(self) -> "QueryableStateClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _check_job(self, job_id: str | None) -> None:
        """A job id (as Flink's client takes one) must be the job this address serves: a lookup must never
        answer from another job that happens to run there now."""
        if job_id is None:
            return
        if self._job_id is None:
            self._job_id = call(self.address, self.token, "GET", "/v1/job?peek=true", timeout=self.timeout)["id"]
        if str(job_id) != self._job_id:
            raise RestError(f"{self.address} serves job {self._job_id}, not {job_id}", 404)


class _ProxyConnection:
    """The queryable state proxy (cluster/query_proxy.py), opened at the first lookup and again after it
    broke; one request at a time from this client (callers on several threads take turns).

    Live lookups go to the subtasks that own the keys, on their own lookup ports, when this client can
    hash the keys as the job does (the ``key_type_info`` given is the job's: same type, same key
    groups): the proxy names the ports once (``route``), and the job manager is out of the path (its CPU
    and a hop). Anything unexpected on that path (a subtask gone after a restart, a key it does not own,
    another key type) sends the request through the proxy instead, which answers or says why not."""

    def __init__(self, host: str, port: int, token: str, timeout: float):
        self.host, self.port, self.token, self.timeout = host, port, token, timeout
        self.sock: socket.socket | None = None
        self.job_id: str | None = None
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._routes: dict[str, dict] = {}
        self._tasks: dict[tuple, socket.socket] = {}
        self._unreachable: set[tuple] = set()  # (host, port) of subtask ports a connection failed to

    def lookup(self, job_id: str | None, name: str, keys: list, consistency: str, key_type_info: Any = _NOT_GIVEN
               ) -> dict:
        with self._lock:
            sock = self._connect()
            if job_id is not None and str(job_id) != self.job_id:
                raise RestError(f"{self.host}:{self.port} serves job {self.job_id}, not {job_id}", 404)
            if consistency == "live" and key_type_info is not _NOT_GIVEN:
                doc = self._direct(name, keys, key_type_info)
                if doc is not None:
                    return doc
            return self._ask(sock, {"name": name, "keys": keys, "consistency": consistency})

    def _ask(self, sock: socket.socket, request: dict) -> dict:
        rid = request["id"] = next(self._ids)
        try:
            sock.sendall(frames.encode(request))
            doc = frames.recv(sock)
        except (OSError, ValueError) as e:
            self.close()
            raise RestError(f"queryable state proxy {self.host}:{self.port}: {e}", 503) from None
        if doc.pop("id", None) != rid:
            self.close()
            raise RestError(f"queryable state proxy {self.host}:{self.port}: an answer to another request", 502)
        status = int(doc.pop("status", 500))
        if status != 200:
            raise RestError(str(doc.get("error")), status)
        return doc

    # -- straight to the subtasks ----------------------------------------------------------------
    def _direct(self, name: str, keys: list, key_type_info: Any) -> dict | None:
        """The answer from the owning subtasks, or None: ask the proxy."""
        route = self._routes.get(name)
        if route is None:
            try:
                route = self._routes[name] = self._ask(self._connect(), {"route": name})
            except RestError:
                return None  # the proxy's own answer to the lookup says why
        if None in route["subtasks"]:  # a subtask of a (re)starting attempt not yet listening: ask again later
            self._routes.pop(name, None)
            return None
        if route.get("key_type") != repr(key_type_info) \
                or any(tuple(where[:2]) in self._unreachable for where in route["subtasks"]):
            return None
        max_p, p = int(route["max_parallelism"]), int(route["parallelism"])
        by_subtask: dict[int, list[int]] = {}
        try:
            for i, raw in enumerate(keys):
                group = assign_to_key_group(convert_key(raw, key_type_info), max_p)
                by_subtask.setdefault(operator_index_for_key_group(max_p, p, group), []).append(i)
        except (KeyTypeError, TypeError):
            return None  # the proxy says what is wrong with the key
        results: list = [None] * len(keys)
        try:
            asked = []
            for subtask, indexes in by_subtask.items():
                sock = self._task(route["subtasks"][subtask])
                rid = next(self._ids)
                sock.sendall(frames.encode({"id": rid, "name": name, "keys": [keys[i] for i in indexes]}))
                asked.append((subtask, indexes, sock, rid))
            for subtask, indexes, sock, rid in asked:
                doc = frames.recv(sock)
                if doc.get("id") != rid or doc.get("status") != 200 or len(doc["results"]) != len(indexes):
                    raise ConnectionError(f"subtask {subtask}: {doc.get('error')}")
                for i, r in zip(indexes, doc["results"]):
                    if "error" in r:  # not its key group: routed by an older route
                        raise ConnectionError(r["error"])
                    r.update(subtask=subtask, checkpoint=doc.get("checkpoint"))
                    results[i] = r
        except (OSError, ValueError):
            self._forget(name)
            return None
        return {"name": name, "operator": route["operator"], "uid": route["uid"], "kind": route["kind"],
                "consistency": "live", "results": results}

    def _task(self, where: list) -> socket.socket:
        key = tuple(where)
        sock = self._tasks.get(key)
        if sock is None:
            host, port, ticket = where
            try:
                sock = socket.create_connection((host, int(port)), timeout=min(self.timeout, CONNECT_TIMEOUT_S))
            except ConnectionRefusedError:
                raise  # reachable, but that subtask is gone (a restart): the route is asked again
            except OSError:
                # Not reachable from here (a pod IP seen through kubectl port-forward): the proxy it is,
                # for as long as this subtask runs there.
                self._unreachable.add((host, port))
                raise
            sock.settimeout(self.timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._tasks[key] = sock
            sock.sendall(frames.encode({"ticket": ticket}))
            hello = frames.recv(sock)
            if "status" in hello:
                raise ConnectionError(str(hello.get("error")))
        return sock

    def _forget(self, name: str) -> None:
        """A route that failed: its subtasks' connections closed, asked again next time."""
        route = self._routes.pop(name, None)
        for where in (route or {}).get("subtasks") or ():
            sock = self._tasks.pop(tuple(where), None) if where else None
            if sock is not None:
                sock.close()

    # -- the proxy connection --------------------------------------------------------------------
    def _connect(self) -> socket.socket:
        if self.sock is not None:
            return self.sock
        try:
            sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.sendall(frames.encode({"token": self.token}))
            hello = frames.recv(sock)
        except (OSError, ValueError) as e:
            raise RestError(f"cannot reach the queryable state proxy at {self.host}:{self.port}: {e}", 503) from None
        if "status" in hello:
            sock.close()
            raise RestError(str(hello.get("error")), int(hello["status"]))
        self.sock, self.job_id = sock, str(hello.get("job_id"))
        return sock

    def close(self) -> None:
        for name in list(self._routes):
            self._forget(name)
        if self.sock is not None:
            try:
                self.sock.close()
            finally:
                self.sock = None


def _value_type(descriptor: Any) -> Any:
    if descriptor is None:
        return None
    t = getattr(descriptor, "type_info", None)
    return t[1] if descriptor.kind == "map" and isinstance(t, tuple) else t


def _from_json(value: Any, type_info: Any) -> Any:
    """A value back in the shape its type says (JSON has no rows or tuples)."""
    if value is None or type_info is None:
        return value
    if isinstance(value, list) and not isinstance(type_info, (RowTypeInfo, _Composite)):
        return value
    if isinstance(type_info, RowTypeInfo):
        if isinstance(value, dict):
            row = Row(*[_from_json(value.get(n), t) for n, t in zip(type_info.field_names, type_info.field_types)])
            object.__setattr__(row, "_fields", list(type_info.field_names))
            return row
        if isinstance(value, list):
            return Row(*[_from_json(v, t) for v, t in zip(value, type_info.field_types)])
    if isinstance(type_info, _Composite) and type_info.kind == "tuple" and isinstance(value, list):
        return tuple(_from_json(v, t) for v, t in zip(value, type_info.elements))
    if isinstance(type_info, _Composite) and type_info.kind in ("list", "array") and isinstance(value, list):
        return [_from_json(v, type_info.elements[0]) for v in value]
    if isinstance(value, list):  # a list state's elements of type_info
        return [_from_json(v, type_info) for v in value]
    return value
