"""Hanging transactions (``runtime/connectors/kafka/hanging.py``) on a real broker.

What the broker does after a single-node restart (skip the commit markers of leaderless partitions,
then record CompleteCommit: see ``transactions.hanging_repairs``) cannot be provoked at will, so the
test makes the same state another way: a transaction is committed (or aborted) by librdkafka, then a
transactional batch of the same producer id and epoch is appended to a partition by a raw Produce
request. The partition now holds a transaction of that identity open, with no marker to come, while
the coordinator says CompleteCommit (CompleteAbort) with that epoch: exactly the hanging transaction
the broker leaves. The broker of this test runs with ``transaction.partition.verification.enable=false``
(KIP-890's check that the partition is part of an ongoing transaction, which would refuse the raw
batch), and with ACLs (StandardAuthorizer) on a second, SASL listener, for a principal without
ClusterAction. The broker-restart test of ``test_kafka_sink.py`` covers the real cause.
"""

from __future__ import annotations

import struct
import time

import crc32c
import pytest
from confluent_kafka import IsolationLevel, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from kafka_util import create_topic, read_all, unique_topic
from streamjob.runtime.connectors.kafka import hanging
from streamjob.runtime.connectors.kafka.protocol import TransactionClient, Writer, uvarint

PRODUCE = 0


@pytest.fixture(scope="module")
def broker():
    """The PLAINTEXT listener is the super user's (the tests' setup); on the SASL_PLAINTEXT listener
    user ``app`` has what an exactly-once sink's principal has (topics, transactional ids) and no
    ClusterAction, which WriteTxnMarkers needs (StandardAuthorizer ACLs)."""
    from streamjob.runtime.connectors.kafka.broker import KafkaBroker, _free_port

    h = "127.0.0.1"
    b = KafkaBroker()
    b.port, b.controller_port, sasl = _free_port(h), _free_port(h), _free_port(h)
    b.overrides = {
        "transaction.partition.verification.enable": "false",
        "listeners": f"PLAINTEXT://{h}:{b.port},CONTROLLER://{h}:{b.controller_port},SASL_PLAINTEXT://{h}:{sasl}",
        "advertised.listeners": f"PLAINTEXT://{h}:{b.port},SASL_PLAINTEXT://{h}:{sasl}",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config":
            'org.apache.kafka.common.security.plain.PlainLoginModule required user_app="app-secret";',
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ANONYMOUS",
    }
    b.start()
    from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, ResourcePatternType,
                                       ResourceType)

    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    acls = [AclBinding(kind, "*", ResourcePatternType.LITERAL, "User:app", "*", op, AclPermissionType.ALLOW)
            for kind in (ResourceType.TOPIC, ResourceType.TRANSACTIONAL_ID)
            for op in (AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE)]
    for f in admin.create_acls(acls).values():
        f.result(30)
    b.sasl_props = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "app",
                    "sasl.password": "app-secret"}
    b.sasl_bootstrap = f"{h}:{sasl}"
    yield b
    b.close()


def zigzag(n: int) -> bytes:
    return uvarint((n << 1) ^ (n >> 63))


def transactional_batch(pid: int, epoch: int, sequence: int, value: bytes) -> bytes:
    """A record batch (magic 2) of one record, transactional, of producer id/epoch at ``sequence``."""
    now = int(time.time() * 1000)
    body = b"\x00" + zigzag(0) + zigzag(0) + zigzag(-1) + zigzag(len(value)) + value + zigzag(0)
    record = zigzag(len(body)) + body
    after_crc = (struct.pack(">hiqqqhii", 0x10, 0, now, now, pid, epoch, sequence, 1) + record)
    crc = crc32c.crc32c(after_crc)
    after_length = struct.pack(">ibI", -1, 2, crc) + after_crc
    return struct.pack(">qi", 0, len(after_length)) + after_length


