"""Which checkpoint a resume or a failover restores, when the newest one cannot be read.

Pure decision logic over what the job manager found (``Found``, newest
first); reading ``_metadata`` and checking state files is the caller's I/O.

A 2PC sink commits its output when it hears that a checkpoint completed. So
the newest completed checkpoint marks output that may already be committed,
and restoring an older one replays the records in between: their output is
written a second time, exactly as starting from scratch would. Hence:

1. the newest readable checkpoint is restored, when it is the newest one;
2. a checkpoint that cannot be read and may have committed output is never
   skipped silently: the restore fails, naming the file and what is wrong,
   unless the user accepted the duplicates (``ALLOW_OLDER``), then the next
   older one is tried and a note says what is repeated;
3. a checkpoint the user named (``--from-checkpoint .../chk-60``, a savepoint)
   is never replaced by another one, whatever the setting;
4. when nothing readable is left after one that committed, nothing is
   restored: starting over repeats everything.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from ..config import Options

ALLOW_OLDER = Options.ALLOW_OLDER_CHECKPOINT
ALLOW_OLDER_FLAG = "--allow-older-checkpoint"


@dataclass(frozen=True)
class Found:
    checkpoint_id: int
    url: str
    problem: str | None = None  # None: readable as far as could be checked; else what is wrong, naming the file
    committed: bool = True  # its completion was announced: sinks may have committed output with it
    explicit: bool = False  # the user named this one: it is restored or nothing is
    kind: str = "checkpoint"


@dataclass(frozen=True)
class Choice:
    restore: Found | None  # None with no refusal: start from the beginning (nothing was found)
    refusal: str | None = None  # set: fail, with this one-line message
    notes: tuple[str, ...] = field(default_factory=tuple)


def choose(found: Sequence[Found], allow_older: bool) -> Choice:
    """The checkpoint to restore among ``found`` (newest first)."""
    notes: list[str] = []
    skipped_committed: list[Found] = []
    for c in found:
        if c.problem is None:
            return Choice(c, None, tuple(notes))
        what = f"{c.kind} {c.checkpoint_id}"
        if c.explicit:
            return Choice(None, f"cannot restore {what}: {c.problem}. It was named explicitly, so no other "
                                f"checkpoint is restored in its place" + (
                                    f"; {_duplicates(c)} (to accept that, name the older one)" if c.committed
                                    else "; name another one to restore it"), tuple(notes))
        if c.committed and not allow_older:
            return Choice(None, f"cannot restore {what}: {c.problem}. {_sentence(_duplicates(c))}; to accept "
                                f"that, set {ALLOW_OLDER}=true (--conf {ALLOW_OLDER}=true, or {ALLOW_OLDER_FLAG})",
                          tuple(notes))
        if c.committed:
            skipped_committed.append(c)
            notes.append(f"Not restoring {what}: {c.problem}; restoring an older checkpoint, which writes again the "
                         f"output {what} committed ({ALLOW_OLDER} is true)")
        else:
            notes.append(f"Not restoring {what}: {c.problem}; its completion was never announced, so no output "
                         f"was committed with it")
    if skipped_committed:
        newest = skipped_committed[0]
        return Choice(None, f"cannot restore {newest.kind} {newest.checkpoint_id}: {newest.problem}; no older "
                            f"checkpoint can be read either, and starting from the beginning would write again "
                            f"all the output completed checkpoints committed", tuple(notes))
    return Choice(None, None, tuple(notes))


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:]


def _duplicates(c: Found) -> str:
    return (f"{c.kind} {c.checkpoint_id} completed, so sinks may have committed output with it, and restoring an "
            f"older checkpoint would write that output again")


__all__ = ["ALLOW_OLDER", "ALLOW_OLDER_FLAG", "Choice", "Found", "choose"]
