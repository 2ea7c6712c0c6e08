"""``_metadata``: the one file that makes a checkpoint complete.

JSON, written by the job manager last, after every task acknowledged. It names
each operator (by uid, or by its place in the graph) and, per subtask, the
state handle: where the bytes are (a file relative to the job's checkpoint
directory, or inline) and the index of key groups inside them. Parsing checks
every field and names the file and the field that is wrong.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

FORMAT = "streamjob-checkpoint"
VERSION = 1


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
    operators: dict[str, dict[str, Any]]  # op key -> {"name": str, "subtasks": [handle | None, ...]}
    kind: str = "checkpoint"  # or "savepoint"
    mode: str = "EXACTLY_ONCE"
    completed_ms: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> bytes:
        return json.dumps({
            "format": FORMAT, "version": VERSION, "type": self.kind, "checkpoint_id": self.checkpoint_id,
            "job_id": self.job_id, "job_name": self.job_name, "timestamp_ms": self.timestamp_ms,
            "completed_ms": self.completed_ms, "parallelism": self.parallelism,
            "max_parallelism": self.max_parallelism, "mode": self.mode, "operators": self.operators,
            **({"extra": self.extra} if self.extra else {}),
        }, separators=(",", ":")).encode()

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

    def state_size(self) -> int:
        return sum(int(h.get("size", 0)) for op in self.operators.values() for h in op["subtasks"] if h)


def shared_files(handle: dict | None) -> list[str]:
    """Files in ``shared/`` one state handle references (the SST files of a RocksDB handle)."""
    if not handle:
        return []
    native = (handle.get("index") or {}).get("rocksdb") or {}
    return [f["file"] for f in (native.get("sst") or {}).values() if isinstance(f, dict) and "file" in f]


def parse(data: bytes, where: str) -> CheckpointMetadata:
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise CheckpointFormatError(f"{where}: not valid JSON ({e})") from None
    if not isinstance(doc, dict):
        raise CheckpointFormatError(f"{where}: expected a JSON object, got {type(doc).__name__}")
    if doc.get("format") != FORMAT:
        raise CheckpointFormatError(f"{where}: field 'format' is {doc.get('format')!r}, expected {FORMAT!r}")
    if doc.get("version") != VERSION:
        raise CheckpointFormatError(f"{where}: field 'version' is {doc.get('version')!r}; this streamjob reads version {VERSION}")

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
        if len(op["subtasks"]) != parallelism:
            raise CheckpointFormatError(
                f"{where}: operators[{key!r}].subtasks has {len(op['subtasks'])} entries for parallelism {parallelism}"
            )
        for i, h in enumerate(op["subtasks"]):
            if h is None:
                continue
            if not isinstance(h, dict) or not isinstance(h.get("index"), dict) or not ("file" in h or "data" in h):
                raise CheckpointFormatError(f"{where}: operators[{key!r}].subtasks[{i}] is not a valid state handle")
    return CheckpointMetadata(
        checkpoint_id=need("checkpoint_id", int), job_id=need("job_id", str), job_name=str(doc.get("job_name", "")),
        timestamp_ms=need("timestamp_ms", int), parallelism=parallelism, max_parallelism=need("max_parallelism", int),
        operators=operators, kind=str(doc.get("type", "checkpoint")), mode=str(doc.get("mode", "EXACTLY_ONCE")),
        completed_ms=int(doc.get("completed_ms", 0)), extra=dict(doc.get("extra") or {}),
    )
