"""Click event count: the job of Flink's Operations Playground, on Kafka, exactly once.

    streamjob kafka-dev                                                  # a broker on 127.0.0.1:9092
    python examples/kafka_click_generator.py                             # clicks into topic "input"
    streamjob run examples/kafka_click_counts.py -p 2                    # counts into topic "output"
    python examples/kafka_click_counts.py --verify                       # the counts are exact?

Click events (``{"timestamp": ms, "page": "/help"}``) are read from the input topic, counted per
page in 15 s tumbling event-time windows (watermarks 200 ms behind the largest timestamp, as in the
playground) and written as ``{"windowStart", "windowEnd", "page", "count"}`` to the output topic by
an exactly-once KafkaSink: a window's count becomes visible to ``read_committed`` readers when the
checkpoint after it completes, once, whatever fails in between. The generator writes exactly 1000
clicks per page per window, so every count in the output must be 1000: ``--verify`` reads the output
topic as a ``read_committed`` consumer and checks that (and that no window of a page is there twice,
and none is missing between the first and the last).

Where the cluster is comes from the command line or the environment (a Kubernetes Secret in
``examples/k8s/kafka-click-counts.yaml``): ``KAFKA_BOOTSTRAP_SERVERS`` (default 127.0.0.1:9092),
and for a cluster that wants a login ``KAFKA_SASL_USERNAME``, ``KAFKA_SASL_PASSWORD``,
``KAFKA_SASL_MECHANISM`` (default SCRAM-SHA-512) and ``KAFKA_SECURITY_PROTOCOL`` (default SASL_SSL
when a username is given).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from streamjob.runtime import (CheckpointingMode, Duration, ExternalizedCheckpointRetention, ProcessWindowFunction,
                               RestartStrategies, StreamExecutionEnvironment, Time, TumblingEventTimeWindows, Types,
                               WatermarkStrategy)
from streamjob.runtime.connectors import (DeliveryGuarantee, JsonRowDeserializationSchema, JsonRowSerializationSchema,
                                          KafkaOffsetsInitializer, KafkaRecordSerializationSchema, KafkaSink,
                                          KafkaSource)

WINDOW_MS = 15_000
EVENTS_PER_WINDOW = 1000  # per page: what the generator writes, what every count must be
CLICK = Types.ROW_NAMED(["timestamp", "page"], [Types.LONG(), Types.STRING()])


def kafka_properties() -> dict[str, str]:
    """Security settings from the environment (librdkafka's names, which are Java's)."""
    user = os.environ.get("KAFKA_SASL_USERNAME")
    if not user:
        return {}
    return {"security.protocol": os.environ.get("KAFKA_SECURITY_PROTOCOL", "SASL_SSL"),
            "sasl.mechanism": os.environ.get("KAFKA_SASL_MECHANISM", "SCRAM-SHA-512"),
            "sasl.username": user, "sasl.password": os.environ.get("KAFKA_SASL_PASSWORD", "")}


class ClickEventStatistics(ProcessWindowFunction):
    def process(self, page, context, clicks):
        window = context.window()
        yield {"windowStart": window.start, "windowEnd": window.end, "page": page, "count": sum(1 for _ in clicks)}


def build(bootstrap: str, input_topic: str, output_topic: str, bounded: bool = False,
          checkpoints: str | None = None) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment()
    # Settings the deployment gives (a StreamJob's spec.checkpointing, checkpointDir, restartStrategy;
    # `streamjob run --conf`) win; these are for a plain `streamjob run`.
    conf = env.get_config()
    config = env.get_checkpoint_config()
    if not config.is_checkpointing_enabled():
        env.enable_checkpointing(1000, CheckpointingMode.EXACTLY_ONCE)  # the sink commits at checkpoints
    if checkpoints or config.get_checkpoint_storage().startswith("memory://"):
        config.set_checkpoint_storage(checkpoints or "checkpoints")
        config.set_externalized_checkpoint_retention(ExternalizedCheckpointRetention.RETAIN_ON_CANCELLATION)
    if not conf.contains_key("restart-strategy.type"):
        env.set_restart_strategy(RestartStrategies.fixed_delay_restart(10, 1000))
    props = kafka_properties()
    source = (KafkaSource.builder()
              .set_bootstrap_servers(bootstrap)
              .set_topics(input_topic)
              .set_group_id("click-event-count")  # offsets committed at checkpoints: lag monitoring only
              .set_starting_offsets(KafkaOffsetsInitializer.earliest())
              .set_value_only_deserializer(JsonRowDeserializationSchema.builder().type_info(CLICK).build())
              .set_properties(props))
    if bounded:  # what the topic holds now, then the end: every window fires (tests, batch reruns)
        source.set_bounded(KafkaOffsetsInitializer.latest())
    sink = (KafkaSink.builder()
            .set_bootstrap_servers(bootstrap)
            .set_record_serializer(KafkaRecordSerializationSchema.builder()
                                   .set_topic(output_topic)
                                   .set_key_serialization_schema(lambda r: r["page"].encode())
                                   .set_value_serialization_schema(JsonRowSerializationSchema.builder().build())
                                   .build())
            .set_delivery_guarantee(DeliveryGuarantee.EXACTLY_ONCE)
            .set_transactional_id_prefix(f"click-event-count-{output_topic}")
            .set_kafka_producer_config(props)
            .build())
    strategy = (WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(200))
                .with_timestamp_assigner(lambda click, _: click["timestamp"]))
    (env.from_source(source.build(), strategy, "ClickEvent Source").uid("click-events")
     .key_by("page")
     .window(TumblingEventTimeWindows.of(Time.milliseconds(WINDOW_MS)))
     .process(ClickEventStatistics()).name("ClickEvent Counter").uid("counter")
     .sink_to(sink).name("ClickEventStatistics Sink").uid("statistics"))
    return env


def read_counts(bootstrap: str, topic: str, timeout_s: float = 30.0) -> list[dict]:
    """Everything a read_committed consumer sees in the output topic now."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"click-count-verify-{os.getpid()}",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "enable.partition.eof": True, **kafka_properties()})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        got, at_end = [], set()
        deadline = time.monotonic() + timeout_s
        while len(at_end) < len(partitions):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic} not read to its end in {timeout_s} s")
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error() is None:
                got.append(json.loads(msg.value()))
                at_end.discard(msg.partition())
            elif msg.error().code() == KafkaError._PARTITION_EOF:
                at_end.add(msg.partition())
            else:
                raise RuntimeError(f"reading {topic}: {msg.error()}")
        return got
    finally:
        consumer.close()


