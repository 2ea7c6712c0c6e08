"""The control channel between tasks and the job manager: JSON lines over TCP.

Task -> job manager: ``register`` with its slot and the attempt its stage was submitted
for (answered by ``deploy``: what to restore; or by ``refused`` when that attempt is over or
the slot is taken, and the task ends without touching anything), ``address`` (where its data server listens; once every task of the attempt
sent one, the job manager answers each with ``peers``, all addresses by slot), ``running``, ``metrics``, ``print``,
``collect`` / ``collect_commit`` (execute_and_collect's records), ``ack`` / ``decline`` (checkpoint n,
with state handles and timings), ``end_of_data``, ``iteration`` (a loop head's termination round report),
``failed``, ``finished``.
Job manager -> task: ``deploy``, ``trigger`` (checkpoint n), ``complete`` (n is
durable: sinks may commit), ``abort`` (n is given up), ``stop`` (graceful: sources
end, everything drains, sinks finish), ``collect_ack``, ``iteration_round`` / ``iteration_end`` (the
next round of a loop's termination check, or its end: task/iteration_rounds.py).

JSON, not pickle: the job manager never unpickles what arrives on its port.
"""

from __future__ import annotations

import json
import os
import select
import selectors
import time
import socket
from collections import deque
from typing import Any

REGISTER = "register"
METRICS = "metrics"
PRINT = "print"
FAILED = "failed"
FINISHED = "finished"
STOP = "stop"
DEPLOY = "deploy"
RUNNING = "running"
ACK = "ack"
DECLINE = "decline"
END_OF_DATA = "end_of_data"
TRIGGER = "trigger"
COMPLETE = "complete"
ABORT = "abort"
END_ATTEMPT = "end_attempt"  # job manager -> task: the attempt is over (a rescale): end now, as on a failure
ADDRESS = "address"
PEERS = "peers"
COLLECT = "collect"  # task -> job manager: records of a collect sink (connectors/collect.py)
COLLECT_COMMIT = "collect_commit"  # task -> job manager: a collect sink's records up to seq are committed
COLLECT_ACK = "collect_ack"  # job manager -> task: a collect message was taken in
REFUSED = "refused"
QUERYABLE = "queryable"  # task -> job manager: queryable states its operators created (name, operator, kind)
# Lookups travel on a connection of their own per task (opened with QUERY_CHANNEL), answered by a thread
# beside the task thread (task/queryable.py): a lookup never waits behind the task's batch.
QUERY_CHANNEL = "query_channel"  # task -> job manager: this connection answers the slot's lookups
QUERY = "query"  # job manager -> task: look keys up in a queryable state
QUERY_RESULT = "query_result"  # task -> job manager: the answers, by query id


class AttemptRefused(ConnectionError):
    """The job manager refused this task: its attempt is over (or its slot has a task already)."""


def encode(msg: dict) -> bytes:
    return (json.dumps(msg, separators=(",", ":"), default=str) + "\n").encode()


class ControlClient:
    """Task side. Non-blocking once connected; polled by the slot's loop."""

    def __init__(self, address: tuple[str, int], slot: int, attempt: int, timeout: float = 30.0):
        self.slot = slot
        self.address = address
        self.sock = socket.create_connection(address, timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._out = bytearray()
        self._in = bytearray()
        self.inbox: deque[dict] = deque()
        self.closed = False
        self._selector: selectors.BaseSelector | None = None
        self.send({"type": REGISTER, "slot": slot, "attempt": attempt, "pid": os.getpid(), "ppid": os.getppid()})
        self.sock.setblocking(False)

    def wait_for(self, kind: str, timeout: float = 60.0) -> dict:
        """Block until the job manager sends a message of ``kind`` (before the slot's loop runs)."""
        deadline = time.monotonic() + timeout
        while True:
            for i, msg in enumerate(self.inbox):
                if msg.get("type") == kind:
                    del self.inbox[i]
                    return msg
                if msg.get("type") == REFUSED:
                    raise AttemptRefused(str(msg.get("reason", "refused by the job manager")))
            left = deadline - time.monotonic()
            if left <= 0 or self.closed:
                raise ConnectionError(f"the job manager did not send {kind!r} within {timeout:.0f} s")
            self.try_write()
            select.select([self.sock], [], [], min(left, 0.5))
            self.on_readable()

    def attach(self, selector: selectors.BaseSelector) -> None:
        self._selector = selector
        selector.register(self.sock, selectors.EVENT_READ, self)

    def detach(self) -> None:
        """Leave the slot's selector (before the slot closes it); sends then block briefly."""
        if self._selector is not None:
            try:
                self._selector.unregister(self.sock)
            except (KeyError, ValueError):
                pass
            self._selector = None

    def send(self, msg: dict) -> None:
        if self.closed:
            return
        self._out += encode(msg)
        self.try_write()

    def backlog(self) -> int:
        return len(self._out)

    def try_write(self) -> None:
        while self._out:
            try:
                n = self.sock.send(self._out)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                self.closed = True
                return
            del self._out[:n]
        if self._selector is not None and not self.closed:
            events = selectors.EVENT_READ | (selectors.EVENT_WRITE if self._out else 0)
            self._selector.modify(self.sock, events, self)

    def on_readable(self) -> bool:
        try:
            data = self.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            data = b""
        if not data:
            self.closed = True
            if self._selector is not None:
                self._selector.unregister(self.sock)
            self.inbox.append({"type": "job_manager_lost"})
            return True
        self._in += data
        while True:
            nl = self._in.find(b"\n")
            if nl < 0:
                break
            line = bytes(self._in[:nl])
            del self._in[: nl + 1]
            if line.strip():
                self.inbox.append(json.loads(line))
        return True

    def flush(self, timeout: float = 5.0) -> None:
        """Block until queued messages are out (used at the end of a task)."""
        if self.closed or not self._out:
            return
        self.sock.setblocking(True)
        self.sock.settimeout(timeout)
        try:
            self.sock.sendall(bytes(self._out))
            self._out.clear()
        except OSError:
            self.closed = True
        finally:
            try:
                self.sock.setblocking(False)
            except OSError:
                pass

    def close(self) -> None:
        self.flush()
        self.closed = True
        self.detach()
        self.sock.close()


def message(kind: str, **fields: Any) -> dict:
    return {"type": kind, **fields}
