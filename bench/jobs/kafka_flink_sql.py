"""Kafka -> running sum per key -> Kafka in Flink SQL, the peer a Flink user would write for bench/kafka.py's
job (run by the PyFlink venv's Python: ``python bench/jobs/kafka_flink_sql.py``; env as
bench/jobs/kafka_job.py, plus KB_JARS: the Kafka connector's jars, ``os.pathsep``-separated).

    INSERT INTO sums SELECT k, i, SUM(v) OVER (PARTITION BY k ORDER BY proctime
                                               ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW), t
    FROM records

Everything runs in Flink's JVM: the Kafka table connector (the same ``flink-connector-kafka`` as the
DataStream peer), Flink's JSON format decoding and encoding, the OVER aggregation in generated code over
its keyed state (heap). Python only submits the statement. With KB_CHECKPOINT_DIR set: checkpoints every
KB_INTERVAL_MS (1000), exactly-once, and the sink ``sink.delivery-guarantee = exactly-once`` with a
transactional id prefix (a Kafka transaction per subtask per checkpoint, as streamjob's KafkaSink);
unset: no checkpoints, ``sink.delivery-guarantee = none``. Parallelism 2. Records are written without a
key (a key needs ``key.format`` and key fields; the checks of bench/kafka.py do not depend on where a
key's records land).
"""

import json
import os
import time
import uuid

from pyflink.table import EnvironmentSettings, TableEnvironment

bootstrap = os.environ["KB_BOOTSTRAP"]
checkpoint_dir = os.environ.get("KB_CHECKPOINT_DIR")
tag = uuid.uuid4().hex[:8]

t_env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
config = t_env.get_config()
config.set("pipeline.jars", ";".join(f"file://{j}" for j in os.environ["KB_JARS"].split(os.pathsep)))
config.set("parallelism.default", "2")
config.set("pipeline.name", "kafka-bench-flink-sql")
if checkpoint_dir:
    config.set("execution.checkpointing.interval", f"{int(os.environ.get('KB_INTERVAL_MS', '1000'))} ms")
    config.set("execution.checkpointing.mode", "EXACTLY_ONCE")
    config.set("state.checkpoints.dir", checkpoint_dir)
bounded = "'scan.bounded.mode' = 'latest-offset'," if os.environ.get("KB_BOUNDED") == "1" else ""
t_env.execute_sql(f"""
    CREATE TABLE records (k INT, i BIGINT, v BIGINT, t BIGINT, proctime AS PROCTIME()) WITH (
        'connector' = 'kafka', 'topic' = '{os.environ["KB_IN"]}',
        'properties.bootstrap.servers' = '{bootstrap}', 'properties.group.id' = 'flink-sql-bench-{tag}',
        'scan.startup.mode' = 'earliest-offset', {bounded}
        'format' = 'json')""")
guarantee = "exactly-once" if checkpoint_dir else "none"
# Flink's default transaction timeout (1 h) is above the broker's transaction.max.timeout.ms (15 min): refused.
t_env.execute_sql(f"""
    CREATE TABLE sums (k INT, i BIGINT, v BIGINT, t BIGINT) WITH (
        'connector' = 'kafka', 'topic' = '{os.environ["KB_OUT"]}',
        'properties.bootstrap.servers' = '{bootstrap}',
        'sink.delivery-guarantee' = '{guarantee}', 'sink.transactional-id-prefix' = 'flink-sql-bench-{tag}',
        'properties.transaction.timeout.ms' = '600000',
        'format' = 'json')""")
started = time.time()
result = t_env.execute_sql("""
    INSERT INTO sums
    SELECT k, i, SUM(v) OVER (PARTITION BY k ORDER BY proctime ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW), t
    FROM records""")
result.wait()
print(json.dumps({"wall_ms": (time.time() - started) * 1000}), flush=True)
