"""A subtask's side of queryable state: which names it registered, and lookups in its live backend.

Lookups are answered between two bytecodes of the task thread, by a signal handler (``QueryServer``;
a thread of their own where signals cannot be had), so a lookup waits for no batch: it reads the
state through a read-only view of the backend for its key (``key_view``): the same state classes the
function uses, with the view's own current key, over tables whose reads never change them (``peek``:
no copy-on-write copy, no cache admission) and whose writes are dropped (TTL's removal of an expired
value, or its refresh on read, is the function's to do). A value is copied whole before it is
converted (one C-level pickle round trip, which the task thread cannot interleave), so a list or map
the function is changing is never read half-changed.
TTL state answers as the function would see it: an expired value is absent.
"""

from __future__ import annotations

import fcntl
import functools
import hmac
import json
import os
import pickle
import secrets
import select
import signal
import socket
import sys
import threading
import time
import traceback
from typing import Any

from .. import queryable_frames as frames
from ..api.queryable import KeyTypeError, convert_key, to_json
from ..keygroups import assign_to_key_group


def registrations(operators: dict[int, Any], reported: set[tuple[int, str]]) -> list[dict]:
    """Queryable states created since the last call (``reported`` is updated): one entry per name."""
    new = []
    for op_id, op in operators.items():
        backend = op.keyed_backend
        if backend is None or not backend.queryable:
            continue
        for name, d in backend.queryable.items():
            if (op_id, name) not in reported:
                reported.add((op_id, name))
                ttl = d.get_ttl_config()
                new.append({"name": name, "op": op_id, "kind": d.kind, "state": d.name,
                            "ttl": None if ttl is None else {"ms": ttl.ttl_milliseconds(),
                                                             "update": ttl.get_update_type().name,
                                                             "visibility": ttl.get_state_visibility().name}})
    return new


def read(backend: Any, descriptor: Any) -> Any:
    """The current key's value of the state, as the function sees it (None: absent)."""
    kind = descriptor.kind
    if kind == "value":
        return backend.get_state(descriptor).value()
    if kind == "list":
        values = list(backend.get_list_state(descriptor).get() or [])
        return values or None
    if kind == "map":
        entries = dict(backend.get_map_state(descriptor).items())
        return entries or None
    if kind == "reducing":
        return backend.get_reducing_state(descriptor).get()
    return backend.get_aggregating_state(descriptor).get()


def lookup(op: Any, name: str, raw_keys: list, key_type: Any) -> list[dict]:
    """Each key's answer from the operator's live backend: key (as given), found, value (JSON), key group.
    Safe beside the task thread (see the module's docstring)."""
    backend = op.keyed_backend
    descriptor = backend.queryable[name]
    view = key_view(backend, None)  # one per request: each key is set on it in turn
    out = []
    for raw in raw_keys:
        try:
            key = convert_key(raw, key_type)
        except KeyTypeError as e:
            out.append({"key": raw, "error": str(e)})
            continue
        group = assign_to_key_group(key, backend.max_parallelism)
        if group not in backend.key_groups:  # routed with another parallelism than this subtask's
            out.append({"key": raw, "error": f"key group {group} is not in this subtask's "
                                             f"{backend.key_groups.start}..{backend.key_groups.stop - 1}"})
            continue
        view.current_key = key
        value = read(view, descriptor)
        if value is not None and type(value) not in _SCALARS:
            value = pickle.loads(pickle.dumps(value, protocol=5))  # whole, as of one moment
        out.append({"key": raw, "found": value is not None, "value": to_json(value), "key_group": group})
    return out


_SCALARS = {int, float, str, bool, bytes}
SWITCH_INTERVAL_S = 0.001
# Under load, how long the signal-driven server lets requests gather before a pass answers them all
# (Pacer): what a lookup may wait beyond its own time, for a task thread interrupted a few hundred times a
# second instead of once per request.
BATCH_WAIT_S = 0.002
# The longest a pass answers before it lets the task go on (what is left waits for the next pass).
PASS_BUDGET_S = 0.001
_WRITES = frozenset({"put", "put_raw", "remove", "put_all", "load", "thaw", "freeze", "evict_all", "flush",
                     "update_many", "put_many"})


