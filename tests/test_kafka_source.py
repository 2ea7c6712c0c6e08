"""KafkaSource on the real Apache Kafka broker: what a bounded read gives, restore at exactly the
checkpointed offsets, rescaling, partitions added while running, watermarks per partition, random
task kills (exactly-once, row for row) and the errors a user sees."""

from __future__ import annotations

import json
import os
import random
import signal
import time

import pyarrow.parquet as pq
import pytest

from jobs import kafka_sum
from kafka_util import add_partitions, committed_offsets, create_topic, produce, unique_topic
from streamjob.runtime import (
    Duration,
    StreamExecutionEnvironment,
    Time,
    TumblingEventTimeWindows,
    WatermarkStrategy,
)
from streamjob.runtime.cluster.executor import JobExecutionError
from streamjob.runtime.connectors import (
    DiscardingSink,
    FileSink,
    KafkaOffsetsInitializer,
    KafkaRecordDeserializationSchema,
    KafkaSource,
    SimpleStringSchema,
)

pytestmark = pytest.mark.spark


def wait_for(predicate, timeout: float, what: str, client=None) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            seen = f"; watermarks: {client.job_manager.operator_watermarks()}" if client is not None else ""
            raise AssertionError(f"timed out after {timeout} s waiting for {what}{seen}")
        time.sleep(0.1)


def test_bounded_read_is_the_topic_contents(spark_slots, kafka_broker, tmp_path):
    """Whole records (key, value, partition, offset, timestamp, headers) of a 3-partition topic, read by
    2 subtasks up to the end offsets of the start, are exactly what was produced."""
    topic = unique_topic()
    create_topic(kafka_broker.bootstrap, topic, 3)
    sent = [(i % 3, f"key-{i}".encode(), f"value-{i}".encode() if i % 50 else None, 1_700_000_000_000 + i,
             [("h", f"{i}".encode())]) for i in range(600)]
    produce(kafka_broker.bootstrap, topic, sent)
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    source = (KafkaSource.builder().set_bootstrap_servers(kafka_broker.bootstrap).set_topics(topic)
              .set_bounded(KafkaOffsetsInitializer.latest())
              .set_deserializer(KafkaRecordDeserializationSchema.raw()).build())
    env.from_source(source, None, "kafka").sink_to(FileSink.parquet(str(tmp_path / "raw")))
    env.execute("raw")
    got = pq.read_table(str(tmp_path / "raw")).to_pylist()
    expected = []
    offsets = {0: 0, 1: 0, 2: 0}
    for partition, key, value, ts, headers in sent:
        expected.append({"topic": topic, "partition": partition, "offset": offsets[partition], "timestamp": ts,
                         "key": key, "value": value, "headers": [{"key": k, "value": v} for k, v in headers]})
        offsets[partition] += 1
    order = lambda r: (r["partition"], r["offset"])  # noqa: E731
    assert sorted(got, key=order) == sorted(expected, key=order)

    # Values only, as strings: tombstones (no value) carry no record, as in Flink.
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    source = (KafkaSource.builder().set_bootstrap_servers(kafka_broker.bootstrap).set_topics(topic)
              .set_bounded(KafkaOffsetsInitializer.latest()).set_value_only_deserializer(SimpleStringSchema()).build())
    env.from_source(source, None, "kafka").map(lambda s: {"s": s}).sink_to(FileSink.jsonl(str(tmp_path / "values")))
    env.execute("values")
    values = sorted(json.loads(line)["s"] for f in (tmp_path / "values").iterdir() for line in f.open())
    assert values == sorted(v.decode() for _, _, v, _, _ in sent if v is not None)


def stop_with_savepoint(client, savepoints, wait_rows=None, out=None) -> str:
    assert client.wait_until_running(60)
    if wait_rows is not None:  # what the phase can read is in the output (committed at checkpoints)
        wait_for(lambda: len(kafka_sum.committed_rows(out)) >= wait_rows, 60, f"{wait_rows} output rows")
    else:
        wait_for(lambda: client.job_manager.coordinator.counts["COMPLETED"] >= 1, 60, "a checkpoint")
    path = client.stop_with_savepoint(False, str(savepoints), timeout=120)
    client.get_job_execution_result(120)
    return path


