"""A PyFlink DataStream program with only its imports changed: three jobs in one program.

1. ``execute()``: words counted with keyed state in a MapFunction, routed by ``partition_custom``,
   written with ``FileSink.for_row_format`` (exactly-once, checkpointing on) through ``add_sink``;
2. ``execute()`` again: those files read back with ``FileSource.for_record_stream_format`` and the
   rolling ``max_by`` count per first letter printed;
3. ``execute_async()``: a job still running when the program's main returns; ``streamjob run`` must
   wait for it (its rows are printed with the identifier ``async``).

    streamjob run tests/jobs/pyflink_program.py OUT_DIR
"""

import sys

from streamjob.runtime import (
    MapFunction,
    Partitioner,
    RuntimeContext,
    StreamExecutionEnvironment,
    Types,
    ValueStateDescriptor,
    WatermarkStrategy,
)
from streamjob.runtime.connectors import DataGenSource
from streamjob.runtime.connectors.file_system import (
    BucketAssigner,
    Encoder,
    FileSink,
    FileSource,
    OutputFileConfig,
    RollingPolicy,
    StreamFormat,
)

WORDS = "to be or not to be that is the question whether tis nobler in the mind to suffer".split()


class Count(MapFunction):
    def open(self, runtime_context: RuntimeContext):
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.INT()))

    def map(self, word):
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        return word, count


class ByFirstLetter(Partitioner):
    def partition(self, key, num_partitions):
        return 0 if key < "n" else 1


class Where(MapFunction):
    def open(self, runtime_context: RuntimeContext):
        self.subtask = runtime_context.get_index_of_this_subtask()

    def map(self, pair):
        return f"{pair[0]},{pair[1]},{self.subtask}"


out = sys.argv[1]
env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(2)
env.enable_checkpointing(200)

sink = (FileSink.for_row_format(out, Encoder.simple_string_encoder())
        .with_output_file_config(OutputFileConfig.builder().with_part_prefix("words").with_part_suffix(".txt").build())
        .with_rolling_policy(RollingPolicy.on_checkpoint_rolling_policy())
        .with_bucket_assigner(BucketAssigner.base_path_bucket_assigner())
        .build())
words = env.from_collection(WORDS, type_info=Types.STRING())
(words.key_by(lambda w: w).map(Count(), output_type=Types.TUPLE([Types.STRING(), Types.INT()]))
 .partition_custom(ByFirstLetter(), lambda pair: pair[0])
 .map(Where(), output_type=Types.STRING())
 .add_sink(sink))
env.execute("count words")

source = FileSource.for_record_stream_format(StreamFormat.text_line_format(), out).build()
lines = env.from_source(source, WatermarkStrategy.no_watermarks(), "counted words")
(lines.map(lambda line: (line.split(",")[0], int(line.split(",")[1])))
 .key_by(lambda pair: pair[0][0])
 .max_by(1)
 .print("max"))
env.execute("read back")

env.from_source(DataGenSource(lambda i: i, count=30, rows_per_second=15), WatermarkStrategy.no_watermarks(),
                "slow").print("async")
client = env.execute_async("async")
print(f"started {client.get_job_id()}", flush=True)
