"""A keyed rolling sum over an endless, rate-limited stream of events.

    streamjob run examples/rolling_sum.py --parallelism 2     (Ctrl-C stops it gracefully)

Set ROWS to bound it: ROWS=200000 streamjob run examples/rolling_sum.py
"""

import os

from streamjob.runtime import StreamExecutionEnvironment
from streamjob.runtime.connectors import DataGenSource, FileSink


def event(i: int) -> dict:
    return {"user": (i * 2654435761) % 1000, "amount": i % 100, "seq": i}


def main() -> None:
    rows = int(os.environ["ROWS"]) if os.environ.get("ROWS") else None
    env = StreamExecutionEnvironment.get_execution_environment()
    source = DataGenSource(event, count=rows, rows_per_second=None if rows else 50_000)
    (
        env.from_source(source, name="events")
        .key_by("user")
        .sum("amount")
        .name("running total per user")
        .sink_to(FileSink.parquet(os.environ.get("OUT", "out/rolling_sum")))
    )
    env.execute("rolling_sum")


if __name__ == "__main__":
    main()
