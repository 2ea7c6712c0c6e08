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

    Either way the handler sees the state as it is between two bytecodes: a read through ``key_view``,
    a value copied whole in one C call (see the module's docstring). SIGIO is not queued: each handler
    run drains every socket until none has anything."""

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
        if use_signals:
            self._tid = threading.get_native_id()
            self._previous_handler = signal.signal(signal.SIGIO, self._on_signal)
            for sock in (self.sock, self.listener):
                self._arm(sock)
            self._on_signal()  # what came before the signal was armed
            return
        self._thread = threading.Thread(target=self._serve, name=f"queryable-state-{slot}", daemon=True)
        self._thread.start()

    # -- signal-driven (the task's own thread) -------------------------------------------------------
    def _arm(self, sock: socket.socket) -> None:
        fd = sock.fileno()
        _own_signals(fd, self._tid)
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_ASYNC)

    def _on_signal(self, *_: Any) -> None:
        """SIGIO: answer every whole request there is. Never raises (it runs inside the task's code)."""
        if self._closed:
            return
        if self._serving:
            # A signal inside the handler (Python runs it nested, at a bytecode boundary of ours): what it
            # announced may have come after our last look at its socket, so the loop below looks again.
            self._again = True
            return
        self._serving = True
        try:
            while True:
                self._again = False
                self._service()
                if not self._again:
                    break
        except Exception:  # noqa: BLE001 - a lookup's trouble must never surface in the task's code
            for sock in (self.sock, self.listener, *[c.sock for c in self.clients.values()]):
                self._disarm(sock)
        finally:
            self._serving = False
        if self._again:  # one that came between the loop's last look and the line above: never lost
            self._on_signal()

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
    def _service(self) -> None:
        """Answer until no socket has anything: the job manager's lookups, new clients, clients' lookups,
        answers a client could not take at once (POLLOUT is asked for only while some wait)."""
        while not self._closed:
            ready = self._poll.poll(0)
            if not ready:
                return
            for fd, events in ready:
                if fd == self._jm_fd:
                    self._from_job_manager()
                elif fd == self._listen_fd:
                    self._accept()
                else:
                    client = self.clients.get(fd)
                    if client is None:  # dropped earlier in this pass
                        continue
                    try:
                        if events & select.POLLOUT:
                            self._flush(client)
                        if events & ~select.POLLOUT:  # data, or the peer's end (then recv says so)
                            self._from_client(client)
                    except Exception:  # noqa: BLE001 - one client's trouble is its own: it is dropped
                        self._drop(client)

    def _from_job_manager(self) -> None:
        try:
            data = self.sock.recv(1 << 16, socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:  # reset: as gone
            data = b""
        if not data:  # the job manager went: nothing to answer for it
            self._forget(self.sock)
            self._jm_fd = -1
            self.sock.close()
            return
        self._buf += data
        *lines, self._buf = self._buf.split(b"\n")
        for line in lines:
            self._handle(line)

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

    def _handle(self, line: bytes) -> None:
        msg = json.loads(line)
        if msg.get("type") != "query":
            return
        answers = [{"id": q["id"], "results": self._answer(q)} for q in msg["batch"]]
        answer = {"type": "query_result", "slot": self.slot, "batch": answers, "checkpoint": self.last_completed()}
        self.sock.sendall((json.dumps(answer, separators=(",", ":"), default=str) + "\n").encode())

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
            self._arm(sock)

    def _from_client(self, client: "_Client") -> None:
        try:
            data = client.sock.recv(1 << 16, socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._drop(client)
            return
        client.buf += data
        try:
            for doc in frames.split(client.buf):
                if client.sock.fileno() < 0:
                    break
                self._send(client, self._client_answer(client, doc))
        except frames.FrameError as e:
            client.closing = True
            self._send(client, {"id": None, "status": 400, "error": str(e)})

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

    def _send(self, client: "_Client", doc: dict) -> None:
        client.pending += frames.encode(doc)
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
        self._forget(client.sock)
        client.sock.close()

    def close(self) -> None:
        self._closed = True
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

    class Owner(ctypes.Structure):
        _fields_ = [("type", ctypes.c_int), ("pid", ctypes.c_int)]

    libc = ctypes.CDLL(None, use_errno=True)
    owner = Owner(_F_OWNER_TID, tid)
    if libc.fcntl(fd, _F_SETOWN_EX, ctypes.byref(owner)) != 0:
        raise OSError(ctypes.get_errno(), "fcntl(F_SETOWN_EX)")
