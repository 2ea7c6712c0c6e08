"""The real Apache Kafka broker the Kafka tests and `streamjob kafka-dev` run: transactions work on it
(its single-node transaction-state settings), restarts keep its data and port, and it never
outlives the process that started it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from kafka_util import create_topic, read_all, unique_topic
from streamjob.runtime.connectors.kafka.broker import KafkaBroker, KafkaBrokerError


def test_transactional_produce_read_committed(kafka_broker):
    """A committed transaction's records are visible to read_committed, an aborted one's are not
    (the transaction coordinator needs the single-node __transaction_state settings to exist)."""
    topic = unique_topic()
    create_topic(kafka_broker.bootstrap, topic)
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap, "transactional.id": unique_topic("tx")})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, value=f"committed-{i}".encode())
    producer.commit_transaction(30)
    producer.begin_transaction()
    producer.produce(topic, value=b"aborted")
    producer.flush(10)
    producer.abort_transaction(30)
    assert read_all(kafka_broker.bootstrap, topic) == [b"committed-0", b"committed-1", b"committed-2"]
    assert b"aborted" in read_all(kafka_broker.bootstrap, topic, isolation="read_uncommitted")


def test_restart_and_kill_keep_port_topics_and_records(kafka_broker_private):
    broker = kafka_broker_private
    topic = unique_topic()
    create_topic(broker.bootstrap, topic, 2)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    producer.produce(topic, value=b"before", partition=1)
    producer.flush(10)
    address = broker.bootstrap
    broker.restart()
    assert broker.bootstrap == address
    producer.produce(topic, value=b"after restart", partition=1)
    producer.flush(30)
    broker.restart(hard=True)
    assert broker.bootstrap == address
    assert read_all(address, topic, 2) == [b"before", b"after restart"]


def test_broker_dies_with_the_process_that_started_it(tmp_path):
    """SIGKILL of the owner (no finally, no atexit) still takes the broker down: nothing lingers."""
    code = ("import sys, time\n"
            "from streamjob.runtime.connectors.kafka.broker import KafkaBroker\n"
            f"b = KafkaBroker(data_dir={str(tmp_path / 'data')!r}).start()\n"
            "print(b.pid, flush=True)\n"
            "time.sleep(600)\n")
    owner = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        jvm_pid = int(owner.stdout.readline())
        os.kill(jvm_pid, 0)  # running
        owner.kill()
        owner.wait()
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                # Dead once gone or a zombie (its new parent, init, reaps it in its own time).
                if psutil.Process(jvm_pid).status() == psutil.STATUS_ZOMBIE:
                    return
            except psutil.NoSuchProcess:
                return
            time.sleep(0.1)
        os.kill(jvm_pid, signal.SIGKILL)
        pytest.fail("the broker outlived its owner")
    finally:
        owner.kill()


def test_a_broker_that_cannot_start_names_its_log(tmp_path):
    """Its port is taken: the error says so through the log file it names, quickly."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        broker = KafkaBroker(data_dir=tmp_path / "data", port=port, start_timeout=60)
        with pytest.raises(KafkaBrokerError, match=r"broker\.log") as info:
            broker.start()
        assert "Address already in use" in str(info.value) or "exited with code" in str(info.value)
        assert not broker.is_running()


def test_kafka_dev_command(tmp_path):
    """`streamjob kafka-dev` as a user runs it: topics from --topic, the address printed, Ctrl-C stops it."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "streamjob.runtime.cli", "kafka-dev", "--port", str(port),
                             "--data-dir", str(tmp_path / "data"), "--topic", "clicks:3"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if "bootstrap servers" in line:
                break
        assert f"bootstrap servers 127.0.0.1:{port}" in "".join(lines), "".join(lines) + proc.stderr.read()
        assert "created topic clicks (3 partitions)" in "".join(lines)
        md = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"}).list_topics(timeout=10)
        assert len(md.topics["clicks"].partitions) == 3
        proc.send_signal(signal.SIGINT)
        out, errs = proc.communicate(timeout=60)
        assert proc.returncode == 0, errs
        assert "Kafka broker stopped" in out
    finally:
        proc.kill()
    # Stopped for real: nothing answers on the port any more.
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0
