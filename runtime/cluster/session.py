"""The local session cluster: one embedded Spark JVM kept running between ``streamjob run``s.

A run on the embedded local Spark starts its own JVM (~1.1 s to its gateway on 2 cores, most of the
way to the first record), then a SparkContext in that cold JVM (~0.55 s). ``streamjob cluster start``
starts a JVM once, as Flink's ``start-cluster.sh`` does, and warms it with a SparkContext and a barrier
stage; a later ``streamjob run`` on a local master connects to it, makes its own SparkContext there
(~0.15 s warm) and stops it as it exits. The run keeps everything else of its own: the job manager
and its REST API, the task daemon (the zygote it starts, which its tasks fork from), and what its
tasks see: its working directory and environment travel as ``spark.executorEnv.*`` settings.

One run at a time: a run holds the session's lock until it exits. A run that finds it held (another
run), or the session of another Python, another JVM setting (``spark.driver.memory``,
``spark.driver.extraJavaOptions``, jars) or ``STREAMJOB_SESSION=off``, starts its own JVM as without.
A run killed before it stopped its SparkContext leaves it behind; the keeper (the session's process,
which holds the JVM's stdin) stops it once the lock is free. If the session's JVM dies under a run,
the run restarts its job on a JVM of its own, as after the death of its own JVM.

A function's ``print()`` still comes to the run's stdout (over the job's channel: ``task.user_output``);
what the tasks write to stderr, and Spark's log, go to the session's log (``streamjob cluster status``
names it), as a Flink task manager's go to its log file: the JVM's output is the session's.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field, fields
from typing import Any

from . import process_tree, user_cache

ENV = "STREAMJOB_SESSION"  # "off": runs never use a session cluster
TASK_CWD_ENV = "STREAMJOB_TASK_CWD"  # the run's working directory, for its tasks (zygote, pydaemon)
SESSION_FILE, LOCK_FILE, LOG_FILE = "session.json", "session.lock", "session.log"
KEEPER = "streamjob.runtime.cluster.session_keeper"  # the keeper's module (it imports spark, which imports this)
# Settings spark-submit applies as it launches the JVM: a run whose values differ needs a JVM of its own.
JVM_SETTINGS = ("spark.driver.memory", "spark.driver.extraJavaOptions", "spark.driver.defaultJavaOptions",
                "spark.driver.extraClassPath", "spark.driver.extraLibraryPath", "spark.jars", "spark.jars.packages",
                "spark.jars.repositories", "spark.jars.ivy", "spark.jars.excludes", "spark.files", "spark.submit.pyFiles",
                "spark.archives")
# The run's variables its tasks must not take over from it: Spark's, Java's and the JVM's own, and the
# shell's bookkeeping. (Spark merges a PYTHONPATH given so with its own for its workers.)
_NOT_PASSED_PREFIXES = ("SPARK_", "PYSPARK_", "JAVA_", "_JAVA_", "JDK_", "HADOOP_", "YARN_")
_NOT_PASSED = frozenset({"PWD", "OLDPWD", "SHLVL", "_", "PYTHONHASHSEED", "PYTHONSTARTUP", "TERM", "COLUMNS", "LINES"})


@dataclass
class Session:
    port: int
    secret: str
    keeper: int  # the keeper's pid
    jvm: int  # the JVM's pid
    python: str  # the interpreter it was started with: a run of another one (another virtualenv) starts its own
    jvm_key: str  # jvm_key() of the JVM's launch settings
    started: float
    log: str
    python_env: dict = field(default_factory=dict)  # the JVM's interpreter variables (PYTHONDONTWRITEBYTECODE,
    # ...): its task daemon's too


def folder() -> str:
    return os.path.join(user_cache.folder(), "session")


def jvm_key(settings: dict[str, str]) -> str:
    """What of a run's own Spark settings (the user's, not ours) its JVM is launched with (``JVM_SETTINGS``)."""
    relevant = {k: settings[k] for k in JVM_SETTINGS if settings.get(k)}
    return hashlib.sha256(json.dumps(relevant, sort_keys=True).encode()).hexdigest()[:16]


def read(where: str | None = None) -> Session | None:
    """The session running now, or None (none started, or its keeper or JVM is gone)."""
    try:
        with open(os.path.join(where or folder(), SESSION_FILE)) as f:
            data = json.load(f)
        session = Session(**{f.name: data[f.name] for f in fields(Session) if f.name in data})
    except (OSError, ValueError, TypeError):  # TypeError: a field missing (a file of another version)
        return None
    if process_tree.ended(session.keeper) or process_tree.ended(session.jvm):
        return None
    return session


def wanted() -> bool:
    return os.environ.get(ENV, "on").strip().lower() not in ("0", "off", "false", "no")


def available(master: str) -> bool:
    """Cheap (no connection): a session of this interpreter runs, and the run may use one."""
    from .pod import is_local

    session = read() if wanted() and is_local(master) else None
    return session is not None and session.python == sys.executable


class Claim:
    """A run's hold on the session (its lock, held until it ends) and the gateway to its JVM."""

    def __init__(self, session: Session, lock_fd: int, gateway: Any):
        self.session, self._fd, self.gateway = session, lock_fd, gateway

    def task_settings(self) -> dict[str, str]:
        """``spark.executorEnv.*`` for the run's tasks: its environment and working directory (the JVM's
        are the session's; Spark gives its Python daemon these on top of them)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(_NOT_PASSED_PREFIXES) and k not in _NOT_PASSED}
        # An interpreter variable the session has and the run has not is cleared (empty: unset, for Python),
        # so that the run's zygote, started with the run's, is taken as its daemon (zygote._interpreter_env).
        env.update({k: "" for k in self.session.python_env if k not in os.environ})
        env[TASK_CWD_ENV] = os.getcwd()
        return {f"spark.executorEnv.{k}": v for k, v in env.items() if "=" not in k}

    def release(self, context: Any = None) -> None:
        """At the run's end: its SparkContext stopped (the daemon and its workers with it), the lock freed."""
        if context is not None:
            try:
                context.stop()
            except Exception:  # noqa: BLE001 - a JVM already gone; the keeper stops a context left behind
                pass
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)


