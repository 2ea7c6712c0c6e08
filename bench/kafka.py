"""Kafka -> key_by.sum -> Kafka: streamjob (columnar and per-record, exactly-once with 1 s checkpoints
and without checkpoints) beside a plain confluent-kafka loop, Flink SQL, PyFlink and Bytewax, in one run.

    python bench/kafka.py [--records 5000000] [--repeat 1] [--only plain,columnar,...]
                          [--latency-rate 10000] [--latency-s 15] [--latency-only]  (--latency-rate 0: no latency run)

One real Kafka broker (``KafkaBroker``: Apache Kafka 4.x, KRaft, a temporary data dir) for the run.
The input: ``--records`` JSON records ``{"k": i % 10000, "i": i, "v": i % 10, "t": <produce time, µs>}``
preloaded into a topic of 4 partitions (record i in partition k % 4, keyed by k, so every key's
records are in one partition in order and every running sum is deterministic). Each case is its own
process tree started from here (RSS and CPU sampled every 50 ms), reading that topic from the start at
parallelism 2 and writing the running sum per key (the record with ``v`` replaced by its key's sum so
far) as JSON into a fresh output topic of 4 partitions:

* plain: one Python process, confluent-kafka ``Consumer`` -> ``json.loads`` -> sums in a dict ->
  ``json.dumps`` -> ``Producer`` (keyed), at-least-once: every second the producer is flushed, then the
  consumer's offsets committed. The 1.00x of the ratios;
* columnar: streamjob, the values decoded by ``JsonRowDeserializationSchema`` with a declared row
  type into Arrow columns, ``key_by("k").sum("v")``, ``KafkaSink`` (``streamjob run bench/jobs/kafka_job.py``);
* per-record: streamjob, ``SimpleStringSchema`` -> ``map(json.loads)`` -> ``key_by(lambda r: r["k"])
  .sum("v")``;
* flink-sql: Flink SQL 1.20, what a Flink user writes for this job (bench/jobs/kafka_flink_sql.py, run by
  PyFlink's venv, all in Flink's JVM): Flink's Kafka table connector and JSON format, ``SUM(v) OVER
  (PARTITION BY k ORDER BY proctime ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)``, the sink
  ``sink.delivery-guarantee = exactly-once`` with a transactional id prefix;
* pyflink: PyFlink 1.20 with Flink's Kafka connector 3.3.0-1.20 (bench/jobs/kafka_pyflink.py; its own venv), on
  --pyflink-records only (default 200,000: its Python reduce does a few thousand records/s here);
* bytewax: Bytewax 0.21 with its Kafka connectors, 2 processes (bench/jobs/kafka_bytewax.py; its own venv);
* quix: Quix Streams 3 (bench/jobs/kafka_quix.py; its own venv), 2 processes in one consumer group,
  ``processing_guarantee="exactly-once"`` with 1 s commits (its "-off" case: ``at-least-once``), the sum in
  its RocksDB state store with changelog topics;

each engine exactly-once with checkpoints every 1 s (``EXACTLY_ONCE`` sink: a Kafka transaction per
subtask per checkpoint; Bytewax: 1 s snapshots and its non-transactional sink, at-least-once) and with
checkpoints off (sink ``DeliveryGuarantee.NONE``), the "-off" cases. The peers run when their venv is
there (``python bench/kafka.py --setup`` makes them in bench/.data/: pip and mvn).

Measured:

* records/s = records / (end - start): start = the Kafka timestamp (producer's create time) of the
  first output records, i.e. when the job produced its first result (for PyFlink, whose sink keeps
  the input record's timestamp, the time the first output became visible, which flatters it by up to
  one checkpoint interval); end = when all output was visible to ``read_committed`` readers: the
  first moment every output partition's last stable offset had reached its final value (sampled
  every 50 ms; a consumer reading every record, the watcher, can lag behind exactly-once's bursts,
  ``watcher_lag_s`` in the JSON). Start-up (JVM, Spark, Flink) is excluded;
* checkpoint cost = 1 - records/s exactly-once with 1 s checkpoints / records/s of the same job
  without checkpoints, same run; job-time cost = 1 - the job's own RUNNING -> FINISHED time
  without checkpoints / with (streamjob's cases);
* latency p50/p99 (with --latency-rate R > 0): a second run per engine (exactly-once, 1 s
  checkpoints) on a live topic: a producer writes 10 records/s until the first output is visible
  (the job is up), then R records/s (at most half of what the case sustained in the throughput run;
  ``--pyflink-latency-rate`` with ``--latency-only``), each record carrying its produce time ``t``;
  the read_committed consumer notes when each output record became visible; latency = visible - t,
  over the records produced from 2 s after the switch for --latency-s seconds, then the job is stopped;
* peak RSS = the most the whole process tree (driver, JVM, Python workers) held at once, as the sum of
  its processes' RSS (pages shared between processes counted in each) and as the sum of their PSS
  (each page once: what a container's memory cgroup is charged), sampled every 50 / 500 ms;
* job CPU-s / broker CPU-s = CPU seconds (user + system) of the case's process tree / of the
  broker's JVM during the case (start to the end of the stable-offset watch): on two shared cores,
  where exactly-once's extra work goes (the broker keeps transaction state and writes markers);
* sink wrote = the output topic read back with read_committed after the run: the record count
  must equal the input's, the last sum of every key its total, and the sum of all output ``v`` the
  sum of all running sums (a lost or repeated record changes it). A case that fails a check fails
  the run.

Timings on a shared 2-core machine are noisy: cases are interleaved, --repeat gives medians (of the
rates and of the ratios per repeat).
"""

