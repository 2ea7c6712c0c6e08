"""Event time: page views counted per page in 10-second tumbling windows, out-of-order by up to 2 s.

    streamjob run examples/event_time_windows.py --parallelism 2

Each view carries its own timestamp; a bounded-out-of-orderness watermark lets a window fire once
no earlier view can come. A window's result is emitted once, as it closes, however late its views
arrived inside the bound. The input is bounded, so every window fires when it ends.
"""

import random

from streamjob.runtime import (Duration, ProcessWindowFunction, StreamExecutionEnvironment, Time,
                               TumblingEventTimeWindows, WatermarkStrategy)
from streamjob.runtime.connectors import PrintSink

PAGES = ("/home", "/cart", "/checkout", "/search")
START_MS = 1_700_000_000_000  # an arbitrary point in time: the views' clock is their own


def views(n: int = 2_000, seed: int = 7) -> list[dict]:
    """One view every 50 ms of event time, shuffled by up to 2 s (as if from many browsers)."""
    rng = random.Random(seed)
    rows = [{"page": PAGES[rng.randrange(len(PAGES))], "ts": START_MS + i * 50} for i in range(n)]
    keyed = sorted(((r["ts"] + rng.randrange(2_000), i) for i, r in enumerate(rows)))
    return [rows[i] for _, i in keyed]  # arrival order: roughly by time, never more than 2 s behind


def expected(rows: list[dict]) -> dict[tuple[str, int], int]:
    counts: dict[tuple[str, int], int] = {}
    for r in rows:
        window_end = (r["ts"] // 10_000 + 1) * 10_000
        counts[r["page"], window_end] = counts.get((r["page"], window_end), 0) + 1
    return counts


class CountViews(ProcessWindowFunction):
    def process(self, page, context, views):
        yield {"page": page, "window_end": context.window().end, "views": sum(1 for _ in views)}


def main() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    # (record, its current timestamp) -> its event time, as Flink's TimestampAssigner
    strategy = (WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_seconds(2))
                .with_timestamp_assigner(lambda row, _: row["ts"]))
    (
        env.from_collection(views())
        .assign_timestamps_and_watermarks(strategy)
        .key_by("page")
        .window(TumblingEventTimeWindows.of(Time.seconds(10)))
        .process(CountViews())
        .name("views per page and 10 s")
        .sink_to(PrintSink())
    )
    env.execute("event_time_windows")


if __name__ == "__main__":
    main()
