"""The operator process's own endpoint: /healthz and its Prometheus metrics, scraped over HTTP."""

from __future__ import annotations

import asyncio
import json
import socket
import urllib.request

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from kube.apiserver import kube_api  # noqa: F401 - the fixture
from streamjob.operator.metrics import OperatorMetrics
from streamjob.operator.model import Condition, StreamJobStatus
from streamjob.operator.runner import serve_health


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _status(state: str, *conditions: tuple[str, str]) -> StreamJobStatus:
    return StreamJobStatus(lifecycle_state=state, conditions=[
        Condition(type=t, status=v, reason="Test", last_transition_time="2026-01-01T00:00:00Z") for t, v in conditions])


def test_health_and_metrics_endpoint():
    metrics = OperatorMetrics()
    metrics.observe_reconcile(0.02, _status("DEPLOYED", ("Degraded", "True")), "uid-1", "ns", "a")
    # one job moved on: counted once, in its new state, and no longer Degraded
    metrics.observe_reconcile(0.03, _status("STABLE", ("Ready", "True"), ("Degraded", "False")), "uid-1", "ns", "a")
    metrics.observe_reconcile(0.5, _status("FAILED", ("Degraded", "True")), "uid-2", "ns", "b")
    metrics.observe_reconcile(0.5, _status("DEPLOYED", ("Degraded", "True")), "uid-3", "ns", "gone")
    metrics.forget("uid-3", "ns", "gone")
    metrics.savepoints_triggered.inc()

    async def scrape() -> tuple[int, str]:
        port = _free_port()
        runner = await serve_health(f"127.0.0.1:{port}", metrics)
        try:
            async with aiohttp.ClientSession() as session:
                async with session.get(f"http://127.0.0.1:{port}/healthz") as health:
                    assert (await health.json()) == {"status": "ok"}
                async with session.get(f"http://127.0.0.1:{port}/metrics") as resp:
                    return resp.status, await resp.text()
        finally:
            await runner.cleanup()

    status, text = asyncio.run(scrape())
    assert status == 200
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(text) for s in family.samples}
    assert samples[("streamjob_operator_reconciles_total", ())] == 4
    assert samples[("streamjob_operator_reconcile_duration_seconds_count", ())] == 4
    assert samples[("streamjob_operator_streamjobs", (("lifecycle_state", "STABLE"),))] == 1
    assert samples[("streamjob_operator_streamjobs", (("lifecycle_state", "DEPLOYED"),))] == 0
    assert samples[("streamjob_operator_streamjobs", (("lifecycle_state", "FAILED"),))] == 1
    assert samples[("streamjob_operator_savepoints_triggered_total", ())] == 1

    def condition(name: str, cond: str) -> float | None:
        return samples.get(("streamjob_operator_streamjob_condition",
                            (("condition", cond), ("name", name), ("namespace", "ns"))))

    assert (condition("a", "Ready"), condition("a", "Degraded")) == (1, 0)
    assert (condition("b", "Ready"), condition("b", "Degraded")) == (0, 1)
    assert condition("gone", "Degraded") is None and condition("gone", "Ready") is None


def _kubeconfig(path, server: str) -> str:
    import json

    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "users": [{"name": "u", "user": {"token": "not-checked"}}]}))
    return str(path)


def _healthz(port: int) -> tuple[int, dict] | None:
    import json
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
    except OSError:
        return None


def test_operator_without_api_server_says_so_in_one_line_per_retry_and_in_healthz(tmp_path):
    """`streamjob operator` against an API server that refuses connections (nothing listens on its port):
    /healthz answers 503 naming the server and why, the log has one line per retry and no traceback."""
    import os
    import signal
    import subprocess
    import sys
    import threading
    import time

    closed = _free_port()  # bound and released: nothing listens there
    port = _free_port()
    env = {**os.environ, "KUBECONFIG": _kubeconfig(tmp_path / "kubeconfig", f"https://127.0.0.1:{closed}")}
    proc = subprocess.Popen([sys.executable, "-m", "streamjob.runtime.cli", "operator", "-A",
                             "--health-address", f"127.0.0.1:{port}"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 60
        health = None
        while time.monotonic() < deadline and (health is None or health[0] != 503):
            health = _healthz(port)
            time.sleep(0.2)
        assert health is not None and health[0] == 503, (health, lines)
        # Liveness stays ok: restarting the operator would not bring the API server back.
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/livez", timeout=5) as r:
            assert r.status == 200 and json.loads(r.read()) == {"status": "ok"}
        assert health[1] == {"status": "unhealthy", "reason": f"cannot reach the Kubernetes API server at "
                                                             f"https://127.0.0.1:{closed}: connection refused"}
        retries = lambda: [x for x in lines if "cannot reach the Kubernetes API server" in x]  # noqa: E731
        while time.monotonic() < deadline and len(retries()) < 3:
            time.sleep(0.2)
        assert len(retries()) >= 3, lines
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        reader.join(5)
    for n, line in enumerate(retries()[:3], start=1):
        assert line.rstrip().endswith(f"cannot reach the Kubernetes API server at https://127.0.0.1:{closed} "
                                      f"(connection refused); attempt {n}/9, retrying"), line
    text = "".join(lines)
    assert "Traceback" not in text and "ConnectionKey" not in text, text


def test_healthz_is_ok_when_the_api_server_answers(kube_api, tmp_path):
    import os
    import subprocess
    import sys
    import time

    port = _free_port()
    env = {**os.environ, "KUBECONFIG": kube_api.kubeconfig}
    proc = subprocess.Popen([sys.executable, "-m", "streamjob.runtime.cli", "operator", "-A",
                             "--health-address", f"127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        deadline = time.monotonic() + 60
        health = None
        while time.monotonic() < deadline and (health is None or health[0] != 200):
            health = _healthz(port)
            time.sleep(0.2)
        assert health == (200, {"status": "ok"})
    finally:
        proc.terminate()
        proc.wait(30)


def test_the_operator_stops_without_an_error_line(kube_api, tmp_path):
    """SIGTERM (a pod's stop): kopf's cleanup closes the HTTP sessions the operator opened (its calls to the
    API server and to the job managers); no `ERROR asyncio: Unclosed client session` / `Unclosed connector`."""
    import os
    import signal
    import subprocess
    import sys
    import time

    port = _free_port()
    log = tmp_path / "operator.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "streamjob.runtime.cli", "operator", "-A",
                                 "--health-address", f"127.0.0.1:{port}"],
                                stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "KUBECONFIG": kube_api.kubeconfig})
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and (_healthz(port) or (0,))[0] != 200:
                time.sleep(0.2)
            time.sleep(2)  # its watches run, its status writes go out
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(60) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
    text = log.read_text()
    assert "Unclosed" not in text and "ERROR" not in text and "Traceback" not in text, text[-5000:]
