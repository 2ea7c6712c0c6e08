"""Flink's task time metrics: how each task (a chain) spends its wall-clock time, busy, back-pressured
or idle, in milliseconds per second summing to ~1000 (``busyTimeMsPerSecond``,
``backPressuredTimeMsPerSecond``, ``idleTimeMsPerSecond``). The autoscaler's true processing rate is a
task's records per second divided by its busy fraction.

A slot runs its tasks in one loop, taking turns (slot.py). A task's time is its own steps and the
waits between them:

* its own step: busy when it processed anything, else what the step found (no input: idle; no room
  downstream: back-pressured);
* the wait for its next turn, by what its last step ended with: with no input, idle; with no room
  downstream, back-pressured; with more to do, the time a consumer *in the same slot* spent processing
  what this task sent is back-pressured (its output is being worked off: a separate thread would be
  blocked on full buffers there, as Flink's is), and the rest busy (a thread waiting for a core is
  busy in Flink's accounting too).

So a slow operator that shares a slot with its source reads busy, and the source back-pressured,
as they would in separate threads. Pure bookkeeping: the slot loop passes the clock in.
"""

from __future__ import annotations

BUSY, BACK_PRESSURED, IDLE = "busy", "backPressured", "idle"
METRICS = {BUSY: "busyTimeMsPerSecond", BACK_PRESSURED: "backPressuredTimeMsPerSecond", IDLE: "idleTimeMsPerSecond"}
# Flink's back pressure levels, by the share of time back-pressured: OK up to 10%, LOW up to 50%, HIGH above
BACKPRESSURE_LEVELS = ((0.1, "OK"), (0.5, "LOW"), (float("inf"), "HIGH"))


def backpressure_level(ratio: float) -> str:
    return next(level for bound, level in BACKPRESSURE_LEVELS if ratio <= bound)


class TaskTime:
    """One task's cumulative seconds in each state (``seconds``), and the state its last step ended in."""

    __slots__ = ("seconds", "state", "mark", "fed", "stepping")

    def __init__(self, now: float):
        self.seconds = {BUSY: 0.0, BACK_PRESSURED: 0.0, IDLE: 0.0}
        self.state = IDLE
        self.mark = now  # the end of what is accounted for
        self.fed = 0.0  # seconds consumers in the slot spent on this task's output since its last step
        self.stepping = False  # a step in progress (a report from inside it: the time so far is busy)

    def begin(self, now: float) -> None:
        """Its step starts: the time before it was a wait."""
        self.waited(now)
        self.stepping = True

    def waited(self, now: float) -> None:
        """The time since the last mark was a wait for this task's turn (see the module's docstring)."""
        wait = now - self.mark
        if wait > 0:
            if self.state == BUSY:
                blocked = min(self.fed, wait)
                self.seconds[BACK_PRESSURED] += blocked
                self.seconds[BUSY] += wait - blocked
            else:
                self.seconds[self.state] += wait
        self.fed = 0.0
        self.mark = now

    def stepped(self, now: float, progressed: bool, state: str) -> None:
        """The task's step ran from the mark to ``now``; ``state``: what it ended with."""
        took = now - self.mark
        if took > 0:
            self.seconds[BUSY if progressed else state] += took
        self.state = state
        self.mark = now
        self.stepping = False

    def report(self, now: float) -> list:
        """[busy s, back-pressured s, idle s, the current state], the time up to ``now`` accounted for (from
        inside a step, one long enough to report from: busy so far)."""
        if self.stepping:
            self.seconds[BUSY] += max(0.0, now - self.mark)
            self.mark = now
            return [round(self.seconds[BUSY], 4), round(self.seconds[BACK_PRESSURED], 4),
                    round(self.seconds[IDLE], 4), BUSY]
        self.waited(now)
        return [round(self.seconds[BUSY], 4), round(self.seconds[BACK_PRESSURED], 4), round(self.seconds[IDLE], 4),
                self.state]


__all__ = ["BACKPRESSURE_LEVELS", "BACK_PRESSURED", "BUSY", "IDLE", "METRICS", "TaskTime", "backpressure_level"]
