"""KafkaSink on the real broker and real local Spark.

Exactly-once is checked the way the other fault-tolerance tests check it, on Kafka -> keyed state ->
Kafka (``jobs/kafka_counting.py``: the input is fed to a topic at a steady rate while the job runs):
tasks are SIGKILLed at random moments (and at the worst moment on purpose: after a checkpoint
completed, before its transactions were committed), the broker is restarted under the job, and the
output topic, read as a ``read_committed`` consumer reads it, is compared row for row with what a
failure-free run computes.
"""

from __future__ import annotations

import json
import random
import time

import pytest

from kafka_util import create_topic, unique_topic
from jobs import counting, kafka_counting
from jobs.kafka_counting import read_committed_rows, read_topic
from streamjob.runtime import StreamExecutionEnvironment
from streamjob.runtime.cluster.executor import JobExecutionError
from streamjob.runtime.connectors import (DeliveryGuarantee, JsonRowSerializationSchema, KafkaRecordSerializationSchema,
                                          KafkaSink, SimpleStringSchema)
from streamjob.runtime.connectors.kafka.protocol import TransactionClient
from streamjob.runtime.connectors.kafka.transactions import parse_transactional_id
from streamjob.runtime.task.faults import FAULT
from test_checkpointing import kill_tasks_at_random


def open_transactions(bootstrap: str, prefix: str) -> list[str]:
    with TransactionClient(bootstrap) as client:
        return [t.transactional_id for t in client.list_transactions(("Ongoing", "PrepareCommit", "PrepareAbort"))
                if parse_transactional_id(prefix, t.transactional_id) is not None]


def transaction_states(bootstrap: str, prefix: str) -> dict[str, int]:
    """How many transactions of this prefix the coordinator holds in each state (for failure messages)."""
    states = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort")
    with TransactionClient(bootstrap) as client:
        listed = [t for t in client.list_transactions(states) if parse_transactional_id(prefix, t.transactional_id)]
    out: dict[str, int] = {}
    for t in listed:
        out[t.state] = out.get(t.state, 0) + 1
    return out


def end_offsets(bootstrap: str, topic: str) -> dict:
    """Partition -> (last stable offset, high watermark): an LSO stuck below the high watermark with no
    open transaction of the coordinator's is a hanging transaction on that partition."""
    from confluent_kafka import IsolationLevel, TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    admin = AdminClient({"bootstrap.servers": bootstrap})
    parts = admin.list_topics(topic, timeout=10).topics[topic].partitions

    def latest(isolation):
        futures = admin.list_offsets({TopicPartition(topic, p): OffsetSpec.latest() for p in parts},
                                     isolation_level=isolation, request_timeout=10)
        return {tp.partition: f.result().offset for tp, f in futures.items()}

    lso, hw = latest(IsolationLevel.READ_COMMITTED), latest(IsolationLevel.READ_UNCOMMITTED)
    return {p: (lso[p], hw[p]) for p in sorted(parts)}


def kafka_job(bootstrap: str, tmp_path, name: str, rows: int | None, rate: float, **kw):
    """A Kafka -> count -> KafkaSink job, its input being fed (``rows=None``: until ``Feed.stop()``, and the
    job's input is unbounded): (env, output topic, prefix, feed)."""
    source, topic, prefix = unique_topic("in"), unique_topic("out"), unique_topic(name)
    create_topic(bootstrap, source, kafka_counting.PARTITIONS)
    create_topic(bootstrap, topic)
    env = kafka_counting.build(bootstrap, topic, prefix, str(tmp_path / "chk"), rows, rate, input_topic=source, **kw)
    return env, topic, prefix, kafka_counting.Feed(bootstrap, source, rate, rows)


def stop_when_all_committed(client, bootstrap: str, topic: str, rows: int, savepoints: str) -> None:
    """Wait until ``rows`` rows are visible to read_committed readers, then stop the (unbounded) job
    with a savepoint: its last transactions commit, nothing stays open."""
    deadline = time.monotonic() + 90
    while len(read_topic(bootstrap, topic)) < rows and time.monotonic() < deadline:
        time.sleep(0.5)
    client.stop_with_savepoint(False, savepoints, timeout=120)
    client.get_job_execution_result(120)


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
        raise AssertionError(f"{len(got)} rows committed, {len(expected)} expected ({written} written in all); "
                             f"transactions of {prefix}: {transaction_states(bootstrap, prefix)}; "
                             f"{topic} offsets: {end_offsets(bootstrap, topic)}")
    assert got == expected


