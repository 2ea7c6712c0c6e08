"""The embedded local Spark's Python daemon, loaded before Spark asks for it.

Spark starts its Python daemon (``pydaemon``) when the job's stage is submitted, and the daemon
loads the task's modules (~0.85 s on 2 cores) before it forks the first worker: on the path to the
first record, after the JVM and the SparkContext. ``streamjob run`` on a local master starts a
*zygote* instead, beside the JVM's launch: ``python -m streamjob.runtime.cluster.pydaemon --zygote
PATH`` loads those modules and waits on a Unix socket. When Spark starts its daemon, that process
(the *proxy*) hands the zygote its standard streams (``SCM_RIGHTS``), arguments, environment and
working directory; the zygote takes them as its own and runs PySpark's daemon loop in place of the
proxy, which stays until the zygote ends and passes Spark's SIGTERM on to it. Measured on 2 cores
(bench/startup.py): the first worker starts 0.67 s sooner after the stage is submitted, the JVM comes
up 0.35 s later (the zygote's imports take CPU from its launch), the first record comes 0.33 s
sooner (2.73 s against 3.06 s).

Anything amiss (no zygote, already taken by an earlier daemon of the same run, a refused
connection) and the proxy is an ordinary daemon, as without. A zygote nobody took ends at the run's
exit; if the run was killed, when the zygote sees its parent gone; at the latest after ``WAIT_S``.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Callable

from . import process_tree

ENV = "STREAMJOB_DAEMON_ZYGOTE"  # the zygote's socket, inherited by the JVM and so by the daemon Spark starts
WAIT_S = 600.0  # a zygote nobody took ends after this long
READY_S = 120.0  # how long a proxy waits for the zygote to finish loading (a machine far too busy: as without)
TAKEN = "taken"  # made beside the socket once a daemon's process connected
FULL_SPEED = "--full-speed"  # the zygote's argument: load at its own priority (``start``'s ``lower``)
_PREFIX = "streamjob-zygote-"
_STREAMS = (0, 1, 2)

_started: subprocess.Popen | None = None


def start(module: str, lower: bool = True) -> None:
    """Driver side: launch the zygote (``python -m module --zygote PATH``) and set ``ENV`` so that the
    daemon Spark starts finds it. At most once per process: a later daemon (a new JVM) starts as usual.
    ``lower``: it loads at the lowest priority, yielding to the JVM's launch (not when no JVM launches:
    the run takes a session cluster's, and the stage comes soon)."""
    global _started
    if _started is not None or os.environ.get(ENV) == "off":
        return
    _sweep(tempfile.gettempdir())
    # A private (0700) folder, named by this run's pid: the next run removes it if this one was killed.
    path = os.path.join(tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-"), "zygote.sock")
    # No stream of the run's: a caller reading its output to the end must not wait for the zygote. The
    # hash seed PySpark gives its workers (SparkContext's environment): fixed when an interpreter starts.
    # Spark starts its daemon unbuffered (PYTHONUNBUFFERED=YES).
    env = {**os.environ, "PYTHONHASHSEED": os.environ.get("PYTHONHASHSEED", "0"), "PYTHONUNBUFFERED": "YES"}
    _started = subprocess.Popen([sys.executable, "-m", module, "--zygote", path, *([] if lower else [FULL_SPEED])],
                                stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, close_fds=True, env=env)
    os.environ[ENV] = path
    atexit.register(_end_untaken, _started, path)
    # Its end is collected whenever it comes: taken, the zygote ends with its JVM, and after a JVM
    # failover it would otherwise stay a zombie for the rest of the run.
    threading.Thread(target=_started.wait, name="streamjob-zygote-reaper", daemon=True).start()


def _sweep(tmp: str) -> None:
    """Remove the folders of earlier runs that were killed (their ``atexit`` never ran): their run's
    process is gone. Those named before the pid was in the name go when a day old."""
    try:
        names = [n for n in os.listdir(tmp) if n.startswith(_PREFIX)]
    except OSError:
        return
    for name in names:
        folder = os.path.join(tmp, name)
        owner = re.fullmatch(r"(\d+)-\w+", name[len(_PREFIX):])
        try:
            if owner is not None and not process_tree.ended(int(owner.group(1))):
                continue
            if owner is None and time.time() - os.path.getmtime(folder) < 86400:
                continue
        except OSError:
            continue
        for leftover in (TAKEN, "zygote.sock"):
            _remove(os.path.join(folder, leftover))


def _end_untaken(process: subprocess.Popen, path: str) -> None:
    """At the run's end: a zygote no daemon took (the run ended before its stage, or failed) ends with it,
    not half a second later when it notices. One that was taken is the daemon: it ends with its JVM."""
    taken = os.path.join(os.path.dirname(path), TAKEN)
    if process.poll() is None and not os.path.exists(taken):
        process.kill()
        process.wait(5.0)
    for leftover in (taken, path):
        _remove(leftover)


_ALSO = b"also "


def also_preload(modules: list[str] | tuple[str, ...], path: str | None = None) -> None:
    """Driver side: have this run's zygote (or the one at ``path``) load the job's own modules too
    (``process_tree.PRELOAD_ENV``), while the JVM still launches, so that the daemon need not load them on
    the path to the first record. Nothing happens without a zygote waiting (taken, ended, never started):
    the daemon loads them then."""
    if path is None and _started is not None:
        path = os.environ.get(ENV)
    if not modules or not path or path == "off":
        return
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(1.0)
            sock.connect(path)
            sock.sendall(_ALSO + " ".join(modules).encode() + b"\n")
    except OSError:
        pass


def hand_over(path: str) -> None:
    """Proxy side (the daemon Spark started): give the zygote at ``path`` this process's streams and
    setting, then wait until it ends and exit. Returns only when no zygote took them: the caller
    carries on as the daemon itself."""
    # Spark ends its daemon with SIGTERM (destroy), and may do so while the hand-over is under way: one that
    # came before the zygote's pid is known is passed on once it is (the zygote, the daemon then, would
    # otherwise live on with its JVM, and the test of it once saw exactly that).
    pending: list[int] = []
    signal.signal(signal.SIGTERM, lambda *_: pending.append(1))
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(5.0)
        sock.connect(path)
        setting = {"argv": sys.argv, "env": dict(os.environ), "cwd": os.getcwd()}
        socket.send_fds(sock, [json.dumps(setting).encode() + b"\n"], list(_STREAMS))
        sock.settimeout(READY_S)  # it answers once its modules are loaded; if it dies, the answer is empty
        reply = sock.recv(64)
        pid = int(reply.decode().strip())
    except (OSError, ValueError):
        sock.close()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if pending:
            os.kill(os.getpid(), signal.SIGTERM)  # it was asked to end before it became the daemon itself
        return
    # The zygote is the daemon now: Spark's SIGTERM goes to it.
    signal.signal(signal.SIGTERM, lambda *_: os.kill(pid, signal.SIGTERM))
    if pending:
        os.kill(pid, signal.SIGTERM)
    sock.settimeout(None)
    # All that is left to do is wait: as a bare interpreter, which holds ~9 MB against this one's ~23 MB
    # (the same process to Spark: its pid, its streams). SIGTERM is held across the exec, until the
    # waiter's handler is in place: one Spark sends meanwhile is passed on all the same.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        os.set_inheritable(sock.fileno(), True)
        os.execv(sys.executable, [sys.executable, "-S", "-E", "-c", _WAITER, str(pid), str(sock.fileno())])
    except OSError:  # waits here instead
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    _wait_for_end(sock)
    os._exit(0)


def _wait_for_end(sock: socket.socket) -> None:
    while True:
        try:
            if not sock.recv(1):
                break  # the zygote ended
        except InterruptedError:
            continue
        except OSError:
            break


# The proxy's last form (``hand_over``): passes SIGTERM on to the zygote (argv[1]) and ends when the
# zygote's end closes the socket (argv[2]). Standard library only: it runs without site-packages (-S).
_WAITER = """
import os, signal, socket, sys
pid, fd = int(sys.argv[1]), int(sys.argv[2])
signal.signal(signal.SIGTERM, lambda *_: os.kill(pid, signal.SIGTERM))
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
sock = socket.socket(fileno=fd)
while True:
    try:
        if not sock.recv(1):
            break
    except InterruptedError:
        continue
    except OSError:
        break
"""


class _Preload:
    """The zygote's loading of the task's modules, in a thread of its own at the lowest priority (nice
    19) until a proxy waits for it. The modules are needed only once the stage is submitted, while
    Spark's JVM launches and the driver imports the job on the same cores: loading them as their
    equal delayed the JVM (the path to the first record) by as much (~0.2 s on 2 cores). Lowered only
    where the thread may be raised back (``finish``), so it never starves a stage that waits for it;
    the thread has ended before anything forks, and a nice value is a thread's own (Linux): the
    daemon and the workers it forks keep the zygote's."""

    def __init__(self, load: Callable[[list[str]], Any], lower: bool = True):
        self.tid: int | None = None
        self.base: int | None = None  # the thread's priority before it was lowered (None: not lowered)
        self._lock = threading.Lock()
        self._waited = not lower  # a proxy waits (or no JVM launches beside it): the thread is not lowered
        self._load = load
        self._also: list[str] = []  # the job's own modules, as the run tells them (``also_preload``)
        self._running = True  # a loading thread runs, and will take what ``also`` adds
        self.thread = threading.Thread(target=self._run, name="streamjob-preload")
        self._threads = [self.thread]  # all it started: joined before anything forks
        self.thread.start()

    def also(self, modules: list[str]) -> None:
        """The job's own modules too: loaded by the running thread, or by one started for them if the
        first has ended (the run may tell after the preload is done: they must still be loaded before
        a proxy comes, not on its time), or by ``finish`` once a proxy waits."""
        with self._lock:
            self._also += [m for m in modules if m not in self._also]
            if self._running or self._waited:
                return
            self._running = True
            self.thread = threading.Thread(target=self._run_also, name="streamjob-preload")
            self._threads.append(self.thread)
            self.thread.start()

    def _take(self) -> list[str]:
        """The modules told and not loaded yet, each handed out once: one that fails to import is left to
        the worker, which reports it as the task's error (tried again, it would fail again, forever).
        None left: the thread asking ends, and ``also`` starts another for what comes later."""
        with self._lock:
            taken, self._also = [m for m in self._also if m not in sys.modules], []
            if not taken:
                self._running = False
            return taken

    def _start(self) -> None:
        with self._lock:  # never lowered after ``finish`` looked (a proxy that came at once)
            self.tid = threading.get_native_id()
            self.base = None
            if not self._waited:
                self.base = _lower(self.tid)

    def _drain(self) -> None:
        while todo := self._take():
            self._load(todo)

    def _run(self) -> None:
        self._start()
        self._load([])
        self._drain()  # what was told while loading
        from ..startup_trace import mark

        mark("zygote preloaded")

    def _run_also(self) -> None:
        self._start()
        self._drain()

    def finish(self) -> None:
        """A proxy waits: the rest at the zygote's own priority, then return once all is loaded (no
        loading thread is left to run across a fork: ``also`` starts none from here on)."""
        with self._lock:
            self._waited = True
            thread = self.thread
            if self.base is not None and self.tid is not None and thread.is_alive():
                try:
                    os.setpriority(os.PRIO_PROCESS, self.tid, self.base)
                except OSError:
                    pass  # it ended meanwhile
        for t in self._threads:  # the first may still be noting its end while a second loads
            t.join()
        self._drain()  # told after the last thread took its last


def _lower(tid: int) -> int | None:
    """Nice 19 for the thread, if it can be raised back (a probe: one step down and back first: an
    unprivileged process, or root without CAP_SYS_NICE, cannot); its priority before, or None."""
    try:
        base = os.getpriority(os.PRIO_PROCESS, tid)
        if base >= 19:
            return None
        os.setpriority(os.PRIO_PROCESS, tid, base + 1)
        try:
            os.setpriority(os.PRIO_PROCESS, tid, base)
        except OSError:
            return None  # left one step lower: the thread ends after the loading anyway
        os.setpriority(os.PRIO_PROCESS, tid, 19)
        return base
    except (OSError, AttributeError):  # AttributeError: not Unix
        return None


def serve(path: str, load: Callable[[list[str]], Any], lower: bool = True) -> None:
    """Zygote side: listen at ``path`` at once, ``load`` the task's modules meanwhile (``_Preload``), and
    the job's own as soon as the run names them (``also_preload``); wait for one proxy, and once loaded
    become the daemon it was started as (its streams, arguments, environment and working directory).
    Returns when it did; exits when its parent (the run) is gone or nobody came within ``WAIT_S``. A
    proxy that comes before the modules are loaded waits for them (rather than load them all again
    itself, as an ordinary daemon). ``load(extra)`` loads the task's modules and ``extra``."""
    parent = os.getppid()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(2)
    listener.settimeout(0.5)
    loading = _Preload(load, lower)
    waited = 0.0
    try:
        while True:
            try:
                conn, _ = listener.accept()
            except socket.timeout:
                waited += 0.5
                if os.getppid() != parent or waited >= WAIT_S:
                    _remove(path)
                    os._exit(0)
                continue
            conn.settimeout(5.0)
            try:
                data, fds, _, _ = socket.recv_fds(conn, 1 << 20, len(_STREAMS))
            except OSError:
                conn.close()
                continue
            if data.startswith(_ALSO):  # the run, naming the job's own modules
                loading.also(data[len(_ALSO):].decode().split())
                conn.close()
                continue
            open(os.path.join(os.path.dirname(path), TAKEN), "w").close()  # for the run's end: the daemon now
            break
    finally:
        listener.close()
        _remove(path)
    loading.finish()
    while not data.endswith(b"\n"):
        more = conn.recv(1 << 20)
        if not more:
            os._exit(1)
        data += more
    setting = json.loads(data)
    if len(fds) != len(_STREAMS) or _interpreter_env(setting["env"]) != _interpreter_env(os.environ):
        # An interpreter started otherwise (hash seed, warnings, ...): the proxy carries on as a daemon.
        conn.sendall(b"refused\n")
        os._exit(0)
    _become(setting, fds)
    conn.sendall(f"{os.getpid()}\n".encode())
    conn.settimeout(None)
    # Kept open while the zygote lives: the proxy waits for its end (and for the end of the workers it forks,
    # which inherit it: they end with the daemon, SIGHUP to its process group).
    _keep.append(conn)


_keep: list[Any] = []


def _interpreter_env(env: Any) -> dict[str, str]:
    """The variables an interpreter reads as it starts (PYTHONHASHSEED, PYTHONWARNINGS, ...; not
    PYTHONPATH, whose entries are added, nor Spark's PYTHON_* settings, read as the daemon runs)."""
    return {k: (bool(v) if k in _SWITCHES else v) for k, v in env.items()
            if re.fullmatch(r"PYTHON[A-Z0-9]+", k) and k != "PYTHONPATH"}


# Variables whose value only says on (non-empty) or off: PYTHONUNBUFFERED=1 is PYTHONUNBUFFERED=YES.
_SWITCHES = {"PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "PYTHONNOUSERSITE", "PYTHONSAFEPATH",
             "PYTHONFAULTHANDLER", "PYTHONINSPECT", "PYTHONDEVMODE", "PYTHONLEGACYWINDOWSSTDIO"}


def _become(setting: dict, fds: list[int]) -> None:
    for fd, target in zip(fds, _STREAMS):
        os.dup2(fd, target)
        os.close(fd)
    sys.argv[:] = setting["argv"]
    os.environ.clear()
    os.environ.update(setting["env"])
    os.chdir(setting["cwd"])
    # Entries the daemon's PYTHONPATH has and this interpreter's path lacks (Spark's, a job's); PySpark's
    # own zips are dropped by the daemon as ever.
    extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p not in sys.path]
    sys.path[1:1] = extra


def _remove(path: str) -> None:
    """The file, and its folder once empty."""
    for remove, target in ((os.remove, path), (os.rmdir, os.path.dirname(path))):
        try:
            remove(target)
        except OSError:
            pass
