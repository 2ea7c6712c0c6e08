"""``KafkaSink`` (PyFlink's names): records to Kafka topics with ``DeliveryGuarantee.NONE``,
``AT_LEAST_ONCE`` or ``EXACTLY_ONCE``.

- ``NONE``: records are handed to the producer (librdkafka, via confluent-kafka) and sent when it
  sees fit; a failure may lose what was in flight, a restore may repeat records.
- ``AT_LEAST_ONCE``: the producer is flushed at every checkpoint barrier (every record before the
  barrier is acknowledged by Kafka before the checkpoint can complete): nothing is lost; records
  after the restored checkpoint are written again after a failure.
- ``EXACTLY_ONCE``: a two-phase commit with the checkpoints, as Flink's KafkaSink does it:

  1. Each subtask writes the records between two barriers into one Kafka transaction, begun at the
     first record, with a transactional id of its own (``<prefix>-<subtask>-<n>``, see
     ``transactions.py`` for why one id per transaction).
  2. At the barrier (pre-commit) the producer is flushed; the coordinator's view of the transaction
     (producer id and epoch, which librdkafka does not tell) is read with DescribeTransactions and
     the transaction's identity ``(transactional id, producer id, epoch)`` becomes the committable
     that the checkpoint stores. The producer is then dropped: librdkafka leaves an open
     transaction open when it is destroyed, and nothing else of it is needed.
  3. When the checkpoint is complete, ``commit`` sends ``EndTxn(commit)`` for that identity to the
     transaction coordinator (``protocol.py``). The same call commits after a restore, so the hard
     case, a failure after the checkpoint completed but before its commit, is the ordinary path:
     the restored job commits the restored checkpoint's transactions by id, producer id and epoch.
     The commit is ``EndTxn`` v4, under the transaction version 1 rules, on purpose although Kafka
     4.x clusters run version 2 (KIP-890): librdkafka writes version 1 transactions (its commit keeps
     the epoch), and under version 1 committing an already committed transaction with the same
     identity answers NONE, so the commit is idempotent; under version 2 (``EndTxn`` v5+) the same
     request is refused. Details and the tests that pin this down: ``protocol.py``.
  4. On start, every subtask aborts the open transactions of this prefix that a failed attempt
     began after the restored checkpoint (``transactions.lingering_to_abort``; ``InitProducerId`` on
     the id fences it and aborts its transaction), so ``read_committed`` readers are held back by a
     failed attempt for one restart at most (plus one check interval for what a task of it that
     lives on opens after this abort: the periodic look aborts that, see below).

  A transaction must stay open from its first record until its checkpoint completes and, after a
  failure, until the restored job commits it: ``transaction.timeout.ms`` (default here 15 min, the
  broker's default ``transaction.max.timeout.ms``) must be well above the checkpoint interval plus
  the time a restart takes, or the broker aborts the transaction and its records are lost.

The next transaction's producer is created and initialized (``init_transactions``, ~50-70 ms) in a
background thread while the current transaction runs, so a barrier costs the flush, one
DescribeTransactions round trip and no producer start. It may take ``max.block.ms`` (default 30 s)
before the writer fails; the end of input waits for it at most that long.

Hanging transactions (committed or aborted at the coordinator, never ended on a partition: a broker
restart can leave them, see ``transactions.hanging_repairs``) of the sink's prefix on its fixed topic
are looked for, and their missing marker written (``hanging.py``), when a writer starts, every
``set_hanging_transaction_check_interval`` seconds (default 5) while it runs, and at the end of input;
subtask ``i`` looks after the partitions ``p`` with ``p % parallelism == i``. A sink whose serializer
picks the topic per record has no fixed topic: it does not look for hanging transactions.

The same periodic and end-of-input looks (with or without a fixed topic) abort the open transactions
of the prefix numbered in an earlier attempt's range (``transactions.earlier_attempts_to_abort``): a
task of a failed attempt that lives on can open one after the restarted attempt's start-up abort
(step 4) has run, and it would hold back read_committed readers until ``transaction.timeout.ms``;
so a failed attempt holds them back for at most one restart plus one check interval.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from ...batch import to_rows
from ...config import Configuration, Options
from ..base import Sink, SinkWriter, connector_metrics
from ..delivery import DeliveryGuarantee
from . import hanging
from . import transactions as txn
from .protocol import KafkaProtocolError, TransactionClient
from .logs import with_logger
from .serialization import JsonRowSerializationSchema, KafkaRecordSerializationSchema, SimpleStringSchema

log = logging.getLogger("streamjob.kafka")

DEFAULT_TRANSACTION_TIMEOUT_MS = 15 * 60 * 1000
# How long a writer's start waits for the cluster to answer before failing with the bootstrap address.
CONNECT_TIMEOUT_S = 10.0
# How often a running exactly-once writer looks for hanging transactions of its prefix on its output
# partitions (``hanging.py``); 0 turns the periodic look off (it is still done at every start).
DEFAULT_HANGING_CHECK_INTERVAL_S = 5.0
# At the end of input, how long the last look waits for commits the coordinator is still ending.
FINAL_HANGING_CHECK_S = 15.0
# How long a transaction's producer may take to initialize (``init_transactions``: find the
# coordinator, InitProducerId) before the writer fails: the sink property ``max.block.ms``, Java's
# name for the same limit (Java's default is 60 s). 30 s rides out a broker restart (a single
# KRaft node is back in 5-15 s) without a failure; a longer outage fails the task, and the restart
# strategy decides how long the job waits for the broker. A failed producer is destroyed at once and
# each attempt uses ids of its own (``transactions.ATTEMPT_SPAN``), so a shorter limit cannot let a
# late InitProducerId fence a later transaction.
DEFAULT_MAX_BLOCK_MS = 30_000
# Properties the sink reads itself (librdkafka does not know them).
_SINK_ONLY = ("max.block.ms",)
# Properties of the client that are the sink's to set.
_RESERVED = ("transactional.id", "bootstrap.servers")


class KafkaSinkError(RuntimeError):
    """Records could not be written or committed; the message names the topic or transaction."""


class KafkaSink(Sink):
    """Writes records to Kafka; build it with ``KafkaSink.builder()``."""

    default_name = "KafkaSink"

    def __init__(self, bootstrap_servers: str, record_serializer: KafkaRecordSerializationSchema,
                 delivery_guarantee: DeliveryGuarantee = DeliveryGuarantee.NONE,
                 transactional_id_prefix: str | None = None, properties: dict[str, Any] | None = None,
                 hanging_check_interval_s: float = DEFAULT_HANGING_CHECK_INTERVAL_S):
        if not bootstrap_servers:
            raise ValueError("KafkaSink needs set_bootstrap_servers('host:port,...')")
        if record_serializer is None:
            raise ValueError("KafkaSink needs set_record_serializer(KafkaRecordSerializationSchema.builder()...build())")
        if not isinstance(delivery_guarantee, DeliveryGuarantee):
            raise TypeError(f"set_delivery_guarantee needs a DeliveryGuarantee, got {delivery_guarantee!r}")
        properties = {str(k): v for k, v in (properties or {}).items()}
        for key in _RESERVED:
            if key in properties:
                raise ValueError(f"KafkaSink: property {key!r} is set by the sink "
                                 "(set_bootstrap_servers / set_transactional_id_prefix)")
        self.bootstrap_servers = str(bootstrap_servers)
        self.record_serializer = record_serializer
        self.delivery_guarantee = delivery_guarantee
        self.exactly_once = delivery_guarantee is DeliveryGuarantee.EXACTLY_ONCE
        self.transactional_id_prefix = (txn.validate_prefix(transactional_id_prefix) if self.exactly_once
                                        else transactional_id_prefix)
        self.properties = properties
        try:
            self.max_block_s = float(properties.get("max.block.ms", DEFAULT_MAX_BLOCK_MS)) / 1000
        except (TypeError, ValueError):
            self.max_block_s = -1.0
        if not self.max_block_s > 0:
            raise ValueError(f"KafkaSink: max.block.ms must be a positive number of milliseconds, got "
                             f"{properties.get('max.block.ms')!r}")
        if not hanging_check_interval_s >= 0:
            raise ValueError(f"KafkaSink: the hanging transaction check interval must be >= 0 s, got "
                             f"{hanging_check_interval_s!r}")
        self.hanging_check_interval_s = float(hanging_check_interval_s)
        self.default_name = f"KafkaSink({delivery_guarantee.name})"
        self._client: TransactionClient | None = None

    @staticmethod
    def builder() -> "KafkaSinkBuilder":
        return KafkaSinkBuilder()

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_client"] = None  # sockets stay in the process that opened them
        return state

    # -- configuration ---------------------------------------------------------------------------
    def producer_config(self) -> dict[str, Any]:
        conf: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap_servers,
            # Java's default partitioner (murmur2 of the key), so keys land where Java producers put them.
            "partitioner": "murmur2_random",
            # Only failed records come back to Python (a callback per record costs ~2 us).
            "delivery.report.only.error": True,
        }
        if self.delivery_guarantee is DeliveryGuarantee.AT_LEAST_ONCE:
            conf["enable.idempotence"] = True  # the producer's own retries add no duplicates (Java's default)
        if self.exactly_once:
            conf["transaction.timeout.ms"] = DEFAULT_TRANSACTION_TIMEOUT_MS
        conf.update({k: v for k, v in self.properties.items() if k not in _SINK_ONLY})
        return conf

    def transaction_timeout_ms(self) -> int:
        return int(self.producer_config().get("transaction.timeout.ms", DEFAULT_TRANSACTION_TIMEOUT_MS))

    def transaction_client(self) -> TransactionClient:
        if self._client is None:
            self._client = TransactionClient(self.bootstrap_servers, self.properties)
        return self._client

    def check_cluster(self) -> None:
        """At a writer's start: the cluster answers and a fixed topic exists (or the broker creates it,
        as a producer's metadata request lets it), so a wrong address or topic fails the job within
        seconds instead of after librdkafka's ``message.timeout.ms``."""
        from confluent_kafka import KafkaException, Producer

        conf = {k: v for k, v in self.producer_config().items()
                if k not in ("transaction.timeout.ms", "enable.idempotence", "partitioner", "delivery.report.only.error")}
        producer = Producer(with_logger(conf))
        topic = self.record_serializer.topic
        try:
            metadata = producer.list_topics(topic, timeout=CONNECT_TIMEOUT_S)
        except KafkaException as e:
            producer.poll(0)  # librdkafka's log of why (connection refused...): once, through librdkafka_logger
            raise KafkaSinkError(f"KafkaSink: no Kafka broker of {self.bootstrap_servers} answered within "
                                 f"{CONNECT_TIMEOUT_S:.0f} s ({e.args[0].str() if e.args else e})") from None
        if topic is not None:
            meta = metadata.topics.get(topic)
            if meta is None or meta.error is not None:
                why = meta.error.str() if meta is not None and meta.error is not None else "not in the metadata"
                raise KafkaSinkError(f"KafkaSink: topic {topic!r} is not available on {self.bootstrap_servers}: {why}")

    # -- Sink ----------------------------------------------------------------------------------------
    def create_writer(self, ctx: Any) -> SinkWriter:
        if not self.exactly_once:
            return KafkaSinkWriter(self, ctx)
        conf = Configuration(ctx._job_parameters)
        if not conf.checkpointing_enabled() and not conf.is_batch():
            raise ValueError("KafkaSink with DeliveryGuarantee.EXACTLY_ONCE commits its transactions when checkpoints "
                             "complete: enable checkpointing (env.enable_checkpointing(ms)) or use AT_LEAST_ONCE")
        if conf.checkpointing_enabled():
            interval = conf.get_duration_ms(Options.CHECKPOINTING_INTERVAL)
            timeout = self.transaction_timeout_ms()
            if timeout <= interval:
                raise ValueError(f"KafkaSink: transaction.timeout.ms ({timeout} ms) must be well above the checkpoint "
                                 f"interval ({interval} ms): a transaction stays open from its first record until its "
                                 "checkpoint completes (and, after a failure, until the restored job commits it)")
        return TransactionalKafkaSinkWriter(self, ctx)

    def commit(self, committables: list) -> None:
        """Commit pre-committed transactions by identity (also those of a restored checkpoint)."""
        if not committables:
            return
        client = self.transaction_client()
        for c in committables:
            tid, pid, epoch = c["transactional_id"], c["producer_id"], c["epoch"]
            try:
                client.end_txn(tid, pid, epoch, commit=True)
            except KafkaProtocolError as e:
                if e.name not in txn.FENCED and e.name != "INVALID_TXN_STATE":
                    raise KafkaSinkError(f"KafkaSink({self.bootstrap_servers}): cannot commit transaction {tid}: {e}") from e
                # The identity is gone: committed long ago (a restore from an old checkpoint) or aborted
                # by the broker. Nothing can bring it back; as Flink does, say so loudly and go on.
                try:
                    desc = client.describe_transactions([tid]).get(tid)
                    now = None if desc is None else {"state": desc.state, "producer_id": desc.producer_id,
                                                     "producer_epoch": desc.producer_epoch}
                except KafkaProtocolError:
                    now = None
                log.error("KafkaSink(%s): %s", self.bootstrap_servers, txn.explain_failed_commit(c, e.name or "", now))


