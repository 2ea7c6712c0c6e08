"""The exactly-once Kafka sink's decisions, without a broker: ids, restored counters, which open
transactions a starting subtask aborts (at any old or new parallelism), failed-commit messages,
the wire encodings, and the builder's checks."""

from __future__ import annotations

import json
import pickle

import pytest

from streamjob.runtime.connectors import (DeliveryGuarantee, JsonRowSerializationSchema, KafkaRecordSerializationSchema,
                                          KafkaSink, SimpleStringSchema)
from streamjob.runtime.connectors.kafka import transactions as txn
from streamjob.runtime.connectors.kafka.protocol import Reader, Writer, _parse_servers
from streamjob.runtime import Row, Types


def test_ids_name_prefix_subtask_and_number_and_parse_back_only_for_that_prefix():
    assert txn.transactional_id("job-a", 2, 17) == "job-a-2-17"
    assert txn.parse_transactional_id("job-a", "job-a-2-17") == (2, 17)
    assert txn.parse_transactional_id("job", "job-a-2-17") is None  # another sink's prefix
    assert txn.parse_transactional_id("job-a", "job-a-1-2-17") is None  # prefix "job-a-1"
    assert txn.parse_transactional_id("job-a", "job-a-2-x") is None
    with pytest.raises(ValueError, match="set_transactional_id_prefix"):
        txn.validate_prefix(None)
    with pytest.raises(ValueError, match="letters, digits"):
        txn.validate_prefix("has space")


def test_a_restored_subtask_numbers_above_every_old_subtask():
    states = [txn.writer_state("p", 0, 5), txn.writer_state("p", 1, 9), txn.writer_state("other", 2, 99)]
    counters = txn.restored_counters("p", states)
    assert counters == {0: 5, 1: 9}
    assert txn.first_number(counters) == 9
    assert txn.first_number({}) == 0


def test_each_attempt_numbers_in_a_range_no_earlier_attempt_used():
    """A producer of a failed attempt that finishes initializing late must not fence a transaction of
    the next attempt: the attempts' transactional ids never meet."""
    span = txn.ATTEMPT_SPAN
    assert txn.first_number({}, 1) == span
    assert txn.first_number({0: 7}, 2) == 2 * span
    assert txn.first_number({0: span + 40}, 1) == span + 40  # restored above its own range's start
    first = [txn.first_number({}, a) for a in range(4)]
    assert all(b - a >= span for a, b in zip(first, first[1:]))


def test_lingering_transactions_of_a_failed_attempt_are_aborted_by_exactly_one_subtask():
    counters = {0: 5, 1: 9, 2: 7}  # restored from a checkpoint taken at parallelism 3
    open_ids = ["p-0-4",  # a committable of the restored checkpoint: its holder commits it
                "p-0-9", "p-0-10",  # begun by the failed attempt after the checkpoint
                "p-1-9",
                "p-2-6", "p-2-7",
                "p-5-0",  # from an attempt at parallelism 6
                "q-0-50", "p-x-1"]  # not this sink's
    for p in (1, 2, 3, 4):
        aborted = [txn.lingering_to_abort(open_ids, "p", i, p, counters) for i in range(p)]
        flat = sorted(t for a in aborted for t in a)
        assert flat == ["p-0-10", "p-0-9", "p-1-9", "p-2-7", "p-5-0"]  # each once, whatever the parallelism
        assert "p-0-4" not in flat and "p-2-6" not in flat
    assert txn.lingering_to_abort(open_ids, "p", 0, 3, counters) == ["p-0-9", "p-0-10"]  # in number order
    # A fresh start (no checkpoint) aborts every open transaction of the prefix.
    assert txn.lingering_to_abort(["p-0-0", "p-1-3"], "p", 0, 1, {}) == ["p-0-0", "p-1-3"]


