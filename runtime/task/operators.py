"""The stream operators under the names they had when they all lived in this one module.

Nothing in ``runtime`` imports this module (the operators are in ``base``, ``context``,
``stateless``, ``keyed``, ``co_input``, ``timestamps``, ``source``, ``sink``, ``windows``,
``window_columnar``, ``broadcast``; ``factory.create_operator`` builds them); it keeps
``from streamjob.runtime.task.operators import ...`` working for tests, benchmarks and users.
"""

from __future__ import annotations

from .base import OperatorFailure, OperatorSnapshot, Output, StreamOperator
from .co_input import CoProcessOperator, KeyedCoProcessOperator
from .context import _Context, _emit_process_results, _keyed_records, _run_rows, _run_stamped, _TimerFiring
from .factory import KEYED_VARIANTS, OPERATORS, create_operator, operator_is_keyed
from .keyed import (KeyedAggregateOperator, KeyedFilterOperator, KeyedFlatMapOperator, KeyedMapOperator,
                    KeyedProcessOperator, KeyedReduceOperator, RollingAggregator, _replace)
from .sink import SinkOperator
from .source import SourceOperator
from .stateless import FilterOperator, FlatMapOperator, MapOperator, ProcessOperator, ProjectOperator
from .timestamps import TimestampsAndWatermarksOperator

__all__ = [
    "CoProcessOperator", "FilterOperator", "FlatMapOperator", "KEYED_VARIANTS", "KeyedAggregateOperator",
    "KeyedCoProcessOperator", "KeyedFilterOperator", "KeyedFlatMapOperator", "KeyedMapOperator",
    "KeyedProcessOperator", "KeyedReduceOperator", "MapOperator", "OPERATORS", "OperatorFailure",
    "OperatorSnapshot", "Output", "ProcessOperator", "ProjectOperator", "RollingAggregator", "SinkOperator",
    "SourceOperator", "StreamOperator", "TimestampsAndWatermarksOperator", "_Context", "_TimerFiring",
    "_emit_process_results", "_keyed_records", "_replace", "_run_rows", "_run_stamped", "create_operator",
    "operator_is_keyed",
]