def raw_produce(client: TransactionClient, tid: str, topic: str, partition: int, batch: bytes) -> None:
    """Produce v3 (the oldest a Kafka 4 broker takes; not flexible) of one batch, acks=all."""
    leader = client.partition_leaders([topic])[(topic, partition)]
    conn = client._connect(leader)
    body = (Writer(False).string(tid).int16(-1).int32(10_000)
            .array([topic], lambda w, t: w.string(t).array([partition], lambda w2, p: w2.int32(p).bytes_(batch)))
            .build())
    r = conn.send(PRODUCE, 3, body)
    (name, parts), = r.array(lambda r: (r.string(), r.array(lambda r: (r.int32(), r.int16(), r.int64(), r.int64()))))
    assert parts[0][1] == 0, f"raw produce to {name}-{partition}: error {parts[0][1]}"


def stable_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
    """Partition -> (last stable offset, high watermark)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})

    def latest(isolation):
        futures = admin.list_offsets({TopicPartition(topic, p): OffsetSpec.latest() for p in range(partitions)},
                                     isolation_level=isolation, request_timeout=10)
        return {tp.partition: f.result().offset for tp, f in futures.items()}

    lso, hw = latest(IsolationLevel.READ_COMMITTED), latest(IsolationLevel.READ_UNCOMMITTED)
    return {p: (lso[p], hw[p]) for p in range(partitions)}


def hang(bootstrap: str, tid: str, topic: str, commit: bool, value: bytes, partition: int = 0) -> tuple[int, int]:
    """A transaction of ``tid`` over partitions 0 and 1, committed (aborted) by librdkafka, then a
    batch of its identity left open on ``partition``: (producer id, epoch)."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid})
    producer.init_transactions(30)
    producer.begin_transaction()
    for p in (0, 1):
        producer.produce(topic, b"ended-" + value, partition=p)
    producer.flush(30)
    (producer.commit_transaction if commit else producer.abort_transaction)(30)
    del producer
    with TransactionClient(bootstrap) as client:
        ended = "CompleteCommit" if commit else "CompleteAbort"
        deadline = time.monotonic() + 30
        while (desc := client.describe_transactions([tid])[tid]).state != ended and time.monotonic() < deadline:
            time.sleep(0.05)  # the coordinator writes the markers, then logs the end
        assert desc.state == ended
        # The raw batch carries the sequence the partition expects next of this producer.
        raw_produce(client, tid, topic, partition, transactional_batch(
            desc.producer_id, desc.producer_epoch, _last_sequence(client, topic, desc.producer_id, partition) + 1,
            value))
        return desc.producer_id, desc.producer_epoch


def _last_sequence(client: TransactionClient, topic: str, pid: int, partition: int) -> int:
    """The producer's last sequence on the partition (DescribeProducers; the sink's client drops it);
    -1 where it never wrote (its first batch there has sequence 0)."""
    from streamjob.runtime.connectors.kafka.protocol import DESCRIBE_PRODUCERS, Reader

    conn = client._connect(client.partition_leaders([topic])[(topic, partition)])
    r = conn.send(DESCRIBE_PRODUCERS, 0, Writer(True).array([topic], lambda w, t: w.string(t).array(
        [partition], Writer.int32).tags()).tags().build())
    r.int32()
    found = {}

    def producer(r: Reader) -> None:
        p, _epoch, seq = r.int64(), r.int32(), r.int32()
        r.int64(), r.int32(), r.int64()
        r.tags()
        found[p] = seq

    r.array(lambda r: (r.string(), r.array(lambda r: (r.int32(), r.int16(), r.string(), r.array(producer), r.tags())),
                       r.tags()))
    return found.get(pid, -1)


