"""Semantics users see: rolling sum/min/max keep the first record's other fields (tuples and named
rows), min_by/max_by return the whole record, from_collection is a non-parallel source (its order
survives a parallelism of 2 into execute_and_collect), and print() in a user function's open, map
and close reaches the program's standard output."""

from pyflink.common import Types
from pyflink.datastream import MapFunction, RuntimeContext, StreamExecutionEnvironment

env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(1)

TUPLE = Types.TUPLE([Types.STRING(), Types.INT(), Types.STRING()])
tuples = env.from_collection([("a", 1, "x"), ("b", 5, "y"), ("a", 3, "z"), ("a", 2, "w"), ("b", 4, "v"),
                              ("b", 6, "u")], type_info=TUPLE)
print("tuple sum:", list(tuples.key_by(lambda t: t[0]).sum(1).execute_and_collect()))
print("tuple min:", list(tuples.key_by(lambda t: t[0]).min(1).execute_and_collect()))
print("tuple max:", list(tuples.key_by(lambda t: t[0]).max(1).execute_and_collect()))
print("tuple min_by:", list(tuples.key_by(lambda t: t[0]).min_by(1).execute_and_collect()))
print("tuple max_by:", list(tuples.key_by(lambda t: t[0]).max_by(1).execute_and_collect()))

ROW = Types.ROW_NAMED(["k", "v", "note"], [Types.STRING(), Types.INT(), Types.STRING()])
rows = env.from_collection([("a", 1, "x"), ("b", 5, "y"), ("a", 3, "z"), ("a", 2, "w"), ("b", 4, "v"),
                            ("b", 6, "u")], type_info=ROW)
print("row sum:", list(rows.key_by(lambda r: r.k).sum("v").execute_and_collect()))
print("row min:", list(rows.key_by(lambda r: r.k).min("v").execute_and_collect()))
print("row max:", list(rows.key_by(lambda r: r.k).max("v").execute_and_collect()))
print("row min_by:", list(rows.key_by(lambda r: r.k).min_by("v").execute_and_collect()))
print("row max_by:", list(rows.key_by(lambda r: r.k).max_by("v").execute_and_collect()))

env.set_parallelism(2)
numbers = env.from_collection(list(range(20)), type_info=Types.INT())
print("first five:", numbers.execute_and_collect(limit=5))
print("all in order:", list(numbers.execute_and_collect()))


class Shout(MapFunction):
    def open(self, runtime_context: RuntimeContext):
        print("open", runtime_context.get_index_of_this_subtask(),
              "of", runtime_context.get_number_of_parallel_subtasks())

    def map(self, value):
        print("map saw", value)
        return value.upper()

    def close(self):
        print("close")


words = env.from_collection(["ant", "bee", "cat", "dog"], type_info=Types.STRING())
print("shouted:", sorted(words.map(Shout(), output_type=Types.STRING()).execute_and_collect()))
