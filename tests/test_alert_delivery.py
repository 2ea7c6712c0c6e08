"""End to end: the shipped alert rules, evaluated by a real Prometheus scraping a real running job,
deliver StreamJobCheckpointsFailing through a real Alertmanager to a webhook when the job's object
storage goes down, and deliver its resolution when storage comes back.

    job (local Spark, checkpoints every 1 s to s3://)  --S3-->  TCP proxy (the test switches it)  -->  moto's S3 server
     \\-- /metrics (rest.address, no token) <-- Prometheus (scrape + evaluate every 1 s, the shipped rules with a 12 s `for`)
                                                   --> Alertmanager (group_wait 1 s) --> webhook in this test

Every server listens on 127.0.0.1, on a free port, with its data in tmp_path; Prometheus and
Alertmanager are terminated by the fixtures (and get SIGTERM if this process dies first).
"""

from __future__ import annotations

import ctypes
import http.server
import json
import os
import signal
import subprocess
import threading
import time
import urllib.parse
import urllib.request

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from jobs import counting
from monitoring_promql import RULES_FILE, alert_rules
from kube.apiserver import wait_for
from s3server import MotoServer, Proxy, free_port, stop_process

pytestmark = pytest.mark.spark

PROMETHEUS = "/usr/bin/prometheus"
ALERTMANAGER = next((p for p in ("/usr/bin/prometheus-alertmanager", "/usr/bin/alertmanager") if os.path.exists(p)), None)
if not os.path.exists(PROMETHEUS) or ALERTMANAGER is None:
    pytest.skip("needs Prometheus and Alertmanager binaries (Debian: apt-get install prometheus "
                "prometheus-alertmanager; CI installs them)", allow_module_level=True)

ALERT = "StreamJobCheckpointsFailing"
SCRAPE = 1.0  # s: scrape_interval = evaluation_interval
GROUP_WAIT = 1.0  # s: Alertmanager's wait before the first notification of a new group
GROUP_INTERVAL = 1.0  # s: and before the next one of that group (the resolution)
CHECKPOINT_INTERVAL = 1.0  # s
SLACK = 3.0  # s: Prometheus' notifier queue, Alertmanager's dispatch, HTTP, a busy 2-core machine
# The rules Prometheus loads are the shipped file's, with one change: every alert's `for` is this
# (the shipped 1m would make the test wait a minute for nothing; what the rule says, its labels and
# annotations are byte for byte the shipped ones, and `delay >= hold` below still proves the hold).
FOR = "12s"