from __future__ import annotations

import argparse
import datetime
import io
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

# A session cluster the user has running (streamjob cluster start) is not what this bench measures.
os.environ.setdefault("STREAMJOB_SESSION", "off")

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DATA = HERE / ".data"
KEYS = 10_000
PARTITIONS = 4
VENV_FLINK = DATA / "venv-flink"
VENV_BYTEWAX = DATA / "venv-bytewax"
VENV_QUIX = DATA / "venv-quix"
FLINK_JARS = DATA / "flink-jars"
FLINK_CONNECTOR = ("org.apache.flink", "flink-connector-kafka", "3.3.0-1.20")
CASES = ["plain", "columnar", "columnar-off", "per-record", "per-record-off", "flink-sql", "flink-sql-off",
         "pyflink", "pyflink-off", "bytewax", "bytewax-off", "quix", "quix-off"]
LABELS = {"plain": "plain confluent-kafka loop (1 process, at-least-once)",
          "columnar": "streamjob columnar", "per-record": "streamjob per-record",
          "flink-sql": "Flink SQL 1.20 (SUM OVER, JSON, Kafka connector)",
          "pyflink": "PyFlink 1.20 (Python reduce, tuned)", "bytewax": "Bytewax 0.21 (2 processes)",
          "quix": "Quix Streams 3 (2 processes, one group)"}
FLINK_ENGINES = ("pyflink", "flink-sql")  # run by the PyFlink venv, with Flink's Kafka connector


# -- setup of the peers' environments ---------------------------------------------------------------
def setup() -> None:
    """The peers' venvs (PyFlink pins pyarrow/numpy/apache-beam versions of its own, so neither goes into
    the project's venv) and Flink's Kafka connector with its dependencies from Maven Central."""
    py = sys.executable
    base = getattr(sys, "_base_executable", py)
    DATA.mkdir(exist_ok=True)
    for venv, pkgs in ((VENV_FLINK, ["apache-flink==1.20.*", "psutil"]),
                       (VENV_BYTEWAX, ["bytewax==0.21.1", "confluent-kafka", "psutil"]),
                       (VENV_QUIX, ["quixstreams==3.*", "psutil"])):
        if not (venv / "bin" / "python").exists():
            subprocess.run([base, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", *pkgs], check=True)
    pom = DATA / "flink-jars-pom"
    pom.mkdir(exist_ok=True)
    g, a, v = FLINK_CONNECTOR
    (pom / "pom.xml").write_text(
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        "<groupId>bench</groupId><artifactId>flink-kafka-jars</artifactId><version>1</version><dependencies>"
        f"<dependency><groupId>{g}</groupId><artifactId>{a}</artifactId><version>{v}</version></dependency>"
        "</dependencies></project>")
    subprocess.run(["mvn", "-q", "dependency:copy-dependencies", "-DincludeScope=runtime",
                    f"-DoutputDirectory={FLINK_JARS}"], cwd=pom, check=True)


def flink_jars() -> list[str]:
    # The connector and the Kafka client; the rest of its runtime dependencies (guava, jackson...)
    # are in Flink's own distribution, and a second copy on the classpath only risks conflicts.
    return [str(p) for p in sorted(FLINK_JARS.glob("*.jar"))
            if p.name.startswith(("flink-connector-kafka-", "kafka-clients-"))]


def available(case: str) -> bool:
    engine = case.removesuffix("-off")
    if engine in FLINK_ENGINES:
        return (VENV_FLINK / "bin" / "python").exists() and len(flink_jars()) == 2
    if engine == "bytewax":
        return (VENV_BYTEWAX / "bin" / "python").exists()
    if engine == "quix":
        return (VENV_QUIX / "bin" / "python").exists()
    return True


# -- the data ---------------------------------------------------------------------------------------
def value(i: int, t_us: int) -> bytes:
    return b'{"k":%d,"i":%d,"v":%d,"t":%d}' % (i % KEYS, i, i % 10, t_us)


def create_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS)])[topic].result(30)


