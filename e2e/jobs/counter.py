"""The e2e suite's job: deterministic, keyed, stateful, exactly-once output the test can check.

    streamjob run e2e/jobs/counter.py OUT ROWS ROWS_PER_SECOND

Row ``i`` (0 <= i < ROWS) has key ``i % KEYS``. A keyed function counts each key's rows in its
state and emits ``{key, i, count, prev}``: ``count`` is how many rows of that key came so far
(state), ``prev`` the index of the key's previous row (state). The FileSink writes JSON lines to
OUT (``s3://...`` in the e2e suite) and publishes them only with a completed checkpoint or
savepoint (two-phase commit), so OUT holds exactly what the job committed.

Why the output is deterministic across rescales, restores and redeploys: DataGen splits its
indices into residue classes modulo the parallelism, and KEYS (60) is a multiple of every
parallelism the suite uses (1..6), so all rows of one key come from one split in index order.
A lost or repeated row, or lost state, changes some row's ``count``/``prev``: ``expected_rows``
is the one correct output, and the suite compares the committed rows with it row for row.

Parallelism, checkpointing and storage come from the StreamJob (the operator's job.conf);
ROWS_PER_SECOND only paces the source so that there is time to act while it runs (an upgrade
may change it: the output does not depend on it).
"""

from __future__ import annotations

import sys

from streamjob.runtime import KeyedProcessFunction, StreamExecutionEnvironment, ValueStateDescriptor
from streamjob.runtime.connectors import DataGenSource, FileSink

KEYS = 60
FIELDS = ("key", "i", "count", "prev")


def row(i: int) -> dict:
    return {"key": i % KEYS, "i": i}


class CountPerKey(KeyedProcessFunction):
    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", default=0))
        self.prev = ctx.get_state(ValueStateDescriptor("prev", default=-1))

    def process_element(self, value, ctx):
        count = self.count.value() + 1
        prev = self.prev.value()
        self.count.update(count)
        self.prev.update(value["i"])
        yield {"key": value["key"], "i": value["i"], "count": count, "prev": prev}


def expected_rows(rows: int) -> list[tuple[int, int, int, int]]:
    """The committed output of one complete run, sorted: (key, i, count, prev) per row."""
    counts = [0] * KEYS
    prev = [-1] * KEYS
    out = []
    for i in range(rows):
        k = i % KEYS
        counts[k] += 1
        out.append((k, i, counts[k], prev[k]))
        prev[k] = i
    return sorted(out)


def main(argv: list[str]) -> None:
    out, rows, rate = argv[0], int(argv[1]), float(argv[2])
    env = StreamExecutionEnvironment.get_execution_environment()
    # Stable uids: a savepoint maps its state to operators by uid, whatever the parallelism.
    source = env.from_source(DataGenSource(row, count=rows, rows_per_second=rate), name="rows").uid("rows")
    source.key_by("key").process(CountPerKey()).uid("count").sink_to(FileSink.jsonl(out)).uid("out")
    env.execute("e2e-counter")


if __name__ == "__main__":
    main(sys.argv[1:])
