"""The queryable state proxy: lookups over a plain TCP port of the job manager (Flink's KvStateClientProxy).

The REST API answers ``GET /v1/state/{name}?key=...`` too, but an HTTP request costs the job manager
~0.3 ms of CPU in aiohttp alone, which on a machine the job fills is taken from the job. This port
speaks the least a lookup needs: length-prefixed JSON frames over a connection the client keeps open,
with as many requests in flight as it likes (answers carry the request's id, in any order). Same
answers as the REST routes (``JobManager.query_state``), same token.

Frames: a 4-byte big-endian length, then that many bytes of a UTF-8 JSON object.

* The client's first frame: ``{"token": "<rest.auth.token>"}`` (``""`` without one; a ``job_id`` may
  be given: a lookup must never be answered by another job that happens to listen there now). The
  answer: ``{"job_id": ..., "job_name": ..., "states": [names]}``, or ``{"status": 401|404, "error": ...}``
  and the connection closes.
* Then requests ``{"id": <any JSON>, "name": "<state>", "keys": [<key as JSON>, ...],
  "consistency": "live"|"checkpoint"}``; each answer is ``{"id": ..., "status": 200, ...}`` with the
  REST body of ``POST /v1/state/{name}`` (``results``: per key ``found``, ``value``, ``key_group``,
  ``subtask``, ``checkpoint``), or ``{"id": ..., "status": 400|404|503, "error": ..., "retry_after": s}``.

* ``{"id": ..., "route": "<state>"}`` asks where the state's live values are (Flink's KvStateLocation):
  ``{"id": ..., "status": 200, "name", "operator", "uid", "kind", "key_type" (its repr), "max_parallelism",
  "parallelism", "subtasks": [[host, port, ticket] or null, ...]}``: each subtask's own lookup port
  (task/queryable.py) and the ticket it takes instead of the token. A client that can hash the job's
  keys asks the subtasks directly and the job manager not at all (``QueryableStateClient`` does).

A malformed frame (longer than ``MAX_FRAME``, not JSON, not an object) is answered with an error frame
(id null) and the connection is closed: the stream cannot be trusted past it.
"""

from __future__ import annotations

import asyncio
import hmac
import socket
from typing import Any

from ..queryable_frames import FrameError, encode, split
from .queryable_state import QueryError


def error_doc(request_id: Any, e: QueryError) -> dict:
    doc = {"id": request_id, "status": e.status, "error": e.message, **e.extra}
    if e.status == 503:
        doc.setdefault("retry_after", 5)
    return doc


class ProxyConnection(asyncio.Protocol):
    """One client's connection: frames in, answers out as they are ready."""

    def __init__(self, jm: Any, token: str):
        self.jm, self.token = jm, token
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None
        self.hello = False
        self.closed = False

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True

    def data_received(self, data: bytes) -> None:
        self.buf += data
        try:
            for doc in split(self.buf):
                if self.closed:
                    return
                if not self.hello:
                    if not self._greet(doc):
                        return
                    continue
                self._request(doc)
        except FrameError as e:
            self._refuse(str(e))

    def _greet(self, doc: dict) -> bool:
        given = str(doc.get("token") or "")
        if self.token and not hmac.compare_digest(given.encode(), self.token.encode()):
            self._send({"status": 401, "error": "missing or wrong token (the job's rest.auth.token)"})
            self._close()
            return False
        job_id = doc.get("job_id")
        if job_id is not None and str(job_id) != self.jm.job_id:
            self._send({"status": 404, "error": f"this port serves job {self.jm.job_id}, not {job_id}"})
            self._close()
            return False
        self.hello = True
        self._send({"job_id": self.jm.job_id, "job_name": self.jm.job_name, "states": self.jm.queries.names()})
        return True

    def _request(self, doc: dict) -> None:
        rid = doc.get("id")
        if "route" in doc:
            try:
                answer = self.jm.query_route(str(doc["route"]))
                answer["id"], answer["status"] = rid, 200
            except QueryError as e:
                answer = error_doc(rid, e)
            self._send(answer)
            return
        name, keys = doc.get("name"), doc.get("keys")
        if not isinstance(name, str) or not isinstance(keys, list):
            self._send({"id": rid, "status": 400,
                        "error": 'a request is {"id": ..., "name": "<state>", "keys": [<key>, ...]}'})
            return
        consistency = str(doc.get("consistency") or "live")
        asyncio.ensure_future(self._answer(rid, name, keys, consistency))

    async def _answer(self, rid: Any, name: str, keys: list, consistency: str) -> None:
        try:
            answer = await self.jm.query_state(name, keys, consistency)
            answer["id"], answer["status"] = rid, 200
        except QueryError as e:
            answer = error_doc(rid, e)
        except Exception as e:  # noqa: BLE001 - one lookup's failure is its own answer, not the connection's
            answer = {"id": rid, "status": 500, "error": f"{type(e).__name__}: {e}"}
        self._send(answer)

    def _send(self, doc: dict) -> None:
        if not self.closed and self.transport is not None:
            self.transport.write(encode(doc))

    def _refuse(self, why: str) -> None:
        self._send({"id": None, "status": 400, "error": why})
        self._close()

    def _close(self) -> None:
        self.closed = True
        self.buf.clear()
        if self.transport is not None:
            self.transport.close()


async def serve(jm: Any, host: str, port: int, token: str) -> asyncio.base_events.Server:
    loop = asyncio.get_running_loop()
    return await loop.create_server(lambda: ProxyConnection(jm, token), host, port)


__all__ = ["ProxyConnection", "serve"]
