"""``KafkaSource``: Kafka partitions as replayable splits (PyFlink's
``pyflink.datastream.connectors.kafka.KafkaSource``).

Each partition is a split whose position is the offset of its next record. Which subtask reads a
partition is a rule every subtask computes alike (``offsets.split_owner``, Flink's): at start, for
partitions found later by the periodic metadata check, and after a restore at any parallelism. So
the splits are *union* operator state: every subtask writes its own partitions and offsets, a
restored subtask sees all of them and takes those the rule gives it. A partition that is in no
checkpointed split is new: it is read from its earliest offset (as Flink reads partitions it
discovers), whichever subtask owns it.

A poll turns one run of messages of one partition into one batch, with the records' Kafka
timestamps as their event timestamps. Offsets are committed back to Kafka (with a group id) when a
checkpoint completes, for monitoring only: a restore starts from the checkpoint, never from them.

An undecodable value fails the job naming topic, partition and offset, or, when the user asks, goes
to a side output or a dead-letter topic with the same address (``dead_letters.py``).

Metrics are Flink's KafkaSource ones, on the operator's connector metric group (``api/metrics.py``):
``pendingRecords`` (``lag.py``: from librdkafka's statistics), ``numRecordsInErrors``,
``currentEmitEventTimeLag``, and in ``KafkaSourceReader``: ``commitsSucceeded``/``commitsFailed`` and per
partition (``topic.<t>.partition.<p>``) ``currentOffset`` and ``committedOffset``.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections import deque
from typing import Any

from ...batch import Stamped
from ..base import END, Source, SourceReader, batch_size_of, connector_metrics, share
from ..serialization import DeserializationSchema
from .dead_letters import DeadLetterTopic
from .lag import commit_results, partition_ends, pending_records
from .offsets import (
    KafkaOffsetsInitializer,
    OffsetResolutionError,
    TopicPartitionId,
    resolve,
    split_owner,
)
from .records import KafkaRecordDeserializationSchema
from .logs import librdkafka_logger

log = logging.getLogger("streamjob.kafka")

# Flink's KafkaSourceOptions: read by the source, never passed to the client.
DISCOVERY_INTERVAL = "partition.discovery.interval.ms"
COMMIT_ON_CHECKPOINT = "commit.offsets.on.checkpoint"
CLIENT_ID_PREFIX = "client.id.prefix"
REGISTER_METRICS = "register.consumer.metrics"
# How long the first metadata request, offset look-ups and discovery may take before a clear error.
METADATA_TIMEOUT = "streamjob.metadata.timeout.ms"
_SOURCE_OPTIONS = {DISCOVERY_INTERVAL, COMMIT_ON_CHECKPOINT, CLIENT_ID_PREFIX, REGISTER_METRICS, METADATA_TIMEOUT}
DEFAULT_DISCOVERY_MS = 300_000  # Flink's default: every 5 minutes (unbounded sources only)
DEFAULT_METADATA_TIMEOUT_MS = 10_000
# librdkafka's statistics (the ends of the partitions, for pendingRecords) every second unless the
# properties say otherwise; register.consumer.metrics=false turns them off.
DEFAULT_STATISTICS_MS = "1000"


class KafkaSourceError(RuntimeError):
    """The source cannot go on: the message names the bootstrap servers, topic, partition or offset."""


class KafkaSource(Source):
    default_name = "KafkaSource"

    def __init__(self, bootstrap_servers: str, topics: list[str] | None, topic_pattern: str | None,
                 group_id: str | None, starting: KafkaOffsetsInitializer, stopping: KafkaOffsetsInitializer | None,
                 deserializer: KafkaRecordDeserializationSchema, properties: dict[str, str],
                 failure_output: Any = None, dead_letters: DeadLetterTopic | None = None):
        self.bootstrap_servers = bootstrap_servers
        self.topics = topics
        self.topic_pattern = topic_pattern
        self.group_id = group_id
        self.starting = starting
        self.stopping = stopping
        self.deserializer = deserializer
        self.properties = properties
        self.failure_output = failure_output  # the OutputTag of undecodable records, or None: they fail the job
        self.dead_letters = dead_letters

    @staticmethod
    def builder() -> "KafkaSourceBuilder":
        return KafkaSourceBuilder()

    @property
    def side_output_tags(self) -> tuple[str, ...]:
        """The side outputs ``get_side_output`` may read of this source's stream."""
        return (self.failure_output.tag_id,) if self.failure_output is not None else ()

    def wire_side_outputs(self, stream: Any) -> None:
        """Called by ``from_source``: a dead-letter topic is a KafkaSink on the failure side output."""
        if self.dead_letters is None:
            return
        sink = self.dead_letters.sink(self.bootstrap_servers, self.group_id, self.properties)
        dlq = stream.get_side_output(self.failure_output).sink_to(sink)
        dlq.name(self.dead_letters.name or f"DeadLetters({self.dead_letters.topic})")
        if self.dead_letters.uid is not None:  # the restore finds the sink's pending transactions by it
            dlq.uid(self.dead_letters.uid)

    def is_bounded(self) -> bool:
        return self.stopping is not None

    def subscribes(self, topic: str) -> bool:
        if self.topics is not None:
            return topic in self.topics
        return re.fullmatch(self.topic_pattern, topic) is not None  # type: ignore[arg-type]

    def describe_topics(self) -> str:
        return ", ".join(self.topics) if self.topics is not None else f"pattern {self.topic_pattern!r}"

    def create_reader(self, ctx) -> "KafkaSourceReader":
        k, p = share(ctx)
        return KafkaSourceReader(self, k, p, batch_size_of(ctx), connector_metrics(ctx))


