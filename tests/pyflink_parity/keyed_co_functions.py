"""Keyed state in a CoMapFunction and a CoFlatMapFunction of keyed connected streams
(connect(...).key_by(k1, k2)): both inputs share each key's state."""

from pyflink.common import Types
from pyflink.datastream import (CoFlatMapFunction, CoMapFunction, RuntimeContext,
                                StreamExecutionEnvironment)
from pyflink.datastream.state import MapState, MapStateDescriptor, ValueState, ValueStateDescriptor


class CountPerInput(CoMapFunction):
    def open(self, runtime_context: RuntimeContext):
        self.first: ValueState = runtime_context.get_state(ValueStateDescriptor("first", Types.INT()))
        self.second: ValueState = runtime_context.get_state(ValueStateDescriptor("second", Types.INT()))

    def map1(self, value):
        n = (self.first.value() or 0) + 1
        self.first.update(n)
        return f"{value[0]} first #{n}: {value[1]}"

    def map2(self, value):
        n = (self.second.value() or 0) + 1
        self.second.update(n)
        return f"{value[0]} second #{n}: {value[1]}"


class Total(CoFlatMapFunction):
    """One count per key over both inputs: the totals each key reaches are 1..n, in any interleaving."""

    def open(self, runtime_context: RuntimeContext):
        self.seen: MapState = runtime_context.get_map_state(MapStateDescriptor("seen", Types.STRING(), Types.INT()))

    def flat_map1(self, value):
        yield from self._count(value)

    def flat_map2(self, value):
        yield from self._count(value)

    def _count(self, value):
        n = (self.seen.get("total") or 0) + 1
        self.seen.put("total", n)
        yield value[0], n


env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(1)
orders = env.from_collection([("apple", 3), ("pear", 1), ("apple", 5), ("fig", 2)],
                             type_info=Types.TUPLE([Types.STRING(), Types.INT()]))
payments = env.from_collection([("apple", 30), ("apple", 50), ("pear", 10)],
                               type_info=Types.TUPLE([Types.STRING(), Types.INT()]))
connected = orders.connect(payments).key_by(lambda o: o[0], lambda p: p[0])
connected.map(CountPerInput(), output_type=Types.STRING()).print("count")
connected.flat_map(Total(), output_type=Types.TUPLE([Types.STRING(), Types.INT()])).print("total")
env.execute("keyed-co-functions")
