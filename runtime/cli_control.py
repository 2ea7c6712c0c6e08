"""The ``streamjob`` commands against running jobs, as Flink's CLI has them: ``list``, ``status``,
``checkpoints``, ``savepoint``, ``rescale``, ``stop``, ``cancel``.

A job is named by its id, a unique prefix of it, or its name (the local registry of running jobs,
``registry``), or by ``--address URL`` (its REST API, e.g. a job in a pod). Every command that changes a
job waits for the outcome and prints it: a savepoint's path, the job's final state.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from typing import Any, NoReturn

import click

from . import registry

TERMINAL = ("FINISHED", "CANCELED", "FAILED")
POLL_S = 0.25


def fail(message: str, code: int = 1) -> NoReturn:
    from rich.console import Console
    from rich.text import Text

    # The message holds the user's names and paths: never read as markup.
    Console(stderr=True, highlight=False).print(Text.assemble(("error:", "bold red"), " ", message), soft_wrap=True)
    sys.exit(code)


@dataclass
class Target:
    """The job a command acts on: where its REST API is, with its token, and its registry entry if any."""

    address: str
    token: str
    entry: registry.Entry | None = None

    def call(self, method: str, path: str, body: dict | None = None, timeout: float = 30.0, doing: str = "") -> dict:
        """``doing`` ("cancel"): the request acts on a running job; if the job has just ended (its result
        lingers), that is said plainly instead of the API's 409."""
        from .rest_client import RestError, call

        try:
            return call(self.address, self.token, method, path, body, timeout=timeout)
        except RestError as e:
            if doing and e.status == 409:
                try:
                    doc = call(self.address, self.token, "GET", "/v1/job?peek=true", timeout=timeout)
                except RestError:
                    doc = {}
                if doc.get("state") in TERMINAL:
                    fail(f"job {doc['name']!r} ({doc['id']}) already ended {doc['state']}: nothing to {doing}")
            fail(str(e))

    def gone(self) -> bool:
        """The job's process has exited (only known for registered jobs)."""
        return self.entry is not None and not registry.is_alive(self.entry)


def target(job: str | None, address: str | None, token: str) -> Target:
    """``--address`` wins (a job elsewhere); else the registry resolves ``job`` (None: the only running job)."""
    if address:
        return Target(address, token)
    running = registry.running()
    try:
        entry = registry.resolve(running, job)
    except registry.RegistryError as e:
        # A job that ended is no longer listed: say so (and how it ended), not only that none matches.
        gone = registry.find_ended(registry.ended(), job) if job is not None or not running else None
        fail(str(e) if gone is None else ended_message(gone, running))
    return Target(entry.url, token or entry.token(), entry)


def ended_message(gone: registry.Ended, running: list[registry.Entry]) -> str:
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(gone.ended))
    others = f"; running: {registry._listing(running)}" if running else ""
    return (f"job {gone.name!r} ({gone.id}) is not running: it ended {gone.state} at {when} "
            f"(`streamjob list` shows the running jobs{others})")


def wait_for_end(t: Target, timeout: float, stopped_with: dict | None = None) -> dict:
    """Poll the job until it has ended; its final document (reading it lets the job's process exit).
    ``stopped_with``: the job's document before a stop-with-savepoint that completed. The job then ends
    FINISHED whatever happens after (the executor's rule), and its process need not wait for a reader:
    the client that saw the savepoint complete has the result."""
    from .rest_client import RestError, call

    deadline = time.monotonic() + timeout
    while True:
        try:
            doc = call(t.address, t.token, "GET", "/v1/job", timeout=10.0)
        except RestError as e:
            if stopped_with is not None and e.status is None and (t.entry is None or t.gone()):
                return {**stopped_with, "state": "FINISHED", "end_time": time.time()}
            if t.gone():
                fail("the job's process exited before its final state could be read")
            if e.status is not None or time.monotonic() > deadline:
                fail(str(e))
            doc = None
        # The end, not only a final state: end_time comes once the job's checkpoints are cleaned up and
        # what stays to resume from is known (its ``resume`` line); a CANCELED job may still be fencing.
        if doc is not None and doc.get("end_time") is not None:
            return doc
        if time.monotonic() > deadline:
            fail(f"the job did not end within {timeout:.0f} s (still {doc['state'] if doc else 'unreachable'}); "
                 f"it goes on")
        time.sleep(POLL_S)


