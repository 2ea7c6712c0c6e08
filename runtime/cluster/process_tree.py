"""Ending a process we started together with its children (Linux ``/proc``; elsewhere the process alone)."""

from __future__ import annotations

import os
import signal
import time
from typing import Any


def kill_tree(process: Any) -> None:
    """SIGKILL a JVM we launched and its children (spark-submit's launcher JVM, while it builds the
    command). Not SIGTERM: a JVM asked to exit writes its class-data archive, here of the few classes
    loaded so far, which every later run would map."""
    pids = [process.pid] + descendants(process.pid)  # the parent first: it cannot react to its children's end
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        process.wait(timeout=5.0)
    except Exception:  # noqa: BLE001 - killed; the exit is reaped by whoever waits next
        pass


def parent(pid: int) -> int | None:
    """The process's parent pid (Linux /proc; elsewhere None)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        return int(stat[stat.rindex(b")") + 2:].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def ended(pid: int) -> bool:
    """The process is gone or a zombie: it runs no more code (a SIGKILLed process tearing down a large
    address space still reads as running for a while on a busy machine)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        return stat[stat.rindex(b")") + 2:].split()[0] in (b"Z", b"X")
    except FileNotFoundError:
        if os.path.isdir("/proc/self"):
            return True  # no such process
    except (OSError, ValueError, IndexError):
        return True
    try:  # no /proc (macOS): whether a signal could reach it (a zombie reads as running here)
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # another user's: it exists
    return False


def wait_ended(pids: list[int], timeout: float) -> bool:
    """Wait up to ``timeout`` seconds until every process in ``pids`` has ended (see ``ended``)."""
    deadline = time.monotonic() + timeout
    while not all(ended(pid) for pid in pids):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True


DAEMON_MODULE = "streamjob.runtime.cluster.pydaemon"
# What else the job's operators import (factory.task_modules: pandas for keyed aggregations and columnar
# windows), comma-separated in the tasks' environment (SparkDeployment.run_stage): the daemon loads them
# before its forks share them (~37 MB of memory and ~0.25 s for pandas), and only for a job that uses them.
PRELOAD_ENV = "STREAMJOB_PRELOAD"


def is_daemon(pid: int) -> bool:
    """The process runs streamjob's PySpark daemon (``python -m streamjob.runtime.cluster.pydaemon``)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = f.read().split(b"\0")
    except OSError:
        return False
    return args[1:3] == [b"-m", DAEMON_MODULE.encode()]


def descendants(pid: int) -> list[int]:
    """The process's descendants, children first (Linux /proc; elsewhere none)."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for name in entries:
        if not name.isdigit():
            continue
        ppid = parent(int(name))
        if ppid is not None:
            children.setdefault(ppid, []).append(int(name))
    found, queue = [], list(children.get(pid, []))
    while queue:
        child = queue.pop(0)
        found.append(child)
        queue.extend(children.get(child, []))
    return found