def test_a_failed_commit_is_explained():
    c = txn.committable("p-0-3", 7, 2)
    timed_out = txn.explain_failed_commit(c, "PRODUCER_FENCED", {"state": "CompleteAbort", "producer_id": 7,
                                                                 "producer_epoch": 3})
    assert "transaction.timeout.ms" in timed_out and "p-0-3" in timed_out and "lost" in timed_out
    reused = txn.explain_failed_commit(c, "PRODUCER_FENCED", {"state": "Empty", "producer_id": 7, "producer_epoch": 9})
    assert "older checkpoint" in reused
    assert "no longer knows" in txn.explain_failed_commit(c, "INVALID_PRODUCER_ID_MAPPING", None)


def test_flexible_and_classic_encodings_round_trip():
    w = Writer(True).string("héllo").string(None).int16(-2).int32(70000).int64(-5).array([1, 2], Writer.int32).tags()
    r = Reader(w.build(), True)
    assert (r.string(), r.string(), r.int16(), r.int32(), r.int64(), r.array(Reader.int32), r.tags()) == \
        ("héllo", None, -2, 70000, -5, [1, 2], {})
    w = Writer(False).string("abc").bytes_(b"\x00\x01").array(["x"], Writer.string)
    r = Reader(w.build(), False)
    assert (r.string(), r.bytes_(), r.array(Reader.string)) == ("abc", b"\x00\x01", ["x"])
    big = Writer(True).string("x" * 300).build()  # a length that needs two varint bytes
    assert Reader(big, True).string() == "x" * 300
    assert _parse_servers("SASL_SSL://a:9092, b:9093") == [("a", 9092), ("b", 9093)]
    with pytest.raises(ValueError, match="host:port"):
        _parse_servers("nohost")


def _schema(**kw):
    b = KafkaRecordSerializationSchema.builder().set_topic("t").set_value_serialization_schema(
        kw.pop("value", JsonRowSerializationSchema.builder().build()))
    for k, v in kw.items():
        getattr(b, k)(v)
    return b.build()


def test_the_record_serialization_schema_survives_pickling_and_names_bad_input():
    schema = pickle.loads(pickle.dumps(_schema(set_key_serialization_schema=SimpleStringSchema())))
    topic, key, value, partition, headers = schema.serialize({"a": 1})
    assert (topic, key, value, partition, headers) == ("t", b"{'a': 1}", b'{"a":1}', None, None)
    named = JsonRowSerializationSchema.builder().with_type_info(Types.ROW_NAMED(["x", "y"], [Types.INT(), Types.STRING()])).build()
    assert named.serialize((1, "b")) == b'{"x":1,"y":"b"}'
    assert named.serialize(Row(x=2, y="c")) == b'{"x":2,"y":"c"}'
    with pytest.raises(ValueError, match="cannot write"):
        JsonRowSerializationSchema().serialize({"s": {1, 2}})
    with pytest.raises(ValueError, match="exactly one of set_topic"):
        KafkaRecordSerializationSchema.builder().set_value_serialization_schema(SimpleStringSchema()).build()
    with pytest.raises(ValueError, match="set_value_serialization_schema"):
        KafkaRecordSerializationSchema.builder().set_topic("t").build()
    selector = KafkaRecordSerializationSchema.builder().set_topic_selector(lambda r: None) \
        .set_value_serialization_schema(SimpleStringSchema()).build()
    with pytest.raises(ValueError, match="topic selector returned None"):
        selector.serialize("x")