def preload(bootstrap: str, topic: str, records: int) -> None:
    from confluent_kafka import Producer

    create_topic(bootstrap, topic)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20,
                         "batch.size": 1 << 20, "queue.buffering.max.messages": 1_000_000})
    produce = producer.produce
    for i in range(records):
        k = i % KEYS
        if i % 10_000 == 0:
            t = int(time.time() * 1e6)
        while True:
            try:
                produce(topic, value(i, t), b"%d" % k, partition=k % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(120) == 0, "the input was not delivered in 120 s"


def expected(records: int):
    """Per key: the total (the last running sum); overall: the sum of every running sum."""
    import numpy as np

    i = np.arange(records, dtype=np.int64)
    k, v = i % KEYS, i % 10
    count = np.bincount(k, minlength=KEYS)
    totals = np.bincount(k, weights=v, minlength=KEYS).astype(np.int64)
    j = i // KEYS  # the record's place among its key's records
    return totals, int((v * (count[k] - j)).sum())


# -- the output side --------------------------------------------------------------------------------
class Watcher(threading.Thread):
    """A read_committed consumer of the output topic while the job runs: when the first records and
    the last became visible, how many there are and (latency mode) each record's latency."""

    def __init__(self, bootstrap: str, topic: str, latency_from: list | None = None):
        super().__init__(daemon=True)
        self.bootstrap, self.topic = bootstrap, topic
        self.count = 0
        self.first_visible: float | None = None
        self.last_visible: float | None = None
        self.first_created: float | None = None  # min create time (s) of the first records seen
        self.latency_from = latency_from  # [t_us]: latencies of records produced from then on (set later)
        self.latencies: list[float] = []
        self.stop = threading.Event()
        self.ready = threading.Event()

    def run(self) -> None:
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"watch-{uuid.uuid4().hex[:8]}",
                             "isolation.level": "read_committed", "enable.auto.commit": False,
                             "fetch.wait.max.ms": 10})
        consumer.assign([TopicPartition(self.topic, p, 0) for p in range(PARTITIONS)])
        self.ready.set()
        try:
            while not self.stop.is_set():
                msgs = consumer.consume(10_000, 0.05)
                now = time.time()
                if not msgs:
                    continue
                good = [m for m in msgs if m.error() is None]
                if not good:
                    continue
                if self.first_visible is None:
                    self.first_visible = now
                    self.first_created = min(m.timestamp()[1] for m in good[:1000]) / 1000
                self.last_visible = now
                self.count += len(good)
                if self.latency_from is not None and self.latency_from[0] is not None:
                    since = self.latency_from[0]
                    for m in good:
                        t = json.loads(m.value())["t"]
                        if t >= since:
                            self.latencies.append(now - t / 1e6)
        finally:
            consumer.close()


class StableOffsets(threading.Thread):
    """Every 50 ms, each output partition's last stable offset (what read_committed readers may read
    up to: ListOffsets at read_committed isolation). ``visible_at`` then says when every partition had
    reached its final one, i.e. when all output was visible, independently of how fast a consumer
    reads it (the Watcher, a Python consumer on the same two cores, can lag behind a burst)."""

    def __init__(self, bootstrap: str, topic: str):
        super().__init__(daemon=True)
        self.bootstrap, self.topic = bootstrap, topic
        self.samples: list[tuple[float, list[int]]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"lso-{uuid.uuid4().hex[:8]}",
                             "isolation.level": "read_committed", "enable.auto.commit": False})
        try:
            while not self.stop.is_set():
                try:
                    ends = [consumer.get_watermark_offsets(TopicPartition(self.topic, p), 5, cached=False)[1]
                            for p in range(PARTITIONS)]
                except Exception:  # noqa: BLE001 - a missed sample only coarsens the end
                    ends = None
                if ends is not None:
                    self.samples.append((time.time(), ends))
                self.stop.wait(0.05)
        finally:
            consumer.close()

    def visible_at(self) -> float | None:
        if not self.samples:
            return None
        final = self.samples[-1][1]
        for t, ends in self.samples:
            if all(e >= f for e, f in zip(ends, final)):
                return t
        return None


