"""The Grafana dashboard (helm/streamjob-operator/files/dashboard.json) and the alert rules read
only metrics that exist: every metric name in every panel's and rule's PromQL must be in a real
scrape of a running local job's /metrics or of the operator's metrics endpoint. Dashboard
expressions are also parsed by promtool, and the dashboard's structure is checked (data source
variable, namespace/job variables, what it shows).
"""

from __future__ import annotations

import asyncio
import filecmp
import os
import shutil
import subprocess
import time
import urllib.request

import aiohttp
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from jobs import counting
from monitoring_promql import KAFKA_SOURCE_METRICS, ROOT, alert_rules, dashboard, metric_names, panels
from streamjob.operator.metrics import OperatorMetrics
from streamjob.operator.model import Condition, StreamJobStatus
from streamjob.operator.runner import serve_health
from streamjob.runtime.api.environment import execution_context
from s3server import free_port

# Series Prometheus makes itself for every target rather than scraping them.
SYNTHETIC = {"up"}


def sample_names(text: str) -> set[str]:
    """Names of the samples in an exposition (counters as *_total, histograms as *_bucket/_sum/_count)."""
    return {s.name for family in text_string_to_metric_families(text) for s in family.samples}


@pytest.fixture(scope="module")
def job_scrape(spark_slots, tmp_path_factory):
    """One running job, scraped over HTTP once it has completed checkpoints and moved records."""
    tmp = tmp_path_factory.mktemp("dashboard-job")
    execution_context.reset()  # module scope: the per-test reset has not run yet
    env = counting.build(str(tmp / "out"), str(tmp / "checkpoints"), 200_000, 5_000, interval_ms=200, parallelism=2,
                         event_time=True)
    client = env.execute_async("counting")
    try:
        assert client.wait_until_running(60)
        jm = client.job_manager
        deadline = time.monotonic() + 60
        while True:
            text = ""
            if jm.rest is not None and jm.rest.url is not None:
                with urllib.request.urlopen(f"{jm.rest.url}/metrics", timeout=5) as resp:  # /metrics needs no token
                    text = resp.read().decode()
            names = sample_names(text)
            # Gauges of the last checkpoint and the per-task series appear once there is something to say.
            if {"streamjob_last_checkpoint_duration_seconds", "streamjob_num_records_out_total",
                    "streamjob_back_pressured_time_seconds_total", "streamjob_current_output_watermark"} <= names:
                break
            assert time.monotonic() < deadline, f"the job's metrics never got complete:\n{text}"
            time.sleep(0.2)
        yield names
    finally:
        if not client._finished.is_set():
            client.cancel()
        try:
            client.get_job_execution_result(120)
        except Exception:  # noqa: BLE001 - canceled on purpose
            pass


@pytest.fixture(scope="module")
def operator_scrape():
    """The operator's real endpoint (serve_health) after a reconcile, scraped over HTTP."""
    metrics = OperatorMetrics()
    status = StreamJobStatus(lifecycle_state="STABLE", conditions=[
        Condition(type="Ready", status="True", reason="Test", last_transition_time="2026-01-01T00:00:00Z")])
    metrics.observe_reconcile(0.02, status, "uid-1", "shop", "orders")

    async def scrape() -> str:
        port = free_port()
        runner = await serve_health(f"127.0.0.1:{port}", metrics)
        try:
            async with aiohttp.ClientSession() as session:
                async with session.get(f"http://127.0.0.1:{port}/metrics") as resp:
                    assert resp.status == 200
                    return await resp.text()
        finally:
            await runner.cleanup()

    return sample_names(asyncio.run(scrape()))


def dashboard_exprs() -> list[tuple[str, str]]:
    return [(p["title"], t["expr"]) for p in panels(dashboard()) for t in p.get("targets", [])]


def test_metric_name_lexer():
    assert metric_names('sum by (le) (rate(a_bucket{x=~"$job", y="b c"}[$__rate_interval]))') == {"a_bucket"}
    assert metric_names('max without (instance, pod) (time() - b) > clamp_min(5 * c, 120) '
                        'and ignoring (state) d{state="RUNNING"} == 1') == {"b", "c", "d"}
    assert metric_names("histogram_quantile(0.95, sum(rate(e[5m])) by (le)) or vector(1e3)") == {"e"}
    assert metric_names("(up == 0) and on (instance) last_over_time(f:g[6h] offset 1m)") == {"up", "f:g"}
    assert metric_names("sum without (job_id) (increase(h_total[10m])) > 0 unless i") == {"h_total", "i"}


