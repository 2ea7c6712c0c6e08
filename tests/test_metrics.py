"""User metrics (PyFlink's MetricGroup) and the Kafka source's lag metrics.

The first tests are the pure parts (the metric objects, the Prometheus families and REST ids made of
a task's report, the lag arithmetic over librdkafka's statistics); the last ones run real jobs on
local Spark (and the real Kafka broker) and read the job manager's ``/metrics`` with
prometheus-client's parser and its REST API.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kafka_util import create_topic, produce, unique_topic
from monitoring_promql import KAFKA_SOURCE_METRICS, alert_rules, dashboard, metric_names, panels
from streamjob.runtime import MapFunction, RestartStrategies, RuntimeContext, StreamExecutionEnvironment
from streamjob.runtime.api.metrics import Meter
from streamjob.runtime.cluster.metrics import operator_families, subtask_aggregates, vertex_metrics
from streamjob.runtime.connectors import DataGenSource, DiscardingSink, KafkaOffsetsInitializer, KafkaSource, \
    SimpleStringSchema
from streamjob.runtime.connectors.base import END
from streamjob.runtime.connectors.kafka.lag import partition_ends, pending_records


@contextlib.contextmanager
def running(env, name: str):
    """The job started asynchronously; canceled (and its end waited for) when the block is left."""
    client = env.execute_async(name)
    try:
        yield client
    finally:
        client.cancel()
        try:
            client.get_job_execution_result(120)
        except Exception:  # noqa: BLE001 - canceled on purpose
            pass


# -- the metric objects -----------------------------------------------------------------------------

def test_metric_group_reports_what_each_metric_holds():
    ctx = RuntimeContext("Parse", 1, 2, 128)
    group = ctx.get_metrics_group()
    seen = group.add_group("parser").counter("seen")
    seen.inc()
    seen.inc(4)
    seen.dec(2)
    assert seen.get_count() == 3
    assert group.add_group("parser").counter("seen") is seen  # the same metric again (open() twice)
    group.gauge("level", lambda: 7)
    group.gauge("broken", lambda: 1 / 0)  # a gauge that raises has no value; the job goes on
    sizes = group.add_group("topic", "clicks").distribution("size")
    for v in (5, 2, 9):
        sizes.update(v)
    report = {(tuple(e[1]), e[4]): e for e in ctx._metrics.report()}
    assert report[(("parser",), "seen")] == [False, ["parser"], ["parser"], {}, "seen", "counter", 3]
    assert report[((), "level")][-1] == 7.0 and report[((), "broken")][-1] is None
    # A key-value group is a user variable (a label) and part of the path, as in Flink.
    assert report[(("topic", "clicks"), "size")][2:] == [[], {"topic": "clicks"}, "size", "distribution",
                                                           [3, 16, 2, 9]]
    with pytest.raises(ValueError, match="'parser.seen' is a counter already"):
        group.add_group("parser").meter("seen")
    with pytest.raises(ValueError, match="metric name 'a b'"):
        group.counter("a b")
    with pytest.raises(ValueError, match="becomes a Prometheus label"):
        group.add_group("operator", "x")
    with pytest.raises(TypeError, match="needs a callable"):
        group.gauge("g", 3)
    with pytest.raises(ValueError, match="time_span_in_seconds"):
        group.meter("m", 0)


def test_a_meter_rate_is_over_its_time_span():
    meter = Meter(time_span_in_seconds=10)
    t0 = meter._samples[0][0]
    meter.mark_event(50)
    assert meter.rate(t0 + 5) == pytest.approx(10.0)  # 50 events in 5 s
    meter.mark_event(50)
    assert meter.rate(t0 + 10) == pytest.approx(10.0)  # 100 in 10 s
    assert meter.rate(t0 + 20) == 0.0  # nothing in the last 10 s
    meter.mark_event(30)
    assert meter.rate(t0 + 25) == pytest.approx(2.0)  # from the last sample at or before the span (t0 + 10): 30 in 15 s
    assert meter.get_count() == 130


# -- what the job manager makes of the reports ----------------------------------------------------------

REPORTED = [
    ("3", "Parse", 0, [[False, ["parser"], ["parser"], {}, "seen", "counter", 12],
                       [False, [], [], {}, "level", "gauge", 7.0],
                       [False, [], [], {}, "rate", "meter", [40, 2.5]],
                       [False, ["topic", "clicks"], [], {"topic": "clicks"}, "size", "distribution", [3, 16, 2, 9]]]),
    ("3", "Parse", 1, [[False, ["parser"], ["parser"], {}, "seen", "counter", 30],
                       [False, [], [], {}, "level", "gauge", None]]),
    ("1", "Source: kafka", 0, [[True, [], [], {}, "pendingRecords", "gauge", 120.0],
                               [True, ["KafkaSourceReader", "topic", "t", "partition", "0"],
                                ["KafkaSourceReader"], {"topic": "t", "partition": "0"},
                                "currentOffset", "gauge", 880.0],
                               [True, ["KafkaSourceReader"], ["KafkaSourceReader"], {}, "commitsSucceeded", "counter",
                                4]]),
]


class _Collector:
    def collect(self):
        return operator_families(["job", "job_id"], ["j", "id1"], REPORTED)


def test_prometheus_names_and_labels_of_user_and_connector_metrics():
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector())
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in text_string_to_metric_families(generate_latest(registry).decode()) for s in f.samples}

    def at(name, **labels):
        return samples[(name, tuple(sorted({"job": "j", "job_id": "id1", **labels}.items())))]

    assert at("streamjob_user_seen_total", operator="Parse", subtask="0", group="parser") == 12
    assert at("streamjob_user_seen_total", operator="Parse", subtask="1", group="parser") == 30
    assert at("streamjob_user_level", operator="Parse", subtask="0", group="") == 7
    assert not [k for k in samples if k[0] == "streamjob_user_level" and ("subtask", "1") in k[1]]
    assert at("streamjob_user_rate_total", operator="Parse", subtask="0", group="") == 40
    assert at("streamjob_user_rate_per_second", operator="Parse", subtask="0", group="") == 2.5
    size = dict(operator="Parse", subtask="0", group="", topic="clicks")
    assert (at("streamjob_user_size_count", **size), at("streamjob_user_size_sum", **size),
            at("streamjob_user_size_min", **size), at("streamjob_user_size_max", **size)) == (3, 16, 2, 9)
    kafka = dict(operator="Source: kafka", subtask="0")
    assert at("streamjob_pending_records", **kafka) == 120
    assert at("streamjob_kafka_source_reader_current_offset", topic="t", partition="0", **kafka) == 880
    assert at("streamjob_kafka_source_reader_commits_succeeded_total", **kafka) == 4


def test_rest_metric_ids_are_flinks():
    plan = {"vertices": [{"id": 0, "operators": [{"id": "1"}]}, {"id": 1, "operators": [{"id": "3"}]}]}
    assert vertex_metrics(plan, REPORTED, 5) is None
    parse = vertex_metrics(plan, REPORTED, 1)
    assert parse == {"0.Parse.parser.seen": "12", "1.Parse.parser.seen": "30", "0.Parse.level": "7",
                     "0.Parse.rate": "2.5", "0.Parse.rate.count": "40",
                     "0.Parse.topic.clicks.size.count": "3", "0.Parse.topic.clicks.size.sum": "16",
                     "0.Parse.topic.clicks.size.min": "2", "0.Parse.topic.clicks.size.max": "9"}
    # Over the subtasks (Flink's .../subtasks/metrics): by the id without the subtask.
    assert subtask_aggregates(parse, ["Parse.parser.seen", "Parse.nothing"], ("min", "sum", "avg")) == [
        {"id": "Parse.parser.seen", "min": 12.0, "sum": 42.0, "avg": 21.0}]
    assert {"id": "Parse.topic.clicks.size.max"} in subtask_aggregates(parse, None)
    source = vertex_metrics(plan, REPORTED, 0)
    assert source["0.Source: kafka.KafkaSourceReader.topic.t.partition.0.currentOffset"] == "880"
    assert source["0.Source: kafka.pendingRecords"] == "120"


# -- Kafka lag arithmetic -----------------------------------------------------------------------------

STATS = json.dumps({"name": "c#consumer-1", "topics": {"t": {"partitions": {
    "0": {"partition": 0, "hi_offset": 1000, "ls_offset": 990},
    "1": {"partition": 1, "hi_offset": 50, "ls_offset": 50},
    "2": {"partition": 2, "hi_offset": -1001, "ls_offset": -1001},  # no fetch answered yet
    "-1": {"partition": -1, "hi_offset": -1001, "ls_offset": -1001}}}}})


def test_pending_records_from_librdkafka_statistics():
    committed = partition_ends(STATS, read_committed=True)
    assert committed == {("t", 0): 990, ("t", 1): 50}
    assert partition_ends(STATS, read_committed=False) == {("t", 0): 1000, ("t", 1): 50}
    splits = [(("t", 0), 900, None, False), (("t", 1), 50, None, False), (("t", 2), 0, None, False)]
    assert pending_records(splits, committed) == 90  # partition 2's end is not known yet: not counted
    # A bounded split is pending up to its stop; a finished one not at all.
    assert pending_records([(("t", 0), 900, 950, False), (("t", 1), 10, 50, True)], committed) == 50
    assert pending_records([(("t", 2), 0, None, False)], committed) is None


def test_kafka_reader_counts_undecodable_records_and_the_emit_lag(kafka_broker):
    """numRecordsInErrors counts the records that went to the failure side output; currentEmitEventTimeLag
    is the age (wall clock minus Kafka timestamp) of the last record handed out. A reader alone, on the
    real broker."""
    from streamjob.runtime import OutputTag
    from streamjob.runtime.connectors import JsonRowDeserializationSchema
    from streamjob.runtime.api.types import Types

    topic = unique_topic("errors")
    create_topic(kafka_broker.bootstrap, topic, 1)
    hour_ago = int(time.time() * 1000) - 3_600_000
    produce(kafka_broker.bootstrap, topic, [(0, None, b'{"n": 1}', hour_ago), (0, None, b"not json", hour_ago),
                                            (0, None, b'{"n": 2}', hour_ago), (0, None, b"{", hour_ago)])
    schema = JsonRowDeserializationSchema.builder().type_info(Types.ROW_NAMED(["n"], [Types.LONG()])).build()
    source = (KafkaSource.builder().set_bootstrap_servers(kafka_broker.bootstrap).set_topics(topic)
              .set_value_only_deserializer(schema).set_bounded(KafkaOffsetsInitializer.latest())
              .set_deserialization_failure_output(OutputTag("bad")).build())
    ctx = RuntimeContext("Source: kafka", 0, 1, 128)
    reader = source.create_reader(ctx)
    try:
        deadline = time.monotonic() + 30
        while reader.poll() is not END:
            assert time.monotonic() < deadline, "no END in 30 s"
            time.sleep(0.01)
        got = {e[4]: e[6] for e in ctx._metrics.report()}
        assert got["numRecordsInErrors"] == 2
        assert 3_600_000 <= got["currentEmitEventTimeLag"] < 3_600_000 + 60_000
    finally:
        reader.close()


# -- real jobs ---------------------------------------------------------------------------------------


def scrape(client) -> dict:
    """(name, labels) -> value of the job manager's /metrics, read with prometheus-client's parser."""
    with urllib.request.urlopen(f"{rest_url(client)}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


def rest_url(client) -> str:
    jm = client.job_manager
    deadline = time.monotonic() + 60
    while (jm.rest is None or jm.rest.url is None) and time.monotonic() < deadline:
        time.sleep(0.05)
    return jm.rest.url


def rest(client, path: str):
    with urllib.request.urlopen(f"{rest_url(client)}{path}", timeout=10) as resp:
        return json.loads(resp.read())


def vertex_of(client, operator: str) -> int:
    return next(v["id"] for v in rest(client, "/v1/job")["vertices"] if any(o["name"] == operator for o in v["operators"]))


def values(samples: dict, name: str, **labels) -> dict:
    """label dict (as a tuple) -> value of the samples of ``name`` that have ``labels``."""
    return {k[1]: v for k, v in samples.items() if k[0] == name and set(labels.items()) <= set(k[1])}


def wait_until(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        got = predicate()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.2)


class Seen(MapFunction):
    def open(self, ctx):
        group = ctx.get_metrics_group().add_group("audit")
        self.seen = group.counter("records_seen")
        index = ctx.get_index_of_this_subtask()
        group.gauge("subtask_plus_100", lambda: index + 100)

    def map(self, value):
        self.seen.inc()
        return value


@pytest.mark.spark
def test_user_counter_and_gauge_on_prometheus_and_rest(spark_slots):
    """The counter counts exactly the records the map saw: in every scrape its sum over subtasks is the
    operator's numRecordsIn (both come in the same task reports); the gauge reports its callable."""
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.from_source(DataGenSource(lambda i: i, rows_per_second=2000), None, "numbers") \
        .map(Seen()).name("audited").sink_to(DiscardingSink())
    with running(env, "user-metrics") as client:
        assert client.wait_until_running(60)
        def counted() -> dict | None:  # a scrape where both subtasks reported, 500 records in all
            s = scrape(client)
            seen = values(s, "streamjob_user_records_seen_total")
            return s if len(seen) == 2 and min(seen.values()) > 0 and sum(seen.values()) > 500 else None

        samples = wait_until(counted, 60, "both subtasks of the map to count, 500 records in all")
        seen = values(samples, "streamjob_user_records_seen_total", operator="audited", group="audit", job="user-metrics")
        assert len(seen) == 2 and all(v > 0 for v in seen.values())
        assert [sum(seen.values())] == list(values(samples, "streamjob_num_records_in_total", operator="audited").values())
        gauges = values(samples, "streamjob_user_subtask_plus_100", operator="audited")
        assert sorted((dict(k)["subtask"], v) for k, v in gauges.items()) == [("0", 100.0), ("1", 101.0)]

        vertex = vertex_of(client, "audited")
        ids = {m["id"] for m in rest(client, f"/v1/vertices/{vertex}/metrics")}
        assert {"0.audited.audit.records_seen", "1.audited.audit.subtask_plus_100"} <= ids
        got = rest(client, f"/v1/vertices/{vertex}/metrics?get=1.audited.audit.subtask_plus_100,0.nothing")
        assert got == [{"id": "1.audited.audit.subtask_plus_100", "value": "101"}]
        got = rest(client, f"/v1/vertices/{vertex}/subtasks/metrics?get=audited.audit.subtask_plus_100&agg=min,max,sum")
        assert got == [{"id": "audited.audit.subtask_plus_100", "min": 100.0, "max": 101.0, "sum": 201.0}]
        for path, status, says in ((f"/v1/vertices/{vertex}/subtasks/metrics?agg=median", 400, "'agg' takes"),
                                   ("/v1/vertices/99/metrics", 404, "no vertex 99"),
                                   ("/v1/vertices/x/metrics", 400, "non-negative integer")):
            with pytest.raises(urllib.error.HTTPError) as e:
                rest(client, path)
            assert e.value.code == status and says in json.loads(e.value.read())["error"]


