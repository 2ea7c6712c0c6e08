"""Operator state: per-subtask lists (source positions, a sink's pending commits).

Not keyed, so on restore at another parallelism the lists of all old subtasks
are redistributed, as in Flink: *split* list state deals the union of all
elements out in even contiguous shares; *union* list state gives every
subtask everything. At the same parallelism each subtask gets its own list back.

*Broadcast* state (a key -> value map per ``MapStateDescriptor`` of a broadcast stream)
is the same in every subtask under exactly-once: every subtask processes the same broadcast
records, and an aligned barrier sits at the same place in each of their broadcast channels.
Every subtask writes its copy, and on restore each new subtask takes one whole copy (its own
at the same parallelism), as Flink does. Writing only subtask 0's copy would save storage,
but the copies are equal only with aligned barriers: without alignment (at-least-once) each
subtask's copy matches its own position in the broadcast channels, and at the same
parallelism it must get exactly that copy back to resume where it was. The maps are small by
design (Flink keeps them in memory too), so p copies cost little.
"""

from __future__ import annotations

import pickle
from typing import Any, Iterable, Iterator

from ..api.functions import Subscriptable

SPLIT = "split"
UNION = "union"
BROADCAST = "broadcast"


class OperatorListState:
    def __init__(self, name: str, mode: str):
        self.name = name
        self.mode = mode
        self.items: list[Any] = []

    def get(self) -> list:
        return list(self.items)

    def add(self, value: Any) -> None:
        self.items.append(value)

    def add_all(self, values: Iterable[Any]) -> None:
        self.items.extend(values)

    def update(self, values: Iterable[Any]) -> None:
        self.items = list(values)

    def clear(self) -> None:
        self.items = []


class BroadcastState(Subscriptable):
    """The map of one broadcast state descriptor (PyFlink's ``BroadcastState``, a MapState):
    writable in ``process_broadcast_element``; ``process_element`` sees ``read_only()``."""

    mode = BROADCAST

    def __init__(self, name: str):
        self.name = name
        self.entries: dict[Any, Any] = {}
        self._view: ReadOnlyBroadcastState | None = None

    def get(self, key: Any) -> Any:
        return self.entries.get(key)

    def contains(self, key: Any) -> bool:
        return key in self.entries

    def keys(self) -> list:
        return list(self.entries.keys())

    def values(self) -> list:
        return list(self.entries.values())

    def items(self) -> list:
        return list(self.entries.items())

    def is_empty(self) -> bool:
        return not self.entries

    def put(self, key: Any, value: Any) -> None:
        self.entries[key] = value

    def put_all(self, dict_value: dict) -> None:
        self.entries.update(dict_value)

    def remove(self, key: Any) -> None:
        self.entries.pop(key, None)

    def clear(self) -> None:
        self.entries.clear()

    def __getitem__(self, key: Any) -> Any:
        return self.entries[key]

    def __setitem__(self, key: Any, value: Any) -> None:
        self.entries[key] = value

    def __delitem__(self, key: Any) -> None:
        del self.entries[key]

    def __contains__(self, key: Any) -> bool:
        return key in self.entries

    def __iter__(self) -> Iterator[Any]:
        return iter(list(self.entries))

    def __len__(self) -> int:
        return len(self.entries)

    def read_only(self) -> "ReadOnlyBroadcastState":
        if self._view is None:
            self._view = ReadOnlyBroadcastState(self)
        return self._view

    def copy(self) -> dict:
        """A deep copy for a snapshot: values are user objects that process_broadcast_element may
        change in place after the barrier, while the writer thread is still pickling them."""
        return pickle.loads(pickle.dumps(self.entries, protocol=5))


class ReadOnlyBroadcastState(Subscriptable):
    """Broadcast state as the non-broadcast side sees it: reads only, as in Flink, since only the
    broadcast side reaches every subtask in the same order and keeps the copies equal."""

    def __init__(self, state: BroadcastState):
        self._state = state

    def get(self, key: Any) -> Any:
        return self._state.entries.get(key)

    def contains(self, key: Any) -> bool:
        return key in self._state.entries

    def keys(self) -> list:
        return self._state.keys()

    def values(self) -> list:
        return self._state.values()

    def items(self) -> list:
        return self._state.items()

    def is_empty(self) -> bool:
        return not self._state.entries

    def __getitem__(self, key: Any) -> Any:
        return self._state.entries[key]

    def __contains__(self, key: Any) -> bool:
        return key in self._state.entries

    def __iter__(self) -> Iterator[Any]:
        return iter(self._state.keys())

    def __len__(self) -> int:
        return len(self._state.entries)

    def _refuse(self, call: str) -> Any:
        raise TypeError(f"broadcast state {self._state.name!r} is read-only here: {call}() is allowed in "
                        f"process_broadcast_element only, where every subtask sees the same records (as in Flink)")

    def put(self, key: Any, value: Any) -> None:
        self._refuse("put")

    def put_all(self, dict_value: dict) -> None:
        self._refuse("put_all")

    def remove(self, key: Any) -> None:
        self._refuse("remove")

    def clear(self) -> None:
        self._refuse("clear")

    def __setitem__(self, key: Any, value: Any) -> None:
        self._refuse("__setitem__")

    def __delitem__(self, key: Any) -> None:
        self._refuse("__delitem__")


