"""The coordinator of loops' termination rounds (task/iteration.py tells the whole protocol).

Pure: a head subtask's report in, the messages for every task out. The job manager runs one per
attempt (the heads of a loop may sit in every slot); a slot without a job manager runs its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field

ROUND = "iteration_round"  # job manager -> task: start round n of a loop's termination check
END = "iteration_end"  # job manager -> task: the loop is empty, its heads end
REPORT = "iteration"  # task -> job manager: a head subtask's round report (or its end)


@dataclass
class _Loop:
    heads: int
    ended: set[int] = field(default_factory=set)  # head subtasks that ended on their own (max_wait_time_ms)
    reports: dict[int, dict[int, bool]] = field(default_factory=dict)  # round -> subtask -> clean
    done: bool = False


class IterationRounds:
    """Round n of a loop is complete when every head subtask reported it (one that ended on its own,
    by ``max_wait_time_ms``, counts as clean); then the loop ends if n > 0 and all were clean (round
    0 only says that the regular inputs ended), else round n + 1 starts."""

    def __init__(self) -> None:
        self.loops: dict[int, _Loop] = {}

    def on_report(self, msg: dict) -> list[dict]:
        """A head subtask's report; returns the messages to send to every task."""
        loop = self.loops.setdefault(int(msg["iteration"]), _Loop(int(msg["heads"])))
        if loop.done:
            return []
        if msg.get("ended"):
            loop.ended.add(int(msg["subtask"]))
            if len(loop.ended) >= loop.heads:
                loop.done = True
                return []
            # the round in progress may now be complete without it
            return self._decide(int(msg["iteration"]), loop, max(loop.reports, default=None))
        n = int(msg["round"])
        loop.reports.setdefault(n, {})[int(msg["subtask"])] = bool(msg["clean"])
        return self._decide(int(msg["iteration"]), loop, n)

    def _decide(self, iteration: int, loop: _Loop, n: int | None) -> list[dict]:
        if n is None:
            return []
        got = loop.reports.get(n, {})
        if any(s not in got and s not in loop.ended for s in range(loop.heads)):
            return []
        loop.reports.pop(n, None)
        if n > 0 and all(got.values()):
            loop.done = True
            return [{"type": END, "iteration": iteration}]
        return [{"type": ROUND, "iteration": iteration, "round": n + 1}]
