"""Names and keyword arguments PyFlink programs use: TimeCharacteristic, NumberSequenceSource,
from_source(..., type_info=), key_by(..., key_type=), ReducingState / AggregatingState, generic
function contexts (ProcessWindowFunction.Context[TimeWindow])."""

from typing import Iterable, Tuple

from pyflink.common import Time, Types, WatermarkStrategy
from pyflink.common.watermark_strategy import TimestampAssigner
from pyflink.datastream import (KeyedProcessFunction, RuntimeContext, StreamExecutionEnvironment,
                                TimeCharacteristic)
from pyflink.datastream.connectors.number_seq import NumberSequenceSource
from pyflink.datastream.functions import AggregateFunction, ProcessWindowFunction
from pyflink.datastream.state import (AggregatingState, AggregatingStateDescriptor, ReducingState,
                                      ReducingStateDescriptor)
from pyflink.datastream.window import TimeWindow, TumblingEventTimeWindows


class Average(AggregateFunction):
    def create_accumulator(self) -> Tuple[int, int]:
        return 0, 0

    def add(self, value: int, accumulator: Tuple[int, int]) -> Tuple[int, int]:
        return accumulator[0] + value, accumulator[1] + 1

    def get_result(self, accumulator: Tuple[int, int]) -> float:
        return accumulator[0] / accumulator[1]

    def merge(self, a: Tuple[int, int], b: Tuple[int, int]) -> Tuple[int, int]:
        return a[0] + b[0], a[1] + b[1]


class Sums(KeyedProcessFunction):
    def __init__(self):
        self.total: ReducingState = None
        self.average: AggregatingState = None

    def open(self, runtime_context: RuntimeContext):
        self.total = runtime_context.get_reducing_state(
            ReducingStateDescriptor("total", lambda a, b: a + b, Types.LONG()))
        self.average = runtime_context.get_aggregating_state(
            AggregatingStateDescriptor("average", Average(), Types.TUPLE([Types.LONG(), Types.LONG()])))

    def process_element(self, value, ctx: 'KeyedProcessFunction.Context'):
        self.total.add(value[1])
        self.average.add(value[1])
        yield ctx.get_current_key(), self.total.get(), self.average.get()


class Seconds(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp) -> int:
        return value * 1000


class Describe(ProcessWindowFunction[int, str, int, TimeWindow]):
    def process(self, key: int, context: ProcessWindowFunction.Context[TimeWindow],
                elements: Iterable[int]) -> Iterable[str]:
        window = context.window()
        yield f"{key} [{window.start}, {window.end}) {sorted(elements)}"


env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(1)
env.set_stream_time_characteristic(TimeCharacteristic.EventTime)
numbers = env.from_source(NumberSequenceSource(1, 12), WatermarkStrategy.no_watermarks(), "numbers",
                          type_info=Types.LONG())
numbers.print("number")
pairs = numbers.map(lambda n: (n % 3, n), output_type=Types.TUPLE([Types.LONG(), Types.LONG()]))
pairs.key_by(lambda t: t[0], key_type=Types.LONG()) \
    .process(Sums(), Types.TUPLE([Types.LONG(), Types.LONG(), Types.DOUBLE()])).print("sums")
numbers.assign_timestamps_and_watermarks(
    WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(Seconds())) \
    .key_by(lambda n: n % 2, key_type=Types.LONG()) \
    .window(TumblingEventTimeWindows.of(Time.seconds(5))) \
    .process(Describe(), Types.STRING()).print("window")
env.execute("names-and-arguments")
