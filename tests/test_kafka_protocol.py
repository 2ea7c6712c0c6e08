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


def wait_complete(client: TransactionClient, tid: str) -> str:
    """EndTxn answers once the coordinator logged the decision; the markers follow. Wait for them."""
    deadline = time.monotonic() + 20
    while (state := client.describe_transactions([tid])[tid].state).startswith("Prepare"):
        assert time.monotonic() < deadline, f"{tid} still {state}"
        time.sleep(0.05)
    return state


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
    assert wait_complete(client, tid) == "CompleteCommit"
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
    later = unique_topic("tx")
    after = begin(kafka_broker.bootstrap, later, topic, [b"later"])
    after.commit_transaction(30)
    wait_complete(client, later)
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


@pytest.fixture(scope="module")
def secured_broker(tmp_path_factory):
    """A broker of its own with SASL_PLAINTEXT (PLAIN, SCRAM-SHA-256/512) and SSL listeners besides
    PLAINTEXT; the SSL listener has a self-signed certificate for 127.0.0.1 made here with openssl."""
    import subprocess

    from streamjob.runtime.connectors.kafka.broker import KafkaBroker, _free_port

    d = tmp_path_factory.mktemp("tls")
    key, cert, pem = d / "key.pem", d / "cert.pem", d / "keystore.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    pem.write_text(key.read_text() + cert.read_text())  # PKCS#8 key + certificate: Kafka's PEM keystore
    broker = KafkaBroker()
    broker.port, broker.controller_port = _free_port("127.0.0.1"), _free_port("127.0.0.1")
    sasl, tls = _free_port("127.0.0.1"), _free_port("127.0.0.1")
    h = "127.0.0.1"
    broker.overrides = {
        "listeners": f"PLAINTEXT://{h}:{broker.port},CONTROLLER://{h}:{broker.controller_port},"
                     f"SASL_PLAINTEXT://{h}:{sasl},SSL://{h}:{tls}",
        "advertised.listeners": f"PLAINTEXT://{h}:{broker.port},SASL_PLAINTEXT://{h}:{sasl},SSL://{h}:{tls}",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,"
                                          "SSL:SSL",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config":
            'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";',
        "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config":
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config":
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pem),
    }
    broker.start()
    from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for m in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512):  # one per request
        upsert = UserScramCredentialUpsertion("bob", ScramCredentialInfo(m, 4096), b"bob-secret")
        for f in admin.alter_user_scram_credentials([upsert]).values():
            f.result(30)
    broker.sasl_bootstrap, broker.tls_bootstrap, broker.ca = f"{h}:{sasl}", f"{h}:{tls}", str(cert)
    yield broker
    broker.close()


@pytest.mark.parametrize("security", ["SASL PLAIN", "SASL SCRAM-SHA-256", "SASL SCRAM-SHA-512", "SSL"])
def test_the_client_resumes_over_sasl_and_ssl(secured_broker, security):
    broker = secured_broker
    if security == "SSL":
        bootstrap, props = broker.tls_bootstrap, {"security.protocol": "SSL", "ssl.ca.location": broker.ca}
    else:
        mechanism = security.split()[1]
        user, password = ("alice", "alice-secret") if mechanism == "PLAIN" else ("bob", "bob-secret")
        bootstrap = broker.sasl_bootstrap
        props = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism, "sasl.username": user,
                 "sasl.password": password}
    topic, tid = unique_topic(), unique_topic("tx")
    create_topic(broker.bootstrap, topic)
    producer = begin(broker.bootstrap, tid, topic, [b"secured"])
    with TransactionClient(bootstrap, props, timeout_s=20) as client:
        d = client.describe_transactions([tid])[tid]
        assert tid in [t.transactional_id for t in client.list_transactions()]
        del producer
        client.end_txn(tid, d.producer_id, d.producer_epoch, commit=True)
        assert wait_complete(client, tid) == "CompleteCommit"
    assert values(broker.bootstrap, topic) == [b"secured"]
    if security != "SSL":
        with TransactionClient(bootstrap, {**props, "sasl.password": "wrong"}, timeout_s=5) as client:
            with pytest.raises(KafkaProtocolError, match="SASL authentication failed"):
                client.list_transactions()


def test_an_exactly_once_job_over_sasl_scram(spark_slots, secured_broker, tmp_path):
    """The sink's properties reach both clients: librdkafka's producers and the transaction client."""
    from jobs import kafka_counting
    from test_kafka_sink import assert_exactly_once

    broker = secured_broker
    topic, prefix = unique_topic("out"), unique_topic("scram")
    create_topic(broker.bootstrap, topic)
    rows = 3000
    props = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-512", "sasl_username": "bob",
             "sasl_password": "bob-secret"}
    env = kafka_counting.build(broker.sasl_bootstrap, topic, prefix, str(tmp_path / "chk"), rows, 3000,
                               sink_props=props)  # DataGen input: only the sink talks to the broker
    assert env.execute("kafka-scram").restarts == 0
    assert_exactly_once(broker.bootstrap, topic, prefix, rows)
