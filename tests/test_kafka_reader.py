"""KafkaSource's reader driven directly (no Spark) against the real broker: starting and stopping
offsets, topic patterns, which subtask owns which partition (Flink's rule), restore at another
parallelism from union state, decoding and its errors."""

from __future__ import annotations

import json
import time

import pyarrow as pa
import pytest

from kafka_util import committed_offsets, create_topic, produce, unique_topic
from streamjob.runtime.api.functions import RuntimeContext
from streamjob.runtime.api.types import Types
from streamjob.runtime.batch import Stamped
from streamjob.runtime.connectors import (
    END,
    DeserializationError,
    JsonRowDeserializationSchema,
    KafkaOffsetResetStrategy,
    KafkaOffsetsInitializer,
    KafkaSource,
    KafkaSourceError,
    KafkaTopicPartition,
    SimpleStringSchema,
)
from streamjob.runtime.connectors.kafka.offsets import java_string_hash, split_owner


def ctx(index=0, parallelism=1):
    return RuntimeContext("kafka", index, parallelism, 128, job_parameters={"execution.batch-size": 64})


def builder(bootstrap, *topics):
    return (KafkaSource.builder().set_bootstrap_servers(bootstrap).set_topics(*topics)
            .set_value_only_deserializer(SimpleStringSchema()))


def drain(reader, idle_for=None):
    """Records (with their split and timestamp) until END (a bounded reader), or until nothing came
    for ``idle_for`` s."""
    out = []
    quiet_since = time.monotonic()
    deadline = time.monotonic() + 30
    while True:
        batch = reader.poll()
        if batch is END:
            return out
        if batch is None:
            assert time.monotonic() < deadline, "no END in 30 s"
            if idle_for is not None and time.monotonic() - quiet_since > idle_for:
                return out
            time.sleep(0.01)
            continue
        quiet_since = time.monotonic()
        assert isinstance(batch, Stamped)
        rows = batch.batch.to_pylist() if isinstance(batch.batch, pa.RecordBatch) else batch.batch
        out += [(reader.current_split(), r, int(t)) for r, t in zip(rows, batch.ts)]


def test_split_owner_is_flinks_rule():
    # Java: "hello".hashCode() == 99162322, "".hashCode() == 0, non-ASCII over UTF-16 code units.
    assert java_string_hash("hello") == 99162322 and java_string_hash("") == 0
    assert java_string_hash("clicks-é😀") == -758650070  # as java prints it
    owners = [split_owner("clicks", p, 3) for p in range(6)]
    assert sorted(owners[:3]) == [0, 1, 2] and owners[:3] == owners[3:]  # round-robin from a topic's start


def test_starting_offsets_earliest_latest_timestamp_specific_committed(kafka_broker):
    b = kafka_broker.bootstrap
    topic, group = unique_topic(), unique_topic("g")
    create_topic(b, topic, 2)
    produce(b, topic, [(i % 2, None, f"v{i}".encode(), 1_000_000 + i) for i in range(20)])

    def values(init, **kw):
        bld = builder(b, topic).set_starting_offsets(init).set_bounded(KafkaOffsetsInitializer.latest())
        if kw.get("group"):
            bld.set_group_id(kw["group"])
        reader = bld.build().create_reader(ctx())
        try:
            return sorted(int(r[1][1:]) for r in drain(reader))
        finally:
            reader.close()

    assert values(KafkaOffsetsInitializer.earliest()) == list(range(20))
    assert values(KafkaOffsetsInitializer.latest()) == []
    assert values(KafkaOffsetsInitializer.timestamp(1_000_014)) == list(range(14, 20))
    specific = KafkaOffsetsInitializer.offsets({KafkaTopicPartition(topic, 0): 8, (topic, 1): 9})
    assert values(specific) == [16, 18, 19]  # partition 0 from its 9th record (i=16), partition 1 its 10th (19)
    with pytest.raises(KafkaSourceError, match=rf"topic {topic} partition \d: group {group} has no committed offset"):
        values(KafkaOffsetsInitializer.committed_offsets(), group=group)
    assert values(KafkaOffsetsInitializer.committed_offsets(KafkaOffsetResetStrategy.LATEST), group=group) == []

    # Offsets committed back (at a completed checkpoint) are where committed_offsets() starts.
    reader = builder(b, topic).set_group_id(group).build().create_reader(ctx())
    drain(reader, idle_for=2)
    splits = reader.snapshot_state()
    assert sorted(splits) == [[topic, 0, 10, None], [topic, 1, 10, None]]
    reader.notify_checkpoint_complete(7, [[topic, 0, 4, None], [topic, 1, 6, None]])
    reader.close()
    assert committed_offsets(b, group, topic, 2) == {0: 4, 1: 6}
    assert values(KafkaOffsetsInitializer.committed_offsets(), group=group) == [8, 10, 12, 13, 14, 15, 16, 17, 18, 19]


