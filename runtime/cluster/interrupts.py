"""Ctrl-C and SIGTERM while a job runs: recorded, never raised.

The driver's main thread watches the job; a KeyboardInterrupt raised inside whatever it is blocked
in (a ``Thread.join``, an ``Event.wait``, a py4j call) leaves that call half done: CPython 3.11
marks a thread it was joining as stopped while it still runs (bpo-45274). So while a job runs the
signals only count; the run loop reads the count between its polls and decides (the first one
stops the job gracefully, the second cancels it). PySpark's own SIGINT handler, which cancels every
Spark job at once, is replaced too: the SparkContext installs it when it starts, so ``install`` is
called again after every SparkContext start.

Pure bookkeeping plus ``signal.signal``; the decisions are the executor's.
"""

from __future__ import annotations

import signal
import threading
from typing import Any

NAMES = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM"}


class Terminated(KeyboardInterrupt):
    """SIGTERM outside a running job (before it is deployed): ends the program as Ctrl-C would."""


def exit_code(signum: int) -> int:
    """The shell's convention for a process ended by ``signum``: 128 + its number (130, 143)."""
    return 128 + int(signum)


class Interrupts:
    """SIGINT and SIGTERM, counted. Only the main thread can install handlers; elsewhere (a job
    started with ``execute_async``) it stays inactive and the program's own handling applies."""

    def __init__(self, sigterm_ends_at_once: bool = False) -> None:
        # True (in a pod, see ``pod.sigterm_ends_at_once``): SIGTERM keeps its default action, the
        # process ends at once; only Ctrl-C counts.
        self.sigterm_ends_at_once = sigterm_ends_at_once
        self.count = 0
        self.signals: list[int] = []  # in arrival order
        self._previous: dict[int, Any] = {}
        self.active = threading.current_thread() is threading.main_thread()

    def install(self) -> None:
        if not self.active:
            return
        for signum in (signal.SIGINT, signal.SIGTERM):
            handler = signal.SIG_DFL if signum == signal.SIGTERM and self.sigterm_ends_at_once else self._handle
            previous = signal.signal(signum, handler)
            if signum not in self._previous:  # the first install remembers what to put back
                self._previous[signum] = previous

    def restore(self) -> None:
        """Back to the handlers found at the first ``install`` (Python's KeyboardInterrupt for SIGINT,
        not PySpark's: its job-cancelling handler must not outlive the job either)."""
        for signum, previous in self._previous.items():
            if signum == signal.SIGINT and getattr(previous, "__qualname__", "").startswith("SparkContext"):
                previous = signal.default_int_handler
            signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
        self._previous.clear()

    def _handle(self, signum: int, frame: Any) -> None:
        self.count += 1
        self.signals.append(signum)

    @property
    def first(self) -> int | None:
        return self.signals[0] if self.signals else None

    @property
    def last(self) -> int | None:
        return self.signals[-1] if self.signals else None

    def __enter__(self) -> "Interrupts":
        self.install()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.restore()