def test_a_committed_transaction_left_open_on_a_partition_is_committed_there(broker):
    bootstrap = broker.bootstrap
    topic, prefix, other = unique_topic("hang"), unique_topic("sink"), unique_topic("other")
    create_topic(bootstrap, topic, 2)
    pid, epoch = hang(bootstrap, f"{prefix}-0-3", topic, True, b"lost-commit")
    hang(bootstrap, f"{other}-0-1", topic, True, b"not-ours")  # another writer's: left to it
    offsets = stable_offsets(bootstrap, topic, 2)
    assert offsets[0][0] < offsets[0][1], f"no hanging transaction on partition 0: {offsets}"
    assert b"lost-commit" not in read_all(bootstrap, topic, 2, "read_committed")

    with TransactionClient(bootstrap) as client:
        report = hanging.find_and_repair(client, [topic], prefix)
    assert [(r["transactional_id"], r["producer_id"], r["epoch"], r["commit"], r["partitions"])
            for r in report.repaired] == [(f"{prefix}-0-3", pid, epoch, True, [(topic, 0)])]
    assert report.refused == [] and report.in_progress == 0
    # The committed record is visible now; the other prefix's transaction still holds partition 0 back.
    with TransactionClient(bootstrap) as client:
        assert hanging.find_and_repair(client, [topic], other).repaired  # its own sink would repair it
        assert hanging.find_and_repair(client, [topic], prefix).repaired == []  # nothing left: idempotent
    lso, hw = stable_offsets(bootstrap, topic, 2)[0]
    assert lso == hw
    got = read_all(bootstrap, topic, 2, "read_committed")
    assert sorted(got) == sorted([b"ended-lost-commit"] * 2 + [b"lost-commit", b"ended-not-ours", b"ended-not-ours",
                                                                b"not-ours"])


def test_an_aborted_transaction_left_open_is_aborted_and_a_live_one_is_left_alone(broker):
    bootstrap = broker.bootstrap
    topic, prefix = unique_topic("hang"), unique_topic("sink")
    create_topic(bootstrap, topic, 2)
    hang(bootstrap, f"{prefix}-1-5", topic, False, b"lost-abort")
    live = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{prefix}-1-6"})
    live.init_transactions(30)
    live.begin_transaction()
    live.produce(topic, b"live", partition=1)
    live.flush(30)  # Ongoing at the coordinator: open on partition 1, and not hanging
    with TransactionClient(bootstrap) as client:
        report = hanging.find_and_repair(client, [topic], prefix, share=(0, 1))
    assert [(r["transactional_id"], r["commit"], r["partitions"]) for r in report.repaired] == \
        [(f"{prefix}-1-5", False, [(topic, 0)])]
    offsets = stable_offsets(bootstrap, topic, 2)
    assert offsets[0][0] == offsets[0][1] and offsets[1][0] < offsets[1][1]  # the live one still open
    live.commit_transaction(30)
    assert sorted(read_all(bootstrap, topic, 2, "read_committed")) == [b"live"]


def test_without_cluster_action_the_repair_is_refused_with_a_warning_and_nothing_changes(broker, caplog):
    """WriteTxnMarkers needs ClusterAction on the cluster: a principal without it finds the hanging
    transaction (DescribeProducers, ListTransactions, DescribeTransactions are allowed), is refused the
    marker, and the repair says so (naming transaction, partition and the missing right) instead of
    failing; the transaction still hangs, and the super user's repair then ends it."""
    bootstrap = broker.bootstrap
    topic, prefix = unique_topic("hang"), unique_topic("sink")
    create_topic(bootstrap, topic, 2)
    hang(bootstrap, f"{prefix}-0-2", topic, True, b"acl")
    warned: set[str] = set()
    with TransactionClient(broker.sasl_bootstrap, broker.sasl_props) as client, caplog.at_level("WARNING"):
        report = hanging.find_and_repair(client, [topic], prefix, warned=warned)
        again = hanging.find_and_repair(client, [topic], prefix, warned=warned)  # the writer's next look
    assert again.refused == report.refused and caplog.text.count("the cluster refused the missing marker") == 1
    assert report.repaired == [] and len(report.refused) == 1
    assert f"transaction {prefix}-0-2" in report.refused[0] and f"{topic}-0" in report.refused[0]
    assert "CLUSTER_AUTHORIZATION_FAILED" in report.refused[0] and "ClusterAction" in report.refused[0]
    assert report.refused[0] in caplog.text
    lso, hw = stable_offsets(bootstrap, topic, 2)[0]
    assert lso < hw
    with TransactionClient(bootstrap) as client:
        assert len(hanging.find_and_repair(client, [topic], prefix).repaired) == 1
    lso, hw = stable_offsets(bootstrap, topic, 2)[0]
    assert lso == hw