class KafkaSourceBuilder:
    """PyFlink's ``KafkaSource.builder()``."""

    def __init__(self) -> None:
        self._bootstrap: str | None = None
        self._topics: list[str] | None = None
        self._pattern: str | None = None
        self._group_id: str | None = None
        self._starting = KafkaOffsetsInitializer.earliest()
        self._stopping: KafkaOffsetsInitializer | None = None
        self._deserializer: KafkaRecordDeserializationSchema | None = None
        self._properties: dict[str, str] = {}
        self._failure_output: Any = None
        self._dead_letters: DeadLetterTopic | None = None

    def set_bootstrap_servers(self, bootstrap_servers: str) -> "KafkaSourceBuilder":
        self._bootstrap = bootstrap_servers
        return self

    def set_topics(self, *topics: str) -> "KafkaSourceBuilder":
        flat: list[str] = []
        for t in topics:
            flat.extend([t] if isinstance(t, str) else list(t))
        if not flat:
            raise ValueError("KafkaSource.set_topics needs at least one topic")
        self._topics, self._pattern = flat, None
        return self

    def set_topic_pattern(self, topic_pattern: str) -> "KafkaSourceBuilder":
        re.compile(topic_pattern)  # a bad pattern fails here, where the job is built
        self._pattern, self._topics = topic_pattern, None
        return self

    def set_group_id(self, group_id: str) -> "KafkaSourceBuilder":
        self._group_id = group_id
        return self

    def set_client_id_prefix(self, prefix: str) -> "KafkaSourceBuilder":
        return self.set_property(CLIENT_ID_PREFIX, prefix)

    def set_starting_offsets(self, starting_offsets_initializer: KafkaOffsetsInitializer) -> "KafkaSourceBuilder":
        _check_initializer(starting_offsets_initializer, "set_starting_offsets")
        self._starting = starting_offsets_initializer
        return self

    def set_bounded(self, stopping_offsets_initializer: KafkaOffsetsInitializer) -> "KafkaSourceBuilder":
        _check_initializer(stopping_offsets_initializer, "set_bounded")
        if stopping_offsets_initializer.kind == KafkaOffsetsInitializer.EARLIEST:
            raise ValueError("set_bounded(KafkaOffsetsInitializer.earliest()) would read nothing")
        self._stopping = stopping_offsets_initializer
        return self

    def set_value_only_deserializer(self, deserialization_schema: DeserializationSchema) -> "KafkaSourceBuilder":
        self._deserializer = KafkaRecordDeserializationSchema.value_only(deserialization_schema)
        return self

    def set_deserializer(self, record_deserializer: KafkaRecordDeserializationSchema) -> "KafkaSourceBuilder":
        if not isinstance(record_deserializer, KafkaRecordDeserializationSchema):
            raise TypeError("set_deserializer takes a KafkaRecordDeserializationSchema (value_only(...) or raw())")
        self._deserializer = record_deserializer
        return self

    def set_deserialization_failure_output(self, output_tag: Any) -> "KafkaSourceBuilder":
        """Messages the deserializer cannot decode go to the side output ``output_tag`` (read it with
        ``env.from_source(...).get_side_output(output_tag)``) instead of failing the job: dicts of
        ``topic, partition, offset, timestamp, key, value, headers`` and ``error``."""
        from ...api.functions import OutputTag

        if not isinstance(output_tag, OutputTag):
            raise TypeError(f"set_deserialization_failure_output needs an OutputTag, got {output_tag!r}")
        self._failure_output = output_tag
        return self

    def set_dead_letter_topic(self, topic: str, delivery_guarantee: Any = None,
                              transactional_id_prefix: str | None = None, uid: str | None = None,
                              name: str | None = None) -> "KafkaSourceBuilder":
        """Messages the deserializer cannot decode are written to ``topic`` (key, value and headers as
        they were, plus ``__streamjob.errors.topic/partition/offset/exception.class.name/
        exception.message`` headers, Kafka Connect's dead letter queue names) instead of failing the
        job. ``DeliveryGuarantee.EXACTLY_ONCE`` by default (it needs checkpointing, as any exactly-once
        KafkaSink); the transactional id prefix defaults to ``<group id>-dlq-<topic>``.

        The dead-letter sink is an operator of the job like any other: ``uid`` is its stable id (as
        ``sink_to(...).uid(...)``: a savepoint's pending dead-letter transactions are restored to it
        even after the job graph changed; without one it gets the generated id of its position) and
        ``name`` its name (default ``DeadLetters(<topic>)``)."""
        from ..delivery import DeliveryGuarantee
        from ...api.functions import OutputTag

        guarantee = DeliveryGuarantee.EXACTLY_ONCE if delivery_guarantee is None else delivery_guarantee
        self._dead_letters = DeadLetterTopic(topic, guarantee, transactional_id_prefix, uid, name)
        if self._failure_output is None:
            self._failure_output = OutputTag(f"dead-letters-{topic}")
        return self

    def set_property(self, key: str, value: Any) -> "KafkaSourceBuilder":
        """A librdkafka consumer property (``security.protocol``, ``sasl.mechanism``, ``sasl.username``,
        ``ssl.ca.location``, ``isolation.level``, ...), or one of Flink's source options
        (``partition.discovery.interval.ms``, ``commit.offsets.on.checkpoint``, ``client.id.prefix``)."""
        self._properties[str(key)] = str(value)
        return self

    def set_properties(self, props: dict) -> "KafkaSourceBuilder":
        for k, v in dict(props).items():
            self.set_property(k, v)
        return self

    def build(self) -> KafkaSource:
        if not self._bootstrap:
            raise ValueError("KafkaSource needs bootstrap servers: .set_bootstrap_servers('host:9092')")
        if self._topics is None and self._pattern is None:
            raise ValueError("KafkaSource needs topics: .set_topics('a', 'b') or .set_topic_pattern('a.*')")
        if self._deserializer is None:
            raise ValueError("KafkaSource needs a deserializer: .set_value_only_deserializer(SimpleStringSchema()) "
                             "(or JsonRowDeserializationSchema, or set_deserializer(KafkaRecordDeserializationSchema"
                             ".raw()) for whole records)")
        if self._starting.kind == KafkaOffsetsInitializer.COMMITTED and not self._group_id:
            raise ValueError("KafkaOffsetsInitializer.committed_offsets() needs .set_group_id(...)")
        if self._failure_output is not None and self._deserializer.value_schema is None:
            raise ValueError("KafkaSource: raw() records are never undecodable: a deserialization failure output "
                             "or dead-letter topic needs a value deserializer")
        return KafkaSource(self._bootstrap, self._topics, self._pattern, self._group_id, self._starting,
                           self._stopping, self._deserializer, dict(self._properties), self._failure_output,
                           self._dead_letters)


