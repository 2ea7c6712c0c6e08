"""execute_and_collect(): results come back to the program, with a limit, as an iterator closed
by a context manager, from keyed and unkeyed streams."""

from pyflink.common import Types, WatermarkStrategy
from pyflink.datastream import StreamExecutionEnvironment
from pyflink.datastream.connectors.number_seq import NumberSequenceSource

env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(1)
sales = env.from_collection([("a", 1), ("b", 2), ("a", 3)],
                            type_info=Types.ROW_NAMED(["k", "v"], [Types.STRING(), Types.INT()]))
print("limit:", sales.execute_and_collect(limit=2))
with sales.map(lambda r: (r.k, r.v * 10)).execute_and_collect("collect-job") as results:
    for r in results:
        print("iterated:", r)
print("keyed:", sorted(str(r) for r in sales.key_by(lambda r: r.k).sum("v").execute_and_collect()))
# (PyFlink's KeyedStream.execute_and_collect() returns its internal (pickled key, value) rows, so
# none is collected straight from key_by here.)
numbers = env.from_source(NumberSequenceSource(1, 5), WatermarkStrategy.no_watermarks(), "numbers")
print("numbers:", list(numbers.execute_and_collect()))
print("first of many:", numbers.map(lambda n: n * n).execute_and_collect(limit=1))
