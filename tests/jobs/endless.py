"""An unbounded keyed job WITHOUT checkpointing, for the CLI tests (list, savepoint, stop, cancel by name).

    streamjob run tests/jobs/endless.py -- OUT [ROWS_PER_SECOND] [--name NAME] [--sink-uid UID]

Row i has key i % 10; the keyed running count is state, so a savepoint of it holds keyed state and a
job started from that savepoint goes on counting where it stopped.
"""

import argparse

from streamjob.runtime import StreamExecutionEnvironment
from streamjob.runtime.connectors import DataGenSource, FileSink


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("rate", type=float, nargs="?", default=200.0)
    parser.add_argument("--name", default="endless")
    parser.add_argument("--sink-uid", default="files", help="another uid: the savepoint's sink state is orphaned")
    args = parser.parse_args()
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    (env.from_source(DataGenSource(lambda i: (i % 10, i), rows_per_second=args.rate), None, "numbers").uid("numbers")
        .key_by(lambda t: t[0])
        .map(lambda t: {"key": t[0], "i": t[1]}).uid("shape")
        .key_by(lambda r: r["key"])
        .reduce(lambda a, b: {"key": a["key"], "i": b["i"], "count": a.get("count", 1) + 1}).uid("count")
        .sink_to(FileSink.jsonl(args.out)).uid(args.sink_uid))
    env.execute(args.name)


if __name__ == "__main__":
    main()
