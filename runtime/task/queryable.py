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

import copy
import fcntl
import json
import os
import pickle
import signal
import socket
import sys
import threading
from typing import Any

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
        value = read(key_view(backend, key), descriptor)
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
    view = copy.copy(backend)
    view.current_key = key
    view.queryable, view.ttl_policies = {}, {}
    real_table = backend.table
    view.table = lambda name, kind: _ReadOnlyTable(real_table(name, kind))
    view.ttl_cleanup = _ignore
    return view


class QueryServer:
    """Answers the job manager's lookups on a connection of its own, without waiting for the batch the
    task is processing.

    On Linux, in the task's main thread: signal-driven I/O. The connection raises SIGIO at the task's
    own thread when a lookup arrives (``F_SETOWN_EX``), and Python runs the handler in that thread at
    its next bytecode boundary: the lookup is answered within microseconds, between two records of the
    batch in progress, by the thread that holds the GIL anyway. A lookup thread (the fallback, and what
    other platforms get) must take the GIL from the task thread: on a machine whose cores the job fills,
    the task thread then waits, GIL released, until the OS finds the lookup thread a core. Measured on
    2 cores at 1,000 lookups/s (bench/queryable_state.py), that wait cost the job ~35% of its throughput
    where signals cost it ~1%.

    Either way the handler sees the state as it is between two bytecodes: a read through ``key_view``,
    a value copied whole in one C call (see the module's docstring)."""

    def __init__(self, address: tuple[str, int], slot: int, attempt: int, operators: dict[int, Any],
                 key_type: Any, last_completed: Any, use_signals: bool | None = None):
        self.operators, self.key_type, self.last_completed = operators, key_type, last_completed
        self.sock = socket.create_connection(address, timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.sendall((json.dumps({"type": "query_channel", "slot": slot, "attempt": attempt}) + "\n").encode())
        self.sock.settimeout(None)
        self.slot = slot
        self._buf = b""
        self._serving = False
        self._previous_handler: Any = None
        self._thread: threading.Thread | None = None
        if use_signals is None:
            use_signals = _signals_possible()
        if use_signals:
            self._start_signals()
            return
        # A lookup's thread waits for the GIL once its request arrives: at most this long (Python's default,
        # 5 ms, would be most of a lookup's time); the task thread is only asked to let go while one waits.
        sys.setswitchinterval(min(sys.getswitchinterval(), SWITCH_INTERVAL_S))
        self._thread = threading.Thread(target=self._serve, name=f"queryable-state-{slot}", daemon=True)
        self._thread.start()

    # -- signal-driven (the task's own thread) -------------------------------------------------------
    def _start_signals(self) -> None:
        fd = self.sock.fileno()
        self._previous_handler = signal.signal(signal.SIGIO, self._on_signal)
        _own_signals(fd, threading.get_native_id())
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_ASYNC)
        self._on_signal()  # what came before the signal was armed

    def _on_signal(self, *_: Any) -> None:
        """SIGIO: answer every whole request there is. Never raises (it runs inside the task's code)."""
        if self._serving:
            return  # a signal inside the handler: the loop below reads what it announced
        self._serving = True
        try:
            while True:
                try:
                    data = self.sock.recv(1 << 16, socket.MSG_DONTWAIT)
                except (BlockingIOError, InterruptedError):
                    break
                if not data:
                    self._stop_signals()  # the job manager went: nothing to answer
                    break
                self._buf += data
                *lines, self._buf = self._buf.split(b"\n")
                for line in lines:
                    self._handle(line)
        except Exception:  # noqa: BLE001 - a lookup's trouble must never surface in the task's code
            self._stop_signals()
        finally:
            self._serving = False

    def _stop_signals(self) -> None:
        try:
            fd = self.sock.fileno()
            if fd >= 0:
                fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_ASYNC)
        except OSError:
            pass

    # -- a thread of its own --------------------------------------------------------------------------
    def _serve(self) -> None:
        reader = self.sock.makefile("rb")
        try:
            for line in reader:
                self._handle(line)
        except (OSError, ValueError):
            pass  # the job manager or the task went: nothing to answer

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

    def close(self) -> None:
        if self._previous_handler is not None:
            self._stop_signals()
            signal.signal(signal.SIGIO, self._previous_handler)
            self._previous_handler = None
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


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