def describe_end(doc: dict) -> str:
    text = f"Job {doc['name']!r} ({doc['id']}) {doc['state']}"
    if doc.get("final_savepoint"):
        text += f" with savepoint {doc['final_savepoint']}"
    if doc.get("error") and doc["state"] == "FAILED":
        text += f": {doc['error'].strip().splitlines()[0]}"
    return text


def echo_end(doc: dict, fallback: str | None = None) -> None:
    """The job's end in one line, then what it leaves to resume from as the job itself said it (with the
    job's arguments and options); ``fallback`` when the job could not say (its process is gone)."""
    echo(describe_end(doc))
    if doc.get("resume") or fallback:
        echo(doc.get("resume") or fallback)


def resume_hint(entry: registry.Entry | None, savepoint: str) -> str:
    job_file = entry.job_file if entry is not None and entry.job_file else "JOB_FILE"
    return f"resume with: streamjob run {job_file} -s {savepoint}"


def wait_for_savepoint(t: Target, trigger_id: str, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        doc = t.call("GET", f"/v1/savepoints/{trigger_id}")
        if doc["status"] not in ("QUEUED", "IN_PROGRESS"):
            return doc
        if time.monotonic() > deadline:
            fail(f"savepoint {trigger_id} did not complete within {timeout:.0f} s (still {doc['status']})")
        time.sleep(POLL_S)


def _slots(doc: dict) -> str:
    """The slots (and executor pods) asked for, when operators of their own parallelism make them differ."""
    slots, executors = doc.get("slots"), doc.get("executors")
    if slots is None or (slots == doc["parallelism"] and executors is None):
        return ""
    return f", {slots} slots" + (f" on {executors} executors" if executors is not None else "")


def echo(text: str) -> None:
    click.echo(text)  # plain: user text printed as it is


def print_json(doc: Any) -> None:
    echo(json.dumps(doc, indent=2))


# -- options shared by the commands ------------------------------------------------------------
_job_arg = click.argument("job", required=False, metavar="[JOB]")
_address = click.option("--address", envvar="STREAMJOB_ADDRESS", metavar="URL",
                        help="The job's REST API (env STREAMJOB_ADDRESS), instead of JOB: a job this machine's "
                             "registry does not list (e.g. in a pod).")
_token = click.option("--token", envvar="STREAMJOB_TOKEN", default="", metavar="TOKEN",
                      help="Bearer token, if the job sets rest.auth.token (env STREAMJOB_TOKEN); a job found by "
                           "JOB brings its own.")
_json_flag = click.option("--json", "as_json", is_flag=True, help="Print the API's JSON answer.")
_timeout = click.option("--timeout", default=600.0, show_default=True, help="Seconds to wait for the outcome.")
JOB_HELP = ("JOB is a running job's id, a unique prefix of it, or its name, as `streamjob list` shows them "
            "(no JOB: the only running job).")


def add_commands(main: click.Group) -> None:
    for command in (list_jobs, status, checkpoints, savepoint, rescale, stop, cancel):
        main.add_command(command)


@click.command("list")
@_json_flag
def list_jobs(as_json: bool) -> None:
    """The jobs running on this machine (`flink list`): id, name, state, REST API."""
    from .rest_client import RestError, call

    rows = []
    for e in registry.running():
        try:
            state = call(e.url, e.token(), "GET", "/v1/job?peek=true", timeout=3.0).get("state", "?")
        except RestError:
            state = "UNREACHABLE"
        rows.append({"id": e.id, "name": e.name, "state": state, "rest_url": e.url, "pid": e.pid,
                     "started": e.started, "job_file": e.job_file})
    if as_json:
        return print_json(rows)
    if not rows:
        echo("No running jobs.")
        return
    for r in rows:
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["started"]))
        echo(f"{started} : {r['id']} : {r['name']} ({r['state']})  {r['rest_url']}  pid {r['pid']}")