def _ignore(*args: Any, **kwargs: Any) -> None:
    return None


class _ReadOnlyTable:
    """A state table as a lookup reads it: ``peek`` for reads, writes dropped."""

    __slots__ = ("_table",)

    def __init__(self, table: Any):
        self._table = table

    def __getattr__(self, name: str) -> Any:
        return _ignore if name in _WRITES else getattr(self._table, name)

    def get(self, key: Any, default: Any = None) -> Any:
        return self._table.peek(key, default)

    def get_raw(self, key: Any) -> Any:
        return self._table.peek_raw(key)

    def contains(self, key: Any) -> bool:
        return self._table.peek(key, _MISSING) is not _MISSING


_MISSING = object()


def key_view(backend: Any, key: Any) -> Any:
    """The backend as a lookup of ``key`` sees it: its own current key, read-only tables, no TTL cleanup.
    A shallow copy: the tables, database and caches are the backend's own; nothing of the view is
    written back (its registries are its own)."""
    view = object.__new__(type(backend))  # copy.copy without its protocol: a lookup's cost is the task's
    view.__dict__.update(backend.__dict__)
    view.current_key = key
    view.queryable, view.ttl_policies = {}, {}
    real_table = backend.table
    view.table = lambda name, kind: _ReadOnlyTable(real_table(name, kind))
    view.ttl_cleanup = _ignore
    return view


class Pacer:
    """When the signal-driven query server answers at each request's signal and when in timed passes.

    A signal per request costs the task thread more than the lookup does (on this 2-core VM: an interrupt
    from the other core, the signal's frame, a poll, a recv and a send of its own: ~100 us against ~20 us
    of Python; docs/performance.md). So once requests come closer together than ``wait``, the sockets stop
    raising SIGIO and a one-shot timer raises it ``wait`` after each pass instead (BATCH): a pass takes
    what came meanwhile in one recv per connection and answers it in one send, and a lookup waits up to
    ``wait`` more. The same after a pass cut short by its budget: clients sending faster than the task
    answers get at most a budget per ``wait`` of its thread.

    Back to a signal per request (SIGNALS) after two passes in a row that found nothing, or when the
    passes take one request each on average (a client that sends its next request only after the
    answer: the wait would be all its latency, and nothing is saved); that client's requests are then
    not batched for ``hold`` (doubling, up to ``max_hold``, while it goes on) unless a pass is cut.
    Pure: the server does the I/O."""

    BATCH, SIGNALS, NONE = "batch", "signals", ""

    def __init__(self, wait: float = 0.002, enabled: bool = True, judge_after: int = 8, min_per_pass: float = 1.25,
                 hold: float = 0.05, max_hold: float = 1.0):
        self.wait, self.enabled = wait, enabled
        self.judge_after, self.min_per_pass = judge_after, min_per_pass
        self.first_hold, self.max_hold = hold, max_hold
        self.hold = hold
        self.batching = False
        self.last_answered = float("-inf")  # when a pass last answered something
        self.hold_until = float("-inf")
        self.empty = self.passes = self.requests = 0

    def after(self, now: float, answered: int, cut: bool) -> str:
        """What follows a pass that ended at ``now``, answered ``answered`` requests, and was ``cut`` by its
        budget: BATCH (a timed pass ``wait`` from now), SIGNALS (a signal per request again), or NONE."""
        previous, self.last_answered = self.last_answered, (now if answered else self.last_answered)
        if not self.enabled:
            return self.NONE
        if not self.batching:
            if cut or (answered and now - previous < self.wait and now >= self.hold_until):
                self.batching, self.empty, self.passes, self.requests = True, 0, 0, 0
                return self.BATCH
            return self.NONE
        if not answered:
            self.empty += 1
            if self.empty >= 2:
                self.batching = False
                return self.SIGNALS
            return self.BATCH
        self.empty = 0
        self.passes += 1
        self.requests += answered
        if self.passes >= self.judge_after:
            if self.requests < self.min_per_pass * self.passes and not cut:
                self.batching = False
                self.hold_until = now + self.hold
                self.hold = min(self.hold * 2, self.max_hold)
                return self.SIGNALS
            self.hold = self.first_hold
            self.passes = self.requests = 0
        return self.BATCH


