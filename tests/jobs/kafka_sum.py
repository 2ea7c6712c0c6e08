"""Kafka -> keyed running sum -> the exactly-once FileSink, for the Kafka source tests.

Record i is ``{"k": i % KEYS, "i": i, "v": i % 10}`` in partition ``k % partitions``: every key's
records are in one partition, in index order, so every output row (the key's first record with
the running sum) is deterministic whatever the parallelism, the restores and the kills:
``expected_rows`` computes it.
The JSON values decode into Arrow columns (a declared row type), so ``key_by("k").sum("v")`` runs
columnar from the source on.
"""

from __future__ import annotations

import glob
import json
import os
from collections import defaultdict

from streamjob.runtime import (
    CheckpointingMode,
    ExternalizedCheckpointRetention,
    RestartStrategies,
    StreamExecutionEnvironment,
)
from streamjob.runtime.api.types import Types
from streamjob.runtime.connectors import (
    FileSink,
    JsonRowDeserializationSchema,
    KafkaOffsetsInitializer,
    KafkaSource,
)

KEYS = 24
ROW_TYPE = Types.ROW_NAMED(["k", "i", "v"], [Types.INT(), Types.LONG(), Types.LONG()])


def records(start: int, stop: int, partitions: int) -> list[tuple[int, bytes, bytes]]:
    return [((i % KEYS) % partitions, str(i % KEYS).encode(),
             json.dumps({"k": i % KEYS, "i": i, "v": i % 10}).encode()) for i in range(start, stop)]


def expected_rows(n: int) -> list[tuple[int, int, int]]:
    """(k, i, v) of every output: a rolling sum answers each record with its key's FIRST record (its
    ``i``) carrying the running sum, as Flink's and PyFlink's (a repeated row, where ``v`` was 0, is
    expected that many times: the sorted lists still tell a lost or repeated record)."""
    sums: dict[int, int] = defaultdict(int)
    first: dict[int, int] = {}
    out = []
    for i in range(n):
        sums[i % KEYS] += i % 10
        out.append((i % KEYS, first.setdefault(i % KEYS, i), sums[i % KEYS]))
    return sorted(out)


def committed_rows(out: str) -> list[tuple[int, int, int]]:
    rows = []
    for path in glob.glob(os.path.join(out, "*")):  # glob skips hidden in-progress / pending files
        with open(path) as f:
            rows += [(r["k"], r["i"], r["v"]) for r in map(json.loads, f)]
    return sorted(rows)


def source(bootstrap: str, topic: str, bounded: KafkaOffsetsInitializer | None = None, group_id: str | None = None,
           **properties) -> KafkaSource:
    b = (KafkaSource.builder().set_bootstrap_servers(bootstrap).set_topics(topic)
         .set_starting_offsets(KafkaOffsetsInitializer.earliest())
         .set_value_only_deserializer(JsonRowDeserializationSchema.builder().type_info(ROW_TYPE).build()))
    if bounded is not None:
        b.set_bounded(bounded)
    if group_id:
        b.set_group_id(group_id)
    for k, v in properties.items():
        b.set_property(k.replace("_", "."), v)
    return b.build()


def build(kafka_source: KafkaSource, out: str, checkpoints: str, parallelism: int = 2, interval_ms: int = 300,
          backend: str = "hashmap", restore: str | None = None, restarts: int = 30) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    if restore:
        env.configure({"execution.state-recovery.path": restore})
    env.enable_checkpointing(interval_ms, CheckpointingMode.EXACTLY_ONCE)
    env.set_state_backend(backend)
    config = env.get_checkpoint_config()
    config.set_checkpoint_storage(checkpoints)
    config.set_externalized_checkpoint_retention(ExternalizedCheckpointRetention.RETAIN_ON_CANCELLATION)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(restarts, 100))
    stream = env.from_source(kafka_source, None, "kafka").uid("kafka")
    stream.key_by("k").sum("v").uid("sum").sink_to(FileSink.jsonl(out)).uid("files")
    return env
