"""What a job's end leaves to resume from, in words: the last lines ``streamjob run`` prints.

Pure text from facts the executor gathered (no I/O), so every way a job ends says the same kind of
thing: which checkpoint or savepoint stays, where, and the command that resumes from it, or plainly
that nothing does and why.
"""

from __future__ import annotations

import os
import shlex
import sys
from dataclasses import dataclass

RETENTION_KEY = "execution.checkpointing.externalized-checkpoint-retention"

# The options of this process's `streamjob run` that shape the job (parallelism, master, configuration),
# as typed: a resume command without them would run another job (`-p 2` dropped rescales it to 1).
run_options: list[str] = []


@dataclass(frozen=True)
class Ending:
    state: str  # FINISHED, CANCELED, FAILED
    checkpointing: bool  # the job had a checkpoint coordinator
    retention: str  # execution.checkpointing.externalized-checkpoint-retention
    kept: bool  # its completed checkpoints stay (keeps_checkpoints)
    latest_id: int | None = None  # the newest completed checkpoint, if any
    latest_url: str | None = None
    savepoint: str | None = None  # the stop-with-savepoint that ended it, if any
    stopped: bool = False  # ended by a graceful stop (Ctrl-C, SIGTERM, streamjob stop): its final checkpoint is kept
    interrupted: bool = False  # canceled by a second Ctrl-C / SIGTERM: its checkpoints are kept whatever the retention
    damaged: tuple[int, ...] = ()  # checkpoints a restore found unreadable: never named as the one to resume


def local_path(url: str) -> str:
    """A file:// URL as the path a user types; other URLs as they are."""
    return url[len("file://"):] if url.startswith("file://") else url


def _job_file(argv: list[str]) -> str:
    if not argv or not argv[0] or argv[0] in ("-c", "-m"):
        return "JOB_FILE"
    job = argv[0]
    try:
        rel = os.path.relpath(job)
        return rel if not rel.startswith("..") else job
    except ValueError:  # another drive
        return job


def resume_command(flag: str, path: str, argv: list[str] | None = None, extra: tuple[str, ...] = ()) -> str:
    """``streamjob run <job file> [run options] FLAG PATH [job args]`` for this program (``streamjob run``
    sets sys.argv to the job file and its arguments, and ``run_options`` to its own options that shape the job)."""
    argv = list(sys.argv if argv is None else argv)
    out = ["streamjob", "run", _job_file(argv), *run_options, *extra, flag, local_path(path)]
    args = argv[1:]
    if any(a.startswith("-") for a in args):
        out.append("--")  # the job's own arguments: not streamjob's options
    return " ".join(a if a == "--" else shlex.quote(a) for a in out + args)


def describe(ending: Ending, argv: list[str] | None = None) -> str | None:
    """The line naming what can be resumed; None when the job simply ran to the end of its input."""
    if ending.savepoint:
        return (f"Final savepoint at {local_path(ending.savepoint)}: resume with "
                f"`{resume_command('--from-savepoint', ending.savepoint, argv)}`")
    if ending.state == "FINISHED" and not ending.stopped:
        return None
    if not ending.checkpointing:
        return ("Nothing to resume from: the job ran without checkpointing (execution.checkpointing.interval); "
                "a new run starts from the beginning")
    if ending.latest_url and ending.latest_url.startswith("memory://"):
        return (f"Nothing to resume from: checkpoint {ending.latest_id} was kept in memory (memory:// checkpoint "
                f"storage ends with this process); set execution.checkpointing.dir to a file:// or s3:// URL to "
                f"resume a later run")
    if ending.kept and ending.latest_url and ending.latest_id in ending.damaged:
        return (f"Checkpoint {ending.latest_id} at {local_path(ending.latest_url)} cannot be restored (see above): "
                f"resume from an older one with `{resume_command('--from-checkpoint', ending.latest_url.rsplit('/', 1)[0], argv, ('--allow-older-checkpoint',))}`, "
                f"accepting that the output it committed is written again")
    if ending.kept and ending.latest_url:
        if ending.stopped and ending.state == "FINISHED":
            what, why = "Final checkpoint", " (a graceful stop keeps it whatever the retention)"
        elif ending.interrupted and ending.state == "CANCELED":
            what, why = "Checkpoint", " (kept whatever the retention: the run was interrupted)"
        else:
            what, why = "Checkpoint", ""
        return (f"{what} {ending.latest_id} retained at {local_path(ending.latest_url)}{why}: resume with "
                f"`{resume_command('--from-checkpoint', ending.latest_url, argv)}`")
    if ending.latest_url is None:
        return "No checkpoint had completed: nothing to resume from; a new run starts from the beginning"
    return (f"Its checkpoints are deleted ({RETENTION_KEY}={ending.retention}): nothing to resume from. To keep "
            f"them when a job is canceled or fails, set {RETENTION_KEY}=RETAIN_ON_CANCELLATION")
