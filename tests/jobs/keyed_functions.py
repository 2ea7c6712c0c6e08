"""``counting.py``'s job written with keyed state in map / flat_map / filter / reduce functions
(``open(runtime_context)``, ``runtime_context.get_state(...)``) instead of a KeyedProcessFunction.

Each stage keeps its own state and checks it against the count the previous stage computed, so a
stage whose state was lost or mixed up (after a restore, a rescale, a change of backend) fails the
job; the committed output must equal ``counting.expected_rows``.
"""

from streamjob.runtime import (
    ExternalizedCheckpointRetention,
    FilterFunction,
    FlatMapFunction,
    ListStateDescriptor,
    MapFunction,
    MapStateDescriptor,
    ReduceFunction,
    RestartStrategies,
    StreamExecutionEnvironment,
    ValueStateDescriptor,
)
from streamjob.runtime.connectors import DataGenSource, FileSink

from jobs.counting import row


class CountMap(MapFunction):
    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count", default=0))
        self.recent = runtime_context.get_list_state(ListStateDescriptor("recent"))

    def map(self, value):
        c = self.count.value() + 1
        self.count.update(c)
        recent = self.recent.get()[-1:] + [value["i"]]
        self.recent.update(recent)
        return {"key": value["key"], "i": value["i"], "count": c, "prev": recent[-2] if len(recent) > 1 else -1}


class CheckFlatMap(FlatMapFunction):
    def open(self, runtime_context):
        self.seen = runtime_context.get_map_state(MapStateDescriptor("seen"))

    def flat_map(self, value):
        n = (self.seen.get("n") or 0) + 1
        self.seen.put("n", n)
        if n != value["count"]:
            raise AssertionError(f"flat_map state of key {value['key']} says {n}, map says {value['count']}")
        yield value


class CheckFilter(FilterFunction):
    def open(self, runtime_context):
        self.last = runtime_context.get_state(ValueStateDescriptor("last", default=-1))

    def filter(self, value):
        if self.last.value() != value["prev"]:
            raise AssertionError(f"filter state of key {value['key']} says {self.last.value()}, map says "
                                 f"{value['prev']}")
        self.last.update(value["i"])
        return True


class CheckReduce(ReduceFunction):
    """Emits the newest record; counts its calls per key (one fewer than the key's records)."""

    def open(self, runtime_context):
        self.calls = runtime_context.get_state(ValueStateDescriptor("calls", default=0))

    def reduce(self, value1, value2):
        calls = self.calls.value() + 1
        self.calls.update(calls)
        if calls != value2["count"] - 1:
            raise AssertionError(f"reduce state of key {value2['key']} says {calls} calls at count {value2['count']}")
        return value2


def build(out: str, checkpoints: str, rows: int, rate: float, *, parallelism: int, backend: str = "hashmap",
          restore: str | None = None) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    if restore:
        env.configure({"execution.state-recovery.path": restore})
    env.enable_checkpointing(250)
    env.set_state_backend(backend)
    config = env.get_checkpoint_config()
    config.set_checkpoint_storage(checkpoints)
    config.set_externalized_checkpoint_retention(ExternalizedCheckpointRetention.RETAIN_ON_CANCELLATION)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 100))
    numbers = env.from_source(DataGenSource(row, count=rows, rows_per_second=rate), name="numbers").uid("numbers")
    counted = numbers.key_by("key").map(CountMap()).uid("map")
    checked = counted.key_by("key").flat_map(CheckFlatMap()).uid("flat_map")
    checked = checked.key_by("key").filter(CheckFilter()).uid("filter")
    checked.key_by("key").reduce(CheckReduce()).uid("reduce").sink_to(FileSink.jsonl(out)).uid("files")
    return env
