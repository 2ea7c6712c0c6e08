"""KafkaSink on the real broker and real local Spark.

Exactly-once is checked the way the other fault-tolerance tests check it: tasks are SIGKILLed at
random moments (and at the worst moment on purpose: after a checkpoint completed, before its
transactions were committed), and the output topic, read as a ``read_committed`` consumer reads it,
is compared row for row with what a failure-free run computes (``jobs/counting.py``).
"""

from __future__ import annotations

import json
import random
import time

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from conftest import unique_topic
from jobs import counting, kafka_counting
from jobs.kafka_counting import read_committed_rows, read_topic
from streamjob.runtime import StreamExecutionEnvironment
from streamjob.runtime.connectors import (DeliveryGuarantee, JsonRowSerializationSchema, KafkaRecordSerializationSchema,
                                          KafkaSink, SimpleStringSchema)
from streamjob.runtime.connectors.kafka.protocol import TransactionClient
from streamjob.runtime.connectors.kafka.transactions import parse_transactional_id
from streamjob.runtime.task.faults import FAULT
from test_checkpointing import kill_tasks_at_random


def create_topic(bootstrap: str, topic: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the result is in
    admin.create_topics([NewTopic(topic, partitions)])[topic].result(30)


def open_transactions(bootstrap: str, prefix: str) -> list[str]:
    with TransactionClient(bootstrap) as client:
        return [t.transactional_id for t in client.list_transactions(("Ongoing", "PrepareCommit", "PrepareAbort"))
                if parse_transactional_id(prefix, t.transactional_id) is not None]


def assert_exactly_once(bootstrap: str, topic: str, prefix: str, rows: int) -> None:
    # A commit returns once the coordinator has logged it (PrepareCommit); read_committed readers see
    # the records once it has also written the commit markers. Wait for that, and for nothing of this
    # sink to be left open: an open transaction would hold back read_committed readers.
    deadline = time.monotonic() + 30
    while open_transactions(bootstrap, prefix) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert open_transactions(bootstrap, prefix) == []
    got = read_committed_rows(bootstrap, topic)
    expected = counting.expected_rows(rows)
    if len(got) != len(expected):
        written = len(read_topic(bootstrap, topic, 1, "read_uncommitted"))
        raise AssertionError(f"{len(got)} rows committed, {len(expected)} expected ({written} written in all)")
    assert got == expected


# A restart of the whole barrier stage takes 4-5 s on a 2-core machine (as for the FileSink jobs of
# test_checkpointing.py), so 10 kills in one job take a minute: each variant kills 4 tasks, 12 random
# kills per run, besides the kills the fault hook places at the worst moments below.
KILLS = 4


@pytest.mark.parametrize("backend, unaligned", [("hashmap", False), ("rocksdb", False), ("hashmap", True)],
                         ids=["hashmap", "rocksdb", "unaligned"])
def test_exactly_once_under_random_task_kills(spark_slots, kafka_broker, tmp_path, backend, unaligned):
    rng = random.Random(int(time.time()))
    topic, prefix = unique_topic("out"), unique_topic("eo")
    create_topic(kafka_broker.bootstrap, topic)
    rows = 20_000
    env = kafka_counting.build(kafka_broker.bootstrap, topic, prefix, str(tmp_path / "chk"), rows, rate=2000,
                               interval_ms=rng.randint(200, 400), backend=backend, unaligned=unaligned)
    client = env.execute_async("kafka-eo")
    killed = kill_tasks_at_random(client, KILLS, rng)
    result = client.get_job_execution_result(300)
    assert len(killed) >= KILLS and result.restarts >= KILLS, f"the job finished before the test could kill {KILLS} tasks"
    assert sum(c["status"] == "COMPLETED" for c in result.checkpoints) > 0
    assert_exactly_once(kafka_broker.bootstrap, topic, prefix, rows)


@pytest.mark.parametrize("marker", ["marker", "marker-{subtask}"], ids=["one-subtask", "every-subtask"])
def test_a_kill_between_checkpoint_completion_and_commit_loses_and_duplicates_nothing(spark_slots, kafka_broker,
                                                                                      tmp_path, marker):
    """Flink's hard case: the checkpoint is complete (its _metadata durable), the sink has not committed
    its transactions yet, and the task dies. The restored job must commit exactly those transactions
    by resuming them (transactional id, producer id, epoch): nothing lost, nothing twice."""
    topic, prefix = unique_topic("out"), unique_topic("hard")
    create_topic(kafka_broker.bootstrap, topic)
    rows = 6000
    fault = str(tmp_path / marker)
    env = kafka_counting.build(kafka_broker.bootstrap, topic, prefix, str(tmp_path / "chk"), rows, rate=1500,
                               conf={FAULT: f"sink-before-commit:{fault}"})
    result = env.execute("kafka-hard-case")
    assert result.restarts >= 1
    markers = sorted(tmp_path.glob("marker*"))
    assert markers and (len(markers) == 3 if "{subtask}" in marker else len(markers) == 1)
    stranded = [c for m in markers for c in json.loads(m.read_text())]
    assert stranded, "the task died without a prepared transaction at stake"
    assert_exactly_once(kafka_broker.bootstrap, topic, prefix, rows)
    # Each stranded transaction was committed after its task died, with the identity it was prepared
    # under: the restored job resumed it (version 1 rules: committing keeps the epoch).
    with TransactionClient(kafka_broker.bootstrap) as client:
        now = client.describe_transactions([c["transactional_id"] for c in stranded])
    for c in stranded:
        d = now[c["transactional_id"]]
        assert (d.state, d.producer_id, d.producer_epoch) == ("CompleteCommit", c["producer_id"], c["epoch"])


def test_a_kill_right_after_the_commit_commits_again_idempotently(spark_slots, kafka_broker, tmp_path):
    """The task dies just after committing: the restored checkpoint still lists those transactions,
    and committing them again must neither fail nor add anything."""
    topic, prefix = unique_topic("out"), unique_topic("again")
    create_topic(kafka_broker.bootstrap, topic)
    rows = 6000
    env = kafka_counting.build(kafka_broker.bootstrap, topic, prefix, str(tmp_path / "chk"), rows, rate=1500,
                               conf={FAULT: f"sink-after-commit:{tmp_path / 'marker'}"})
    result = env.execute("kafka-commit-again")
    assert result.restarts >= 1 and json.loads((tmp_path / "marker").read_text())
    assert_exactly_once(kafka_broker.bootstrap, topic, prefix, rows)


@pytest.mark.parametrize("hard", [False, True], ids=["stop-start", "kill-start"])
def test_the_broker_restarted_mid_job_recovers_exactly_once(spark_slots, kafka_broker_private, tmp_path, hard):
    broker = kafka_broker_private
    topic, prefix = unique_topic("out"), unique_topic("restart")
    create_topic(broker.bootstrap, topic)
    rows = 12_000
    env = kafka_counting.build(broker.bootstrap, topic, prefix, str(tmp_path / "chk"), rows, rate=1500)
    client = env.execute_async("kafka-broker-restart")
    assert client.wait_until_running(60)
    jm = client.job_manager
    deadline = time.monotonic() + 30
    while jm.coordinator.counts["COMPLETED"] < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert jm.coordinator.counts["COMPLETED"] >= 3
    broker.restart(hard=hard)
    client.get_job_execution_result(120)
    assert_exactly_once(broker.bootstrap, topic, prefix, rows)


def test_at_least_once_under_task_kills_loses_nothing(spark_slots, kafka_broker, tmp_path):
    rng = random.Random(int(time.time()))
    topic = unique_topic("alo")
    create_topic(kafka_broker.bootstrap, topic)
    rows = 12_000
    env = kafka_counting.build(kafka_broker.bootstrap, topic, None, str(tmp_path / "chk"), rows, rate=1500,
                               guarantee=DeliveryGuarantee.AT_LEAST_ONCE)
    client = env.execute_async("kafka-alo")
    killed = kill_tasks_at_random(client, 2, rng)
    result = client.get_job_execution_result(120)
    assert len(killed) >= 2 and result.restarts >= 2
    got = [json.loads(v)["i"] for _k, v, _p, _h in read_topic(kafka_broker.bootstrap, topic)]
    assert set(got) == set(range(rows))  # every row at least once (records after a checkpoint may repeat)


class ByIndex:
    """A FlinkKafkaPartitioner: record i goes to partition i % n."""

    def partition(self, record, key, value, target_topic, partitions):
        return partitions[record["i"] % len(partitions)]


@pytest.mark.parametrize("guarantee", [DeliveryGuarantee.NONE, DeliveryGuarantee.AT_LEAST_ONCE],
                         ids=["none", "at-least-once"])
def test_records_go_out_with_topic_key_partition_and_headers(spark_slots, kafka_broker, guarantee):
    even, odd = unique_topic("even"), unique_topic("odd")
    create_topic(kafka_broker.bootstrap, even, 3)
    create_topic(kafka_broker.bootstrap, odd, 3)
    rows = [{"i": i, "word": f"w{i % 7}"} for i in range(300)]
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    if guarantee is DeliveryGuarantee.AT_LEAST_ONCE:
        env.enable_checkpointing(200)
    sink = (KafkaSink.builder()
            .set_bootstrap_servers(kafka_broker.bootstrap)
            .set_record_serializer(KafkaRecordSerializationSchema.builder()
                                   .set_topic_selector(lambda r: even if r["i"] % 2 == 0 else odd)
                                   .set_key_serialization_schema(lambda r: r["word"].encode())
                                   .set_value_serialization_schema(JsonRowSerializationSchema.builder().build())
                                   .set_partitioner(ByIndex())
                                   .set_header_provider(lambda r: {"i": str(r["i"]), "src": b"test"})
                                   .build())
            .set_delivery_guarantee(guarantee)
            .build())
    env.from_collection(rows).sink_to(sink)
    env.execute("kafka-plain")
    seen = []
    for topic in (even, odd):
        for key, value, partition, headers in read_topic(kafka_broker.bootstrap, topic, 3, "read_uncommitted"):
            r = json.loads(value)
            assert topic == (even if r["i"] % 2 == 0 else odd)
            assert key == r["word"].encode() and partition == r["i"] % 3
            assert dict(headers) == {"i": str(r["i"]).encode(), "src": b"test"}
            seen.append(r)
    assert sorted(seen, key=lambda r: r["i"]) == rows


def test_simple_string_values_and_a_fixed_topic(spark_slots, kafka_broker):
    topic = unique_topic("str")
    create_topic(kafka_broker.bootstrap, topic)
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    sink = (KafkaSink.builder().set_bootstrap_servers(kafka_broker.bootstrap)
            .set_record_serializer(KafkaRecordSerializationSchema.builder().set_topic(topic)
                                   .set_value_serialization_schema(SimpleStringSchema()).build())
            .build())  # DeliveryGuarantee.NONE by default, as in Flink
    env.from_collection(["a", "b", "ü"]).sink_to(sink)
    env.execute("kafka-strings")
    assert [v.decode() for _k, v, _p, _h in read_topic(kafka_broker.bootstrap, topic)] == ["a", "b", "ü"]