# A restart of the whole barrier stage takes 4-5 s on a 2-core machine (as for the FileSink jobs of
# test_checkpointing.py), more under load, so 10 kills in one job take a minute or more: each variant
# kills 4 tasks, 12 random kills per run, besides the kills the fault hook places at the worst
# moments below. The input is written while the job runs until the kills are done, so the job
# cannot finish before them.
KILLS = 4


@pytest.mark.parametrize("backend, unaligned", [("hashmap", False), ("rocksdb", False), ("hashmap", True)],
                         ids=["hashmap", "rocksdb", "unaligned"])
def test_exactly_once_under_random_task_kills(spark_slots, kafka_broker, tmp_path, backend, unaligned):
    """Kafka -> keyed state -> KafkaSink while the input is being written; tasks SIGKILLed at random
    moments; the output read with read_committed equals a failure-free run's, row for row."""
    rng = random.Random(int(time.time()))
    env, topic, prefix, feed = kafka_job(kafka_broker.bootstrap, tmp_path, "eo", None, 1000,
                                         interval_ms=rng.randint(200, 400), backend=backend, unaligned=unaligned)
    client = env.execute_async("kafka-eo")
    killed = kill_tasks_at_random(client, KILLS, rng)
    rows = feed.stop()
    stop_when_all_committed(client, kafka_broker.bootstrap, topic, rows, str(tmp_path / "savepoints"))
    assert len(killed) >= KILLS
    assert sum(c["status"] == "COMPLETED" for c in client.get_job_execution_result(1).checkpoints) > 0
    assert_exactly_once(kafka_broker.bootstrap, topic, prefix, rows)


