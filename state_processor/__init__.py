"""streamjob.state: savepoints and retained checkpoints as Spark DataFrames (Flink's State Processor API).

    from streamjob.state import SavepointReader

    reader = SavepointReader.read(spark, "s3://bucket/savepoints/savepoint-1a2b3c-...")
    reader.read_keyed_state("count", "count").show()

With ``streamjob.runtime`` this is the only package besides ``runtime/cluster`` that imports
pyspark (only ``reader`` does, and only when a DataFrame is made): it runs offline, on the Spark
the user has. The decoding (``decode``, ``types``, ``batches``, ``plan``) is pure and reuses the
runtime's own snapshot readers and codecs; ``source`` is the I/O edge.
"""

from .functions import Collector, KeyedStateReaderFunction, ReaderContext, ReaderRuntimeContext
from .plan import OperatorInfo, OperatorStateInfo, StateInfo, StateNotFoundError
from .reader import SavepointReader
from .source import StateReadError

__all__ = ["Collector", "KeyedStateReaderFunction", "OperatorInfo", "OperatorStateInfo", "ReaderContext",
           "ReaderRuntimeContext", "SavepointReader", "StateInfo", "StateNotFoundError", "StateReadError"]