def _die_with_parent() -> None:
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class Server:
    """A binary run on 127.0.0.1 with its output in a log file; ``close`` stops it."""

    def __init__(self, args: list[str], log: str, ready_url: str) -> None:
        self.log = log
        self.proc = subprocess.Popen(args, stdout=open(log, "wb"), stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(ready_url, timeout=1).read()
                return
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.close()
                    raise RuntimeError(f"{args[0]} did not start:\n{self.tail()}")
                time.sleep(0.1)

    def tail(self) -> str:
        return open(self.log, errors="replace").read()[-3000:]

    def close(self) -> None:
        stop_process(self.proc)


class Webhook:
    """Alertmanager's webhook receiver: records (arrival time, payload)."""

    def __init__(self) -> None:
        self.received: list[tuple[float, dict]] = []
        received = self.received

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                received.append((time.time(), json.loads(body)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/alerts"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def first(self, alertname: str, status: str, after: float = 0.0) -> float | None:
        """Arrival time of the first notification that carries ``alertname`` in ``status``."""
        for at, payload in list(self.received):
            if at >= after and any(a["labels"].get("alertname") == alertname and a["status"] == status
                                   for a in payload["alerts"]):
                return at
        return None

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def s3():
    server = MotoServer()
    proxy = Proxy(server.port)
    server.client().create_bucket(Bucket="checkpoints")
    yield proxy
    proxy.close()
    server.close()


@pytest.fixture
def webhook():
    hook = Webhook()
    yield hook
    hook.close()


@pytest.fixture
def alertmanager(tmp_path, webhook):
    port = free_port()
    config = {
        # resolve_timeout only applies to alerts sent without an end time; Prometheus sends one,
        # and sends the resolution itself when the rule stops matching.
        "global": {"resolve_timeout": "5m"},
        "route": {"receiver": "webhook", "group_by": ["alertname", "job"], "group_wait": f"{GROUP_WAIT:g}s",
                  "group_interval": f"{GROUP_INTERVAL:g}s", "repeat_interval": "1h"},
        "receivers": [{"name": "webhook", "webhook_configs": [{"url": webhook.url, "send_resolved": True}]}],
    }
    (tmp_path / "alertmanager.yml").write_text(yaml.safe_dump(config))
    server = Server([ALERTMANAGER, f"--config.file={tmp_path / 'alertmanager.yml'}",
                     f"--storage.path={tmp_path / 'alertmanager-data'}", f"--web.listen-address=127.0.0.1:{port}",
                     "--cluster.listen-address="],  # no HA gossip port (it would listen on every interface)
                    str(tmp_path / "alertmanager.log"), f"http://127.0.0.1:{port}/-/ready")
    yield f"127.0.0.1:{port}"
    server.close()


def rules_with_short_holds(tmp_path) -> str:
    """The shipped rules file with each alert's `for` set to FOR, nothing else changed."""
    doc = yaml.safe_load(open(RULES_FILE))
    for group in doc["groups"]:
        for rule in group["rules"]:
            if "alert" in rule and "for" in rule:
                rule["for"] = FOR
    path = tmp_path / "alerts.rules.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return str(path)


def start_prometheus(tmp_path, rest_port: int, alertmanager: str) -> tuple[Server, str]:
    port = free_port()
    config = {
        "global": {"scrape_interval": f"{SCRAPE:g}s", "evaluation_interval": f"{SCRAPE:g}s",
                   "scrape_timeout": f"{SCRAPE:g}s"},
        "rule_files": [rules_with_short_holds(tmp_path)],  # the shipped file, `for` shortened (FOR)
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]},
        # honor_labels: the job's own `job` label (its name) wins over the scrape job's name, as the
        # shipped scrape configs do (examples/monitoring/prometheus.yml).
        "scrape_configs": [{"job_name": "streamjob", "honor_labels": True,
                            "static_configs": [{"targets": [f"127.0.0.1:{rest_port}"]}]}],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    server = Server([PROMETHEUS, f"--config.file={tmp_path / 'prometheus.yml'}",
                     f"--storage.tsdb.path={tmp_path / 'prometheus-data'}", f"--web.listen-address=127.0.0.1:{port}"],
                    str(tmp_path / "prometheus.log"), f"http://127.0.0.1:{port}/-/ready")
    return server, f"http://127.0.0.1:{port}"


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.load(resp)


def query(prometheus: str, promql: str) -> list[dict]:
    return get_json(f"{prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": promql}))["data"]["result"]


def scrape(url: str) -> dict[str, float]:
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as resp:  # no token: /metrics needs none
        text = resp.read().decode()
    return {s.name: s.value for family in text_string_to_metric_families(text) for s in family.samples
            if s.name.startswith("streamjob_") and "state" not in s.labels and "operator" not in s.labels}