@pytest.mark.parametrize("marker", ["marker", "marker-{subtask}"], ids=["one-subtask", "every-subtask"])
def test_a_kill_between_checkpoint_completion_and_commit_loses_and_duplicates_nothing(spark_slots, kafka_broker,
                                                                                      tmp_path, marker):
    """Flink's hard case: the checkpoint is complete (its _metadata durable), the sink has not committed
    its transactions yet, and the task dies. The restored job must commit exactly those transactions
    by resuming them (transactional id, producer id, epoch): nothing lost, nothing twice."""
    rows = 6000
    fault = str(tmp_path / marker)
    env, topic, prefix, _ = kafka_job(kafka_broker.bootstrap, tmp_path, "hard", rows, 1500,
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


def test_a_kill_between_the_final_checkpoint_and_its_commit_loses_nothing(spark_slots, kafka_broker, tmp_path):
    """The input ended, the final checkpoint completed, and a task died before committing it: the
    restored attempt reaches the end again and takes a final checkpoint of its own (it once waited
    for ever, the coordinator believing the final checkpoint done)."""
    rows = 3000
    env, topic, prefix, _ = kafka_job(kafka_broker.bootstrap, tmp_path, "final", rows, 3000,
                                      conf={FAULT: f"sink-before-final-commit:{tmp_path / 'marker'}"})
    result = env.execute("kafka-final-commit")
    assert result.restarts >= 1 and json.loads((tmp_path / "marker").read_text())
    assert_exactly_once(kafka_broker.bootstrap, topic, prefix, rows)


def test_a_kill_right_after_the_commit_commits_again_idempotently(spark_slots, kafka_broker, tmp_path):
    """The task dies just after committing: the restored checkpoint still lists those transactions,
    and committing them again must neither fail nor add anything."""
    rows = 6000
    env, topic, prefix, _ = kafka_job(kafka_broker.bootstrap, tmp_path, "again", rows, 1500,
                                      conf={FAULT: f"sink-after-commit:{tmp_path / 'marker'}"})
    result = env.execute("kafka-commit-again")
    assert result.restarts >= 1 and json.loads((tmp_path / "marker").read_text())
    assert_exactly_once(kafka_broker.bootstrap, topic, prefix, rows)


@pytest.mark.parametrize("hard", [False, True], ids=["stop-start", "kill-start"])
def test_the_broker_restarted_mid_job_recovers_exactly_once(spark_slots, kafka_broker_private, tmp_path, hard):
    broker = kafka_broker_private
    rows = 12_000
    env, topic, prefix, feeder = kafka_job(broker.bootstrap, tmp_path, "restart", rows, 1500)
    client = env.execute_async("kafka-broker-restart")
    assert client.wait_until_running(60)
    jm = client.job_manager
    deadline = time.monotonic() + 120  # a loaded machine takes its time
    while jm.coordinator.counts["COMPLETED"] < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert jm.coordinator.counts["COMPLETED"] >= 3
    broker.restart(hard=hard)
    client.get_job_execution_result(120)
    feeder.join(30)
    # The restarted broker may drop commit markers: a single-node KRaft broker restarted (after a kill,
    # and after a clean stop too) serves for a few seconds from its old incarnation's registration;
    # when the controller then fences that incarnation every partition is leaderless for a moment, and
    # the transaction coordinator drops the markers it was sending to them ("likely deleted", the rule
    # of KAFKA-5202) and records CompleteCommit. The sink finds such a hanging transaction of its own
    # (the coordinator completed it, the partition holds it open) and writes the missing marker
    # (hanging.py): the output must be exact either way. Whether it happened this time is printed.
    dropped = f"Couldn't find leader endpoint for partitions Set({topic}-" in broker.log_file.read_text(errors="replace")
    print(f"broker dropped commit markers of {topic}: {dropped}")
    assert_exactly_once(broker.bootstrap, topic, prefix, rows)


def test_at_least_once_under_task_kills_loses_nothing(spark_slots, kafka_broker, tmp_path):
    rng = random.Random(int(time.time()))
    env, topic, _, feed = kafka_job(kafka_broker.bootstrap, tmp_path, "alo", None, 1000,
                                    guarantee=DeliveryGuarantee.AT_LEAST_ONCE)
    client = env.execute_async("kafka-alo")
    killed = kill_tasks_at_random(client, 2, rng)
    rows = feed.stop()

    def seen() -> set[int]:
        return {json.loads(v)["i"] for _k, v, _p, _h in read_topic(kafka_broker.bootstrap, topic)}

    deadline = time.monotonic() + 90
    while len(seen()) < rows and time.monotonic() < deadline:
        time.sleep(0.5)
    client.cancel()
    with pytest.raises(JobExecutionError, match="cancel"):
        client.get_job_execution_result(60)
    assert len(killed) >= 2
    assert seen() == set(range(rows))  # every row at least once (rows after a checkpoint may repeat)


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


def test_rescale_3_2_1_aborts_what_old_subtasks_left_open(spark_slots, kafka_broker, tmp_path):
    """At parallelism 3 the job is cancelled abruptly (its open transactions stay open), restored from
    its retained checkpoint at parallelism 2, stopped with a savepoint and restored at parallelism 1.
    Old subtask 2's open transaction is aborted by new subtask 0 (2 % 2), the checkpoint's committables
    are committed by whichever subtask got them, and the output is one run's, row for row."""
    bootstrap = kafka_broker.bootstrap
    source, topic, prefix = unique_topic("in"), unique_topic("out"), unique_topic("rescale")
    create_topic(bootstrap, source, kafka_counting.PARTITIONS)
    create_topic(bootstrap, topic)
    feed = kafka_counting.Feed(bootstrap, source, 800)
    chk = tmp_path / "chk"

    def job(parallelism: int, restore: str | None = None, rows: int | None = None):
        conf = {"execution.state-recovery.path": restore} if restore else None
        return kafka_counting.build(bootstrap, topic, prefix, str(chk), rows, 800, parallelism=parallelism,
                                    conf=conf, input_topic=source)

    def old_subtask_2() -> list[str]:
        return [t for t in open_transactions(bootstrap, prefix) if parse_transactional_id(prefix, t)[0] == 2]

    def wait_for(predicate, what: str) -> None:
        deadline = time.monotonic() + 60
        while not predicate():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.1)

    client = job(3).execute_async("p3")
    assert client.wait_until_running(60)
    wait_for(lambda: client.job_manager.coordinator.counts["COMPLETED"] >= 2, "2 checkpoints at parallelism 3")
    wait_for(old_subtask_2, "an open transaction of subtask 2")
    client.cancel()
    with pytest.raises(JobExecutionError, match="cancel"):
        client.get_job_execution_result(60)
    job_dir = chk / client.job_id
    latest = max((d for d in job_dir.glob("chk-*") if (d / "_metadata").exists()), key=lambda d: int(d.name[4:]))

    client = job(2, restore=str(latest)).execute_async("p2")
    assert client.wait_until_running(60)
    wait_for(lambda: client.job_manager.coordinator.counts["COMPLETED"] >= 2, "2 checkpoints at parallelism 2")
    assert old_subtask_2() == []  # aborted at the start of parallelism 2, by subtask 0
    savepoint = client.stop_with_savepoint(False, str(tmp_path / "savepoints"), timeout=120)
    client.get_job_execution_result(120)

    rows = feed.stop()
    job(1, restore=savepoint, rows=rows).execute("p1")
    assert_exactly_once(bootstrap, topic, prefix, rows)