class KafkaSinkBuilder:
    """PyFlink's ``KafkaSink.builder()``."""

    def __init__(self) -> None:
        self._servers: str | None = None
        self._serializer: KafkaRecordSerializationSchema | None = None
        self._guarantee = DeliveryGuarantee.NONE
        self._prefix: str | None = None
        self._props: dict[str, Any] = {}
        self._hanging_check_s = DEFAULT_HANGING_CHECK_INTERVAL_S

    def set_bootstrap_servers(self, bootstrap_servers: str) -> "KafkaSinkBuilder":
        self._servers = bootstrap_servers
        return self

    def set_record_serializer(self, record_serializer: KafkaRecordSerializationSchema) -> "KafkaSinkBuilder":
        self._serializer = record_serializer
        return self

    def set_delivery_guarantee(self, delivery_guarantee: DeliveryGuarantee) -> "KafkaSinkBuilder":
        self._guarantee = delivery_guarantee
        return self

    def set_transactional_id_prefix(self, transactional_id_prefix: str) -> "KafkaSinkBuilder":
        self._prefix = transactional_id_prefix
        return self

    def set_property(self, key: str, value: Any) -> "KafkaSinkBuilder":
        """A producer property (librdkafka's names, which are Java's for the common ones), e.g.
        ``transaction.timeout.ms``, ``compression.type``, ``security.protocol``, ``sasl.*``, ``ssl.*``;
        and ``max.block.ms`` (Java's name, read by the sink): how long an EXACTLY_ONCE transaction's
        producer may take to initialize before the task fails (default 30000)."""
        self._props[str(key)] = value
        return self

    def set_hanging_transaction_check_interval(self, seconds: float) -> "KafkaSinkBuilder":
        """EXACTLY_ONCE: how often a running writer looks for (and repairs) transactions of its
        prefix that the coordinator completed but whose marker a partition never got (``hanging.py``),
        and aborts the open transactions of its prefix that a task of an earlier attempt began after
        this attempt started (default 5 s, 0: only when a writer starts and at the end of input)."""
        self._hanging_check_s = float(seconds)
        return self

    def set_kafka_producer_config(self, props: dict[str, Any]) -> "KafkaSinkBuilder":
        for k, v in dict(props).items():
            self.set_property(k, v)
        return self

    def build(self) -> KafkaSink:
        return KafkaSink(self._servers or "", self._serializer, self._guarantee, self._prefix,  # type: ignore[arg-type]
                         self._props, self._hanging_check_s)


