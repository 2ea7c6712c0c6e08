"""The Kafka sink's wire-protocol client against the real broker: resuming a transaction that
librdkafka began (by transactional id, producer id and epoch), idempotently; fencing an open one;
listing and describing; and why ``EndTxn`` stays below v5 (transaction version 2)."""

from __future__ import annotations

import gc
import socket
import time

import pytest
from confluent_kafka import Producer

from kafka_util import create_topic, unique_topic
from jobs.kafka_counting import read_topic
from streamjob.runtime.connectors.kafka import protocol
from streamjob.runtime.connectors.kafka.protocol import KafkaProtocolError, TransactionClient


def begin(bootstrap: str, tid: str, topic: str, values: list[bytes]) -> Producer:
    """A librdkafka transaction with ``values`` written and flushed, left open."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid})
    producer.init_transactions(30)
    producer.begin_transaction()
    for v in values:
        producer.produce(topic, v)
    assert producer.flush(30) == 0
    return producer


def values(bootstrap: str, topic: str, isolation: str = "read_committed") -> list[bytes]:
    return [v for _k, v, _p, _h in read_topic(bootstrap, topic, 1, isolation)]


@pytest.fixture
def client(kafka_broker):
    with TransactionClient(kafka_broker.bootstrap, timeout_s=20) as c:
        yield c


def test_the_cluster_runs_transaction_version_2_and_the_client_speaks_endtxn_v4(client):
    assert client.finalized_features().get("transaction.version") == 2  # Kafka 4.x: KIP-890 part 2 on
    host, port = client.servers[0]
    conn = protocol.Connection(host, port)
    try:
        assert conn.versions[protocol.END_TXN][1] >= 5  # the broker would take v5 (version 2 rules)...
        assert conn.version(protocol.END_TXN) == 4  # ...the client sends v4 (version 1 rules)
    finally:
        conn.close()


def test_librdkafka_transactions_are_version_1_a_commit_keeps_the_epoch(kafka_broker, client):
    """The canary for the sink's choice: if librdkafka ever ran version 2 transactions (EndTxn v5, an
    epoch bump per commit), this fails and the resume must move to EndTxn v5 with it."""
    topic, tid = unique_topic(), unique_topic("tx")
    create_topic(kafka_broker.bootstrap, topic)
    producer = begin(kafka_broker.bootstrap, tid, topic, [b"a"])
    before = client.describe_transactions([tid])[tid]
    assert before.state == "Ongoing" and before.partitions == {topic: [0]}
    producer.commit_transaction(30)
    after = client.describe_transactions([tid])[tid]
    assert after.state in ("PrepareCommit", "CompleteCommit")
    assert (after.producer_id, after.producer_epoch) == (before.producer_id, before.producer_epoch)


def test_a_transaction_librdkafka_left_open_is_committed_by_identity_idempotently(kafka_broker, client):
    topic, tid = unique_topic(), unique_topic("tx")
    create_topic(kafka_broker.bootstrap, topic)
    producer = begin(kafka_broker.bootstrap, tid, topic, [b"one", b"two"])
    d = client.describe_transactions([tid])[tid]
    del producer  # the task died: librdkafka's producer is gone, its transaction is still open
    gc.collect()
    assert client.describe_transactions([tid])[tid].state == "Ongoing"
    assert values(kafka_broker.bootstrap, topic) == []  # read_committed does not see it yet
    assert [t.transactional_id for t in client.list_transactions() if t.transactional_id == tid] == [tid]

    client.end_txn(tid, d.producer_id, d.producer_epoch, commit=True)  # the restored job's commit
    # A crash in the middle of the commit: the restored job commits again, while the coordinator is
    # still writing the markers (PrepareCommit: CONCURRENT_TRANSACTIONS, retried) and after it is done.
    client.end_txn(tid, d.producer_id, d.producer_epoch, commit=True)
    client.end_txn(tid, d.producer_id, d.producer_epoch, commit=True)
    now = client.describe_transactions([tid])[tid]
    assert (now.state, now.producer_id, now.producer_epoch) == ("CompleteCommit", d.producer_id, d.producer_epoch)
    assert values(kafka_broker.bootstrap, topic) == [b"one", b"two"]  # once, not three times


def test_with_endtxn_v5_a_repeated_commit_is_refused(kafka_broker, client, monkeypatch):
    """Why the client stops at v4: with the version 2 rules a commit bumps the epoch and only a
    request one epoch below counts as a retry, so committing again with the epoch the checkpoint
    stored answers INVALID_TXN_STATE, which a restored job could not tell from an aborted transaction."""
    topic, tid = unique_topic(), unique_topic("tx")
    create_topic(kafka_broker.bootstrap, topic)
    producer = begin(kafka_broker.bootstrap, tid, topic, [b"x"])
    d = client.describe_transactions([tid])[tid]
    producer.commit_transaction(30)
    deadline = time.monotonic() + 10
    while client.describe_transactions([tid])[tid].state != "CompleteCommit" and time.monotonic() < deadline:
        time.sleep(0.05)
    with monkeypatch.context() as m, TransactionClient(kafka_broker.bootstrap, timeout_s=10) as v5:
        m.setitem(protocol.SUPPORTED, protocol.END_TXN, (5,))
        with pytest.raises(KafkaProtocolError) as e:
            v5.end_txn(tid, d.producer_id, d.producer_epoch, commit=True)
    assert e.value.name == "INVALID_TXN_STATE"
    client.end_txn(tid, d.producer_id, d.producer_epoch, commit=True)  # v4: NONE


def test_init_producer_id_fences_and_aborts_an_open_transaction(kafka_broker, client):
    topic, tid = unique_topic(), unique_topic("tx")
    create_topic(kafka_broker.bootstrap, topic)
    producer = begin(kafka_broker.bootstrap, tid, topic, [b"lost"])
    d = client.describe_transactions([tid])[tid]
    pid, epoch = client.init_producer_id(tid)
    assert pid == d.producer_id and epoch > d.producer_epoch
    assert client.describe_transactions([tid])[tid].state in ("Empty", "CompleteAbort")
    with pytest.raises(Exception, match="fenced"):
        producer.commit_transaction(10)  # the zombie cannot commit any more
    with pytest.raises(KafkaProtocolError) as e:
        client.end_txn(tid, d.producer_id, d.producer_epoch, commit=True)  # nor can a resume
    assert e.value.name == "PRODUCER_FENCED"
    # The aborted records never show, and they no longer hold back read_committed readers.
    after = begin(kafka_broker.bootstrap, unique_topic("tx"), topic, [b"later"])
    after.commit_transaction(30)
    assert values(kafka_broker.bootstrap, topic) == [b"later"]
    assert values(kafka_broker.bootstrap, topic, "read_uncommitted") == [b"lost", b"later"]


def test_unknown_ids_and_unreachable_brokers_give_clear_errors(kafka_broker, client):
    with pytest.raises(KafkaProtocolError) as e:
        client.end_txn(unique_topic("never-used"), 12345, 0)
    assert e.value.name == "INVALID_PRODUCER_ID_MAPPING"
    assert client.describe_transactions([unique_topic("never-used")]) == {}

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there
    started = time.monotonic()
    with TransactionClient(f"127.0.0.1:{port}", timeout_s=2) as nowhere:
        with pytest.raises(KafkaProtocolError, match=f"no Kafka broker of 127.0.0.1:{port} answers"):
            nowhere.end_txn("t", 1, 0)
    assert time.monotonic() - started < 10
