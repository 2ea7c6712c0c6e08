"""The checkpoint alert rule against a real job whose storage fails.

A StreamJob reaches its object store through a relay pod (e2e/jobs/s3_relay.py); the test
scrapes the driver's /metrics (REST port 8081) and hands the samples to a local Prometheus
(started here, on 127.0.0.1) that evaluates the shipped rules file
(helm/streamjob-operator/files/alerts.rules.yaml, as the chart installs it) every second.
While checkpoints complete, the alert must be inactive; once the relay pod is deleted (an
outage of the path to storage; the store keeps its objects), checkpoints fail and the alert
must go pending (its expression is true) and then firing (true for its whole `for`).

The test is the scraper because that works from anywhere: through the API server's pod proxy
(GET /api/v1/namespaces/NS/pods/POD:8081/proxy/metrics, as kubectl get --raw), or straight to
the pod IP where the test can reach pod IPs (E2E_METRICS=direct; a test inside the cluster, or
pods that run as local processes). Skipped, saying why, without the rules file, without
Prometheus, without a custom S3 endpoint to relay, or when neither way reaches /metrics.
"""

from __future__ import annotations

import http.server
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.parse
import urllib.request

import pytest
import yaml

from harness import phase, streamjob, wait_for

pytestmark = pytest.mark.timeout(900)
REST_PORT = 8081
RELAY_PORT = 9000
ENTRYPOINT = "/opt/streamjob/entrypoint.sh"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MetricsReader:
    """Reads a pod's /metrics the first way that works (see the module doc)."""

    def __init__(self, cluster, access: str):
        self.cluster, self.access, self.how = cluster, access, None

    def via_proxy(self, pod: str) -> str:
        return self.cluster.core.connect_get_namespaced_pod_proxy_with_path(
            f"{pod}:{REST_PORT}", self.cluster.ns, "metrics", _request_timeout=5)

    def direct(self, pod: str) -> str:
        ip = self.cluster.pod(pod).status.pod_ip
        with urllib.request.urlopen(f"http://{ip}:{REST_PORT}/metrics", timeout=5) as r:
            return r.read().decode()

    def find_way(self, pod: str) -> str | None:
        """The first way that answers with metrics, or None; the reasons are kept for the skip."""
        self.failures: list[str] = []
        ways = {"proxy": ["proxy"], "direct": ["direct"]}.get(self.access, ["proxy", "direct"])
        for way in ways:
            try:
                text = self.via_proxy(pod) if way == "proxy" else self.direct(pod)
                if "streamjob_" in text:
                    self.how = way
                    return way
                self.failures.append(f"{way}: no streamjob_ metrics in the answer")
            except Exception as e:  # noqa: BLE001 - every way of not getting there is a reason to report
                self.failures.append(f"{way}: {type(e).__name__}: {str(e)[:200]}")
        return None

    def read(self, pod: str) -> str:
        return self.via_proxy(pod) if self.how == "proxy" else self.direct(pod)


