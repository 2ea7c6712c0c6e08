"""The job manager's side of queryable state: which operator holds each name, routing a key to the
subtask that owns its key group, and the answers.

``consistency="live"`` (the default, what Flink's queryable state returns) asks the subtask that owns
the key over the control channel; it answers from its working state between two steps of its loop, so
the value can be ahead of committed output and a failure rolls it back. ``consistency="checkpoint"``
answers from the latest completed checkpoint instead (stable, never rolled back): the key's key group
is restored from checkpoint storage into a backend of its own, off the job manager's loop, and kept for
the next lookups of that checkpoint.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable

from ..api.queryable import KeyTypeError, convert_key
from ..config import Configuration
from ..keygroups import assign_to_key_group, key_group_range, operator_index_for_key_group

QUERY_TIMEOUT_S = 10.0
MAX_KEYS = 10_000  # per request
CACHED_GROUPS = 256  # key groups restored from checkpoints, kept for the next lookups


class QueryError(Exception):
    """A lookup that cannot be answered: the HTTP status, the message, and what else the body says."""

    def __init__(self, status: int, message: str, **extra: Any):
        super().__init__(message)
        self.status, self.message, self.extra = status, message, extra


@dataclass(frozen=True)
class KeyedOperator:
    """What routing needs of a keyed operator (from the job graph)."""

    id: int
    name: str
    uid: str
    parallelism: int
    max_parallelism: int
    first_slot: int  # its subtask i runs in slot first_slot + i
    key_type: Any = None


@dataclass
class QueryableState:
    name: str
    op: KeyedOperator
    kind: str  # value, list, map, reducing, aggregating
    state: str  # the state's own name (the descriptor's): what checkpoints hold it by
    ttl: dict | None = None  # {"ms", "update", "visibility"} of its StateTtlConfig, None without one


def route(op: KeyedOperator, key: Any) -> tuple[int, int, int]:
    """(key group, subtask, slot) of ``key``: as records are routed to the operator."""
    group = assign_to_key_group(key, op.max_parallelism)
    subtask = operator_index_for_key_group(op.max_parallelism, op.parallelism, group)
    return group, subtask, op.first_slot + subtask


@dataclass
class QueryRouter:
    operators: dict[int, KeyedOperator]
    states: dict[str, QueryableState] = field(default_factory=dict)
    clashes: dict[str, str] = field(default_factory=dict)  # name -> why it cannot be answered
    _pending: dict[str, asyncio.Future] = field(default_factory=dict)
    _ids: Any = field(default_factory=itertools.count)
    _restored: "OrderedDict[tuple, Any]" = field(default_factory=OrderedDict)
    # Lookups for one slot made in one turn of the loop go out as one message (many concurrent GETs
    # cost the task one wake-up, not one each).
    _outbox: dict[int, list] = field(default_factory=dict)
    _restore_lock: threading.Lock = field(default_factory=threading.Lock)

    # -- registry ------------------------------------------------------------------------------
    def register(self, states: list[dict]) -> list[str]:
        """Names a subtask created; returns what is wrong (a name two operators declare)."""
        problems = []
        for s in states:
            op = self.operators.get(int(s["op"]))
            name = str(s["name"])
            if op is None:
                continue
            known = self.states.get(name)
            if known is None:
                self.states[name] = QueryableState(name, op, str(s["kind"]), str(s.get("state", name)), s.get("ttl"))
            elif known.op.id != op.id and name not in self.clashes:
                self.clashes[name] = (f"queryable state name {name!r} is declared by two operators: "
                                      f"{known.op.name!r} (uid {known.op.uid!r}) and {op.name!r} (uid {op.uid!r}); "
                                      f"names are unique per job")
                problems.append(self.clashes[name])
        return problems

    def names(self) -> list[str]:
        return sorted(self.states)

    def describe(self) -> list[dict]:
        return [{"name": s.name, "operator": s.op.name, "uid": s.op.uid, "kind": s.kind,
                 "parallelism": s.op.parallelism} for s in sorted(self.states.values(), key=lambda s: s.name)]

    def find(self, name: str) -> QueryableState:
        if name in self.clashes:
            raise QueryError(409, self.clashes[name])
        state = self.states.get(name)
        if state is None:
            listed = ", ".join(repr(n) for n in self.names()) or "none yet (a state is registered when the "\
                "function first creates it)"
            raise QueryError(404, f"no queryable state {name!r} in this job; queryable states: {listed}",
                             queryable=self.names())
        return state

    def keys(self, state: QueryableState, raw_keys: list) -> list[tuple[Any, Any, tuple[int, int, int]]]:
        """(raw, key, route) of each key; a key the job's key type cannot take is a 400 naming the type."""
        if not raw_keys:
            raise QueryError(400, "no key given: ?key=<JSON> or a body {\"keys\": [...]}")
        if len(raw_keys) > MAX_KEYS:
            raise QueryError(400, f"{len(raw_keys)} keys in one request; at most {MAX_KEYS}")
        out = []
        for raw in raw_keys:
            try:
                key = convert_key(raw, state.op.key_type)
            except KeyTypeError as e:
                raise QueryError(400, f"key {raw!r}: {e}", expected=repr(state.op.key_type)) from None
            try:
                out.append((raw, key, route(state.op, key)))
            except TypeError as e:
                raise QueryError(400, f"key {raw!r} cannot be hashed as a key of this job: {e}") from None
        return out

    # -- live lookups ------------------------------------------------------------------------
    async def live(self, state: QueryableState, keys: list, send: Callable[[int, dict], bool]) -> list[dict]:
        """Ask each owning subtask for its keys (one message per subtask) and wait for the answers."""
        loop = asyncio.get_running_loop()
        by_slot: dict[int, list] = {}
        for raw, _, (_, _, slot) in keys:
            by_slot.setdefault(slot, []).append(raw)
        waits = []
        for slot, raws in by_slot.items():
            qid = f"q{next(self._ids)}"
            future = self._pending[qid] = loop.create_future()
            if not self._outbox:
                loop.call_soon(self._flush, send)
            self._outbox.setdefault(slot, []).append(
                {"id": qid, "op": state.op.id, "name": state.name, "keys": raws,
                 "unsent": f"subtask {slot - state.op.first_slot + 1}/{state.op.parallelism} of {state.op.name!r} "
                           f"is not connected (the job is restarting)"})
            waits.append((slot, qid, future))
        answers: dict[Any, dict] = {}
        # One timer for the request, no wait_for or gather: a lookup is a few tens of microseconds of
        # the job manager's loop, and those two would double it.
        timer = loop.call_later(QUERY_TIMEOUT_S, _time_out, [f for _, _, f in waits], state.op.name)
        try:
            done = [await f for _, _, f in waits]
        finally:
            timer.cancel()
            for _, qid, f in waits:
                self._pending.pop(qid, None)
                if f.done() and not f.cancelled():
                    f.exception()  # retrieved: one failed answer fails the request, the others go unread
        for (slot, _, _), msg in zip(waits, done):
            for r in msg["results"]:
                r.update(subtask=slot - state.op.first_slot, checkpoint=msg.get("checkpoint"))
                answers[_ident(r["key"])] = r
        return [answers[_ident(raw)] for raw, _, _ in keys]

    def _flush(self, send: Callable[[int, dict], bool]) -> None:
        """The lookups of this turn, one message per slot."""
        outbox, self._outbox = self._outbox, {}
        for slot, queries in outbox.items():
            unsent = [q.pop("unsent") for q in queries]
            if not send(slot, {"type": "query", "batch": queries}):
                for q, why in zip(queries, unsent):
                    future = self._pending.get(q["id"])
                    if future is not None and not future.done():
                        future.set_exception(QueryError(503, why, retry_after=1))

    def on_result(self, msg: dict) -> None:
        for answer in msg.get("batch") or ():
            future = self._pending.get(str(answer.get("id")))
            if future is not None and not future.done():
                future.set_result({**answer, "checkpoint": msg.get("checkpoint")})

    def fail_pending(self, why: str) -> None:
        """The attempt ended: lookups in flight get a 503 instead of waiting for their timeout."""
        for future in list(self._pending.values()):
            if not future.done():
                future.set_exception(QueryError(503, why, retry_after=1))

    # -- lookups in the latest completed checkpoint -----------------------------------------------
    def from_checkpoint(self, state: QueryableState, keys: list, checkpoint: Any, config: dict) -> list[dict]:
        """Each key's value in ``checkpoint`` (a CompletedCheckpoint); blocking storage I/O: run off the loop."""
        from ..api.queryable import to_json
        from ..task.queryable import read  # the same read as a live lookup

        if state.kind == "aggregating":
            raise QueryError(400, f"queryable state {state.name!r} is an aggregating state: its checkpoint holds the "
                                  f"accumulator, and only the job's function makes the result of it; ask it live "
                                  f"(consistency=live)")
        descriptor = _descriptor(state)
        op_meta = checkpoint.metadata.operators.get(state.op.uid)
        out = []
        for raw, key, (group, subtask, _) in keys:
            backend = self._restored_group(state, group, checkpoint, op_meta, config)
            if backend is None or state.state not in backend.kinds:
                value = None
            else:
                backend.current_key = key
                value = read(backend, descriptor)
            out.append({"key": raw, "found": value is not None, "value": to_json(value), "key_group": group,
                        "subtask": subtask, "checkpoint": checkpoint.checkpoint_id})
        return out

    def _restored_group(self, state: QueryableState, group: int, checkpoint: Any, op_meta: dict | None,
                        config: dict) -> Any:
        cache_key = (checkpoint.checkpoint_id, state.op.uid, group)
        with self._restore_lock:
            if cache_key in self._restored:
                self._restored.move_to_end(cache_key)
                return self._restored[cache_key]
        backend = restore_key_group(state, group, checkpoint, op_meta, config)
        with self._restore_lock:
            self._restored[cache_key] = backend
            while len(self._restored) > CACHED_GROUPS:
                _, old = self._restored.popitem(last=False)
                if old is not None:
                    old.dispose()
        return backend


