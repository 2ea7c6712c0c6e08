"""The counting job as the operator runs it: parallelism, checkpointing and storage come from the
StreamJob (its job.conf); only the data and the sink are the job's own.

    streamjob run tests/jobs/operated.py OUT ROWS ROWS_PER_SECOND [COUNT_PARALLELISM]

COUNT_PARALLELISM: the counting operator's own parallelism (set_parallelism), else the job's.
"""

import sys

from counting import Count, row  # this file's directory is on sys.path, as for any job file
from streamjob.runtime import StreamExecutionEnvironment
from streamjob.runtime.connectors import DataGenSource, FileSink

if __name__ == "__main__":
    out, rows, rate = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    env = StreamExecutionEnvironment.get_execution_environment()
    source = env.from_source(DataGenSource(row, count=rows, rows_per_second=rate), name="numbers").uid("numbers")
    counts = source.key_by("key").process(Count()).uid("count")
    if len(sys.argv) > 4:
        counts.set_parallelism(int(sys.argv[4]))
    counts.sink_to(FileSink.jsonl(out)).uid("files")
    env.execute("operated")
