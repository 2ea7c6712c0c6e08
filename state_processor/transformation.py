"""``OperatorTransformation``: what state a ``SavepointWriter`` bootstraps for an operator (Flink's names).

    transformation = (OperatorTransformation.bootstrap_with(df)
                      .key_by("user")                      # a column, a position, a function or KeySelector
                      .transform(CountBootstrap()))
    writer.with_operator("count", transformation)

Nothing runs here: a transformation holds the DataFrame, how its rows are keyed and the function;
``SavepointWriter.write`` runs it, one Spark task per subtask of the operator.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from streamjob.runtime.api.transformations import KeySpec

from .bootstrap import KeyedStateBootstrapFunction


class OperatorIdentifier:
    """Flink's ``OperatorIdentifier.for_uid(uid)``; everywhere one is taken, the uid string is too."""

    __slots__ = ("uid",)

    def __init__(self, uid: str):
        self.uid = uid

    @staticmethod
    def for_uid(uid: str) -> "OperatorIdentifier":
        if not isinstance(uid, str) or not uid:
            raise ValueError(f"OperatorIdentifier.for_uid needs a non-empty uid, got {uid!r}")
        return OperatorIdentifier(uid)

    def __repr__(self) -> str:
        return f"OperatorIdentifier.for_uid({self.uid!r})"


def uid_of(operator: Any) -> str:
    uid = operator if isinstance(operator, str) else getattr(operator, "uid", None)
    if not isinstance(uid, str) or not uid:
        raise ValueError(f"an operator is named by its uid (a non-empty str or OperatorIdentifier.for_uid(uid)), "
                         f"got {operator!r}")
    return uid


@dataclass
class BootstrapTransformation:
    """Keyed state for one operator, from a DataFrame (``OperatorTransformation.bootstrap_with(df)
    .key_by(...).transform(fn)``). ``parallelism``: the subtasks (Spark tasks, state files) it writes;
    ``max_parallelism``: its key groups, which the restoring job's max parallelism must equal."""

    data: Any  # a pyspark DataFrame
    key: KeySpec
    function: KeyedStateBootstrapFunction
    parallelism: int | None = None
    max_parallelism: int | None = None

    def set_parallelism(self, parallelism: int) -> "BootstrapTransformation":
        self.parallelism = _positive(parallelism, "set_parallelism")
        return self

    def set_max_parallelism(self, max_parallelism: int) -> "BootstrapTransformation":
        self.max_parallelism = _positive(max_parallelism, "set_max_parallelism")
        return self


class KeyedOperatorTransformation:
    def __init__(self, data: Any, key: KeySpec, parallelism: int | None, max_parallelism: int | None):
        self._data, self._key = data, key
        self._parallelism, self._max_parallelism = parallelism, max_parallelism

    def transform(self, function: KeyedStateBootstrapFunction) -> BootstrapTransformation:
        if not isinstance(function, KeyedStateBootstrapFunction):
            raise TypeError(f"transform() on a keyed bootstrap needs a KeyedStateBootstrapFunction, got {function!r}")
        return BootstrapTransformation(self._data, self._key, function, self._parallelism, self._max_parallelism)


class OneInputOperatorTransformation:
    def __init__(self, data: Any):
        self._data = data
        self._parallelism: int | None = None
        self._max_parallelism: int | None = None

    def set_parallelism(self, parallelism: int) -> "OneInputOperatorTransformation":
        self._parallelism = _positive(parallelism, "set_parallelism")
        return self

    def set_max_parallelism(self, max_parallelism: int) -> "OneInputOperatorTransformation":
        self._max_parallelism = _positive(max_parallelism, "set_max_parallelism")
        return self

    def key_by(self, key_selector: Any) -> KeyedOperatorTransformation:
        """As ``DataStream.key_by``: a column name, a position, a function of the row or a ``KeySelector``;
        the key must be the one the restoring job's ``key_by`` gives for the same record (an int, a str,
        a tuple...): the key decides the key group, and the key group the subtask."""
        return KeyedOperatorTransformation(self._data, KeySpec.of(key_selector), self._parallelism,
                                           self._max_parallelism)

    def transform(self, function: Any) -> Any:
        raise TypeError("only keyed state can be bootstrapped here: key_by(...) first, then "
                        "transform(KeyedStateBootstrapFunction)")


class OperatorTransformation:
    @staticmethod
    def bootstrap_with(data: Any) -> OneInputOperatorTransformation:
        """``data``: a Spark DataFrame; its rows reach ``process_element`` as ``Row``s with its column names."""
        if not hasattr(data, "mapInArrow") or not hasattr(data, "schema"):
            raise TypeError(f"bootstrap_with needs a Spark DataFrame, got {type(data).__name__}")
        return OneInputOperatorTransformation(data)


def _positive(n: Any, call: str) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"{call} needs a positive int, got {n!r}")
    return n


__all__ = ["BootstrapTransformation", "KeyedOperatorTransformation", "OneInputOperatorTransformation",
           "OperatorIdentifier", "OperatorTransformation"]
