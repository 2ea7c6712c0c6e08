"""Operator state: per-subtask lists (source positions, a sink's pending commits).

Not keyed, so on restore at another parallelism the lists of all old subtasks
are redistributed, as in Flink: *split* list state deals the union of all
elements out in even contiguous shares; *union* list state gives every
subtask everything. At the same parallelism each subtask gets its own list back.
"""

from __future__ import annotations

from typing import Any, Iterable

SPLIT = "split"
UNION = "union"


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


class OperatorStateStore:
    def __init__(self) -> None:
        self.states: dict[str, OperatorListState] = {}
        self.restored: dict[str, list] = {}  # what restore gave, before the operator asked for it

    def get_list_state(self, name: str) -> OperatorListState:
        return self._get(name, SPLIT)

    def get_union_list_state(self, name: str) -> OperatorListState:
        return self._get(name, UNION)

    def _get(self, name: str, mode: str) -> OperatorListState:
        state = self.states.get(name)
        if state is None:
            state = self.states[name] = OperatorListState(name, mode)
            state.items = list(self.restored.get(name, []))
        elif state.mode != mode:
            raise ValueError(f"operator state {name!r} is {state.mode} list state, not {mode}")
        return state

    def is_restored(self) -> bool:
        return bool(self.restored)

    def snapshot(self) -> dict[str, tuple[str, list]]:
        """Copies (lists are small: positions and commit tokens), taken in the sync phase."""
        return {name: (s.mode, list(s.items)) for name, s in self.states.items()}

    def restore(self, per_subtask: list[dict[str, tuple[str, list]]], subtask: int, parallelism: int) -> None:
        """``per_subtask[i]`` is what old subtask ``i`` snapshotted."""
        names = {n for snap in per_subtask for n in snap}
        for name in names:
            modes = {snap[name][0] for snap in per_subtask if name in snap}
            mode = modes.pop() if len(modes) == 1 else SPLIT
            if mode == UNION:
                self.restored[name] = [x for snap in per_subtask for x in snap.get(name, (mode, []))[1]]
            elif len(per_subtask) == parallelism:
                self.restored[name] = list(per_subtask[subtask].get(name, (mode, []))[1])
            else:
                everything = [x for snap in per_subtask for x in snap.get(name, (mode, []))[1]]
                self.restored[name] = redistribute(everything, subtask, parallelism)


def redistribute(items: list, subtask: int, parallelism: int) -> list:
    """Even contiguous shares, as Flink's round-robin operator state repartitioner."""
    n = len(items)
    base, extra = divmod(n, parallelism)
    start = subtask * base + min(subtask, extra)
    return items[start : start + base + (1 if subtask < extra else 0)]
