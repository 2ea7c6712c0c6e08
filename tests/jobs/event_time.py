"""An event-time job for the fault-tolerance tests: windows and timers open across failures.

Row i has key i % KEYS and event time ``1000 + 5 i`` minus up to 30 ms of disorder; the watermark
trails by 40 ms, so no row is ever late and every result is deterministic:
* a tumbling event-time window (aggregate + window function) sums ``i`` per key and window;
* the built-in ``sum("i")`` over the same windows, on the columnar path;
* a KeyedProcessFunction counts rows per key and window in MapState and emits the count from an
  event-time timer set at the window's last millisecond.
Both go to the exactly-once FileSink; ``expected`` computes the output of a run without failures.
"""

from __future__ import annotations

from collections import defaultdict

from streamjob.runtime import (
    AggregateFunction,
    Duration,
    ExternalizedCheckpointRetention,
    KeyedProcessFunction,
    MapStateDescriptor,
    ProcessFunction,
    ProcessWindowFunction,
    RestartStrategies,
    StreamExecutionEnvironment,
    Time,
    TumblingEventTimeWindows,
    WatermarkStrategy,
)
from streamjob.runtime.connectors import DataGenSource, FileSink

KEYS = 20
WINDOW = 500  # ms of event time


def row(i: int) -> dict:
    return {"key": i % KEYS, "i": i, "ts": 1000 + 5 * i - (i % 4) * 10}


class Sum(AggregateFunction):
    def create_accumulator(self):
        return 0

    def add(self, value, accumulator):
        return accumulator + value["i"]

    def get_result(self, accumulator):
        return accumulator

    def merge(self, a, b):
        return a + b


class WithWindow(ProcessWindowFunction):
    def process(self, key, context, sums):
        w = context.window()
        yield {"kind": "window", "key": key, "end": w.end, "n": next(iter(sums))}


class Tagged(ProcessFunction):
    """The columnar window sum's rows, named like the others; the window is in the timestamp."""

    def process_element(self, value, ctx):
        yield {"kind": "sum", "key": value["key"], "end": ctx.timestamp() + 1, "n": value["i"]}


class CountPerWindow(KeyedProcessFunction):
    def open(self, ctx):
        self.counts = ctx.get_map_state(MapStateDescriptor("per-window"))

    def process_element(self, value, ctx):
        assert ctx.timestamp() == value["ts"], (ctx.timestamp(), value)
        end = (value["ts"] // WINDOW + 1) * WINDOW
        self.counts.put(end, (self.counts.get(end) or 0) + 1)
        ctx.timer_service().register_event_time_timer(end - 1)

    def on_timer(self, timestamp, ctx):
        end = timestamp + 1
        n = self.counts.get(end)
        self.counts.remove(end)
        yield {"kind": "timer", "key": ctx.get_current_key(), "end": end, "n": n}


def build(out: str, checkpoints: str | None, rows: int, rate: float | None, *, parallelism: int = 3,
          backend: str = "hashmap", interval_ms: int = 300, restore: str | None = None) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    env.get_config().set("pipeline.auto-watermark-interval", 50)
    if checkpoints:
        env.enable_checkpointing(interval_ms)
        config = env.get_checkpoint_config()
        config.set_checkpoint_storage(checkpoints)
        config.set_externalized_checkpoint_retention(ExternalizedCheckpointRetention.RETAIN_ON_CANCELLATION)
        env.set_restart_strategy(RestartStrategies.fixed_delay_restart(20, 100))
        env.set_state_backend(backend)
    if restore:
        env.get_config().set("execution.state-recovery.path", restore)
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(40)).with_timestamp_assigner("ts")
    rows_ = env.from_source(DataGenSource(row, count=rows, rows_per_second=rate), strategy, "rows").uid("rows")
    keyed = rows_.key_by("key")
    windows = keyed.window(TumblingEventTimeWindows.of(Time.milliseconds(WINDOW))) \
        .aggregate(Sum(), window_function=WithWindow()).uid("windows")
    timers = keyed.process(CountPerWindow()).uid("timers")
    # the built-in sum on Arrow batches (the columnar window path)
    sums = keyed.window(TumblingEventTimeWindows.of(Time.milliseconds(WINDOW))).sum("i").uid("sums") \
        .process(Tagged())
    windows.union(timers, sums).sink_to(FileSink.jsonl(out)).uid("sink")
    return env


def expected(rows: int) -> list[tuple]:
    sums: dict = defaultdict(int)
    counts: dict = defaultdict(int)
    for i in range(rows):
        r = row(i)
        end = (r["ts"] // WINDOW + 1) * WINDOW
        sums[(r["key"], end)] += i
        counts[(r["key"], end)] += 1
    return sorted([("window", k, e, n) for (k, e), n in sums.items()] +
                  [("sum", k, e, n) for (k, e), n in sums.items()] +
                  [("timer", k, e, n) for (k, e), n in counts.items()])