@click.command(epilog=JOB_HELP)
@_job_arg
@_address
@_token
@_json_flag
def status(job: str | None, address: str | None, token: str, as_json: bool) -> None:
    """The job's state, parallelism, restarts and latest checkpoint."""
    doc = target(job, address, token).call("GET", "/v1/job")
    if as_json:
        return print_json(doc)
    latest = doc["latest_checkpoint"]
    echo(f"{doc['name']} ({doc['id']}): {doc['state']}, parallelism {doc['parallelism']} "
         f"(max {doc['max_parallelism']}){_slots(doc)}, {doc['restarts']} restarts")
    echo(f"latest checkpoint: {latest['id']} at {latest['path']}" if latest else "latest checkpoint: none")
    if doc.get("final_savepoint"):
        echo(f"final savepoint: {doc['final_savepoint']}")
    if doc.get("error"):
        echo(f"error: {doc['error']}")


@click.command(epilog=JOB_HELP)
@_job_arg
@_address
@_token
@_json_flag
@click.option("-n", "--last", default=10, show_default=True, help="History entries to show.")
def checkpoints(job: str | None, address: str | None, token: str, as_json: bool, last: int) -> None:
    """Checkpoint counts and the most recent checkpoints."""
    doc = target(job, address, token).call("GET", "/v1/checkpoints")
    if as_json:
        return print_json(doc)
    c = doc["counts"]
    if doc.get("enabled") is False:
        echo("periodic checkpointing is off (execution.checkpointing.interval); savepoints only")
    echo(f"completed {c['completed']}, failed {c['failed']}, in progress {c['in_progress']}")
    for h in doc["history"][:last]:
        kind = "savepoint " if h.get("savepoint") else ""
        took = f"{h['duration_ms']:.0f} ms" if h.get("duration_ms") is not None else "-"
        why = f"  {h['failure']}" if h.get("failure") else ""
        echo(f"  {kind}{h['id']:>5}  {h['status']:<11} {took:>9}  {h['state_size']:>12,} B{why}")


@click.command(epilog=JOB_HELP + " As `flink savepoint JOB [TARGET]`; without periodic checkpointing too.")
@_job_arg
@click.argument("target_arg", required=False, metavar="[TARGET_DIR]")
@_address
@_token
@click.option("--target-dir", metavar="URL", help="Where to write it (default: the job's execution.checkpointing."
                                                  "savepoint-dir); the same as TARGET_DIR.")
@click.option("--stop", "stop_job", is_flag=True, help="Stop the job with this savepoint (as `streamjob stop -p`).")
@click.option("--drain", is_flag=True, help="With --stop: end the input first, so everything is flushed.")
@click.option("--no-wait", is_flag=True, help="Print the trigger id and return; do not wait for the outcome.")
@click.option("-d", "--dispose", metavar="PATH", help="Delete the savepoint at PATH instead (no job needed).")
@_timeout
@click.option("--request-id", metavar="ID",
              help="Your id for this request (1-128 of A-Z a-z 0-9 . _ : -): repeating it never takes a second "
                   "savepoint; it becomes the savepoint's id.")
def savepoint(job: str | None, target_arg: str | None, address: str | None, token: str, target_dir: str | None,
              stop_job: bool, drain: bool, no_wait: bool, dispose: str | None, timeout: float,
              request_id: str | None) -> None:
    """Take a savepoint of a running job (or stop it with one), or dispose of one."""
    if dispose:
        return _dispose(dispose)
    if target_arg and target_dir and target_arg != target_dir:
        fail(f"two target directories: {target_arg} and --target-dir {target_dir}; give one")
    if drain and not stop_job:
        fail("--drain goes with --stop")
    t = target(job, address, token)
    _savepoint(t, target_arg or target_dir, stop_job, drain, no_wait, timeout, request_id)