@pytest.mark.parametrize("guarantee", [DeliveryGuarantee.NONE, DeliveryGuarantee.EXACTLY_ONCE],
                         ids=["none", "exactly-once"])
@pytest.mark.parametrize("problem", ["unreachable", "missing-topic"])
def test_a_wrong_address_or_a_missing_topic_fails_the_job_within_seconds(spark_slots, kafka_broker, tmp_path,
                                                                         guarantee, problem):
    import socket

    from streamjob.runtime import RestartStrategies

    if problem == "unreachable":
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            bootstrap = f"127.0.0.1:{s.getsockname()[1]}"  # nothing listens there
        topic, expected = "t", f"no Kafka broker of {bootstrap} answered"
    else:
        bootstrap, topic = kafka_broker.bootstrap, unique_topic("missing")
        expected = f"topic '{topic}' is not available on {bootstrap}"
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.enable_checkpointing(500)
    env.get_checkpoint_config().set_checkpoint_storage(str(tmp_path / "chk"))
    env.set_restart_strategy(RestartStrategies.no_restart())
    builder = (KafkaSink.builder().set_bootstrap_servers(bootstrap)
               .set_record_serializer(KafkaRecordSerializationSchema.builder().set_topic(topic)
                                      .set_value_serialization_schema(SimpleStringSchema()).build())
               .set_delivery_guarantee(guarantee).set_transactional_id_prefix(unique_topic("err"))
               .set_property("allow.auto.create.topics", False))  # else the broker creates a missing topic
    env.from_collection(["a"]).sink_to(builder.build())
    started = time.monotonic()
    with pytest.raises(JobExecutionError, match=expected):
        env.execute("kafka-errors")
    assert time.monotonic() - started < 40  # the check waits 10 s for an answer; the rest is the job's start


@pytest.mark.parametrize("case", ["no-checkpointing", "timeout-below-interval"])
def test_exactly_once_refuses_settings_that_could_not_commit(spark_slots, kafka_broker, tmp_path, case):
    from streamjob.runtime import RestartStrategies

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.set_restart_strategy(RestartStrategies.no_restart())
    builder = (KafkaSink.builder().set_bootstrap_servers(kafka_broker.bootstrap)
               .set_record_serializer(KafkaRecordSerializationSchema.builder().set_topic(unique_topic("never"))
                                      .set_value_serialization_schema(SimpleStringSchema()).build())
               .set_delivery_guarantee(DeliveryGuarantee.EXACTLY_ONCE).set_transactional_id_prefix(unique_topic("x")))
    if case == "no-checkpointing":
        expected = "enable checkpointing"
    else:
        env.enable_checkpointing(2000)
        env.get_checkpoint_config().set_checkpoint_storage(str(tmp_path / "chk"))
        builder.set_property("transaction.timeout.ms", 1000)
        expected = r"transaction.timeout.ms \(1000 ms\) must be well above the checkpoint interval \(2000 ms\)"
    env.from_collection(["a"]).sink_to(builder.build())
    with pytest.raises(JobExecutionError, match=expected):
        env.execute("kafka-refused")


@pytest.mark.parametrize("guarantee", [DeliveryGuarantee.NONE, DeliveryGuarantee.EXACTLY_ONCE],
                         ids=["none", "exactly-once"])
def test_a_record_the_broker_refuses_fails_the_job_naming_topic_and_partition(spark_slots, kafka_broker, tmp_path,
                                                                              guarantee):
    from streamjob.runtime import RestartStrategies

    topic = unique_topic("big")
    create_topic(kafka_broker.bootstrap, topic)
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.enable_checkpointing(500)
    env.get_checkpoint_config().set_checkpoint_storage(str(tmp_path / "chk"))
    env.set_restart_strategy(RestartStrategies.no_restart())
    sink = (KafkaSink.builder().set_bootstrap_servers(kafka_broker.bootstrap)
            .set_record_serializer(KafkaRecordSerializationSchema.builder().set_topic(topic)
                                   .set_value_serialization_schema(SimpleStringSchema()).build())
            .set_delivery_guarantee(guarantee).set_transactional_id_prefix(unique_topic("big"))
            .set_property("message.max.bytes", 5_000_000)  # the client lets it go; the broker (1 MB) refuses
            .build())
    env.from_collection(["small", "x" * 2_000_000]).sink_to(sink)
    with pytest.raises(JobExecutionError, match=rf"could not write records: topic {topic} partition 0: .*too large"):
        env.execute("kafka-refused-record")
    if guarantee is DeliveryGuarantee.EXACTLY_ONCE:  # the transaction that held "small" never committed
        assert read_topic(kafka_broker.bootstrap, topic) == []


