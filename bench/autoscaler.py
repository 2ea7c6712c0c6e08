"""The autoscaler on a rate step: time to a stable lag, the parallelism timeline, overshoot.

    python bench/autoscaler.py [--low 30] [--factor 3] [--cost-ms 10] [--before 40] [--high 120] [--after 150]

One Kafka broker (Apache Kafka 4.x, KRaft, ``KafkaBroker``); e2e/jobs/autoscaled.py (Kafka, 4 partitions ->
a keyed operator "work" spending --cost-ms per record -> Kafka, exactly once, 1 s checkpoints) on local[8]
Spark at parallelism 1; and the operator's autoscaler, run in this process against the job's REST API as
the operator runs it against a driver pod: every metricsInterval ``observer.autoscaler_view`` of
``GET /v1/job``, ``scaling.evaluate`` (``autoscaler.decide``: FLIP-271's algorithm), and for a decision a
``PUT /v1/jobs/{id}/parallelism`` of the vertices it rescales, in place. (The e2e suite runs the same
scenario through the operator and the Kubernetes API: e2e/test_autoscaler.py.) The settings are the e2e
scenario's: targetUtilization 0.4 +- 0.2, metricsWindow 20 s, stabilizationInterval 10 s,
scaleDownInterval 40 s, catchUpDuration 30 s.

The producer writes --low records/s for --before s, then --factor x for --high s, then --low for --after s.
Reported: per step, the time to the first rescale and to a stable lag (the source's pendingRecords below
2 s of input, staying there 10 s); every rescale (when, which vertex, from -> to, the job manager's
restart_s); overshoot (the highest parallelism of "work" less the least that keeps it within
targetUtilization + boundary at the high rate, a divisor of its 128 key groups); and the output topic,
read as a read_committed consumer, compared with the one correct output row for row (exactly once).
Results in bench/results/autoscaler.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from datetime import datetime, timezone

from rest_address import rest_address  # bench/: the script's own folder

# A session cluster the user has running (streamjob cluster start) is not what this bench measures.
os.environ.setdefault("STREAMJOB_SESSION", "off")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "e2e", "jobs"), os.path.join(ROOT, "examples")]
import autoscaled  # noqa: E402 - the scenario's job, producer and expected output
from kafka_click_counts import read_counts  # noqa: E402 - read_committed, to the end of every partition

from streamjob.operator import scaling  # noqa: E402
from streamjob.operator.model import AutoscalerSpec, AutoscalerStatus, seconds  # noqa: E402
from streamjob.operator.observer import autoscaler_view  # noqa: E402
from streamjob.operator.times import from_epoch  # noqa: E402
from streamjob.runtime.connectors.kafka.broker import KafkaBroker  # noqa: E402

SETTINGS = {"enabled": True, "targetUtilization": 0.4, "targetUtilizationBoundary": 0.2, "metricsWindow": "20s",
            "metricsInterval": "2s", "stabilizationInterval": "10s", "scaleDownInterval": "40s",
            "catchUpDuration": "30s", "restartTime": "5s", "maxParallelism": 8}
SLOTS = 8


def call(url: str, method: str = "GET", body: dict | None = None) -> tuple[int, dict]:
    req = urllib.request.Request(url, method=method, data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


class Autoscaler:
    """The operator's autoscaler step (reconciler._autoscale / _autoscale_rescaling) against a local job."""

    def __init__(self, url: str, spec: AutoscalerSpec, began: float):
        self.url, self.spec, self.began = url, spec, began
        self.status = AutoscalerStatus()
        self.history: list = []
        self.rescales: list[dict] = []
        self.lags: list[tuple[float, float]] = []  # (s since the start, the source's backlog)
        self.parallelism: dict[str, int] = {}
        self.stable_since: float | None = None
        self.capacity: list[float] = []  # records/s one subtask of "work" processes, per evaluation
        self.stop = threading.Event()
        self.errors: list[str] = []

    def run(self) -> None:
        while not self.stop.wait(seconds(self.spec.metrics_interval)):
            try:
                self.step()
            except Exception as e:  # noqa: BLE001 - a bench keeps going, and says so at the end
                self.errors.append(f"{type(e).__name__}: {e}")

    def step(self) -> None:
        code, doc = call(self.url + "/v1/job")
        if code != 200 or doc.get("state") != "RUNNING":
            return
        now = time.time()
        vertices, sample = autoscaler_view(doc, now)
        if sample is None:
            return
        if self.history and set(self.history[-1].samples) != set(sample.samples):
            self.history.clear()
        self.history.append(sample)
        self.parallelism = {v.id: v.parallelism for v in vertices}
        lag = sample.samples.get("events")
        if lag is not None and lag.pending_records is not None:
            self.lags.append((now - self.began, lag.pending_records))
        started = [t for t in (doc.get("start_time"), self.stable_since) if t]
        decision, self.status = scaling.evaluate(self.spec, self.status, vertices, tuple(self.history),
                                                 from_epoch(max(started)) if started else None,
                                                 datetime.fromtimestamp(now, tz=timezone.utc))
        work = decision.evaluations.get("work")
        if work is not None and work.busy_ratio > 0.2 and not math.isinf(work.true_processing_rate):
            self.capacity.append(work.true_processing_rate / work.current)  # records/s one subtask does
        if not decision.act:
            return
        code, answer = call(f"{self.url}/v1/jobs/{doc['id']}/parallelism", "PUT",
                            {"operators": dict(decision.parallelism)})
        entry = {"at_s": round(now - self.began, 1), "why": decision.why,
                 "changes": {v: [self.parallelism.get(v), p] for v, p in decision.parallelism.items()}}
        if code >= 400:
            entry["refused"] = answer.get("error")
            self.status = scaling.not_rescaled(self.status, str(answer.get("error")), datetime.now(timezone.utc))
            self.rescales.append(entry)
            return
        rid = answer["id"]
        while True:  # the job manager's rescale: checkpoint, end the attempt, restart at the new parallelism
            time.sleep(0.2)
            code, r = call(f"{self.url}/v1/jobs/{doc['id']}/rescales/{rid}")
            if r.get("status") in ("COMPLETED", "FAILED"):
                break
        entry.update(status=r["status"], restart_s=r.get("restart_s"), checkpoint_wait_s=r.get("checkpoint_wait_s"))
        self.rescales.append(entry)
        self.stable_since = time.time()
        self.history.clear()
        if r["status"] == "COMPLETED":
            self.status = scaling.rescaled(self.status, dict(decision.parallelism), r.get("restart_s"),
                                           datetime.now(timezone.utc))
        else:
            self.status = scaling.not_rescaled(self.status, str(r.get("error")), datetime.now(timezone.utc))


