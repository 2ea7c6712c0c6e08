"""The operator process's own endpoint: /healthz and its Prometheus metrics, scraped over HTTP."""

from __future__ import annotations

import asyncio
import socket

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

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
