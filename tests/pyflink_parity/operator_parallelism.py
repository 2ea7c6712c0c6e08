"""Per-operator parallelism: a flat_map at 3, a keyed reduce at 2, a filter and its sink at 1, under a
default of 2. Edges left forward across a parallelism change become rebalance (as Flink chooses)."""

from pyflink.common import Types
from pyflink.datastream import StreamExecutionEnvironment

env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(2)
lines = env.from_collection(["to be or not to be", "that is the question", "to be is to do"] * 3,
                            type_info=Types.STRING())
words = lines.flat_map(lambda s: [(w, 1) for w in s.split()],
                       output_type=Types.TUPLE([Types.STRING(), Types.INT()])).set_parallelism(3)
counts = words.key_by(lambda t: t[0], key_type=Types.STRING()) \
    .reduce(lambda a, b: (a[0], a[1] + b[1])).set_parallelism(2)
counts.filter(lambda t: t[1] % 3 == 0).set_parallelism(1).print().set_parallelism(1)
env.execute("operator-parallelism")