# -- writers ----------------------------------------------------------------------------------------

class _Producing:
    """Serializing and producing records, and the errors librdkafka reports back."""

    sink: KafkaSink

    def _init_producing(self, ctx: Any) -> None:
        self._errors: list[str] = []
        # Flink's sink metric: records Kafka did not take (each also fails the job at the next check).
        self._out_errors = connector_metrics(ctx).counter("numRecordsOutErrors")
        self._partitions: dict[str, tuple[float, list[int]]] = {}
        self._serialize = self.sink.record_serializer.serialize

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None:
            self._out_errors.inc()
        if err is not None and len(self._errors) < 5:
            self._errors.append(f"topic {msg.topic()} partition {msg.partition()}: {err.str()}")

    def _check(self) -> None:
        if self._errors:
            errors, self._errors = self._errors, []
            raise KafkaSinkError(f"KafkaSink({self.sink.bootstrap_servers}) could not write records: "
                                 + "; ".join(errors))

    def _partitions_of(self, producer: Any, topic: str) -> list[int]:
        cached = self._partitions.get(topic)
        now = time.monotonic()
        if cached is None or now - cached[0] > 60:
            meta = producer.list_topics(topic, timeout=30).topics.get(topic)
            if meta is None or meta.error is not None or not meta.partitions:
                raise KafkaSinkError(f"KafkaSink({self.sink.bootstrap_servers}): no partitions for topic {topic!r}"
                                     f"{': ' + str(meta.error) if meta is not None and meta.error else ''}")
            cached = self._partitions[topic] = (now, sorted(meta.partitions))
        return cached[1]

    def _write(self, producer: Any, batch: Any) -> None:
        serializer = self.sink.record_serializer
        produce = producer.produce  # failed deliveries come to _on_delivery (the producer's own callback)
        if serializer.is_plain:  # one topic, no partitioner, no headers: the short loop
            topic, key_of, value_of = serializer.topic, serializer.key_function, serializer.value_function
            # An Arrow batch's JSON values are made all at once (a quarter of the columnar path's CPU).
            values = serializer.values_of_batch(batch)
            rows = to_rows(batch) if values is None or key_of is not None else []
            if values is None:
                values = map(value_of, rows)
            keys = map(key_of, rows) if key_of is not None else itertools.repeat(None)
            for key, value in zip(keys, values):  # key, then value, of each record in turn
                try:
                    produce(topic, value, key)
                except BufferError:
                    self._when_room(producer, lambda: produce(topic, value, key))
        else:
            partitions = (lambda t: self._partitions_of(producer, t)) if serializer.needs_partitions else None
            for element in to_rows(batch):
                topic, key, value, partition, headers = self._serialize(element, partitions)
                kwargs: dict[str, Any] = {}
                if partition is not None:
                    kwargs["partition"] = partition
                if headers:
                    kwargs["headers"] = headers
                try:
                    produce(topic, value, key, **kwargs)
                except BufferError:
                    self._when_room(producer, lambda: produce(topic, value, key, **kwargs))
        producer.poll(0)
        self._check()

    @staticmethod
    def _when_room(producer: Any, produce: Any) -> None:
        """The producer's queue is full: let it send, then retry (in order: one record at a time)."""
        while True:
            producer.poll(0.05)
            try:
                produce()
                return
            except BufferError:
                continue

    def _flush(self, producer: Any) -> None:
        """Until every record is acknowledged (or has failed: librdkafka gives up on a record after
        ``delivery.timeout.ms``, and reports it to ``_on_delivery``)."""
        while producer.flush(1.0) > 0:
            pass
        self._check()


