"""Operator scale benchmark: one operator process, N StreamJobs, on the Kubernetes API test server.

    python bench/operator_scale.py [--jobs 500] [--seconds 170] [--singles 20] [--server indexed|plain]

The API server is tests/kube/apiserver.py (kmock's emulator, in this process); the operator
is a separate process (``python -m streamjob.runtime.cli operator -A --idle-interval 10``,
$KUBECONFIG pointing at the server), so its RSS and CPU are its own. No kubelet runs: driver
pods stay Pending with no IP, so the operator never talks to a job manager. That is the
point: the figures are the operator's own floor (observe -> decide -> write status -> act
against the API server) and exclude any time spent waiting on jobs. The API server shares
this process and the machine's CPUs; its CPU time is reported. ``--server indexed`` (the
default) gives it indexed lists and ownerReference garbage collection (same answers);
``plain`` is the test server as the tests use it, which scans every stored object per list
and per deletion and is itself the bottleneck at N=500.

Phases (times are taken on the API server as the writes happen, from its watch events):
1. creation burst: N StreamJobs (image streamjob:bench, parallelism 2, upgradeMode savepoint)
   created back to back. Per job: create -> first status (deployment.podName set,
   lifecycleState CREATED; the status is written before the driver pod is made), and
   create -> DEPLOYED (the operator made the driver pod and saw it). The run goes on once
   all are DEPLOYED: "settled".
2. spec-change burst: spec.parallelism 2 -> 3 on every job, back to back. Per job: patch ->
   status answered (status.observedGeneration == the new generation), and patch -> rescaled
   (old driver pod deleted, a new one made and seen: DEPLOYED at parallelism 3). The job is
   not running, so there is no savepoint to take: the operator cancels and redeploys.
3. single changes: --singles jobs get parallelism 3 -> 4 one at a time (the next once the
   previous is answered), all N jobs present: the latency of one change at steady state.

Figures, against the floors of the operator's brief:
* operator RSS once all N are settled, and the peak over the run (sampled every 0.5 s):
  floor <= 300 MB.
* reconcile latency, floor p99 <= 1 s: (a) the operator's own histogram of a reconcile pass
  ``streamjob_operator_reconcile_duration_seconds`` from /metrics (p50/p99 by linear
  interpolation within the cumulative buckets, as PromQL's histogram_quantile; "> 10 s" past
  the last bucket), over the whole run and per phase; (b) end to end, patch -> status
  answered, for single changes with all N jobs present. Both are held to the floor.
* the wait for a reconcile slot (``streamjob_operator_reconcile_queue_seconds``) and the burst
  end to end (N edits at once, patch -> answered): reported, not held to the floor. A pass is
  what a change costs; N changes at once are answered at the operator's throughput (shown),
  so the last of a 500-edit burst waits for the passes ahead of it (controller-runtime
  reports its work queue's wait apart from the reconcile time for the same reason).
Also: /healthz answer times (the operator's event loop), API requests by kind, and writes
the API server refused (409s: decisions made on stale data and made again).
The whole run takes well under 3 minutes at N=500 (--seconds bounds it).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import math
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

# A session cluster the user has running (streamjob cluster start) is not what this bench measures.
os.environ.setdefault("STREAMJOB_SESSION", "off")

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
# This file is named operator.py: keep its folder off the import path so that nothing imports it
# instead of the standard library's `operator`.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
sys.path.insert(0, str(REPO / "tests"))

import attrs  # noqa: E402
import kmock  # noqa: E402
import psutil  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from kube.apiserver import (STREAMJOB_CRD, STREAMJOBS, KubeAPI, KubeEmulator,  # noqa: E402
                            field_selector_matches, label_selector_matches)

NS = "default"
HISTOGRAM = "streamjob_operator_reconcile_duration_seconds"
QUEUE_HISTOGRAM = "streamjob_operator_reconcile_queue_seconds"
RSS_FLOOR_MB = 300
P99_FLOOR_S = 1.0
SETTLED_STATES = ("CREATED", "DEPLOYED")


# -- timing on the API server ------------------------------------------------------------------------
class Timeline:
    """First times (time.monotonic, on the server loop) at which each StreamJob reached each mark."""

    def __init__(self) -> None:
        self.created: dict[str, float] = {}
        self.first_status: dict[str, float] = {}  # its status (podName set, CREATED or DEPLOYED)
        self.deployed: dict[str, float] = {}  # lifecycleState DEPLOYED: the operator saw its driver pod
        self.generation: dict[tuple[str, int], float] = {}  # (name, generation) -> first seen
        self.answered: dict[tuple[str, int], float] = {}  # (name, generation) -> observedGeneration reached it
        self.redeployed: dict[tuple[str, int], float] = {}  # (name, parallelism): a later deployment DEPLOYED
        self.refused: collections.Counter = collections.Counter()  # "409 PUT streamjobs/status" -> count

    def see(self, event_type: str, body: dict) -> None:
        now = time.monotonic()
        meta, status = body.get("metadata") or {}, body.get("status") or {}
        name, gen = meta.get("name"), int(meta.get("generation") or 1)
        if event_type == "ADDED":
            self.created.setdefault(name, now)
        self.generation.setdefault((name, gen), now)
        if not status.get("lifecycleState"):
            return
        deployment = status.get("deployment") or {}
        if deployment.get("podName") and status["lifecycleState"] in SETTLED_STATES:
            self.first_status.setdefault(name, now)
            if status["lifecycleState"] == "DEPLOYED":
                self.deployed.setdefault(name, now)
        observed = int(status.get("observedGeneration") or 0)
        if observed > 1:
            for g in range(2, observed + 1):
                self.answered.setdefault((name, g), now)
        if status["lifecycleState"] == "DEPLOYED" and int(deployment.get("number") or 0) >= 2:
            self.redeployed.setdefault((name, deployment.get("parallelism")), now)


TIMELINE = Timeline()


@attrs.define(kw_only=True)
class TimedEmulator(KubeEmulator):
    """The test API server, telling TIMELINE about every StreamJob write as it happens.

    indexed=True: lists and ownerReference garbage collection use indexes kept up to date on
    every write, instead of scanning every stored object (and its history) per request as the
    test server does. Same answers; the server stays out of the operator's figures at N=500.
    """

    indexed: bool = False
    _by_resource: dict = attrs.field(factory=dict, init=False)  # resource -> {key: live body}
    _live_uids: set = attrs.field(factory=set, init=False)
    _owned: dict = attrs.field(factory=dict, init=False)  # owner uid -> {key of a dependent}
    _indexed_body: dict = attrs.field(factory=dict, init=False)  # key -> body as indexed

    def _emit(self, event_type: str, resource, body: dict) -> None:
        KubeEmulator._emit(self, event_type, resource, body)
        if resource == STREAMJOBS:
            TIMELINE.see(event_type, body)

    # -- the indexes (kept for every write; used only when indexed) --
    def _sync(self, key: tuple) -> None:
        old = self._indexed_body.pop(key, None)
        if old is not None:
            self._live_uids.discard(old["metadata"].get("uid"))
            for ref in old["metadata"].get("ownerReferences") or []:
                self._owned.get(ref.get("uid"), set()).discard(key)
        body = self._current(key)
        bucket = self._by_resource.setdefault(key[0], {})
        if body is None:
            bucket.pop(key, None)
            return
        bucket[key] = body
        self._indexed_body[key] = body
        self._live_uids.add(body["metadata"].get("uid"))
        for ref in body["metadata"].get("ownerReferences") or []:
            self._owned.setdefault(ref.get("uid"), set()).add(key)

    def create(self, resource, namespace, body):
        created = self._refused("POST", resource, None, lambda: KubeEmulator.create(self, resource, namespace, body))
        self._sync(self._key(resource, created["metadata"].get("namespace"), created["metadata"]["name"]))
        return created

    def _refused(self, verb: str, resource, subresource, fn):
        try:
            return fn()
        except kmock.KubernetesError as e:
            TIMELINE.refused[f"{e.status} {verb} {resource.plural}{'/' + subresource if subresource else ''}"] += 1
            raise

    def patch(self, resource, namespace, name, subresource, patch, content_type="application/merge-patch+json"):
        return self._refused("PATCH", resource, subresource, lambda: KubeEmulator.patch(
            self, resource, namespace, name, subresource, patch, content_type))

    def replace(self, resource, namespace, name, subresource, body):
        return self._refused("PUT", resource, subresource, lambda: KubeEmulator.replace(
            self, resource, namespace, name, subresource, body))

    def _commit(self, resource, key, old, new):
        result = KubeEmulator._commit(self, resource, key, old, new)
        self._sync(key)
        return result

    def delete(self, resource, namespace, name, options):
        key = self._key(resource, namespace, name)
        result = KubeEmulator.delete(self, resource, namespace, name, options)
        self._sync(key)
        return result

    def _remove(self, resource, key, last, *, orphan: bool = False) -> None:
        self._live_uids.discard(last["metadata"].get("uid"))  # gone before its dependents are looked at
        KubeEmulator._remove(self, resource, key, last, orphan=orphan)
        self._sync(key)

    def _live(self):
        if not self.indexed:
            yield from KubeEmulator._live(self)
            return
        for bucket in list(self._by_resource.values()):
            yield from list(bucket.items())

    def list(self, resource, namespace=None, *, name=None, label_selector=None, field_selector=None):
        if not self.indexed:
            return KubeEmulator.list(self, resource, namespace, name=name, label_selector=label_selector,
                                     field_selector=field_selector)
        self._info(resource)
        return [body for (res, ns, n), body in list(self._by_resource.get(resource, {}).items())
                if (namespace is None or ns == namespace) and (name is None or n == name)
                and label_selector_matches(label_selector, body["metadata"].get("labels"))
                and field_selector_matches(field_selector, body)]

    def _collect_garbage(self, owner: dict) -> None:
        if not self.indexed or (owner.get("kind") == "Namespace" and owner.get("apiVersion") == "v1"):
            return KubeEmulator._collect_garbage(self, owner)
        for key in list(self._owned.get(owner["metadata"].get("uid"), ())):
            body = self._indexed_body.get(key)
            refs = (body or {}).get("metadata", {}).get("ownerReferences") or []
            if body is not None and not any(ref.get("uid") in self._live_uids for ref in refs):
                self.delete(key[0], key[1], key[2], {})


# -- the operator process ------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def operator_process(kubeconfig: str, port: int, idle_interval: float, log_path: str, slots: int):
    env = {**os.environ, "KUBECONFIG": kubeconfig, "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "streamjob.runtime.cli", "operator", "-A",
           "--health-address", f"127.0.0.1:{port}", "--idle-interval", str(idle_interval),
           "--max-concurrent-reconciles", str(slots)]
    with open(log_path, "wb") as log:
        # cwd: not the repository root, whose operator/ folder must not look like a package.
        proc = subprocess.Popen(cmd, env=env, cwd=tempfile.gettempdir(), stdout=log, stderr=subprocess.STDOUT,
                                preexec_fn=_die_with_parent)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


def _die_with_parent() -> None:
    """In the operator process: SIGTERM when the bench dies, even by SIGKILL (Linux; elsewhere a no-op)."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class Sampler(threading.Thread):
    """The operator's RSS every 0.5 s (peak kept)."""

    def __init__(self, pid: int):
        super().__init__(name="rss-sampler", daemon=True)
        self.process = psutil.Process(pid)
        self.peak = 0
        self.stopped = threading.Event()

    def rss(self) -> int:
        rss = self.process.memory_info().rss
        self.peak = max(self.peak, rss)
        return rss

    def run(self) -> None:
        while not self.stopped.wait(0.5):
            try:
                self.rss()
            except psutil.Error:
                return


