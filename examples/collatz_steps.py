"""Collatz steps: a streaming loop. Each number goes round the loop until it reaches 1.

    streamjob run examples/collatz_steps.py -p 2 [-- --up-to 1000]

The loop's head (``iterate()``) takes the numbers and whatever the body feeds back; one step of the
body halves an even number or makes 3n + 1 of an odd one, keyed by the starting number (so each
number's walk stays in one subtask and a keyed state counts its steps); numbers not yet at 1 are fed
back (``close_with``), those at 1 leave the loop with their step count. The job ends by itself once
every number has reached 1: the engine detects that the loop is empty (no timeout).
"""

import argparse

from streamjob.runtime import KeyedProcessFunction, StreamExecutionEnvironment, ValueStateDescriptor, Types
from streamjob.runtime.connectors import PrintSink


class CollatzStep(KeyedProcessFunction):
    """One step of one number's walk; the keyed state counts its steps so far."""

    def open(self, runtime_context):
        self.steps = runtime_context.get_state(ValueStateDescriptor("steps", Types.INT()))

    def process_element(self, value, ctx):
        start, n = value
        steps = self.steps.value() or 0
        if n == 1:  # the number 1 itself: no step to take
            yield start, n, steps
            return
        n = n // 2 if n % 2 == 0 else 3 * n + 1
        if n == 1:
            self.steps.clear()  # the walk is over: its state goes
        else:
            self.steps.update(steps + 1)
        yield start, n, steps + 1


def main(argv=None) -> None:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--up-to", type=int, default=30, help="the numbers 1..N (default 30)")
    up_to = args.parse_args(argv).up_to

    env = StreamExecutionEnvironment.get_execution_environment()
    numbers = env.from_collection([(n, n) for n in range(1, up_to + 1)])
    loop = numbers.iterate()
    stepped = loop.key_by(lambda r: r[0]).process(CollatzStep()).name("Collatz step")
    loop.close_with(stepped.filter(lambda r: r[1] != 1).map(lambda r: (r[0], r[1])).name("Feed back"))
    (stepped.filter(lambda r: r[1] == 1).map(lambda r: f"{r[0]} reaches 1 in {r[2]} steps")
     .sink_to(PrintSink()))
    env.execute("collatz_steps")


if __name__ == "__main__":
    main()
