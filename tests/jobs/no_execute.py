from streamjob.runtime import StreamExecutionEnvironment
from streamjob.runtime.connectors import PrintSink

env = StreamExecutionEnvironment.get_execution_environment()
env.from_collection([1, 2, 3]).sink_to(PrintSink())
# forgot env.execute()