def _savepoint(t: Target, target_dir: str | None, stop_job: bool, drain: bool, no_wait: bool, timeout: float,
               request_id: str | None = None) -> None:
    before = t.call("GET", "/v1/job?peek=true") if stop_job else None
    body: dict = {"stop": stop_job, "drain": drain}
    if target_dir:
        body["target_dir"] = target_dir
    if request_id:
        body["request_id"] = request_id
    triggered = t.call("POST", "/v1/savepoints?wait=true" if stop_job and not no_wait else "/v1/savepoints", body,
                       doing="stop" if stop_job else "take a savepoint of")
    if no_wait:
        echo(triggered["id"])
        return
    from rich.console import Console
    from rich.text import Text

    with Console(stderr=True).status(Text(f"savepoint {triggered['id']} into {triggered['path']}")):
        doc = wait_for_savepoint(t, triggered["id"], timeout)
    if doc["status"] != "COMPLETED":
        fail(f"savepoint {triggered['id']} failed: {doc['error']}" + ("; the job goes on" if stop_job else ""))
    echo(doc["path"])
    if stop_job:
        end = wait_for_end(t, timeout, {**before, "final_savepoint": doc["path"]})
        echo_end(end, resume_hint(t.entry, doc["path"]))
        if end["state"] != "FINISHED":
            sys.exit(1)


def _dispose(path: str) -> None:
    from .checkpoint import filesystems
    from .checkpoint.metadata import CheckpointFormatError
    from .checkpoint.storage import dispose_savepoint
    from .config import Configuration

    filesystems.configure(Configuration())  # endpoint and credentials from the AWS environment
    try:
        meta = dispose_savepoint(path)
    except (CheckpointFormatError, ValueError, OSError) as e:
        fail(f"--dispose {path}: {e}")
    echo(f"disposed savepoint {path} (job {meta.job_name!r}, checkpoint {meta.checkpoint_id})")


@click.command(epilog=JOB_HELP + " Flink's `flink stop -p DIR JOB` is `streamjob stop -p DIR JOB`; `--savepoint` "
                                 "uses the job's execution.checkpointing.savepoint-dir.")
@_job_arg
@_address
@_token
@click.option("-p", "--savepoint-path", metavar="DIR",
              help="Stop with a savepoint into DIR, as Flink's `stop`: sources stop after its barrier, sinks "
                   "commit, the job ends; it resumes from it with `streamjob run JOB_FILE -s PATH`.")
@click.option("--savepoint", "with_savepoint", is_flag=True,
              help="Stop with a savepoint into the job's execution.checkpointing.savepoint-dir.")
@click.option("-d", "--drain", is_flag=True,
              help="With a savepoint: end the input first (event time reaches its end, windows fire), as "
                   "Flink's `stop --drain`. Without one, the same as plain stop.")
@_timeout
def stop(job: str | None, address: str | None, token: str, savepoint_path: str | None, with_savepoint: bool,
         drain: bool, timeout: float) -> None:
    """Stop the job and wait until it has ended.

    Without a savepoint (plain `stop`): a drain. Every source ends its input, in-flight records drain
    through every operator, and the final checkpoint commits the sinks' output: the job FINISHES as a
    bounded job does. With -p DIR or --savepoint: Flink's stop-with-savepoint."""
    t = target(job, address, token)
    if savepoint_path or with_savepoint:
        return _savepoint(t, savepoint_path, True, drain, False, timeout)
    t.call("POST", "/v1/stop?wait=true", doing="stop")
    err_note("stopping: the sources end their input, in-flight records drain, sinks commit")
    end = wait_for_end(t, timeout)
    echo_end(end)
    if end["state"] != "FINISHED":
        sys.exit(1)


