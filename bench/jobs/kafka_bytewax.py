"""Kafka -> running sum per key -> Kafka on Bytewax, the peer in bench/kafka.py:
``python -m bytewax.testing kafka_bytewax:flow -p 2`` (with ``-r DIR -s 1 -b 0`` for 1 s snapshots).

Bytewax's own Kafka connectors: ``KafkaSource`` (offsets in its snapshots; ``tail=False`` when
KB_BOUNDED=1, so it stops at the end of the preloaded topic) and ``KafkaSink`` (no transactions: it
flushes every batch, so at-least-once with snapshots). ``json.loads`` per record, the sum in
``stateful_map`` (Bytewax keys are strings), ``json.dumps`` back, keyed by ``k``.
"""

import json
import os

import bytewax.operators as op
from bytewax.connectors.kafka import KafkaSink, KafkaSinkMessage, KafkaSource
from bytewax.dataflow import Dataflow

brokers = [os.environ["KB_BOOTSTRAP"]]


def running_sum(total, row):
    total = (total or 0) + row["v"]
    row["v"] = total
    return total, row


flow = Dataflow("kafka-bench")
messages = op.input("in", flow, KafkaSource(brokers, [os.environ["KB_IN"]], tail=os.environ.get("KB_BOUNDED") != "1",
                                            batch_size=5000))
keyed = op.key_on("key", op.map("decode", messages, lambda m: json.loads(m.value)), lambda r: str(r["k"]))
summed = op.stateful_map("sum", keyed, running_sum)
out = op.map("encode", summed, lambda kv: KafkaSinkMessage(kv[0].encode(), json.dumps(kv[1], separators=(",", ":")).encode()))
op.output("out", out, KafkaSink(brokers, os.environ["KB_OUT"], add_config={"partitioner": "murmur2_random"}))
