"""The job manager's buffer of collected records (``execute_and_collect``), between the collect
sinks' subtasks and the program reading them (connectors/collect.py says how the pieces fit).

Pure decisions, no I/O: each call returns the acknowledgements to send, as (slot, sink id, seq).
The job manager keeps the messages as they came (base64 text and its signature): the program's
iterator checks the signature and unpickles.

* A message marked visible (no checkpointing) is readable at once; otherwise it waits in
  ``pending`` for the commit of its subtask up to its number (the checkpoint after it completed).
* A message is acknowledged when it arrives if the visible, unread messages are under ``limit``
  bytes or a reader is waiting; otherwise its acknowledgement waits until the reader took enough.
  The sink sends at most a few messages ahead of its acknowledgements, so a program that does not
  read holds the job (backpressure) while the buffer stays bounded.
* Pending messages of attempts before the current one are dropped once the current attempt's
  tasks all run (each restored sink subtask committed what its checkpoint held before that).
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

Ack = tuple  # (slot, sink id, seq)
LIMIT = 4 << 20  # bytes of visible, unread messages before acknowledgements wait for the reader


class CollectBuffer:
    def __init__(self, limit: int = LIMIT):
        self.limit = limit
        self._cond = threading.Condition()
        self._visible: dict[str, deque] = {}  # sink id -> (data, mac, attempt, slot, seq), oldest first
        self._visible_bytes = 0
        self._pending: dict[tuple[str, int, int], list] = {}  # (sink id, attempt, slot) -> [(seq, item)]
        self._deferred: list[Ack] = []  # acknowledgements owed, oldest first
        self._waiting = 0  # readers blocked in take()
        self.attempt = 0
        self.received = 0  # messages, for tests and metrics
        self.dropped = 0  # pending messages of failed attempts that were dropped

    # -- from the tasks (the job manager's event loop) --------------------------------------------
    def add(self, msg: dict) -> list[Ack]:
        sink_id, attempt, slot, seq = str(msg["id"]), int(msg["attempt"]), int(msg["slot"]), int(msg["seq"])
        item = (str(msg["data"]), str(msg["mac"]), attempt, slot, seq)
        with self._cond:
            self.received += 1
            if msg.get("visible"):
                self._show(sink_id, item)
            else:
                self._pending.setdefault((sink_id, attempt, slot), []).append((seq, item))
            ack = (slot, sink_id, seq)
            if self._room():
                return [ack]
            self._deferred.append(ack)
            return []

    def commit(self, msg: dict) -> list[Ack]:
        """A checkpoint covering (sink, attempt, slot) up to ``seq`` completed: those become readable."""
        key = (str(msg["id"]), int(msg["attempt"]), int(msg["slot"]))
        seq = int(msg["seq"])
        with self._cond:
            waiting = self._pending.get(key)
            if not waiting:
                return []
            ready = [item for s, item in waiting if s <= seq]
            rest = [(s, item) for s, item in waiting if s > seq]
            if rest:
                self._pending[key] = rest
            else:
                del self._pending[key]
            for item in ready:
                self._show(key[0], item)
            return []

    def begin_attempt(self, attempt: int) -> None:
        with self._cond:
            self.attempt = attempt
            self._deferred = []  # owed to the old attempt's tasks, which are gone

    def attempt_running(self, attempt: int) -> None:
        """Every task of ``attempt`` runs (restored sinks committed first): older pending messages
        can never be committed any more."""
        with self._cond:
            for key in [k for k in self._pending if k[1] < attempt]:
                self.dropped += len(self._pending.pop(key))

    def _show(self, sink_id: str, item: tuple) -> None:
        self._visible.setdefault(sink_id, deque()).append(item)
        self._visible_bytes += len(item[0])
        self._cond.notify_all()

    def _room(self) -> bool:
        return self._visible_bytes < self.limit or self._waiting > 0

    # -- from the program ------------------------------------------------------------------------
    def take(self, sink_id: str, timeout: float) -> tuple[Any, list[Ack]]:
        """The oldest readable message of ``sink_id`` (None after ``timeout`` s without one) and the
        acknowledgements that may go out now."""
        with self._cond:
            queue = self._visible.get(sink_id)
            if not queue:
                self._waiting += 1
                try:
                    acks = self._release()  # the reader waits: everything owed may go (no deadlock
                    if acks:               # with a sink that needs room to reach its next barrier)
                        return None, acks
                    self._cond.wait_for(lambda: bool(self._visible.get(sink_id)), timeout)
                finally:
                    self._waiting -= 1
                queue = self._visible.get(sink_id)
                if not queue:
                    return None, self._release()
            item = queue.popleft()
            self._visible_bytes -= len(item[0])
            return item, self._release()

    def _release(self) -> list[Ack]:
        if not self._deferred or not self._room():
            return []
        acks, self._deferred = self._deferred, []
        return acks

    def buffered_bytes(self) -> int:
        with self._cond:
            return self._visible_bytes + sum(len(i[0]) for items in self._pending.values() for _, i in items)


__all__ = ["CollectBuffer", "LIMIT"]