class ScrapeTarget:
    """An HTTP endpoint on 127.0.0.1 for the local Prometheus: each scrape reads the StreamJob's
    current driver pod's /metrics (503 when that fails: Prometheus marks the target down)."""

    def __init__(self, cluster, reader: MetricsReader, name: str):
        outer = self
        self.cluster, self.reader, self.name = cluster, reader, name
        self.errors: list[str] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                try:
                    pod = (outer.cluster.status(outer.name).get("deployment") or {}).get("podName")
                    body, code = outer.reader.read(pod).encode(), 200
                except Exception as e:  # noqa: BLE001
                    outer.errors.append(repr(e))
                    body, code = repr(e).encode(), 503
                self.send_response(code)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Prometheus:
    """A local Prometheus with the rules file: scrapes `target`, evaluates the rules every second."""

    def __init__(self, binary: str, rules: str, target: str, labels: dict[str, str], workdir: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        # Scrapes every 2 s (each goes through the API server's pod proxy on a real cluster); rules
        # are evaluated every second.
        config = {"global": {"scrape_interval": "2s", "evaluation_interval": "1s", "scrape_timeout": "2s"},
                  "rule_files": [os.path.abspath(rules)],
                  # honor_labels: the job's own `job` label stays `job` (as the rules file asks).
                  "scrape_configs": [{"job_name": "streamjob-e2e", "honor_labels": True,
                                      "static_configs": [{"targets": [target], "labels": labels}]}]}
        path = os.path.join(workdir, "prometheus.yml")
        with open(path, "w") as f:
            yaml.safe_dump(config, f)
        self.log = open(os.path.join(workdir, "prometheus.log"), "w+")
        self.proc = subprocess.Popen([binary, f"--config.file={path}", f"--storage.tsdb.path={workdir}/data",
                                      f"--web.listen-address=127.0.0.1:{self.port}"],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        wait_for(lambda: self.proc.poll() is not None or self._ready(), 30, "Prometheus to start")
        if self.proc.poll() is not None:
            raise AssertionError(f"Prometheus exited: {self.logs()}")

    def _ready(self) -> bool:
        try:
            return urllib.request.urlopen(f"{self.url}/-/ready", timeout=1).status == 200
        except OSError:
            return False

    def api(self, path: str, **params: str) -> dict:
        url = f"{self.url}/api/v1/{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
        with urllib.request.urlopen(url, timeout=5) as r:
            return json.load(r)["data"]

    def query(self, expr: str) -> list[dict]:
        return self.api("query", query=expr)["result"]

    def alerts(self, name: str) -> list[dict]:
        return [a for a in self.api("alerts")["alerts"] if a["labels"].get("alertname") == name]

    def rule(self, name: str) -> dict:
        for group in self.api("rules")["groups"]:
            for rule in group["rules"]:
                if rule.get("name") == name:
                    return rule
        raise AssertionError(f"Prometheus did not load an alert named {name}")

    def logs(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read()[-3000:]

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def alert_rule(path: str, name: str) -> dict:
    with open(path) as f:
        rules = [r for g in yaml.safe_load(f)["groups"] for r in g["rules"] if r.get("alert") == name]
    assert rules, f"{path} has no alert named {name} (E2E_ALERT_NAME)"
    return rules[0]


def seconds(duration: str) -> float:
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    return sum(float(n) * units[u] for n, u in re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h)", duration or "0s"))


def relay_pod(settings, name: str, target: str) -> dict:
    """The relay as a pod of the streamjob image, through its entrypoint (an explicit command)."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"app": "streamjob-e2e", "app.kubernetes.io/component": "s3-relay"}},
            "spec": {"restartPolicy": "Never", "enableServiceLinks": False, "automountServiceAccountToken": False,
                     "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "relay", "image": settings.image, "imagePullPolicy": settings.pull_policy,
                                     "command": [ENTRYPOINT],
                                     "args": ["driver", "run", f"{settings.jobs_dir}/s3_relay.py", "--",
                                              str(RELAY_PORT), target],
                                     "ports": [{"name": "s3", "containerPort": RELAY_PORT}],
                                     "resources": {"requests": {"cpu": "50m", "memory": "128Mi"},
                                                   "limits": {"memory": "256Mi"}}}]}}


def test_checkpoint_alert_fires_when_storage_fails(cluster, store, jobs, settings, mode):
    t = lambda s: s * settings.timeout_scale  # noqa: E731
    if not os.path.isfile(settings.alert_rules):
        pytest.skip(f"no alert rules file at {settings.alert_rules} (E2E_ALERT_RULES)")
    prometheus = shutil.which(settings.prometheus)
    if prometheus is None:
        pytest.skip(f"no Prometheus binary ({settings.prometheus!r} not on PATH; E2E_PROMETHEUS; Debian: "
                    "apt-get install prometheus) to evaluate the rules with")
    if not settings.s3_endpoint:
        pytest.skip("the storage outage is made by a relay in front of E2E_S3_ENDPOINT: set one")
    rule = alert_rule(settings.alert_rules, settings.alert_name)

    name = jobs.new("alert", mode)
    relay = f"{name}-s3relay"
    cluster.core.create_namespaced_pod(cluster.ns, relay_pod(settings, relay, settings.s3_endpoint))
    workdir = tempfile.mkdtemp(prefix="e2e-prometheus-")
    target = prom = None
    try:
        ip = wait_for(lambda: (p := cluster.pod(relay)) and phase(p) == "Running" and p.status.pod_ip,
                      t(180), lambda: f"the relay pod to run: {cluster.pod(relay)}")
        endpoint = f"http://{ip}:{RELAY_PORT}"
        spec = streamjob(settings, name, mode, 10_000_000, 200, upgradeMode="stateless",
                         checkpointing={"interval": "1s", "timeout": "10s", "tolerableFailures": 100_000},
                         s3={"endpoint": endpoint},
                         # Fail fast while the relay is gone (the defaults retry for a long time).
                         config={"s3.connect-timeout": "2 s", "s3.read-timeout": "5 s", "s3.max-attempts": "1"})
        spec["spec"]["job"]["args"][0] = "file:///tmp/e2e-alert-out"  # output in the pod: only checkpoints use S3
        del spec["spec"]["savepointDir"]
        cluster.create(spec)
        wait_for(lambda: (st := cluster.status(name)).get("jobStatus", {}).get("state") == "RUNNING"
                 and (st.get("lastCheckpoint") or {}).get("id", 0) >= 2, t(240),
                 lambda: f"{name} to run and checkpoint\n{cluster.describe(name)}")

        reader = MetricsReader(cluster, settings.metrics_access)
        pod = cluster.status(name)["deployment"]["podName"]
        if reader.find_way(pod) is None:
            pytest.skip(f"cannot read the driver's /metrics from here ({'; '.join(reader.failures)}): the API "
                        "server has no pod proxy (or RBAC refuses pods/proxy) and pod IPs are not reachable; "
                        "E2E_METRICS=direct from inside the cluster network")
        target = ScrapeTarget(cluster, reader, name)
        prom = Prometheus(prometheus, settings.alert_rules, target.address, {"namespace": cluster.ns}, workdir)
        wait_for(lambda: prom.query("streamjob_number_of_completed_checkpoints_total"), 30,
                 lambda: f"Prometheus to scrape the driver ({reader.how}): {target.errors[-3:]} {prom.logs()}")

        # Healthy: checkpoints complete, the rule evaluates fine and the alert is not active.
        healthy_until = time.monotonic() + 10
        while time.monotonic() < healthy_until:
            assert not prom.alerts(settings.alert_name), f"{settings.alert_name} active while checkpoints complete"
            time.sleep(1)
        assert prom.rule(settings.alert_name)["health"] == "ok", prom.rule(settings.alert_name)
        completed = float(prom.query("streamjob_number_of_completed_checkpoints_total")[0]["value"][1])
        assert completed >= 2

        cluster.delete_pod(relay)  # the path to storage fails; the store keeps everything
        wait_for(lambda: prom.query("streamjob_number_of_failed_checkpoints_total > 0"), t(90),
                 lambda: f"failed checkpoints\n{cluster.describe(name)}")
        pending = wait_for(lambda: prom.alerts(settings.alert_name), t(90),
                           lambda: f"{settings.alert_name} to be active: rule {prom.rule(settings.alert_name)}")
        labels = pending[0]["labels"]
        assert labels.get("severity") == rule.get("labels", {}).get("severity")
        assert labels.get("job") == "e2e-counter" and labels.get("namespace") == cluster.ns, labels
        # Still running all along: the alert is about storage, not about a job that stopped.
        assert cluster.status(name).get("jobStatus", {}).get("state") == "RUNNING"
        if os.environ.get("E2E_ALERT_WAIT_FIRING", "1") != "0":
            wait_for(lambda: any(a["state"] == "firing" for a in prom.alerts(settings.alert_name)),
                     seconds(rule.get("for", "0s")) + t(60),
                     lambda: f"{settings.alert_name} to fire after its for: {rule.get('for')}: {prom.alerts(settings.alert_name)}")
    finally:
        if prom is not None:
            prom.close()
        if target is not None:
            target.close()
        if cluster.pod(relay) is not None:
            cluster.delete_pod(relay)
        shutil.rmtree(workdir, ignore_errors=True)