def test_topic_pattern_and_timestamps_per_partition(kafka_broker):
    b = kafka_broker.bootstrap
    prefix = unique_topic("pat")
    for suffix in ("a", "b"):
        create_topic(b, f"{prefix}-{suffix}", 1)
        produce(b, f"{prefix}-{suffix}", [(0, None, f"{suffix}{i}".encode(), 5_000 + i) for i in range(3)])
    create_topic(b, f"{prefix}x-c", 1)  # not matched: the pattern must match the whole name
    produce(b, f"{prefix}x-c", [(0, None, b"c", 1)])
    source = (KafkaSource.builder().set_bootstrap_servers(b).set_topic_pattern(f"{prefix}-[ab]")
              .set_value_only_deserializer(SimpleStringSchema()).set_bounded(KafkaOffsetsInitializer.latest()).build())
    reader = source.create_reader(ctx())
    got = drain(reader)
    reader.close()
    assert sorted(got) == sorted([((f"{prefix}-{s}", 0), f"{s}{i}", 5_000 + i) for s in "ab" for i in range(3)])


def test_partitions_follow_the_rule_at_any_parallelism_after_a_restore(kafka_broker):
    """Union state: every restored reader sees every partition's offset and keeps those the rule
    gives it; each record after the snapshot is read by exactly one reader, from its offset on."""
    b = kafka_broker.bootstrap
    topic = unique_topic()
    create_topic(b, topic, 5)
    produce(b, topic, [(i % 5, None, str(i).encode()) for i in range(100)])
    source = builder(b, topic).build()
    first = [source.create_reader(ctx(i, 2)) for i in range(2)]
    read_before = []
    for r in first:  # each reads a few batches of what it owns, then snapshots
        batch = None
        while batch is None:
            batch = r.poll()
        read_before += [int(v) for v in batch.batch]
    union = [s for r in first for s in r.snapshot_state()]
    for r in first:
        r.close()
    assert sorted(tp[1] for tp in union) == [0, 1, 2, 3, 4]

    bounded = builder(b, topic).set_bounded(KafkaOffsetsInitializer.latest()).build()
    after = []
    for i in range(3):
        reader = bounded.create_reader(ctx(i, 3))
        reader.restore_state(union)
        got = drain(reader)
        assert {tp[1] for tp, _, _ in got} <= {p for p in range(5) if split_owner(topic, p, 3) == i}
        after += [int(v) for _, v, _ in got]
        reader.close()
    assert sorted(read_before + after) == list(range(100))


def test_json_rows_decode_into_columns_and_bad_values_name_their_offset(kafka_broker):
    b = kafka_broker.bootstrap
    topic = unique_topic()
    create_topic(b, topic, 1)
    row_type = Types.ROW_NAMED(["user", "amount"], [Types.STRING(), Types.LONG()])
    produce(b, topic, [(0, None, json.dumps({"user": f"u{i}", "amount": i, "extra": [1]}).encode()) for i in range(5)]
            + [(0, None, b'{\n "user": "pretty",\n "amount": 7\n}'), (0, None, b'{"user": "x", "amount": "NaN?"}')])
    schema = JsonRowDeserializationSchema.builder().type_info(row_type).build()
    source = (KafkaSource.builder().set_bootstrap_servers(b).set_topics(topic).set_value_only_deserializer(schema)
              .set_bounded(KafkaOffsetsInitializer.offsets({(topic, 0): 6})).build())
    reader = source.create_reader(ctx())
    batch = reader.poll()
    while batch is None:
        batch = reader.poll()
    assert isinstance(batch.batch, pa.RecordBatch)
    assert batch.batch.schema == pa.schema([("user", pa.string()), ("amount", pa.int64())])
    rows = batch.batch.to_pylist() + [r for _, r, _ in drain(reader)]
    assert rows == [{"user": f"u{i}", "amount": i} for i in range(5)] + [{"user": "pretty", "amount": 7}]
    reader.close()

    reader = (KafkaSource.builder().set_bootstrap_servers(b).set_topics(topic).set_value_only_deserializer(schema)
              .set_bounded(KafkaOffsetsInitializer.latest()).build().create_reader(ctx()))
    with pytest.raises(DeserializationError, match=rf"topic {topic} partition 0 offset 6 does not fit the row type"):
        drain(reader)
    reader.close()

    produce(b, topic, [(0, None, b"\xff\xfe not utf-8")])
    reader = builder(b, topic).set_starting_offsets(KafkaOffsetsInitializer.offsets({(topic, 0): 7})).build() \
        .create_reader(ctx())
    with pytest.raises(DeserializationError, match=rf"topic {topic} partition 0 offset 7 as UTF-8"):
        drain(reader)
    reader.close()


def test_builder_refuses_what_cannot_work():
    with pytest.raises(ValueError, match="bootstrap servers"):
        KafkaSource.builder().set_topics("a").set_value_only_deserializer(SimpleStringSchema()).build()
    with pytest.raises(ValueError, match="needs a deserializer"):
        KafkaSource.builder().set_bootstrap_servers("x:1").set_topics("a").build()
    with pytest.raises(ValueError, match="set_group_id"):
        (KafkaSource.builder().set_bootstrap_servers("x:1").set_topics("a").set_value_only_deserializer(
            SimpleStringSchema()).set_starting_offsets(KafkaOffsetsInitializer.committed_offsets()).build())
    with pytest.raises(TypeError, match="KafkaOffsetsInitializer"):
        KafkaSource.builder().set_starting_offsets("earliest")
    # A property librdkafka does not know fails when the reader starts, naming it.
    reader = (KafkaSource.builder().set_bootstrap_servers("127.0.0.1:1").set_topics("a")
              .set_value_only_deserializer(SimpleStringSchema()).set_property("fetch.max.records", "5")
              .build().create_reader(ctx()))
    with pytest.raises(KafkaSourceError, match="fetch.max.records"):
        reader.poll()