class OperatorStateStore:
    def __init__(self) -> None:
        self.states: dict[str, OperatorListState] = {}
        self.broadcast: dict[str, BroadcastState] = {}
        self.restored: dict[str, list] = {}  # what restore gave, before the operator asked for it

    def get_list_state(self, name: str) -> OperatorListState:
        return self._get(name, SPLIT)

    def get_union_list_state(self, name: str) -> OperatorListState:
        return self._get(name, UNION)

    def _get(self, name: str, mode: str) -> OperatorListState:
        state = self.states.get(name)
        if state is None:
            if name in self.broadcast:
                raise ValueError(f"operator state {name!r} is broadcast state, not {mode} list state")
            state = self.states[name] = OperatorListState(name, mode)
            state.items = list(self.restored.get(name, []))
        elif state.mode != mode:
            raise ValueError(f"operator state {name!r} is {state.mode} list state, not {mode}")
        return state

    def get_broadcast_state(self, name: str) -> BroadcastState:
        state = self.broadcast.get(name)
        if state is None:
            if name in self.states:
                raise ValueError(f"operator state {name!r} is {self.states[name].mode} list state, not broadcast state")
            state = self.broadcast[name] = BroadcastState(name)
            restored = self.restored.get(name)
            state.entries = dict(restored) if isinstance(restored, dict) else {}
        return state

    def is_restored(self) -> bool:
        return bool(self.restored)

    def snapshot(self) -> dict[str, tuple[str, Any]]:
        """Copies (lists are small: positions and commit tokens; broadcast maps are small by
        design, Flink keeps them in memory too), taken in the sync phase."""
        out: dict[str, tuple[str, Any]] = {name: (s.mode, list(s.items)) for name, s in self.states.items()}
        out.update((name, (BROADCAST, b.copy())) for name, b in self.broadcast.items())
        return out

    def restore(self, per_subtask: list[dict[str, tuple[str, list]]], subtask: int, parallelism: int) -> None:
        """``per_subtask[i]`` is what old subtask ``i`` snapshotted."""
        names = {n for snap in per_subtask for n in snap}
        for name in names:
            modes = {snap[name][0] for snap in per_subtask if name in snap}
            mode = modes.pop() if len(modes) == 1 else SPLIT
            if mode == BROADCAST:
                self.restored[name] = broadcast_copy(per_subtask, name, subtask)
            elif mode == UNION:
                self.restored[name] = [x for snap in per_subtask for x in snap.get(name, (mode, []))[1]]
            elif len(per_subtask) == parallelism:
                self.restored[name] = list(per_subtask[subtask].get(name, (mode, []))[1])
            else:
                everything = [x for snap in per_subtask for x in snap.get(name, (mode, []))[1]]
                self.restored[name] = redistribute(everything, subtask, parallelism)


def broadcast_copy(per_subtask: list[dict[str, tuple[str, Any]]], name: str, subtask: int) -> dict:
    """The copy of broadcast state ``name`` new subtask ``subtask`` restores: old subtask
    ``subtask mod old parallelism``'s (its own when the parallelism is unchanged), or the next
    old subtask that wrote one (a subtask may have written no snapshot at all)."""
    n = len(per_subtask)
    for step in range(n):
        snap = per_subtask[(subtask + step) % n]
        if name in snap:
            return dict(snap[name][1])
    return {}


def redistribute(items: list, subtask: int, parallelism: int) -> list:
    """Even contiguous shares, as Flink's round-robin operator state repartitioner."""
    n = len(items)
    base, extra = divmod(n, parallelism)
    start = subtask * base + min(subtask, extra)
    return items[start : start + base + (1 if subtask < extra else 0)]
