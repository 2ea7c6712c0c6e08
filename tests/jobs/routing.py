"""Writes which subtask saw each key (tests/test_jobs.py runs it under several PYTHONHASHSEEDs)."""

import sys

from streamjob.runtime import KeyedProcessFunction, StreamExecutionEnvironment
from streamjob.runtime.connectors import FileSink


class WhereAmI(KeyedProcessFunction):
    def open(self, ctx):
        self.subtask = ctx.get_index_of_this_subtask()

    def process_element(self, value, ctx):
        yield {"key": repr(ctx.get_current_key()), "subtask": self.subtask}


env = StreamExecutionEnvironment.get_execution_environment()
keys = [f"user-{i}" for i in range(300)] + list(range(300)) + [("pair", i) for i in range(100)]
(env.from_collection(keys * 2).key_by(lambda k: k).process(WhereAmI()).sink_to(FileSink.jsonl(sys.argv[1])))
env.execute("routing")
