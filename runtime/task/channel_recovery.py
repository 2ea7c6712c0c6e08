"""Restoring an unaligned checkpoint's in-flight data at another parallelism: the reading and placing
half of ``checkpoint.channel_rescale``, which decides which new subtask takes what.

Each task with inputs reads, for each of its input edges that carried in-flight data, the channel state
of the old target subtasks it takes data of (their input side) and of every old source subtask (their
output side, for those old targets), keeps what belongs to it (by key group under hash partitioning,
whole channels otherwise) and puts it at the head of its input channels, marked recovered. Its gate then
takes all recovered data before any new input. Senders send nothing again: their output channel state is
delivered here, at the receivers, by the new partitioning.

Events among the in-flight data (watermarks, idleness) are dropped: they were sent on channels that no
longer exist, and the sources send watermarks again after a restore (a watermark only ever holds back).
"""

from __future__ import annotations

from typing import Any, Callable

from ..checkpoint import channel_rescale
from ..checkpoint.channel_rescale import HandleEdges
from ..checkpoint.channel_state import RecoveredChannelState
from ..network.channels import InputChannel
from ..network.events import RuntimeEvent

Reader = Callable[[dict, str], RecoveredChannelState]  # (handle, where) -> its channel state


def recover_rescaled(tasks: list[Any], graph: Any, restore: dict, read: Reader) -> None:
    indexed = channel_rescale.index_edges(restore["channel_state"])
    if indexed is None:  # the executor refuses this before deploying; a task never guesses
        raise ValueError(f"checkpoint {restore['url']}: channel state without edges (format 1) cannot be rescaled")
    handles, old_shapes = indexed
    new_shapes = channel_rescale.shapes_of(graph)
    by_input: dict[int, dict[int, HandleEdges]] = {}  # edge -> old target subtask -> its handle
    by_output: dict[int, dict[int, HandleEdges]] = {}  # edge -> old source subtask -> its handle
    for h in handles:
        for e in h.inputs:
            by_input.setdefault(e, {})[h.subtask] = h
        for e in h.outputs:
            by_output.setdefault(e, {})[h.subtask] = h
    cache: dict[tuple[str, int], RecoveredChannelState] = {}  # a slot's tasks may need the same file

    def load(h: HandleEdges | None) -> RecoveredChannelState | None:
        if h is None:
            return None
        key = (h.vertex, h.subtask)
        if key not in cache:
            cache[key] = read(h.handle, f"checkpoint {restore['url']}, channel state of task {h.vertex} "
                                        f"(subtask {h.subtask + 1})")
        return cache[key]

    for task in tasks:
        if task.gate is None:
            continue
        k = task.subtask
        channels = {(ch.edge, ch.source_subtask): ch for ch in task.gate.channels}
        recovered: dict[int, tuple[InputChannel, list[Any]]] = {}
        for e in task.vertex.input_edges:
            old, new = old_shapes.get(e), new_shapes.get(e)
            if old is None or new is None:
                continue  # no in-flight data on this edge (the executor refused edges that are gone)
            route = channel_rescale.router(new, graph.edges[e].key) if graph.edges[e].key is not None else None
            for t in channel_rescale.old_targets(old, new, k):
                by_record = channel_rescale.assign(old, new, t).by_record
                at_target = load(by_input.get(e, {}).get(t))
                for s in range(old.sources):
                    # On the wire: what the target had not processed yet, then what still waited at the sender.
                    batches = list(at_target.inputs.get((e, s), ())) if at_target is not None else []
                    at_source = load(by_output.get(e, {}).get(s))
                    if at_source is not None:
                        batches += at_source.outputs.get((e, t), ())
                    picked = []
                    for b in batches:
                        if isinstance(b, RuntimeEvent):
                            continue
                        if by_record:
                            assert route is not None
                            b = channel_rescale.records_for(b, route(b), k)
                            if b is None:
                                continue
                        picked.append(b)
                    if picked:
                        ch = channels[(e, channel_rescale.input_channel(new, s, k))]
                        recovered.setdefault(id(ch), (ch, []))[1].extend(picked)
        for ch, batches in recovered.values():
            ch.prepend_recovered(batches)
        if recovered:
            task.gate.recovering = True


__all__ = ["recover_rescaled"]
