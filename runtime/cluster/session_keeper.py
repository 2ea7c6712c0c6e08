"""The session cluster's keeper (``streamjob cluster start`` runs ``python -m`` this module in a session
of its own): it launches the embedded Spark's JVM, warms it, writes the session's file for runs to find
(``session``), stops the context a killed run left behind, and ends the JVM when it is stopped."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict
from typing import Any

from . import process_tree, spark
from .session import LOCK_FILE, LOG_FILE, SESSION_FILE, Session, jvm_key, read, remove, stop_left_behind


def _warm(gateway: Any, settings: dict[str, str]) -> None:
    """One SparkContext and one barrier stage: the code a run's context and stage go through, compiled."""
    from pyspark import SparkConf, SparkContext

    conf = SparkConf().setAppName("streamjob-session-warm-up")
    for k, v in settings.items():
        conf.set(k, v)
    sc = SparkContext(conf=conf, gateway=gateway)
    try:
        sc.parallelize([0], 1).barrier().mapPartitions(lambda rows: rows).collect()
    finally:
        sc.stop()


def _stop_left_behind(gateway: Any, lock: str, look: bool) -> bool:
    """A context whose run ended without stopping it (killed) is stopped once the run's lock is free
    (``look``: not looked since a run last held it). Returns whether the lock was free. The lock is held
    for a moment only: a run that comes meanwhile waits for it (``claim``'s ``wait_s``)."""
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return False  # a run holds it
    try:
        if look:
            left = stop_left_behind(gateway)
            if left:
                print(f"stopped the SparkContext {left} of a run that ended without it", flush=True)
    finally:
        os.close(fd)
    return True


def _serve(where: str) -> None:
    spark._prepare_environment("local[1]", {})
    settings = spark.spark_settings({}, "local[1]", spark.class_data_sharing_options())
    gateway = spark._launch_gateway(spark._launch_settings(settings))
    jvm = gateway.proc
    _warm(gateway, settings)
    stopping = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: stopping.set())
    session = Session(port=gateway.java_parameters.port, secret=gateway.java_parameters.auth_token,
                      keeper=os.getpid(), jvm=jvm.pid, python=sys.executable,
                      jvm_key=jvm_key({}), started=time.time(), log=os.path.join(where, LOG_FILE),
                      python_env={k: v for k, v in os.environ.items() if k.startswith("PYTHON") and k != "PYTHONPATH"})
    path = os.path.join(where, SESSION_FILE)
    tmp = f"{path}.{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # it holds the gateway's secret
    with os.fdopen(fd, "w") as f:
        json.dump(asdict(session), f)
    os.replace(tmp, path)
    print(f"session cluster up: JVM {jvm.pid}, gateway port {session.port}", flush=True)
    lock = os.path.join(where, LOCK_FILE)
    looked = False  # since the lock was last seen held
    try:
        while not stopping.wait(0.5) and jvm.poll() is None:
            current = read(where)
            if current is None or current.keeper != os.getpid():
                print("the session's file no longer names this keeper (removed, or another keeper's): "
                      "stopping", flush=True)
                break
            try:
                looked = _stop_left_behind(gateway, lock, look=not looked)
            except Exception as e:  # noqa: BLE001 - the JVM is going away: the loop ends on its exit
                print(f"could not look for a context left behind: {type(e).__name__}: {e}", flush=True)
    finally:
        current = read(where)
        if current is None or current.keeper == os.getpid():
            remove(path)
        if jvm.poll() is None:
            jvm.stdin.close()  # Spark's gateway server exits at the end of its input
            try:
                jvm.wait(15.0)
            except subprocess.TimeoutExpired:
                process_tree.kill_tree(jvm)
        print("session cluster stopped" if jvm.returncode == 0 else
              f"session cluster's JVM ended ({spark.describe_exit(jvm.returncode)})", flush=True)


if __name__ == "__main__":
    _serve(sys.argv[1])
