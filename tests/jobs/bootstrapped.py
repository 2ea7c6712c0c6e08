"""A keyed job that continues from state bootstrapped by a ``SavepointWriter`` (the writer's tests).

Row i has key ``key_of(i)``; the operator (uid ``count``) adds 1 to a ValueState "count" (default 0)
per row and emits ``{"key", "i", "count"}``, so with a bootstrapped count per key the output says
exactly which keys the restore found, in which subtask, with which value. With ``rich=True`` it also
checks list, map, reducing and aggregating state the bootstrap wrote, and emits the timers it
finds firing.
"""

from streamjob.runtime import (AggregateFunction, KeyedProcessFunction, ListStateDescriptor, MapStateDescriptor,
                               ReducingStateDescriptor, StreamExecutionEnvironment, AggregatingStateDescriptor,
                               ValueStateDescriptor)
from streamjob.runtime.connectors import DataGenSource, FileSink


def initial(key: int) -> int:
    """The count the bootstrap gives key ``key``."""
    return key % 7 + 1


class Average(AggregateFunction):
    def create_accumulator(self):
        return (0, 0)

    def add(self, value, acc):
        return acc[0] + value, acc[1] + 1

    def get_result(self, acc):
        return acc[0] / acc[1] if acc[1] else None

    def merge(self, a, b):
        return a[0] + b[0], a[1] + b[1]


def descriptors() -> dict:
    return {"count": ValueStateDescriptor("count", default=0), "recent": ListStateDescriptor("recent"),
            "tags": MapStateDescriptor("tags"), "total": ReducingStateDescriptor("total", lambda a, b: a + b),
            "average": AggregatingStateDescriptor("average", Average())}


class AddOne(KeyedProcessFunction):
    def __init__(self, rich: bool = False):
        self.rich = rich

    def open(self, ctx):
        d = descriptors()
        self.count = ctx.get_state(d["count"])
        if self.rich:
            self.recent = ctx.get_list_state(d["recent"])
            self.tags = ctx.get_map_state(d["tags"])
            self.total = ctx.get_reducing_state(d["total"])
            self.average = ctx.get_aggregating_state(d["average"])

    def process_element(self, row, ctx):
        n = self.count.value() + 1
        self.count.update(n)
        out = {"key": row["key"], "i": row["i"], "count": n}
        if self.rich:
            out.update(recent=list(self.recent.get()), tag=self.tags.get("parity"), total=self.total.get(),
                       average=self.average.get())
        yield out

    def on_timer(self, timestamp, ctx):
        yield {"key": ctx.get_current_key(), "i": -1, "count": -1, "timer": timestamp}


def build(out: str, checkpoints: str, rows: int, key_of, parallelism: int, backend: str, restore: str | None = None,
          rich: bool = False, uid: str = "count", conf: dict | None = None) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    env.set_state_backend(backend)
    env.enable_checkpointing(1000)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoints)
    if restore:
        env.configure({"execution.state-recovery.path": restore})
    if conf:
        env.configure(conf)
    (env.from_source(DataGenSource(lambda i: {"key": key_of(i), "i": i}, count=rows), name="rows").uid("rows")
        .key_by("key").process(AddOne(rich)).uid(uid)
        .sink_to(FileSink.parquet(out)).uid("files"))
    return env
