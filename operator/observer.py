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

from .autoscaler import Collected, Sample, Vertex
from .model import StreamJobStatus, seconds
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
    operators = doc.get("operators")
    return RescaleObservation(str(doc["id"]), str(doc.get("status")), doc.get("parallelism"), doc.get("checkpoint_id"),
                              doc.get("error"), dict(operators) if isinstance(operators, dict) and operators else None,
                              doc.get("restart_s"))


def vertex_key(vertex: dict) -> str:
    """A job vertex as a rescale names it: its head operator's key (uid, else op<n>)."""
    head = (vertex.get("operators") or [{}])[0]
    return str(head.get("key") or head.get("uid") or f"op{head.get('id', vertex.get('id'))}")


def autoscaler_view(doc: dict, at: float) -> tuple[tuple[Vertex, ...], Collected | None]:
    """``/v1/job``'s vertices and edges as the autoscaler's topology, and their metrics now: the head
    operator's records in per second (a source's: what it emits), the last one's records out, the
    subtasks' average busyTimeMsPerSecond, a source's pendingRecords (its backlog) and split count."""
    raw = [v for v in doc.get("vertices") or [] if isinstance(v, dict) and v.get("operators")]
    if not raw:
        return (), None
    key_of = {v["id"]: vertex_key(v) for v in raw}
    edges = [e for e in doc.get("edges") or [] if isinstance(e, dict) and not e.get("chained")
             and not e.get("feedback")]
    vertices, samples = [], {}
    for v in raw:
        key = key_of[v["id"]]
        ins = [e for e in edges if e.get("target_vertex") == v["id"] and e.get("source_vertex") in key_of]
        inputs = tuple(dict.fromkeys(key_of[e["source_vertex"]] for e in ins))
        vertices.append(Vertex(id=key, name=str(v.get("name", key)), parallelism=int(v.get("parallelism") or 1),
                               max_parallelism=int(v.get("max_parallelism") or doc.get("max_parallelism") or 128),
                               inputs=inputs, keyed=any(e.get("partitioner") == "HASH" for e in ins),
                               partitions=v.get("splits") or None))
        head, last = v["operators"][0], v["operators"][-1]
        rate_in = float(head.get("records_in_per_second") or 0.0)
        if not inputs:  # a source takes in nothing through a channel: what it reads is what it emits
            rate_in = max(rate_in, float(head.get("records_out_per_second") or 0.0))
        subtasks = (v.get("backpressure") or {}).get("subtasks") or []
        busy = [float(s.get("busyTimeMsPerSecond") or 0.0) for s in subtasks]
        pending = v.get("pending_records")
        samples[key] = Sample(rate_in, float(last.get("records_out_per_second") or 0.0),
                              sum(busy) / len(busy) if busy else 0.0,
                              float(pending) if isinstance(pending, (int, float)) else None)
    return tuple(vertices), Collected(at, samples)


def job_observation(doc: dict, at: float = 0.0) -> JobObservation:
    cp = doc.get("latest_checkpoint")
    vertices, sample = autoscaler_view(doc, at) if doc.get("state") == "RUNNING" else ((), None)
    return JobObservation(
        reachable=True, state=doc.get("state"), job_id=doc.get("id"), restarts=int(doc.get("restarts") or 0),
        start_time=doc.get("start_time"), parallelism=doc.get("parallelism"),
        slots=doc.get("slots"), executors=doc.get("executors"),
        latest_checkpoint=CheckpointObservation(int(cp["id"]), cp["path"], float(cp["completed_time"])) if cp else None,
        final_savepoint=doc.get("final_savepoint"), error=doc.get("error"),
        queryable_state=tuple(doc["queryable_state"]) if isinstance(doc.get("queryable_state"), list) else None,
        rescale=_rescale(doc.get("rescale")), vertices=vertices, sample=sample)


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
                  token: str | None, now: datetime, feedback: dict[str, Any],
                  history: list[Collected] | None = None) -> Observation:
    """``history``: the autoscaler's samples of this job so far (the caller's, kept across ticks): this
    tick's is appended, and what is older than the longest window it may need is dropped."""
    pods = await kube.list("Pod", namespace, driver_selector(name))
    current_name = status.deployment.pod_name
    pod = next((pod_observation(p) for p in pods if p["metadata"]["name"] == current_name), None)
    others = tuple(sorted(p["metadata"]["name"] for p in pods if p["metadata"]["name"] != current_name))
    job = savepoint = None
    if pod is not None and pod.ip and not pod.ended:
        job, savepoint = await _ask_job_manager(jm, pod, token or "", request_in_flight(status), now.timestamp())
    if history is not None:
        _remember(history, job, status, now.timestamp())
    return Observation(now=now, pod=pod, job=job, savepoint=savepoint, other_pods=others,
                       metrics_history=tuple(history or ()),
                       disposed=frozenset(feedback.pop("disposed", ())),
                       dispose_errors=feedback.pop("dispose_errors", {}),
                       trigger_errors=feedback.pop("trigger_errors", {}),
                       rescale_errors=feedback.pop("rescale_errors", {}),
                       spec_errors=dict(feedback.get("spec_errors", {})))


def _remember(history: list[Collected], job: JobObservation | None, status: StreamJobStatus, now: float) -> None:
    spec = (status.last_reconciled_spec or {}).get("autoscaler") or {}
    if not spec.get("enabled"):
        history.clear()
        return
    if job is not None and job.sample is not None:
        if history and set(history[-1].samples) != set(job.sample.samples):
            history.clear()  # another topology (a new deployment): the old samples say nothing of it
        history.append(job.sample)
    window = seconds(str(spec.get("metricsWindow") or "10m"))
    while history and history[0].at < now - window - 60.0:
        history.pop(0)


async def _ask_job_manager(jm: JobManagerClient, pod: PodObservation, token: str,
                           rid: str | None, now: float = 0.0) -> tuple[JobObservation, SavepointObservation | None]:
    try:
        code, doc = await jm.call(pod, token, "GET", "/v1/job")
        if code != 200:
            return JobObservation(False, unreachable_reason=f"GET /v1/job: {code} {doc.get('error', '')}"), None
        job = job_observation(doc, now)
        savepoint = None
        if rid is not None:
            code, doc = await jm.call(pod, token, "GET", f"/v1/savepoints/{rid}")
            savepoint = savepoint_observation(rid, code, doc)
        return job, savepoint
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
        return JobObservation(False, unreachable_reason=f"{type(e).__name__}: {e}".rstrip(": ")), None
