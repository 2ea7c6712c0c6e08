"""A job whose first record is printed as soon as it exists (bench/w1.py times `streamjob run` to it)."""

from streamjob.runtime import StreamExecutionEnvironment
from streamjob.runtime.connectors import DataGenSource, PrintSink

env = StreamExecutionEnvironment.get_execution_environment()
env.from_source(DataGenSource(lambda i: {"i": i}, count=20, rows_per_second=20)).sink_to(PrintSink())
env.execute("first-record")
