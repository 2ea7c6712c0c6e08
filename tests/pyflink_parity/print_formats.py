"""print() of typed and untyped streams: PyFlink prints str(value) for a stream without a declared
type, formats a row type itself (+I[a,1]) and lets Java print every other declared type."""

import datetime

from pyflink.common import Row, Types
from pyflink.datastream import StreamExecutionEnvironment

env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(1)

rows = env.from_collection([(1, "a", 0.5), (2, "b c", None)],
                           type_info=Types.ROW([Types.INT(), Types.STRING(), Types.DOUBLE()]))
rows.print("typed-row")
rows.map(lambda r: r).print("untyped-row")
rows.filter(lambda r: r[0] > 1).print("filtered-typed-row")

people = env.from_collection([("Alice", 11), ("Bob", 42)],
                             type_info=Types.ROW_NAMED(["name", "age"], [Types.STRING(), Types.INT()]))
people.print("typed-named-row")
people.map(lambda p: Row(name=p.name, decade=p.age // 10)).print("untyped-named-row")
people.map(lambda p: (p.name, p.age), output_type=Types.TUPLE([Types.STRING(), Types.INT()])).print("tuple")
people.map(lambda p: (p.name, p.age)).print("untyped-tuple")
people.map(lambda p: {"name": p.name, "age": p.age}).print("untyped-dict")
people.map(lambda p: p.age * 1.5, output_type=Types.DOUBLE()).print("double")
people.map(lambda p: p.age * 1e6, output_type=Types.FLOAT()).print("float")
people.map(lambda p: p.age / 3, output_type=Types.FLOAT()).print("float-fraction")
people.map(lambda p: p.age > 18, output_type=Types.BOOLEAN()).print("boolean")
people.map(lambda p: p.age > 18).print("untyped-boolean")
people.map(lambda p: p.age * 10 ** 10, output_type=Types.LONG()).print("long")
people.map(lambda p: p.name, output_type=Types.STRING()).print("string")
people.map(lambda p: [p.age, p.age + 1], output_type=Types.LIST(Types.INT())).print("list")
people.map(lambda p: {p.name: p.age, "x": 0, "name": 1},
           output_type=Types.MAP(Types.STRING(), Types.INT())).print("map")
people.map(lambda p: Row(p.name, p.age > 18, 0.25),
           output_type=Types.ROW([Types.STRING(), Types.BOOLEAN(), Types.FLOAT()])).print("row-of-bool-float")
people.map(lambda p: (p.name, Row(p.age, True)),
           output_type=Types.TUPLE([Types.STRING(), Types.ROW([Types.INT(), Types.BOOLEAN()])])).print("tuple-of-row")
people.map(lambda p: datetime.date(2020, 1, p.age % 28 + 1), output_type=Types.SQL_DATE()).print("date")
people.key_by(lambda p: p.name).map(lambda p: p.age).print("keyed-untyped")
people.key_by(lambda p: p.name).reduce(lambda a, b: a).print("keyed-reduce-typed")
env.execute("print-formats")
