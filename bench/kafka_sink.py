"""What the KafkaSink costs, by delivery guarantee, against dropping the records, in one run.

    python bench/kafka_sink.py [--rows 2000000] [--repeat 2] [--interval-ms 1000]

One real Kafka broker (``KafkaBroker``, a temporary data dir) and one local Spark (``local[2]``) for
the whole run. Each case runs the same job at parallelism 2: DataGen dict rows ``{"key": i % 10000,
"value": i % 10}`` (unthrottled) -> ``key_by("key").sum("value")`` (columnar) -> the sink:

* discard: ``DiscardingSink`` (the baseline of the ratios);
* none / at-least-once / exactly-once: ``KafkaSink`` writing each row as JSON, keyed, to a topic of
  2 partitions; at-least-once and exactly-once with checkpoints every ``--interval-ms`` (the
  exactly-once case: a transaction per subtask per checkpoint, committed when it completes).

records/s = rows / the job's running time (first task processing to last task finished: Spark's
deployment excluded), the best of ``--repeat`` runs. For the checkpointed cases also the slowest
synchronous phase of the sink per checkpoint (the flush at the barrier, and for exactly-once the
DescribeTransactions round trip; the next transaction's producer is started in the background) and
the checkpoint durations. The exactly-once case ends by checking that a read_committed consumer
sees every row once.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

# A session cluster the user has running (streamjob cluster start) is not what this bench measures.
os.environ.setdefault("STREAMJOB_SESSION", "off")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))


def row(i: int) -> dict:
    return {"key": i % 10000, "value": i % 10}


def run_case(case: str, bootstrap: str, rows: int, interval_ms: int, workdir: str) -> dict:
    from confluent_kafka.admin import AdminClient, NewTopic

    from streamjob.runtime import StreamExecutionEnvironment
    from streamjob.runtime.api.environment import execution_context
    from streamjob.runtime.connectors import (DataGenSource, DeliveryGuarantee, DiscardingSink,
                                              JsonRowSerializationSchema, KafkaRecordSerializationSchema, KafkaSink)

    execution_context.reset()
    execution_context.show_progress = False
    topic = f"bench-{case}-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 2)])[topic].result(30)
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    if case in ("at-least-once", "exactly-once"):
        env.enable_checkpointing(interval_ms)
        env.get_checkpoint_config().set_checkpoint_storage(f"file://{workdir}/chk-{topic}")
    if case == "discard":
        sink = DiscardingSink()
    else:
        guarantee = {"none": DeliveryGuarantee.NONE, "at-least-once": DeliveryGuarantee.AT_LEAST_ONCE,
                     "exactly-once": DeliveryGuarantee.EXACTLY_ONCE}[case]
        sink = (KafkaSink.builder().set_bootstrap_servers(bootstrap)
                .set_record_serializer(KafkaRecordSerializationSchema.builder().set_topic(topic)
                                       .set_key_serialization_schema(lambda r: str(r["key"]).encode())
                                       .set_value_serialization_schema(JsonRowSerializationSchema.builder().build())
                                       .build())
                .set_delivery_guarantee(guarantee).set_transactional_id_prefix(topic)
                .build())
    env.from_source(DataGenSource(row, count=rows), None, "rows").key_by("key").sum("value").sink_to(sink)
    result = env.execute(f"bench-{case}")
    out = {"case": case, "rows": rows, "running_s": result.running_time_ms / 1000,
           "records_per_s": rows / (result.running_time_ms / 1000)}
    done = [c for c in result.checkpoints if c.get("status") == "COMPLETED"]
    if done:
        out["checkpoints"] = len(done)
        out["checkpoint_ms_median"] = statistics.median(c.get("duration_ms", 0) for c in done)
        syncs = [c["max_sync_ms"] for c in done]  # the slowest task's synchronous phase (the sink's pre-commit)
        out["sync_ms_median"], out["sync_ms_max"] = statistics.median(syncs), max(syncs)
    if case == "exactly-once":
        from jobs.kafka_counting import read_topic

        time.sleep(2)  # the last commit's markers
        values = read_topic(bootstrap, topic, 2, timeout_s=120)
        out["read_committed_rows"] = len(values)
        assert len(values) == rows, f"read_committed sees {len(values)} rows, {rows} written"
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--interval-ms", type=int, default=1000)
    ap.add_argument("--only", default="discard,none,at-least-once,exactly-once")
    args = ap.parse_args()

    from streamjob.runtime.cluster.spark import SparkDeployment
    from streamjob.runtime.connectors.kafka.broker import KafkaBroker

    cases = args.only.split(",")
    with tempfile.TemporaryDirectory() as workdir, KafkaBroker() as broker:
        deployment = SparkDeployment({"spark.master": "local[2]"}, 2, "bench-kafka-sink")
        try:
            best: dict[str, dict] = {}
            for _ in range(args.repeat):
                for case in cases:
                    r = run_case(case, broker.bootstrap, args.rows, args.interval_ms, workdir)
                    if case not in best or r["records_per_s"] > best[case]["records_per_s"]:
                        best[case] = r
        finally:
            deployment.spark_context.stop()
    base = best.get("discard", {}).get("records_per_s")
    print(f"\nKafkaSink, {args.rows:,} rows, parallelism 2, checkpoints every {args.interval_ms} ms "
          f"(best of {args.repeat}; {platform.node()}, {platform.python_version()})")
    print(f"{'case':<15}{'records/s':>12}{'vs discard':>12}{'ckpts':>7}{'ckpt ms':>9}{'sync ms':>14}")
    for case in cases:
        r = best[case]
        ratio = f"{r['records_per_s'] / base:.2f}x" if base else "-"
        sync = f"{r['sync_ms_median']:.0f} (max {r['sync_ms_max']:.0f})" if "sync_ms_median" in r else "-"
        ckpt = f"{r['checkpoint_ms_median']:.0f}" if "checkpoint_ms_median" in r else "-"
        print(f"{case:<15}{r['records_per_s']:>12,.0f}{ratio:>12}{r.get('checkpoints', 0):>7}{ckpt:>9}{sync:>14}")
    print(json.dumps(best))


if __name__ == "__main__":
    main()
