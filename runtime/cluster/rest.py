"""The job manager's REST API (aiohttp), in the driver, on the job manager's event loop.

JSON in and out, described by the OpenAPI document it serves at ``/v1/openapi.json``;
Prometheus metrics at ``/metrics``; the web dashboard at ``/`` (static files of this
package, which read the same API). With ``rest.auth.token`` set, every ``/v1``
route but the OpenAPI document needs ``Authorization: Bearer <token>``; the dashboard's
files do not (they hold no job data; the page asks for the token). Errors are
``{"error": message}`` with a 4xx status that says whose fault it is.
"""

from __future__ import annotations

import hmac
import json
import logging
import re
import sys
from importlib import resources
from typing import TYPE_CHECKING, Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from .jobmanager_limits import FAILURE_HISTORY, SAVEPOINT_HISTORY, SavepointRefused
from .metrics import AGGREGATIONS, JobMetrics, subtask_aggregates, vertex_metrics
from .pod import is_wildcard
from .queryable_state import QueryError, url_key
from .rescale import RescaleRefused, parse_request

if TYPE_CHECKING:
    from .jobmanager import JobManager  # it starts this server

API = "/v1"
REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")  # safe in a URL path, a label and a log line
DASHBOARD_TYPES = {".html": "text/html", ".js": "text/javascript", ".css": "text/css", ".svg": "image/svg+xml"}
# The page runs only its own script and style and talks only to this server: user text (job, operator
# names, exception messages) that slipped into the DOM as markup still could not run; it cannot be
# framed (its buttons stop and cancel the job), and its URL (with the job's address) is not sent on.
DASHBOARD_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
                               "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


class _ServerLog(logging.LoggerAdapter):
    """aiohttp's ``aiohttp.server`` logger, but a malformed request (a port scan, TLS sent to plain HTTP, a
    broken chunked body) is one line at DEBUG: aiohttp logs it as an ERROR with a traceback that quotes
    the request's bytes (100 KB of them for a 10 MB chunked body). Answering 400 is all there is to do
    about it; everything else aiohttp logs stays as it is."""

    def log(self, level: int, msg: Any, *args: Any, exc_info: Any = None, **kwargs: Any) -> None:
        error = exc_info if isinstance(exc_info, BaseException) else sys.exc_info()[1] if exc_info is True else None
        if isinstance(error, HttpProcessingError):
            what = (error.message or "").strip().splitlines()[:1] or [type(error).__name__]
            remote = f" from {args[0]}" if args and "%s" in str(msg) else ""
            self.logger.debug("malformed HTTP request%s answered %s: %s", remote, error.code, what[0].rstrip(":")[:200])
            return
        self.logger.log(level, msg, *args, exc_info=exc_info, **kwargs)


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


def _query_error(e: QueryError) -> web.Response:
    extra = {k: v for k, v in e.extra.items() if k != "retry_after"}
    headers = {"Retry-After": str(e.extra["retry_after"])} if e.status == 503 else None
    if e.status == 503 and "retry_after" not in e.extra:
        headers = {"Retry-After": "5"}
    return web.json_response({"error": e.message, **extra}, status=e.status, headers=headers)