class QueryServer:
    """Answers lookups without waiting for the batch the task is processing: the job manager's (on a
    connection to it) and clients' own (on a port of its own, the subtask's lookup port: a client that
    hashes keys as the job does asks the owning subtask directly, and the job manager's CPU and hop drop
    out; the job manager hands clients the port and its ticket, ``QueryRouter``/``query_route``).

    On Linux, in the task's main thread: signal-driven I/O. Every socket of the server raises SIGIO at
    the task's own thread when a lookup (or a connection) arrives (``F_SETOWN_EX``), and Python runs the
    handler in that thread at its next bytecode boundary: the lookup is answered within microseconds,
    between two records of the batch in progress, by the thread that holds the GIL anyway. A lookup
    thread (the fallback, and what other platforms get) must take the GIL from the task thread: on a
    machine whose cores the job fills, the task thread then waits, GIL released, until the OS finds the
    lookup thread a core. Measured on 2 cores at 1,000 lookups/s (bench/queryable_state.py), that wait
    cost the job ~35% of its throughput where signals cost it ~1%.

    Under load the signals are paced (``Pacer``): requests closer together than ``BATCH_WAIT_S`` are
    answered in timed passes, each taking what came meanwhile; and a pass answers for ``PASS_BUDGET_S``
    at most before the task goes on, so clients sending faster than the task answers slow their own
    lookups, never stop the job (before, eight clients in a closed loop held the task thread ~85% of the
    time).

    Either way the handler sees the state as it is between two bytecodes: a read through ``key_view``,
    a value copied whole in one C call (see the module's docstring). SIGIO is not queued: each pass
    drains every socket until none has anything or its budget is spent."""

    MAX_PENDING = 64 << 20  # answers a client has not read; beyond it the client is dropped

    def __init__(self, address: tuple[str, int], slot: int, attempt: int, operators: dict[int, Any],
                 key_type: Any, last_completed: Any, use_signals: bool | None = None,
                 listen_host: str = "127.0.0.1", advertise_host: str | None = None):
        self.operators, self.key_type, self.last_completed = operators, key_type, last_completed
        self.sock = socket.create_connection(address, timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.sendall((json.dumps({"type": "query_channel", "slot": slot, "attempt": attempt}) + "\n").encode())
        self.sock.settimeout(None)
        self.slot, self.attempt = slot, attempt
        self.listener = socket.create_server((listen_host, 0))
        self.listener.setblocking(False)
        self.ticket = secrets.token_urlsafe(18)
        self.port = [advertise_host or listen_host, self.listener.getsockname()[1], self.ticket]
        self.clients: dict[int, _Client] = {}
        self._backlog: set[_Client] = set()  # clients with whole requests read and not yet answered
        self._buf = b""
        self._serving = self._again = False
        self._closed = False
        self._previous_handler: Any = None
        self._thread: threading.Thread | None = None
        self._tid = 0
        # Which sockets have something, in one system call (poll with no timeout) instead of a recv or
        # accept on each socket that fails with EAGAIN and raises. Measured (docs/performance.md): the
        # handler's cost per lookup is dominated by the recv and send themselves; this removes the rest.
        self._poll = select.poll()
        self._jm_fd, self._listen_fd = self.sock.fileno(), self.listener.fileno()
        self._poll.register(self._jm_fd, select.POLLIN)
        self._poll.register(self._listen_fd, select.POLLIN)
        if use_signals is None:
            use_signals = _signals_possible()
        # A thread waiting for the GIL asks its holder to let go after the switch interval: Python's 5 ms
        # would be most of a lookup's time, whether the lookup waits in the lookup thread or in the task
        # thread while the snapshot writer holds the GIL. Only a waiting thread makes it matter.
        sys.setswitchinterval(min(sys.getswitchinterval(), SWITCH_INTERVAL_S))
        self._timer: _ThreadTimer | None = None
        self._pacer = Pacer(enabled=False)
        if use_signals:
            self._tid = threading.get_native_id()
            try:
                self._timer = _ThreadTimer(signal.SIGIO, self._tid)
                self._pacer = Pacer(BATCH_WAIT_S)
            except OSError:  # no POSIX timers: a signal per request, always
                self._timer = None
            self._previous_handler = signal.signal(signal.SIGIO, self._on_signal)
            for sock in (self.sock, self.listener):
                self._arm(sock)
            self._on_signal()  # what came before the signal was armed
            return
        self._thread = threading.Thread(target=self._serve, name=f"queryable-state-{slot}", daemon=True)
        self._thread.start()

    # -- signal-driven (the task's own thread) -------------------------------------------------------
    def _arm(self, sock: socket.socket) -> None:
        _own_signals(sock.fileno(), self._tid)
        self._arm_flags(sock)

    @staticmethod
    def _arm_flags(sock: socket.socket) -> None:
        fd = sock.fileno()
        if fd >= 0:
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_ASYNC)

    def _on_signal(self, *_: Any) -> None:
        """SIGIO (a socket's, or the pacing timer's): a pass over the sockets. Never raises (it runs inside
        the task's code)."""
        if self._closed:
            return
        if self._serving:
            # A signal inside the handler (Python runs it nested, at a bytecode boundary of ours): what it
            # announced may have come after our last look at its socket, so the handler looks again.
            self._again = True
            return
        self._serving = True
        timed = False
        try:
            while True:
                self._again = False
                answered, cut = self._service(PASS_BUDGET_S if self._timer is not None else None)
                was_batching = self._pacer.batching
                step = self._pacer.after(time.monotonic(), answered, cut)
                if step == Pacer.BATCH:
                    if not was_batching:
                        for sock in self._batched_sockets():
                            self._disarm(sock)
                    timed = True
                    break
                if step == Pacer.SIGNALS:  # a signal per request again, and a look at what came in before
                    for sock in self._batched_sockets():  # the sockets were armed
                        self._arm_flags(sock)
                    continue
                if not self._again:
                    break
        except Exception:  # noqa: BLE001 - a lookup's trouble must never surface in the task's code
            # A fault of the handler itself: said once in the task's log, and the lookups go on in a thread.
            traceback.print_exc()
            if self._timer is not None:
                self._timer.delete()
                self._timer = None
            for sock in (self.sock, self.listener, *[c.sock for c in self.clients.values()]):
                self._disarm(sock)
            self._pacer = Pacer(enabled=False)
            self._thread = threading.Thread(target=self._serve, name=f"queryable-state-{self.slot}", daemon=True)
            self._thread.start()
            return
        finally:
            self._serving = False
        if timed and self._timer is not None:
            # Started once the handler is done: a timer signal inside it would only set _again.
            self._timer.start(BATCH_WAIT_S)
        elif self._again:  # one that came in the last instant: never lost
            self._on_signal()

    def _batched_sockets(self) -> list[socket.socket]:
        """What raises SIGIO per request: the job manager's connection and the clients' (not the listener:
        a new client is rare, and is accepted at once)."""
        socks = [c.sock for c in self.clients.values()]
        if self._jm_fd >= 0:
            socks.append(self.sock)
        return socks

    def _disarm(self, sock: socket.socket) -> None:
        try:
            fd = sock.fileno()
            if fd >= 0:
                fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_ASYNC)
        except OSError:
            pass

    # -- a thread of its own --------------------------------------------------------------------------
    def _serve(self) -> None:
        while not self._closed:
            try:
                self._poll.poll()  # blocking, the GIL released
                self._service()
            except (OSError, ValueError):
                if self._closed:
                    return

    # -- both -----------------------------------------------------------------------------------------
    def _service(self, budget: float | None = None) -> tuple[int, bool]:
        """Answer until no socket has anything: the job manager's lookups, new clients, clients' lookups,
        answers a client could not take at once (POLLOUT is asked for only while some wait). Returns how
        many requests it answered, and whether it stopped at ``budget`` seconds with requests still there
        (clients sending faster than it answers must not hold the task thread: the rest waits a pass; a
        client's requests already read wait in its buffer, its socket unread meanwhile)."""
        answered = 0
        deadline = None if budget is None else time.perf_counter() + budget
        for client in list(self._backlog):  # whole requests read in an earlier pass
            self._backlog.discard(client)
            answered += self._answer_buffered(client, deadline)
        while not self._closed:
            if deadline is not None and answered and time.perf_counter() > deadline:
                return answered, bool(self._backlog or self._poll.poll(0))
            ready = self._poll.poll(0)
            if not ready:
                break
            for fd, events in ready:
                if fd == self._jm_fd:
                    answered += self._from_job_manager()
                elif fd == self._listen_fd:
                    self._accept()
                else:
                    client = self.clients.get(fd)
                    if client is None or client in self._backlog:  # dropped in this pass; or still behind
                        continue
                    try:
                        if events & select.POLLOUT:
                            self._flush(client)
                        if events & ~select.POLLOUT:  # data, or the peer's end (then recv says so)
                            answered += self._from_client(client, deadline)
                    except Exception:  # noqa: BLE001 - one client's trouble is its own: it is dropped
                        self._drop(client)
        return answered, bool(self._backlog)

    def _from_job_manager(self) -> int:
        try:
            data = self.sock.recv(1 << 16, socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return 0
        except OSError:  # reset: as gone
            data = b""
        if not data:  # the job manager went: nothing to answer for it
            self._forget(self.sock)
            self._jm_fd = -1
            self.sock.close()
            return 0
        self._buf += data
        *lines, self._buf = self._buf.split(b"\n")
        out = [answer for answer in map(self._handle, lines) if answer is not None]
        if out:  # every answer of the pass in one send
            self.sock.sendall(b"".join(out))
        return len(out)

    def _forget(self, sock: socket.socket) -> None:
        """Stop watching ``sock`` (before it is closed: its descriptor number may be reused)."""
        try:
            fd = sock.fileno()
            if fd >= 0:
                self._poll.unregister(fd)
        except (KeyError, ValueError, OSError):
            pass
        if self._thread is None:
            self._disarm(sock)

    def _handle(self, line: bytes) -> bytes | None:
        """The answer line to one of the job manager's query lines (None: not a query)."""
        msg = json.loads(line)
        if msg.get("type") != "query":
            return None
        answers = [{"id": q["id"], "results": self._answer(q)} for q in msg["batch"]]
        answer = {"type": "query_result", "slot": self.slot, "batch": answers, "checkpoint": self.last_completed()}
        return (json.dumps(answer, separators=(",", ":"), default=str) + "\n").encode()

    def _answer(self, query: dict) -> list[dict]:
        op = self.operators.get(int(query["op"]))
        name = str(query["name"])
        if op is None or op.keyed_backend is None or name not in op.keyed_backend.queryable:
            return [{"key": k, "error": f"this subtask has no queryable state {name!r}"} for k in query["keys"]]
        try:
            return lookup(op, name, query["keys"], self.key_type(op.node))
        except Exception as e:  # noqa: BLE001 - a lookup's failure is the lookup's, never the task's
            return [{"key": k, "error": f"{type(e).__name__}: {e}"} for k in query["keys"]]

    # -- clients on the lookup port ------------------------------------------------------------------
    def _accept(self) -> None:
        try:
            sock, _ = self.listener.accept()
        except OSError:  # BlockingIOError: another pass took it
            return
        sock.setblocking(True)  # reads and writes are MSG_DONTWAIT: never a wait in the task's thread
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.clients[sock.fileno()] = _Client(sock)
        self._poll.register(sock.fileno(), select.POLLIN)
        if self._thread is None:
            _own_signals(sock.fileno(), self._tid)
            if not self._pacer.batching:  # else the timer's passes look at it, and arm it when they end
                self._arm_flags(sock)

    def _from_client(self, client: "_Client", deadline: float | None = None) -> int:
        try:
            data = client.sock.recv(1 << 16, socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return 0
        except OSError:
            data = b""
        if not data:
            self._drop(client)
            return 0
        client.buf += data
        return self._answer_buffered(client, deadline)

    def _answer_buffered(self, client: "_Client", deadline: float | None) -> int:
        """Answer the whole requests in the client's buffer, all in one send (a pipelining client sends
        several), until ``deadline``: the rest waits in the backlog for the next pass."""
        answered = 0
        try:
            for doc in frames.split(client.buf):
                client.pending += frames.encode(self._client_answer(client, doc))
                answered += 1
                if client.closing:
                    break
                if deadline is not None and time.perf_counter() > deadline:
                    if len(client.buf) >= frames.HEADER.size:
                        self._backlog.add(client)
                    break
        except frames.FrameError as e:
            client.closing = True
            client.pending += frames.encode({"id": None, "status": 400, "error": str(e)})
        self._send(client)
        return answered

    def _client_answer(self, client: "_Client", doc: dict) -> dict:
        if not client.hello:
            if not hmac.compare_digest(str(doc.get("ticket") or "").encode(), self.ticket.encode()):
                client.closing = True
                return {"status": 401, "error": "missing or wrong ticket (ask the job manager's proxy for the "
                                                "route: {\"route\": name})"}
            client.hello = True
            return {"slot": self.slot, "attempt": self.attempt}
        rid, name, keys = doc.get("id"), doc.get("name"), doc.get("keys")
        if not isinstance(name, str) or not isinstance(keys, list):
            return {"id": rid, "status": 400, "error": 'a request is {"id": ..., "name": "<state>", "keys": [...]}'}
        op = next((op for op in self.operators.values()
                   if op.keyed_backend is not None and name in op.keyed_backend.queryable), None)
        if op is None:
            return {"id": rid, "status": 404, "error": f"this subtask has no queryable state {name!r}"}
        try:
            results = lookup(op, name, keys, self.key_type(op.node))
        except Exception as e:  # noqa: BLE001 - a lookup's failure is the lookup's, never the task's
            return {"id": rid, "status": 500, "error": f"{type(e).__name__}: {e}"}
        return {"id": rid, "status": 200, "results": results, "checkpoint": self.last_completed()}

    def _send(self, client: "_Client") -> None:
        self._flush(client)
        if client.closing or len(client.pending) > self.MAX_PENDING:
            self._drop(client)

    def _flush(self, client: "_Client") -> None:
        try:
            sent = client.sock.send(client.pending, socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            client.pending.clear()
            sent = 0
        del client.pending[:sent]
        waiting = bool(client.pending)
        if waiting != client.waiting and client.sock.fileno() >= 0:
            # the socket's space comes back as POLLOUT (and, armed, a SIGIO): asked for only while needed
            client.waiting = waiting
            self._poll.modify(client.fd, select.POLLIN | select.POLLOUT if waiting else select.POLLIN)

    def _drop(self, client: "_Client") -> None:
        self.clients.pop(client.fd, None)
        self._backlog.discard(client)
        self._forget(client.sock)
        client.sock.close()

    def close(self) -> None:
        self._closed = True
        if self._timer is not None:
            self._timer.delete()
            self._timer = None
        if self._previous_handler is not None:
            for sock in (self.sock, self.listener, *[c.sock for c in self.clients.values()]):
                self._disarm(sock)
            signal.signal(signal.SIGIO, self._previous_handler)
            self._previous_handler = None
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        for sock in (self.sock, self.listener, *[c.sock for c in self.clients.values()]):
            sock.close()
        self.clients.clear()
        self._backlog.clear()


class _Client:
    """A client on the lookup port: its unread bytes, answers it has not taken, whether it showed its ticket."""

    __slots__ = ("sock", "fd", "buf", "pending", "hello", "closing", "waiting")

    def __init__(self, sock: socket.socket):
        self.sock, self.fd = sock, sock.fileno()
        self.buf, self.pending = bytearray(), bytearray()
        self.hello = self.closing = self.waiting = False


_F_SETOWN_EX = 15  # fcntl.h (Linux): the owner of a descriptor's signals is one thread, not the process
_F_OWNER_TID = 0


def _signals_possible() -> bool:
    return (sys.platform.startswith("linux") and hasattr(signal, "SIGIO")
            and threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGIO) in (signal.SIG_DFL, None))


def _own_signals(fd: int, tid: int) -> None:
    """SIGIO of ``fd`` goes to thread ``tid`` only: delivered to the process, it could interrupt any
    thread's system call (RocksDB's, librdkafka's), and only the main thread runs Python's handlers."""
    import ctypes

    libc, owner_type = _fcntl_ex()
    owner = owner_type(_F_OWNER_TID, tid)
    if libc.fcntl(fd, _F_SETOWN_EX, ctypes.byref(owner)) != 0:
        raise OSError(ctypes.get_errno(), "fcntl(F_SETOWN_EX)")


@functools.lru_cache(maxsize=1)
def _fcntl_ex() -> tuple[Any, Any]:
    """libc and ``struct f_owner_ex``, made once (a connection's set-up used to load them anew)."""
    import ctypes

    class Owner(ctypes.Structure):
        _fields_ = [("type", ctypes.c_int), ("pid", ctypes.c_int)]

    return ctypes.CDLL(None, use_errno=True), Owner


class _ThreadTimer:
    """A one-shot POSIX timer raising ``signo`` in one thread (``timer_create`` with SIGEV_THREAD_ID),
    so it interrupts the task thread only, as ``F_SETOWN_EX`` makes its sockets' signals do."""

    def __init__(self, signo: int, tid: int):
        import ctypes

        class SigEvent(ctypes.Structure):  # struct sigevent (Linux): 64 bytes, the thread id in the union
            _fields_ = [("value", ctypes.c_void_p), ("signo", ctypes.c_int), ("notify", ctypes.c_int),
                        ("tid", ctypes.c_int), ("pad", ctypes.c_int * 11)]

        class TimeSpec(ctypes.Structure):
            _fields_ = [("sec", ctypes.c_long), ("nsec", ctypes.c_long)]

        class ITimerSpec(ctypes.Structure):
            _fields_ = [("interval", TimeSpec), ("value", TimeSpec)]

        self._libc = ctypes.CDLL(None, use_errno=True)
        self._spec, self._byref = ITimerSpec(), ctypes.byref
        self._id = ctypes.c_void_p()
        event = SigEvent(None, signo, _SIGEV_THREAD_ID, tid)
        if self._libc.timer_create(_CLOCK_MONOTONIC, ctypes.byref(event), ctypes.byref(self._id)) != 0:
            raise OSError(ctypes.get_errno(), "timer_create")
        self._set = self._libc.timer_settime
        self._set.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]

    def start(self, seconds: float) -> None:
        ns = int(seconds * 1e9)
        self._spec.value.sec, self._spec.value.nsec = divmod(ns, 1_000_000_000)
        self._set(self._id, 0, self._byref(self._spec), None)

    def delete(self) -> None:
        self._libc.timer_delete(self._id)


_SIGEV_THREAD_ID = 4  # asm-generic/siginfo.h
_CLOCK_MONOTONIC = 1