def test_checkpoints_failing_alert_reaches_the_webhook_and_resolves(spark_slots, s3, alertmanager, webhook, tmp_path):
    proxy = s3
    rule = next(r for r in alert_rules() if r["alert"] == ALERT)
    assert rule["for"]  # the shipped rule has a hold; the test's copy holds for FOR instead
    hold = {"m": 60.0, "s": 1.0}[FOR[-1]] * float(FOR[:-1])

    rest_port = free_port()
    # 200 rows/s for 10 minutes: the input outlasts the test (canceled at the end). Tolerable
    # failures high, so the job runs on through the outage (the default 0 would restart it at the
    # first failure); S3 calls and checkpoints time out fast, so failures come within a second.
    env = counting.build(str(tmp_path / "out"), "s3://checkpoints/jobs", 120_000, 200,
                         interval_ms=int(CHECKPOINT_INTERVAL * 1000), parallelism=2,
                         conf={"s3.endpoint": proxy.url, "rest.address": f"127.0.0.1:{rest_port}",
                               "execution.checkpointing.tolerable-failed-checkpoints": 100_000,
                               "execution.checkpointing.timeout": "4 s", "s3.connect-timeout": "1 s",
                               "s3.read-timeout": "3 s", "s3.max-attempts": 1})
    job = env.execute_async("counting")
    prometheus_server = None
    try:
        assert job.wait_until_running(60)
        rest = f"http://127.0.0.1:{rest_port}"

        def completed() -> float:
            try:
                return scrape(rest).get("streamjob_number_of_completed_checkpoints_total", 0)
            except OSError:  # the REST API starts listening just after the job reports RUNNING
                return 0

        wait_for(lambda: completed() >= 2, timeout=60, message="two checkpoints on S3")
        prometheus_server, prometheus = start_prometheus(tmp_path, rest_port, alertmanager)

        # Prometheus scrapes the job, has loaded the shipped rules, and the alert is quiet while
        # checkpoints complete (a rule that always fired would fail here, not pass below).
        wait_for(lambda: query(prometheus, 'streamjob_checkpoint_interval_seconds{job="counting"}'), timeout=30,
                 message="Prometheus to scrape the job")
        groups = get_json(f"{prometheus}/api/v1/rules")["data"]["groups"]
        assert {r["name"] for g in groups for r in g["rules"]} == {r["alert"] for r in alert_rules()}
        time.sleep(5)  # a few evaluations with healthy checkpoints
        assert not query(prometheus, f'ALERTS{{alertname="{ALERT}"}}'), "fires while checkpoints complete"
        assert webhook.first(ALERT, "firing") is None

        # -- storage down ---------------------------------------------------------------------
        before = scrape(rest)
        proxy.down()
        t_down = time.time()
        # The first failed checkpoint as the job's /metrics shows it (polled every 0.1 s).
        wait_for(lambda: scrape(rest)["streamjob_number_of_failed_checkpoints_total"]
                 > before["streamjob_number_of_failed_checkpoints_total"], timeout=30, message="a failed checkpoint")
        t_failed = time.time()
        last = scrape(rest)
        # The rule also wants "none completed since": the last completion older than 2 intervals
        # plus its duration. When that holds, counted from the first failure (often already true):
        condition = max(0.0, last["streamjob_last_checkpoint_completed_timestamp_seconds"] + 2 * CHECKPOINT_INTERVAL
                        + last["streamjob_last_checkpoint_duration_seconds"] - t_failed)
        bound = hold + 2 * SCRAPE + GROUP_WAIT + condition + SLACK
        t_alert = wait_for(lambda: webhook.first(ALERT, "firing"), timeout=bound + 10, interval=0.05,
                           message=f"{ALERT} at the webhook")
        delay = t_alert - t_failed
        print(f"\n{ALERT}: storage down at +0.0 s, first failed checkpoint visible at +{t_failed - t_down:.1f} s, "
              f"firing notification at the webhook {delay:.1f} s after it (rule for: {hold:g} s, scrape/eval "
              f"{SCRAPE:g} s, group_wait {GROUP_WAIT:g} s, 'none completed since' true {condition:.1f} s after "
              f"the failure; bound {bound:.1f} s)")
        assert delay <= bound, f"alert took {delay:.1f} s, more than for + 2 scrapes + group_wait (+ slack): {bound:.1f} s"
        assert delay >= hold, f"alert came after {delay:.1f} s, before its `for` ({hold:g} s) ran out"
        _, payload = next((at, p) for at, p in webhook.received if at == t_alert)
        alert = next(a for a in payload["alerts"] if a["labels"]["alertname"] == ALERT)
        assert alert["labels"]["job"] == "counting" and alert["labels"]["severity"] == "warning"
        assert "job_id" not in alert["labels"] and "instance" not in alert["labels"]  # identity: the job, not the process
        assert alert["annotations"]["runbook_url"].endswith("#runbook-streamjobcheckpointsfailing")
        assert "counting" in alert["annotations"]["description"]
        now = scrape(rest)
        assert now["streamjob_num_restarts_total"] == 0, "the job must run on through the outage"
        assert now["streamjob_number_of_completed_checkpoints_total"] == before[
            "streamjob_number_of_completed_checkpoints_total"], "a checkpoint completed during the outage"

        # -- storage back -----------------------------------------------------------------------
        proxy.up()
        t_up = time.time()
        t_completed = wait_for(lambda: scrape(rest)["streamjob_number_of_completed_checkpoints_total"]
                               > now["streamjob_number_of_completed_checkpoints_total"] and time.time(), timeout=30,
                               message="a checkpoint completing again")
        t_resolved = wait_for(lambda: webhook.first(ALERT, "resolved", after=t_alert),
                              timeout=2 * SCRAPE + GROUP_INTERVAL + SLACK + 10, interval=0.05,
                              message=f"{ALERT} resolved at the webhook")
        print(f"{ALERT}: storage back, a checkpoint completed {t_completed - t_up:.1f} s later, resolved "
              f"notification {t_resolved - t_completed:.1f} s after that")
        assert t_resolved - t_completed <= 2 * SCRAPE + GROUP_INTERVAL + SLACK
        assert job.get_job_status() == "RUNNING" and scrape(rest)["streamjob_num_restarts_total"] == 0
    except BaseException:
        if prometheus_server is not None:
            print("prometheus log:\n" + prometheus_server.tail())
        raise
    finally:
        if prometheus_server is not None:
            prometheus_server.close()
        if not job._finished.is_set():
            job.cancel()
        try:
            job.get_job_execution_result(120)
        except Exception:  # noqa: BLE001 - canceled on purpose
            pass