def claim(master: str, settings: dict[str, str], connect: Any, wait_s: float = 0.3) -> Claim | str | None:
    """The session for a run with these Spark settings (the user's), held, with ``connect(port, secret)``'s
    gateway. Else the run starts its own JVM, as without: None when there is no session for it, or why it
    cannot take the one that runs (for a note to the user)."""
    from .pod import is_local

    if not wanted() or not is_local(master):
        return None
    where = folder()
    session = read(where)
    if session is None:
        return None
    if session.python != sys.executable:
        return f"a session cluster runs, but of another Python ({session.python})"
    if session.jvm_key != jvm_key(settings):
        return (f"a session cluster runs, but this run sets JVM settings of its own "
                f"({', '.join(k for k in JVM_SETTINGS if settings.get(k))})")
    try:
        fd = os.open(os.path.join(where, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as e:
        return f"the session cluster's lock cannot be opened ({e.strerror or e})"
    deadline = time.monotonic() + wait_s  # the keeper holds it a moment now and then
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except OSError:
            if time.monotonic() >= deadline:
                os.close(fd)
                return "the session cluster runs another run's job"
            time.sleep(0.05)
    again = read(where)
    if again is None or again.keeper != session.keeper:
        os.close(fd)
        return None
    try:
        gateway = connect(session.port, session.secret)
    except Exception as e:  # noqa: BLE001 - its JVM went away in between: the run starts its own
        os.close(fd)
        return f"the session cluster's JVM did not answer ({type(e).__name__}: {e})"
    gateway.proc = SessionJVM(session.jvm)
    return Claim(session, fd, gateway)


class SessionJVM:
    """The session's JVM as the run watches a JVM (a Popen's ``poll``/``wait``), though not its child."""

    how = "the session cluster's JVM ended"

    def __init__(self, pid: int):
        self.pid = pid

    def poll(self) -> int | None:
        return 0 if process_tree.ended(self.pid) else None

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired("session JVM", timeout or 0)
            time.sleep(0.02)
        return 0


# -- the keeper -------------------------------------------------------------------------------------
def start(timeout: float = 120.0) -> Session:
    """``streamjob cluster start``: the keeper in a session of its own (it outlives the terminal's
    process group), once its JVM is warm. Raises RuntimeError, with the log's end, if it does not come up."""
    running = read()
    if running is not None:
        return running
    where = folder()
    os.makedirs(where, mode=0o700, exist_ok=True)
    log = os.path.join(where, LOG_FILE)
    with open(log, "wb") as out:
        keeper = subprocess.Popen([sys.executable, "-m", KEEPER, where], stdin=subprocess.DEVNULL, stdout=out,
                                  stderr=subprocess.STDOUT, start_new_session=True, cwd=os.path.expanduser("~"))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        session = read(where)
        if session is not None and session.keeper == keeper.pid:
            return session
        if keeper.poll() is not None:
            break
        time.sleep(0.1)
    else:
        keeper.kill()
    with open(log, errors="replace") as f:
        tail = f.read()[-3000:]
    raise RuntimeError(f"the session cluster did not start (its log, {log}):\n{tail}")


def stop(timeout: float = 30.0) -> Session | None:
    """``streamjob cluster stop``: the keeper ends its JVM (a run on it fails over to a JVM of its own)."""
    session = read()
    if session is None:
        return None
    try:
        os.kill(session.keeper, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + timeout
    while not (process_tree.ended(session.keeper) and process_tree.ended(session.jvm)):
        if time.monotonic() >= deadline:
            for pid in (session.jvm, session.keeper):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            break
        time.sleep(0.05)
    remove(os.path.join(folder(), SESSION_FILE))
    return session


def remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass


def stop_left_behind(gateway: Any) -> str | None:
    """Stop the JVM's active SparkContext, which belongs to no run (its caller holds the lock): a run's
    that was killed before it stopped it. Returns its application id, None when there was none."""
    # SparkContext.getActive is Scala's private[spark]: public in the bytecode of the companion object.
    companion = gateway.jvm.java.lang.Class.forName("org.apache.spark.SparkContext$").getField("MODULE$")
    active = companion.get(None).getActive()
    if not active.isDefined():
        return None
    app = active.get().applicationId()
    active.get().stop()
    return str(app)
