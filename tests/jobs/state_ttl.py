"""A PyFlink DataStream program with only its imports changed: keyed state with a time-to-live.

    from pyflink.common.time import Time                                ->  from streamjob.runtime import Time
    from pyflink.common.typeinfo import Types                           ->  from streamjob.runtime import Types
    from pyflink.datastream.state import StateTtlConfig, ...            ->  from streamjob.runtime import ...
    from pyflink.datastream import StreamExecutionEnvironment, ...      ->  from streamjob.runtime import ...

The TTL configuration is the one of PyFlink's state documentation; the function is its
``CountWindowAverage`` example with the TTL enabled on its descriptor, plus a running list of the
values seen (list state: each element expires on its own). Between the two halves of the input
the key ``pause`` sleeps 1.5 s in the keyed function, so the state written before it expires (TTL:
1 s of processing time). Printed, in order (parallelism 1), for each backend::

    (1, 4, [3, 5])    the average of 3 and 5, and the values seen
    (2, 5, [4, 6])
    (1, 2, [1, 3])    (1, 7) came before the pause: expired, so the count started again at (1, 1)
    (2, 3, [4, 2])

Without the TTL the third line would be ``(1, 4, [7, 1])``.

    streamjob run tests/jobs/state_ttl.py [hashmap] [rocksdb]     (each line prefixed "hashmap> " ...)
"""

import sys
import time

from streamjob.runtime import (
    FlatMapFunction,
    ListStateDescriptor,
    RuntimeContext,
    StateTtlConfig,
    StreamExecutionEnvironment,
    Time,
    Types,
    ValueStateDescriptor,
)

PAUSE_S = 1.5
INPUT = [(1, 3), (2, 4), (1, 5), (2, 6), (1, 7),  # before the pause: (1, 7) is left half-counted
         ("pause", 0),
         (1, 1), (1, 3), (2, 4), (2, 2)]


class CountWindowAverage(FlatMapFunction):
    def __init__(self):
        self.sum = None
        self.seen = None

    def open(self, runtime_context: RuntimeContext):
        ttl_config = StateTtlConfig \
            .new_builder(Time.seconds(1)) \
            .set_update_type(StateTtlConfig.UpdateType.OnCreateAndWrite) \
            .set_state_visibility(StateTtlConfig.StateVisibility.NeverReturnExpired) \
            .build()
        descriptor = ValueStateDescriptor("average", Types.PICKLED_BYTE_ARRAY())
        descriptor.enable_time_to_live(ttl_config)
        self.sum = runtime_context.get_state(descriptor)
        seen = ListStateDescriptor("seen", Types.INT())
        seen.enable_time_to_live(ttl_config)
        self.seen = runtime_context.get_list_state(seen)

    def flat_map(self, value):
        if value[0] == "pause":
            time.sleep(PAUSE_S)
            return
        current_sum = self.sum.value()
        if current_sum is None:
            current_sum = (0, 0)
        current_sum = (current_sum[0] + 1, current_sum[1] + value[1])
        self.sum.update(current_sum)
        self.seen.add(value[1])
        if current_sum[0] >= 2:
            self.sum.clear()
            seen = list(self.seen.get())
            self.seen.clear()
            yield value[0], int(current_sum[1] / current_sum[0]), seen


env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(1)
for backend in sys.argv[1:] or ["hashmap"]:  # one job per backend named, one after the other
    env.set_state_backend(backend)
    env.from_collection(INPUT) \
        .key_by(lambda row: row[0]) \
        .flat_map(CountWindowAverage()) \
        .print(backend)
    env.execute("state-ttl")
