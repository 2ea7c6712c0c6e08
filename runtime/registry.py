"""The local registry of running jobs: what ``streamjob list`` shows, and how ``status``, ``savepoint``,
``stop`` and ``cancel`` find a job by its id (or a unique prefix of it) or its name, without the REST URL.

Each job with a REST API leaves one file, ``<job id>.json``, in ``$STREAMJOB_STATE_DIR``, else
``$XDG_STATE_HOME/streamjob/jobs``, else ``~/.local/state/streamjob/jobs`` (the directory is the user's
own, mode 0700): its id, name, REST URL, process id and that process's start time, and where its bearer
token is (a file of the user's: the job's ``rest.auth.token-file``, or one written next to the entry with
mode 0600). The file goes when the job's job manager shuts down. An entry whose process is gone (killed,
crashed) or whose pid now belongs to another process is stale: it is ignored and removed when read.

Registering never fails a job: a read-only home (a container) only means the job is not listed.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from typing import Iterable

STATE_DIR_ENV = "STREAMJOB_STATE_DIR"


@dataclass(frozen=True)
class Entry:
    id: str
    name: str
    url: str
    pid: int
    started: float  # wall clock, seconds
    pid_start: str | None = None  # the process's start time (Linux: /proc/<pid>/stat), against pid reuse
    token_file: str | None = None  # where the REST API's bearer token is; None: no token needed
    job_file: str | None = None  # what `streamjob run` ran (for the resume hint)

    def token(self) -> str:
        if not self.token_file:
            return ""
        try:
            with open(self.token_file) as f:
                return f.read().strip()
        except OSError:
            return ""


@dataclass(frozen=True)
class Ended:
    """What is left of a job that ended (``<job id>.ended``): a command naming it later says it ended,
    and how, instead of that no such job runs."""

    id: str
    name: str
    state: str
    ended: float  # wall clock, seconds
    job_file: str | None = None


ENDED_KEPT = 50  # records of ended jobs kept, newest first; older ones go as a new one is written


class RegistryError(ValueError):
    """A job reference matches no running job, or more than one; the message lists them."""


def state_dir(environ: dict | None = None) -> str:
    env = os.environ if environ is None else environ
    if env.get(STATE_DIR_ENV):
        return env[STATE_DIR_ENV]
    base = env.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "streamjob", "jobs")


def process_start(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/<pid>/stat): with the
    pid it names one process, never a later one that got the same pid. None where /proc is missing."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces: split after its closing one.
    fields = stat[stat.rfind(")") + 2:].split()
    return fields[19] if len(fields) > 19 else None


def is_alive(entry: Entry) -> bool:
    try:
        os.kill(entry.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process holds the pid: not ours any more, unless /proc says otherwise
    if entry.pid_start is None:
        return True
    return process_start(entry.pid) == entry.pid_start


def register(job_id: str, name: str, url: str, token: str = "", token_file: str | None = None,
             job_file: str | None = None, pid: int | None = None) -> str | None:
    """Write the job's entry; returns its path (None: it could not be written)."""
    directory = state_dir()
    pid = os.getpid() if pid is None else pid
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        if token and not token_file:
            token_file = os.path.join(directory, f"{job_id}.token")
            fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(token)
        entry = Entry(job_id, name, url, pid, time.time(), process_start(pid),
                      os.path.abspath(token_file) if token_file else None, job_file)
        path = os.path.join(directory, f"{job_id}.json")
        tmp = f"{path}.{pid}.tmp"
        with open(tmp, "w") as f:
            json.dump(asdict(entry), f)
        os.replace(tmp, path)  # readers see the whole entry or none
        return path
    except OSError:
        return None


def unregister(job_id: str) -> None:
    directory = state_dir()
    for suffix in (".json", ".token"):
        try:
            os.remove(os.path.join(directory, f"{job_id}{suffix}"))
        except OSError:
            pass