@pytest.mark.spark
def test_user_counters_restart_with_the_task(spark_slots):
    """As in Flink, a user counter belongs to its task: after a task is killed and the job restarts,
    the counters start from zero again (the old attempt's values are gone, not added to)."""
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 100))
    env.from_source(DataGenSource(lambda i: i, rows_per_second=500), None, "numbers") \
        .map(Seen()).name("audited").sink_to(DiscardingSink())
    with running(env, "user-metrics-restart") as client:
        assert client.wait_until_running(60)
        jm = client.job_manager
        seen = lambda s: values(s, "streamjob_user_records_seen_total", operator="audited")  # noqa: E731
        before = sum(wait_until(lambda: (v := seen(scrape(client))) and sum(v.values()) > 1000 and v, 60,
                                "1000 records counted").values())
        wait_until(lambda: len(jm.task_pids()) == 2, 30, "both task processes known")
        first_attempt = jm.attempt
        os.kill(jm.task_pids()[0], signal.SIGKILL)

        def restarted() -> dict | None:
            # Until the next attempt begins, the job manager shows the last values the tasks reported.
            if jm.attempt == first_attempt:
                return None
            s = scrape(client)
            return s if len(seen(s)) == 2 else None

        after = wait_until(restarted, 60, "the restarted attempt's reports")
        assert sum(seen(after).values()) < before, "the counters went on from the old attempt's values"
        assert [sum(seen(after).values())] == list(values(after, "streamjob_num_records_in_total",
                                                          operator="audited").values())


