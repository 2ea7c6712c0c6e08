"""``_metadata``: the one file that makes a checkpoint complete.

JSON, written by the job manager last, after every task acknowledged. It names
each operator (by uid, or by its place in the graph) and, per subtask, the
state handle: where the bytes are (a file relative to the job's checkpoint
directory, or inline) and the index of key groups inside them. Parsing checks
every field and names the file and the field that is wrong.

Version 2 adds checksums (``checksums.py``): the document's last field,
``"crc32c"``, is the checksum of every byte before ``,"crc32c":`` (so the file
stays plain JSON), and every state handle carries its file's checksum and its
chunks'. Version 1 checkpoints (no checksums) still restore, unchecked.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from ..keygroups import key_group_range
from . import checksums

FORMAT = "streamjob-checkpoint"
VERSION = 2
READABLE_VERSIONS = (1, 2)  # 1: written before checksums; read unchecked
_CHECKSUM_FIELD = b',"' + checksums.KEY.encode() + b'":'
_CHECKSUM_AT = re.compile(rb',\s*"' + checksums.KEY.encode() + rb'"\s*:')


class CheckpointFormatError(ValueError):
    """A checkpoint or savepoint is missing, unreadable or malformed; the message names the file and field."""


@dataclass
class CheckpointMetadata:
    checkpoint_id: int
    job_id: str
    job_name: str
    timestamp_ms: int
    parallelism: int
    max_parallelism: int
    # op key -> {"name": str, "subtasks": [handle | None, ...]}, and, for an operator whose parallelism or
    # max parallelism is its own (set_parallelism), "parallelism" and "max_parallelism"
    operators: dict[str, dict[str, Any]]
    kind: str = "checkpoint"  # or "savepoint"
    mode: str = "EXACTLY_ONCE"
    completed_ms: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> bytes:
        body = json.dumps({
            "format": FORMAT, "version": VERSION, "type": self.kind, "checkpoint_id": self.checkpoint_id,
            "job_id": self.job_id, "job_name": self.job_name, "timestamp_ms": self.timestamp_ms,
            "completed_ms": self.completed_ms, "parallelism": self.parallelism,
            "max_parallelism": self.max_parallelism, "mode": self.mode, "operators": self.operators,
            **({"extra": self.extra} if self.extra else {}),
        }, separators=(",", ":")).encode()[:-1]  # without the closing brace: the checksum goes last
        return body + _CHECKSUM_FIELD + str(checksums.checksum(body)).encode() + b"}"

    def files(self) -> list[str]:
        """State files this checkpoint references (relative to the job's checkpoint directory)."""
        out = []
        for op in self.operators.values():
            for h in op["subtasks"]:
                if h and h.get("file"):
                    out.append(h["file"])
        for handles in self.channel_state().values():
            out += [h["file"] for h in handles if h and h.get("file")]
        return out

    def channel_state(self) -> dict[str, list[dict | None]]:
        """In-flight data of an unaligned checkpoint: task vertex id -> handle per subtask (none: {})."""
        return self.extra.get("channel_state") or {}

    def shared_files(self) -> list[str]:
        """Files in ``shared/`` this checkpoint references (incremental RocksDB state)."""
        return [f for op in self.operators.values() for h in op["subtasks"] for f in shared_files(h)]

    def file_refs(self) -> list["FileRef"]:
        """Every file this checkpoint references (state files, channel state, shared SST files), with the
        size it recorded and whose state it holds: what the job manager checks before a restore."""
        refs = []
        for key, op in self.operators.items():
            for i, h in enumerate(op["subtasks"]):
                if not h:
                    continue
                groups = handle_key_groups(h, self.operator_max_parallelism(key), len(op["subtasks"]), i)
                owner = (f"operator {op.get('name', key)!r} (subtask {i + 1}/{len(op['subtasks'])}"
                         + (f", key groups {groups}" if groups else "") + ")")
                if h.get("file"):
                    refs.append(FileRef(h["file"], h.get("size"), owner))
                native = (h.get("index") or {}).get("rocksdb") or {}
                for sst in (native.get("sst") or {}).values():
                    if isinstance(sst, dict) and "file" in sst:
                        refs.append(FileRef(sst["file"], sst.get("size"), owner))
        for task, handles in self.channel_state().items():
            for i, h in enumerate(handles):
                if h and h.get("file"):
                    refs.append(FileRef(h["file"], h.get("size"), f"channel state of task {task} (subtask {i + 1})"))
        return refs

    def operator_parallelism(self, key: str) -> int:
        op = self.operators[key]
        return int(op.get("parallelism", len(op["subtasks"])))

    def operator_max_parallelism(self, key: str) -> int:
        return int(self.operators[key].get("max_parallelism", self.max_parallelism))

    def state_size(self) -> int:
        return sum(int(h.get("size", 0)) for op in self.operators.values() for h in op["subtasks"] if h)


@dataclass(frozen=True)
class FileRef:
    path: str  # relative to the snapshot's root
    size: int | None  # as recorded
    owner: str  # whose state it holds, for messages


def handle_key_groups(handle: dict, max_parallelism: int, parallelism: int, subtask: int) -> str:
    """The key groups subtask ``subtask`` of ``parallelism`` wrote into a state handle, as "first-last"
    ("" when it holds no keyed state)."""
    index = handle.get("index") or {}
    if not index.get("rocksdb") and not index.get("keyed"):
        return ""
    groups = key_group_range(max_parallelism, parallelism, subtask)
    return f"{groups.start}-{groups.stop - 1}"


def shared_files(handle: dict | None) -> list[str]:
    """Files in ``shared/`` one state handle references (the SST files of a RocksDB handle)."""
    if not handle:
        return []
    native = (handle.get("index") or {}).get("rocksdb") or {}
    return [f["file"] for f in (native.get("sst") or {}).values() if isinstance(f, dict) and "file" in f]


def parse(data: bytes, where: str) -> CheckpointMetadata:
    if not data:
        raise CheckpointFormatError(f"{where} is empty (0 bytes): truncated")
    try:
        doc = json.loads(data)
    except json.JSONDecodeError as e:
        stripped = data.rstrip()
        if not stripped.endswith(b"}") or e.pos >= len(stripped):  # the document stops before it is closed
            raise CheckpointFormatError(f"{where} is truncated (it ends after {len(data)} bytes, in the middle "
                                        f"of the document)") from None
        raise CheckpointFormatError(f"{where}: not valid JSON ({e})") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise CheckpointFormatError(f"{where}: not valid JSON ({e})") from None
    if not isinstance(doc, dict):
        raise CheckpointFormatError(f"{where}: expected a JSON object, got {type(doc).__name__}")
    if doc.get("format") != FORMAT:
        raise CheckpointFormatError(f"{where}: field 'format' is {doc.get('format')!r}, expected {FORMAT!r}")
    if doc.get("version") not in READABLE_VERSIONS:
        raise CheckpointFormatError(f"{where}: field 'version' is {doc.get('version')!r}; this streamjob reads "
                                    f"versions {', '.join(map(str, READABLE_VERSIONS))}")
    if doc["version"] >= 2:
        _check_document(data, doc, where)

    def need(name: str, typ: type | tuple) -> Any:
        if name not in doc:
            raise CheckpointFormatError(f"{where}: field {name!r} is missing")
        value = doc[name]
        if not isinstance(value, typ) or isinstance(value, bool):
            raise CheckpointFormatError(f"{where}: field {name!r} has the wrong type ({type(value).__name__})")
        return value

    operators = need("operators", dict)
    parallelism = need("parallelism", int)
    if parallelism < 1:
        raise CheckpointFormatError(f"{where}: field 'parallelism' must be >= 1, got {parallelism}")
    for key, op in operators.items():
        if not isinstance(op, dict) or not isinstance(op.get("subtasks"), list):
            raise CheckpointFormatError(f"{where}: operators[{key!r}].subtasks is missing or not a list")
        own = op.get("parallelism", parallelism)  # an operator's own parallelism (set_parallelism), else the job's
        if isinstance(own, bool) or not isinstance(own, int) or not 1 <= own <= parallelism:
            raise CheckpointFormatError(f"{where}: operators[{key!r}].parallelism must be an int from 1 to the "
                                        f"job's {parallelism}, got {own!r}")
        if len(op["subtasks"]) != own:
            raise CheckpointFormatError(
                f"{where}: operators[{key!r}].subtasks has {len(op['subtasks'])} entries for parallelism {own}"
            )
        own_max = op.get("max_parallelism", 1)
        if isinstance(own_max, bool) or not isinstance(own_max, int) or own_max < 1:
            raise CheckpointFormatError(f"{where}: operators[{key!r}].max_parallelism must be a positive int, "
                                        f"got {own_max!r}")
        for i, h in enumerate(op["subtasks"]):
            if h is None:
                continue
            if not isinstance(h, dict) or not isinstance(h.get("index"), dict) or not ("file" in h or "data" in h):
                raise CheckpointFormatError(f"{where}: operators[{key!r}].subtasks[{i}] is not a valid state handle")
            if doc["version"] >= 2 and not isinstance(h.get(checksums.KEY), int):
                raise CheckpointFormatError(f"{where}: operators[{key!r}].subtasks[{i}] has no {checksums.KEY} "
                                            f"checksum (every state handle of a version 2 checkpoint has one)")
    return CheckpointMetadata(
        checkpoint_id=need("checkpoint_id", int), job_id=need("job_id", str), job_name=str(doc.get("job_name", "")),
        timestamp_ms=need("timestamp_ms", int), parallelism=parallelism, max_parallelism=need("max_parallelism", int),
        operators=operators, kind=str(doc.get("type", "checkpoint")), mode=str(doc.get("mode", "EXACTLY_ONCE")),
        completed_ms=int(doc.get("completed_ms", 0)), extra=dict(doc.get("extra") or {}),
    )


def _check_document(data: bytes, doc: dict, where: str) -> None:
    """The checksum of a version 2 ``_metadata``: its last field, over every byte before that field."""
    recorded = doc.get(checksums.KEY)
    found = list(_CHECKSUM_AT.finditer(data))  # (a rewritten file may have spaces around the separators)
    cut = found[-1].start() if found else -1
    if not isinstance(recorded, int) or isinstance(recorded, bool) or cut < 0:
        raise CheckpointFormatError(f"{where}: field {checksums.KEY!r} (the checksum every version 2 _metadata "
                                    f"ends with) is missing")
    problem = checksums.mismatch(recorded, memoryview(data)[:cut])
    if problem:
        raise CheckpointFormatError(f"{where}: {problem}: the file is damaged")
