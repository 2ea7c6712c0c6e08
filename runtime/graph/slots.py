"""The slots a job needs and where they come from, in words: for the error when Spark has fewer.

A job needs, summed over its slot sharing groups, each group's largest operator parallelism
(``job_graph.assign_slots``). That number differs from the job's parallelism as soon as an operator has
a parallelism of its own or a second group exists, so an error saying only "N slots (parallelism N)"
leaves the user guessing which operator or group to change. Pure: no Spark, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class GroupNeed:
    """One slot sharing group: the slots it takes (its largest parallelism) and an operator at it."""

    group: str
    slots: int
    operator: str


@dataclass(frozen=True)
class SlotNeeds:
    total: int
    groups: tuple[GroupNeed, ...] = ()
    default_parallelism: int | None = None  # the job's (env.set_parallelism / --parallelism)

    def describe(self) -> str:
        """"3 slots, ...": how many and why, e.g. "3 slots (parallelism 3)" when nothing else is in play."""
        n = self.total
        default = self.default_parallelism if self.default_parallelism is not None else n
        if len(self.groups) <= 1:
            g = self.groups[0] if self.groups else None
            if g is None or (g.slots == default == n):
                return f"{n} slots (parallelism {n})"
            return f"{n} slots (operator {g.operator!r} has parallelism {g.slots}; the job's default is {default})"
        parts = " + ".join(f"{g.slots} for {g.group!r} ({g.operator!r} at parallelism {g.slots})"
                           for g in self.groups)
        return (f"{n} slots, the sum over its {len(self.groups)} slot sharing groups of each one's largest "
                f"parallelism: {parts}")

    def lower(self) -> str:
        """What lowering the need means for this job."""
        default = self.default_parallelism if self.default_parallelism is not None else self.total
        own = [g.operator for g in self.groups if g.slots > default]
        text = "lower the parallelism (--parallelism"
        text += f", or set_parallelism of {', '.join(repr(o) for o in own)})" if own else ")"
        if len(self.groups) > 1:
            text += " or put the operators in fewer slot sharing groups"
        return text


def uniform(parallelism: int) -> SlotNeeds:
    """The need of a job known only by its parallelism (every operator at it, one group)."""
    return SlotNeeds(parallelism)


def slot_needs(graph: Any) -> SlotNeeds:
    """From a ``JobGraph``: per group in the order the groups first appear (as their slots are given)."""
    groups: dict[str, GroupNeed] = {}
    for task in graph.tasks:
        head = graph.operators[task.head].name
        known = groups.get(task.slot_sharing_group)
        if known is None or task.parallelism > known.slots:
            groups[task.slot_sharing_group] = GroupNeed(task.slot_sharing_group, task.parallelism, head)
    return SlotNeeds(graph.parallelism, tuple(groups.values()), graph.default_parallelism or graph.parallelism)