class KafkaSinkWriter(_Producing, SinkWriter):
    """NONE and AT_LEAST_ONCE: one producer for the subtask's life."""

    def __init__(self, sink: KafkaSink, ctx: Any):
        from confluent_kafka import Producer

        self.sink = sink
        self._init_producing(ctx)
        self.producer = Producer(with_logger({**sink.producer_config(), "on_delivery": self._on_delivery}))

    def start(self) -> None:
        self.sink.check_cluster()

    def write(self, batch: Any) -> None:
        self._write(self.producer, batch)

    def prepare_commit(self) -> list:
        if self.sink.delivery_guarantee is DeliveryGuarantee.AT_LEAST_ONCE:
            self._flush(self.producer)  # the checkpoint covers these records only once Kafka has them
        return []

    def close(self) -> None:
        self._flush(self.producer)  # end of input: whatever the guarantee, nothing stays behind


class TransactionalKafkaSinkWriter(_Producing, SinkWriter):
    """EXACTLY_ONCE: one Kafka transaction per subtask per checkpoint (module docstring)."""

    def __init__(self, sink: KafkaSink, ctx: Any):
        self.sink = sink
        self._init_producing(ctx)
        self.prefix: str = sink.transactional_id_prefix  # type: ignore[assignment]
        self.subtask = ctx.get_index_of_this_subtask()
        self.parallelism = ctx.get_number_of_parallel_subtasks()
        self.counters: dict[int, int] = {}  # old subtask -> next number, from the restored checkpoint
        self.attempt = ctx.get_attempt_number()
        self.next_n = txn.first_number({}, self.attempt)
        self.current: tuple[str, Any] | None = None  # (transactional id, producer) of the open transaction
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="kafka-sink-producer")
        self._warm: Future | None = None  # (n, producer) ready for the next transaction
        self._started = False
        self._stop_checks = threading.Event()
        self._refusals_warned: set[str] = set()  # a refused repair is logged once, not at every look
        self._checker: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------------
    def restore_state(self, state: list) -> None:
        self.counters = txn.restored_counters(self.prefix, state)
        self.next_n = txn.first_number(self.counters, self.attempt)

    def start(self) -> None:
        """After the restore (or on a fresh start): abort what a failed attempt left open, then get
        the first producer ready."""
        self.sink.check_cluster()
        client = self.sink.transaction_client()
        try:
            open_ids = [t.transactional_id for t in client.list_transactions(("Ongoing",))]
        except KafkaProtocolError as e:
            raise KafkaSinkError(f"KafkaSink({self.sink.bootstrap_servers}): cannot list open transactions to abort "
                                 f"those of a failed attempt: {e}") from e
        for tid in txn.lingering_to_abort(open_ids, self.prefix, self.subtask, self.parallelism, self.counters):
            client.init_producer_id(tid, self.sink.transaction_timeout_ms())  # fences the id: its transaction aborts
            log.info("KafkaSink: aborted transaction %s of a failed attempt", tid)
        self._repair_hanging(client)
        self._started = True
        self._prewarm()
        if self.sink.hanging_check_interval_s > 0:
            self._checker = threading.Thread(target=self._check_hanging_periodically, daemon=True,
                                             name=f"kafka-sink-hanging-{self.subtask}")
            self._checker.start()

    # -- hanging transactions (hanging.py) ------------------------------------------------------------
    def _repair_hanging(self, client: TransactionClient, quiet: bool = False) -> hanging.RepairReport | None:
        """Write the markers the broker dropped for transactions of this prefix (a restore is when the
        restored checkpoint's transactions were just committed, and a broker restart is the usual cause
        of the failure it restores from)."""
        topic = self.sink.record_serializer.topic
        if topic is None:  # a topic per record: no fixed topic, nothing known to look at
            return None
        try:  # subtask i looks after the partitions p with p % parallelism == i
            return hanging.find_and_repair(client, [topic], self.prefix, (self.subtask, self.parallelism),
                                           self._refusals_warned)
        except KafkaProtocolError as e:  # the next look (or the next start) tries again
            (log.info if quiet else log.warning)("KafkaSink(%s): could not look for hanging transactions: %s",
                                                 self.sink.bootstrap_servers, e)
            return None

    def _abort_earlier_attempts(self, client: TransactionClient, quiet: bool = False) -> list[str]:
        """Abort what a task of an earlier attempt opened after this writer's start-up abort (its
        producer retrying on while the broker was away): Ongoing, so not hanging, but it would hold
        back read_committed readers until transaction.timeout.ms. The restored checkpoint's
        committables (committed before ``start``) and this attempt's ids are never among them."""
        try:
            return hanging.abort_earlier_attempts(client, self.prefix, self.subtask, self.parallelism, self.counters,
                                                  self.attempt, self.sink.transaction_timeout_ms())
        except KafkaProtocolError as e:  # the next look (or the next start) tries again
            (log.info if quiet else log.warning)("KafkaSink(%s): could not look for transactions of earlier "
                                                 "attempts: %s", self.sink.bootstrap_servers, e)
            return []

    def _check_hanging_periodically(self) -> None:
        # A client of its own: the task thread's is not thread-safe. A short timeout, so that close
        # is not held up by a look at a cluster that is away.
        with TransactionClient(self.sink.bootstrap_servers, self.sink.properties, CONNECT_TIMEOUT_S) as client:
            while not self._stop_checks.wait(self.sink.hanging_check_interval_s):
                # Abort first: an aborted transaction whose markers the broker drops is repaired by
                # the next look. A broker away: the task itself will say so.
                self._abort_earlier_attempts(client, quiet=True)
                self._repair_hanging(client, quiet=True)

    def _final_hanging_check(self) -> None:
        """At the end of input: abort what a task of an earlier attempt still holds open; the last
        commits (and those aborts) may still be ending at the coordinator (their markers on the way,
        or dropped): wait for that, then repair what hangs."""
        if not self._started:
            return
        deadline = time.monotonic() + FINAL_HANGING_CHECK_S
        with TransactionClient(self.sink.bootstrap_servers, self.sink.properties, CONNECT_TIMEOUT_S) as client:
            self._abort_earlier_attempts(client)
            if self.sink.record_serializer.topic is None:
                return
            while True:
                report = self._repair_hanging(client)
                if report is None or not report.in_progress or time.monotonic() > deadline:
                    return
                time.sleep(0.2)

    def _new_producer(self, n: int) -> tuple[int, Any]:
        from confluent_kafka import KafkaException, Producer

        conf = self.sink.producer_config()
        conf["transactional.id"] = txn.transactional_id(self.prefix, self.subtask, n)
        conf["on_delivery"] = self._on_delivery
        producer = Producer(with_logger(conf))
        try:
            producer.init_transactions(self.sink.max_block_s)
        except KafkaException as e:
            why = e.args[0].str() if e.args else str(e)
        else:
            return n, producer
        # Destroy it now: kept alive (by this frame, in the exception's traceback) librdkafka would go
        # on retrying InitProducerId and, once the broker answers, bump the id's epoch under a later
        # transaction that uses it.
        del producer
        raise KafkaSinkError(f"KafkaSink({self.sink.bootstrap_servers}): cannot initialize transactional id "
                             f"{conf['transactional.id']}: {why}")

    def _prewarm(self) -> None:
        if self._warm is None:
            self._warm = self._pool.submit(self._new_producer, self.next_n)

    def _begin(self) -> tuple[str, Any]:
        if not self._started:
            self.start()
        self._prewarm()
        n, producer = self._warm.result()  # type: ignore[union-attr]
        self._warm = None
        producer.begin_transaction()
        self.next_n = n + 1
        self.current = (txn.transactional_id(self.prefix, self.subtask, n), producer)
        self._prewarm()  # the next transaction's producer starts while this one runs
        return self.current

    # -- SinkWriter ------------------------------------------------------------------------------------
    def write(self, batch: Any) -> None:
        _, producer = self.current or self._begin()
        self._write(producer, batch)

    def prepare_commit(self) -> list:
        if self.current is None:
            return []  # nothing written since the last barrier: no transaction
        tid, producer = self.current
        self._flush(producer)
        try:
            desc = self.sink.transaction_client().describe_transactions([tid]).get(tid)
        except KafkaProtocolError as e:
            raise KafkaSinkError(f"KafkaSink({self.sink.bootstrap_servers}): cannot pre-commit transaction {tid}: {e}") from e
        if desc is None or desc.state != "Ongoing":
            raise KafkaSinkError(f"KafkaSink({self.sink.bootstrap_servers}): transaction {tid} is "
                                 f"{desc.state if desc else 'unknown to the coordinator'} at the checkpoint barrier, "
                                 "not Ongoing: its records cannot be committed (aborted after transaction.timeout.ms?)")
        self.current = None
        # Dropping the producer leaves its transaction open for the commit (librdkafka does not abort
        # on destroy); destroying it off the task thread saves the join of its threads.
        self._pool.submit(_drop, producer)
        del producer
        return [txn.committable(tid, desc.producer_id, desc.producer_epoch)]

    def snapshot_state(self) -> list:
        return [txn.writer_state(self.prefix, self.subtask, self.next_n)]

    def dispose(self) -> None:
        """After a failure (no close): the periodic checks stop (their thread ends within a look)."""
        self._stop_checks.set()

    def close(self) -> None:
        self._stop_checks.set()
        if self._checker is not None:
            self._checker.join()
            self._checker = None
        # After the end of input everything was pre-committed; a transaction still open here was
        # never part of a checkpoint: abort it rather than leave it to the timeout.
        if self.current is not None:
            _, producer = self.current
            self.current = None
            try:
                producer.abort_transaction(10)
            except Exception as e:  # noqa: BLE001 - the next start aborts it anyway
                log.warning("KafkaSink: could not abort an open transaction at close: %s", e)
        else:
            self._final_hanging_check()
        warm, self._warm = self._warm, None
        if warm is not None:
            warm.cancel()
        # A producer still initializing is waited for (at most max.block.ms), not abandoned: its id is
        # the checkpoint's next number, which a job started from this savepoint uses first, and a late
        # InitProducerId of an abandoned one would fence that job's transaction.
        self._pool.shutdown(wait=True)


def _drop(producer: Any) -> None:
    """Release the last reference (in the pool's thread): librdkafka's destroy runs here."""
    del producer


__all__ = ["DeliveryGuarantee", "JsonRowSerializationSchema", "KafkaRecordSerializationSchema", "KafkaSink",
           "KafkaSinkBuilder", "KafkaSinkError", "SimpleStringSchema"]