def restore_key_group(state: QueryableState, group: int, checkpoint: Any, op_meta: dict | None,
                      config: dict) -> Any:
    """A keyed backend holding one key group of the operator's state in ``checkpoint`` (None: no state)."""
    from ..checkpoint.storage import StateLocation, snapshot_root
    from ..state.backends import create_keyed_backend
    from ..state.snapshot import keyed_spans, read_keyed

    if not op_meta:
        return None
    handles = op_meta.get("subtasks") or []
    wanted = range(group, group + 1)
    location = StateLocation(snapshot_root(checkpoint.url, checkpoint.metadata.kind))
    backend = create_keyed_backend(Configuration(config), state.op.name, state.op.max_parallelism, wanted, None)
    for old, handle in enumerate(handles):
        if handle is None:
            continue
        index = handle["index"]
        where = f"{location.describe(handle)} of operator {state.op.name!r} (subtask {old + 1}/{len(handles)})"
        native = index.get("rocksdb")
        if native is not None:
            lo, hi = native.get("key_groups", [0, 0])
            if lo <= group < hi:
                from ..state.rocksdb_snapshot import restore_native

                data = location.read(handle, verify=False)
                restore_native(backend, handle, data, location, checkpoint.checkpoint_id, where, True)
            continue
        keyed = index.get("keyed") or {}
        if any(str(group) in t.get("groups", {}) or group in t.get("groups", {}) for t in keyed.values()):
            data = location.read_spans(handle, keyed_spans(index, wanted))
            for name, kind, chunk in read_keyed(data, index, wanted, where):
                backend.restore_chunk(name, kind, chunk)
    return backend


