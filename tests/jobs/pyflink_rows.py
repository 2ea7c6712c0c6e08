"""A PyFlink DataStream program with only its imports changed (rows, types, side outputs).

    from pyflink.common import Row, Types                ->  from streamjob.runtime import Row, Types
    from pyflink.datastream import OutputTag, ...         ->  from streamjob.runtime import OutputTag, ...
"""

from streamjob.runtime import OutputTag, ProcessFunction, Row, StreamExecutionEnvironment, Types

env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(1)

# From PyFlink's documentation: a collection with a row type, mapped and printed.
ds = env.from_collection(
    collection=[(1, "aaa|bb"), (2, "bb|a"), (3, "aaa|a")],
    type_info=Types.ROW([Types.INT(), Types.STRING()]))
ds.map(lambda r: Row(r[0] * 10, r[1].upper()), output_type=Types.ROW([Types.INT(), Types.STRING()])).print()

people = env.from_collection(
    [{"name": "Alice", "age": 11}, {"name": "Bob", "age": 42}, {"name": "Carol", "age": 7}],
    type_info=Types.ROW_NAMED(["name", "age"], [Types.STRING(), Types.INT()]))
minors = OutputTag("minors", Types.ROW_NAMED(["name", "age"], [Types.STRING(), Types.INT()]))


class Adults(ProcessFunction):
    def process_element(self, person, ctx):
        if person.age < 18:
            yield minors, person
        else:
            yield Row(name=person.name, decade=person["age"] // 10)


adults = people.process(Adults(), output_type=Types.ROW_NAMED(["decade", "name"], [Types.INT(), Types.STRING()]))
adults.print("adult")
adults.get_side_output(minors).map(lambda p: f"{p.name} is {p.age}", output_type=Types.STRING()).print("minor")
env.execute("pyflink-rows")