def test_an_exactly_once_job_repairs_its_prefix_s_hanging_transactions_when_it_starts(spark_slots, broker, tmp_path):
    """A job whose sink has the prefix of hanging transactions (one on each partition: a committed and
    an aborted one, as a broker restart under an earlier run of the job leaves them) ends them: its
    writers look when they start and at the end of input (subtask i looks after partitions p % 2 == i;
    the periodic look is off here). The committed one's record becomes visible, the aborted one's does
    not, and nothing holds readers back."""
    from streamjob.runtime import StreamExecutionEnvironment

    bootstrap = broker.bootstrap
    topic, prefix = unique_topic("hang"), unique_topic("job")
    create_topic(bootstrap, topic, 2)
    hang(bootstrap, f"{prefix}-0-4", topic, True, b"committed-before", partition=0)
    hang(bootstrap, f"{prefix}-1-4", topic, False, b"aborted-before", partition=1)
    assert all(lso < hw for lso, hw in stable_offsets(bootstrap, topic, 2).values())
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(200)
    sink = exactly_once_sink(bootstrap, topic, prefix, 0)
    env.from_collection([f"r{i}" for i in range(20)]).sink_to(sink)
    env.execute("kafka-hanging-repair")
    offsets = stable_offsets(bootstrap, topic, 2)
    assert all(lso == hw for lso, hw in offsets.values()), offsets
    got = sorted(read_all(bootstrap, topic, 2, "read_committed"))
    assert got == sorted([b"ended-committed-before"] * 2 + [b"committed-before"]
                         + [f"r{i}".encode() for i in range(20)])


def exactly_once_sink(bootstrap: str, topic: str, prefix: str, check_interval: float):
    """An exactly-once KafkaSink of strings into ``topic`` under ``prefix``."""
    from streamjob.runtime.connectors import DeliveryGuarantee, KafkaRecordSerializationSchema, KafkaSink, \
        SimpleStringSchema

    return (KafkaSink.builder().set_bootstrap_servers(bootstrap)
            .set_record_serializer(KafkaRecordSerializationSchema.builder().set_topic(topic)
                                   .set_value_serialization_schema(SimpleStringSchema()).build())
            .set_delivery_guarantee(DeliveryGuarantee.EXACTLY_ONCE).set_transactional_id_prefix(prefix)
            .set_hanging_transaction_check_interval(check_interval).build())


def wait_until_nothing_open(bootstrap: str, topic: str) -> None:
    """Every partition's last stable offset reaches its high watermark within 30 s (abort markers are
    written after the coordinator answers), else fails naming the offsets."""
    deadline = time.monotonic() + 30
    while (offsets := stable_offsets(bootstrap, topic, 2)) and any(lso < hw for lso, hw in offsets.values()) \
            and time.monotonic() < deadline:
        time.sleep(0.1)
    assert all(lso == hw for lso, hw in offsets.values()), offsets


