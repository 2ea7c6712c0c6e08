"""State descriptors, named as in PyFlink: a name, and what the state needs to be created.

A descriptor says *which* state a function wants; the state backend of the
running task creates (or restores) it. Names are unique per operator: two
descriptors with one name but different kinds are a job definition error.
"""

from __future__ import annotations

from typing import Any, Callable


class StateDescriptor:
    kind = "state"

    def __init__(self, name: str, type_info: Any = None):
        if not isinstance(name, str) or not name:
            raise ValueError(f"{type(self).__name__} needs a non-empty name, got {name!r}")
        self.name = name
        self.type_info = type_info  # accepted for PyFlink compatibility; values are pickled either way

    def get_name(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class ValueStateDescriptor(StateDescriptor):
    kind = "value"

    def __init__(self, name: str, value_type_info: Any = None, default: Any = None):
        super().__init__(name, value_type_info)
        self.default = default


class ListStateDescriptor(StateDescriptor):
    kind = "list"

    def __init__(self, name: str, elem_type_info: Any = None):
        super().__init__(name, elem_type_info)


class MapStateDescriptor(StateDescriptor):
    kind = "map"

    def __init__(self, name: str, key_type_info: Any = None, value_type_info: Any = None):
        super().__init__(name, (key_type_info, value_type_info))


class ReducingStateDescriptor(StateDescriptor):
    kind = "reducing"

    def __init__(self, name: str, reduce_function: Any, type_info: Any = None):
        super().__init__(name, type_info)
        fn = getattr(reduce_function, "reduce", reduce_function)
        if not callable(fn):
            raise TypeError(f"ReducingStateDescriptor({name!r}) needs a ReduceFunction or a callable, got {reduce_function!r}")
        self.reduce_function = reduce_function

    def reducer(self) -> Callable[[Any, Any], Any]:
        return getattr(self.reduce_function, "reduce", self.reduce_function)


class AggregatingStateDescriptor(StateDescriptor):
    kind = "aggregating"

    def __init__(self, name: str, agg_function: Any, state_type_info: Any = None):
        super().__init__(name, state_type_info)
        for method in ("create_accumulator", "add", "get_result"):
            if not callable(getattr(agg_function, method, None)):
                raise TypeError(
                    f"AggregatingStateDescriptor({name!r}) needs an AggregateFunction with {method}(), got {agg_function!r}"
                )
        self.agg_function = agg_function


__all__ = [
    "AggregatingStateDescriptor",
    "ListStateDescriptor",
    "MapStateDescriptor",
    "ReducingStateDescriptor",
    "StateDescriptor",
    "ValueStateDescriptor",
]