def record_end(job_id: str, name: str, state: str, job_file: str | None = None) -> None:
    """Leave a record of the job's end (never fails the job: an unwritable directory only loses it)."""
    directory = state_dir()
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        path = os.path.join(directory, f"{job_id}.ended")
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump(asdict(Ended(job_id, name, state, time.time(), job_file)), f)
        os.replace(tmp, path)
        for old in _ended_paths(directory)[ENDED_KEPT:]:
            os.remove(old)
    except OSError:
        pass


def _ended_paths(directory: str) -> list[str]:
    """The records of ended jobs, newest first."""
    paths = [os.path.join(directory, n) for n in os.listdir(directory) if n.endswith(".ended")]
    return sorted(paths, key=lambda p: os.path.getmtime(p) if os.path.exists(p) else 0.0, reverse=True)


def ended() -> list[Ended]:
    """Records of the jobs that ended here, newest first."""
    found = []
    try:
        paths = _ended_paths(state_dir())
    except OSError:
        return []
    for path in paths:
        try:
            with open(path) as f:
                doc = json.load(f)
            found.append(Ended(**{k: doc.get(k) for k in Ended.__dataclass_fields__}))
        except (OSError, ValueError, TypeError):
            continue
    return sorted(found, key=lambda e: e.ended or 0.0, reverse=True)


def find_ended(records: Iterable[Ended], ref: str | None) -> Ended | None:
    """The newest ended job ``ref`` names (id, id prefix or name); without ``ref``, the last to end. Pure."""
    for e in records:  # newest first
        if ref is None or e.id == ref or e.name == ref or (ref and e.id.startswith(ref.lower())):
            return e
    return None


def _read(path: str) -> Entry | None:
    try:
        with open(path) as f:
            doc = json.load(f)
        return Entry(**{k: doc.get(k) for k in Entry.__dataclass_fields__})
    except (OSError, ValueError, TypeError):
        return None


def running(clean: bool = True) -> list[Entry]:
    """The entries of jobs whose process lives, oldest first; stale ones are removed (``clean``)."""
    directory = state_dir()
    try:
        names = sorted(n for n in os.listdir(directory) if n.endswith(".json"))
    except OSError:
        return []
    alive = []
    for name in names:
        entry = _read(os.path.join(directory, name))
        if entry is not None and entry.pid and is_alive(entry):
            alive.append(entry)
        elif clean and (entry is not None or _older_than(os.path.join(directory, name), 60.0)):
            unregister(name[: -len(".json")])
    return sorted(alive, key=lambda e: e.started)


def _older_than(path: str, seconds: float) -> bool:
    """An unreadable entry may be one being written; removed only once it is clearly abandoned."""
    try:
        return time.time() - os.path.getmtime(path) > seconds
    except OSError:
        return False


def resolve(entries: Iterable[Entry], ref: str | None) -> Entry:
    """The one job ``ref`` names: an id, a unique prefix of one, or a job name (exact). Without
    ``ref``, the only running job. Pure: the caller reads the registry."""
    entries = list(entries)
    if not entries:
        raise RegistryError("no running job is registered (`streamjob list` shows them); give --address URL")
    if ref is None:
        if len(entries) == 1:
            return entries[0]
        raise RegistryError(f"{len(entries)} jobs are running; name one by id or name: {_listing(entries)}")
    exact = [e for e in entries if e.id == ref]
    if exact:
        return exact[0]
    by_name = [e for e in entries if e.name == ref]
    by_prefix = [e for e in entries if e.id.startswith(ref.lower())] if ref else []
    for found in (by_name, by_prefix):
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            raise RegistryError(f"{ref!r} matches {len(found)} running jobs: {_listing(found)}; give more of the id")
    raise RegistryError(f"no running job with id or name {ref!r}; running: {_listing(entries)}")


def _listing(entries: list[Entry]) -> str:
    return ", ".join(f"{e.id[:12]} ({e.name!r})" for e in entries)