def stable_after(lags: list[tuple[float, float]], since: float, limit: float, hold: float = 10.0) -> float | None:
    """Seconds from ``since`` until the backlog was below ``limit`` and stayed there ``hold`` s."""
    start = None
    for t, lag in lags:
        if t < since:
            continue
        if lag < limit:
            start = t if start is None else start
            if t - start >= hold:
                return round(start - since, 1)
        else:
            start = None
    return None


def least_within_band(rate: float, per_subtask: float, max_parallelism: int = 128) -> int:
    """The least parallelism of "work" (a divisor of its key groups) whose utilization at ``rate`` is at most
    targetUtilization + targetUtilizationBoundary, given what one subtask processes busy all the time
    (measured): what a scale-up must reach; more is overshoot."""
    high = SETTINGS["targetUtilization"] + SETTINGS["targetUtilizationBoundary"]
    p = math.ceil(rate / per_subtask / high - 1e-9)
    return next((d for d in range(p, max_parallelism + 1) if max_parallelism % d == 0), p)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--low", type=float, default=30.0, help="records/s before and after the step")
    parser.add_argument("--factor", type=float, default=3.0, help="the step: --low x this")
    parser.add_argument("--cost-ms", type=float, default=10.0, help="the work operator's time per record")
    parser.add_argument("--before", type=float, default=45.0, help="s at --low before the step")
    parser.add_argument("--high", type=float, default=120.0, help="s at the high rate")
    parser.add_argument("--after", type=float, default=150.0, help="s at --low after it")
    args = parser.parse_args()
    spec = AutoscalerSpec.model_validate(SETTINGS)
    print(f"load average at start: {os.getloadavg()[0]:.1f}; {args.low:g} -> {args.low * args.factor:g} -> "
          f"{args.low:g} records/s, {args.cost_ms:g} ms a record at work; local[{SLOTS}], parallelism 1", flush=True)
    with KafkaBroker() as broker, tempfile.TemporaryDirectory() as tmp:
        source, output = f"as-in-{uuid.uuid4().hex[:6]}", f"as-out-{uuid.uuid4().hex[:6]}"
        autoscaled.create_topics(broker.bootstrap, [source, output])
        producer = autoscaled.StepProducer(broker.bootstrap, source, args.low)
        proc = subprocess.Popen(
            [sys.executable, "-m", "streamjob.runtime.cli", "run", os.path.join(ROOT, "e2e", "jobs", "autoscaled.py"),
             "--master", f"local[{SLOTS}]", "--parallelism", "1", "--no-progress",
             "--conf", "execution.checkpointing.interval=1000",
             "--conf", f"execution.checkpointing.dir=file://{tmp}/checkpoints", "--",
             "--bootstrap", broker.bootstrap, "--input-topic", source, "--output-topic", output,
             "--cost-ms", str(args.cost_ms)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        log: list[str] = []
        threading.Thread(target=lambda: log.extend(proc.stderr), daemon=True).start()
        scaler, url = None, None
        try:
            url = rest_address(proc, log)
            began = time.time()
            producer.start()
            scaler = Autoscaler(url, spec, began)
            threading.Thread(target=scaler.run, daemon=True).start()
            time.sleep(args.before)
            up_at = time.time() - began
            producer.rate = args.low * args.factor
            print(f"{up_at:.0f} s: the step to {producer.rate:g}/s", flush=True)
            time.sleep(args.high)
            down_at = time.time() - began
            producer.rate = args.low
            print(f"{down_at:.0f} s: back to {producer.rate:g}/s", flush=True)
            time.sleep(args.after)
            scaler.stop.set()
        finally:
            events = producer.stop()
            want = autoscaled.expected(events)
            got: list = []
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline and len(got) < len(want):
                got = autoscaled.output_rows(read_counts(broker.bootstrap, output))
                time.sleep(2)
            if url is not None and proc.poll() is None:
                subprocess.run([sys.executable, "-m", "streamjob.runtime.cli", "cancel", "--address", url],
                               capture_output=True, timeout=120)
            if proc.poll() is None:
                proc.kill()
            proc.wait(60)
    high = args.low * args.factor
    rescales = scaler.rescales if scaler else []
    works = [c["changes"]["work"][1] for c in rescales if "work" in c.get("changes", {}) and c.get("status") == "COMPLETED"]
    per_subtask = statistics.median(scaler.capacity) if scaler and scaler.capacity else 1000.0 / args.cost_ms
    result = {
        "low": args.low, "high": high, "cost_ms": args.cost_ms, "settings": SETTINGS,
        "step_up_at_s": round(up_at, 1), "step_down_at_s": round(down_at, 1),
        "first_rescale_after_step_up_s": next((round(c["at_s"] - up_at, 1) for c in rescales if c["at_s"] >= up_at), None),
        "stable_lag_after_step_up_s": stable_after(scaler.lags, up_at, 2 * high) if scaler else None,
        "first_rescale_after_step_down_s": next((round(c["at_s"] - down_at, 1) for c in rescales if c["at_s"] >= down_at),
                                                None),
        "rescales": rescales, "max_work_parallelism": max(works, default=1),
        "work_subtask_records_per_s": round(per_subtask, 1),
        "work_parallelism_needed_at_high": least_within_band(high, per_subtask),
        "overshoot": max(works, default=1) - least_within_band(high, per_subtask),
        "final_parallelism": scaler.parallelism if scaler else None,
        "records": len(want), "exactly_once": got == want,
        "errors": scaler.errors if scaler else [],
    }
    print(json.dumps(result, indent=1))
    os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
    with open(os.path.join(ROOT, "bench", "results", "autoscaler.json"), "w") as f:
        json.dump(result, f, indent=1)
    if got != want:
        first = next(((g, w) for g, w in zip(got, want) if g != w), (len(got), len(want)))
        sys.exit(f"the output is not exactly once: {first}")


if __name__ == "__main__":
    main()
