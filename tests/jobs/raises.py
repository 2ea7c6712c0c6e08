from streamjob.runtime import StreamExecutionEnvironment
from streamjob.runtime.connectors import DiscardingSink


def risky(x):
    return 100 // (x - 37)


env = StreamExecutionEnvironment.get_execution_environment()
env.from_collection(list(range(100))).map(risky).name("divide").sink_to(DiscardingSink())
env.execute("raises")