# Short client timeouts, so that a broker that is gone shows within seconds: librdkafka gives up on a
# record after message.timeout.ms (5 min by default). The input comes from DataGen, so records reach
# the sink while the broker is away (a Kafka source would have nothing new to read: it waits, as
# Flink's does, and the broker restart test above covers it).
# max.block.ms: the EXACTLY_ONCE writer's next producer gives up initializing after 5 s (30 s by default).
QUICK = {"message.timeout.ms": 3000, "max.block.ms": 5000}


def datagen_job(bootstrap: str, tmp_path, name: str, rows: int | None, rate: float, restarts: int, delay_ms: int,
                guarantee: DeliveryGuarantee = DeliveryGuarantee.EXACTLY_ONCE):
    topic, prefix = unique_topic("out"), unique_topic(name)
    create_topic(bootstrap, topic)
    env = kafka_counting.build(bootstrap, topic, prefix, str(tmp_path / "chk"), rows, rate, restarts=restarts,
                               restart_delay_ms=delay_ms, sink_props=QUICK, guarantee=guarantee)
    return env, topic, prefix


def wait_checkpoints(client, n: int) -> None:
    assert client.wait_until_running(60)
    jm = client.job_manager
    deadline = time.monotonic() + 60
    while jm.coordinator.counts["COMPLETED"] < n and time.monotonic() < deadline:
        time.sleep(0.05)
    assert jm.coordinator.counts["COMPLETED"] >= n


def test_the_broker_gone_longer_than_the_restart_strategy_tolerates_fails_the_job(spark_slots, kafka_broker_private,
                                                                                  tmp_path):
    """The broker stops for good: the job fails (a record not delivered within message.timeout.ms),
    restarts once (all fixed_delay_restart(1, ...) allows), fails again at the sink's start, and the
    error names the bootstrap address. (AT_LEAST_ONCE: the EXACTLY_ONCE writer's part, its next
    producer giving up after max.block.ms, is the next test's.)"""
    broker = kafka_broker_private
    env, _topic, _prefix = datagen_job(broker.bootstrap, tmp_path, "gone", None, 500, restarts=1, delay_ms=100,
                                       guarantee=DeliveryGuarantee.AT_LEAST_ONCE)
    client = env.execute_async("kafka-broker-gone")
    try:
        wait_checkpoints(client, 2)
        broker.stop()
        with pytest.raises(JobExecutionError) as info:
            client.get_job_execution_result(120)
    finally:
        if client.get_job_status() not in ("FINISHED", "FAILED", "CANCELED"):
            client.cancel()
    assert f"no Kafka broker of {broker.bootstrap} answered" in str(info.value)
    assert client.job_manager.restarts == 1


def test_the_broker_back_within_the_restart_strategy_resumes_the_job_exactly_once(spark_slots, kafka_broker_private,
                                                                                   tmp_path):
    """The broker is gone for seconds: the job fails (and may fail again while it is away), within what
    fixed_delay_restart(30, 1 s) allows; once the broker is back the job goes on from its last
    checkpoint, and the output is exact, row for row."""
    broker = kafka_broker_private
    rows = 8000
    env, topic, prefix = datagen_job(broker.bootstrap, tmp_path, "back", rows, 1000, restarts=30, delay_ms=1000)
    client = env.execute_async("kafka-broker-back")
    try:
        wait_checkpoints(client, 2)
        jm = client.job_manager
        broker.stop()
        # The job notices at the next barrier's flush (message.timeout.ms), or when the sink's next
        # producer gives up initializing (max.block.ms), whichever is first.
        deadline = time.monotonic() + 150
        while not jm.failure_count and time.monotonic() < deadline:  # the job noticed
            time.sleep(0.1)
        assert jm.failure_count, "the job did not notice the broker is gone"
        time.sleep(2)
        broker.start()
        result = client.get_job_execution_result(180)
    finally:
        if client.get_job_status() not in ("FINISHED", "FAILED", "CANCELED"):
            client.cancel()
    assert result.restarts >= 1
    assert_exactly_once(broker.bootstrap, topic, prefix, rows)