def _check_initializer(init: Any, where: str) -> None:
    if not isinstance(init, KafkaOffsetsInitializer):
        raise TypeError(f"{where} takes a KafkaOffsetsInitializer (earliest(), latest(), committed_offsets(), "
                        f"timestamp(ms), offsets({{...}})), got {init!r}")


class _Split:
    """One partition this reader owns: the offset of its next record (of records already handed
    out: batches waiting in the reader are not counted) and where it stops (bounded sources)."""

    __slots__ = ("position", "stop", "finished")

    def __init__(self, position: int, stop: int | None):
        self.position = position
        self.stop = stop
        self.finished = stop is not None and position >= stop


class KafkaSourceReader(SourceReader):
    union_state = True  # every restored reader sees every partition and keeps those split_owner gives it

    def __init__(self, source: KafkaSource, subtask: int, parallelism: int, batch_size: int, metrics: Any = None):
        self.source = source
        self.subtask = subtask
        self.parallelism = parallelism
        self.batch_size = batch_size
        props = source.properties
        self.metadata_timeout = float(props.get(METADATA_TIMEOUT, DEFAULT_METADATA_TIMEOUT_MS)) / 1000.0
        interval = float(props.get(DISCOVERY_INTERVAL, DEFAULT_DISCOVERY_MS))
        # Bounded sources read the partitions there are at their start, as Flink's.
        self.discovery_interval = interval / 1000.0 if interval > 0 and not source.is_bounded() else None
        self.commit_offsets = bool(source.group_id) and props.get(COMMIT_ON_CHECKPOINT, "true").lower() == "true"
        self.consumer: Any = None
        self.splits: dict[TopicPartitionId, _Split] = {}
        self.known: set[TopicPartitionId] = set()  # partitions whose owner is settled (mine or another's)
        self.restored: dict[TopicPartitionId, tuple[int, int | None]] | None = None
        self.ready: deque = deque()  # ("batch", tp, batch, ts, next position) | ("eof", tp, offset)
        self.turn: TopicPartitionId | None = None
        self.next_discovery = 0.0
        self.fatal: str | None = None
        self.commits_in_flight = 0
        self.one_topic = True  # every split of this reader is of one topic
        self.last_error: str | None = None
        tag = source.failure_output
        self.failure_tag: str | None = tag.tag_id if tag is not None else None
        self.side: dict | None = None  # undecodable records of the batch last handed out, for its side output
        # Flink's KafkaSource metrics: pendingRecords (per subtask), currentOffset and committedOffset
        # (per partition, in the KafkaSourceReader.topic.<t>.partition.<p> group), commit counts.
        self.statistics = props.get(REGISTER_METRICS, "true").lower() != "false"
        self.read_committed = props.get("isolation.level", "read_committed") != "read_uncommitted"
        self.ends: dict[TopicPartitionId, int] = {}  # the end of each partition, as librdkafka last saw it
        self.committed: dict[TopicPartitionId, int] = {}  # offsets committed back on checkpoint completion
        self.metrics = metrics if metrics is not None else connector_metrics(None)
        self.metrics.gauge("pendingRecords", self.pending_records)
        # FLIP-33's: records that could not be decoded (sent to the failure side output), and the age of
        # the last record handed out when it was (wall clock minus its Kafka timestamp, ms).
        self.records_in_errors = self.metrics.counter("numRecordsInErrors")
        self.emit_lag_ms: float | None = None
        self.metrics.gauge("currentEmitEventTimeLag", lambda: self.emit_lag_ms)
        self.reader_metrics = self.metrics.add_group("KafkaSourceReader")
        self.commits_succeeded = self.reader_metrics.counter("commitsSucceeded")
        self.commits_failed = self.reader_metrics.counter("commitsFailed")

    # -- opening -----------------------------------------------------------------

    def _consumer_config(self) -> dict:
        src = self.source
        conf: dict[str, Any] = {
            "bootstrap.servers": src.bootstrap_servers,
            # librdkafka needs a group even for assigned partitions; without the user's, one that never commits.
            "group.id": src.group_id or f"streamjob-source-{uuid.uuid4().hex[:12]}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            # The end of a partition is news: a bounded read ends there, and the position moves past
            # trailing transaction markers (read_committed, librdkafka's default, never delivers them).
            "enable.partition.eof": True,
            "auto.offset.reset": src.starting.auto_offset_reset(),
            "client.id": f"{src.properties.get(CLIENT_ID_PREFIX, 'streamjob-kafka-source')}-{self.subtask}",
            "error_cb": self._on_error,
            "on_commit": self._on_commit,
            "logger": librdkafka_logger(),  # librdkafka's lines, each at most once per 10 s (logs.py)
        }
        if self.statistics:
            conf["statistics.interval.ms"] = DEFAULT_STATISTICS_MS
            conf["stats_cb"] = self._on_statistics
        conf.update((k, v) for k, v in src.properties.items() if k not in _SOURCE_OPTIONS)
        return conf

    def _on_commit(self, err: Any, partitions: list) -> None:
        self.commits_in_flight -= 1
        done, failed = commit_results(partitions)
        self.committed.update(done)
        if err is not None or failed:
            self.commits_failed.inc()
            log.warning("KafkaSource subtask %d: committing offsets failed: %s", self.subtask,
                        err or ", ".join(f"{tp.topic}[{tp.partition}]: {tp.error}" for tp in partitions if tp.error))
        else:
            self.commits_succeeded.inc()

    def _on_statistics(self, statistics: str) -> None:
        """librdkafka's statistics, served by the reader's polls (its own thread): the partitions' ends."""
        try:
            self.ends.update(partition_ends(statistics, self.read_committed))
        except (ValueError, TypeError, AttributeError) as e:  # a statistics format we do not know: no lag, no failure
            log.warning("KafkaSource subtask %d: cannot read librdkafka's statistics: %s", self.subtask, e)
            self.statistics = False

    def pending_records(self) -> int | None:
        """Flink's pendingRecords: records of this subtask's partitions not yet handed out (``lag.py``)."""
        if not self.statistics:
            return None
        return pending_records(((tp, s.position, s.stop, s.finished) for tp, s in self.splits.items()), self.ends)

    def _track(self, tp: TopicPartitionId) -> None:
        """The per-partition gauges of a split (Flink's currentOffset and committedOffset)."""
        group = self.reader_metrics.add_group("topic", tp[0]).add_group("partition", str(tp[1]))
        group.gauge("currentOffset", lambda: self.splits[tp].position if tp in self.splits else None)
        group.gauge("committedOffset", lambda: self.committed.get(tp))

    def _on_error(self, err: Any) -> None:
        self.last_error = err.str()
        if err.fatal():
            self.fatal = err.str()

    def _ensure_open(self) -> None:
        if self.consumer is not None:
            return
        from confluent_kafka import Consumer, KafkaException

        try:
            self.consumer = Consumer(self._consumer_config())
        except (KafkaException, ValueError, TypeError) as e:
            raise KafkaSourceError(f"KafkaSource({self.source.bootstrap_servers}): cannot create the consumer: "
                                   f"{e}") from e
        try:
            self._open()
        except BaseException:
            consumer, self.consumer = self.consumer, None  # not half open: the next call starts over
            consumer.close()
            raise

    def _open(self) -> None:
        topics = self._list_partitions(first=True)
        restored = self.restored or {}
        fresh = self.restored is None
        self.known = set(restored)
        mine_restored = {tp: v for tp, v in restored.items()
                         if self.source.subscribes(tp[0]) and self._owns(tp)}
        # A job restored bounded from an unbounded one's savepoint: its partitions stop where the
        # bounded source says (resolved now, and kept in the splits from here on).
        unbounded = [tp for tp, (_, stop) in mine_restored.items() if stop is None]
        stops = self._resolve(self.source.stopping, unbounded) if self.source.stopping is not None else {}
        for tp, (position, stop) in mine_restored.items():
            self.splits[tp] = _Split(position, stop if stop is not None else stops.get(tp))
            self._track(tp)
        # Partitions in no checkpointed split: at a fresh start by the starting offsets, after a
        # restore they are new since the checkpoint, so from the earliest offset.
        new = [tp for tp in topics if tp not in self.known]
        self._take(new, self.source.starting if fresh else KafkaOffsetsInitializer.earliest())
        self._assign([tp for tp in mine_restored])
        if self.discovery_interval is not None:
            self.next_discovery = time.monotonic() + self.discovery_interval

    def _owns(self, tp: TopicPartitionId) -> bool:
        return split_owner(tp[0], tp[1], self.parallelism) == self.subtask

    def _list_partitions(self, first: bool = False) -> list[TopicPartitionId]:
        """Every partition of the subscribed topics. The first listing fails clearly: an unreachable
        bootstrap address or a missing topic is an error within seconds, not a hang."""
        from confluent_kafka import KafkaException

        src = self.source
        try:
            md = self.consumer.list_topics(timeout=self.metadata_timeout)
        except KafkaException as e:
            if not first:
                raise
            detail = self.last_error or e.args[0].str()
            raise KafkaSourceError(f"KafkaSource: cannot reach the Kafka brokers at {src.bootstrap_servers} "
                                   f"within {self.metadata_timeout:.0f} s ({detail})") from e
        if first and src.topics is not None:
            missing = [t for t in src.topics if t not in md.topics or md.topics[t].error is not None
                       and not md.topics[t].partitions]
            if missing:
                there = sorted(t for t in md.topics if not t.startswith("__"))
                raise KafkaSourceError(f"KafkaSource: topic(s) {', '.join(missing)} do not exist on "
                                       f"{src.bootstrap_servers} (topics there: {', '.join(there) or 'none'})")
        return sorted((t, p) for t, meta in md.topics.items() if src.subscribes(t) for p in meta.partitions)

    def _take(self, partitions: list[TopicPartitionId], starting: KafkaOffsetsInitializer) -> None:
        """Settle the owner of newly seen partitions; resolve and assign the ones that are mine."""
        self.known.update(partitions)
        mine = [tp for tp in partitions if self._owns(tp)]
        if not mine:
            return
        src = self.source
        starts = self._resolve(starting, mine)
        stops = self._resolve(src.stopping, mine) if src.stopping is not None else {}
        for tp in mine:
            self.splits[tp] = _Split(starts[tp], stops.get(tp))
            self._track(tp)
            log.info("KafkaSource subtask %d reads topic %s partition %d from offset %d%s", self.subtask, tp[0],
                     tp[1], starts[tp], f" to {stops[tp]}" if tp in stops else "")
        self._assign(mine)

    def _resolve(self, init: KafkaOffsetsInitializer, partitions: list[TopicPartitionId]) -> dict:
        src = self.source
        try:
            return resolve(init, partitions, self.consumer, src.group_id, self.metadata_timeout)
        except OffsetResolutionError as e:
            raise KafkaSourceError(f"KafkaSource({src.bootstrap_servers}): {e}") from e
        except Exception as e:  # KafkaException: the broker did not answer in time
            raise KafkaSourceError(f"KafkaSource({src.bootstrap_servers}): cannot look up the offsets of "
                                   f"{_names(partitions)}: {e}") from e

    def _assign(self, partitions: list[TopicPartitionId]) -> None:
        from confluent_kafka import TopicPartition

        self.one_topic = len({t for t, _ in self.splits}) <= 1

        live = [TopicPartition(t, p, self.splits[(t, p)].position) for t, p in partitions
                if not self.splits[(t, p)].finished]
        if live:
            self.consumer.incremental_assign(live)

    def _discover(self, now: float) -> None:
        self.next_discovery = now + self.discovery_interval  # type: ignore[operator]
        try:
            partitions = self._list_partitions()
        except Exception as e:  # the broker is away: the next check tries again
            log.warning("KafkaSource subtask %d: partition discovery failed: %s", self.subtask, e)
            return
        new = [tp for tp in partitions if tp not in self.known]
        if new:
            self._take(new, KafkaOffsetsInitializer.earliest())

    # -- reading -----------------------------------------------------------------

    def poll(self):
        self._ensure_open()
        batch = self._next_ready()
        if batch is not None:
            return batch
        if self.fatal is not None:
            raise KafkaSourceError(f"KafkaSource({self.source.bootstrap_servers}): fatal client error: {self.fatal}")
        if self.discovery_interval is not None:
            now = time.monotonic()
            if now >= self.next_discovery:
                self._discover(now)
        if not any(not s.finished for s in self.splits.values()):
            return END if self.source.is_bounded() else None
        messages = self.consumer.consume(self.batch_size, 0)
        if not messages:
            return None
        self._ingest(messages)
        return self._next_ready()

    def _ingest(self, messages: list) -> None:
        """Runs of consecutive messages of one partition become one batch each. (This loop is the
        only Python per message besides decoding: with one topic it compares partitions only.)"""
        one_topic = self.one_topic
        start = 0
        key: Any = None
        for i, m in enumerate(messages):
            err = m.error()
            if err is not None:
                if key is not None:
                    self._run(self._tp(key, messages[start]), messages[start:i])
                key, start = None, i + 1
                self._on_message_error(m, err)
                continue
            k = m.partition() if one_topic else (m.topic(), m.partition())
            if k != key:
                if key is not None:
                    self._run(self._tp(key, messages[start]), messages[start:i])
                key, start = k, i
        if key is not None:
            self._run(self._tp(key, messages[start]), messages[start:])

    def _tp(self, key: Any, first: Any) -> TopicPartitionId:
        return (first.topic(), key) if self.one_topic else key

    def _run(self, tp: TopicPartitionId, run: list) -> None:
        split = self.splits.get(tp)
        if split is None or split.finished:
            return  # fetched before the partition was let go
        if split.stop is not None and run[-1].offset() >= split.stop:
            run = [m for m in run if m.offset() < split.stop]
            if not run:
                self.ready.append(("eof", tp, split.stop))
                return
        next_position = run[-1].offset() + 1
        failures: list | None = [] if self.failure_tag is not None else None
        batch, ts = self.source.deserializer.deserialize(run, tp[0], tp[1], failures)
        self.ready.append(("batch", tp, batch, ts, next_position, failures or None))

    def _on_message_error(self, m: Any, err: Any) -> None:
        from confluent_kafka import KafkaError

        code = err.code()
        if code == KafkaError._PARTITION_EOF:
            self.ready.append(("eof", (m.topic(), m.partition()), m.offset()))
            return
        where = f"topic {m.topic()}" + (f" partition {m.partition()}" if m.partition() is not None and
                                        m.partition() >= 0 else "")
        raise KafkaSourceError(f"KafkaSource({self.source.bootstrap_servers}): {where}: {err.str()}")

    def _next_ready(self):
        """The next batch to hand out; positions (and the end of bounded partitions) move as they go."""
        while self.ready:
            item = self.ready.popleft()
            split = self.splits.get(item[1])
            if split is None or split.finished:
                continue
            if item[0] == "eof":
                end = item[2] if split.stop is None else min(item[2], split.stop)
                split.position = max(split.position, end)
                self._check_finished(item[1], split)
                continue
            _, tp, batch, ts, next_position, failures = item
            split.position = next_position
            self._check_finished(tp, split)
            if failures:  # handed out with the batch (even an empty one): the position moved past them
                self.side = {self.failure_tag: (failures, [r["timestamp"] for r in failures])}
                self.records_in_errors.inc(len(failures))
            if len(ts):
                self.emit_lag_ms = time.time() * 1000.0 - float(ts[-1])
            if len(ts) or failures:  # (a run of tombstones only has no records)
                self.turn = tp
                return Stamped(batch, ts)
        return None

    def take_side_outputs(self) -> dict | None:
        side, self.side = self.side, None
        return side

    def _check_finished(self, tp: TopicPartitionId, split: _Split) -> None:
        if split.stop is not None and split.position >= split.stop and not split.finished:
            from confluent_kafka import TopicPartition

            split.finished = True
            self.consumer.incremental_unassign([TopicPartition(*tp)])

    # -- splits, checkpoints -------------------------------------------------------

    def current_split(self) -> Any:
        return self.turn

    def open_splits(self) -> list | None:
        if self.consumer is None:
            return None  # not known before the first poll
        return [tp for tp, s in self.splits.items() if not s.finished]

    def snapshot_state(self) -> list:
        # Opened first, so a checkpoint before the first poll holds resolved offsets, not "latest".
        self._ensure_open()
        return [[tp[0], tp[1], s.position, s.stop] for tp, s in sorted(self.splits.items())]

    def restore_state(self, splits: list) -> None:
        restored: dict[TopicPartitionId, tuple[int, int | None]] = {}
        for topic, partition, position, stop in splits:
            restored[(str(topic), int(partition))] = (int(position), None if stop is None else int(stop))
        self.restored = restored

    def notify_checkpoint_complete(self, checkpoint_id: int, splits: list | None) -> None:
        """For lag monitoring (the consumer group's committed offsets); never read back by a restore."""
        if not self.commit_offsets or not splits or self.consumer is None:
            return
        from confluent_kafka import KafkaException, TopicPartition

        offsets = [TopicPartition(t, p, pos) for t, p, pos, _ in splits]
        try:
            self.consumer.commit(offsets=offsets, asynchronous=True)
            self.commits_in_flight += 1
        except KafkaException as e:
            log.warning("KafkaSource subtask %d: committing offsets of checkpoint %d failed: %s", self.subtask,
                        checkpoint_id, e)

    def wakeup_at(self, now: float) -> float:
        wake = now + 0.005
        if self.discovery_interval is not None:
            wake = min(wake, self.next_discovery)
        return wake

    def close(self) -> None:
        if self.consumer is not None:
            consumer, self.consumer = self.consumer, None
            # The offsets of the last checkpoint (a final savepoint's) reach the group before the
            # consumer goes: commits are asynchronous and close() would drop one still in flight.
            deadline = time.monotonic() + 3.0
            while self.commits_in_flight > 0 and time.monotonic() < deadline:
                consumer.poll(0.05)  # serves the commit callbacks (what it fetches is dropped: closing)
            consumer.close()


def _names(partitions: list[TopicPartitionId]) -> str:
    return ", ".join(f"{t}[{p}]" for t, p in partitions)
