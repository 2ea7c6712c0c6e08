"""``QueryableStateClient``: Flink's queryable state client, over the job manager's REST API.

    client = QueryableStateClient("http://127.0.0.1:8081", token=None)
    count = client.get_kv_state(job_id, "clicks", "user-42", Types.STRING(), ValueStateDescriptor("count", Types.LONG()))

PyFlink never shipped a client; the names and the argument order are the Java client's
(``getKvState(jobId, queryableStateName, key, keyTypeInfo, stateDescriptor)``), with its blocking
result instead of a future. It returns the state's value as the state object would (``None`` where
the key has none): a ``Row`` for a row type, a tuple for a tuple type, a dict for a map state, a list
for a list state; other values as JSON gives them.
"""

from __future__ import annotations

import urllib.parse
from typing import Any

from .api.queryable import to_json
from .api.types import Row, RowTypeInfo, _Composite
from .rest_client import RestError, call


class QueryableStateClient:
    def __init__(self, address: str, token: str | None = None, timeout: float = 30.0):
        """``address``: the job manager's REST API (``streamjob run`` and ``streamjob list`` print it; on
        Kubernetes the job's Service); ``token``: its bearer token, if the job sets rest.auth.token."""
        self.address = address
        self.token = token or ""
        self.timeout = timeout
        self._job_id: str | None = None

    def get_kv_state(self, job_id: str | None, queryable_state_name: str, key: Any, key_type_info: Any = None,
                     state_descriptor: Any = None, consistency: str = "live") -> Any:
        """The value of ``key`` in the job's queryable state (None: the key has none)."""
        return self.get_kv_states(job_id, queryable_state_name, [key], key_type_info, state_descriptor,
                                  consistency)[0]

    def get_kv_states(self, job_id: str | None, queryable_state_name: str, keys: list, key_type_info: Any = None,
                      state_descriptor: Any = None, consistency: str = "live") -> list:
        """The values of many keys in one request, in the order given."""
        doc = self.lookup(job_id, queryable_state_name, keys, consistency)
        value_type = _value_type(state_descriptor)
        return [_from_json(r["value"], value_type) if r.get("found") else None for r in doc["results"]]

    def lookup(self, job_id: str | None, queryable_state_name: str, keys: list, consistency: str = "live") -> dict:
        """The API's whole answer: per key its value (JSON), key group, subtask and checkpoint."""
        self._check_job(job_id)
        name = urllib.parse.quote(queryable_state_name, safe="")
        return call(self.address, self.token, "POST", f"/v1/state/{name}",
                    {"keys": [to_json(k) for k in keys], "consistency": consistency}, timeout=self.timeout)

    def _check_job(self, job_id: str | None) -> None:
        """A job id (as Flink's client takes one) must be the job this address serves: a lookup must never
        answer from another job that happens to run there now."""
        if job_id is None:
            return
        if self._job_id is None:
            self._job_id = call(self.address, self.token, "GET", "/v1/job?peek=true", timeout=self.timeout)["id"]
        if str(job_id) != self._job_id:
            raise RestError(f"{self.address} serves job {self._job_id}, not {job_id}", 404)


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
