"""What a ``SavepointWriter`` makes of a savepoint: the operators kept, renamed, removed and added,
the files to copy, and the new ``_metadata``: pure, no I/O and no Spark.

Each call is checked when it is made, against the uids as the calls before it left them, so a
mistake is reported at the line that made it: an unknown uid lists the uids there are, a uid taken
says so. Kept operators keep their handles as they are (their files are copied under the same
names into the new savepoint, which is self-contained as every savepoint is); bootstrapped ones
get the handles their tasks wrote.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

from streamjob.runtime.checkpoint import checksums
from streamjob.runtime.checkpoint.metadata import CheckpointMetadata, handle_key_groups
from streamjob.runtime.keygroups import check_max_parallelism

from .plan import StateNotFoundError

JOB_NAME = "state-processor"  # of a savepoint made from nothing (new_savepoint)


class OperatorExistsError(ValueError):
    """``with_operator`` or ``change_operator_identifier`` to a uid the savepoint already has."""


@dataclass(frozen=True)
class FileCopy:
    """One file a kept operator's handles reference, to copy into the new savepoint as it is."""

    path: str  # relative to the source's root; the same relative path in the new savepoint
    size: int | None
    crc32c: int | None
    owner: str  # for messages: whose state it holds


class Rewrite:
    """The operators of the savepoint being written, as the calls so far left them."""

    def __init__(self, source: CheckpointMetadata | None, max_parallelism: int, where: str):
        check_max_parallelism(max_parallelism, 1)
        self.source = source
        self.max_parallelism = max_parallelism
        self.where = where  # the source savepoint (for messages), or "the new savepoint"
        # uid -> the source's uid of a kept operator, or None: to be bootstrapped (its transformation
        # is the writer's); dict order is the order operators are written in _metadata
        self.ops: dict[str, str | None] = {uid: uid for uid in (source.operators if source else {})}

    def _known(self, uid: str) -> None:
        if uid not in self.ops:
            raise StateNotFoundError(f"{self.where} has no operator with uid {uid!r}; its operators: "
                                     f"{', '.join(sorted(self.ops)) or 'none'}")

    def _free(self, uid: str) -> None:
        if not isinstance(uid, str) or not uid:
            raise ValueError(f"an operator uid is a non-empty string, got {uid!r}")
        if uid in self.ops:
            raise OperatorExistsError(f"{self.where} already has an operator with uid {uid!r}; every uid is "
                                      f"unique (remove_operator({uid!r}) first to replace its state)")

    def remove(self, uid: str) -> None:
        self._known(uid)
        del self.ops[uid]

    def rename(self, old: str, new: str) -> None:
        self._known(old)
        if new == old:
            return
        self._free(new)
        self.ops = {(new if k == old else k): v for k, v in self.ops.items()}

    def add(self, uid: str) -> None:
        self._free(uid)
        self.ops[uid] = None

    def bootstrapped(self) -> list[str]:
        return [uid for uid, old in self.ops.items() if old is None]

    def kept(self) -> dict[str, str]:
        """New uid -> the source's uid, of every operator taken over from the source."""
        return {uid: old for uid, old in self.ops.items() if old is not None}

    def copies(self) -> list[FileCopy]:
        """Every file the kept operators' handles reference (state files and shared SST files)."""
        out: dict[str, FileCopy] = {}
        meta = self.source
        for uid, old in self.kept().items():
            assert meta is not None
            op = meta.operators[old]
            n, maxp = len(op["subtasks"]), meta.operator_max_parallelism(old)
            for i, h in enumerate(op["subtasks"]):
                if not h:
                    continue
                groups = handle_key_groups(h, maxp, n, i)
                owner = f"operator {old!r} (subtask {i + 1}/{n}" + (f", key groups {groups}" if groups else "") + ")"
                if h.get("file"):
                    out.setdefault(h["file"], FileCopy(h["file"], _int(h.get("size")), _int(h.get(checksums.KEY)),
                                                       owner))
                native = (h.get("index") or {}).get("rocksdb") or {}
                for sst in (native.get("sst") or {}).values():
                    if isinstance(sst, dict) and "file" in sst:
                        out.setdefault(sst["file"], FileCopy(sst["file"], _int(sst.get("size")),
                                                             _int(sst.get(checksums.KEY)), owner))
        return list(out.values())

    def metadata(self, written: dict[str, dict[str, Any]]) -> CheckpointMetadata:
        """The new ``_metadata``: kept operators' entries as they were (under their new uids), and
        ``written``: uid -> {"name", "subtasks", "max_parallelism"} of each bootstrapped one."""
        meta = self.source
        missing = [uid for uid in self.bootstrapped() if uid not in written]
        if missing:
            raise ValueError(f"no state was written for operator(s) {', '.join(map(repr, missing))}")
        entries: dict[str, tuple[dict, int, int]] = {}  # uid -> (entry, parallelism, max parallelism)
        for uid, old in self.ops.items():
            if old is not None:
                assert meta is not None
                op = meta.operators[old]
                entries[uid] = (op, len(op["subtasks"]), meta.operator_max_parallelism(old))
            else:
                w = written[uid]
                entries[uid] = (w, len(w["subtasks"]), int(w["max_parallelism"]))
        # the job's parallelism is what parse() holds every operator's own to: at least each of them
        parallelism = max([meta.parallelism if meta else 1] + [p for _, p, _ in entries.values()])
        max_parallelism = meta.max_parallelism if meta else self.max_parallelism
        operators = {}
        for uid, (entry, p, maxp) in entries.items():
            out = {k: v for k, v in entry.items() if k not in ("parallelism", "max_parallelism")}
            if p != parallelism or maxp != max_parallelism:  # an operator's own, as the coordinator records it
                out["parallelism"], out["max_parallelism"] = p, maxp
            operators[uid] = out
        now = int(time.time() * 1000)
        return CheckpointMetadata(
            checkpoint_id=meta.checkpoint_id if meta else 0,
            job_id=meta.job_id if meta else uuid.uuid4().hex,
            job_name=meta.job_name if meta else JOB_NAME,
            timestamp_ms=meta.timestamp_ms if meta else now,
            parallelism=parallelism, max_parallelism=max_parallelism, operators=operators, kind="savepoint",
            mode=meta.mode if meta else "EXACTLY_ONCE", completed_ms=now,
            extra={k: v for k, v in (meta.extra if meta else {}).items() if k != "channel_state"},
        )


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def check_source(meta: CheckpointMetadata, where: str) -> None:
    """A source the writer can take over: no in-flight data of an unaligned checkpoint (it belongs to
    the channels of the job that wrote it, which a rewritten savepoint no longer describes)."""
    if any(h for handles in meta.channel_state().values() for h in handles):
        raise ValueError(f"{where} is an unaligned checkpoint holding in-flight data (channel state); a "
                         f"SavepointWriter starts from savepoints and aligned checkpoints only: take a savepoint "
                         f"of the job (streamjob savepoint JOB DIR)")
