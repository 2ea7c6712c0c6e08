"""The logical plan: what the DataStream API records, before any graph is built.

A transformation is plain data (kind, function, parameters, inputs) so that the
plan pickles to the tasks and knows nothing of where it will run. ``partition``
and ``union`` are virtual, as in Flink: they shape the edges of the job graph
and become no operator of their own.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Callable

from .functions import KeySelector

# Kinds
SOURCE = "source"
MAP = "map"
FLAT_MAP = "flat_map"
FILTER = "filter"
PROJECT = "project"
PROCESS = "process"
KEYED_PROCESS = "keyed_process"
KEYED_AGGREGATE = "keyed_aggregate"
KEYED_REDUCE = "keyed_reduce"
CO_PROCESS = "co_process"
CO_MAP = "co_map"
CO_FLAT_MAP = "co_flat_map"
KEYED_CO_PROCESS = "keyed_co_process"  # params["keys"]: the KeySpec of each input
BROADCAST_PROCESS = "broadcast_process"  # params["descriptors"]: the broadcast MapStateDescriptors
KEYED_BROADCAST_PROCESS = "keyed_broadcast_process"  # ... and params["key"]: the KeySpec of the keyed input
TIMESTAMPS = "timestamps"  # params["strategy"]: a WatermarkStrategy
WINDOW = "window"  # params: key, assigner, trigger, evictor, allowed_lateness, late_tag, mode, functions
WINDOW_AGGREGATE = "window_aggregate"  # columnar sum/min/max of a column: params key, assigner, how, field, late_tag
ASYNC_WAIT = "async_wait"  # fn: an AsyncFunctionDescriptor (AsyncDataStream)
SINK = "sink"
PARTITION = "partition"
UNION = "union"
SIDE_OUTPUT = "side_output"  # params["tag"]: the name of one side output of its input
# Iterations (``stream.iterate()``): the head passes its input and the fed-back records on; FEEDBACK is the
# loop's back-edge, a virtual node whose inputs are the streams given to ``close_with``. Its consumer (the
# head, or the two-input operator of ``with_feedback_type``) reads them over back-edges (graph/iterations.py).
ITERATION_HEAD = "iteration_head"  # inputs: [the regular input, its FEEDBACK]; params["iteration"]: FEEDBACK's id
FEEDBACK = "feedback"  # params: name (of the iteration), max_wait_time_ms, closed (close_with was called)

VIRTUAL_KINDS = (PARTITION, UNION, SIDE_OUTPUT, FEEDBACK)
# Operators whose user function can emit to side outputs.
SIDE_OUTPUT_KINDS = (PROCESS, KEYED_PROCESS, CO_PROCESS, KEYED_CO_PROCESS, WINDOW, WINDOW_AGGREGATE, BROADCAST_PROCESS,
                     KEYED_BROADCAST_PROCESS)
BROADCAST_PROCESS_KINDS = (BROADCAST_PROCESS, KEYED_BROADCAST_PROCESS)  # input 0: the stream; input 1: broadcast
TWO_INPUT_KINDS = (CO_PROCESS, CO_MAP, CO_FLAT_MAP, KEYED_CO_PROCESS) + BROADCAST_PROCESS_KINDS

# Partitioners of PARTITION transformations
NEW_CHAIN = "new_chain"
NO_CHAINING = "no_chaining"

FORWARD = "forward"
HASH = "hash"
REBALANCE = "rebalance"
SHUFFLE = "shuffle"  # each batch to a random subtask
BROADCAST = "broadcast"  # every batch to every subtask
CUSTOM = "custom"  # partition_custom: the user's Partitioner picks the subtask of each key

_ids = itertools.count(1)


@dataclass(frozen=True)
class KeySpec:
    """How a key is taken from a record: a column name, a tuple position, or a function."""

    column: str | None = None
    position: int | None = None
    fn: Callable[[Any], Any] | None = None
    # key_by's key_type: what queryable state converts a key given as JSON into (not part of the routing)
    key_type: Any = field(default=None, compare=False)

    @staticmethod
    def of(selector: Any) -> "KeySpec":
        if isinstance(selector, str):
            return KeySpec(column=selector)
        if isinstance(selector, bool):
            raise TypeError("key_by needs a column name, a tuple position or a function, got a bool")
        if isinstance(selector, int):
            return KeySpec(position=selector)
        if isinstance(selector, KeySelector):
            return KeySpec(fn=selector.get_key)
        if callable(selector):
            return KeySpec(fn=selector)
        raise TypeError(f"key_by needs a column name, a tuple position or a function, got {selector!r}")

    def describe(self) -> str:
        if self.column is not None:
            return repr(self.column)
        if self.position is not None:
            return f"[{self.position}]"
        return getattr(self.fn, "__name__", "fn")


@dataclass(frozen=True)
class CustomPartitionKey(KeySpec):
    """The key of ``partition_custom`` with the partitioner that maps it to a subtask."""

    partitioner: Any = None

    def partition_function(self) -> Callable[[Any, int], int]:
        return getattr(self.partitioner, "partition", self.partitioner)


@dataclass(eq=False)
class Transformation:
    kind: str
    name: str
    inputs: list["Transformation"] = field(default_factory=list)
    fn: Any = None
    params: dict = field(default_factory=dict)
    uid: str | None = None
    id: int = field(default_factory=lambda: next(_ids))
    # Per operator, as Flink's set_parallelism / set_max_parallelism: None takes the job's.
    parallelism: int | None = None
    max_parallelism: int | None = None
    chaining: str | None = None  # None, NEW_CHAIN (start_new_chain) or NO_CHAINING (disable_chaining)
    slot_sharing_group: str | None = None  # None: "default", as Flink

    def __repr__(self) -> str:
        return f"Transformation({self.id}, {self.kind}, {self.name!r})"
