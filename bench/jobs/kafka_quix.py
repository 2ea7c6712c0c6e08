"""Kafka -> running sum per key -> Kafka on Quix Streams, a peer in bench/kafka.py (run by its own venv's
Python: ``python bench/jobs/kafka_quix.py``; env as bench/jobs/kafka_job.py).

Two processes in one consumer group (parallelism 2, as the other cases; Quix Streams scales by
processes), each an ``Application`` with ``processing_guarantee="exactly-once"`` and ``commit_interval=1``
(with KB_CHECKPOINT_DIR set: a Kafka transaction per commit covering the output, the state's changelog
and the consumer offsets) or ``"at-least-once"`` (unset). The running sum is the value's state in Quix's
RocksDB store (``apply(..., stateful=True)``), keyed by the message key (the input's records are keyed by
``k``); output as JSON, keyed by ``k``. Quix has no bounded source: with KB_BOUNDED=1 each process stops
after 5 s without a new message (``app.run(timeout=5)``); the bench measures the end as the moment the
output became visible, not the exit.
"""

import json
import os
import subprocess
import sys
import tempfile
import time
import uuid


def worker(group: str, state_dir: str) -> None:
    from quixstreams import Application

    exactly_once = bool(os.environ.get("KB_CHECKPOINT_DIR"))
    app = Application(broker_address=os.environ["KB_BOOTSTRAP"], consumer_group=group,
                      auto_offset_reset="earliest", commit_interval=float(os.environ.get("KB_INTERVAL_MS", "1000")) / 1000,
                      processing_guarantee="exactly-once" if exactly_once else "at-least-once",
                      state_dir=state_dir, loglevel="WARNING")
    source = app.topic(os.environ["KB_IN"], value_deserializer="json", key_deserializer="str")
    sink = app.topic(os.environ["KB_OUT"], value_serializer="json", key_serializer="str")

    def running_sum(value: dict, state) -> dict:
        total = state.get("sum", 0) + value["v"]
        state.set("sum", total)
        return {"k": value["k"], "i": value["i"], "v": total, "t": value["t"]}

    app.dataframe(source).apply(running_sum, stateful=True).to_topic(sink)
    if os.environ.get("KB_BOUNDED") == "1":
        app.run(timeout=5, collect=False)
    else:
        app.run()


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3])
        return
    group = f"quix-bench-{uuid.uuid4().hex[:8]}"
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="quix-state-") as state:
        procs = [subprocess.Popen([sys.executable, __file__, "--worker", group, os.path.join(state, str(i))])
                 for i in range(2)]
        codes = [p.wait() for p in procs]
    if any(codes):
        sys.exit(f"a Quix Streams process failed: exit codes {codes}")
    print(json.dumps({"wall_ms": (time.time() - started) * 1000}), flush=True)


if __name__ == "__main__":
    main()