class LoopLag(threading.Thread):
    """GET /healthz every 0.5 s: how long the operator's event loop takes to answer."""

    def __init__(self, port: int):
        super().__init__(name="loop-lag", daemon=True)
        self.url = f"http://127.0.0.1:{port}/healthz"
        self.samples: list[float] = []
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(0.5):
            t0 = time.monotonic()
            code, _ = http_get(self.url, timeout=30)
            self.samples.append(time.monotonic() - t0 if code == 200 else math.inf)


def http_get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read()
    except OSError:
        return 0, b""


def wait_until(condition, deadline: float, interval: float = 0.1) -> bool:
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)
    return True


# -- figures -------------------------------------------------------------------------------------------
def percentile(values: list[float], q: float) -> float:
    """Nearest rank."""
    if not values:
        return math.nan
    xs = sorted(values)
    return xs[min(len(xs) - 1, max(0, math.ceil(q * len(xs)) - 1))]


def histogram_quantile(buckets: list[tuple[float, float]], q: float) -> float:
    """PromQL's histogram_quantile over cumulative (upper bound, count) buckets, +Inf last."""
    buckets = sorted(buckets)
    total = buckets[-1][1] if buckets else 0
    if total == 0:
        return math.nan
    rank = q * total
    lower, below = 0.0, 0.0
    for upper, count in buckets:
        if count >= rank:
            if math.isinf(upper):
                return math.inf  # beyond the highest finite bound: shown as "> 10 s"
            return lower + (upper - lower) * ((rank - below) / (count - below) if count > below else 1.0)
        lower, below = upper, count
    return lower