def verify(bootstrap: str, topic: str, records: int) -> dict:
    """The output topic read back with read_committed: the count, every key's total and the sum of
    all running sums must be the expected ones."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.json as pa_json
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    schema = pa.schema([("k", pa.int64()), ("v", pa.int64())])
    options = pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"verify-{uuid.uuid4().hex[:8]}",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "enable.partition.eof": True})
    last = np.full(KEYS, -1, dtype=np.int64)
    count, total = 0, 0
    at_end: set[int] = set()
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        deadline = time.monotonic() + 300
        while len(at_end) < PARTITIONS and time.monotonic() < deadline:
            msgs = consumer.consume(50_000, 0.5)
            values = []
            for m in msgs:
                err = m.error()
                if err is None:
                    values.append(m.value())
                    at_end.discard(m.partition())
                elif err.code() == KafkaError._PARTITION_EOF:
                    at_end.add(m.partition())
                else:
                    raise RuntimeError(f"reading {topic}: {err}")
            if values:
                table = pa_json.read_json(io.BytesIO(b"\n".join(values)), parse_options=options,
                                          read_options=pa_json.ReadOptions(block_size=1 << 26))
                k, v = table["k"].to_numpy(), table["v"].to_numpy()
                count += len(k)
                total += int(v.sum())
                np.maximum.at(last, k, v)  # running sums of non-negative values: the max is the last
    finally:
        consumer.close()
    totals, sum_of_sums = expected(records)
    bad_keys = int((last != totals).sum())
    ok = count == records and bad_keys == 0 and total == sum_of_sums
    return {"records": count, "keys_wrong": bad_keys, "sum_ok": total == sum_of_sums, "ok": ok}


# -- one case as a process tree -----------------------------------------------------------------------
def command(case: str, bootstrap: str, topic_in: str, topic_out: str, tmp: str, bounded: bool,
            interval_ms: int) -> tuple[list[str], dict]:
    engine = case.removesuffix("-off")
    checkpoint = not case.endswith("-off") and engine != "plain"
    env = {**os.environ, "KB_BOOTSTRAP": bootstrap, "KB_IN": topic_in, "KB_OUT": topic_out,
           "KB_BOUNDED": "1" if bounded else "0", "KB_INTERVAL_MS": str(interval_ms), "PYTHONUNBUFFERED": "1"}
    if checkpoint:
        env["KB_CHECKPOINT_DIR"] = f"file://{tmp}/checkpoints"
    if engine == "plain":
        return [sys.executable, str(HERE / "kafka.py"), "--plain-child"], env
    if engine in ("columnar", "per-record"):
        env["KB_PATH"] = engine.replace("-", "_")
        return [sys.executable, "-m", "streamjob.runtime.cli", "run", str(HERE / "jobs" / "kafka_job.py"),
                "--no-progress"], env
    if engine in FLINK_ENGINES:
        env["KB_JARS"] = os.pathsep.join(flink_jars())
        env.pop("PYTHONPATH", None)
        script = "kafka_pyflink.py" if engine == "pyflink" else "kafka_flink_sql.py"
        return [str(VENV_FLINK / "bin" / "python"), str(HERE / "jobs" / script)], env
    if engine == "quix":
        env.pop("PYTHONPATH", None)
        return [str(VENV_QUIX / "bin" / "python"), str(HERE / "jobs" / "kafka_quix.py")], env
    # bytewax
    env["PYTHONPATH"] = str(HERE / "jobs")
    cmd = [str(VENV_BYTEWAX / "bin" / "python"), "-m", "bytewax.testing", "kafka_bytewax:flow", "-p", "2"]
    if checkpoint:
        recovery = Path(tmp) / "recovery"
        recovery.mkdir()
        subprocess.run([cmd[0], "-m", "bytewax.recovery", str(recovery), "2"], check=True, capture_output=True)
        cmd += ["-r", str(recovery), "-s", str(max(1, interval_ms // 1000)), "-b", "0"]
    return cmd, env


def _stop(proc: subprocess.Popen) -> None:
    """The case's whole process group (it runs in a session of its own): TERM, then KILL."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(15)
    except ProcessLookupError:
        pass


def _cpu_s(pid: int | None) -> float:
    """CPU seconds (user + system) a process and its children have used so far (0 without one)."""
    import psutil

    if pid is None:
        return 0.0
    try:
        root = psutil.Process(pid)
        total = 0.0
        for p in [root, *root.children(recursive=True)]:
            t = p.cpu_times()
            total += t.user + t.system
        return total
    except psutil.Error:
        return 0.0


