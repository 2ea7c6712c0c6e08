"""count_window(size) and count_window(size, slide): PyFlink fires full windows only (its
CountTumblingWindowAssigner / CountSlidingWindowAssigner with a CountTrigger of the window size)."""

from typing import Iterable

from pyflink.common import Types
from pyflink.datastream import StreamExecutionEnvironment
from pyflink.datastream.functions import ProcessWindowFunction
from pyflink.datastream.window import CountWindow


class Collect(ProcessWindowFunction[tuple, str, str, CountWindow]):
    def process(self, key: str, context: ProcessWindowFunction.Context[CountWindow],
                elements: Iterable[tuple]) -> Iterable[str]:
        yield f"{key} {context.window()} {[e[1] for e in elements]}"


env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(1)
data = env.from_collection([("a", i) for i in range(8)] + [("b", i) for i in range(4)],
                           type_info=Types.TUPLE([Types.STRING(), Types.INT()]))
keyed = data.key_by(lambda t: t[0], key_type=Types.STRING())
keyed.count_window(3).process(Collect(), Types.STRING()).print("tumbling")
keyed.count_window(3, 2).process(Collect(), Types.STRING()).print("sliding")
keyed.count_window(4, 1).process(Collect(), Types.STRING()).print("sliding-by-one")
keyed.count_window(2).reduce(lambda a, b: (a[0], a[1] + b[1])).print("tumbling-reduce")
keyed.count_window(2, 3).reduce(lambda a, b: (a[0], a[1] + b[1])).print("sliding-gaps-reduce")
env.execute("count-windows")
