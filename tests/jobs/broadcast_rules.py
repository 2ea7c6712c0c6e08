"""A broadcast state job for the fault-tolerance tests: rules broadcast to a keyed stream.

Row i has key i % KEYS and event time ``1000 + 5 i`` minus up to 30 ms of disorder (as in
``event_time``). Rule j, from a second source, takes effect at event time ``1000 + 250 j`` with
factor ``j % 7 + 1``; it is kept in two broadcast states (factor and rule number by the time it
takes effect). A KeyedBroadcastProcessFunction holds each row in keyed MapState until an
event-time timer at the row's timestamp fires: the operator's watermark is the minimum of both
inputs', so by then every rule up to that time has arrived in every subtask, and the row is
answered with the rule in force at its time, whatever the interleaving of the two inputs. So
the output is deterministic; ``expected`` computes it for a run without failures.
"""

from __future__ import annotations

from streamjob.runtime import (
    ExternalizedCheckpointRetention,
    KeyedBroadcastProcessFunction,
    MapStateDescriptor,
    RestartStrategies,
    StreamExecutionEnvironment,
    WatermarkStrategy,
    Duration,
)
from streamjob.runtime.connectors import DataGenSource, FileSink

KEYS = 20
EVERY = 250  # ms of event time between rules
FACTORS = MapStateDescriptor("factors")  # rule time -> factor
NUMBERS = MapStateDescriptor("numbers")  # rule time -> rule number


def row(i: int) -> dict:
    return {"key": i % KEYS, "i": i, "ts": 1000 + 5 * i - (i % 4) * 10}


def rule(j: int) -> dict:
    return {"j": j, "ts": 1000 + EVERY * j, "factor": j % 7 + 1}


def rule_count(rows: int) -> int:
    return (5 * rows) // EVERY + 1


class ApplyRules(KeyedBroadcastProcessFunction):
    def open(self, ctx):
        self.pending = ctx.get_map_state(MapStateDescriptor("pending"))  # timestamp -> row numbers

    def process_element(self, value, ctx):
        assert ctx.timestamp() == value["ts"], (ctx.timestamp(), value)
        self.pending.put(value["ts"], (self.pending.get(value["ts"]) or []) + [value["i"]])
        ctx.timer_service().register_event_time_timer(value["ts"])

    def process_broadcast_element(self, value, ctx):
        ctx.get_broadcast_state(FACTORS).put(value["ts"], value["factor"])
        ctx.get_broadcast_state(NUMBERS).put(value["ts"], value["j"])

    def on_timer(self, timestamp, ctx):
        since = 1000 + (timestamp - 1000) // EVERY * EVERY  # the rule in force at the timer's time
        factor = ctx.get_broadcast_state(FACTORS).get(since) if timestamp >= 1000 else 0
        number = ctx.get_broadcast_state(NUMBERS).get(since) if timestamp >= 1000 else -1
        for i in self.pending.get(timestamp):
            yield {"key": ctx.get_current_key(), "i": i, "v": None if factor is None else i * factor, "rule": number}
        self.pending.remove(timestamp)


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
    rule_rate = None if rate is None else rate * 5 / EVERY  # the rules keep pace with the rows in event time
    rules = env.from_source(DataGenSource(rule, count=rule_count(rows), rows_per_second=rule_rate),
                            WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner("ts"),
                            "rules").uid("rules")
    rows_.key_by("key").connect(rules.broadcast(FACTORS, NUMBERS)).process(ApplyRules()).uid("apply-rules") \
        .sink_to(FileSink.jsonl(out)).uid("sink")
    return env


def expected(rows: int) -> list[tuple]:
    out = []
    for i in range(rows):
        r = row(i)
        if r["ts"] < 1000:
            out.append((r["key"], i, 0, -1))
            continue
        j = (r["ts"] - 1000) // EVERY
        out.append((r["key"], i, i * rule(j)["factor"], j))
    return sorted(out)