def check(counts: list[dict], pages: int) -> list[str]:
    """What is wrong with the output (nothing: []): every count is EVENTS_PER_WINDOW, each window of
    each page is there once, and every window from the first to the last is there for every page."""
    problems = []
    seen: dict[tuple[str, int], int] = {}
    for c in counts:
        key = (c["page"], c["windowStart"])
        if key in seen:
            problems.append(f"window {c['windowStart']} of {c['page']} is in the output twice")
        seen[key] = c["count"]
        if c["count"] != EVENTS_PER_WINDOW:
            problems.append(f"window {c['windowStart']} of {c['page']}: {c['count']} clicks, not {EVENTS_PER_WINDOW}")
    if seen:
        starts = [s for _, s in seen]
        for start in range(min(starts), max(starts) + WINDOW_MS, WINDOW_MS):
            there = sum(1 for _, s in seen if s == start)
            if there != pages:
                problems.append(f"window {start}: {there} of {pages} pages in the output")
    return problems


def verify(bootstrap: str, topic: str, pages: int) -> int:
    counts = read_counts(bootstrap, topic)
    windows = sorted({c["windowStart"] for c in counts})
    for start in windows:
        row = {c["page"]: c["count"] for c in counts if c["windowStart"] == start}
        stamp = time.strftime("%H:%M:%S", time.gmtime(start / 1000))
        print(f"{stamp}  " + "  ".join(f"{page} {n}" for page, n in sorted(row.items())))
    problems = check(counts, pages)
    for p in problems:
        print("WRONG:", p, file=sys.stderr)
    print(f"{len(windows)} windows, {len(counts)} counts: " + ("exact" if not problems else f"{len(problems)} problems"))
    return 1 if problems else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092"))
    parser.add_argument("--input-topic", default="input")
    parser.add_argument("--output-topic", default="output")
    parser.add_argument("--bounded", action="store_true", help="read what the input holds now, then end")
    parser.add_argument("--checkpoints", default=None,
                        help="checkpoint directory or s3:// URI (default: the configured one, else ./checkpoints)")
    parser.add_argument("--verify", action="store_true", help="check the output topic instead of running the job")
    parser.add_argument("--pages", type=int, default=6, help="--verify: pages the generator writes")
    args = parser.parse_args(argv)
    if args.verify:
        return verify(args.bootstrap, args.output_topic, args.pages)
    build(args.bootstrap, args.input_topic, args.output_topic, args.bounded, args.checkpoints).execute(
        "Click Event Count")
    return 0


if __name__ == "__main__":
    sys.exit(main())