def test_restore_from_a_savepoint_resumes_at_exactly_its_offsets(spark_slots, kafka_broker, tmp_path):
    """Everything read before the savepoint is in the output once, and the restored job goes on at
    the next offset of each partition: nothing skipped, nothing read twice. The group's committed
    offsets (for lag monitoring) follow the completed checkpoints."""
    bootstrap, topic, group = kafka_broker.bootstrap, unique_topic(), unique_topic("group")
    out, savepoints = str(tmp_path / "out"), tmp_path / "savepoints"
    create_topic(bootstrap, topic, 4)
    produce(bootstrap, topic, kafka_sum.records(0, 3000, 4))
    source = kafka_sum.source(bootstrap, topic, group_id=group)
    client = kafka_sum.build(source, out, str(tmp_path / "chk"), parallelism=2).execute_async("phase-1")
    savepoint = stop_with_savepoint(client, savepoints, wait_rows=3000, out=out)
    assert kafka_sum.committed_rows(out) == kafka_sum.expected_rows(3000)
    ends = {p: sum(1 for i in range(3000) if (i % kafka_sum.KEYS) % 4 == p) for p in range(4)}
    assert committed_offsets(bootstrap, group, topic, 4) == ends

    produce(bootstrap, topic, kafka_sum.records(3000, 5000, 4))
    bounded = kafka_sum.source(bootstrap, topic, bounded=KafkaOffsetsInitializer.latest(), group_id=group)
    kafka_sum.build(bounded, out, str(tmp_path / "chk"), parallelism=2, restore=savepoint).execute("phase-2")
    assert kafka_sum.committed_rows(out) == kafka_sum.expected_rows(5000)


def test_rescale_2_3_1_over_four_partitions(spark_slots, kafka_broker, tmp_path):
    """Savepoints move the partitions and their offsets to 3 subtasks (one of them gets two
    partitions... or one: the rule decides), then to 1; the output is one run's, row for row."""
    bootstrap, topic = kafka_broker.bootstrap, unique_topic()
    out, savepoints, chk = str(tmp_path / "out"), tmp_path / "savepoints", str(tmp_path / "chk")
    create_topic(bootstrap, topic, 4)
    produce(bootstrap, topic, kafka_sum.records(0, 2000, 4))
    first = stop_with_savepoint(kafka_sum.build(kafka_sum.source(bootstrap, topic), out, chk, parallelism=2)
                                .execute_async("p2"), savepoints, wait_rows=2000, out=out)
    produce(bootstrap, topic, kafka_sum.records(2000, 4000, 4))
    second = stop_with_savepoint(kafka_sum.build(kafka_sum.source(bootstrap, topic), out, chk, parallelism=3,
                                                 restore=first).execute_async("p3"), savepoints, wait_rows=4000, out=out)
    produce(bootstrap, topic, kafka_sum.records(4000, 6000, 4))
    bounded = kafka_sum.source(bootstrap, topic, bounded=KafkaOffsetsInitializer.latest())
    kafka_sum.build(bounded, out, chk, parallelism=1, restore=second).execute("p1")
    assert kafka_sum.committed_rows(out) == kafka_sum.expected_rows(6000)