def scrape_histogram(port: int, name: str = HISTOGRAM) -> dict:
    code, body = http_get(f"http://127.0.0.1:{port}/metrics", timeout=30)
    if code != 200:
        return histogram_summary([], 0.0, math.nan)
    buckets, count, total = [], 0.0, math.nan
    for family in text_string_to_metric_families(body.decode()):
        if family.name != name:
            continue
        for sample in family.samples:
            if sample.name.endswith("_bucket"):
                buckets.append((float(sample.labels["le"]), sample.value))
            elif sample.name.endswith("_count"):
                count = sample.value
            elif sample.name.endswith("_sum"):
                total = sample.value
    return histogram_summary(buckets, count, total)


def histogram_delta(later: dict, earlier: dict) -> dict:
    """The passes between two scrapes."""
    before = dict(earlier["buckets"])
    buckets = [(u, c - before.get(u, 0.0)) for u, c in later["buckets"]]
    return histogram_summary(buckets, later["count"] - earlier["count"], later["sum"] - earlier["sum"])


def histogram_summary(buckets: list[tuple[float, float]], count: float, total: float) -> dict:
    buckets = sorted(buckets)
    return {"buckets": buckets, "count": int(count), "sum": total, "mean": total / count if count else math.nan,
            "top": max((u for u, _ in buckets if not math.isinf(u)), default=math.nan),
            "p50": histogram_quantile(buckets, 0.5),
            "p99": histogram_quantile(buckets, 0.99),
            "over_1s": int(count - next((c for u, c in sorted(buckets) if u >= 1.0), count))}