def run_case(case: str, bootstrap: str, topic_in: str, records: int, interval_ms: int,
             broker_pid: int | None = None) -> dict:
    from w1 import _sample_tree

    topic_out = f"out-{case}-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic_out)
    with tempfile.TemporaryDirectory(prefix="kafka-bench-") as tmp:
        cmd, env = command(case, bootstrap, topic_in, topic_out, tmp, True, interval_ms)
        watcher = Watcher(bootstrap, topic_out)
        watcher.start()
        watcher.ready.wait(30)
        stable = StableOffsets(bootstrap, topic_out)
        stable.start()
        # Where the CPU went (two cores shared by the job, the broker and this process's watchers):
        # exactly-once makes the broker work too (transaction state, markers), off the job's books.
        broker_cpu, bench_cpu = _cpu_s(broker_pid), time.process_time()
        started = time.time()
        proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        sampled: dict = {}
        sampler = threading.Thread(target=_sample_tree, args=(proc, sampled), daemon=True)
        sampler.start()
        try:
            stdout, stderr = proc.communicate(timeout=3600)
        finally:
            _stop(proc)
        sampler.join()
        exited = time.time()
        if proc.returncode != 0:
            watcher.stop.set()
            raise RuntimeError(f"{case} failed ({proc.returncode}):\n{stderr[-4000:]}")
        # Bytewax's and the loop's last flush, the last commit's markers: visible within seconds.
        deadline = time.time() + 60
        while watcher.count < records and time.time() < deadline:
            time.sleep(0.1)
        watcher.stop.set()
        watcher.join(10)
        time.sleep(0.2)
        stable.stop.set()
        stable.join(10)
        broker_cpu, bench_cpu = _cpu_s(broker_pid) - broker_cpu, time.process_time() - bench_cpu
    wrote = verify(bootstrap, topic_out, records)
    if not wrote["ok"]:
        raise RuntimeError(f"{case}: the output is wrong: {wrote} (expected {records} records)")
    start = watcher.first_created
    if start is None or start < started:  # the sink kept the input's timestamps (PyFlink)
        start = watcher.first_visible
    # The end: when every output partition's last stable offset had reached its final value (all
    # output visible to read_committed), not when the watcher got round to reading the last record.
    end = stable.visible_at() or watcher.last_visible
    out = {"case": case, "records_per_s": records / (end - start), "wrote": wrote,
           "watcher_lag_s": watcher.last_visible - end,
           "peak_rss_mb": sampled["peak_rss"] / 2**20, "peak_pss_mb": sampled["peak_pss"] / 2**20, "total_s": exited - started,
           "processing_s": end - start, "job_cpu_s": sampled["cpu"][-1][1] if sampled.get("cpu") else None,
           "broker_cpu_s": broker_cpu if broker_pid else None, "bench_cpu_s": bench_cpu}
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    if lines:
        out["job"] = json.loads(lines[-1])
    return out


def run_latency(case: str, bootstrap: str, rate: int, seconds: float, interval_ms: int) -> dict:
    """The job on a live topic written at ``rate`` records/s; latency of the records produced from
    1 s after the first output was visible, for ``seconds``."""
    from confluent_kafka import Producer

    topic_in, topic_out = f"live-{case}-{uuid.uuid4().hex[:8]}", f"out-live-{case}-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic_in)
    create_topic(bootstrap, topic_out)
    since: list = [None]
    watcher = Watcher(bootstrap, topic_out, since)
    watcher.start()
    watcher.ready.wait(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1, "enable.idempotence": True})
    with tempfile.TemporaryDirectory(prefix="kafka-bench-") as tmp:
        cmd, env = command(case, bootstrap, topic_in, topic_out, tmp, False, interval_ms)
        proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        errors: list = []
        threading.Thread(target=lambda: errors.append(proc.stderr.read()), daemon=True).start()
        threading.Thread(target=lambda: proc.stdout.read(), daemon=True).start()
        produced, i, tick = 0, 0, 0.01
        end: float | None = None
        next_at = started = time.time()
        try:
            while end is None or time.time() < end:
                if proc.poll() is not None:
                    time.sleep(1)
                    raise RuntimeError(f"{case} (latency run) exited ({proc.returncode}):\n{''.join(errors)[-4000:]}")
                if since[0] is None and watcher.first_visible is not None:
                    # The job is up: from now on the full rate, measured from 2 s later (the first
                    # records at that rate meet a job that saw only a trickle while it started).
                    since[0] = int((time.time() + 2) * 1e6)
                    end = time.time() + 2 + seconds
                elif since[0] is None and time.time() - started > 300:
                    raise RuntimeError(f"{case} (latency run): no output in 300 s")
                # Until the first output, a trickle (10 records/s): no backlog built up during start-up.
                for _ in range(max(1, int(rate * tick)) if since[0] is not None else int(i < 10 * (time.time() - started))):
                    k = i % KEYS
                    producer.produce(topic_in, value(i, int(time.time() * 1e6)), b"%d" % k, partition=k % PARTITIONS)
                    i += 1
                producer.poll(0)
                next_at += tick
                time.sleep(max(0.0, next_at - time.time()))
            produced = i
            producer.flush(30)
            deadline = time.time() + 30
            while watcher.count < produced and time.time() < deadline:
                time.sleep(0.1)
        finally:
            _stop(proc)
            watcher.stop.set()
            watcher.join(10)
    lat = sorted(watcher.latencies)
    if not lat:
        raise RuntimeError(f"{case} (latency run): {watcher.count} of {produced} records visible, none measured")
    # A job that fell behind the producer leaves records unseen 30 s after the last was produced: its
    # figures are of the records that did come (a lower bound), and the table says so.
    return {"case": case, "rate": rate, "measured": len(lat), "visible": watcher.count, "produced": produced,
            "complete": watcher.count >= produced,
            "p50_ms": 1000 * lat[len(lat) // 2], "p99_ms": 1000 * lat[min(len(lat) - 1, int(len(lat) * 0.99))],
            "max_ms": 1000 * lat[-1]}


# -- the plain loop (a child process, measured like the others) --------------------------------------
def plain_loop() -> None:
    from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

    bootstrap, topic_in, topic_out = os.environ["KB_BOOTSTRAP"], os.environ["KB_IN"], os.environ["KB_OUT"]
    bounded = os.environ.get("KB_BOUNDED") == "1"
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"plain-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "auto.offset.reset": "earliest"})
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
                         "partitioner": "murmur2_random", "delivery.report.only.error": True})
    ends = {}
    for p in range(PARTITIONS):
        _, high = consumer.get_watermark_offsets(TopicPartition(topic_in, p), timeout=10)
        ends[p] = high
    consumer.assign([TopicPartition(topic_in, p, 0) for p in range(PARTITIONS)])
    produce, loads, dumps = producer.produce, json.loads, json.JSONEncoder(separators=(",", ":")).encode
    sums: dict = {}
    positions = {p: 0 for p in range(PARTITIONS)}
    next_commit = time.monotonic() + 1.0
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    while not stop:
        msgs = consumer.consume(10_000, 0.1)
        for m in msgs:
            if m.error() is not None:
                if m.error().code() != KafkaError._PARTITION_EOF:
                    raise RuntimeError(str(m.error()))
                continue
            r = loads(m.value())
            k = r["k"]
            r["v"] = total = sums.get(k, 0) + r["v"]
            sums[k] = total
            out = dumps(r).encode()
            try:
                produce(topic_out, out, m.key())
            except BufferError:
                producer.poll(0.05)
                produce(topic_out, out, m.key())
            positions[m.partition()] = m.offset() + 1
        producer.poll(0)
        if time.monotonic() >= next_commit:  # at-least-once: what is committed has been written
            producer.flush()
            consumer.commit(offsets=[TopicPartition(topic_in, p, o) for p, o in positions.items() if o], asynchronous=False)
            next_commit = time.monotonic() + 1.0
        if bounded and all(positions[p] >= ends[p] for p in ends):
            break
    producer.flush()
    consumer.close()


