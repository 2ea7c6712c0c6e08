"""Watermark arithmetic of one task's inputs (Flink's StatusWatermarkValve), pure logic.

Each input channel carries its own watermark and idle status. An operator
input's watermark is the minimum over its active channels; the operator's
watermark is the minimum over its active inputs (so a union, or the two sides
of a connect, wait for the slowest). Idle channels do not hold anything back;
when every channel is idle the task is idle and says so downstream. A finished
channel keeps the last watermark it sent: a source that read all its input sent
the end of time first, so it holds nothing back, while one stopped by a
stop-with-savepoint did not, so what is still open stays in the savepoint instead
of firing after it. A watermark never goes back.
"""

from __future__ import annotations

from ..network.events import MAX_WATERMARK, MIN_WATERMARK


class WatermarkValve:
    def __init__(self, channel_inputs: list[int]):
        """``channel_inputs[i]``: the operator input (0 or 1) of input channel ``i``."""
        self.inputs = channel_inputs
        self.watermarks = [MIN_WATERMARK] * len(channel_inputs)
        self.idle = [False] * len(channel_inputs)
        self.finished = [False] * len(channel_inputs)
        self.output = MIN_WATERMARK  # the newest watermark handed to the operator
        self.output_idle = False
        self.ignored: set[int] = set()  # a loop's back-edges: see ``ignore``

    def ignore(self, channel: int) -> None:
        """A loop's back-edge: its watermarks never count, so the head's watermark is its regular input's
        (one that waited for its own feedback would never advance)."""
        self.ignored.add(channel)

    def on_watermark(self, channel: int, timestamp: int) -> int | None:
        """A watermark arrived; the operator's new watermark, or None if it did not advance."""
        if timestamp > self.watermarks[channel]:
            self.watermarks[channel] = timestamp
        if self.idle[channel]:  # a watermark from an idle channel makes it active again (as Flink does)
            self.idle[channel] = False
        return self._advance()

    def on_status(self, channel: int, idle: bool) -> tuple[int | None, bool | None]:
        """(new watermark or None, new task idle status or None when unchanged)."""
        self.idle[channel] = idle
        return self._advance(), self._status()

    def on_finished(self, channel: int) -> tuple[int | None, bool | None]:
        self.finished[channel] = True
        self.idle[channel] = False  # its last watermark counts from now on
        return self._advance(), self._status()

    def _active(self, i: int) -> bool:
        return self.finished[i] or not self.idle[i]

    def _advance(self) -> int | None:
        per_input: dict[int, int] = {}
        for i, inp in enumerate(self.inputs):
            if self._active(i) and i not in self.ignored:
                w = self.watermarks[i]
                per_input[inp] = min(per_input.get(inp, MAX_WATERMARK), w)
        if not per_input:
            return None  # every channel idle
        candidate = min(per_input.values())
        if candidate > self.output:
            self.output = candidate
            return candidate
        return None

    def _status(self) -> bool | None:
        counted = [i for i in range(len(self.inputs)) if i not in self.ignored]
        idle = all(self.idle[i] or self.finished[i] for i in counted) and not all(self.finished[i] for i in counted)
        if idle != self.output_idle:
            self.output_idle = idle
            return idle
        return None