def _descriptor(state: QueryableState) -> Any:
    """A descriptor that reads the restored state as the function's would: its kind and TTL (a reducing
    state's stored value is its result; an aggregating one needs the user's function: refused before)."""
    from ..api import state as S

    make = {"value": S.ValueStateDescriptor, "list": S.ListStateDescriptor, "map": S.MapStateDescriptor,
            # reading never reduces: the stored value is the reduced result
            "reducing": lambda name: S.ReducingStateDescriptor(name, lambda a, b: b)}[state.kind]
    d = make(state.state)
    if state.ttl:
        builder = S.StateTtlConfig.new_builder(int(state.ttl["ms"]))
        builder.set_update_type(S.StateTtlConfig.UpdateType[state.ttl["update"]])
        builder.set_state_visibility(S.StateTtlConfig.StateVisibility[state.ttl["visibility"]])
        d.enable_time_to_live(builder.build())
    return d


def _time_out(futures: list, operator: str) -> None:
    for f in futures:
        if not f.done():
            f.set_exception(QueryError(503, f"no answer from {operator!r} within {QUERY_TIMEOUT_S:.0f} s (the job "
                                            f"may be restarting or overloaded)", retry_after=1))


def _ident(raw: Any) -> str:
    import json

    return json.dumps(raw, sort_keys=True, default=str)


__all__ = ["QueryError", "QueryRouter", "KeyedOperator", "QueryableState", "route", "key_group_range"]


def keyed_operators(graph: Any) -> dict[int, KeyedOperator]:
    """Every operator on a keyed input of the job graph, as routing needs it."""
    out = {}
    for vertex in graph.tasks:
        for op_id in vertex.operators:
            node = graph.operators[op_id]
            key = next((graph.edges[e].key for e in node.inputs if graph.edges[e].key is not None), None)
            if key is not None:
                out[op_id] = KeyedOperator(op_id, node.name, node.state_key, node.parallelism, node.max_parallelism,
                                           vertex.first_slot, key.key_type)
    return out


def url_key(text: str, key_type: Any) -> Any:
    """A key typed in a URL (``?key=...``): JSON, except that a string key may be given bare (``?key=alice``,
    and ``?key=42`` for a job keyed by strings)."""
    import json

    name = getattr(key_type, "_name", None)
    try:
        value = json.loads(text)
    except ValueError:
        return text
    if name in ("String", "Character") and not isinstance(value, str):
        return text
    return value