def test_dashboard_metrics_exist_in_real_scrapes(job_scrape, operator_scrape):
    exported = job_scrape | operator_scrape | KAFKA_SOURCE_METRICS  # those: tests/test_metrics.py
    missing = {(title, name) for title, expr in dashboard_exprs() for name in metric_names(expr) - exported}
    assert not missing, f"panels read metrics that are not exported: {sorted(missing)}"


def test_alert_rules_metrics_exist_in_real_scrapes(job_scrape, operator_scrape):
    # A Kafka source's metrics are in a real Kafka job's scrape: tests/test_metrics.py checks those.
    exported = job_scrape | operator_scrape | SYNTHETIC | KAFKA_SOURCE_METRICS
    missing = {(r["alert"], name) for r in alert_rules() for name in metric_names(r["expr"]) - exported}
    assert not missing, f"alert rules read metrics that are not exported: {sorted(missing)}"


def test_dashboard_shows_what_an_operator_of_jobs_needs():
    used = {name for _, expr in dashboard_exprs() for name in metric_names(expr)}
    needed = {
        "streamjob_last_checkpoint_duration_seconds", "streamjob_last_checkpoint_size_bytes",
        "streamjob_number_of_failed_checkpoints_total", "streamjob_checkpoint_alignment_time_seconds",
        "streamjob_num_restarts_total", "streamjob_num_records_in_total", "streamjob_num_records_out_total",
        "streamjob_back_pressured_time_seconds_total", "streamjob_operator_reconciles_total",
        "streamjob_operator_reconcile_errors_total", "streamjob_operator_reconcile_duration_seconds_bucket",
        "streamjob_operator_streamjobs", "streamjob_current_output_watermark",
        "streamjob_last_checkpoint_persisted_data_bytes", "streamjob_checkpoint_start_delay_seconds",
        "streamjob_pending_records",
    }
    assert not needed - used, f"the dashboard shows nothing of {sorted(needed - used)}"


def test_dashboard_structure():
    dash = dashboard()
    assert 36 <= dash["schemaVersion"] <= 41 and dash["uid"] and dash["title"]
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    for name in ("namespace", "job"):
        assert variables[name]["type"] == "query" and variables[name]["datasource"]["uid"] == "${datasource}"
        # Outside Kubernetes there is no namespace label: "All" must match an absent label too.
        assert variables[name]["includeAll"] and variables[name]["allValue"] == ".*"
    ids = [p["id"] for p in panels(dash)]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for p in panels(dash):
        assert {"h", "w", "x", "y"} <= set(p["gridPos"]) and p["gridPos"]["x"] + p["gridPos"]["w"] <= 24, p["title"]
        if p["type"] == "row":
            continue
        assert p["datasource"]["uid"] == "${datasource}", p["title"]
        assert p["targets"], p["title"]
        for t in p["targets"]:
            assert t["datasource"]["uid"] == "${datasource}", f"{p['title']}: hard-coded data source"
            names = metric_names(t["expr"])
            job_side = any(n.startswith("streamjob_") and not n.startswith("streamjob_operator_") for n in names)
            if job_side:  # the job variables filter every job panel
                assert 'job=~"$job"' in t["expr"] and 'namespace=~"$namespace"' in t["expr"], p["title"]


def test_dashboard_expressions_parse(tmp_path):
    """promtool parses every expression (as a recording rule), Grafana's variables substituted."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian: apt-get install prometheus; CI installs it)")
    rules = []
    for i, (_, expr) in enumerate(dashboard_exprs()):
        expr = expr.replace("$__rate_interval", "1m").replace("$namespace", ".*").replace("$job", ".*")
        assert "$" not in expr, f"unknown variable in {expr}"
        rules.append({"record": f"dashboard:expr{i}", "expr": expr})
    path = tmp_path / "dashboard.rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    proc = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_examples_are_the_shipped_files():
    """examples/monitoring/ (for users without the chart) holds the same rules and dashboard."""
    for name in ("alerts.rules.yaml", "dashboard.json"):
        shipped = os.path.join(ROOT, "helm", "streamjob-operator", "files", name)
        example = os.path.join(ROOT, "examples", "monitoring", name)
        assert filecmp.cmp(shipped, example, shallow=False), f"examples/monitoring/{name} differs from the chart's"
