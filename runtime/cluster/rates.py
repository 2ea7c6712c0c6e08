"""Per-second rates from the cumulative counters the tasks report (records in/out, back-pressured seconds).

Every slot reports its totals each ``metrics.reporter.interval``. A rate is the change over that slot's
reports of the last few seconds, so it does not depend on how often anyone asks (the dashboard, a CLI),
and it is smooth enough to read while a half-second report interval still shows a change quickly.
Pure bookkeeping: the job manager passes the clock in.
"""

from __future__ import annotations

from collections import deque
from typing import Hashable

WINDOW_S = 3.0  # s of reports a rate spans


class CounterRates:
    def __init__(self, window: float = WINDOW_S):
        self.window = window
        self._samples: dict[int, deque[tuple[float, dict[Hashable, float]]]] = {}

    def clear(self) -> None:
        """A new attempt: its tasks count from zero again."""
        self._samples.clear()

    def observe(self, slot: int, now: float, counters: dict[Hashable, float]) -> None:
        samples = self._samples.setdefault(slot, deque())
        samples.append((now, counters))
        # Keep one report older than the window, so the rate spans the whole window.
        while len(samples) > 2 and samples[1][0] <= now - self.window:
            samples.popleft()

    def per_slot(self, now: float) -> dict[int, dict[Hashable, float]]:
        """slot -> counter -> change per second. A slot that has not reported for a window has rate 0
        (it finished, or its process is gone); a counter that went down (a restarted task) has rate 0."""
        out: dict[int, dict[Hashable, float]] = {}
        for slot, samples in self._samples.items():
            t1, last = samples[-1]
            t0, first = samples[0]
            if len(samples) < 2 or now - t1 > self.window or t1 <= t0:
                out[slot] = {k: 0.0 for k in last}
                continue
            out[slot] = {k: max(0.0, (v - first.get(k, v)) / (t1 - t0)) for k, v in last.items()}
        return out
