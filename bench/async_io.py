"""The async wait operator against a per-record map, in one process, one run (no Spark: the
operator is driven the way its task drives it: batches in, ``poll_async`` when its doorbell rings).

    python bench/async_io.py [--rows 20000] [--latency-ms 10] [--repeat 3]

Cases (records/s; ratios against the first, measured in the same run):

* map: ``MapOperator`` with ``lambda v: v * 2`` (the baseline);
* async, no wait: ``async_invoke`` returns ``[v * 2]`` at once: the operator's own cost per record
  (the hand-over to the loop thread and back);
* async, ``--latency-ms`` per call, capacity 1 / 10 / 100, unordered and ordered: what the
  concurrency buys over calling a service one record at a time (capacity 1 is that).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from streamjob.runtime import AsyncDataStream, AsyncFunction, StreamExecutionEnvironment, Time
from streamjob.runtime.api.functions import RuntimeContext
from streamjob.runtime.connectors import DiscardingSink
from streamjob.runtime.graph.job_graph import build_job_graph
from streamjob.runtime.network.events import MAX_WATERMARK
from streamjob.runtime.task.operators import create_operator

BATCH = 500


class Service(AsyncFunction):
    def __init__(self, latency_ms: float):
        self.latency_s = latency_ms / 1000.0

    async def async_invoke(self, value):
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        return [value * 2]


def _operator(build):
    env = StreamExecutionEnvironment.get_execution_environment()
    stream = build(env.from_collection([0]))
    stream.sink_to(DiscardingSink())
    g = build_job_graph(env._transformations, env.get_config(), "bench")
    node = g.operators[stream._t.id]
    op = create_operator(node, RuntimeContext(node.name, 0, 1, 128, job_parameters=g.config))
    counted = [0]
    op.output.connect(lambda b, ts: counted.__setitem__(0, counted[0] + len(b)))
    op.open()
    return op, counted


def run(build, rows: int) -> float:
    """records/s through one operator, driven as its task drives it."""
    op, counted = _operator(build)
    pending = list(range(rows))
    started = time.perf_counter()
    while pending:
        if getattr(op, "is_available", lambda: True)():
            op.process_batch(pending[:BATCH], 0)
            del pending[:BATCH]
        elif hasattr(op, "doorbell"):
            op.doorbell.wait(0.05)
        if hasattr(op, "poll_async"):
            op.poll_async()
    op.process_watermark(MAX_WATERMARK)
    op.finish()
    elapsed = time.perf_counter() - started
    assert counted[0] == rows, (counted[0], rows)
    op.close()
    op.dispose()
    return rows / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--latency-ms", type=float, default=10.0)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    t = Time.seconds(60)
    lat = args.latency_ms
    cases = [
        ("map", args.rows, lambda s: s.map(lambda v: v * 2)),
        ("async, no wait, unordered, capacity 100", args.rows,
         lambda s: AsyncDataStream.unordered_wait(s, Service(0), t, 100)),
        ("async, no wait, ordered, capacity 100", args.rows,
         lambda s: AsyncDataStream.ordered_wait(s, Service(0), t, 100)),
    ]
    for capacity in (1, 10, 100):
        # capacity 1 waits one latency per record: fewer rows keep it to a few seconds
        n = max(100, min(args.rows, int(2000 / max(lat, 0.1)) * capacity))
        for mode in ("unordered", "ordered"):
            wait = AsyncDataStream.unordered_wait if mode == "unordered" else AsyncDataStream.ordered_wait
            cases.append((f"async, {lat:g} ms per call, {mode}, capacity {capacity}", n,
                          lambda s, w=wait, c=capacity: w(s, Service(lat), t, c)))
    results = {}
    for name, n, build in cases:
        results[name] = statistics.median(run(build, n) for _ in range(args.repeat))
    base = results["map"]
    print(f"{'case':55} {'records/s':>12} {'x map':>8}")
    for name, rate in results.items():
        print(f"{name:55} {rate:12,.0f} {rate / base:8.3f}")
    one = results[f"async, {lat:g} ms per call, unordered, capacity 1"]
    print(f"\ncapacity 100 / capacity 1 at {lat:g} ms per call (unordered): "
          f"{results[f'async, {lat:g} ms per call, unordered, capacity 100'] / one:.1f}x")


if __name__ == "__main__":
    main()
