"""A subtask's side of queryable state: which names it registered, and lookups in its live backend.

A lookup runs on the slot's loop between two steps (a control message, like a checkpoint trigger):
it sets the backend's current key, reads the state as the function would, and puts the key back, so
the function's next record sees nothing changed. TTL state answers as the function would see it:
an expired value is absent.
"""

from __future__ import annotations

from typing import Any

from ..api.queryable import KeyTypeError, convert_key, to_json
from ..keygroups import assign_to_key_group


def registrations(operators: dict[int, Any], reported: set[tuple[int, str]]) -> list[dict]:
    """Queryable states created since the last call (``reported`` is updated): one entry per name."""
    new = []
    for op_id, op in operators.items():
        backend = op.keyed_backend
        if backend is None or not backend.queryable:
            continue
        for name, d in backend.queryable.items():
            if (op_id, name) not in reported:
                reported.add((op_id, name))
                ttl = d.get_ttl_config()
                new.append({"name": name, "op": op_id, "kind": d.kind, "state": d.name,
                            "ttl": None if ttl is None else {"ms": ttl.ttl_milliseconds(),
                                                             "update": ttl.get_update_type().name,
                                                             "visibility": ttl.get_state_visibility().name}})
    return new


def read(backend: Any, descriptor: Any) -> Any:
    """The current key's value of the state, as the function sees it (None: absent)."""
    kind = descriptor.kind
    if kind == "value":
        return backend.get_state(descriptor).value()
    if kind == "list":
        values = list(backend.get_list_state(descriptor).get() or [])
        return values or None
    if kind == "map":
        entries = dict(backend.get_map_state(descriptor).items())
        return entries or None
    if kind == "reducing":
        return backend.get_reducing_state(descriptor).get()
    return backend.get_aggregating_state(descriptor).get()


def lookup(op: Any, name: str, raw_keys: list, key_type: Any) -> list[dict]:
    """Each key's answer from the operator's live backend: key (as given), found, value (JSON), key group."""
    backend = op.keyed_backend
    descriptor = backend.queryable[name]
    saved = backend.current_key
    out = []
    try:
        for raw in raw_keys:
            try:
                key = convert_key(raw, key_type)
            except KeyTypeError as e:
                out.append({"key": raw, "error": str(e)})
                continue
            group = assign_to_key_group(key, backend.max_parallelism)
            if group not in backend.key_groups:  # routed with another parallelism than this subtask's
                out.append({"key": raw, "error": f"key group {group} is not in this subtask's "
                                                 f"{backend.key_groups.start}..{backend.key_groups.stop - 1}"})
                continue
            backend.current_key = key
            value = read(backend, descriptor)
            out.append({"key": raw, "found": value is not None, "value": to_json(value), "key_group": group})
    finally:
        backend.current_key = saved
    return out