def test_a_partition_added_while_running_is_read(spark_slots, kafka_broker, tmp_path):
    bootstrap, topic = kafka_broker.bootstrap, unique_topic()
    out, savepoints, chk = str(tmp_path / "out"), tmp_path / "savepoints", str(tmp_path / "chk")
    create_topic(bootstrap, topic, 2)
    # Keys go to partition k % 3: with 2 partitions only the keys of partitions 0 and 1 are produced yet.
    early = [r for r in kafka_sum.records(0, 3000, 3) if r[0] < 2]
    produce(bootstrap, topic, early)
    source = kafka_sum.source(bootstrap, topic, partition_discovery_interval_ms=300)
    client = kafka_sum.build(source, out, chk, parallelism=2).execute_async("discovery")
    assert client.wait_until_running(60)
    wait_for(lambda: len(kafka_sum.committed_rows(out)) >= len(early), 60, "the first partitions' rows")
    add_partitions(bootstrap, topic, 3)
    produce(bootstrap, topic, [r for r in kafka_sum.records(0, 3000, 3) if r[0] == 2])
    wait_for(lambda: len(kafka_sum.committed_rows(out)) >= 3000, 60, "the new partition's rows")
    client.stop_with_savepoint(False, str(savepoints), timeout=120)
    client.get_job_execution_result(120)
    assert kafka_sum.committed_rows(out) == kafka_sum.expected_rows(3000)


@pytest.mark.parametrize("backend", ["hashmap", "rocksdb"])
def test_random_task_kills_lose_and_duplicate_nothing(spark_slots, kafka_broker, tmp_path, backend):
    """Kafka -> keyed sum -> FileSink while the input is still being written; >= 10 tasks SIGKILLed at
    random moments; the committed output equals a failure-free run's, row for row."""
    rng = random.Random(int(time.time()))
    bootstrap, topic, rows, kills = kafka_broker.bootstrap, unique_topic(), 20_000, 10
    out, chk = str(tmp_path / "out"), str(tmp_path / "chk")
    create_topic(bootstrap, topic, 4)
    everything = kafka_sum.records(0, rows, 4)
    ends = {p: sum(1 for r in everything if r[0] == p) for p in range(4)}
    # Bounded at the offsets the whole input ends at (idempotent producer: offsets 0, 1, 2...), while
    # it is written a chunk per kill: the job cannot end before the last kill, however fast it runs.
    stops = KafkaOffsetsInitializer.offsets({(topic, p): n for p, n in ends.items()})
    chunks = [everything[i:i + 1000] for i in range(0, rows, 1000)]
    produce(bootstrap, topic, chunks.pop(0))
    env = kafka_sum.build(kafka_sum.source(bootstrap, topic, bounded=stops), out, chk, parallelism=3,
                          interval_ms=rng.randint(200, 500), backend=backend, restarts=100)
    client = env.execute_async("kafka-kills")
    try:
        assert client.wait_until_running(60)
        kill_while_feeding(client, bootstrap, topic, chunks, kills, rng, slots=3, timeout_s=240, pause=(0.3, 1.5))
        for chunk in chunks:
            produce(bootstrap, topic, chunk)
        result = client.get_job_execution_result(120)
    finally:
        if client.get_job_status() not in ("FINISHED", "FAILED", "CANCELED"):
            client.cancel()  # a job left running would hold the slots the next tests need
    assert result.restarts >= kills
    assert kafka_sum.committed_rows(out) == kafka_sum.expected_rows(rows)


def kill_while_feeding(client, bootstrap: str, topic: str, chunks: list, kills: int, rng: random.Random, *,
                       slots: int, timeout_s: float, pause: tuple[float, float],
                       after_a_checkpoint: bool = False) -> None:
    """SIGKILL a random task ``kills`` times while every task runs (and, with ``after_a_checkpoint``,
    once a checkpoint completed), writing the next chunk of input after each kill, so the job
    cannot end before the last one."""
    jm = client.job_manager
    killed = 0
    deadline = time.monotonic() + timeout_s
    while killed < kills and time.monotonic() < deadline:
        # The random pause counts from when every task runs again: the restart is waited out in short
        # polls, not in pauses (that would add half a pause per kill and kill no more randomly).
        while not (jm.all_running() and len(jm.task_pids()) >= slots) and time.monotonic() < deadline \
                and not client._finished.is_set():
            time.sleep(0.02)
        time.sleep(rng.uniform(*pause))
        pids = jm.task_pids()
        if not jm.all_running() or len(pids) < slots \
                or after_a_checkpoint and jm.coordinator.counts["COMPLETED"] < 1:
            continue
        try:
            os.kill(pids[rng.choice(sorted(pids))], signal.SIGKILL)
        except ProcessLookupError:
            continue
        killed += 1
        if chunks:
            produce(bootstrap, topic, chunks.pop(0))
    assert killed == kills, f"only {killed} kills in {timeout_s:.0f} s"


