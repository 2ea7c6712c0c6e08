"""The operator process's own endpoint: /healthz and its Prometheus metrics, scraped over HTTP."""

from __future__ import annotations

import asyncio
import socket

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from streamjob.operator.metrics import OperatorMetrics
from streamjob.operator.runner import serve_health


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_health_and_metrics_endpoint():
    metrics = OperatorMetrics()
    metrics.observe_reconcile(0.02, "DEPLOYED", "uid-1")
    metrics.observe_reconcile(0.03, "STABLE", "uid-1")  # one job moved on: counted once, in its new state
    metrics.observe_reconcile(0.5, "FAILED", "uid-2")
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
    assert samples[("streamjob_operator_reconciles_total", ())] == 3
    assert samples[("streamjob_operator_reconcile_duration_seconds_count", ())] == 3
    assert samples[("streamjob_operator_streamjobs", (("lifecycle_state", "STABLE"),))] == 1
    assert samples[("streamjob_operator_streamjobs", (("lifecycle_state", "DEPLOYED"),))] == 0
    assert samples[("streamjob_operator_streamjobs", (("lifecycle_state", "FAILED"),))] == 1
    assert samples[("streamjob_operator_savepoints_triggered_total", ())] == 1
