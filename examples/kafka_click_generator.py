"""Click events for examples/kafka_click_counts.py (the Operations Playground's ClickEventGenerator).

    python examples/kafka_click_generator.py                       # 400 clicks/s until Ctrl-C
    python examples/kafka_click_generator.py --windows 4 --rate 0  # 4 windows' worth, as fast as it can

Writes ``{"timestamp": ms, "page": "/help"}`` to the input topic (created with 2 partitions if
missing, as is the output topic): exactly 1000 clicks per page per 15 s window of event time, the
six pages in turn, timestamps evenly spread over the window, so every count the job writes must be
1000. Event time starts at the window where the generator starts (now), and runs as fast as the
clicks are written: at the default 400 clicks/s (6000 per window), 15 s of event time pass in
about 15 s. (Run it once per pair of topics: a second run starts its clicks at its own "now", which
``--verify`` sees as windows missing in between, or as too many clicks in a window they share.)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kafka_click_counts import EVENTS_PER_WINDOW, WINDOW_MS, kafka_properties  # noqa: E402

PAGES = ["/help", "/index", "/shop", "/jobs", "/about", "/news"]
PARTITIONS = 2


def click(i: int, start_ms: int) -> tuple[int, dict]:
    """Click ``i`` and its partition: window ``i // (pages * 1000)``, page ``i % pages``."""
    per_window = EVENTS_PER_WINDOW * len(PAGES)
    window, j = divmod(i, per_window)
    ts = start_ms + window * WINDOW_MS + j * WINDOW_MS // per_window
    page = j % len(PAGES)
    return page % PARTITIONS, {"timestamp": ts, "page": PAGES[page]}


def ensure_topics(bootstrap: str, topics: list[str]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, **kafka_properties()})
    existing = admin.list_topics(timeout=10).topics
    missing = [NewTopic(t, PARTITIONS) for t in topics if t not in existing]
    for topic, done in (admin.create_topics(missing).items() if missing else []):
        done.result(30)
        print(f"created topic {topic} ({PARTITIONS} partitions)", file=sys.stderr)


def generate(bootstrap: str, topic: str, windows: int | None, rate: float, start_ms: int | None = None) -> int:
    """Writes ``windows`` windows of clicks (None: until interrupted) at ``rate`` clicks/s (0: at once);
    returns how many it wrote."""
    from confluent_kafka import Producer

    if start_ms is None:
        start_ms = int(time.time() * 1000) // WINDOW_MS * WINDOW_MS
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
                         **kafka_properties()})
    total = None if windows is None else windows * EVENTS_PER_WINDOW * len(PAGES)
    i = 0
    began = time.monotonic()
    try:
        while total is None or i < total:
            if rate > 0:
                ahead = i / rate - (time.monotonic() - began)
                if ahead > 0:
                    time.sleep(min(ahead, 0.05))
                    continue
            partition, event = click(i, start_ms)
            try:
                producer.produce(topic, json.dumps(event).encode(), event["page"].encode(), partition=partition)
            except BufferError:
                producer.poll(0.05)
                continue
            i += 1
            if i % 1000 == 0:
                producer.poll(0)
            if i % (EVENTS_PER_WINDOW * len(PAGES)) == 0:
                print(f"{i} clicks ({i // (EVENTS_PER_WINDOW * len(PAGES))} windows)", file=sys.stderr)
    except KeyboardInterrupt:
        pass
    left = producer.flush(30)
    if left:
        raise SystemExit(f"{left} clicks not delivered to {bootstrap}")
    return i


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092"))
    parser.add_argument("--topic", default="input")
    parser.add_argument("--output-topic", default="output", help="created too, if missing")
    parser.add_argument("--windows", type=int, default=None, help="stop after this many windows (default: never)")
    parser.add_argument("--rate", type=float, default=400.0, help="clicks per second (0: as fast as possible)")
    args = parser.parse_args(argv)
    ensure_topics(args.bootstrap, [args.topic, args.output_topic])
    n = generate(args.bootstrap, args.topic, args.windows, args.rate)
    print(f"wrote {n} clicks to {args.topic}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
