"""Checkpoint storage I/O of the job manager, off its event loop.

The job manager's loop serves the control channel, the REST API and the metrics; a store that
hangs (an S3 endpoint that stops answering) must never stall them. So the coordinator decides,
and these threads do the I/O:

- ``SerialWorker``: writes ``_metadata`` one checkpoint at a time, in trigger order (so
  completions, and the retention they cause, keep their order). Its caller bounds the wait with
  the checkpoint timeout: a write the store does not answer fails its checkpoint, whatever the
  thread is still waiting for.
- ``Disposer``: deletes what the coordinator gave up (retention, failed, aborted and late
  checkpoints, sweeps). A delete that fails is logged in one line and retried later; nothing ever
  waits for one, and what is left after the retries is an orphan the next sweep removes.
  ``InlineDisposer`` runs them at once (tests, tools, and the job's final cleanup).

Both run in daemon threads: a call hung in the store never keeps the process from exiting.
"""

from __future__ import annotations

import heapq
import itertools
import sys
import threading
import time
from concurrent.futures import Future
from typing import Any, Callable

RETRY_DELAYS_S = (1.0, 2.0, 5.0, 10.0, 30.0)  # between attempts of a failed delete; then left to the sweep


def _note_to_stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


class SerialWorker:
    """Runs callables one after the other in a daemon thread; ``submit`` returns a Future."""

    def __init__(self, name: str):
        self._queue: list[tuple[Future, Callable[[], Any]]] = []
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[[], Any]) -> Future:
        future: Future = Future()
        with self._cond:
            if self._closed:
                future.set_exception(RuntimeError("the job manager is shutting down"))
                return future
            self._queue.append((future, fn))
            self._cond.notify()
        return future

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if not self._queue:
                    return
                future, fn = self._queue.pop(0)
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn())
            except BaseException as e:  # noqa: BLE001 - handed to whoever waits for the future
                future.set_exception(e)

    def close(self) -> None:
        """Stop after what is queued (a hung call keeps only this daemon thread)."""
        with self._cond:
            self._closed = True
            self._cond.notify()


class InlineDisposer:
    """Deletes at once, in the caller's thread; failures are left to the next sweep (best effort)."""

    def submit(self, what: str, fn: Callable[[], None], retry: bool = True) -> None:
        try:
            fn()
        except Exception:  # noqa: BLE001 - what stays behind is an orphan the next sweep removes
            pass

    def drain(self, timeout: float) -> bool:
        return True

    def close(self, timeout: float = 0.0) -> bool:
        return True


class Disposer:
    """Deletes in a background thread; a failed delete is logged (one line) and retried later."""

    def __init__(self, note: Callable[[str], None] | None = None,
                 retry_delays: tuple[float, ...] = RETRY_DELAYS_S, name: str = "checkpoint-disposer"):
        self.note = note or _note_to_stderr
        self.retry_delays = retry_delays
        self._heap: list[tuple[float, int, str, Callable[[], None], int, bool]] = []  # due, seq, what, fn, tries, retry
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._busy = False
        self._closed = False
        self.failures = 0  # failed attempts so far (each one logged)
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, what: str, fn: Callable[[], None], retry: bool = True) -> None:
        """Delete ``what`` (for messages) by calling ``fn``, which raises when it could not.
        ``retry``: try again later if it fails (else the next sweep does it)."""
        with self._cond:
            if self._closed:
                return
            heapq.heappush(self._heap, (time.monotonic(), next(self._seq), what, fn, 0, retry))
            self._cond.notify()

    def pending(self) -> int:
        with self._cond:
            return len(self._heap) + (1 if self._busy else 0)

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._closed and not self._heap:
                        return
                    now = time.monotonic()
                    if self._heap and self._heap[0][0] <= now:
                        break
                    self._cond.wait(None if not self._heap else self._heap[0][0] - now)
                _due, _seq, what, fn, tries, retry = heapq.heappop(self._heap)
                self._busy = True
            try:
                fn()
            except Exception as e:  # noqa: BLE001 - logged, retried; never the job's failure
                self._failed(what, fn, tries, retry, e)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _failed(self, what: str, fn: Callable[[], None], tries: int, retry: bool, e: Exception) -> None:
        self.failures += 1
        reason = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}".rstrip(": ")
        if retry and tries < len(self.retry_delays) and not self._closed:
            delay = self.retry_delays[tries]
            self.note(f"Could not delete {what} ({reason}); retrying in {delay:g} s")
            with self._cond:
                heapq.heappush(self._heap, (time.monotonic() + delay, next(self._seq), what, fn, tries + 1, retry))
                self._cond.notify()
        else:
            self.note(f"Could not delete {what} ({reason}); a later sweep of the checkpoint directory removes it")

    def drain(self, timeout: float) -> bool:
        """Wait until every delete due now has run (those waiting for a retry are run at once)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            self._heap = [(min(due, time.monotonic()), *rest) for due, *rest in self._heap]  # type: ignore[misc]
            heapq.heapify(self._heap)
            self._cond.notify_all()
            while self._heap or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.1))
        return True

    def close(self, timeout: float = 0.0) -> bool:
        """Run what is queued for up to ``timeout`` s, then stop (True: nothing was left)."""
        done = self.drain(timeout) if timeout > 0 else not self.pending()
        with self._cond:
            self._closed = True
            self._heap.clear()
            self._cond.notify_all()
        return done