def windows_job(bootstrap: str, topic: str, out: str, parallelism: int, strategy: WatermarkStrategy):
    """Counts per 1 s event-time window of Kafka timestamps, unbounded: a window is in the output only
    once the watermark passed it while the job runs."""
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    env.enable_checkpointing(200)
    env.get_checkpoint_config().set_checkpoint_storage(out + "-chk")
    source = (KafkaSource.builder().set_bootstrap_servers(bootstrap).set_topics(topic)
              .set_value_only_deserializer(SimpleStringSchema()).build())
    (env.from_source(source, strategy, "kafka").map(lambda s: {"k": 0, "n": 1})
     .key_by("k").window(TumblingEventTimeWindows.of(Time.seconds(1))).sum("n")
     .sink_to(FileSink.jsonl(out)))
    return env.execute_async("windows")


def window_counts(out: str) -> list[int]:
    if not os.path.isdir(out):
        return []
    return sorted(json.loads(line)["n"] for f in os.listdir(out) if not f.startswith((".", "_"))
                  for line in open(os.path.join(out, f)))


def test_watermarks_per_partition_from_kafka_timestamps_with_idleness(spark_slots, kafka_broker, tmp_path):
    """Watermarks follow the Kafka timestamps of each partition: the slowest one holds them back, an
    empty one does too until it is idle (with_idleness), and a subtask without a partition never does."""
    bootstrap = kafka_broker.bootstrap
    base = 1_700_000_000_000
    # One partition, two subtasks: the second has no partition and must not hold the windows back.
    lonely = unique_topic()
    create_topic(bootstrap, lonely, 1)
    produce(bootstrap, lonely, [(0, None, b"x", base + i) for i in range(10)] + [(0, None, b"late", base + 5000)])
    client = windows_job(bootstrap, lonely, str(tmp_path / "lonely"), 2, WatermarkStrategy.for_monotonous_timestamps())
    wait_for(lambda: window_counts(str(tmp_path / "lonely")) == [10], 60, "the first window while running", client)
    client.cancel()

    # Two partitions, one empty, one subtask: held back without idleness, fires with it.
    topic = unique_topic()
    create_topic(bootstrap, topic, 2)
    produce(bootstrap, topic, [(0, None, b"x", base + i) for i in range(7)] + [(0, None, b"late", base + 5000)])
    held = windows_job(bootstrap, topic, str(tmp_path / "held"), 1, WatermarkStrategy.for_monotonous_timestamps())
    assert held.wait_until_running(60)
    wait_for(lambda: held.job_manager.coordinator.counts["COMPLETED"] >= 5, 60, "checkpoints")
    assert window_counts(str(tmp_path / "held")) == []  # partition 1 has no record: no watermark
    held.cancel()
    idle = windows_job(bootstrap, topic, str(tmp_path / "idle"), 1,
                       WatermarkStrategy.for_monotonous_timestamps().with_idleness(Duration.of_millis(300)))
    wait_for(lambda: window_counts(str(tmp_path / "idle")) == [7], 60, "the window, with the empty partition idle",
             idle)
    idle.cancel()


def test_an_undecodable_record_fails_the_job_naming_topic_partition_and_offset(spark_slots, kafka_broker):
    bootstrap, topic = kafka_broker.bootstrap, unique_topic()
    create_topic(bootstrap, topic, 2)
    good = kafka_sum.records(0, 40, 2)
    produce(bootstrap, topic, good + [(1, None, b'{"k": 1, "i": "not a number", "v": 1}')])
    bad_offset = sum(1 for r in good if r[0] == 1)
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.from_source(kafka_sum.source(bootstrap, topic, bounded=KafkaOffsetsInitializer.latest()), None, "kafka") \
        .key_by("k").sum("v").sink_to(DiscardingSink())
    with pytest.raises(JobExecutionError) as info:
        env.execute("undecodable")
    assert f"topic {topic} partition 1 offset {bad_offset}" in str(info.value)
    assert "not a number" in str(info.value)


