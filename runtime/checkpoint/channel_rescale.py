"""Rescaling channel state: which new subtask takes which in-flight data of an unaligned checkpoint
restored at another parallelism (Flink 1.13's "rescaling of unaligned checkpoints").

Pure decisions, no I/O: ``task/channel_recovery.py`` reads the files and puts the data where these
functions say. The in-flight data of one old channel (source subtask s -> target subtask t of a channel
edge) is the target's input channel state for s followed by the source's output channel state for t:
that is their order on the wire, and both were emitted before the source's snapshot and are in neither
snapshot. At another parallelism those channels are gone; the data goes to the new subtasks of the target
operator by the edge's new partitioning, as in Flink:

* hash (``key_by``): each record to the new subtask owning its key group (max-parallelism key groups, as
  keyed state is re-assigned), so it meets its key's restored state. A new subtask reads only the old
  targets whose key-group range overlaps its own;
* custom (``partition_custom``): each record to the subtask the user's partitioner picks for the new
  parallelism;
* broadcast: new subtask k takes old target (k mod old parallelism)'s in-flight data, the old subtask whose
  broadcast state copy it restores (``state.operator_state.broadcast_copy``): copy and data agree;
* rebalance, shuffle and forward (also a forward edge that became rebalance because the parallelism now
  differs at its ends, or back): whole channels, old target t to new subtask t mod new parallelism
  (Flink's round-robin assignment of non-keyed in-flight data).

Everything becomes recovered *input* of the new target subtasks, output channel state included (where it
waited does not matter). Data from old source s goes on the new input channel from source s mod new source
parallelism (forward: the one channel), so one old source's records keep their order; and each task
processes all of its recovered input before any new input (``InputGate.recovering``), so a key's in-flight
records come before its new ones, whichever new source subtask now reads its split.

A checkpoint restored with every operator at its old parallelism keeps its channels (``rescaled`` is False)
and restores them as they were (output state is sent again by its sender).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable

import numpy as np
import pyarrow as pa

from ..api.transformations import BROADCAST, CUSTOM, FORWARD, HASH, REBALANCE, SHUFFLE
from ..batch import Stamped, extract_keys
from ..keygroups import assign_key_groups, key_group_range, operator_index_for_key_group

# Format 2 of the channel state names its edges in the state handle's index (``describe_handle``); format 1
# (written before rescaling was supported) does not, and restores at its own parallelism only.
FORMAT = 2


@dataclass(frozen=True)
class EdgeShape:
    """A channel edge as a checkpoint saw it, or as the job to restore has it."""

    edge: int
    source: str  # the source operator's state key (uid, or place in the program)
    target: str
    partitioner: str
    sources: int  # the source operator's parallelism
    targets: int  # the target operator's parallelism
    max_parallelism: int  # the target operator's: its key groups
    explicit: bool = False  # the program named the partitioning
    name: str = ""  # "source -> target", for messages

    def to_json(self) -> dict:
        return {"edge": self.edge, "source": self.source, "target": self.target, "partitioner": self.partitioner,
                "sources": self.sources, "targets": self.targets, "max_parallelism": self.max_parallelism,
                "explicit": self.explicit, "name": self.name}

    @classmethod
    def from_json(cls, doc: dict) -> "EdgeShape":
        return cls(int(doc["edge"]), str(doc["source"]), str(doc["target"]), str(doc["partitioner"]),
                   int(doc["sources"]), int(doc["targets"]), int(doc["max_parallelism"]), bool(doc.get("explicit")),
                   str(doc.get("name", "")))


def shapes_of(graph: Any) -> dict[int, EdgeShape]:
    """Every channel edge of a job graph (a chained edge has no channel, hence no channel state)."""
    ops = graph.operators
    out = {}
    for e in graph.edges.values():
        src, dst = ops[e.source], ops[e.target]
        if e.target in src.chained_outputs:
            continue
        out[e.id] = EdgeShape(e.id, src.state_key, dst.state_key, e.partitioner, src.parallelism, dst.parallelism,
                              dst.max_parallelism, e.explicit, f"{src.name} -> {dst.name}")
    return out


def describe_handle(inputs: Iterable[int], outputs: Iterable[int], shapes: dict[int, EdgeShape]) -> dict:
    """What a task's channel state handle records beside its bytes: the edges it holds data of (input
    side, output side) and their shapes, so a restore at another parallelism finds the files it needs."""
    ins, outs = sorted(set(inputs)), sorted(set(outputs))
    return {"format": FORMAT, "in": ins, "out": outs, "edges": [shapes[e].to_json() for e in sorted(set(ins + outs))]}


@dataclass
class HandleEdges:
    """The edges one old subtask's channel state holds data of (from its handle's index)."""

    vertex: str
    subtask: int
    handle: dict
    inputs: list[int]
    outputs: list[int]


def index_edges(channel_state: dict[str, list[dict | None]]) -> tuple[list[HandleEdges], dict[int, EdgeShape]] | None:
    """The handles of a checkpoint's channel state with the edges each holds, and the old shape of those
    edges; None when some handle does not name its edges (format 1)."""
    handles, shapes = [], {}
    for vertex, per_subtask in channel_state.items():
        for i, h in enumerate(per_subtask):
            if not h:
                continue
            index = (h.get("index") or {}).get("channel_state") or {}
            if index.get("format") != FORMAT:
                return None
            for doc in index.get("edges") or []:
                shape = EdgeShape.from_json(doc)
                shapes[shape.edge] = shape
            handles.append(HandleEdges(vertex, i, h, [int(e) for e in index.get("in") or []],
                                       [int(e) for e in index.get("out") or []]))
    return handles, shapes


def parallelism_changed(old_parallelism: int, operators: dict[str, dict], graph: Any) -> bool:
    """The job, or any operator with state in the checkpoint, runs at another parallelism than when the
    checkpoint was taken (the operators dict is the checkpoint metadata's)."""
    if old_parallelism != graph.parallelism:
        return True
    nodes = {op.state_key: op for op in graph.operators.values()}
    for key, op in operators.items():
        node = nodes.get(key)
        if node is not None and node.parallelism != int(op.get("parallelism", len(op.get("subtasks") or []))):
            return True
    return False


def rescaled(old_parallelism: int, operators: dict[str, dict], channel_state: dict, graph: Any) -> bool:
    """Whether the in-flight data must be redistributed (else every channel is restored as it was). The
    same answer in every slot: it depends only on the checkpoint and the job graph."""
    if not channel_state:
        return False
    if parallelism_changed(old_parallelism, operators, graph):
        return True
    indexed = index_edges(channel_state)
    if indexed is None:
        return False  # format 1 at the same parallelism: its channels are this job's
    new = shapes_of(graph)
    if any(_key(old) != _key(new.get(e)) for e, old in indexed[1].items()):
        return True
    # Channel state is found by task vertex id at the same parallelism: the vertices must hold the same edges
    # (chaining changed elsewhere renumbers them).
    vertices = {str(v.id): v for v in graph.tasks}
    for h in indexed[0]:
        v = vertices.get(h.vertex)
        outputs = {e for o in v.operators for e in graph.operators[o].channel_outputs} if v is not None else set()
        if v is None or not set(h.inputs) <= set(v.input_edges) or not set(h.outputs) <= outputs:
            return True
    return False


def _key(shape: EdgeShape | None) -> tuple | None:
    return None if shape is None else (shape.source, shape.target, shape.partitioner, shape.sources, shape.targets)


def refusal(old: EdgeShape, graph: Any) -> str | None:
    """Why the in-flight data of edge ``old`` cannot be redistributed into this job graph (None: it can)."""
    e = graph.edges.get(old.edge)
    ops = graph.operators
    what = f"in-flight data of the edge {old.name or old.edge} ({old.partitioner})"
    if e is None or ops[e.source].state_key != old.source or ops[e.target].state_key != old.target:
        return (f"it holds {what}, which this job does not have (the job graph changed); restore it with the job "
                f"it was taken of, or take a savepoint (always aligned) and start from that")
    src, dst = ops[e.source], ops[e.target]
    if e.target in src.chained_outputs:
        return (f"it holds {what}, but at this parallelism {dst.name!r} is chained to {src.name!r} (forward, same "
                f"parallelism): no input channel is left to put the data on; keep them apart with "
                f".start_new_chain() on {dst.name!r} (or .disable_chaining()), or take a savepoint (always aligned) "
                f"at the old parallelism and rescale from that")
    if not _compatible(old.partitioner, e.partitioner):
        return (f"it holds {what}, which this job partitions {e.partitioner}: in-flight data is re-routed "
                f"by the same partitioning only (forward and rebalance count as one); restore with the "
                f"partitioning it was taken with, or take a savepoint (always aligned) and start from that")
    return None


_WHOLE = (FORWARD, REBALANCE, SHUFFLE)


def _compatible(old: str, new: str) -> bool:
    return old == new or (old in _WHOLE and new in _WHOLE)


@dataclass(frozen=True)
class Assignment:
    """Where the in-flight data of old channels into old target subtask t goes: to ``subtasks`` (new
    subtasks of the target operator), each record to the one owning it (``by_record``: hash and
    custom partitioning) or all of it to each of them."""

    subtasks: tuple[int, ...]
    by_record: bool


def assign(old: EdgeShape, new: EdgeShape, t: int) -> Assignment:
    """The mapping old channel (into old target subtask ``t``) -> new subtasks, by the new partitioning."""
    n = new.targets
    if new.partitioner == HASH:
        if old.partitioner == HASH and old.max_parallelism == new.max_parallelism:
            groups = key_group_range(old.max_parallelism, old.targets, t)
            if not len(groups):
                return Assignment((), True)
            first = int(operator_index_for_key_group(new.max_parallelism, n, groups.start))
            last = int(operator_index_for_key_group(new.max_parallelism, n, groups.stop - 1))
            return Assignment(tuple(range(first, last + 1)), True)
        return Assignment(tuple(range(n)), True)
    if new.partitioner == CUSTOM:
        return Assignment(tuple(range(n)), True)
    if new.partitioner == BROADCAST:
        return Assignment(tuple(k for k in range(n) if k % old.targets == t), False)
    return Assignment((t % n,), False)


def old_targets(old: EdgeShape, new: EdgeShape, k: int) -> list[int]:
    """The old target subtasks whose in-flight data new subtask ``k`` takes (all of it or its records)."""
    return [t for t in range(old.targets) if k in assign(old, new, t).subtasks]


def input_channel(new: EdgeShape, old_source: int, k: int) -> int:
    """The source subtask (of the new job) whose input channel at new subtask ``k`` carries the recovered
    data that came from old source subtask ``old_source``."""
    return k if new.partitioner == FORWARD else old_source % new.sources


def records_for(batch: Any, owners: np.ndarray, k: int) -> Any:
    """The records of ``batch`` whose owner (new subtask, one per record, in order) is ``k``, in order,
    with their timestamps; None when there are none."""
    mask = np.asarray(owners) == k
    if not mask.any():
        return None
    if mask.all():
        return batch
    if isinstance(batch, Stamped):
        inner = records_for(batch.batch, owners, k)
        return Stamped(inner, batch.ts[mask])
    if isinstance(batch, pa.RecordBatch):
        return batch.filter(pa.array(mask))
    return [r for r, m in zip(batch, mask.tolist()) if m]


Router = Callable[[Any], np.ndarray]  # a batch -> the new subtask of each of its records


def router(new: EdgeShape, key: Any) -> Router:
    """The new subtask of each record of a batch under the edge's new hash or custom partitioning
    (``key``: the edge's KeySpec), as its RecordWriter would route it now."""
    n = new.targets

    def by_key_group(batch: Any) -> np.ndarray:
        inner = batch.batch if isinstance(batch, Stamped) else batch
        groups = assign_key_groups(extract_keys(inner, key), new.max_parallelism)
        return np.asarray(operator_index_for_key_group(new.max_parallelism, n, groups))

    def by_partitioner(batch: Any) -> np.ndarray:
        inner = batch.batch if isinstance(batch, Stamped) else batch
        keys = extract_keys(inner, key, allow_none=True)
        partition = key.partition_function()
        return np.asarray([partition(k, n) for k in (keys.tolist() if isinstance(keys, np.ndarray) else keys)],
                          dtype=np.int64)

    return by_partitioner if new.partitioner == CUSTOM else by_key_group


__all__ = ["Assignment", "EdgeShape", "FORMAT", "HandleEdges", "Router", "assign", "describe_handle", "index_edges",
           "input_channel", "old_targets", "parallelism_changed", "records_for", "refusal", "rescaled", "router", "shapes_of"]
