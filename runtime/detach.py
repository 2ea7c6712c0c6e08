"""``streamjob run -d``: the job runs in a background process of its own; the command returns once the
job has registered (``registry``), printing its id, REST API and log file, as ``flink run -d`` prints
the job id. The background process runs the very same command line (so it parses exactly what the
user typed, job arguments included), told by an environment variable that it is the detached one.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import click

from . import registry

DETACHED_CHILD_ENV = "STREAMJOB_DETACHED"
REGISTER_TIMEOUT_S = 300.0  # the job file's imports and graph building come first


def log_path(now: float | None = None) -> str:
    directory = os.path.join(registry.state_dir(), "logs")
    os.makedirs(directory, mode=0o700, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    return os.path.join(directory, f"run-{stamp}-{os.getpid()}.log")


def run_detached(rest_address: str | None) -> int:
    """Start the background process and wait for its job to register; the exit code for the CLI."""
    if rest_address is not None and rest_address.strip().lower() in ("off", "none", ""):
        click.echo("error: -d needs the job's REST API (it is how the job is reached once the command has "
                   "returned); drop --rest-address off", err=True)
        return 2
    log = log_path()
    argv = [sys.executable, "-m", "streamjob.runtime.cli", *sys.argv[1:]]
    with open(log, "ab") as out:
        # A session of its own: the terminal's Ctrl-C and hang-up are not the job's.
        child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                 env={**os.environ, DETACHED_CHILD_ENV: "1"}, start_new_session=True)
    deadline = time.monotonic() + REGISTER_TIMEOUT_S
    while True:
        mine = [e for e in registry.running(clean=False) if e.pid == child.pid]
        if mine:
            e = mine[0]
            click.echo(f"Job has been submitted with JobID {e.id}")
            click.echo(f"name: {e.name}")
            click.echo(f"REST API: {e.url}")
            click.echo(f"log: {log}")
            click.echo(f"pid: {child.pid}")
            return 0
        code = child.poll()
        if code is not None:
            click.echo(f"error: the job exited (code {code}) before it started; its output ({log}):", err=True)
            click.echo(_tail(log), err=True)
            return code or 1
        if time.monotonic() > deadline:
            click.echo(f"the job's process ({child.pid}) has not started a job within {REGISTER_TIMEOUT_S:.0f} s; "
                       f"it goes on; see {log}", err=True)
            return 1
        time.sleep(0.1)


def _tail(path: str, lines: int = 40) -> str:
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:]).rstrip()
    except OSError:
        return ""
