"""The observer: reads a StreamJob's driver pods and its job manager's REST API into an Observation.

It records and never acts. Parsing (``pod_observation``, ``job_observation``) is
pure and tested on plain dicts; fetching is the thin async part around it. The
job manager is asked only through its REST API, with the job's own token.
"""

from __future__ import annotations

import asyncio
import json
from datetime import datetime
from typing import Any

import aiohttp

from .model import StreamJobStatus
from .resources import DRIVER_CONTAINER, LABEL_COMPONENT, LABEL_JOB, REST_PORT
from .observation import (CheckpointObservation, JobObservation, Observation, PodObservation, RescaleObservation,
                          SavepointObservation)

REST_TIMEOUT = 3.0  # s: a job manager that does not answer by then is UNKNOWN for this tick


def driver_selector(name: str) -> str:
    return f"{LABEL_JOB}={name},{LABEL_COMPONENT}=driver"


def pod_observation(pod: dict) -> PodObservation:
    meta, status = pod.get("metadata", {}), pod.get("status") or {}
    containers = status.get("containerStatuses") or []
    driver = next((c for c in containers if c.get("name") == DRIVER_CONTAINER), containers[0] if containers else {})
    state = driver.get("state") or {}
    waiting, terminated = state.get("waiting") or {}, state.get("terminated") or {}
    final = _final_result(terminated.get("message"))
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    return PodObservation(
        name=meta.get("name", ""), phase=status.get("phase", "Pending"), ready=ready, ip=status.get("podIP"),
        terminating=bool(meta.get("deletionTimestamp")), waiting_reason=waiting.get("reason"),
        waiting_message=waiting.get("message"), exit_code=terminated.get("exitCode"),
        final_state=final.get("state"), final_savepoint=final.get("final_savepoint"), final_error=final.get("error"),
        final_job_id=final.get("job_id"))


def _final_result(message: str | None) -> dict:
    """The job manager's final word (JSON in the termination message); {} when there is none."""
    if not message:
        return {}
    try:
        doc = json.loads(message)
    except ValueError:
        return {"error": message.strip()[-1000:]}  # FallbackToLogsOnError: the log's tail
    return doc if isinstance(doc, dict) else {}


def _rescale(doc: Any) -> RescaleObservation | None:
    if not isinstance(doc, dict) or not doc.get("id"):
        return None
    return RescaleObservation(str(doc["id"]), str(doc.get("status")), doc.get("parallelism"), doc.get("checkpoint_id"),
                              doc.get("error"))


def job_observation(doc: dict) -> JobObservation:
    cp = doc.get("latest_checkpoint")
    return JobObservation(
        reachable=True, state=doc.get("state"), job_id=doc.get("id"), restarts=int(doc.get("restarts") or 0),
        start_time=doc.get("start_time"), parallelism=doc.get("parallelism"),
        slots=doc.get("slots"), executors=doc.get("executors"),
        latest_checkpoint=CheckpointObservation(int(cp["id"]), cp["path"], float(cp["completed_time"])) if cp else None,
        final_savepoint=doc.get("final_savepoint"), error=doc.get("error"),
        queryable_state=tuple(doc["queryable_state"]) if isinstance(doc.get("queryable_state"), list) else None,
        rescale=_rescale(doc.get("rescale")))


def savepoint_observation(request_id: str, status: int, doc: dict) -> SavepointObservation:
    if status == 404:
        return SavepointObservation(request_id, "UNKNOWN")
    return SavepointObservation(request_id, doc.get("status", "UNKNOWN"), doc.get("path"), doc.get("error"))


def request_in_flight(status: StreamJobStatus) -> str | None:
    if status.upgrade is not None and status.upgrade.phase == "STOPPING":
        return status.upgrade.savepoint_request_id
    return status.savepoint_trigger.request_id if status.savepoint_trigger is not None else None


class JobManagerClient:
    """The job manager's REST API, as the operator uses it (aiohttp: no thread per call)."""

    def __init__(self, session: aiohttp.ClientSession):
        self.session = session

    @staticmethod
    def url(pod: PodObservation) -> str:
        return f"http://{pod.ip}:{REST_PORT}"

    async def call(self, pod: PodObservation, token: str, method: str, path: str,
                   body: dict | None = None) -> tuple[int, dict]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with self.session.request(method, self.url(pod) + path, json=body, headers=headers,
                                        timeout=aiohttp.ClientTimeout(total=REST_TIMEOUT)) as resp:
            try:
                doc = await resp.json(content_type=None)
            except ValueError:
                doc = {}
            return resp.status, doc if isinstance(doc, dict) else {}


async def observe(kube: Any, jm: JobManagerClient, name: str, namespace: str, status: StreamJobStatus,
                  token: str | None, now: datetime, feedback: dict[str, Any]) -> Observation:
    pods = await kube.list("Pod", namespace, driver_selector(name))
    current_name = status.deployment.pod_name
    pod = next((pod_observation(p) for p in pods if p["metadata"]["name"] == current_name), None)
    others = tuple(sorted(p["metadata"]["name"] for p in pods if p["metadata"]["name"] != current_name))
    job = savepoint = None
    if pod is not None and pod.ip and not pod.ended:
        job, savepoint = await _ask_job_manager(jm, pod, token or "", request_in_flight(status))
    return Observation(now=now, pod=pod, job=job, savepoint=savepoint, other_pods=others,
                       disposed=frozenset(feedback.pop("disposed", ())),
                       dispose_errors=feedback.pop("dispose_errors", {}),
                       trigger_errors=feedback.pop("trigger_errors", {}),
                       rescale_errors=feedback.pop("rescale_errors", {}),
                       spec_errors=dict(feedback.get("spec_errors", {})))


async def _ask_job_manager(jm: JobManagerClient, pod: PodObservation, token: str,
                           rid: str | None) -> tuple[JobObservation, SavepointObservation | None]:
    try:
        code, doc = await jm.call(pod, token, "GET", "/v1/job")
        if code != 200:
            return JobObservation(False, unreachable_reason=f"GET /v1/job: {code} {doc.get('error', '')}"), None
        job = job_observation(doc)
        savepoint = None
        if rid is not None:
            code, doc = await jm.call(pod, token, "GET", f"/v1/savepoints/{rid}")
            savepoint = savepoint_observation(rid, code, doc)
        return job, savepoint
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
        return JobObservation(False, unreachable_reason=f"{type(e).__name__}: {e}".rstrip(": ")), None