def test_a_missing_topic_and_an_unreachable_bootstrap_address_are_clear_errors(spark_slots, kafka_broker):
    """Both fail the job at its start with the reason (no checkpointing here: no restarts), not a hang."""
    existing = unique_topic()
    create_topic(kafka_broker.bootstrap, existing, 1)
    for bootstrap, topic, reason in [
        (kafka_broker.bootstrap, "no-such-topic", f"topic(s) no-such-topic do not exist on {kafka_broker.bootstrap}"),
        ("127.0.0.1:1", existing, "cannot reach the Kafka brokers at 127.0.0.1:1 within 3 s"),
    ]:
        env = StreamExecutionEnvironment.get_execution_environment()
        source = (KafkaSource.builder().set_bootstrap_servers(bootstrap).set_topics(topic)
                  .set_property("streamjob.metadata.timeout.ms", 3000)  # 10 s by default
                  .set_value_only_deserializer(SimpleStringSchema()).build())
        env.from_source(source, None, "kafka").print()
        with pytest.raises(JobExecutionError) as info:
            env.execute("bad kafka")
        assert reason in str(info.value)


def with_bad_records(start: int, stop: int, partitions: int, stamp: int) -> tuple[list[tuple], list[dict]]:
    """kafka_sum's records with undecodable ones between them: (what to produce, the bad ones with the
    partition and offset each gets; one producer, in order, so offsets are 0, 1, 2... per partition)."""
    out: list[tuple] = []
    bad: list[dict] = []
    offsets = [0] * partitions
    for p, key, value in kafka_sum.records(start, stop, partitions):
        i = json.loads(value)["i"]
        extra = []
        if i % 250 == 7:  # a field of the wrong type
            extra.append((p, b"bad-" + key, b'{"k": 1, "i": "oops", "v": 1}', stamp, [("origin", b"test")]))
        if i % 400 == 11:  # not JSON at all, two in a row
            extra += [(p, None, f"not json {i}-{n}".encode(), stamp, [("n", str(n).encode())]) for n in range(2)]
        out.append((p, key, value, stamp, []))
        out.extend(extra)
        offsets[p] += 1
        for record in extra:
            bad.append({"partition": p, "offset": offsets[p], "key": record[1], "value": record[2],
                        "headers": record[4]})
            offsets[p] += 1
    return out, bad


