"""``print()`` in user functions goes to the job's standard output, as in PyFlink.

PyFlink's Python workers print to the TaskManager's stdout (its ``.out`` file). Here the tasks run
in Spark's Python workers, whose file descriptor 1 PySpark points at stderr (``sys.stdout`` too), so
a function's ``print`` ended up among the runtime's notes on stderr. While a slot runs, its worker's
``sys.stdout`` is a proxy that collects the lines the slot's thread writes and sends them to the job
manager as PrintSink's lines are sent, which writes them to the stdout of ``streamjob run`` (the
driver's); ``sys.stderr`` (``print(..., file=sys.stderr)``, logging, the runtime's notes) is left as
it is. A thread of its own that a function starts prints through the slot too when the worker runs
only one slot; otherwise, as any other code, to the worker's own stdout.

Lines are batched: sent when ~64 KiB are pending, on ``flush`` (``print(..., flush=True)``), on
every turn of the slot's loop that has some, and when the slot ends or fails. A line not ended by a
newline is sent at the end.
"""

from __future__ import annotations

import io
import sys
import threading
from typing import Any, Callable

_BATCH_BYTES = 1 << 16

_lock = threading.Lock()
_by_thread: dict[int, "SlotOutput"] = {}
_original: Any = None  # sys.stdout before the proxy went in


class SlotOutput:
    """The user output of one slot: complete lines, batched, to ``send`` (a list of lines)."""

    def __init__(self, send: Callable[[list[str]], None]):
        self._send = send
        self._partial = ""
        self._lines: list[str] = []
        self._bytes = 0
        self._lock = threading.Lock()

    @property
    def pending(self) -> bool:
        return bool(self._lines)

    def write(self, text: str) -> int:
        if not text:
            return 0
        with self._lock:
            parts = (self._partial + text).split("\n")
            self._partial = parts.pop()
            if parts:
                self._lines.extend(parts)
                self._bytes += sum(len(p) for p in parts)
            full = self._bytes >= _BATCH_BYTES
        if full:
            self.flush()
        return len(text)

    def flush(self, everything: bool = False) -> None:
        with self._lock:
            if everything and self._partial:
                self._lines.append(self._partial)
                self._partial = ""
            lines, self._lines, self._bytes = self._lines, [], 0
        if lines:
            self._send(lines)


def _fallback() -> Any:
    """Where output of no slot goes: the stdout the proxy replaced (the interpreter's once it is gone,
    for a reference to the proxy kept past the last slot)."""
    return _original if _original is not None else sys.__stdout__


class _Stdout(io.TextIOBase):
    """``sys.stdout`` while slots run: the current thread's slot, else the one slot, else the original."""

    def _target(self) -> SlotOutput | None:
        target = _by_thread.get(threading.get_ident())
        if target is None and len(_by_thread) == 1:
            target = next(iter(_by_thread.values()), None)
        return target

    def write(self, text: str) -> int:  # type: ignore[override]
        target = self._target()
        if target is None:
            return _fallback().write(text)
        return target.write(text)

    def flush(self) -> None:
        target = self._target()
        if target is None:
            _fallback().flush()
        else:
            target.flush()

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return _fallback().fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(_fallback(), "encoding", "utf-8") or "utf-8"

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return getattr(_fallback(), "errors", None)


def attach(output: SlotOutput) -> None:
    """Route this thread's ``print`` (and ``sys.stdout.write``) to ``output`` until ``detach``."""
    global _original
    with _lock:
        if not isinstance(sys.stdout, _Stdout):
            _original = sys.stdout
            sys.stdout = _Stdout()
        _by_thread[threading.get_ident()] = output


def detach(output: SlotOutput) -> None:
    """Send what ``output`` holds; the thread prints where it did before once no slot is attached."""
    global _original
    try:
        output.flush(everything=True)
    finally:
        with _lock:
            for ident, o in list(_by_thread.items()):
                if o is output:
                    del _by_thread[ident]
            if not _by_thread and isinstance(sys.stdout, _Stdout):
                sys.stdout = _original
                _original = None


__all__ = ["SlotOutput", "attach", "detach"]
