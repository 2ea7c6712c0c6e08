"""What user and connector metrics cost the task thread, as ratios and shares, in one run.

    python bench/metrics.py [--records 1000000] [--partitions 64] [--repeat 5]

* counter in a map: a per-record map function that calls ``counter.inc()`` against the same function
  without it (the baseline), both over a list of ``--records`` ints in a Python loop (the per-record
  path's loop); figure: the ratio of their times (1.00x: free);
* the task's metric report of a KafkaSource subtask that owns ``--partitions`` partitions
  (pendingRecords + currentOffset/committedOffset per partition + commit counters):
  ``MetricRegistry.report()`` per report, as a share of the report interval (500 ms);
* librdkafka's statistics of that consumer (a document shaped as librdkafka 2.x writes it, with
  every partition field): ``partition_ends`` per callback, as a share of its interval (1 s).

Medians over ``--repeat`` interleaved runs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from streamjob.runtime.api.metrics import MetricRegistry
from streamjob.runtime.connectors.kafka.lag import partition_ends, pending_records

PARTITION_FIELDS = ("broker", "leader", "desired", "unknown", "msgq_cnt", "msgq_bytes", "xmit_msgq_cnt",
                    "xmit_msgq_bytes", "fetchq_cnt", "fetchq_size", "query_offset", "next_offset", "app_offset",
                    "stored_offset", "stored_leader_epoch", "commited_offset", "committed_offset",
                    "committed_leader_epoch", "eof_offset", "lo_offset", "hi_offset", "ls_offset", "consumer_lag",
                    "consumer_lag_stored", "leader_epoch", "txmsgs", "txbytes", "rxmsgs", "rxbytes", "msgs",
                    "rx_ver_drops", "msgs_inflight", "next_ack_seq", "next_err_seq", "acked_msgid")


def statistics_doc(partitions: int) -> str:
    parts = {str(p): {"partition": p, "fetch_state": "active", **{f: 1000 + p for f in PARTITION_FIELDS}}
             for p in range(partitions)}
    parts["-1"] = {"partition": -1, **{f: -1001 for f in PARTITION_FIELDS}}
    window = {k: 0 for k in ("min", "max", "avg", "sum", "stddev", "p50", "p75", "p90", "p95", "p99", "p99_99",
                             "outofrange", "hdrsize", "cnt")}
    brokers = {f"127.0.0.1:9092/{b}": {"name": f"127.0.0.1:9092/{b}", "rtt": window, "throttle": window,
                                       "int_latency": window, "outbuf_latency": window, "req": {"Fetch": 10}}
               for b in range(3)}
    return json.dumps({"name": "c#consumer-1", "type": "consumer", "ts": 1, "brokers": brokers,
                       "topics": {"clicks": {"topic": "clicks", "batchsize": window, "batchcnt": window,
                                             "partitions": parts}}})


def kafka_registry(partitions: int) -> MetricRegistry:
    """The metrics a KafkaSourceReader registers (source.py), over splits at made-up positions."""
    registry = MetricRegistry("Source: clicks", 0)
    group = registry.group(system=True)
    positions = {("clicks", p): 900 + p for p in range(partitions)}
    ends = {("clicks", p): 1000 + p for p in range(partitions)}
    committed = dict(positions)
    group.gauge("pendingRecords", lambda: pending_records(((tp, pos, None, False) for tp, pos in positions.items()),
                                                          ends))
    reader = group.add_group("KafkaSourceReader")
    reader.counter("commitsSucceeded")
    reader.counter("commitsFailed")
    for tp in positions:
        g = reader.add_group("topic", tp[0]).add_group("partition", str(tp[1]))
        g.gauge("currentOffset", lambda tp=tp: positions[tp])
        g.gauge("committedOffset", lambda tp=tp: committed.get(tp))
    return registry


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()

    counter = MetricRegistry("Map", 0).group().counter("seen")
    inc = counter.inc

    def plain(v):
        return v

    def counted(v):
        inc()
        return v

    rows = list(range(args.records))
    registry = kafka_registry(args.partitions)
    doc = statistics_doc(args.partitions)
    times: dict[str, list[float]] = {"plain": [], "counted": [], "report": [], "stats": []}
    for _ in range(args.repeat):
        for name, fn in (("plain", plain), ("counted", counted)):
            t = time.perf_counter()
            out = [fn(r) for r in rows]
            times[name].append(time.perf_counter() - t)
            assert len(out) == len(rows)
        t = time.perf_counter()
        for _ in range(100):
            entries = registry.report()
        times["report"].append((time.perf_counter() - t) / 100)
        t = time.perf_counter()
        for _ in range(100):
            ends = partition_ends(doc, True)
        times["stats"].append((time.perf_counter() - t) / 100)
        assert len(ends) == args.partitions and len(entries) == 3 + 2 * args.partitions
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"records {args.records}, partitions {args.partitions}, repeat {args.repeat} (medians)")
    print(f"map with counter.inc(): {med['counted'] / med['plain']:.2f}x the plain map's time "
          f"({med['plain'] / args.records * 1e9:.0f} vs {med['counted'] / args.records * 1e9:.0f} ns/record)")
    print(f"metric report of a KafkaSource subtask: {med['report'] * 1e3:.3f} ms = "
          f"{med['report'] / 0.5 * 100:.3f}% of the 500 ms report interval")
    print(f"librdkafka statistics ({len(doc) / 1024:.0f} KiB): {med['stats'] * 1e3:.3f} ms = "
          f"{med['stats'] / 1.0 * 100:.3f}% of the 1 s statistics interval")


if __name__ == "__main__":
    main()
