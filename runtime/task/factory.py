"""The one place that maps a job graph node to its operator.

Every operator module builds on ``base`` (and ``context``); only this module knows them all,
and none of them imports it, so ``runtime/task`` has no import cycle. Window and broadcast
operators are imported when a job has them: the columnar window operator loads pandas,
which most workers never need.
"""

from __future__ import annotations

from typing import Iterable

from ..api import transformations as T
from ..api.functions import RuntimeContext
from ..graph.job_graph import OperatorNode
from .base import StreamOperator
from .co_input import CoProcessOperator, KeyedCoProcessOperator
from .iteration import IterationHeadOperator
from .keyed import (KeyedAggregateOperator, KeyedFilterOperator, KeyedFlatMapOperator, KeyedMapOperator,
                    KeyedProcessOperator, KeyedReduceOperator)
from .sink import SinkOperator
from .source import SourceOperator
from .stateless import FilterOperator, FlatMapOperator, MapOperator, ProcessOperator, ProjectOperator
from .timestamps import TimestampsAndWatermarksOperator


KEYED_VARIANTS: dict[str, type[StreamOperator]] = {
    T.MAP: KeyedMapOperator,
    T.FLAT_MAP: KeyedFlatMapOperator,
    T.FILTER: KeyedFilterOperator,
}


def _opens_state(node: OperatorNode) -> bool:
    """A map/flat_map/filter on a keyed stream whose function has its own ``open``: only there can
    it reach keyed state (a lambda never can), so only it pays for a keyed backend and keys."""
    if node.params.get("key") is None or node.kind not in KEYED_VARIANTS:
        return False
    from ..api.functions import Function

    opener = getattr(type(node.fn), "open", None)
    return callable(opener) and opener is not Function.open


OPERATORS: dict[str, type[StreamOperator]] = {
    T.SOURCE: SourceOperator,
    T.MAP: MapOperator,
    T.FLAT_MAP: FlatMapOperator,
    T.FILTER: FilterOperator,
    T.PROJECT: ProjectOperator,
    T.PROCESS: ProcessOperator,
    T.KEYED_PROCESS: KeyedProcessOperator,
    T.KEYED_AGGREGATE: KeyedAggregateOperator,
    T.KEYED_REDUCE: KeyedReduceOperator,
    T.CO_PROCESS: CoProcessOperator,
    T.CO_MAP: CoProcessOperator,
    T.CO_FLAT_MAP: CoProcessOperator,
    T.KEYED_CO_PROCESS: KeyedCoProcessOperator,
    T.SINK: SinkOperator,
    T.TIMESTAMPS: TimestampsAndWatermarksOperator,
    T.ITERATION_HEAD: IterationHeadOperator,
}


def operator_is_keyed(node: OperatorNode) -> bool:
    """Whether the operator ``create_operator`` makes of ``node`` has a keyed state backend (the driver
    checks a restore against it before anything is deployed)."""
    if node.kind in (T.WINDOW, T.WINDOW_AGGREGATE, T.KEYED_BROADCAST_PROCESS):
        return True
    if node.kind in T.BROADCAST_PROCESS_KINDS:
        return False
    if _opens_state(node):
        return True
    cls = OPERATORS.get(node.kind)
    return bool(cls is not None and cls.keyed)


# The operators whose kernels are pandas' (factorize, groupby): a job with one has its task daemons load
# pandas before they fork (pydaemon.PRELOAD_ENV); others never load it (arrow_pandas).
_PANDAS_KINDS = (T.KEYED_AGGREGATE, T.WINDOW_AGGREGATE)


def task_modules(nodes: Iterable[OperatorNode]) -> tuple[str, ...]:
    """The heavy modules the operators of ``nodes`` import besides every task's own."""
    return ("pandas",) if any(node.kind in _PANDAS_KINDS for node in nodes) else ()


def create_operator(node: OperatorNode, ctx: RuntimeContext) -> StreamOperator:
    if node.kind == T.WINDOW:
        from .windows import WindowOperator  # loaded by the jobs that have windows

        return WindowOperator(node, ctx)
    if node.kind == T.WINDOW_AGGREGATE:
        from .window_columnar import ColumnarWindowAggregateOperator  # it loads pandas

        return ColumnarWindowAggregateOperator(node, ctx)
    if node.kind in T.BROADCAST_PROCESS_KINDS:
        from .broadcast import BroadcastProcessOperator, KeyedBroadcastProcessOperator  # ... broadcast state

        return (KeyedBroadcastProcessOperator if node.kind == T.KEYED_BROADCAST_PROCESS else BroadcastProcessOperator)(node, ctx)
    if node.kind == T.ASYNC_WAIT:
        from .async_wait import AsyncWaitOperator  # starts an asyncio loop thread: only the jobs that use it

        return AsyncWaitOperator(node, ctx)
    if _opens_state(node):
        return KEYED_VARIANTS[node.kind](node, ctx)
    return OPERATORS[node.kind](node, ctx)