def _open(bootstrap: str, tid: str, topic: str, value: bytes, partition: int = 0) -> Producer:
    """A transaction of ``tid`` left Ongoing with one record on ``partition`` (its producer kept)."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, value, partition=partition)
    assert producer.flush(30) == 0
    return producer


# Fenced by InitProducerId: aborting, aborted, then Empty under the bumped epoch.
ABORTED = ("PrepareAbort", "CompleteAbort", "Empty")


def _state(bootstrap: str, tid: str) -> str:
    with TransactionClient(bootstrap) as client:
        return client.describe_transactions([tid])[tid].state


def test_a_transaction_an_earlier_attempt_opens_after_the_start_up_abort_is_aborted_by_the_next_look(broker):
    """A task of the failed attempt 0 that lives on (its producer retrying while the broker was away)
    opens a transaction after attempt 1's start-up abort has run: the writer's periodic look aborts it
    (fencing its id, as the start-up abort does), so it does not hold back read_committed readers
    until transaction.timeout.ms. Left alone: the restored checkpoint's committable (still open here,
    to show the look never takes it; the runtime commits it before ``start``), a transaction numbered
    in attempt 1's own range, and another prefix's. A second late one, opened just before the end of
    input, is gone when ``close`` returns. The writer runs outside a job (a real RuntimeContext of
    attempt 1, the real broker) so that the late transactions open at a known point."""
    from confluent_kafka import KafkaException

    from streamjob.runtime.api.functions import RuntimeContext
    from streamjob.runtime.connectors.kafka import transactions as txn
    from streamjob.runtime.connectors.kafka.sink import TransactionalKafkaSinkWriter

    bootstrap = broker.bootstrap
    topic, prefix, other = unique_topic("late"), unique_topic("job"), unique_topic("other")
    create_topic(bootstrap, topic, 2)
    interval = 0.5
    sink = exactly_once_sink(bootstrap, topic, prefix, interval)
    # The restored checkpoint (attempt 0, parallelism 1) holds the committable prefix-0-2; next: 3.
    pre_committed = _open(bootstrap, f"{prefix}-0-2", topic, b"committable", partition=1)
    with TransactionClient(bootstrap) as client:
        desc = client.describe_transactions([f"{prefix}-0-2"])[f"{prefix}-0-2"]
    committable = txn.committable(f"{prefix}-0-2", desc.producer_id, desc.producer_epoch)
    del pre_committed  # its producer is gone, its transaction stays open for the commit
    writer = TransactionalKafkaSinkWriter(sink, RuntimeContext("sink", 0, 1, 128, attempt=1))
    writer.restore_state([txn.writer_state(prefix, 0, 3)])
    try:
        writer.start()
        own_range = f"{prefix}-0-{txn.ATTEMPT_SPAN + 50}"
        keep = [_open(bootstrap, own_range, topic, b"own-range"), _open(bootstrap, f"{other}-0-3", topic, b"other")]
        late = _open(bootstrap, f"{prefix}-0-3", topic, b"late-of-attempt-0")  # after the start-up abort
        assert _state(bootstrap, f"{prefix}-0-3") == "Ongoing"
        writer.write([f"r{i}" for i in range(5)])
        deadline = time.monotonic() + 20 * interval + 10  # a few looks, on a machine shared with other tests
        while _state(bootstrap, f"{prefix}-0-3") == "Ongoing" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _state(bootstrap, f"{prefix}-0-3") in ABORTED
        with pytest.raises(KafkaException):  # fenced: the left-over task cannot commit it any more
            late.commit_transaction(10)
        del late
        for tid in (f"{prefix}-0-2", own_range, f"{other}-0-3"):
            assert _state(bootstrap, tid) == "Ongoing", tid
        sink.commit([committable])  # the restored checkpoint's committable, untouched: still commits
        writer.write([f"r{i}" for i in range(5, 10)])
        sink.commit(writer.prepare_commit())
        late2 = _open(bootstrap, f"{prefix}-0-4", topic, b"late-at-the-end", partition=1)
        writer.close()  # the end-of-input look (or a last periodic one) has aborted it
        assert _state(bootstrap, f"{prefix}-0-4") in ABORTED
        del late2
        for producer in keep:
            producer.abort_transaction(30)
    finally:
        writer.dispose()
    wait_until_nothing_open(bootstrap, topic)
    assert sorted(read_all(bootstrap, topic, 2, "read_committed")) == \
        sorted([b"committable"] + [f"r{i}".encode() for i in range(10)])


def test_without_periodic_looks_the_end_of_input_look_aborts_what_an_earlier_attempt_left_open(broker):
    """Periodic looks off (interval 0), no checkpoint restored (attempt 0 failed before its first):
    a transaction attempt 0's task opens after attempt 1 started is aborted by the look at the end of
    input, so the job's readers see exactly its output once it is done."""
    from streamjob.runtime.api.functions import RuntimeContext
    from streamjob.runtime.connectors.kafka.sink import TransactionalKafkaSinkWriter

    bootstrap = broker.bootstrap
    topic, prefix = unique_topic("late"), unique_topic("job")
    create_topic(bootstrap, topic, 2)
    sink = exactly_once_sink(bootstrap, topic, prefix, 0)
    writer = TransactionalKafkaSinkWriter(sink, RuntimeContext("sink", 1, 2, 128, attempt=1))
    try:
        writer.start()
        late = _open(bootstrap, f"{prefix}-1-3", topic, b"late-of-attempt-0", partition=1)
        other_subtask = _open(bootstrap, f"{prefix}-0-3", topic, b"subtask-0-s", partition=0)
        writer.write([f"r{i}" for i in range(6)])
        sink.commit(writer.prepare_commit())
        assert _state(bootstrap, f"{prefix}-1-3") == "Ongoing"  # no periodic look
        writer.close()
        assert _state(bootstrap, f"{prefix}-1-3") in ABORTED
        assert _state(bootstrap, f"{prefix}-0-3") == "Ongoing"  # subtask 0's to abort, not this one's
        del late
        other_subtask.abort_transaction(30)
    finally:
        writer.dispose()
    wait_until_nothing_open(bootstrap, topic)
    assert sorted(read_all(bootstrap, topic, 2, "read_committed")) == sorted(f"r{i}".encode() for i in range(6))


