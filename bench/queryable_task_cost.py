"""What answering lookups costs a busy task thread, without a job manager or a job.

    python bench/queryable_task_cost.py [--rate 1000] [--seconds 5]

A process holds a hash-map backend of 100,000 keys and a ``QueryServer`` (task/queryable.py) whose job
manager is a peer process sending one lookup every 1/RATE s and reading the answers; meanwhile the
process's main thread runs a Python loop (dict updates, as a keyed operator's records). Printed per mode
(``signal``: SIGIO's handler in the main thread, the default; ``thread``: a lookup thread): the loop's
speed without and with lookups, and the time the handler takes per lookup.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time

PEER = """
import json, socket, sys, threading, time
rate, seconds = float(sys.argv[1]), float(sys.argv[2])
srv = socket.create_server(("127.0.0.1", 0)); print(srv.getsockname()[1], flush=True)
s, _ = srv.accept(); f = s.makefile("rb"); f.readline()
threading.Thread(target=lambda: [None for _ in f], daemon=True).start()
time.sleep(0.5)
t0, i = time.perf_counter(), 0
while rate > 0 and time.perf_counter() - t0 < seconds:
    wait = t0 + i / rate - time.perf_counter()
    if wait > 0:
        time.sleep(wait)
    s.sendall((json.dumps({"type": "query", "batch": [{"id": "q", "op": 5, "name": "counts",
                                                     "keys": [i % 100000]}]}) + "\\n").encode())
    i += 1
time.sleep(1)
"""


def run(mode: str, rate: float, seconds: float) -> tuple[float, float]:
    """(loop iterations per second, handler microseconds per lookup)."""
    from streamjob.runtime.api.state import ValueStateDescriptor
    from streamjob.runtime.api.types import Types
    from streamjob.runtime.config import Configuration
    from streamjob.runtime.keygroups import key_group_range
    from streamjob.runtime.state.backends import create_keyed_backend
    from streamjob.runtime.task import queryable

    backend = create_keyed_backend(Configuration({"state.backend.type": "hashmap"}), "op", 128,
                                   key_group_range(128, 1, 0), tempfile.mkdtemp())
    counts = ValueStateDescriptor("count", Types.LONG()).set_queryable("counts")
    for k in range(100_000):
        backend.current_key = k
        backend.get_state(counts).update(k)

    class Op:
        keyed_backend = backend
        node = None

    spent = [0.0, 0]
    handle = queryable.QueryServer._handle

    def timed(self, line):  # noqa: ANN001
        t = time.perf_counter()
        answer = handle(self, line)
        spent[0] += time.perf_counter() - t
        spent[1] += 1
        return answer

    queryable.QueryServer._handle = timed
    peer = subprocess.Popen([sys.executable, "-c", PEER, str(rate), str(seconds)], stdout=subprocess.PIPE, text=True)
    port = int(peer.stdout.readline())
    server = queryable.QueryServer(("127.0.0.1", port), 0, 0, {5: Op()}, lambda node: None, lambda: 1,
                                   use_signals=mode == "signal")
    time.sleep(0.5)
    work: dict[int, int] = {}
    t0, n = time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds:
        for j in range(1000):
            work[j] = work.get(j, 0) + 1
        n += 1
    speed = n * 1000 / (time.perf_counter() - t0)
    peer.wait()
    server.close()
    queryable.QueryServer._handle = handle
    backend.dispose()
    return speed, spent[0] / spent[1] * 1e6 if spent[1] else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    print("| mode | loop ops/s without | with lookups | loss | handler per lookup |")
    print("|---|---|---|---|---|")
    for mode in ("signal", "thread"):
        quiet, _ = run(mode, 0, args.seconds)
        busy, per = run(mode, args.rate, args.seconds)
        print(f"| {mode} | {quiet:,.0f} | {busy:,.0f} | {(busy / quiet - 1) * 100:+.1f}% | {per:.0f} us |")


if __name__ == "__main__":
    main()
