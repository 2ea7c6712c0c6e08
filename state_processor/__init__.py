"""streamjob.state: savepoints and retained checkpoints as Spark DataFrames, and new savepoints written
from DataFrames (Flink's State Processor API).

    from streamjob.state import OperatorTransformation, SavepointReader, SavepointWriter

    reader = SavepointReader.read(spark, "s3://bucket/savepoints/savepoint-1a2b3c-...")
    reader.read_keyed_state("count", "count").show()

    (SavepointWriter.from_existing_savepoint(spark, "s3://bucket/savepoints/savepoint-1a2b3c-...")
        .remove_operator("count")
        .with_operator("count", OperatorTransformation.bootstrap_with(df).key_by("key").transform(Fn()))
        .write("s3://bucket/savepoints/migrated"))

Writing: ``transformation`` (what to bootstrap), ``rewrite`` (the new ``_metadata``: pure),
``bootstrap`` (one subtask's state through the runtime's own backend and writer), ``files`` (kept
operators' files copied, checked), ``writer`` (the Spark jobs).

Besides ``runtime/cluster`` this is the only package that imports pyspark (``reader``, and only
when a DataFrame is made): it runs offline, on the Spark the user has. The decoding (``decode``,
``types``, ``batches``, ``plan``) is pure and reuses the runtime's own snapshot readers and codecs;
``source`` is the I/O edge. Names are loaded on first use, so ``streamjob state --help`` stays quick.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "SavepointReader": "reader", "VALUE_FORMATS": "reader",
    "KeyedStateReaderFunction": "functions", "Collector": "functions", "ReaderContext": "functions",
    "ReaderRuntimeContext": "functions",
    "OperatorInfo": "plan", "OperatorStateInfo": "plan", "StateInfo": "plan", "StateNotFoundError": "plan",
    "StateReadError": "source",
    "SavepointWriter": "writer",
    "OperatorTransformation": "transformation", "OperatorIdentifier": "transformation",
    "BootstrapTransformation": "transformation",
    "KeyedStateBootstrapFunction": "bootstrap", "BootstrapContext": "bootstrap", "BootstrapError": "bootstrap",
    "OperatorExistsError": "rewrite",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'streamjob.state' has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