class Slow(MapFunction):
    def map(self, value):
        time.sleep(0.003)
        return value


@pytest.mark.spark
def test_kafka_pending_records_current_and_committed_offsets(spark_slots, kafka_broker, tmp_path):
    """A preloaded topic read by a slow map: pendingRecords is > 0 while records wait, then 0 once the
    source caught up; currentOffset reaches each partition's end, and committedOffset too once a
    checkpoint completed (the offsets are committed back to the group)."""
    topic = unique_topic("lag")
    create_topic(kafka_broker.bootstrap, topic, 2)
    produce(kafka_broker.bootstrap, topic, [(i % 2, None, f"{i}".encode()) for i in range(1600)])
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.configure({"execution.batch-size": 20})  # small batches: the source hands records out as the map takes them
    env.enable_checkpointing(300)
    source = (KafkaSource.builder().set_bootstrap_servers(kafka_broker.bootstrap).set_topics(topic)
              .set_group_id(f"g-{topic}").set_starting_offsets(KafkaOffsetsInitializer.earliest())
              .set_property("statistics.interval.ms", "200")
              .set_value_only_deserializer(SimpleStringSchema()).build())
    env.from_source(source, None, "kafka").map(Slow()).name("slow").sink_to(DiscardingSink())
    with running(env, "kafka-lag") as client:
        assert client.wait_until_running(60)
        pending = lambda s: list(values(s, "streamjob_pending_records", operator="Source: kafka").values())  # noqa: E731
        first = wait_until(lambda: pending(scrape(client)), 60, "a first pendingRecords")
        # The alert rules and the dashboard read Kafka metrics by these names (tests/test_dashboard.py
        # leaves them to this test: its job reads no Kafka).
        exported = {name for name, _ in scrape(client)}
        assert KAFKA_SOURCE_METRICS <= exported
        used = {n for r in alert_rules() for n in metric_names(r["expr"])} | {
            n for p in panels(dashboard()) for t in p.get("targets", []) for n in metric_names(t["expr"])}
        assert {n for n in used if "pending" in n or "kafka" in n} <= KAFKA_SOURCE_METRICS
        assert first[0] > 0, f"records were waiting, yet pendingRecords was {first}"
        # /v1/job says it per source vertex, with its partitions: what the operator's autoscaler reads.
        [source_vertex] = [v for v in rest(client, "/v1/job")["vertices"] if v["operators"][0]["name"] == "Source: kafka"]
        assert source_vertex["splits"] == 2 and source_vertex["pending_records"] is not None, source_vertex
        wait_until(lambda: pending(scrape(client)) == [0.0], 60, "pendingRecords to reach 0")
        [source_vertex] = [v for v in rest(client, "/v1/job")["vertices"] if v["operators"][0]["name"] == "Source: kafka"]
        assert source_vertex["pending_records"] == 0 and source_vertex["operators"][0]["key"] == "op1", source_vertex
        offsets = lambda name: {dict(k)["partition"]: v for k, v in values(  # noqa: E731
            scrape(client), f"streamjob_kafka_source_reader_{name}", topic=topic).items()}
        assert offsets("current_offset") == {"0": 800.0, "1": 800.0}
        wait_until(lambda: offsets("committed_offset") == {"0": 800.0, "1": 800.0}, 30, "committedOffset at the end")
        ids = {m["id"] for m in rest(client, f"/v1/vertices/{vertex_of(client, 'Source: kafka')}/metrics")}
        assert f"0.Source: kafka.KafkaSourceReader.topic.{topic}.partition.1.committedOffset" in ids