def test_undecodable_records_go_to_the_side_output_when_asked(spark_slots, kafka_broker, tmp_path):
    """With set_deserialization_failure_output, bad messages are side output records naming topic,
    partition, offset and the error; the good ones are the stream, all of them, once."""
    from streamjob.runtime import OutputTag

    bootstrap, topic = kafka_broker.bootstrap, unique_topic()
    create_topic(bootstrap, topic, 2)
    records, bad = with_bad_records(0, 1000, 2, 1_700_000_000_000)
    produce(bootstrap, topic, records)
    tag = OutputTag("undecodable")
    source = (KafkaSource.builder().set_bootstrap_servers(bootstrap).set_topics(topic)
              .set_bounded(KafkaOffsetsInitializer.latest())
              .set_value_only_deserializer(kafka_sum.source(bootstrap, topic).deserializer.value_schema)
              .set_deserialization_failure_output(tag).build())
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    stream = env.from_source(source, WatermarkStrategy.for_monotonous_timestamps(), "kafka")
    stream.key_by("k").sum("v").sink_to(FileSink.jsonl(str(tmp_path / "good")))
    stream.get_side_output(tag).map(
        lambda r: {**r, "key": r["key"] and r["key"].decode(), "value": r["value"].decode(),
                   "headers": [[k, v.decode()] for k, v in r["headers"]]}).sink_to(FileSink.jsonl(str(tmp_path / "bad")))
    env.execute("side-output")
    assert kafka_sum.committed_rows(str(tmp_path / "good")) == kafka_sum.expected_rows(1000)
    got = sorted((json.loads(line) for f in (tmp_path / "bad").iterdir() if not f.name.startswith((".", "_"))
                  for line in f.open()), key=lambda r: (r["partition"], r["offset"]))  # committed files only
    assert [(r["topic"], r["partition"], r["offset"], r["key"], r["value"], r["headers"]) for r in got] == [
        (topic, b["partition"], b["offset"], b["key"] and b["key"].decode(), b["value"].decode(),
         [[k, v.decode()] for k, v in b["headers"]]) for b in sorted(bad, key=lambda r: (r["partition"], r["offset"]))]
    assert all(r["timestamp"] == 1_700_000_000_000 for r in got)
    assert {r["error"].split(":")[0] for r in got} == {"DeserializationError"}
    assert all(f"topic {topic} partition {r['partition']} offset {r['offset']}" in r["error"] for r in got)
    assert any("oops" in r["error"] for r in got) and any("is not JSON" in r["error"] for r in got)


