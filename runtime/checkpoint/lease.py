"""The job's lease on its checkpoint directory: one live job per ``<base>/<job id>``.

Two live jobs with one job id on one directory (a retained checkpoint resumed twice in claim mode, or
resumed while the job that wrote it still runs, or a driver pod redeployed while the old one lives)
would delete each other's checkpoints by retention and overwrite each other's state. So the job
manager holds ``_lease`` in the job's directory: who holds it (an owner token, host, pid, REST URL) and
when it was last renewed. It renews it every ``RENEW_S``; a job that finds a lease of another owner
renewed within ``EXPIRES_S`` refuses to start, naming the holder. A lease not renewed for that long is
stale (its job was killed) and is taken over, at once when its process was on this host and is gone.
A job that finds its own lease taken over (it could not renew in time: hung storage) stops: the other
job now owns the directory.

Pure decisions (``problem``) apart from the storage I/O (``JobLease``), which runs off the job
manager's loop (a hung store must not stop it).
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any, Callable

from .storage import write_file

LEASE = "_lease"
RENEW_S = 2.0
EXPIRES_S = 15.0  # several missed renewals: a slow store is not a dead job
RELEASE_WAIT_S = 10.0


@dataclass
class Holder:
    owner: str  # a token per job manager process: never reused
    job_id: str
    host: str
    pid: int
    rest: str | None
    renewed: float  # wall clock (time.time()) of the last renewal


def problem(found: Holder | None, owner: str, now: float, host: str, pid_alive: Callable[[int], bool]) -> str | None:
    """Why the job with ``owner`` may not take the directory now, or None (free, stale or its own)."""
    if found is None or found.owner == owner:
        return None
    age = now - found.renewed
    if age > EXPIRES_S or (found.host == host and not pid_alive(found.pid)):
        return None
    where = f"pid {found.pid} on {found.host}" + (f", REST API {found.rest}" if found.rest else "")
    return (f"job {found.job_id} is running on this checkpoint directory ({where}; its lease was renewed "
            f"{max(age, 0.0):.0f} s ago). Two jobs with one job id would delete each other's checkpoints: stop it "
            f"first (`streamjob cancel {found.job_id}`), or resume a copy under a new job id with "
            f"execution.state-recovery.claim-mode=NO_CLAIM")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class LeaseHeld(RuntimeError):
    """Another live job holds the directory; the message names it and what to do."""


class JobLease:
    def __init__(self, fs: Any, job_root: str, job_id: str, rest: str | None = None):
        self.fs = fs
        self.path = f"{job_root.rstrip('/')}/{LEASE}"
        self.me = Holder(uuid.uuid4().hex, job_id, socket.gethostname(), os.getpid(), rest, 0.0)
        self.lost: str | None = None  # set when another job took the directory over
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _read(self) -> Holder | None:
        try:
            doc = json.loads(self.fs.cat_file(self.path))
            return Holder(**{k: doc[k] for k in Holder.__dataclass_fields__})
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError):
            return None  # not ours to understand: a broken lease holds nothing

    def _write(self) -> None:
        doc = asdict(self.me) | {"renewed": time.time()}
        write_file(self.fs, self.path, json.dumps(doc).encode(), exclusive=False)

    def acquire(self, note: Callable[[str], None] = lambda text: None) -> None:
        """Take the directory, or raise LeaseHeld naming the job that holds it. A holder on this host is
        alive or not (its pid); one on another host (the driver pod before this one) proves it is alive
        by renewing: until it does or its lease expires, this waits (at most EXPIRES_S)."""
        found = self._read()
        why = problem(found, self.me.owner, time.time(), self.me.host, _pid_alive)
        if why and found is not None and found.host != self.me.host:
            note(f"Checkpoint directory {self.path.rsplit('/', 1)[0]} has the lease of job {found.job_id} on "
                 f"{found.host}: waiting up to {EXPIRES_S:.0f} s for it to expire (a job that is gone) or be "
                 f"renewed (a job that runs)")
            while why:
                time.sleep(0.5)
                now_found = self._read()
                if now_found is not None and now_found.renewed != found.renewed:
                    why = problem(now_found, self.me.owner, time.time(), self.me.host, _pid_alive)
                    break
                why = problem(now_found, self.me.owner, time.time(), self.me.host, _pid_alive)
        if why:
            raise LeaseHeld(why)
        self._write()

    def start(self, on_lost: Callable[[str], None]) -> None:
        """Renew in a thread of its own until ``release``; ``on_lost`` once another job took over."""
        def run() -> None:
            while not self._stop.wait(RENEW_S):
                try:
                    found = self._read()
                    if found is not None and found.owner != self.me.owner:
                        self.lost = (f"another job with this job id (pid {found.pid} on {found.host}) holds checkpoint "
                                     f"directory {self.path.rsplit('/', 1)[0]} now (it took the lease over while this "
                                     f"job could not renew it, or both started at once): this job stops so that one "
                                     f"job owns the directory")
                        on_lost(self.lost)
                        return
                    self._write()
                except Exception:  # noqa: BLE001 - a store that does not answer now may later; expiry decides
                    continue

        self._thread = threading.Thread(target=run, name="checkpoint-lease", daemon=True)
        self._thread.start()

    def release(self) -> None:
        """The job ended: the directory is free (only if the lease is still this job's)."""
        self._stop.set()

        def free() -> None:
            # A renewal already past its wait finishes its write first: else it could write the lease
            # again after it was removed, and the finished job's directory would keep it.
            if self._thread is not None:
                self._thread.join(RELEASE_WAIT_S)
            try:
                found = self._read()
                if found is not None and found.owner == self.me.owner:
                    self.fs.rm(self.path)
            except Exception:  # noqa: BLE001 - a lease left behind expires
                pass

        # Bounded: a hung store must not keep the job from ending (the lease it leaves expires).
        done = threading.Thread(target=free, name="checkpoint-lease-release", daemon=True)
        done.start()
        done.join(timeout=RELEASE_WAIT_S)