class RestServer:
    def __init__(self, jm: JobManager, host: str, port: int, token: str = "", metrics: JobMetrics | None = None):
        self.jm = jm
        self.host = host
        self.port = port
        self.token = token
        self.metrics = metrics
        self._runner: web.AppRunner | None = None
        self.url: str | None = None

    # -- lifecycle (on the job manager's loop) ---------------------------------------------
    async def start(self) -> str:
        app = web.Application(middlewares=[self._errors, self._auth], client_max_size=1 << 20)
        app.router.add_get(f"{API}/openapi.json", self.openapi)
        app.router.add_get(f"{API}/job", self.job)
        app.router.add_get(f"{API}/checkpoints", self.checkpoints)
        app.router.add_get(f"{API}/exceptions", self.exceptions)
        app.router.add_get(f"{API}/vertices/{{vertex_id}}/metrics", self.vertex_metrics)
        app.router.add_get(f"{API}/vertices/{{vertex_id}}/subtasks/metrics", self.subtask_metrics)
        app.router.add_get(f"{API}/savepoints", self.savepoints)
        app.router.add_post(f"{API}/savepoints", self.trigger_savepoint)
        app.router.add_get(f"{API}/savepoints/{{trigger_id}}", self.savepoint)
        app.router.add_put(f"{API}/jobs/{{job_id}}/parallelism", self.rescale)
        app.router.add_get(f"{API}/jobs/{{job_id}}/rescales/{{rescale_id}}", self.rescale_status)
        app.router.add_post(f"{API}/stop", self.stop)
        app.router.add_post(f"{API}/cancel", self.cancel)
        app.router.add_get(f"{API}/state", self.queryable_states)
        app.router.add_get(f"{API}/state/{{name}}", self.query_state)
        app.router.add_post(f"{API}/state/{{name}}", self.query_states)
        app.router.add_get("/metrics", self.prometheus)
        app.router.add_get("/", self.dashboard)
        app.router.add_get("/dashboard/{name}", self.dashboard)
        self._runner = web.AppRunner(app, access_log=None, logger=_ServerLog(logging.getLogger("aiohttp.server"), {}))
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        # Listening on every interface, it is reached where the job manager is advertised (a pod's IP).
        host = self.jm.advertise if is_wildcard(self.host) else self.host
        self.url = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
        return self.url

    async def stop_serving(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    # -- middleware ------------------------------------------------------------------------
    @web.middleware
    async def _errors(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """Every error is JSON, also aiohttp's own 404 and 405."""
        try:
            return await handler(request)
        except ConnectionError:
            # The client hung up mid-request or before its answer was out (a probe that gave up, a closed
            # tab): nobody to answer and nothing wrong here. This answer cannot be sent either, and aiohttp
            # drops the connection quietly, where the error itself would be logged with a traceback.
            return web.Response(status=499, reason="Client Closed Request")
        except web.HTTPException as e:
            if e.status < 400:
                raise
            message = {404: f"no such resource: {request.path}",
                       405: f"{request.method} is not allowed on {request.path}"}.get(e.status, e.reason)
            response = _error(e.status, message)
            if isinstance(e, web.HTTPMethodNotAllowed):  # RFC 9110: a 405 names the methods that are
                response.headers["Allow"] = ", ".join(sorted(e.allowed_methods))
            return response

    @web.middleware
    async def _auth(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if self.token and request.path.startswith(API + "/") and request.path != f"{API}/openapi.json":
            given = request.headers.get("Authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {self.token}".encode()):
                resp = _error(401, "missing or wrong bearer token (Authorization: Bearer <rest.auth.token>)")
                resp.headers["WWW-Authenticate"] = 'Bearer realm="streamjob"'
                return resp
        return await handler(request)

    # -- routes ----------------------------------------------------------------------------
    async def openapi(self, request: web.Request) -> web.Response:
        return web.json_response(OPENAPI)

    async def job(self, request: web.Request) -> web.StreamResponse:
        peek = _flag(request, "peek")
        if isinstance(peek, web.Response):
            return peek
        info = self.jm.job_info()
        # A watcher (the dashboard) peeks: the final result stays for the client that waits for it.
        return await self._sent(request, info, final=info["end_time"] is not None and not peek)

    async def checkpoints(self, request: web.Request) -> web.Response:
        raw = request.query.get("limit")
        limit = None
        if raw is not None:
            if not raw.isdigit() or int(raw) < 1:
                return _error(400, f"query parameter 'limit' must be a positive integer, got {raw[:50]!r}")
            limit = int(raw)
        if self.jm.coordinator is None:
            return web.json_response({"enabled": False, "counts": {"completed": 0, "failed": 0, "in_progress": 0},
                                      "latest": {"completed": None, "savepoint": None, "failed": None,
                                                 "restored": self.jm.restored_info()},
                                      "history": []})
        doc = self.jm.checkpoints_info()
        doc["history"] = doc["history"][:limit]
        return web.json_response(doc)

    async def exceptions(self, request: web.Request) -> web.Response:
        return web.json_response(self.jm.exceptions_info())

    async def savepoints(self, request: web.Request) -> web.Response:
        return web.json_response(self.jm.savepoints_info())

    async def dashboard(self, request: web.Request) -> web.Response:
        name = request.match_info.get("name", "index.html")
        files = _dashboard_files()
        if name not in files:
            return _error(404, f"no such resource: {request.path}")
        return web.Response(body=files[name], headers={
            "Content-Type": DASHBOARD_TYPES[name[name.rindex("."):]] + "; charset=utf-8", **DASHBOARD_HEADERS})

    async def trigger_savepoint(self, request: web.Request) -> web.Response:
        wait = _flag(request, "wait")
        if isinstance(wait, web.Response):
            return wait
        body = await _json_body(request)
        if isinstance(body, web.Response):
            return body
        unknown = sorted(set(body) - {"target_dir", "stop", "drain", "request_id"})
        if unknown:
            return _error(400, f"unknown field(s) {', '.join(map(repr, unknown))}; expected target_dir, stop, drain, "
                               f"request_id")
        request_id = body.get("request_id")
        if request_id is not None and not (isinstance(request_id, str) and REQUEST_ID.fullmatch(request_id)):
            return _error(400, f"field 'request_id' must be 1-128 characters of A-Z a-z 0-9 . _ : -, "
                               f"got {json.dumps(request_id)[:150]}")
        target = body.get("target_dir")
        if target is not None and (not isinstance(target, str) or not target.strip()):
            return _error(400, "field 'target_dir' must be a non-empty string (a directory URL such as s3://bucket/savepoints)")
        for name in ("stop", "drain"):
            if name in body and not isinstance(body[name], bool):
                return _error(400, f"field {name!r} must be true or false, got {json.dumps(body[name])}")
        if body.get("drain") and not body.get("stop"):
            return _error(400, "field 'drain' needs 'stop': true (drain ends the job's input)")
        repeated = request_id is not None and self.jm.savepoint_status(request_id) is not None
        try:
            req = self.jm.trigger_savepoint(target, bool(body.get("stop")), bool(body.get("drain")), request_id)
        except SavepointRefused as e:
            return _error(409, str(e))
        except ValueError as e:
            return _error(400, f"field 'target_dir': {e}")
        if wait and body.get("stop"):
            # The caller polls for the outcome, and the job ends right after the savepoint: without this a
            # local job (rest.result-linger 0) could exit between two of its polls. Reading the completed
            # savepoint (or the job) ends the linger.
            self.jm.reader_waits()
        return web.json_response({"id": req.trigger_id, "path": req.path, "status": req.status},
                                 status=200 if repeated else 202,
                                 headers={"Location": f"{API}/savepoints/{req.trigger_id}"})

    async def savepoint(self, request: web.Request) -> web.Response:
        trigger_id = request.match_info["trigger_id"]
        req = self.jm.savepoint_status(trigger_id)
        if req is None:
            return _error(404, f"no savepoint with id {trigger_id!r} was triggered on this job")
        summary = req.summary()
        # The completed stop-with-savepoint is a final result, unless the client said it waits for the end
        # (`streamjob stop -p`): that one reads GET /v1/job too, for what the job says to resume with.
        return await self._sent(request, summary, final=summary["stop"] and summary["status"] == "COMPLETED"
                                and not self.jm.reader_waiting)

    # -- rescaling in place ----------------------------------------------------------------------
    def _this_job(self, request: web.Request) -> web.Response | None:
        job_id = request.match_info["job_id"]
        if job_id != self.jm.job_id:
            return _error(404, f"no job {job_id!r} here: this job manager runs job {self.jm.job_id}")
        return None

    async def rescale(self, request: web.Request) -> web.Response:
        other = self._this_job(request)
        if other is not None:
            return other
        body = await _json_body(request)
        if isinstance(body, web.Response):
            return body
        try:
            parallelism, operators = parse_request(body)
            # Building the rescaled graph runs the planner (user functions' pickling is not involved).
            req, new = self.jm.request_rescale(parallelism, operators)
        except RescaleRefused as e:
            return _error(e.status, str(e))
        location = f"{API}/jobs/{self.jm.job_id}/rescales/{req.id}"
        return web.json_response(req.summary(), status=202 if new else 200, headers={"Location": location})

    async def rescale_status(self, request: web.Request) -> web.Response:
        other = self._this_job(request)
        if other is not None:
            return other
        req = self.jm.rescales.get(request.match_info["rescale_id"])
        if req is None:
            return _error(404, f"no rescale with id {request.match_info['rescale_id']!r} on this job")
        return web.json_response(req.summary())

    async def stop(self, request: web.Request) -> web.Response:
        wait = _flag(request, "wait")
        if isinstance(wait, web.Response):
            return wait
        if self.jm.status.state not in ("RUNNING", "RESTARTING"):
            return _error(409, f"the job is {self.jm.status.state}")
        if wait:
            self.jm.reader_waits()
        self.jm.stop()
        return web.json_response({"state": "STOPPING"}, status=202)

    async def cancel(self, request: web.Request) -> web.Response:
        wait = _flag(request, "wait")
        if isinstance(wait, web.Response):
            return wait
        if self.jm.status.state in ("FINISHED", "FAILED", "CANCELED"):
            return _error(409, f"the job is {self.jm.status.state}")
        if wait:
            self.jm.reader_waits()
        self.jm.cancel()
        return web.json_response({"state": "CANCELING"}, status=202)

    # -- queryable state ----------------------------------------------------------------------
    async def queryable_states(self, request: web.Request) -> web.Response:
        return web.json_response({"states": self.jm.queryable_states()})

    async def query_state(self, request: web.Request) -> web.Response:
        """GET /v1/state/{name}?key=<JSON>[&consistency=live|checkpoint]: one key."""
        name = request.match_info["name"]
        text = request.query.get("key")
        if text is None:
            return _error(400, "query parameter 'key' is missing: ?key=<the key as JSON> (a bare word is a string)")
        try:
            state = self.jm.queries.find(name)
        except QueryError as e:
            return _query_error(e)
        doc = await self._query(name, [url_key(text, state.op.key_type)], request.query.get("consistency", "live"))
        if isinstance(doc, web.Response):
            return doc
        result = doc.pop("results")[0]
        if "error" in result:
            return _error(400, f"key {result['key']!r}: {result['error']}")
        return web.json_response({**doc, **result})

    async def query_states(self, request: web.Request) -> web.Response:
        """POST /v1/state/{name} {"keys": [...], "consistency": "live"}: many keys in one request."""
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "the body must be JSON: {\"keys\": [<key>, ...], \"consistency\": \"live\"}")
        if not isinstance(body, dict) or not isinstance(body.get("keys"), list):
            return _error(400, "the body must be an object with a list 'keys': {\"keys\": [<key>, ...]}")
        consistency = body.get("consistency", request.query.get("consistency", "live"))
        doc = await self._query(request.match_info["name"], body["keys"], str(consistency))
        return doc if isinstance(doc, web.Response) else web.json_response(doc)

    async def _query(self, name: str, keys: list, consistency: str) -> dict | web.Response:
        try:
            return await self.jm.query_state(name, keys, consistency)
        except QueryError as e:
            return _query_error(e)

    async def _sent(self, request: web.Request, doc: dict, final: bool) -> web.StreamResponse:
        """Send ``doc``; if it held the final result (the job's end, or the completed stop-with-savepoint),
        tell the job manager only once it is out: it may stop lingering, and the server with it."""
        response = web.json_response(doc)
        await response.prepare(request)
        await response.write_eof()
        if final:
            self.jm.note_result_read()
        return response

    def _vertex_metrics(self, request: web.Request) -> dict[str, str] | web.Response:
        raw = request.match_info["vertex_id"]
        if not raw.isdigit():
            return _error(400, f"vertex id must be a non-negative integer (the ids of GET {API}/job's vertices), "
                               f"got {raw[:50]!r}")
        found = vertex_metrics(self.jm.plan, self.jm.operator_metrics(), int(raw), self.jm.task_time_metrics())
        if found is None:
            ids = ", ".join(str(v["id"]) for v in self.jm.plan["vertices"])
            return _error(404, f"no vertex {raw} in this job (its vertices: {ids})")
        return found

    async def vertex_metrics(self, request: web.Request) -> web.Response:
        """Flink's ``/jobs/:jobid/vertices/:vertexid/metrics``: without ``get``, the ids there are
        (``[{"id": ...}]``); with ``get=id1,id2``, those that exist with their values."""
        found = self._vertex_metrics(request)
        if isinstance(found, web.Response):
            return found
        wanted = request.query.get("get")
        if wanted is None:
            return web.json_response([{"id": k} for k in sorted(found)])
        names = [n for n in wanted.split(",") if n]
        return web.json_response([{"id": n, "value": found[n]} for n in names if n in found])

    async def subtask_metrics(self, request: web.Request) -> web.Response:
        """Flink's ``/jobs/:jobid/vertices/:vertexid/subtasks/metrics``: the vertex's metrics over its
        subtasks, ``?get=<operator>.<groups>.<name>,...&agg=min,max,sum,avg``."""
        found = self._vertex_metrics(request)
        if isinstance(found, web.Response):
            return found
        aggs = tuple(a for a in request.query.get("agg", ",".join(AGGREGATIONS)).split(",") if a)
        bad = [a for a in aggs if a not in AGGREGATIONS]
        if bad or not aggs:
            return _error(400, f"query parameter 'agg' takes {', '.join(AGGREGATIONS)} (comma-separated), "
                               f"got {request.query.get('agg', '')[:50]!r}")
        wanted = request.query.get("get")
        names = None if wanted is None else [n for n in wanted.split(",") if n]
        return web.json_response(subtask_aggregates(found, names, aggs))

    async def prometheus(self, request: web.Request) -> web.Response:
        if self.metrics is None:
            return _error(404, "metrics are off")
        body, content_type = self.metrics.exposition()
        return web.Response(body=body, headers={"Content-Type": content_type})


_FILES: dict[str, bytes] | None = None


def _dashboard_files() -> dict[str, bytes]:
    """The dashboard's files (package data), read once: name -> bytes."""
    global _FILES
    if _FILES is None:
        folder = resources.files(__package__) / "dashboard"
        _FILES = {f.name: f.read_bytes() for f in folder.iterdir()
                  if f.is_file() and any(f.name.endswith(ext) for ext in DASHBOARD_TYPES)}
    return _FILES


def _flag(request: web.Request, name: str) -> bool | web.Response:
    raw = request.query.get(name)
    if raw is None:
        return False
    if raw.lower() not in ("true", "false", "1", "0"):
        return _error(400, f"query parameter {name!r} must be true or false, got {raw[:50]!r}")
    return raw.lower() in ("true", "1")


async def _json_body(request: web.Request) -> dict | web.Response:
    if not request.can_read_body:
        return {}
    raw = await request.read()
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        return _error(400, f"request body is not valid JSON: {e}")
    except RecursionError:
        return _error(400, "request body is nested too deeply")
    if not isinstance(body, dict):
        return _error(400, f"request body must be a JSON object, got {type(body).__name__}")
    return body


def _ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict, description: str) -> dict:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


_ERRORS = {"401": _json(_ref("Error"), "missing or wrong bearer token")}
_CONSISTENCY = {"name": "consistency", "in": "query", "required": False, "schema": {"enum": ["live", "checkpoint"]},
                "description": "live (default, as Flink's queryable state): the working state, possibly ahead of "
                               "committed output and rolled back by a failure; checkpoint: the latest completed "
                               "checkpoint's (stable, never rolled back)"}
_QUERY_ERRORS = {"400": _json(_ref("Error"), "a key of the wrong type (the body names the expected type)"),
                 "404": _json(_ref("Error"), "no such queryable state (the body lists them)"),
                 "409": _json(_ref("Error"), "two operators declare the name"),
                 "503": _json(_ref("Error"), "the job restarts, deploys or ended (Retry-After; the body has its "
                                             "state)"), **_ERRORS}
_NUM = {"type": "number"}
_NULLABLE_NUM = {"type": ["number", "null"]}
_NULLABLE_STR = {"type": ["string", "null"]}

OPENAPI: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {"title": "streamjob job manager", "version": "1",
             "description": "One running streamjob job: status, checkpoints, savepoints, stop and cancel."},
    "components": {
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        "schemas": {
            "Error": {"type": "object", "required": ["error"], "properties": {"error": {"type": "string"}}},
            "QueryableState": {"type": "object", "required": ["name", "operator", "uid", "kind", "parallelism"],
                               "properties": {"name": {"type": "string"}, "operator": {"type": "string"},
                                              "uid": {"type": "string"}, "parallelism": {"type": "integer"},
                                              "kind": {"enum": ["value", "list", "map", "reducing", "aggregating"]}}},
            "StateLookup": {"type": "object", "required": ["name", "operator", "uid", "kind", "consistency"],
                            "properties": {"name": {"type": "string"}, "operator": {"type": "string"},
                                           "uid": {"type": "string"}, "kind": {"type": "string"},
                                           "consistency": {"enum": ["live", "checkpoint"]}}},
            "StateValue": {
                "type": "object", "required": ["key", "found", "value", "key_group", "subtask", "checkpoint"],
                "properties": {
                    "key": {"description": "as given"}, "found": {"type": "boolean"},
                    "value": {"description": "JSON where the type allows: rows as objects, tuples as arrays, "
                                            "maps as objects, dates as ISO strings, bytes as {base64}, else {repr}"},
                    "key_group": {"type": "integer"}, "subtask": {"type": "integer"},
                    "checkpoint": {"type": ["integer", "null"], "description": "live: the newest checkpoint the "
                                   "subtask knew complete (the value is at or after it); checkpoint: the one read"}}},
            "CheckpointRef": {
                "type": ["object", "null"], "required": ["id", "path", "completed_time"],
                "properties": {"id": {"type": "integer"}, "path": {"type": "string"}, "completed_time": _NUM}},
            "Job": {
                "type": "object",
                "required": ["id", "name", "state", "parallelism", "slots", "executors", "max_parallelism", "restarts",
                             "start_time", "end_time", "latest_checkpoint", "final_savepoint", "error", "vertices", "edges"],
                "properties": {
                    "id": {"type": "string"}, "name": {"type": "string"},
                    "state": {"enum": ["CREATED", "RUNNING", "RESTARTING", "FINISHED", "FAILED", "CANCELED"]},
                    "parallelism": {"type": "integer", "description": "the job's own (operators without one of "
                                    "their own take it)"},
                    "slots": {"type": "integer", "description": "slots the job graph needs (max parallelism of "
                              "any operator, summed over slot sharing groups): the barrier stage's tasks"},
                    "executors": {"type": ["integer", "null"], "description": "executor pods requested for them "
                                  "(Spark on Kubernetes; null elsewhere)"},
                    "max_parallelism": {"type": "integer"},
                    "restarts": {"type": "integer"}, "start_time": _NUM,
                    "end_time": {"type": ["number", "null"], "description": "set once the job ended and what it "
                                 "leaves to resume from is known (a CANCELED state comes first, while it is fenced)"},
                    "queryable_state": {"type": "array", "items": {"type": "string"}, "description": "names of the "
                                        "queryable states registered so far (GET /v1/state/<name>?key=...)"},
                    "resume": {"type": ["string", "null"], "description": "once ended: what stays to resume from "
                               "(checkpoint or savepoint) and the command that resumes it, or why nothing does"},
                    "latest_checkpoint": _ref("CheckpointRef"),
                    "final_savepoint": {"type": ["string", "null"],
                                        "description": "path of the stop-with-savepoint that ended the job"},
                    "error": {"type": ["string", "null"], "description": "why the job FAILED"},
                    "watermarks": {
                        "type": "object", "description": "event time, per operator that has a watermark (by its "
                        "metric name): the lowest over its subtasks and each subtask's (ms since the epoch)",
                        "additionalProperties": _ref("Watermark")},
                    "savepoint_dir": {"type": ["string", "null"], "description": "where a savepoint goes when the "
                                      "request names no target_dir (execution.checkpointing.savepoint-dir)"},
                    "rescale": {"oneOf": [_ref("Rescale"), {"type": "null"}],
                                "description": "the latest rescale in place (PUT /v1/jobs/{id}/parallelism)"},
                    "vertices": {"type": "array", "items": _ref("Vertex"),
                                 "description": "the job graph's tasks (chains of operators), in plan order"},
                    "edges": {"type": "array", "items": _ref("Edge"), "description": "every edge between operators"}}},
            "Watermark": {
                "type": "object", "required": ["low", "subtasks"],
                "properties": {"low": {"type": "integer", "description": "the lowest over the subtasks (Flink's "
                                       "low watermark), ms since the epoch"},
                               "subtasks": {"type": "object", "additionalProperties": {"type": "integer"},
                                            "description": "subtask index -> its current output watermark"}}},
            "Vertex": {
                "type": "object", "required": ["id", "name", "parallelism", "operators", "backpressure", "busy_ratio"],
                "description": "a task: operators chained together (called directly, no channel between them)",
                "properties": {
                    "id": {"type": "integer"}, "name": {"type": "string"}, "parallelism": {"type": "integer"},
                    "max_parallelism": {"type": "integer", "description": "its key groups (its head operator's)"},
                    "first_slot": {"type": "integer", "description": "the slot of its subtask 0 (slots are numbered "
                                   "over the slot sharing groups)"},
                    "operators": {"type": "array", "items": _ref("OperatorStats"), "description": "chain order"},
                    "pending_records": {**_NULLABLE_NUM, "description": "a source's backlog, summed over "
                                        "its subtasks (Flink's pendingRecords: Kafka's lag); null: not reported"},
                    "splits": {"type": ["integer", "null"], "description": "the partitions a source's "
                               "subtasks read (null: not reported)"},
                    "busy_ratio": {**_NUM, "description": "the busiest subtask's busyTimeMsPerSecond / 1000 (what "
                                   "Flink's web UI colours a vertex by)"},
                    "backpressure": {
                        "type": "object", "required": ["level", "ratio", "subtasks"],
                        "properties": {
                            "level": {"enum": ["OK", "LOW", "HIGH"], "description": "as Flink's: ratio up to 0.1, "
                                      "up to 0.5, above"},
                            "ratio": {**_NUM, "description": "the most back-pressured subtask's "
                                      "backPressuredTimeMsPerSecond / 1000: the share of the last seconds it could "
                                      "not go on because downstream had no room or was working off its output"},
                            "subtasks": {"type": "array", "items": {
                                "type": "object", "required": ["subtask", "ratio", "back_pressured", "seconds", "state",
                                                               "busyTimeMsPerSecond", "backPressuredTimeMsPerSecond",
                                                               "idleTimeMsPerSecond"],
                                "properties": {"subtask": {"type": "integer"}, "ratio": _NUM,
                                               "back_pressured": {"type": "boolean", "description": "now"},
                                               "seconds": {**_NUM, "description": "back-pressured in all"},
                                               "state": {"enum": ["busy", "backPressured", "idle"],
                                                         "description": "what its last step ended with"},
                                               "busyTimeMsPerSecond": _NUM, "backPressuredTimeMsPerSecond": _NUM,
                                               "idleTimeMsPerSecond": {**_NUM, "description": "the three sum to "
                                                                       "~1000 (Flink's task time metrics)"}}}}}}}},
            "OperatorStats": {
                "type": "object",
                "required": ["id", "name", "kind", "uid", "records_in", "records_out", "records_in_per_second",
                             "records_out_per_second", "watermark"],
                "properties": {
                    "id": {"type": "string"}, "name": {"type": "string"},
                    "kind": {"type": "string", "description": "source, map, keyed_process, window, sink, ..."},
                    "uid": _NULLABLE_STR,
                    "key": {"type": "string", "description": "how a rescale and a savepoint name it: its uid, else "
                            "op<n>"},
                    "records_in": {"type": "integer", "description": "over all subtasks, this attempt"},
                    "records_out": {"type": "integer"},
                    "records_in_per_second": {**_NUM, "description": "over the last seconds of task reports"},
                    "records_out_per_second": _NUM,
                    "watermark": {"oneOf": [_ref("Watermark"), {"type": "null"}]}}},
            "Edge": {
                "type": "object",
                "required": ["source", "target", "source_vertex", "target_vertex", "partitioner", "key",
                             "side_output", "input", "chained"],
                "properties": {
                    "source": {"type": "string", "description": "operator id"}, "target": {"type": "string"},
                    "source_vertex": {"type": "integer"}, "target_vertex": {"type": "integer"},
                    "partitioner": {"enum": ["FORWARD", "HASH", "REBALANCE", "SHUFFLE", "BROADCAST", "CUSTOM"]},
                    "key": {**_NULLABLE_STR, "description": "the key of a HASH or CUSTOM edge"},
                    "side_output": {**_NULLABLE_STR, "description": "the OutputTag the edge carries, if not the "
                                    "main output"},
                    "input": {"type": "integer", "description": "0, or 1 for a two-input operator's second"},
                    "chained": {"type": "boolean", "description": "within one task (a direct call)"}}},
            "Failure": {
                "type": "object",
                "required": ["time", "subtask", "operator", "error_type", "error", "traceback", "cause", "summary"],
                "properties": {
                    "time": _NUM, "subtask": {"type": ["integer", "null"], "description": "null: the job manager"},
                    "operator": _NULLABLE_STR, "error_type": {"type": "string"}, "error": {"type": "string"},
                    "traceback": {"type": "string", "description": "the user's frames map back to the job file"},
                    "cause": {"enum": ["operator", "task", "restore", "storage", "checkpoint", "lost", "peer"]},
                    "checkpoint": {"type": ["integer", "null"],
                                   "description": "the checkpoint a restore failure could not read"},
                    "summary": {"type": "string"}}},
            "Exceptions": {
                "type": "object", "required": ["total", "truncated", "history"],
                "properties": {
                    "total": {"type": "integer", "description": "failures over the job's life"},
                    "truncated": {"type": "boolean", "description": f"older failures dropped (the newest "
                                  f"{FAILURE_HISTORY} are kept)"},
                    "history": {"type": "array", "description": "newest attempt first", "items": {
                        "type": "object", "required": ["attempt", "time", "root", "concurrent"],
                        "properties": {"attempt": {"type": "integer"}, "time": _NUM,
                                       "root": {**_ref("Failure"), "description": "the root cause of the attempt's end"},
                                       "concurrent": {"type": "array", "items": _ref("Failure")}}}}}},
            "CheckpointStats": {
                "type": "object", "required": ["id", "status", "trigger_time", "duration_ms", "state_size"],
                "properties": {
                    "id": {"type": "integer"}, "status": {"enum": ["IN_PROGRESS", "COMPLETED", "FAILED"]},
                    "trigger_time": _NUM, "duration_ms": _NULLABLE_NUM, "state_size": {"type": "integer"},
                    "checkpointed_size": {"type": "integer"}, "max_sync_ms": _NUM, "max_async_ms": _NUM,
                    "max_alignment_ms": _NUM, "failure": _NULLABLE_STR, "acks": {"type": "integer"},
                    "savepoint": _NULLABLE_STR,
                    "persisted_data": {"type": "integer", "description": "in-flight bytes stored as channel state "
                                       "(unaligned checkpoints), as Flink's persisted_data"},
                    "processed_data": {"type": "integer", "description": "bytes processed while the barriers "
                                       "overtook them, as Flink's processed_data"},
                    "feedback_logged": {"type": "integer", "description": "bytes of fed-back records the loops' "
                                        "heads logged with their snapshots (iterations; part of persisted_data)"},
                    "feedback_records": {"type": "integer", "description": "records in those logs"},
                    "checkpoint_type": {"enum": ["CHECKPOINT", "UNALIGNED_CHECKPOINT", "SAVEPOINT"]},
                    "max_start_delay_ms": {**_NUM, "description": "trigger to the snapshot of the subtask the "
                                           "barrier reached last (Flink's checkpoint start delay)"}}},
            "Checkpoints": {
                "type": "object", "required": ["counts", "latest", "history"],
                "properties": {
                    "enabled": {"type": "boolean"},
                    "counts": {"type": "object", "required": ["completed", "failed", "in_progress"],
                               "properties": {k: {"type": "integer"} for k in ("completed", "failed", "in_progress")}},
                    "latest": {"type": "object", "properties": {
                        "completed": {"oneOf": [_ref("CheckpointStats"), {"type": "null"}]},
                        "failed": {"oneOf": [_ref("CheckpointStats"), {"type": "null"}]},
                        "savepoint": {"oneOf": [_ref("Savepoint"), {"type": "null"}]},
                        "restored": {"type": ["object", "null"]}}},
                    "history": {"type": "array", "items": _ref("CheckpointStats")}}},
            "SavepointRequest": {
                "type": "object", "additionalProperties": False,
                "properties": {"target_dir": {
                    "type": "string", "minLength": 1, "pattern": "^[^\\x00-\\x1f\\x7f]+$",
                    "description": "an absolute path or URL on the job's own storage (the schemes of its checkpoint "
                                   "and savepoint directories, and rest.savepoint.allowed-schemes), without '..'"},
                    "stop": {"type": "boolean"},
                               "drain": {"type": "boolean"},
                               "request_id": {"type": "string", "pattern": f"^{REQUEST_ID.pattern}$",
                                              "description": "client-chosen; a repeated request_id returns the "
                                                             "same savepoint (it becomes the id)"}}},
            "SavepointTriggered": {
                "type": "object", "required": ["id", "path", "status"],
                "properties": {"id": {"type": "string"}, "path": {"type": "string"}, "status": {"type": "string"}}},
            "Savepoint": {
                "type": "object", "required": ["id", "status", "path", "error"],
                "properties": {
                    "id": {"type": "string"}, "status": {"enum": ["QUEUED", "IN_PROGRESS", "COMPLETED", "FAILED"]},
                    "path": {"type": "string"}, "error": _NULLABLE_STR, "stop": {"type": "boolean"},
                    "drain": {"type": "boolean"}, "checkpoint_id": {"type": ["integer", "null"]},
                    "requested_time": _NUM, "completed_time": _NULLABLE_NUM}},
            "Savepoints": {"type": "object", "required": ["savepoints"], "properties": {
                "savepoints": {"type": "array", "items": _ref("Savepoint"),
                               "description": f"newest first, at most {SAVEPOINT_HISTORY}"}}},
            "Accepted": {"type": "object", "required": ["state"], "properties": {"state": {"type": "string"}}},
            "RescaleRequest": {
                "type": "object", "additionalProperties": False, "minProperties": 1,
                "properties": {
                    "parallelism": {"type": "integer", "minimum": 1, "description": "the job's (operators without "
                                    "one of their own take it)"},
                    "operators": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 1},
                                  "description": "operator uid (else op<n>, its place in the program) -> "
                                                 "parallelism; the operators chained to it go with it"}}},
            "Rescale": {
                "type": "object", "required": ["id", "status", "before", "after", "checkpoint_id", "error"],
                "properties": {
                    "id": {"type": "string"},
                    "status": {"enum": ["CHECKPOINTING", "RESTARTING", "COMPLETED", "FAILED"],
                               "description": "waiting for the next completed checkpoint; ending the attempt and "
                                              "starting the new one from it; every new task runs; refused or "
                                              "ended without it"},
                    "parallelism": {"type": ["integer", "null"]}, "operators": {"type": "object"},
                    "before": {"type": "object", "description": "task vertex name -> parallelism"},
                    "after": {"type": "object", "description": "task vertex name -> parallelism"},
                    "checkpoint_id": {"type": ["integer", "null"]}, "error": _NULLABLE_STR,
                    "requested_time": _NUM, "completed_time": _NULLABLE_NUM,
                    "checkpoint_wait_s": _NULLABLE_NUM, "restart_s": {**_NULLABLE_NUM, "description":
                                                                      "checkpoint completed to every new task running"}}},
            "AggregatedMetrics": {"type": "array", "items": {
                "type": "object", "required": ["id"], "additionalProperties": False,
                "properties": {"id": {"type": "string"}, **{a: _NUM for a in AGGREGATIONS}}}},
            "VertexMetrics": {"type": "array", "items": {
                "type": "object", "required": ["id"], "additionalProperties": False,
                "properties": {"id": {"type": "string"}, "value": {"type": "string"}}}},
        },
    },
    "security": [{"bearer": []}],
    "paths": {
        f"{API}/openapi.json": {"get": {"summary": "This document", "security": [],
                                        "responses": {"200": {"description": "OpenAPI 3.1 document"}}}},
        f"{API}/job": {"get": {
            "summary": "The job's status and graph, with each operator's records, rates and watermark and each "
                       "task's back pressure; after the end its final word, served for rest.result-linger or "
                       "until read",
            "parameters": [{"name": "peek", "in": "query", "required": False, "schema": {"type": "boolean"},
                            "description": "true: reading the final word does not end the linger (a watcher, "
                                           "such as the dashboard, leaves it to the client that waits for it)"}],
            "responses": {"200": _json(_ref("Job"), "the job"),
                          "400": _json(_ref("Error"), "malformed query"), **_ERRORS}}},
        f"{API}/checkpoints": {"get": {
            "summary": "Checkpoint counts, latest ones and history (newest first)",
            "parameters": [{"name": "limit", "in": "query", "required": False,
                            "schema": {"type": "integer", "minimum": 1},
                            "description": "at most this many history entries"}],
            "responses": {"200": _json(_ref("Checkpoints"), "checkpoint statistics"),
                          "400": _json(_ref("Error"), "malformed query"), **_ERRORS}}},
        f"{API}/exceptions": {"get": {
            "summary": "Task failures with their tracebacks, per attempt: the root cause and the failures that "
                       "came with it (as Flink's /jobs/:id/exceptions)",
            "responses": {"200": _json(_ref("Exceptions"), "failure history"), **_ERRORS}}},
        f"{API}/savepoints": {"get": {
            "summary": "Savepoints triggered on this job (REST, CLI, operator), with status and path",
            "responses": {"200": _json(_ref("Savepoints"), "savepoints"), **_ERRORS}}, "post": {
            "summary": "Trigger a savepoint (stop: then stop the job; drain: end the input first)",
            "parameters": [{"name": "wait", "in": "query", "required": False, "schema": {"type": "boolean"},
                            "description": "true, with stop: the caller waits for the outcome; the final word "
                                           "is kept until it is read (the completed savepoint or GET "
                                           "/v1/job), for up to 60 s, even where rest.result-linger is 0"}],
            "requestBody": {"required": False, "content": {"application/json": {"schema": _ref("SavepointRequest")}}},
            "responses": {"202": _json(_ref("SavepointTriggered"), "queued; poll its status"),
                          "200": _json(_ref("SavepointTriggered"), "request_id seen before: that savepoint"),
                          "400": _json(_ref("Error"), "malformed request"),
                          "409": _json(_ref("Error"), "the job cannot take a savepoint now, or the request_id "
                                                      "was used with other parameters"), **_ERRORS}}},
        f"{API}/savepoints/{{id}}": {"get": {
            "summary": "A savepoint's status, path and error",
            "parameters": [{"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}],
            "responses": {"200": _json(_ref("Savepoint"), "the savepoint"),
                          "404": _json(_ref("Error"), "no such savepoint"), **_ERRORS}}},
        f"{API}/jobs/{{job_id}}/parallelism": {"put": {
            "summary": "Rescale in place: at the next completed checkpoint (asked for at once) the attempt ends and "
                       "the job restarts from that checkpoint at the new parallelism, without a savepoint or a new "
                       "driver; exactly once",
            "parameters": [{"name": "job_id", "in": "path", "required": True, "schema": {"type": "string"}}],
            "requestBody": {"required": True, "content": {"application/json": {"schema": _ref("RescaleRequest")}}},
            "responses": {"202": _json(_ref("Rescale"), "underway; poll Location"),
                          "200": _json(_ref("Rescale"), "the same rescale is underway, or the job runs at that "
                                                        "parallelism already (COMPLETED, before = after)"),
                          "400": _json(_ref("Error"), "malformed request, an unknown operator, a parallelism above "
                                                      "the max parallelism"),
                          "404": _json(_ref("Error"), "another job's id"),
                          "409": _json(_ref("Error"), "not now: the job is not running, runs without "
                                                      "checkpointing, another rescale is underway, or Spark has too "
                                                      "few slots (local)"), **_ERRORS}}},
        f"{API}/jobs/{{job_id}}/rescales/{{rescale_id}}": {"get": {
            "summary": "A rescale's status",
            "parameters": [{"name": "job_id", "in": "path", "required": True, "schema": {"type": "string"}},
                           {"name": "rescale_id", "in": "path", "required": True, "schema": {"type": "string"}}],
            "responses": {"200": _json(_ref("Rescale"), "the rescale"),
                          "404": _json(_ref("Error"), "no such job or rescale"), **_ERRORS}}},
        f"{API}/stop": {"post": {
            "summary": "Graceful stop: sources end their input, everything drains, the final checkpoint commits",
            "parameters": [{"name": "wait", "in": "query", "required": False, "schema": {"type": "boolean"},
                            "description": "true: the caller waits for the outcome; the final word is kept "
                                           "until it is read (GET /v1/job), for up to 60 s, even where "
                                           "rest.result-linger is 0"}],
            "responses": {"202": _json(_ref("Accepted"), "stopping"), "400": _json(_ref("Error"), "malformed query"),
                          "409": _json(_ref("Error"), "the job is not running"), **_ERRORS}}},
        f"{API}/cancel": {"post": {
            "summary": "Cancel: no final checkpoint; retained checkpoints follow the retention setting",
            "parameters": [{"name": "wait", "in": "query", "required": False, "schema": {"type": "boolean"},
                            "description": "true: the caller waits for the outcome; the final word is kept "
                                           "until it is read (GET /v1/job), for up to 60 s, even where "
                                           "rest.result-linger is 0"}],
            "responses": {"202": _json(_ref("Accepted"), "canceling"), "400": _json(_ref("Error"), "malformed query"),
                          "409": _json(_ref("Error"), "the job already ended"), **_ERRORS}}},
        f"{API}/state": {"get": {
            "summary": "The job's queryable states (StateDescriptor.set_queryable, KeyedStream.as_queryable_state) "
                       "registered so far: a state is registered when its function first creates it",
            "responses": {"200": _json({"type": "object", "required": ["states"], "properties": {"states": {
                "type": "array", "items": _ref("QueryableState")}}}, "the names"), **_ERRORS}}},
        f"{API}/state/{{name}}": {
            "get": {
                "summary": "One key's value in a queryable state, from the subtask that owns its key group",
                "parameters": [
                    {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}},
                    {"name": "key", "in": "query", "required": True, "schema": {"type": "string"},
                     "description": "the key as JSON, converted with the job's key type (key_by(..., key_type=)); "
                                    "a bare word is a string"},
                    _CONSISTENCY],
                "responses": {"200": _json({"allOf": [_ref("StateLookup"), _ref("StateValue")]}, "the value "
                                           "(found: false when the key has none)"), **_QUERY_ERRORS}},
            "post": {
                "summary": "Many keys' values in one request",
                "parameters": [{"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}],
                "requestBody": {"required": True, "content": {"application/json": {"schema": {
                    "type": "object", "required": ["keys"], "properties": {
                        "keys": {"type": "array", "description": "keys as JSON values"},
                        "consistency": {"enum": ["live", "checkpoint"]}}}}}},
                "responses": {"200": _json({"allOf": [_ref("StateLookup"), {"type": "object", "required": ["results"],
                                           "properties": {"results": {"type": "array", "items": _ref("StateValue")}}}]},
                                           "a value per key, in the order given"), **_QUERY_ERRORS}}},
        f"{API}/vertices/{{vertex_id}}/metrics": {"get": {
            "summary": "User and connector metrics of a task vertex, by Flink's metric ids "
                       "(<subtask>.<operator>.<groups>.<name>), as Flink's /jobs/:jobid/vertices/:vertexid/metrics: "
                       "without get, the ids; with get, the values (strings) of those that exist",
            "parameters": [{"name": "vertex_id", "in": "path", "required": True, "schema": {"type": "integer"}},
                           {"name": "get", "in": "query", "required": False, "schema": {"type": "string"},
                            "description": "comma-separated metric ids"}],
            "responses": {"200": _json(_ref("VertexMetrics"), "[{id}] or [{id, value}]"),
                          "400": _json(_ref("Error"), "malformed vertex id"),
                          "404": _json(_ref("Error"), "no such vertex"), **_ERRORS}}},
        f"{API}/vertices/{{vertex_id}}/subtasks/metrics": {"get": {
            "summary": "A task vertex's user and connector metrics aggregated over its subtasks, by their ids "
                       "without the subtask (<operator>.<groups>.<name>), as Flink's "
                       "/jobs/:jobid/vertices/:vertexid/subtasks/metrics",
            "parameters": [{"name": "vertex_id", "in": "path", "required": True, "schema": {"type": "integer"}},
                           {"name": "get", "in": "query", "required": False, "schema": {"type": "string"},
                            "description": "comma-separated metric ids; without it, the ids there are"},
                           {"name": "agg", "in": "query", "required": False, "schema": {"type": "string"},
                            "description": "comma-separated of min, max, sum, avg (default: all)"}],
            "responses": {"200": _json(_ref("AggregatedMetrics"), "[{id}] or [{id, min, max, sum, avg}]"),
                          "400": _json(_ref("Error"), "malformed vertex id or agg"),
                          "404": _json(_ref("Error"), "no such vertex"), **_ERRORS}}},
        "/metrics": {"get": {"summary": "Prometheus metrics", "security": [],
                             "responses": {"200": {"description": "Prometheus text format"}}}},
        "/": {"get": {"summary": "The web dashboard (it reads this API; it asks for the bearer token)",
                      "security": [], "responses": {"200": {"description": "HTML page",
                                                            "content": {"text/html": {}}}}}},
        "/dashboard/{name}": {"get": {
            "summary": "The dashboard's script and style", "security": [],
            "parameters": [{"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}],
            "responses": {"200": {"description": "the file"}, "404": _json(_ref("Error"), "no such file")}}},
    },
}