def test_a_dead_letter_topic_gets_each_bad_record_once_under_task_kills(spark_slots, kafka_broker, tmp_path):
    """set_dead_letter_topic: bad messages land in the dead-letter topic (read_committed) once each,
    with their key, value and headers and the error headers, while tasks are killed; the good ones
    flow into the exactly-once FileSink, row for row."""
    from streamjob.runtime.connectors.kafka.dead_letters import HEADER_PREFIX

    rng = random.Random(int(time.time()))
    bootstrap, topic, dlq = kafka_broker.bootstrap, unique_topic(), unique_topic("dlq")
    out, chk = str(tmp_path / "out"), str(tmp_path / "chk")
    create_topic(bootstrap, topic, 2)
    create_topic(bootstrap, dlq, 1)
    rows, kills = 6000, 2
    records, bad = with_bad_records(0, rows, 2, int(time.time() * 1000))
    ends = {p: sum(1 for r in records if r[0] == p) for p in range(2)}
    source = (KafkaSource.builder().set_bootstrap_servers(bootstrap).set_topics(topic)
              .set_bounded(KafkaOffsetsInitializer.offsets({(topic, p): n for p, n in ends.items()}))
              .set_value_only_deserializer(kafka_sum.source(bootstrap, topic).deserializer.value_schema)
              .set_dead_letter_topic(dlq, transactional_id_prefix=unique_topic("dlq-tx"), uid="dead-letters").build())
    chunks = [records[i:i + len(records) // (kills + 1) + 1] for i in range(0, len(records),
                                                                               len(records) // (kills + 1) + 1)]
    produce(bootstrap, topic, chunks.pop(0))
    env = kafka_sum.build(source, out, chk, parallelism=2, interval_ms=200)
    client = env.execute_async("dead-letters")
    try:
        assert client.wait_until_running(60)
        kill_while_feeding(client, bootstrap, topic, chunks, kills, rng, slots=2, timeout_s=120, pause=(0.5, 1.5),
                           after_a_checkpoint=True)
        result = client.get_job_execution_result(120)
    finally:
        if client.get_job_status() not in ("FINISHED", "FAILED", "CANCELED"):
            client.cancel()
    assert result.restarts >= kills
    assert kafka_sum.committed_rows(out) == kafka_sum.expected_rows(rows)
    from jobs.kafka_counting import read_topic

    letters = read_topic(bootstrap, dlq)  # read_committed
    got = []
    for key, value, _partition, headers in letters:
        h = dict(headers)
        assert h[HEADER_PREFIX + "topic"] == topic.encode()
        assert h[HEADER_PREFIX + "exception.class.name"] == b"DeserializationError"
        where = f"topic {topic} partition {int(h[HEADER_PREFIX + 'partition'])} offset {int(h[HEADER_PREFIX + 'offset'])}"
        assert where in h[HEADER_PREFIX + "exception.message"].decode()
        own = [(k, v) for k, v in headers if not k.startswith(HEADER_PREFIX)]
        got.append((int(h[HEADER_PREFIX + "partition"]), int(h[HEADER_PREFIX + "offset"]), key, value, own))
    assert sorted(got) == sorted((b["partition"], b["offset"], b["key"], b["value"], b["headers"]) for b in bad)


def test_side_outputs_of_a_source_are_checked_where_the_job_is_built():
    """Only a side output the source declares can be read; raw records are never undecodable; a
    dead-letter topic is a KafkaSink on the source's failure output (its graph, no broker needed)."""
    from streamjob.runtime import OutputTag

    def builder():
        return (KafkaSource.builder().set_bootstrap_servers("127.0.0.1:1").set_topics("t")
                .set_value_only_deserializer(SimpleStringSchema()))

    env = StreamExecutionEnvironment.get_execution_environment()
    plain = env.from_source(builder().build(), WatermarkStrategy.for_monotonous_timestamps(), "plain")
    with pytest.raises(ValueError, match="source 'plain' has no such side output"):
        plain.get_side_output(OutputTag("undecodable"))
    with pytest.raises(ValueError, match="raw\\(\\) records are never undecodable"):
        builder().set_deserializer(KafkaRecordDeserializationSchema.raw()) \
            .set_deserialization_failure_output(OutputTag("x")).build()
    tag = OutputTag("undecodable")
    env.from_source(builder().set_deserialization_failure_output(tag).build(), None, "k").get_side_output(tag).print()
    source = builder().set_group_id("g").set_dead_letter_topic("t-dlq").build()
    env.from_source(source, None, "with-dlq")
    sinks = [t for t in env._transformations if t.kind == "sink"]
    dlq = sinks[-1].fn
    assert sinks[-1].name == "DeadLetters(t-dlq)" and dlq.record_serializer.topic == "t-dlq"
    assert dlq.exactly_once and dlq.transactional_id_prefix == "g-dlq-t-dlq"
    assert sinks[-1].inputs[0].kind == "side_output" and sinks[-1].inputs[0].params["tag"] == source.failure_output.tag_id


def test_the_dead_letter_sink_takes_a_uid_and_a_name():
    """set_dead_letter_topic(uid=..., name=...): the dead-letter KafkaSink is identified in checkpoints
    by that uid (as sink_to(...).uid(...)), uids stay unique in a job, and a bad uid is refused where
    the job is built (its graph: no broker needed)."""
    from streamjob.runtime.graph.job_graph import build_job_graph

    def source(**kw):
        return (KafkaSource.builder().set_bootstrap_servers("127.0.0.1:1").set_topics("t").set_group_id("g")
                .set_value_only_deserializer(SimpleStringSchema()).set_dead_letter_topic("t-dlq", **kw).build())

    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_source(source(uid="clicks-dlq", name="bad clicks"), None, "with-dlq").uid("clicks").print()
    sink = [t for t in env._transformations if t.kind == "sink" and t.uid == "clicks-dlq"]
    assert len(sink) == 1 and sink[0].name == "bad clicks"
    graph = build_job_graph(env._transformations, env._config, "dlq")
    assert [op.state_key for op in graph.operators.values() if op.name == "Sink: bad clicks"] == ["clicks-dlq"]
    default = StreamExecutionEnvironment.get_execution_environment()
    default.from_source(source(), None, "k")
    plain = [t for t in default._transformations if t.kind == "sink"][-1]
    assert plain.uid is None and plain.name == "DeadLetters(t-dlq)"
    with pytest.raises(ValueError, match="uid 'clicks-dlq' is already used"):
        env.from_source(source(uid="clicks-dlq"), None, "again")
    with pytest.raises(ValueError, match="uid must be a non-empty string"):
        source(uid="")