def latencies(start: dict, end: dict, keys) -> list[float]:
    return [end[k] - start[k] for k in keys if k in end and k in start]


def summary(values: list[float]) -> dict:
    return {"n": len(values), "p50": percentile(values, 0.5), "p99": percentile(values, 0.99),
            "max": max(values) if values else math.nan}


def streamjob(name: str) -> dict:
    return {"apiVersion": "streamjob.io/v1alpha1", "kind": "StreamJob", "metadata": {"name": name},
            "spec": {"image": "streamjob:bench", "job": {"file": "/jobs/x.py"}, "parallelism": 2,
                     "checkpointing": {"interval": "10s"}, "checkpointDir": "file:///tmp/x",
                     "savepointDir": "file:///tmp/y", "upgradeMode": "savepoint"}}


# -- the run -------------------------------------------------------------------------------------------
def run(jobs: int, seconds: float, idle_interval: float, log_path: str, indexed: bool, singles: int,
        slots: int) -> dict:
    started = time.monotonic()
    deadline = started + seconds
    names = [f"bench-{i:05d}" for i in range(jobs)]
    result: dict = {"jobs": jobs, "idle_interval": idle_interval, "max_concurrent_reconciles": slots, "operator_log": log_path,
                    "server": "indexed" if indexed else "plain"}
    bench_process = psutil.Process()
    cpu0 = bench_process.cpu_times()

    with contextlib.ExitStack() as stack:
        api = KubeAPI()
        api.emulator = TimedEmulator(indexed=indexed)
        stack.enter_context(api)
        api.apply_crd(STREAMJOB_CRD)
        kubeconfig = api.write_kubeconfig(os.path.join(tempfile.mkdtemp(prefix="bench-operator-"), "kubeconfig"))
        port = free_port()
        proc = stack.enter_context(operator_process(kubeconfig, port, idle_interval, log_path, slots))
        sampler = Sampler(proc.pid)
        sampler.start()
        stack.callback(sampler.stopped.set)

        # Ready: /healthz answers and kopf watches StreamJobs.
        def ready() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"the operator exited with {proc.returncode}; see {log_path}")
            return (http_get(f"http://127.0.0.1:{port}/healthz", 1)[0] == 200
                    and bool(api.requests("GET", STREAMJOBS, watch=True)))
        if not wait_until(ready, started + 30):
            raise RuntimeError(f"the operator did not start within 30 s; see {log_path}")
        result["startup_s"] = time.monotonic() - started
        lag = LoopLag(port)
        lag.start()
        stack.callback(lag.stopped.set)
        result["rss_idle_mb"] = sampler.rss() / 2**20

        # Phase 1: creation burst.
        settle_deadline = started + 0.45 * seconds
        t0 = time.monotonic()
        for name in names:
            api.objects.create(STREAMJOBS, streamjob(name), namespace=NS)
        result["create_burst_s"] = time.monotonic() - t0
        # Settled: every job has its status (podName, CREATED) and the operator has seen its pod (DEPLOYED),
        # so the spec change below starts from quiet.
        all_settled = wait_until(lambda: len(TIMELINE.deployed) >= jobs or proc.poll() is not None,
                                 settle_deadline, 0.2)
        time.sleep(1.0)  # let the last passes finish (events are posted after the status write)
        result["rss_settled_mb"] = sampler.rss() / 2**20
        first = latencies(TIMELINE.created, TIMELINE.first_status, names)
        result["first_status"] = summary(first)
        result["deployed"] = summary(latencies(TIMELINE.created, TIMELINE.deployed, names))
        if TIMELINE.first_status:
            span = max(TIMELINE.first_status.values()) - min(TIMELINE.created.values())
            result["first_status_all_s"] = span
            result["creation_throughput"] = len(TIMELINE.first_status) / span if span > 0 else math.nan
        if TIMELINE.deployed:
            result["deployed_all_s"] = max(TIMELINE.deployed.values()) - min(TIMELINE.created.values())
        result["loop_lag_creation"] = summary(lag.samples)
        n_lag = len(lag.samples)
        result["all_settled"] = all_settled
        scrape_created = scrape_histogram(port)
        queue_created = scrape_histogram(port, QUEUE_HISTOGRAM)
        refused_created = sum(TIMELINE.refused.values())

        # Phase 2: spec-change burst (parallelism 2 -> 3) on every settled job.
        targets = [n for n in names if n in TIMELINE.deployed]
        gens = {}
        t0 = time.monotonic()
        for name in targets:
            patched = api.objects.patch(STREAMJOBS, NS, name, {"spec": {"parallelism": 3}})
            gens[name] = int(patched["metadata"]["generation"])
        result["patch_burst_s"] = time.monotonic() - t0
        keys = [(n, g) for n, g in gens.items()]
        burst_deadline = started + 0.8 * seconds
        wait_until(lambda: (sum(k in TIMELINE.answered for k in keys) >= len(keys)
                            and sum((n, 3) in TIMELINE.redeployed for n in targets) >= len(targets))
                   or proc.poll() is not None, burst_deadline, 0.2)
        patched_at = {n: TIMELINE.generation[(n, g)] for n, g in gens.items() if (n, g) in TIMELINE.generation}
        answered_at = {n: TIMELINE.answered[(n, g)] for n, g in gens.items() if (n, g) in TIMELINE.answered}
        result["answered"] = summary(latencies(patched_at, answered_at, targets))
        result["redeployed"] = summary(latencies(patched_at, {k[0]: t for k, t in TIMELINE.redeployed.items()
                                                              if k[1] == 3}, targets))
        if answered_at:
            result["answered_all_s"] = max(answered_at.values()) - min(patched_at.values())
        result["patched"] = len(targets)
        result["loop_lag_change"] = summary(lag.samples[n_lag:])
        n_lag = len(lag.samples)
        scrape_burst = scrape_histogram(port)
        queue_burst = scrape_histogram(port, QUEUE_HISTOGRAM)
        refused_burst = sum(TIMELINE.refused.values())

        # Phase 3: single changes while all N jobs are there (idle ticks going on): one job at a time.
        single = []
        for name in [n for n in targets if (n, 3) in TIMELINE.redeployed][:singles]:
            if time.monotonic() > deadline - 8.0:
                break
            patched = api.objects.patch(STREAMJOBS, NS, name, {"spec": {"parallelism": 4}})
            key = (name, int(patched["metadata"]["generation"]))
            wait_until(lambda: key in TIMELINE.answered, time.monotonic() + 5.0, 0.01)
            if key in TIMELINE.generation and key in TIMELINE.answered:
                single.append(TIMELINE.answered[key] - TIMELINE.generation[key])
            time.sleep(0.3)
        result["single"] = summary(single)
        result["singles_tried"] = min(singles, len(targets))
        result["loop_lag_steady"] = summary(lag.samples[n_lag:])

        # End: the operator's own histogram, its memory and CPU, what it asked of the API server.
        scrape_end = scrape_histogram(port)
        queue_end = scrape_histogram(port, QUEUE_HISTOGRAM)
        result["queue_creation"] = queue_created
        result["queue_burst"] = histogram_delta(queue_burst, queue_created)
        result["queue_steady"] = histogram_delta(queue_end, queue_burst)
        result["histogram"] = scrape_end
        result["histogram_creation"] = scrape_created
        result["histogram_burst"] = histogram_delta(scrape_burst, scrape_created)
        result["histogram_steady"] = histogram_delta(scrape_end, scrape_burst)
        result["refused"] = dict(TIMELINE.refused)
        total_refused = sum(TIMELINE.refused.values())
        result["refused_by_phase"] = [refused_created, refused_burst - refused_created, total_refused - refused_burst]
        result["rss_end_mb"] = sampler.rss() / 2**20
        result["rss_peak_mb"] = sampler.peak / 2**20
        try:
            cpu = sampler.process.cpu_times()
            result["operator_cpu_s"] = cpu.user + cpu.system
        except psutil.Error:
            pass
        cpu1 = bench_process.cpu_times()
        result["server_and_bench_cpu_s"] = (cpu1.user + cpu1.system) - (cpu0.user + cpu0.system)
        requests = api.requests()
        result["api_requests"] = len(requests)
        result["api_requests_by_kind"] = dict(collections.Counter(
            f"{getattr(r.method, 'value', r.method)} {getattr(r.resource, 'plural', None) or '-'}"
            + ("/" + r.subresource if getattr(r, "subresource", None) else "")
            + (" watch" if r.params.get("watch") == "true" else "") for r in requests).most_common(12))
        states = collections.Counter((o.get("status") or {}).get("lifecycleState", "-")
                                     for o in api.objects.list(STREAMJOBS, NS))
        result["lifecycle_states"] = dict(states)
        result["operator_exit"] = proc.poll()
        result["wall_s"] = time.monotonic() - started
    return result