def test_a_partition_added_while_the_job_runs_is_looked_at_for_hanging_transactions(broker):
    """The periodic look asks for the topic's partitions at every look: a transaction left hanging
    on a partition added after the writer started (a committed one, on partition 3: 3 % 2 == 1, this
    subtask's) is repaired, and one on partition 2 (subtask 0's) is left to subtask 0."""
    from confluent_kafka.admin import NewPartitions

    from streamjob.runtime.api.functions import RuntimeContext
    from streamjob.runtime.connectors.kafka.sink import TransactionalKafkaSinkWriter

    bootstrap = broker.bootstrap
    topic, prefix = unique_topic("grown"), unique_topic("job")
    create_topic(bootstrap, topic, 2)
    interval = 0.3
    writer = TransactionalKafkaSinkWriter(exactly_once_sink(bootstrap, topic, prefix, interval),
                                          RuntimeContext("sink", 1, 2, 128))
    try:
        writer.start()  # a first look, at two partitions
        admin = AdminClient({"bootstrap.servers": bootstrap})  # kept: its futures fail once it is destroyed
        for f in admin.create_partitions([NewPartitions(topic, 4)]).values():
            f.result(30)
        hang(bootstrap, f"{prefix}-1-7", topic, True, b"on-3", partition=3)
        hang(bootstrap, f"{prefix}-0-7", topic, True, b"on-2", partition=2)
        deadline = time.monotonic() + 20 * interval + 10  # a few looks, on a machine shared with other tests
        while (offsets := stable_offsets(bootstrap, topic, 4))[3][0] < offsets[3][1] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert offsets[3][0] == offsets[3][1], offsets
        assert offsets[2][0] < offsets[2][1], offsets  # subtask 0's partition: not this writer's to repair
    finally:
        writer.close()
    with TransactionClient(bootstrap) as client:
        assert len(hanging.find_and_repair(client, [topic], prefix, (0, 2)).repaired) == 1
    assert sorted(read_all(bootstrap, topic, 4, "read_committed")) == \
        sorted([b"ended-on-3", b"ended-on-3", b"on-3", b"ended-on-2", b"ended-on-2", b"on-2"])
