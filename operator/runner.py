"""Running the operator process: kopf with our handlers, plus the health and metrics endpoint."""

from __future__ import annotations

import asyncio
import logging
import random
from typing import Any

import kopf
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from .apiserver import ApiServerHealth, unreachable_reason
from .kube import Kube
from .metrics import OperatorMetrics

logger = logging.getLogger("streamjob.operator")
RESTART_DELAY_S = 10.0  # after kopf gave up reaching the API server


async def serve_health(address: str, metrics: OperatorMetrics, api: ApiServerHealth | None = None) -> web.AppRunner:
    """``/healthz`` (the event loop answers and, with ``api``, the Kubernetes API server can be reached:
    503 with the reason while it cannot: the readiness probe), ``/livez`` (the event loop answers: the
    liveness probe; an API server outage must not restart every operator pod, it cannot cure that) and
    ``/metrics`` (the operator's Prometheus metrics)."""
    async def livez(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def healthz(_: web.Request) -> web.Response:
        if api is None:
            return web.json_response({"status": "ok"})
        status, doc = api.doc()
        return web.json_response(doc, status=status)

    async def prometheus(_: web.Request) -> web.Response:
        return web.Response(body=generate_latest(metrics.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/livez", livez)
    app.router.add_get("/metrics", prometheus)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    host, _, port = address.rpartition(":")
    await web.TCPSite(runner, host or "0.0.0.0", int(port)).start()
    return runner


async def run_operator(*, namespaces: list[str] = (), clusterwide: bool = False, peering: str | None = None,
                       priority: int | None = None, peering_lifetime: int = 60,
                       health_address: str | None = None, delete_timeout: float = 300.0,
                       idle_interval: float = 10.0, max_concurrent_reconciles: int = 8,
                       kubernetes_master: str | None = None, stop_flag: Any = None, ready_flag: Any = None,
                       memo: kopf.Memo | None = None, registry: kopf.OperatorRegistry | None = None,
                       settings: kopf.OperatorSettings | None = None) -> None:
    from . import handlers  # registers the handlers with kopf's default registry

    if settings is None:
        settings = kopf.OperatorSettings()
    settings.peering.lifetime = peering_lifetime
    if peering is not None and priority is None:
        priority = random.randint(1, 2**31 - 1)  # kopf pauses every replica of a tie: never tie
    memo = memo if memo is not None else kopf.Memo()
    memo.config = handlers.OperatorConfig(delete_timeout=delete_timeout, idle_interval=idle_interval,
                                          max_concurrent_reconciles=max_concurrent_reconciles,
                                          **({"kubernetes_master": kubernetes_master} if kubernetes_master else {}))
    memo.metrics = getattr(memo, "metrics", None) or OperatorMetrics()
    api = ApiServerHealth() if health_address else None
    probe = asyncio.ensure_future(api.probe_forever(Kube)) if api is not None else None
    health = await serve_health(health_address, memo.metrics, api) if health_address else None
    try:
        while True:
            try:
                await kopf.operator(registry=registry, settings=settings, namespaces=namespaces,
                                    clusterwide=clusterwide, standalone=peering is None, peering_name=peering,
                                    priority=priority, memo=memo, stop_flag=stop_flag, ready_flag=ready_flag)
                return
            except Exception as e:
                reason = unreachable_reason(e)
                if reason is None or _is_set(stop_flag):
                    raise
                # kopf gave up its retries: the operator stays up (its /healthz says why it cannot work)
                # and starts watching again, rather than exiting into a crash loop.
                logger.error("cannot reach the Kubernetes API server (%s); watching again in %.0f s",
                             reason, RESTART_DELAY_S)
                await asyncio.sleep(RESTART_DELAY_S)
    finally:
        if probe is not None:
            probe.cancel()
            await asyncio.gather(probe, return_exceptions=True)  # its finally closes its HTTP session
        if health is not None:
            await health.cleanup()
        await asyncio.sleep(0)


def _is_set(flag: Any) -> bool:
    is_set = getattr(flag, "is_set", None)
    if is_set is None:
        return getattr(flag, "done", lambda: False)()
    return bool(is_set())
