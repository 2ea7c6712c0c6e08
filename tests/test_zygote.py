"""The daemon's zygote (runtime/cluster/zygote.py): real processes, real sockets, a real `streamjob run`.

A zygote takes the streams, environment and arguments of the daemon Spark starts (the proxy) and runs
PySpark's daemon in its place; a proxy whose interpreter would differ, or that finds no zygote, is an
ordinary daemon; a zygote nobody takes ends with its parent; `streamjob run` forks its task workers
from the zygote and leaves no process behind.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from streamjob.runtime.cluster import process_tree, zygote

REPO = Path(__file__).resolve().parent.parent
DAEMON = [sys.executable, "-m", process_tree.DAEMON_MODULE]


def start_zygote(path: str, **env: str) -> subprocess.Popen:
    return subprocess.Popen([*DAEMON, "--zygote", path], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONHASHSEED": "0", "PYTHONUNBUFFERED": "YES", **env})


def wait_for(predicate, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def listener_pid(port: int) -> int | None:
    """The process holding the loopback TCP listener on ``port`` (/proc: its socket inode)."""
    with open("/proc/net/tcp") as f:
        rows = [line.split() for line in f.readlines()[1:]]
    inodes = {r[9] for r in rows if r[3] == "0A" and int(r[1].split(":")[1], 16) == port}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}").removeprefix("socket:[").rstrip("]") in inodes:
                    return int(pid)
            except OSError:
                pass
    return None


def run_proxy(path: str, **env: str) -> tuple[subprocess.Popen, int]:
    """The daemon as Spark starts it: its port comes on stdout; ends when stdin closes."""
    proxy = subprocess.Popen([*DAEMON, "streamjob.runtime.cluster.pyworker"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env={**os.environ, zygote.ENV: path, "PYTHONHASHSEED": "0", "PYTHONUNBUFFERED": "YES",
                                  **env})
    (port,) = struct.unpack(">i", proxy.stdout.read(4))
    return proxy, port


@pytest.fixture
def socket_path():
    with tempfile.TemporaryDirectory(prefix="zygote-test-") as d:
        yield os.path.join(d, "z.sock")


def test_the_zygote_becomes_the_daemon_spark_started_and_ends_with_its_input(socket_path):
    z = start_zygote(socket_path)
    wait_for(lambda: os.path.exists(socket_path))
    proxy, port = run_proxy(socket_path)
    # the daemon's listening socket is the zygote's: it took the proxy's stdout to say where
    assert listener_pid(port) == z.pid
    assert not os.path.exists(socket_path)  # taken once: a later daemon starts as without
    assert proxy.poll() is None and z.poll() is None  # the proxy stays for Spark, which watches it
    # ... as a bare interpreter that only waits (~9 MB, not the ~23 MB of one with the daemon's modules)
    wait_for(lambda: b"-S\0-E\0-c" in open(f"/proc/{proxy.pid}/cmdline", "rb").read(), timeout=10)
    with open(f"/proc/{proxy.pid}/status") as f:
        rss_kb = int(next(line for line in f if line.startswith("VmRSS:")).split()[1])
    assert rss_kb < 16 * 1024, rss_kb
    proxy.stdin.close()  # Spark closing the daemon's input ends it (and so the proxy)
    assert proxy.wait(timeout=30) == 0
    z.wait(timeout=30)


def test_spark_ending_the_proxy_ends_the_zygote(socket_path):
    z = start_zygote(socket_path)
    wait_for(lambda: os.path.exists(socket_path))
    proxy, port = run_proxy(socket_path)
    assert listener_pid(port) == z.pid
    proxy.terminate()  # Process.destroy: whether it comes before, during or after the proxy's exec into its waiter
    z.wait(timeout=30)
    proxy.wait(timeout=30)


@pytest.mark.parametrize("delay", [0.0, 0.001, 0.005, 0.02, 0.1])
def test_spark_ending_the_proxy_as_it_turns_into_its_waiter_ends_the_zygote(socket_path, delay):
    z = start_zygote(socket_path)
    wait_for(lambda: os.path.exists(socket_path))
    proxy, port = run_proxy(socket_path)
    time.sleep(delay)
    proxy.terminate()
    z.wait(timeout=30)
    proxy.wait(timeout=30)


def test_a_proxy_whose_interpreter_would_differ_is_an_ordinary_daemon(socket_path):
    """Another hash seed is fixed when an interpreter starts: the zygote refuses and the proxy serves."""
    z = start_zygote(socket_path)
    wait_for(lambda: os.path.exists(socket_path))
    proxy, port = run_proxy(socket_path, PYTHONHASHSEED="7")
    assert listener_pid(port) == proxy.pid
    assert z.wait(timeout=30) == 0
    proxy.stdin.close()
    proxy.wait(timeout=30)


def test_without_a_zygote_the_daemon_starts_as_ever(socket_path):
    proxy, port = run_proxy(socket_path)  # nothing listens there
    assert listener_pid(port) == proxy.pid
    proxy.stdin.close()
    proxy.wait(timeout=30)


def test_a_zygote_nobody_takes_ends_with_its_parent_and_removes_its_socket(socket_path):
    parent = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; "
                               f"p = subprocess.Popen({[*DAEMON, '--zygote', socket_path]!r}, "
                               "stdin=subprocess.DEVNULL); print(p.pid, flush=True); time.sleep(60)"],
                              stdout=subprocess.PIPE, text=True)
    pid = int(parent.stdout.readline())
    wait_for(lambda: os.path.exists(socket_path))
    parent.kill()
    parent.wait()
    wait_for(lambda: process_tree.ended(pid), timeout=30)
    assert not os.path.exists(socket_path)


@pytest.mark.spark
def test_streamjob_run_forks_its_task_workers_from_the_zygote_and_leaves_nothing_behind(tmp_path):
    run = subprocess.Popen([sys.executable, "-m", "streamjob.runtime.cli", "run",
                            str(REPO / "bench" / "jobs" / "first_record.py"), "--no-progress"],
                           cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    zygotes, workers_of_zygote = set(), set()
    while run.poll() is None:
        for pid in process_tree.descendants(run.pid):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    args = f.read().split(b"\0")
            except OSError:
                continue
            if process_tree.parent(pid) in zygotes:  # a worker forked from it (its command line, too)
                workers_of_zygote.add(pid)
            elif b"--zygote" in args:
                zygotes.add(pid)
        time.sleep(0.05)
    out, err = run.communicate()
    assert run.returncode == 0, err[-3000:]
    assert "{'i': 19}" in out
    assert zygotes and workers_of_zygote, (zygotes, workers_of_zygote)
    wait_for(lambda: all(process_tree.ended(p) for p in zygotes | workers_of_zygote), timeout=30)


def test_the_next_run_removes_the_folders_of_killed_runs_and_no_other(tmp_path):
    """A run killed with SIGKILL never runs its atexit: its folder (with the ``taken`` marker, or the
    socket) stays. The next run's start removes those whose run is gone; a live run's it keeps, and
    folders named before the pid was in the name only when a day old."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    folders = {"dead": tmp_path / f"streamjob-zygote-{dead.pid}-abc_12",
               "live": tmp_path / f"streamjob-zygote-{os.getpid()}-x",
               "old": tmp_path / "streamjob-zygote-q9_z", "young": tmp_path / "streamjob-zygote-k3f",
               "other": tmp_path / "something-else"}
    for name, folder in folders.items():
        folder.mkdir()
        (folder / (zygote.TAKEN if name != "young" else "zygote.sock")).write_text("")
    os.utime(folders["old"], (time.time() - 2 * 86400,) * 2)
    zygote._sweep(str(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(folders[n].name for n in ("live", "young", "other"))


def test_a_zygote_that_ended_is_collected_not_left_a_zombie(tmp_path):
    """After a JVM failover the zygote (the old JVM's daemon) has ended while the run goes on: its exit
    is collected then, not at the run's end."""
    script = ("import os, sys, time; from streamjob.runtime.cluster import zygote; "
              "zygote.start('json.tool'); print(zygote._started.pid, flush=True); time.sleep(60)")
    run = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                           env={**os.environ, zygote.ENV: ""})
    try:
        pid = int(run.stdout.readline())  # `python -m json.tool --zygote PATH` exits at once (bad arguments)
        wait_for(lambda: not os.path.exists(f"/proc/{pid}"), timeout=30)  # a zombie is still there
    finally:
        run.kill()
        run.wait()


def test_a_process_has_ended_when_gone_or_a_zombie_with_or_without_proc(monkeypatch):
    """``process_tree.ended`` (the zygote's sweep asks it whether a run is gone): from /proc a zombie has
    ended; where there is no /proc (macOS) a signal's reach decides, never "ended" for a live process."""
    import builtins
    import os.path

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert not process_tree.ended(child.pid) and not process_tree.ended(os.getpid())
        child.kill()
        deadline = time.monotonic() + 10
        while not process_tree.ended(child.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert process_tree.ended(child.pid)  # a zombie until it is waited for
    finally:
        child.wait()
    assert process_tree.ended(child.pid)

    real_open, real_isdir = builtins.open, os.path.isdir

    def no_proc_open(path, *args, **kwargs):
        if str(path).startswith("/proc/"):
            raise FileNotFoundError(path)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", no_proc_open)
    monkeypatch.setattr(os.path, "isdir", lambda p: False if str(p).startswith("/proc") else real_isdir(p))
    assert not process_tree.ended(os.getpid())  # alive: a signal reaches it
    assert process_tree.ended(child.pid)  # reaped: nothing to reach


def test_the_zygote_loads_at_the_lowest_priority_until_a_proxy_waits_for_it():
    """The modules load in a thread of nice 19 (where it can be raised back, as here: root) while nobody
    waits; once a proxy does, the rest loads at the zygote's own priority; the thread has ended when
    ``finish`` returns, and the thread that forks the workers never changed its priority."""
    import threading

    def nice() -> int:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    base = nice()
    seen: list = []
    started, go = threading.Event(), threading.Event()

    def load(extra: list) -> None:
        seen.append(nice())
        started.set()
        go.wait(10)
        seen.append(nice())

    loading = zygote._Preload(load)
    assert started.wait(10)
    lowered = loading.base is not None
    assert seen == [19 if lowered else base]
    finisher = threading.Thread(target=loading.finish)
    finisher.start()
    deadline = time.monotonic() + 10
    while lowered and os.getpriority(os.PRIO_PROCESS, loading.tid) != base and time.monotonic() < deadline:
        time.sleep(0.01)
    go.set()
    finisher.join(10)
    assert not finisher.is_alive() and not loading.thread.is_alive()
    assert seen[1] == base and nice() == base


def test_a_loading_a_proxy_waits_for_before_it_began_is_never_lowered():
    """A proxy that comes before the loading thread has even run: ``finish`` has looked, so the thread
    keeps the zygote's priority (lowering it then would leave nobody to raise it back)."""
    import threading

    seen: list = []
    loading = zygote._Preload.__new__(zygote._Preload)
    loading.tid, loading.base, loading._lock, loading._waited = None, None, threading.Lock(), True  # as finish leaves it
    loading._also = []
    loading._load = lambda extra: seen.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
    loading.thread = threading.Thread(target=loading._run)
    loading.thread.start()
    loading.thread.join(10)
    assert seen == [os.getpriority(os.PRIO_PROCESS, threading.get_native_id())] and loading.base is None


def test_a_proxy_that_comes_while_the_zygote_still_loads_waits_for_it(socket_path):
    """The zygote listens before it loads: a daemon Spark starts while the modules are still loading is
    handed over once they are, instead of loading them all again itself as an ordinary daemon."""
    code = ("import sys, time; from streamjob.runtime.cluster import pydaemon, zygote; "
            "zygote.serve(sys.argv[1], lambda extra: (time.sleep(2), pydaemon.preload(extra))); "
            "from pyspark import daemon; daemon.manager()")
    z = subprocess.Popen([sys.executable, "-c", code, socket_path], stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, env={**os.environ, "PYTHONHASHSEED": "0", "PYTHONUNBUFFERED": "YES"})
    wait_for(lambda: os.path.exists(socket_path), timeout=10)  # at once, not after the loading's 2 s
    started = time.monotonic()
    proxy, port = run_proxy(socket_path)
    assert listener_pid(port) == z.pid  # the zygote's, after the wait
    assert time.monotonic() - started > 0.5  # it did wait for the loading
    proxy.stdin.close()
    assert proxy.wait(timeout=30) == 0
    z.wait(timeout=30)


def test_the_run_has_the_zygote_load_the_job_s_own_modules_before_any_proxy_comes(socket_path):
    """``also_preload``: the zygote loads what the job's operators need (pandas for a keyed sum) while the JVM
    still launches; a proxy then finds them loaded, and the workers it forks share them."""
    def has_pandas(pid: int) -> bool:
        with open(f"/proc/{pid}/maps") as f:
            return "pandas/_libs" in f.read()

    z = start_zygote(socket_path)
    wait_for(lambda: os.path.exists(socket_path), timeout=10)
    zygote.also_preload(["pandas"], path=socket_path)
    wait_for(lambda: has_pandas(z.pid), timeout=60)
    proxy, port = run_proxy(socket_path)
    assert listener_pid(port) == z.pid
    proxy.stdin.close()
    assert proxy.wait(timeout=30) == 0
    z.wait(timeout=30)


def test_modules_told_after_the_zygote_s_preload_ended_are_loaded_before_a_proxy_comes(socket_path):
    """The run may tell after the preload is done (a loaded machine runs the JVM launch first): a thread is
    started for what it tells, so the workers still fork with it loaded (it was left to the first proxy,
    which then waited for it; CI saw that race with the test above)."""
    trace = Path(socket_path).with_name("trace")
    trace.touch()
    z = start_zygote(socket_path, STREAMJOB_STARTUP_TRACE=str(trace))
    wait_for(lambda: "zygote preloaded" in trace.read_text(), timeout=60)  # its loading thread took its last
    maps = Path(f"/proc/{z.pid}/maps").read_text()
    assert "pyarrow" in maps and "pandas/_libs" not in maps
    zygote.also_preload(["pandas"], path=socket_path)
    wait_for(lambda: "pandas/_libs" in Path(f"/proc/{z.pid}/maps").read_text(), timeout=60)
    proxy, port = run_proxy(socket_path)
    assert listener_pid(port) == z.pid
    proxy.stdin.close()
    assert proxy.wait(timeout=30) == 0
    z.wait(timeout=30)


def test_a_zygote_nobody_tells_loads_no_pandas(socket_path):
    z = start_zygote(socket_path)
    wait_for(lambda: os.path.exists(socket_path), timeout=10)
    proxy, port = run_proxy(socket_path)  # answered once the zygote has loaded the task's modules
    assert listener_pid(port) == z.pid
    with open(f"/proc/{z.pid}/maps") as f:
        maps = f.read()
    assert "pyarrow" in maps and "pandas/_libs" not in maps
    proxy.stdin.close()
    assert proxy.wait(timeout=30) == 0
    z.wait(timeout=30)


def test_a_module_the_zygote_is_told_that_does_not_import_is_left_to_the_worker(socket_path):
    """A name that fails to import is tried once (the worker reports it as its task's error): the zygote
    still becomes the daemon, and loads what it is told after it."""
    z = start_zygote(socket_path)
    wait_for(lambda: os.path.exists(socket_path), timeout=10)
    zygote.also_preload(["streamjob_no_such_module"], path=socket_path)
    zygote.also_preload(["pandas"], path=socket_path)
    proxy, port = run_proxy(socket_path)
    assert listener_pid(port) == z.pid
    with open(f"/proc/{z.pid}/maps") as f:
        assert "pandas/_libs" in f.read()
    proxy.stdin.close()
    assert proxy.wait(timeout=30) == 0
    z.wait(timeout=30)