# -- the run ------------------------------------------------------------------------------------------
def machine() -> str:
    load = os.getloadavg()
    return (f"{os.cpu_count()} cores ({platform.processor() or platform.machine()}), Python {platform.python_version()}, "
            f"load average {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} at the start")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=5_000_000)
    ap.add_argument("--repeat", type=int, default=1, help="runs of every case (interleaved); medians reported")
    ap.add_argument("--only", default=",".join(CASES), help=f"comma-separated cases of {','.join(CASES)}")
    ap.add_argument("--pyflink-records", type=int, default=200_000,
                    help="records of the PyFlink cases (its Python reduce does ~1-3k records/s here)")
    ap.add_argument("--interval-ms", type=int, default=1000)
    ap.add_argument("--latency-rate", type=int, default=10_000, help="records/s of the latency runs (0: none)")
    ap.add_argument("--latency-s", type=float, default=15.0)
    ap.add_argument("--latency-only", action="store_true", help="only the latency runs (at --latency-rate, PyFlink at "
                    "--pyflink-latency-rate)")
    ap.add_argument("--pyflink-latency-rate", type=int, default=500)
    ap.add_argument("--setup", action="store_true", help="make the PyFlink, Bytewax and Quix Streams venvs and fetch Flink's jars")
    ap.add_argument("--plain-child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.plain_child:
        plain_loop()
        return
    if args.setup:
        setup()
        return

    sys.path.insert(0, str(HERE))
    from streamjob.runtime.connectors.kafka.broker import KafkaBroker

    cases = [c for c in args.only.split(",") if c]
    missing = [c for c in cases if not available(c)]
    if missing:
        print(f"skipped (run `python bench/kafka.py --setup` first): {', '.join(missing)}", file=sys.stderr)
        cases = [c for c in cases if c not in missing]
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%d %B %Y %H:%M UTC")
    host = machine()
    runs: dict[str, list[dict]] = {c: [] for c in cases}
    latency: dict[str, list[dict]] = {}
    failed: dict[str, str] = {}
    with KafkaBroker() as broker:
        bootstrap = broker.bootstrap
        inputs: dict[int, str] = {}
        for n in {records_of(c, args) for c in cases} if not args.latency_only else []:
            inputs[n] = f"in-{n}-{uuid.uuid4().hex[:8]}"
            t0 = time.time()
            preload(bootstrap, inputs[n], n)
            print(f"preloaded {n:,} records in {time.time() - t0:.1f} s", file=sys.stderr, flush=True)
        for r in range(args.repeat):
            order = cases if r % 2 == 0 else cases[::-1]  # interleaved, alternating order
            for case in order if not args.latency_only else []:
                print(f"run {r + 1}/{args.repeat}: {case}", file=sys.stderr, flush=True)
                try:
                    n = records_of(case, args)
                    res = run_case(case, bootstrap, inputs[n], n, args.interval_ms, broker.pid)
                except Exception as e:  # noqa: BLE001 - a peer that fails is reported, the run goes on
                    if case.removesuffix("-off") in ("columnar", "per-record", "plain"):
                        raise
                    print(f"  FAILED: {e}", file=sys.stderr, flush=True)
                    failed[case] = str(e).splitlines()[0]
                    continue
                print(f"  {res['records_per_s']:,.0f} records/s, {res['peak_rss_mb']:.0f} MB RSS ({res['peak_pss_mb']:.0f} MB PSS), wrote {res['wrote']}",
                      file=sys.stderr, flush=True)
                runs[case].append(res)
            if args.latency_rate > 0:
                for case in [c for c in order if not c.endswith("-off") and (runs[c] or args.latency_only)]:
                    # At most half of what the case sustained in this repeat: a job that cannot keep up
                    # has no steady latency to measure.
                    if args.latency_only:
                        rate = args.pyflink_latency_rate if case == "pyflink" else args.latency_rate
                    else:
                        rate = int(min(args.latency_rate, runs[case][-1]["records_per_s"] / 2))
                    print(f"run {r + 1}/{args.repeat}: {case} latency at {rate:,} records/s", file=sys.stderr,
                          flush=True)
                    try:
                        res = run_latency(case, bootstrap, rate, args.latency_s, args.interval_ms)
                    except Exception as e:  # noqa: BLE001
                        if case.removesuffix("-off") in ("columnar", "per-record", "plain"):
                            raise
                        print(f"  FAILED: {e}", file=sys.stderr, flush=True)
                        continue
                    print(f"  p50 {res['p50_ms']:.0f} ms, p99 {res['p99_ms']:.0f} ms"
                          f"{'' if res['complete'] else ' (fell behind: ' + str(res['visible']) + ' of ' + str(res['produced']) + ' seen)'}",
                          file=sys.stderr, flush=True)
                    latency.setdefault(case, []).append(res)
    report(args, cases, runs, latency, failed, when, host)


# Issue 34's floors: against Flink SQL on the same job, exactly-once, same run; the memory of the tree.
FLOOR_VS_FLINK_SQL = {"columnar": 1.2, "per-record": 1.0}
FLOOR_PEAK_MB = 400


def floors(runs: dict, ratio) -> list[str]:
    """One line per floor whose cases ran: met or missed, with the figure."""
    out = []
    for case, floor in FLOOR_VS_FLINK_SQL.items():
        if runs.get(case) and runs.get("flink-sql"):
            r = ratio(case, "flink-sql")
            out.append(f"floor {case} exactly-once vs Flink SQL exactly-once >= {floor}x: {r:.2f}x "
                       f"{'met' if r >= floor else 'MISSED'}")
    for case in ("columnar", "per-record"):
        if runs.get(case):
            rss = statistics.median(x["peak_rss_mb"] for x in runs[case])
            pss = statistics.median(x.get("peak_pss_mb", float("nan")) for x in runs[case])
            out.append(f"floor {case} peak memory <= {FLOOR_PEAK_MB} MB: RSS {rss:.0f} MB "
                       f"{'met' if rss <= FLOOR_PEAK_MB else 'MISSED'}, PSS {pss:.0f} MB "
                       f"{'met' if pss <= FLOOR_PEAK_MB else 'MISSED'}")
    return out


def records_of(case: str, args) -> int:
    return min(args.records, args.pyflink_records) if case.startswith("pyflink") else args.records


def report(args, cases: list[str], runs: dict, latency: dict, failed: dict, when: str, host: str) -> None:
    med = lambda xs: statistics.median(xs) if xs else float("nan")  # noqa: E731
    def ratio(case: str, base: str) -> float:  # median over repeats of the ratio within a repeat
        return med([a["records_per_s"] / b["records_per_s"] for a, b in zip(runs[case], runs[base])])

    def job_time_cost(case: str) -> str:
        # From the job's own time RUNNING -> FINISHED (the final commit included), same input, with and
        # without checkpoints: what checkpoints cost the job itself. records/s above ends when the
        # watcher (a read_committed consumer sharing the two cores) has read the last record, and with
        # exactly-once the records come in bursts per checkpoint, so a watcher that falls behind a
        # burst adds its own lag to that figure.
        pairs = [(a["job"]["running_ms"], b["job"]["running_ms"]) for a, b in zip(runs[case], runs.get(case + "-off", []))
                 if a.get("job", {}).get("running_ms") and b.get("job", {}).get("running_ms")]
        return f"{med([1 - off / on for on, off in pairs]) * 100:.1f}%" if pairs else ""

    if args.latency_only:
        print(f"\nKafka -> key_by.sum -> Kafka, latency to read_committed visibility, 4 partitions, parallelism 2, "
              f"checkpoints every {args.interval_ms} ms (exactly-once; Bytewax at-least-once, the loop without); "
              f"{when}; {host}; median of {args.repeat}")
    else:
        print(f"\nKafka -> key_by.sum -> Kafka, {args.records:,} records, 4 partitions, parallelism 2, "
              f"checkpoints every {args.interval_ms} ms; {when}; {host}; median of {args.repeat}")
    if args.latency_only:
        print("| case | input rate | latency p50 | p99 | max | records measured |")
    head = (f"| {'case':<52} | {'checkpoints':<20} | {'records/s':>10} | {'vs loop':>7} | {'ckpt cost':>9} | "
            f"{'job-time cost':>13} | {'job CPU-s':>9} | {'broker CPU-s':>12} | {'p50 ms':>6} | {'p99 ms':>6} | {'peak RSS':>8} | "
            f"{'peak PSS':>8} | "
            f"sink wrote (read_committed) |")
    if not args.latency_only:
        print(head)
        print("|" + "|".join("-" * (len(c)) for c in head.split("|")[1:-1]) + "|")
    for case in cases:
        engine = case.removesuffix("-off")
        rs = runs[case]
        if args.latency_only:
            lat = latency.get(case, [])
            if lat:
                print(f"| {LABELS[engine]:<52} | {lat[0]['rate']:>7,} records/s | p50 {med([x['p50_ms'] for x in lat]):,.0f} ms "
                      f"| p99 {med([x['p99_ms'] for x in lat]):,.0f} ms | max {med([x['max_ms'] for x in lat]):,.0f} ms "
                      f"| {lat[0]['measured']:,} measured{'' if all(x['complete'] for x in lat) else ', FELL BEHIND'} |")
            continue
        if not rs:
            print(f"| {LABELS[engine]:<52} | {case:<20} | failed: {failed.get(case, '?')} |")
            continue
        checkpoints = ("1 s, at-least-once" if case == "quix-off" else
                       "1 s, exactly-once" if case == "quix" else
                       "off, sink NONE" if case.endswith("-off") else
                       "off, at-least-once" if engine == "plain" else
                       "1 s, at-least-once" if engine == "bytewax" else "1 s, exactly-once")
        vs = f"{ratio(case, 'plain'):.2f}x" if runs.get("plain") else "-"
        cost = (f"{(1 - ratio(case, case + '-off')) * 100:.1f}%" if not case.endswith("-off") and
                runs.get(case + "-off") else "")
        lat = latency.get(case, [])
        behind = "" if all(x["complete"] for x in lat) else "*"
        p50 = f"{med([x['p50_ms'] for x in lat]):.0f}{behind}" if lat else ""
        p99 = f"{med([x['p99_ms'] for x in lat]):.0f}{behind}" if lat else ""
        cpu = lambda key: (f"{med([x[key] for x in rs]):.1f}"  # noqa: E731
                           if all(x.get(key) is not None for x in rs) else "")
        ok = all(x["wrote"]["ok"] for x in rs)
        wrote = f"{rs[0]['wrote']['records']:,} records, sums {'exact' if ok else 'WRONG'}"
        if case.startswith("pyflink") and records_of(case, args) != args.records:
            wrote += " (a smaller input)"
        print(f"| {LABELS[engine]:<52} | {checkpoints:<20} | {med([x['records_per_s'] for x in rs]):>10,.0f} | "
              f"{vs:>7} | {cost:>9} | {job_time_cost(case) if not case.endswith('-off') else '':>13} | {cpu('job_cpu_s'):>9} | "
              f"{cpu('broker_cpu_s'):>12} | {p50:>6} | {p99:>6} | {med([x['peak_rss_mb'] for x in rs]):>5.0f} MB | "
              f"{med([x.get('peak_pss_mb', float('nan')) for x in rs]):>5.0f} MB | {wrote} |")
    if not args.latency_only:
        for line in floors(runs, ratio):
            print(line)
    rates = sorted({x["rate"] for xs in latency.values() for x in xs})
    if rates:
        print(f"latency: input written at {', '.join(f'{r:,}' for r in rates)} records/s (at most half of what the "
              f"case sustained); * = the job fell behind the producer (figures of the records it did output)")
    print(json.dumps({"runs": runs, "latency": latency, "failed": failed}))


if __name__ == "__main__":
    main()