def test_json_values_of_a_whole_arrow_batch_are_the_bytes_of_each_records_serialize():
    import random

    import pyarrow as pa

    rng = random.Random(11)
    chars = ["a", '"', "\\", " ", "é", "😀", "\x7f", "\n", "\x01"]
    schema = JsonRowSerializationSchema.builder().build()
    fast_batches = 0
    for n in range(1, 60, 3):
        text = ["".join(rng.choice(chars if n % 2 else chars[:7]) for _ in range(rng.randint(0, 4))) for _ in range(n)]
        columns = {
            "i": pa.array([rng.choice([None, -2**63, 2**63 - 1, rng.randint(-9, 9)]) for _ in range(n)], pa.int64()),
            "u": pa.array([rng.randint(0, 2**64 - 1) for _ in range(n)], pa.uint64()),
            "b": [rng.choice([None, True, False]) for _ in range(n)],
            'quo"té': [rng.choice([None, t]) for t in text],
            "none": pa.nulls(n),
        }
        if n % 3 == 0:
            columns["f"] = [rng.choice([None, 0.1, 1.0, 1e20]) for _ in range(n)]
        batch = pa.RecordBatch.from_pydict(columns).slice(n // 3)  # an offset into the buffers too
        fast = schema.serialize_batch(batch)
        one_by_one = [schema.serialize(r) for r in batch.to_pylist()]
        assert one_by_one == [json.dumps(r, separators=(",", ":"), ensure_ascii=False).encode() for r in batch.to_pylist()]
        if fast is not None:
            fast_batches += 1
            assert fast == one_by_one
        else:  # only a float column or a character the encoder escapes makes it go row by row
            assert "f" in columns or any(c in t for t in text for c in ("\n", "\x01"))
    assert fast_batches >= 5
    assert schema.serialize_batch([{"a": 1}]) is None  # rows, not a batch
    assert schema.serialize("s") == b'"s"' and schema.serialize(None) == b"null"
    looped: dict = {}
    looped["self"] = looped
    with pytest.raises(ValueError, match="cannot write"):
        schema.serialize(looped)

    class Upper(JsonRowSerializationSchema):  # a subclass's own serialize is kept
        def serialize(self, element):
            return super().serialize(element).upper()

    assert Upper().serialize_batch(pa.RecordBatch.from_pylist([{"a": "x"}])) is None


def test_the_sink_builder_checks_what_it_is_given():
    schema = _schema()
    with pytest.raises(ValueError, match="set_transactional_id_prefix"):
        KafkaSink.builder().set_bootstrap_servers("h:1").set_record_serializer(schema) \
            .set_delivery_guarantee(DeliveryGuarantee.EXACTLY_ONCE).build()
    with pytest.raises(ValueError, match="transactional.id"):
        KafkaSink.builder().set_bootstrap_servers("h:1").set_record_serializer(schema) \
            .set_property("transactional.id", "x").build()
    with pytest.raises(ValueError, match="set_bootstrap_servers"):
        KafkaSink.builder().set_record_serializer(schema).build()
    sink = (KafkaSink.builder().set_bootstrap_servers("h:1").set_record_serializer(schema)
            .set_delivery_guarantee(DeliveryGuarantee.EXACTLY_ONCE).set_transactional_id_prefix("app")
            .set_property("transaction.timeout.ms", 60000).build())
    assert sink.exactly_once and sink.transaction_timeout_ms() == 60000
    assert pickle.loads(pickle.dumps(sink)).producer_config()["transaction.timeout.ms"] == 60000
    # max.block.ms (Java's name) is the sink's own: librdkafka does not know it, so it is not passed on.
    assert sink.max_block_s == 30.0 and sink.hanging_check_interval_s == 5.0
    quick = (KafkaSink.builder().set_bootstrap_servers("h:1").set_record_serializer(schema)
             .set_property("max.block.ms", "2500").set_hanging_transaction_check_interval(0).build())
    assert quick.max_block_s == 2.5 and "max.block.ms" not in quick.producer_config()
    assert quick.hanging_check_interval_s == 0.0
    for bad in (0, "soon"):
        with pytest.raises(ValueError, match="max.block.ms must be a positive number"):
            KafkaSink.builder().set_bootstrap_servers("h:1").set_record_serializer(schema) \
                .set_property("max.block.ms", bad).build()
    with pytest.raises(ValueError, match="check interval must be >= 0"):
        KafkaSink.builder().set_bootstrap_servers("h:1").set_record_serializer(schema) \
            .set_hanging_transaction_check_interval(-1).build()


def test_hanging_transactions_get_the_marker_their_coordinator_decided_and_only_those_of_the_prefix():
    t0, t1 = ("out", 0), ("out", 1)
    open_on = {t0: [(10, 0, 3), (11, 2, 3), (12, 0, 3), (13, 0, 3), (14, 1, 3)],
               t1: [(10, 0, 3), (15, 0, 4), (16, 5, 3)]}
    coordinator = {
        10: ("job-0-7", "CompleteCommit", 0),  # committed, marker dropped on both partitions: commit both
        11: ("job-1-9", "CompleteAbort", 3),  # aborted on timeout (epoch bumped): abort
        12: ("job-0-8", "Ongoing", 0),  # live: left alone
        13: ("other-0-1", "CompleteCommit", 0),  # another prefix: left alone
        14: ("job-0-9", "CompleteCommit", 2),  # used again after it: not this transaction, warn
        15: ("job-2-1", "PrepareCommit", 0),  # markers on the way: left alone
        16: ("job-3-1", "Empty", 6),  # fenced by InitProducerId (which aborts): abort
    }
    repairs, warnings = txn.hanging_repairs(open_on, coordinator, "job")
    got = sorted((r["transactional_id"], r["producer_id"], r["epoch"], r["commit"], r["coordinator_epoch"],
                  r["partitions"]) for r in repairs)
    assert got == [("job-0-7", 10, 0, True, 3, [t0, t1]), ("job-1-9", 11, 2, False, 3, [t0]),
                   ("job-3-1", 16, 5, False, 3, [t1])]
    assert len(warnings) == 1 and "job-0-9" in warnings[0] and "CompleteCommit with epoch 2" in warnings[0]
    assert txn.hanging_repairs({t0: [(99, 0, 0)]}, {}, "job") == ([], [])  # unknown producer: not ours


def test_a_running_subtask_aborts_only_what_earlier_attempts_opened_and_never_its_own_or_a_committable():
    """What the periodic look aborts: the start-up abort's ids (this subtask's share, at or above the
    restored counter) numbered below the attempt's first number, which this attempt never uses."""
    span = txn.ATTEMPT_SPAN
    counters = {0: 5, 1: span + 3}  # restored from a checkpoint of attempt 1 at parallelism 2
    first = txn.first_number(counters, 2)
    assert first == 2 * span
    open_ids = ["p-0-4", f"p-1-{span + 2}",  # committables of the restored checkpoint (below the counters)
                "p-0-5", f"p-0-{span + 9}", f"p-1-{span + 3}",  # opened late by tasks of attempts 0 and 1
                f"p-0-{first}", f"p-1-{first + 7}",  # this attempt's own
                f"p-0-{3 * span}",  # a later attempt's (this task being the one left over)
                "p-3-1",  # an earlier attempt at parallelism 4 (subtask 3 -> 3 % 2 == 1)
                "q-0-1", "p-0-1-2", "p-x-1"]  # not this sink's prefix
    by_subtask = [txn.earlier_attempts_to_abort(open_ids, "p", i, 2, counters, 2) for i in range(2)]
    assert by_subtask == [["p-0-5", f"p-0-{span + 9}"], [f"p-1-{span + 3}", "p-3-1"]]
    # Each once whatever the parallelism, and always a subset of what the start-up abort would take.
    for p in (1, 2, 3, 5):
        got = [txn.earlier_attempts_to_abort(open_ids, "p", i, p, counters, 2) for i in range(p)]
        flat = sorted(t for g in got for t in g)
        assert flat == sorted(["p-0-5", f"p-0-{span + 9}", f"p-1-{span + 3}", "p-3-1"])
        for i in range(p):
            assert set(got[i]) <= set(txn.lingering_to_abort(open_ids, "p", i, p, counters))
    # The first attempt of a fresh job has no earlier range: nothing to abort.
    assert txn.earlier_attempts_to_abort(["p-0-0", "p-0-7"], "p", 0, 1, {}, 0) == []
    # A restart before any checkpoint: everything of attempt 0 is the failed attempt's.
    assert txn.earlier_attempts_to_abort(["p-0-3", f"p-0-{span}"], "p", 0, 1, {}, 1) == ["p-0-3"]