@click.command(epilog=JOB_HELP)
@_job_arg
@_address
@_token
@_timeout
def cancel(job: str | None, address: str | None, token: str, timeout: float) -> None:
    """Cancel the job now (no final checkpoint) and wait until it has ended."""
    t = target(job, address, token)
    t.call("POST", "/v1/cancel?wait=true", doing="cancel")
    end = wait_for_end(t, timeout)
    echo_end(end)
    if end["state"] == "FAILED":
        sys.exit(1)


def _operator_parallelism(values: tuple[str, ...]) -> dict[str, int]:
    out: dict[str, int] = {}
    for value in values:
        uid, sep, n = value.rpartition("=")
        if not sep or not uid or not n.strip().isdigit() or int(n) < 1:
            fail(f"--operator {value!r}: expected UID=N (an operator's uid and a parallelism >= 1)")
        out[uid] = int(n)
    return out


@click.command(epilog=JOB_HELP + " The job restarts from its next checkpoint at the new parallelism, in place: no "
                                 "savepoint, no new driver, exactly once (as Flink's adaptive scheduler rescales).")
@_job_arg
@_address
@_token
@click.option("-p", "--parallelism", type=click.IntRange(min=1), help="The job's new parallelism (operators "
                                                                      "without one of their own take it).")
@click.option("--operator", "operators", multiple=True, metavar="UID=N",
              help="One operator's parallelism (its uid, else op<n>; the operators chained to it go with it); "
                   "repeat for more.")
@click.option("--no-wait", is_flag=True, help="Print the rescale's id and return; do not wait for the outcome.")
@_json_flag
@_timeout
def rescale(job: str | None, address: str | None, token: str, parallelism: int | None, operators: tuple[str, ...],
            no_wait: bool, as_json: bool, timeout: float) -> None:
    """Change a running job's parallelism, or single operators', in place."""
    ops = _operator_parallelism(operators)
    if parallelism is None and not ops:
        fail("nothing to change: give -p N (the job's parallelism) and/or --operator UID=N")
    t = target(job, address, token)
    job_id = t.call("GET", "/v1/job?peek=true")["id"]
    body: dict = {"operators": ops} if ops else {}
    if parallelism is not None:
        body["parallelism"] = parallelism
    doc = t.call("PUT", f"/v1/jobs/{job_id}/parallelism", body, doing="rescale")
    if no_wait:
        echo(doc["id"])
        return
    changes = "; ".join(f"{name} {doc['before'].get(name, '-')} -> {p}" for name, p in doc["after"].items()
                        if doc["before"].get(name) != p)
    from rich.console import Console
    from rich.text import Text

    deadline = time.monotonic() + timeout
    with Console(stderr=True).status(Text(f"rescaling {changes or '(no change)'}")) as shown:
        while doc["status"] in ("CHECKPOINTING", "RESTARTING"):
            if time.monotonic() > deadline:
                fail(f"rescale {doc['id']} did not complete within {timeout:.0f} s (still {doc['status']})")
            shown.update(Text(f"rescaling {changes}: {doc['status'].lower()}"
                              + (f" from checkpoint {doc['checkpoint_id']}" if doc.get("checkpoint_id") else "")))
            time.sleep(POLL_S)
            doc = t.call("GET", f"/v1/jobs/{job_id}/rescales/{doc['id']}")
    if as_json:
        print_json(doc)
    if doc["status"] == "FAILED":
        fail(f"rescale {doc['id']} failed: {doc['error']}")
    if not as_json:
        if not changes:
            echo("the job runs at that parallelism already: nothing to do")
        else:
            echo(f"rescaled {changes} from checkpoint {doc['checkpoint_id']} (every task ran again "
                 f"{doc['restart_s']:.1f} s after it)")


def err_note(text: str) -> None:
    click.echo(text, err=True)
