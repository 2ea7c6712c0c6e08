"""The autoscaler scenario's job: Kafka -> a keyed operator with a fixed cost per record -> Kafka, exactly once.

    streamjob run e2e/jobs/autoscaled.py --input-topic IN --output-topic OUT [--cost-ms 3]

Each input record is JSON ``{"key": k, "seq": i}``. The keyed operator ("work", uid ``work``) spends
``--cost-ms`` per record (a sleep: busy time for the autoscaler, no CPU taken from the machine), counts
the key's records in its state and emits ``{"key", "seq", "count"}`` to OUT through an exactly-once
KafkaSink. The producer writes key k to partition k % partitions in seq order, so a key's records
arrive in order and ``expected`` gives the one correct output row for row: a lost or repeated record,
or lost state across a rescale, changes some row's count.

The source (uid ``events``) does little per record; the work vertex needs several subtasks at a rate
one subtask cannot follow: an autoscaler gives the two different parallelism.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time

from streamjob.runtime import KeyedProcessFunction, StreamExecutionEnvironment, Types, ValueStateDescriptor
from streamjob.runtime.connectors import (DeliveryGuarantee, JsonRowDeserializationSchema, JsonRowSerializationSchema,
                                          KafkaOffsetsInitializer, KafkaRecordSerializationSchema, KafkaSink,
                                          KafkaSource)

# The Kafka login from the environment, as the click count example reads it (examples/ sits beside e2e/ here
# and in the image: /opt/streamjob/examples).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, "examples"))
from kafka_click_counts import kafka_properties  # noqa: E402

EVENT = Types.ROW_NAMED(["key", "seq"], [Types.INT(), Types.LONG()])
KEYS, PARTITIONS = 40, 4


class Work(KeyedProcessFunction):
    def __init__(self, cost_ms: float):
        self.cost = cost_ms / 1000.0

    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process_element(self, value, ctx):
        time.sleep(self.cost)
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        yield {"key": value["key"], "seq": value["seq"], "count": count}


def expected(events: list[tuple[int, int]]) -> list[tuple[int, int, int]]:
    """The output of ``events`` ((key, seq) in the order produced), sorted: (key, seq, count)."""
    counts: dict[int, int] = {}
    out = []
    for key, seq in events:
        counts[key] = counts.get(key, 0) + 1
        out.append((key, seq, counts[key]))
    return sorted(out)


# -- the scenario's side: topics, a producer whose rate steps, the output read back -------------------------
def create_topics(bootstrap: str, topics: list[str]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, **kafka_properties()})
    for done in admin.create_topics([NewTopic(t, PARTITIONS) for t in topics]).values():
        done.result(30)


class StepProducer:
    """Writes {"key", "seq"} at ``rate`` records/s (set it while it runs: the step), key k to partition
    k % PARTITIONS in seq order, and remembers what it wrote, in order."""

    def __init__(self, bootstrap: str, topic: str, rate: float):
        from confluent_kafka import Producer

        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
                                  **kafka_properties()})
        self.topic, self.rate, self.events = topic, rate, []
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        seq, next_at = 0, time.monotonic()
        while not self.stopped.is_set():
            key = seq % KEYS
            self.producer.produce(self.topic, json.dumps({"key": key, "seq": seq}).encode(), partition=key % PARTITIONS)
            self.events.append((key, seq))
            seq += 1
            next_at += 1.0 / self.rate
            delay = next_at - time.monotonic()
            self.producer.poll(0)
            if delay > 0:
                time.sleep(delay)
        self.producer.flush(30)

    def stop(self) -> list[tuple[int, int]]:
        self.stopped.set()
        self.thread.join(60)
        return list(self.events)


def output_rows(values: list[dict]) -> list[tuple[int, int, int]]:
    """The output topic's values (read read_committed: examples/kafka_click_counts.read_counts), sorted as
    ``expected`` is: (key, seq, count)."""
    return sorted((v["key"], v["seq"], v["count"]) for v in values)


# -- the job ---------------------------------------------------------------------------------------------------
def build(bootstrap: str, input_topic: str, output_topic: str, cost_ms: float) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment()
    props = kafka_properties()
    source = (KafkaSource.builder().set_bootstrap_servers(bootstrap).set_topics(input_topic)
              .set_group_id(f"autoscaled-{input_topic}").set_starting_offsets(KafkaOffsetsInitializer.earliest())
              .set_value_only_deserializer(JsonRowDeserializationSchema.builder().type_info(EVENT).build())
              .set_properties(props).build())
    sink = (KafkaSink.builder().set_bootstrap_servers(bootstrap)
            .set_record_serializer(KafkaRecordSerializationSchema.builder().set_topic(output_topic)
                                   .set_key_serialization_schema(lambda r: str(r["key"]).encode())
                                   .set_value_serialization_schema(JsonRowSerializationSchema.builder().build())
                                   .build())
            .set_delivery_guarantee(DeliveryGuarantee.EXACTLY_ONCE)
            .set_transactional_id_prefix(f"autoscaled-{output_topic}")
            .set_kafka_producer_config(props).build())
    (env.from_source(source, None, "events").uid("events")
     .key_by(lambda e: e["key"], key_type=Types.INT())
     .process(Work(cost_ms)).name("work").uid("work")
     .sink_to(sink).name("out").uid("out"))
    return env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092"))
    parser.add_argument("--input-topic", required=True)
    parser.add_argument("--output-topic", required=True)
    parser.add_argument("--cost-ms", type=float, default=3.0)
    args = parser.parse_args()
    build(args.bootstrap, args.input_topic, args.output_topic, args.cost_ms).execute("autoscaled")


if __name__ == "__main__":
    main()