def fmt(x: float, unit: str = "s", top: float = 10.0) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if math.isinf(x):
        return f"> {top:g} s"
    if unit == "s":
        return f"{x * 1000:.0f} ms" if x < 1 else f"{x:.2f} s"
    return f"{x:.0f} {unit}"


def fmt3(d: dict, top: float = 10.0) -> str:
    return " / ".join(fmt(d[k], top=top) for k in ("p50", "p99", "max"))


def report(r: dict) -> None:
    n = r["jobs"]
    h = r["histogram"]

    def hist(x: dict) -> str:
        return f"{fmt(x['p50'], top=x['top'])} / {fmt(x['p99'], top=x['top'])}"
    rows = [
        ("operator RSS: idle (0 jobs) / settled / peak",
         f"{r['rss_idle_mb']:.0f} / {r['rss_settled_mb']:.0f} / {r['rss_peak_mb']:.0f} MB",
         f"floor <= {RSS_FLOOR_MB} MB (settled: all {n} DEPLOYED; end {r['rss_end_mb']:.0f} MB)"),
        ("reconcile pass (histogram) p50 / p99", hist(h),
         f"floor p99 <= {P99_FLOOR_S:g} s; whole run: {h['count']} passes, mean {fmt(h['mean'])}, "
         f"{h.get('over_1s', 0)} over 1 s"),
        ("  creation / change burst / steady p99", " / ".join(
            fmt(r[k]["p99"], top=r[k]["top"]) for k in ("histogram_creation", "histogram_burst", "histogram_steady")),
         "passes: " + " / ".join(str(r[k]["count"]) for k in ("histogram_creation", "histogram_burst",
                                                                "histogram_steady"))),
        ("  wait for a slot p99: creation/burst/steady", " / ".join(
            fmt(r[k]["p99"], top=r[k]["top"]) for k in ("queue_creation", "queue_burst", "queue_steady")),
         f"--max-concurrent-reconciles {r['max_concurrent_reconciles']}: passes in line (changes first)"),
        ("create -> first status p50 / p99 / max", fmt3(r["first_status"]),
         f"{r['first_status']['n']}/{n}; all in {fmt(r.get('first_status_all_s', math.nan))} = "
         f"{r.get('creation_throughput', math.nan):.0f} jobs/s (podName set, CREATED)"),
        ("create -> DEPLOYED p50 / p99 / max", fmt3(r["deployed"]),
         f"{r['deployed']['n']}/{n}; all in {fmt(r.get('deployed_all_s', math.nan))} (driver pod made and seen)"),
        ("patch -> status answered p50 / p99 / max", fmt3(r["answered"]),
         f"{r['answered']['n']}/{r['patched']} edits at once, all in "
         f"{fmt(r.get('answered_all_s', math.nan))} (observedGeneration)"),
        ("patch -> rescaled p50 / p99 / max", fmt3(r["redeployed"]),
         f"{r['redeployed']['n']}/{r['patched']} (pod replaced, DEPLOYED at parallelism 3)"),
        ("single patch -> answered p50 / p99 / max", fmt3(r["single"]),
         f"floor p99 <= {P99_FLOOR_S:g} s; {r['single']['n']}/{r['singles_tried']} changes one at a time, all {n} jobs present"),
        ("/healthz answer p99: creation/burst/steady", " / ".join(
            fmt(r[k]["p99"]) for k in ("loop_lag_creation", "loop_lag_change", "loop_lag_steady")),
         "the operator's event loop (max " + " / ".join(
            fmt(r[k]["max"]) for k in ("loop_lag_creation", "loop_lag_change", "loop_lag_steady")) + ")"),
        ("CPU: operator / API server + bench", f"{r.get('operator_cpu_s', math.nan):.1f} s / "
         f"{r['server_and_bench_cpu_s']:.1f} s", f"over {r['wall_s']:.0f} s wall, {os.cpu_count()} CPUs"),
    ]
    width = max(len(a) for a, _, _ in rows)
    vwidth = max(len(b) for _, b, _ in rows)
    print(f"\noperator benchmark: {n} StreamJobs, --idle-interval {r['idle_interval']:g}, {r['server']} test API "
          f"server, no kubelet (driver pods stay Pending)")
    for a, b, c in rows:
        print(f"  {a:<{width}}  {b:>{vwidth}}  {c}")
    print(f"  API requests: {r['api_requests']} ({r['api_requests'] / max(1, 2 * n):.1f} per job and burst): "
          + ", ".join(f"{k} {v}" for k, v in r["api_requests_by_kind"].items()))
    print(f"  refused writes: {r['refused'] or 'none'} (creation / burst / steady: "
          + " / ".join(map(str, r["refused_by_phase"])) + ")")
    print(f"  lifecycle states at the end: {r['lifecycle_states']}")
    rss_ok = r["rss_settled_mb"] <= RSS_FLOOR_MB and r["rss_peak_mb"] <= RSS_FLOOR_MB
    p99_ok = (h["p99"] <= P99_FLOOR_S and r["single"]["p99"] <= P99_FLOOR_S
              and r["answered"]["n"] == r["patched"] == n and r["single"]["n"] == r["singles_tried"])
    print(f"  floors: RSS {'met' if rss_ok else 'MISSED'}; reconcile p99 {'met' if p99_ok else 'MISSED'}"
          " (pass histogram, and single changes end to end; every change answered)")
    if r.get("answered_all_s"):
        print(f"  burst throughput: {r['patched']} edits answered in {fmt(r['answered_all_s'])} = "
              f"{r['patched'] / r['answered_all_s']:.0f} answers/s")
    if r.get("operator_exit") not in (None, 0):
        print(f"  the operator exited with {r['operator_exit']}: see {r['operator_log']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=500, help="StreamJobs to create (default 500)")
    parser.add_argument("--seconds", type=float, default=170.0,
                        help="time budget of the whole run; half for creation, the rest for the spec change")
    parser.add_argument("--idle-interval", type=float, default=10.0, help="the operator's --idle-interval")
    parser.add_argument("--max-concurrent-reconciles", type=int, default=8,
                        help="the operator's --max-concurrent-reconciles")
    parser.add_argument("--singles", type=int, default=20,
                        help="single spec changes, one at a time, after the bursts (default 20)")
    parser.add_argument("--server", choices=("indexed", "plain"), default="indexed",
                        help="indexed (default): the test API server with indexed lists and garbage collection; "
                             "plain: as in the tests (scans every object per list; the bottleneck at N=500)")
    parser.add_argument("--log", default=None, help="operator log file (default: a temporary file)")
    parser.add_argument("--json", default=None, help="also write the figures to this JSON file")
    args = parser.parse_args()
    # SIGTERM unwinds like Ctrl-C, so the operator is stopped and the server shut down.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    log_path = args.log or tempfile.mktemp(prefix="bench-operator-", suffix=".log")
    result = run(args.jobs, args.seconds, args.idle_interval, log_path, indexed=args.server == "indexed",
                 singles=args.singles, slots=args.max_concurrent_reconciles)
    report(result)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2, default=str)


if __name__ == "__main__":
    main()
