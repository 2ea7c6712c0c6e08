"""The job manager: runs in the Spark driver, talks to every task over the control channel.

It owns the job's status, collects metrics and printed lines, records
failures (the root cause first), hosts the checkpoint coordinator (triggers,
acknowledgements, completion notices) and tells tasks what to restore when an
attempt is deployed. Its asyncio loop runs in a thread of its own so the
driver's main thread stays free for Spark and the console. The executor owns
the attempts (restart strategy) and asks the job manager for what it needs.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from ..checkpoint.background import Disposer, SerialWorker
from ..checkpoint.coordinator import (COMPLETED, CheckpointCoordinator, CompletedCheckpoint, MetadataWrite,
                                      SavepointConflict, SavepointRequest, TaskCheckpointStats)
from ..checkpoint.storage import error_text, normalize_url, savepoint_target_problem, url_scheme
from .. import registry
from ..config import Options
from . import control as C
from .collect import CollectBuffer
from .jobmanager_limits import FAILURE_HISTORY, SAVEPOINT_HISTORY, SavepointRefused
from .queryable_state import QueryError, QueryRouter
from .rates import CounterRates
from . import rescale as R
from .tracebacks import map_user_frames
from ..task.iteration_rounds import REPORT as ITERATION_REPORT, IterationRounds
from ..task.task_time import BACK_PRESSURED, BUSY, IDLE, METRICS, backpressure_level

# The JVM's death first: every other failure of that attempt (lost tasks, peers) follows from it.
CAUSE_PRIORITY = ("jvm", "operator", "task", "restore", "storage", "checkpoint", "lost", "peer")
TICK = 0.01  # s between checkpoint coordinator ticks
CONTROL_LINE_LIMIT = 256 << 20  # bytes of one control message


class BindError(RuntimeError):
    """A server of the job manager cannot listen where it was configured to; the message names the key."""


@dataclass
class TaskFailure:
    slot: int
    operator: str | None
    error_type: str
    error: str
    traceback: str
    cause: str  # "operator" (user code), "task" (runtime), "restore" (checkpoint unreadable), "storage"
    # (checkpoint storage unreachable during restore), "checkpoint", "lost" (process gone), "peer",
    # "jvm" (the Spark JVM exited)
    attempt: int = 0
    checkpoint: int | None = None  # the checkpoint a "restore" failure could not read
    at: float = field(default_factory=time.time)
    operator_parallelism: int | None = None  # the failed operator's own (set_parallelism), when the task said
    subtask: int | None = None  # the failed operator's subtask (slot sharing groups: not the slot's index)

    def summary(self, parallelism: int) -> str:
        if self.cause == "jvm":
            return self.error
        if self.operator:
            subtask = self.slot if self.subtask is None else self.subtask
            where = f"operator {self.operator!r} (subtask {subtask + 1}/{self.operator_parallelism or parallelism})"
        elif self.slot >= 0:
            where = f"slot {self.slot + 1}/{parallelism}"
        else:
            where = "the job manager"
        return f"{where} raised {self.error_type}: {self.error}"


@dataclass
class JobStatus:
    state: str = "CREATED"  # CREATED, RUNNING, RESTARTING, FINISHED, FAILED, CANCELED
    started: float = field(default_factory=time.time)
    final: bool = False  # the final state is recorded (``finish``); what it leaves to resume is not yet known
    ended: float | None = None  # set once the job's final word is complete (``settle``): state, what to resume
    error: str | None = None  # why the job FAILED
    final_savepoint: str | None = None  # the path of the stop-with-savepoint that ended it
    resume: str | None = None  # what the job leaves to resume from, and the command (resume.describe)


class JobManager:
    def __init__(self, job_id: str, job_name: str, parallelism: int, host: str = "127.0.0.1",
                 advertise: str | None = None, port: int = 0, on_print: Callable[[list[str]], None] | None = None,
                 coordinator: CheckpointCoordinator | None = None, max_parallelism: int = 128,
                 savepoint_dir: str | None = None, inline_threshold: int = 20 << 10,
                 operator_names: dict[str, str] | None = None, rest: tuple[str, int, str] | None = None,
                 query_proxy_ports: list[int] | None = None,
                 savepoint_schemes: tuple[str, ...] = (), plan: dict[str, Any] | None = None,
                 on_note: Callable[[str], None] | None = None, default_parallelism: int | None = None,
                 executors: int | None = None, keyed_operators: dict | None = None,
                 job_config: dict | None = None):
        self.job_id = job_id
        self.job_name = job_name
        self.parallelism = parallelism  # slots: the barrier stage's tasks (what the job graph needs)
        # What /v1/job reports: the job's own parallelism (operators without set_parallelism; what a
        # StreamJob's spec.parallelism sets) apart from the slots asked for, and the executor pods
        # requested for them on Kubernetes (None elsewhere).
        self.default_parallelism = default_parallelism or parallelism
        self.executors = executors
        self.max_parallelism = max_parallelism
        self.savepoint_dir = savepoint_dir
        # Where a savepoint may be written when a REST client names the directory: the job's own storage.
        own = {url_scheme(u) for u in (savepoint_dir, coordinator.storage.base_url if coordinator else None) if u}
        own.discard("memory")
        self.savepoint_schemes = (own or {"file"}) | {s.strip().lower() for s in savepoint_schemes if s.strip()}
        self.inline_threshold = inline_threshold
        self.cancel_requested = False
        # A graceful stop holds for the rest of the job: tasks that register later (still deploying, or
        # of an attempt after a failover) are told at once, else they would run on and never end.
        self.stop_requested = False
        self.stop_by: str | None = None
        self.reader_waiting = False  # see reader_waits
        self.operator_names = operator_names or {}
        self.plan = plan or {"vertices": [], "edges": []}  # JobGraph.plan(): what the dashboard draws
        self.rates = CounterRates()  # per-second rates of the counters in the tasks' metric reports
        self.restored: tuple[CompletedCheckpoint, float] | None = None  # what the current attempt restored, when
        # slot -> task name -> [busy s, back-pressured s, idle s, state] (task/task_time.py), cumulative
        self.task_time: dict[int, dict[str, list]] = {}
        self.rest_config = rest  # (host, port, bearer token) of the REST API, None: no API
        self.rest: Any = None
        self.host = host  # where the control server (and by default the REST API) listens
        self.advertise = advertise or host  # where tasks and REST clients reach them
        self.port = port
        self.on_print = on_print or (lambda lines: print("\n".join(lines), flush=True))
        self.coordinator = coordinator
        self.status = JobStatus()
        self.attempt = 0
        # Set once the executor gave the current attempt up, before it picks the restore point: from
        # then on no checkpoint of that attempt completes (acks are dropped, no "complete" is sent, so
        # no sink commits), nothing is triggered and no task registers, whatever its processes still do.
        self.fenced = False
        self.restore: CompletedCheckpoint | None = None
        self.metrics: dict[int, dict[str, list[int]]] = {}
        # slot -> [op id, subtask, entries] of its user and connector metrics (api/metrics.py), this attempt
        self.user_metrics: dict[int, list] = {}
        self.windows: dict[int, tuple[float | None, float | None]] = {}  # slot -> (loop start, loop end)
        self.registered: set[int] = set()
        self.addresses: dict[int, list] = {}  # slot -> its data address, this attempt
        self.running: set[int] = set()
        self.end_of_data: set[int] = set()
        self.iteration_rounds = IterationRounds()  # loops' termination rounds, this attempt (task/iteration.py)
        self.finished: set[int] = set()
        self.pids: dict[int, int] = {}
        self.query_ports: dict[int, list] = {}  # slot -> [host, port, ticket]: the task's own lookup port
        self.parent_pids: dict[int, int] = {}  # slot -> the task's parent (PySpark's daemon, which forked it)
        self.failures: list[TaskFailure] = []
        self.all_failures: deque[TaskFailure] = deque(maxlen=FAILURE_HISTORY)  # every attempt's, newest last
        self.failure_count = 0  # all failures ever, also those all_failures no longer holds
        self.restarts = 0
        # Rescaling in place (rescale.py): the executor's planner (requested parallelism -> the job graph
        # to run, or RescaleRefused), the requests by id, the one underway, and its signal to the executor
        # that its checkpoint completed and the attempt is to end.
        self.rescaler: Callable[[int | None, dict[str, int]], Any] | None = None
        self.rescales: dict[str, R.RescaleRequest] = {}
        self.rescale: R.RescaleRequest | None = None
        self.rescale_due = threading.Event()
        self.ending_for_rescale = False  # see end_for_rescale
        self._writers: dict[int, asyncio.StreamWriter] = {}
        self._query_writers: dict[int, asyncio.StreamWriter] = {}  # slot -> its task's lookup connection
        self._lock = threading.RLock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run_loop, name="job-manager", daemon=True)
        self._server: asyncio.base_events.Server | None = None
        # The queryable state proxy (query_proxy.py): the ports to try, where it listens once it does.
        self.query_proxy_ports = query_proxy_ports
        self._proxy: asyncio.base_events.Server | None = None
        self.proxy_port: int | None = None
        self._ticker: asyncio.Task | None = None
        self.address: tuple[str, int] | None = None
        self.failure_event = threading.Event()
        self._result_read = threading.Event()  # a client saw the final result: no need to linger
        self.collected = CollectBuffer()  # records of collect sinks, for execute_and_collect
        self.queries = QueryRouter(keyed_operators or {})  # queryable state: names, routing, answers in flight
        self.job_config = dict(job_config or {})  # to restore key groups of checkpoints for lookups
        self.on_note = on_note or (lambda text: print(text, file=sys.stderr, flush=True))
        # Checkpoint storage I/O never runs on the loop (it serves the control channel, REST and the
        # metrics, which must answer while the store hangs): _metadata is written by one thread, in
        # order, bounded by the checkpoint timeout; deletes are retried by another.
        self._metadata_io: SerialWorker | None = None
        if coordinator is not None:
            coordinator.lock = self._lock
            coordinator.disposer = Disposer(on_note)
            self._metadata_io = SerialWorker("checkpoint-metadata")

    # -- lifecycle ---------------------------------------------------------------
    def start(self) -> tuple[str, int]:
        async def serve() -> None:
            try:
                # One control message is one line; an acknowledgement carries the task's state handles
                # (their key-group index, small state inline), which outgrow asyncio's 64 KiB default.
                self._server = await asyncio.start_server(self._handle, self.host, self.port, limit=CONTROL_LINE_LIMIT)
            except OSError as e:
                raise BindError(f"cannot serve the job manager's control channel on {Options.JOBMANAGER_RPC_PORT}="
                                f"{self.port} ({self.host}): {e}") from None
            self.address = (self.advertise, self._server.sockets[0].getsockname()[1])
            if self.coordinator is not None:
                self._ticker = asyncio.ensure_future(self._tick_forever())
            if self.rest_config is not None:
                from .metrics import JobMetrics
                from .rest import RestServer

                host, port, token = self.rest_config
                self.rest = RestServer(self, host, port, token, JobMetrics(self))
                try:
                    await self.rest.start()
                except OSError as e:
                    raise BindError(f"cannot serve the REST API on {Options.REST_ADDRESS}={host}:{port}: {e}") from None
                if self.query_proxy_ports:
                    await self._serve_query_proxy(host, token)

        self._thread.start()
        asyncio.run_coroutine_threadsafe(serve(), self._loop).result(timeout=10)
        self.status.state = "RUNNING"
        if self.rest is not None:  # `streamjob list`, and the CLI's commands by job id or name
            main = sys.modules.get("__main__")
            registry.register(self.job_id, self.job_name, self.rest.url, self.rest_config[2],
                              job_file=getattr(main, "__file__", None))
        return self.address  # type: ignore[return-value]

    async def _serve_query_proxy(self, host: str, token: str) -> None:
        from . import query_proxy

        errors = []
        for port in self.query_proxy_ports or ():
            try:
                self._proxy = await query_proxy.serve(self, host, port, token)
            except OSError as e:
                errors.append(f"{port}: {e.strerror or e}")
                continue
            self.proxy_port = self._proxy.sockets[0].getsockname()[1]
            return
        raise BindError(f"cannot serve the queryable state proxy on {Options.QUERYABLE_STATE_PROXY_PORTS} "
                        f"({host}): {'; '.join(errors)}")

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    def wait_disconnected(self, timeout: float) -> bool:
        """Wait until no task of any attempt is connected: a canceled task may still be writing a
        snapshot, and checkpoint storage is cleaned up only after it is gone."""
        deadline = time.monotonic() + timeout
        while self._writers and time.monotonic() < deadline:
            time.sleep(0.02)
        return not self._writers

    def finish(self, state: str, error: str | None = None) -> None:
        """The job ended: record its final state, final savepoint and error at once. Clients see the end
        (``end_time``) only with ``settle``, once its checkpoints are cleaned up and what stays is known."""
        cc = self.coordinator
        with self._lock:
            stops = [r for r in (cc.savepoints.values() if cc is not None else ()) if r.stop and r.status == COMPLETED]
            self.status.state, self.status.final, self.status.error = state, True, error
            self.status.final_savepoint = stops[-1].path if stops else None

    def settle(self, resume: str | None) -> None:
        """The job's final word is complete: ``resume`` names what it leaves to resume from (None: nothing
        to say). From now on GET /v1/job has ``end_time`` and a client waiting for the end may read it."""
        with self._lock:
            self.status.resume, self.status.ended = resume, time.time()

    def final_result(self) -> dict[str, Any]:
        """What the termination message says (the same fields as GET /v1/job)."""
        with self._lock:
            return {"id": self.job_id, "name": self.job_name, "state": self.status.state,
                    "final_savepoint": self.status.final_savepoint, "error": self.status.error,
                    "resume": self.status.resume, "end_time": self.status.ended}

    def note_result_read(self) -> None:
        """A client was sent the final result: GET /v1/job after the end, or the completed stop-with-savepoint
        (then it has the path, even if it read it just before the job ended). No need to linger for it."""
        self._result_read.set()

    def result_was_read(self) -> bool:
        return self._result_read.is_set()

    def reader_waits(self) -> None:
        """A client (``streamjob stop``/``cancel``) waits for the final result: linger for it even where
        rest.result-linger is 0, so the process does not exit between two of its polls."""
        self.reader_waiting = True

    def linger(self, seconds: float) -> bool:
        """After the end, keep serving the final result until a client read it, ``seconds`` passed or
        SIGTERM came (Ctrl-C too), so a client polling once a second never misses it. True: it was read."""
        if self.rest is None or seconds <= 0:
            return self.result_was_read()
        deadline = time.monotonic() + seconds
        over = threading.Event()
        with _sigterm_sets(over):
            try:
                while not (self._result_read.is_set() or over.is_set()) and time.monotonic() < deadline:
                    self._result_read.wait(min(0.1, max(0.0, deadline - time.monotonic())))
            except KeyboardInterrupt:
                pass
        return self.result_was_read()

    def shutdown(self) -> None:
        if self.rest is not None:
            if self.status.ended is not None:  # a later `streamjob cancel JOB` says it ended, and how
                main = sys.modules.get("__main__")
                registry.record_end(self.job_id, self.job_name, self.status.state, getattr(main, "__file__", None))
            registry.unregister(self.job_id)

        async def close() -> None:
            if self._ticker is not None:
                self._ticker.cancel()
            if self.rest is not None:
                await self.rest.stop_serving()
            for w in list(self._writers.values()) + list(self._query_writers.values()):
                w.close()
            if self._server is not None:
                self._server.close()
            if self._proxy is not None:
                self._proxy.close()

        if self._loop.is_running():
            try:
                asyncio.run_coroutine_threadsafe(close(), self._loop).result(timeout=5)
            except Exception:
                pass
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
        if self._metadata_io is not None:
            self._metadata_io.close()
            # The executor ran what was queued in coordinator.shutdown; its thread is not needed any more.
            self.coordinator.disposer.close()  # type: ignore[union-attr]

    def begin_attempt(self, attempt: int, restore: CompletedCheckpoint | None) -> None:
        """A new deployment of every task; messages of earlier attempts are ignored from now on."""
        with self._lock:
            self.attempt = attempt
            self.fenced = self.cancel_requested  # a cancel while restarting: the new attempt stays fenced
            self.ending_for_rescale = False
            self.restore = restore
            if restore is not None:
                self.restored = (restore, time.time())
            self.task_time.clear()
            self.registered.clear()
            self.addresses.clear()
            self.running.clear()
            self.end_of_data.clear()
            self.iteration_rounds = IterationRounds()
            if self.coordinator is not None:  # the final checkpoint waits for this attempt's end of input
                self.coordinator.withdraw_final()
            self.finished.clear()
            self.pids.clear()
            self.parent_pids.clear()
            self.query_ports.clear()
            self.metrics.clear()
            self.user_metrics.clear()  # counters restart with the tasks, as Flink's
            self.rates.clear()
            self.windows.clear()
            self.failures = []
            self.failure_event.clear()
            self.status.state = "RUNNING"
        self.collected.begin_attempt(attempt)

    def end_for_rescale(self) -> None:
        """The attempt is ended for the rescale whose checkpoint completed: fenced, and what its tasks report
        as they are ended (their peers gone) is not a failure."""
        with self._lock:
            self.ending_for_rescale = True
        self.fence()
        self._broadcast({"type": C.END_ATTEMPT, "why": f"attempt {self.attempt + 1} is ended for a rescale"})

    def fence(self) -> dict[int, int]:
        """The current attempt is over: see ``fenced``. Returns slot -> process id of its tasks still
        connected (a connected control channel means the process that registered is alive), so the
        executor can end them where Spark cannot (its JVM is gone)."""
        with self._lock:
            self.fenced = True
            self._fail_queries(f"attempt {self.attempt + 1} of the job is over")
            return {slot: pid for slot, pid in self.pids.items() if slot in self._writers}

    def reshape(self, parallelism: int, default_parallelism: int, plan: dict[str, Any],
                operator_names: dict[str, str], keyed_operators: dict, executors: int | None) -> None:
        """The job runs at another parallelism from the next attempt on (a rescale, or a failover that
        carried one out): what the API shows and how lookups are routed."""
        with self._lock:
            self.parallelism = parallelism
            self.default_parallelism = default_parallelism
            self.plan = plan
            self.operator_names = operator_names
            self.executors = executors
            self.queries = QueryRouter(keyed_operators)

    def report(self, failure: TaskFailure) -> None:
        """A failure the driver saw itself (the Spark JVM's exit), recorded as a task's would be."""
        self._fail(failure)

    # -- commands ----------------------------------------------------------------
    def stop(self, by: str | None = None) -> None:
        """Graceful stop: every source ends its input; the job drains and finishes. ``by``: who asked,
        for the job's last words (None: a REST client, ``streamjob stop``)."""
        self.stop_by = self.stop_by or by
        self.stop_requested = True
        self.rescale_failed("the job is being stopped")
        self._broadcast({"type": C.STOP})

    def _broadcast(self, msg: dict) -> None:
        data = C.encode(msg)

        def send() -> None:
            for w in self._writers.values():
                if not w.is_closing():
                    w.write(data)

        if threading.current_thread() is self._thread:
            send()
        else:
            self._loop.call_soon_threadsafe(send)

    def cancel(self) -> None:
        """Cancel: no final checkpoint, and the attempt is fenced before this returns (before the REST API
        answers ``CANCELING``): no checkpoint of it completes after and no sink of it commits, so the latest
        completed checkpoint now is the one the job's end names. The executor then ends the attempt."""
        with self._lock:
            self.cancel_requested = True
            self.fenced = True
            self._fail_queries("the job is being canceled")
        self.rescale_failed("the job is being canceled")

    # -- queryable state ------------------------------------------------------------------
    async def query_state(self, name: str, raw_keys: list, consistency: str = "live") -> dict[str, Any]:
        """On the loop: the values of ``raw_keys`` (decoded JSON) in queryable state ``name``; raises
        QueryError (404 unknown name, 400 a key of the wrong type, 503 while the job is not running)."""
        state = self.queries.find(name)
        keys = self.queries.keys(state, raw_keys)
        with self._lock:
            job_state = self.status.state
            running = job_state == "RUNNING" and not self.fenced and len(self.running) >= self.parallelism
            latest = self.coordinator.latest() if self.coordinator is not None else None
        if consistency == "checkpoint":
            if self.status.ended is not None or job_state in ("FINISHED", "FAILED", "CANCELED"):
                raise QueryError(503, f"the job is {job_state}", state=job_state)
            if latest is None:
                raise QueryError(503, "no checkpoint has completed yet", state=job_state, retry_after=1)
            loop = asyncio.get_running_loop()
            results = await loop.run_in_executor(None, self.queries.from_checkpoint, state, keys, latest,
                                                 self.job_config)
        elif consistency == "live":
            if not running:
                raise QueryError(503, f"the job is {job_state if job_state != 'RUNNING' else 'deploying'}: its "
                                      f"subtasks answer once it runs", state=job_state, retry_after=1)
            results = await self.queries.live(state, keys, self._send_to_slot)
        else:
            raise QueryError(400, f"consistency must be live or checkpoint, got {consistency!r}")
        return {"name": name, "operator": state.op.name, "uid": state.op.uid, "kind": state.kind,
                "consistency": consistency, "results": results}

    def query_route(self, name: str) -> dict[str, Any]:
        """Where the live values of queryable state ``name`` are: each subtask's own lookup port and ticket
        (a client that hashes keys as the job does asks them directly). 503 while the job is not running."""
        state = self.queries.find(name)
        with self._lock:
            running = self.status.state == "RUNNING" and not self.fenced and len(self.running) >= self.parallelism
            slots = range(state.op.first_slot, state.op.first_slot + state.op.parallelism)
            ports = [self.query_ports.get(slot) for slot in slots]
        if not running:
            raise QueryError(503, f"the job is {self.status.state if self.status.state != 'RUNNING' else 'deploying'}",
                             state=self.status.state, retry_after=1)
        return {"name": name, "operator": state.op.name, "uid": state.op.uid, "kind": state.kind,
                "key_type": repr(state.op.key_type), "max_parallelism": state.op.max_parallelism,
                "parallelism": state.op.parallelism, "attempt": self.attempt, "subtasks": ports}

    def queryable_states(self) -> list[dict]:
        with self._lock:
            return self.queries.describe()

    def _send_to_slot(self, slot: int, msg: dict) -> bool:
        """On the loop: one control message to the current attempt's task in ``slot`` (False: none)."""
        w = self._query_writers.get(slot)
        if w is None or w.is_closing() or self.fenced:
            return False
        w.write(C.encode(msg))
        return True

    async def _serve_query_channel(self, slot: int, attempt: int, reader: asyncio.StreamReader,
                                   writer: asyncio.StreamWriter) -> None:
        """A task's lookup connection: lookups go out on it, their answers come back on it."""
        with self._lock:
            if attempt != self.attempt or self.fenced:
                writer.close()
                return
            self._query_writers[slot] = writer
        try:
            while line := await reader.readline():
                try:
                    msg = json.loads(line)
                except ValueError:
                    continue
                if msg.get("type") == C.QUERY_RESULT:
                    self.queries.on_result(msg)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            if self._query_writers.get(slot) is writer:
                del self._query_writers[slot]
            writer.close()

    def _fail_queries(self, why: str) -> None:
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self.queries.fail_pending, why)

    # -- execute_and_collect ---------------------------------------------------------------
    def take_collected(self, sink_id: str, timeout: float) -> Any:
        """The next message of a collect sink for the program (None: none within ``timeout`` s)."""
        item, acks = self.collected.take(sink_id, timeout)
        if acks and self._loop.is_running():
            self._loop.call_soon_threadsafe(self._send_collect_acks, acks)
        return item

    def _send_collect_acks(self, acks: list) -> None:
        """In the event loop: acknowledge collected messages to their subtasks (current attempt)."""
        for slot, sink_id, seq in acks:
            w = self._writers.get(slot)
            if w is not None and not w.is_closing():
                w.write(C.encode({"type": C.COLLECT_ACK, "id": sink_id, "seq": seq}))

    def request_rescale(self, parallelism: int | None, operators: dict[str, int]) -> tuple[R.RescaleRequest, bool]:
        """Rescale in place (rescale.py): returns the request and whether it is new (False: the same one is
        underway, or the job runs at that parallelism already: a completed request with no change). Raises
        RescaleRefused saying why it cannot be done."""
        cc = self.coordinator
        with self._lock:
            underway = self.rescale if self.rescale is not None and self.rescale.status in (
                R.CHECKPOINTING, R.RESTARTING) else None
            if underway is not None:
                if underway.same_target(parallelism, operators):
                    return underway, False
                raise R.RescaleRefused(f"rescale {underway.id} is underway ({underway.status}); ask again once it "
                                       f"is done")
            if self.status.state != "RUNNING" or self.cancel_requested or self.stop_requested or self.fenced:
                state = "stopping" if self.stop_requested else self.status.state
                raise R.RescaleRefused(f"the job is {state}; only a running job is rescaled")
            if cc is None or not cc.settings.enabled:
                raise R.RescaleRefused("the job runs without checkpointing, and a rescale restarts it from a "
                                       "checkpoint: enable execution.checkpointing.interval, or stop it with a "
                                       "savepoint and run it again at the new parallelism")
            if any(r.stop and r.status in ("QUEUED", "IN_PROGRESS") for r in cc.savepoints.values()):
                raise R.RescaleRefused("the job is being stopped with a savepoint")
            if cc.final_completed or cc._final_requested:
                raise R.RescaleRefused("the job is finishing (its input ended): nothing to rescale")
            if self.rescaler is None:
                raise R.RescaleRefused("this job cannot be rescaled in place (it was not built by build_job_graph)")
            graph, new = self.rescaler(parallelism, operators)
            request = R.new_request(graph, new, parallelism, operators)
            if R.unchanged(graph, new):
                request.status, request.completed = R.COMPLETED, time.time()
                return request, False
            self.rescales[request.id] = self.rescale = request
            while len(self.rescales) > SAVEPOINT_HISTORY:
                self.rescales.pop(next(iter(self.rescales)))
            cc.request_checkpoint()
        self.on_note(f"Rescaling {_changes(request)}: at the next completed checkpoint (rescale {request.id})")
        return request, True

    def _rescale_checkpointed(self, checkpoint_id: int) -> None:
        """Under the lock: a checkpoint completed; a rescale waiting for one goes ahead from it."""
        r = self.rescale
        if r is not None and r.status == R.CHECKPOINTING:
            r.status, r.checkpoint_id, r.checkpointed = R.RESTARTING, checkpoint_id, time.time()
            self.rescale_due.set()

    def rescale_failed(self, error: str) -> None:
        """The rescale underway, if any, ends FAILED with ``error``."""
        with self._lock:
            r = self.rescale
            underway = r is not None and r.status in (R.CHECKPOINTING, R.RESTARTING)
            if underway:
                r.status, r.error, r.completed = R.FAILED, error, time.time()
            self.rescale_due.clear()
        if underway:
            self.on_note(f"Rescale {r.id} failed: {error}")

    def trigger_savepoint(self, target_dir: str | None = None, stop: bool = False,
                          drain: bool = False, request_id: str | None = None) -> SavepointRequest:
        """Queue a savepoint (the coordinator triggers it when no checkpoint is in flight).
        Raises SavepointRefused with the reason when it cannot be taken. A ``request_id`` seen before
        returns that request, whatever became of it: a retried trigger never takes a second savepoint."""
        cc = self.coordinator
        if cc is None:
            raise SavepointRefused("this job runs without a checkpoint coordinator, so its tasks take no snapshots")
        if target_dir is not None:
            problem = savepoint_target_problem(target_dir, self.savepoint_schemes)
            if problem is not None:
                raise ValueError(problem)
        target = target_dir or self.savepoint_dir
        if not target:
            raise SavepointRefused("no target directory: pass one, or configure execution.checkpointing.savepoint-dir")
        with self._lock:
            earlier = cc.savepoints.get(request_id) if request_id else None
            if earlier is not None:
                return _same_request(earlier, target, stop, drain)
            if self.status.state != "RUNNING" or self.cancel_requested:
                raise SavepointRefused(f"the job is {self.status.state}; savepoints are taken of running jobs")
            try:
                request = cc.request_savepoint(target, stop, drain, self.inline_threshold, trigger_id=request_id)
                if stop:
                    self.rescale_failed("the job is being stopped with a savepoint")
                return request
            except SavepointConflict as e:
                raise SavepointRefused(str(e)) from None

    # -- what the REST API and the metrics show --------------------------------------
    def job_info(self) -> dict[str, Any]:
        with self._lock:
            latest = self.coordinator.latest() if self.coordinator is not None else None
            return {"id": self.job_id, "name": self.job_name, "state": self.status.state,
                    "parallelism": self.default_parallelism, "slots": self.parallelism,
                    "executors": self.executors, "max_parallelism": self.max_parallelism,
                    "restarts": self.restarts, "start_time": self.status.started, "end_time": self.status.ended,
                    "final_savepoint": self.status.final_savepoint, "error": self.status.error,
                    "resume": self.status.resume, "queryable_state": self.queries.names(),
                    "queryable_state_proxy_port": self.proxy_port,
                    "latest_checkpoint": None if latest is None else {
                        "id": latest.checkpoint_id, "path": latest.url,
                        "completed_time": latest.metadata.completed_ms / 1000.0},
                    # event time: the lowest watermark over an operator's subtasks (Flink's low watermark)
                    "watermarks": {op: _low_watermark(w) for op, w in self._watermarks_unlocked().items()},
                    "savepoint_dir": self.savepoint_dir,
                    "rescale": None if self.rescale is None else self.rescale.summary(),
                    **self._live_plan()}

    def _live_plan(self) -> dict[str, Any]:
        """The job graph with each operator's records, rates and watermark, each task's busy, back-pressured
        and idle time per subtask (its back pressure level: Flink's, from the back-pressured time)."""
        rates = self.rates.per_slot(time.monotonic())
        totals = self.operator_totals()
        watermarks: dict[str, dict[int, int]] = {}
        for slot, per_slot in self.metrics.items():
            for op, values in per_slot.items():
                if len(values) > 2 and values[2] is not None:
                    watermarks.setdefault(op, {})[slot] = values[2]

        def rate(key: tuple) -> float:
            return round(sum(r.get(key, 0.0) for r in rates.values()), 3)

        vertices = []
        for v in self.plan["vertices"]:
            operators = []
            for op in v["operators"]:
                rin, rout = totals.get(op["id"], [0, 0])[:2]
                wm = watermarks.get(op["id"])
                operators.append({**op, "records_in": rin, "records_out": rout,
                                  "records_in_per_second": rate(("in", op["id"])),
                                  "records_out_per_second": rate(("out", op["id"])),
                                  "watermark": _low_watermark(wm) if wm else None})
            subtasks = []
            for slot in sorted(self.task_time):
                if v["name"] not in self.task_time[slot]:
                    continue
                _, seconds, _, state = self.task_time[slot][v["name"]]
                times = task_time_per_second(rates.get(slot, {}), v["name"])
                subtasks.append({"subtask": slot - v.get("first_slot", 0),
                                 "ratio": round(times[METRICS[BACK_PRESSURED]] / 1000.0, 3),
                                 "back_pressured": state == BACK_PRESSURED, "seconds": seconds, "state": state,
                                 **times})
            worst = max((s["ratio"] for s in subtasks), default=0.0)
            busiest = max((s[METRICS[BUSY]] for s in subtasks), default=0.0)
            vertices.append({**v, "operators": operators, "busy_ratio": round(busiest / 1000.0, 3), "backpressure": {
                "level": backpressure_level(worst),
                "ratio": worst, "subtasks": subtasks}, **self._backlog(v)})
        return {"vertices": vertices, "edges": self.plan["edges"]}

    def _backlog(self, vertex: dict) -> dict[str, Any]:
        """A source vertex's backlog as its connector reports it: ``pending_records`` (Flink's pendingRecords,
        summed over subtasks: Kafka's lag) and ``splits`` (the partitions its subtasks read, from their
        per-partition currentOffset gauges): what the operator's autoscaler sizes sources by."""
        ops = {o["id"] for o in vertex["operators"]}
        pending: float | None = None
        splits: set[tuple] = set()
        for per_slot in self.user_metrics.values():
            for op, _subtask, entries in per_slot:
                if op not in ops:
                    continue
                for system, path, _groups, _variables, name, _kind, value in entries:
                    if system and name == "pendingRecords" and isinstance(value, (int, float)):
                        pending = (pending or 0) + value
                    elif system and name == "currentOffset" and "partition" in path:
                        splits.add(tuple(path))
        return {"pending_records": pending, "splits": len(splits) or None}

    def exceptions_info(self) -> dict[str, Any]:
        """Task failures, newest attempt first: each attempt's root cause (as the job's error names it) and
        the failures that came with it (peers losing their connection, ...). Bounded: ``truncated`` says so."""
        with self._lock:
            by_attempt: dict[int, list[TaskFailure]] = {}
            for f in self.all_failures:
                by_attempt.setdefault(f.attempt, []).append(f)
            history = []
            for attempt in sorted(by_attempt, reverse=True):
                failures = by_attempt[attempt]
                root = _root(failures) or failures[0]
                history.append({"attempt": attempt, "time": root.at, "root": self._failure_doc(root),
                                "concurrent": [self._failure_doc(f) for f in failures if f is not root]})
            return {"total": self.failure_count, "truncated": self.failure_count > len(self.all_failures),
                    "history": history}

    def _failure_doc(self, f: TaskFailure) -> dict[str, Any]:
        subtask = f.subtask if f.subtask is not None else f.slot if f.slot >= 0 else None
        return {"time": f.at, "subtask": subtask, "operator": f.operator,
                "error_type": f.error_type, "error": f.error, "traceback": f.traceback, "cause": f.cause,
                "checkpoint": f.checkpoint, "summary": f.summary(self.parallelism)}

    def savepoints_info(self) -> dict[str, Any]:
        cc = self.coordinator
        with self._lock:
            requests = list(cc.savepoints.values()) if cc is not None else []
            return {"savepoints": [r.summary() for r in requests[::-1][:SAVEPOINT_HISTORY]]}

    def restored_info(self) -> dict[str, Any] | None:
        if self.restored is None:
            return None
        checkpoint, at = self.restored
        return {"id": checkpoint.checkpoint_id, "path": checkpoint.url, "kind": checkpoint.metadata.kind,
                "restore_time": at}

    def checkpoints_info(self) -> dict[str, Any]:
        cc = self.coordinator
        assert cc is not None
        with self._lock:
            history = [s.summary() for s in cc.history]
            completed = [h for h in history if h["status"] == "COMPLETED"]
            failed = [h for h in history if h["status"] == "FAILED"]
            savepoint = cc.latest_savepoint()
            return {"enabled": cc.settings.enabled,  # off: only savepoints, as the user asks for them
                    "counts": {"completed": cc.counts["COMPLETED"], "failed": cc.counts["FAILED"],
                               "in_progress": len(cc.pending)},
                    "latest": {"completed": completed[-1] if completed else None,
                               "failed": failed[-1] if failed else None,
                               "savepoint": None if savepoint is None else savepoint.summary(),
                               "restored": self.restored_info()},
                    "history": history[::-1]}

    def metrics_snapshot(self) -> dict[str, Any]:
        cc = self.coordinator
        with self._lock:
            last = None
            if cc is not None:
                done = [s for s in cc.history if s.status == "COMPLETED"]
                if done:
                    s = done[-1]
                    last = {**s.summary(), "completed_time": s.trigger_time + (s.duration_ms or 0.0) / 1000.0}
            rates = self.rates.per_slot(time.monotonic())
            times = {(task, self._subtask_of(task, slot)): (*v, task_time_per_second(rates.get(slot, {}), task))
                     for slot, per in self.task_time.items() for task, v in per.items()}
            return {"state": self.status.state, "uptime": time.time() - self.status.started,
                    "restarts": self.restarts,
                    "checkpoints": {"completed": cc.counts["COMPLETED"] if cc else 0,
                                    "failed": cc.counts["FAILED"] if cc else 0,
                                    "in_progress": len(cc.pending) if cc else 0, "last": last},
                    "checkpoint_interval": (cc.settings.interval_ms / 1000.0
                                            if cc is not None and cc.settings.enabled else None),
                    "savepoints": {status: sum(1 for r in cc.savepoints.values() if r.status == status) if cc else 0
                                   for status in ("COMPLETED", "FAILED")},
                    "restored_time": self.restored[1] if self.restored else None,
                    "records": {self.operator_names.get(k, k): v for k, v in self.operator_totals().items()},
                    "watermarks": self._watermarks_unlocked(),
                    "task_time": times,
                    "user": self._user_metrics_unlocked()}

    def task_time_metrics(self) -> dict[tuple[str, int], dict[str, float]]:
        """(task name, subtask) -> its busy, back-pressured and idle milliseconds per second."""
        with self._lock:  # the rates change as reports come in (the control loop, under the lock)
            rates = self.rates.per_slot(time.monotonic())
            return {(task, self._subtask_of(task, slot)): task_time_per_second(rates.get(slot, {}), task)
                    for slot, per in self.task_time.items() for task in per}

    def _subtask_of(self, task: str, slot: int) -> int:
        """A task's subtask index in ``slot``: slots are numbered over the slot sharing groups, and a task's
        subtasks run from its group's first slot on (the same number only in the first group)."""
        first = next((v.get("first_slot", 0) for v in self.plan["vertices"] if v["name"] == task), 0)
        return slot - first

    def operator_metrics(self) -> list[tuple[str, str, int, list]]:
        """(operator id, its metric name, subtask, entries) of every user and connector metric
        the tasks last reported (``api/metrics.py``'s report entries)."""
        with self._lock:
            return self._user_metrics_unlocked()

    def _user_metrics_unlocked(self) -> list[tuple[str, str, int, list]]:
        return [(op, self.operator_names.get(op, op), int(subtask), entries)
                for slot in sorted(self.user_metrics) for op, subtask, entries in self.user_metrics[slot]]

    def savepoint_status(self, trigger_id: str) -> SavepointRequest | None:
        with self._lock:
            return self.coordinator.savepoints.get(trigger_id) if self.coordinator is not None else None

    # -- checkpoints ---------------------------------------------------------------
    async def _tick_forever(self) -> None:
        while True:
            await asyncio.sleep(TICK)
            try:
                self._tick(time.monotonic())
            except Exception as e:  # noqa: BLE001 - a coordinator bug must fail the job, visibly
                import traceback

                self._fail(TaskFailure(-1, None, type(e).__name__, f"checkpoint coordinator: {e}",
                                       traceback.format_exc(), "checkpoint", self.attempt))

    def _tick(self, now: float) -> None:
        cc = self.coordinator
        with self._lock:
            if cc is None or self.failures or self.fenced or len(self.running) < self.parallelism:
                return
            cc.expire(now)
            self._send_aborts()
            if cc.failures_exceeded():
                self._fail(TaskFailure(-1, None, "CheckpointFailure",
                                       f"{cc.consecutive_failures} checkpoints in a row failed, more than the "
                                       f"{cc.settings.tolerable_failures} tolerated; last: {cc.history[-1].failure}",
                                       "", "checkpoint", self.attempt))
                cc.consecutive_failures = 0
                return
            if self.rescale is not None and self.rescale.status == R.CHECKPOINTING and not cc.pending:
                cc.request_checkpoint()  # the one it asked for failed: ask again
            if cc.should_trigger(now):
                p = cc.trigger(now)
                msg = {"type": C.TRIGGER, "id": p.checkpoint_id, "ts": p.timestamp_ms}
                if p.savepoint is not None:
                    msg["savepoint"] = {"path": p.savepoint.path, "stop": p.savepoint.stop, "drain": p.savepoint.drain}
                self._broadcast(msg)

    def _send_aborts(self) -> None:
        for n in self.coordinator.take_aborted():  # type: ignore[union-attr]
            self._broadcast({"type": C.ABORT, "id": n})

    def _on_ack(self, msg: dict) -> None:
        cc = self.coordinator
        if cc is None:
            return
        stats = TaskCheckpointStats(str(msg.get("name", msg["task"])), int(msg["slot"]), float(msg["sync_ms"]),
                                    float(msg["async_ms"]), float(msg["alignment_ms"]), int(msg["size"]),
                                    int(msg.get("uploaded", msg["size"])), int(msg.get("persisted_data", 0)),
                                    int(msg.get("processed_data", 0)), bool(msg.get("unaligned", False)),
                                    float(msg.get("start_delay_ms", 0.0)), int(msg.get("feedback_logged", 0)),
                                    int(msg.get("feedback_records", 0)))
        with self._lock:
            if int(msg.get("attempt", -1)) != self.attempt or self.fenced:
                cc.discard_acked_files(msg.get("handles") or {})
                return
            now = time.monotonic()
            # The vertex's own subtask index: the slot's only while the job has one slot sharing group.
            write = cc.record_ack(int(msg["id"]), int(msg["task"]), int(msg.get("subtask", msg["slot"])),
                                  msg.get("handles") or {},
                                  stats, now)
            self._send_aborts()
        if write is not None:
            self._write_metadata(write)

    def _write_metadata(self, write: MetadataWrite) -> None:
        """Every task acknowledged: write ``_metadata`` in the metadata thread. The loop goes on; the
        checkpoint timeout (``expire``) fails the checkpoint if the store does not answer in time."""
        cc = self.coordinator
        assert cc is not None and self._metadata_io is not None
        future = asyncio.wrap_future(self._metadata_io.submit(lambda: cc.write_metadata(write)), loop=self._loop)
        future.add_done_callback(lambda f: self._metadata_written(write, f))

    def _metadata_written(self, write: MetadataWrite, future: asyncio.Future) -> None:
        cc = self.coordinator
        assert cc is not None
        e = future.exception()
        error = None if e is None else error_text(e)
        with self._lock:
            now = time.monotonic()
            if self.fenced:  # the attempt is over: nothing of it completes (see ``fenced``)
                cc.fail(write.checkpoint_id, f"attempt {self.attempt + 1} is being restarted", now, count=False)
            done = cc.metadata_written(write, error, now)
            self._send_aborts()
            # An intermediate savepoint is not announced: sinks commit its output with the next checkpoint.
            if done is not None and (done.savepoint is None or done.savepoint.stop):
                self._broadcast({"type": C.COMPLETE, "id": done.checkpoint_id, "final": done.final})
            if done is not None and done.savepoint is None and not done.final:
                self._rescale_checkpointed(done.checkpoint_id)

    def _on_decline(self, msg: dict) -> None:
        cc = self.coordinator
        with self._lock:
            if cc is None or int(msg.get("attempt", -1)) != self.attempt or self.fenced:
                return
            cc.decline(int(msg["id"]), str(msg.get("reason", "declined")), time.monotonic())
            self._send_aborts()

    # -- observation ---------------------------------------------------------------
    def operator_totals(self) -> dict[str, list[int]]:
        with self._lock:
            totals: dict[str, list[int]] = {}
            for per_slot in self.metrics.values():
                for op, values in per_slot.items():
                    t = totals.setdefault(op, [0, 0])
                    t[0] += values[0]
                    t[1] += values[1]
            return totals

    def operator_watermarks(self) -> dict[str, dict[int, int]]:
        """operator name -> subtask -> its current watermark (ms), for operators that have one."""
        with self._lock:
            return self._watermarks_unlocked()

    def _watermarks_unlocked(self) -> dict[str, dict[int, int]]:
        out: dict[str, dict[int, int]] = {}
        for slot, per_slot in self.metrics.items():
            for op, values in per_slot.items():
                if len(values) > 2 and values[2] is not None:
                    out.setdefault(self.operator_names.get(op, op), {})[slot] = values[2]
        return out

    def task_parent_pids(self) -> set[int]:
        """The parent processes of the current attempt's tasks, as they registered (those that died since
        included: their parent may live on)."""
        with self._lock:
            return set(self.parent_pids.values())

    def task_pids(self) -> dict[int, int]:
        """slot -> process id of the task running it (current attempt)."""
        with self._lock:
            return dict(self.pids)

    def all_running(self) -> bool:
        with self._lock:
            return len(self.running) >= self.parallelism and not self.failures

    def stop_with_savepoint_completed(self) -> str | None:
        """The path of this job's completed stop-with-savepoint, if one completed."""
        cc = self.coordinator
        with self._lock:
            stops = [r for r in (cc.savepoints.values() if cc is not None else ()) if r.stop and r.status == COMPLETED]
            return stops[-1].path if stops else None

    def all_finished(self) -> bool:
        """Every task of the current attempt reported "finished" (after its final checkpoint)."""
        with self._lock:
            return len(self.finished) >= self.parallelism

    def wait_finished(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while len(self.finished) < self.parallelism and time.monotonic() < deadline:
            time.sleep(0.01)
        return len(self.finished) >= self.parallelism

    def running_seconds(self) -> float | None:
        """From the first slot starting its loop to the last one finishing (deployment excluded)."""
        with self._lock:
            starts = [w[0] for w in self.windows.values() if w[0]]
            ends = [w[1] for w in self.windows.values() if w[1]]
            if not starts or len(ends) < self.parallelism:
                return None
            return max(ends) - min(starts)

    def root_failure(self) -> TaskFailure | None:
        with self._lock:
            return _root(self.failures)

    def failures_of(self, cause: str) -> list[TaskFailure]:
        """This attempt's failures with ``cause`` (e.g. every subtask that found its checkpoint damaged)."""
        with self._lock:
            return [f for f in self.failures if f.cause == cause]

    def _fail(self, failure: TaskFailure) -> None:
        with self._lock:
            if self.ending_for_rescale and failure.cause != "jvm":
                return  # the attempt's tasks see their peers go as it is ended: no failure of the job
            self.failures.append(failure)
            self.all_failures.append(failure)
            self.failure_count += 1
        self.failure_event.set()

    # -- protocol ----------------------------------------------------------------
    def _deployment(self, slot: int) -> dict:
        restore = None
        if self.restore is not None:
            r = self.restore
            restore = {"id": r.checkpoint_id, "url": r.url, "root": r.root,
                       "parallelism": r.metadata.parallelism, "operators": r.metadata.operators,
                       "channel_state": r.metadata.channel_state()}
        cc = self.coordinator
        storage = cc.storage.base_url if cc is not None else None
        # Without periodic checkpointing the tasks still take the snapshots of savepoints (as Flink's).
        return {"type": C.DEPLOY, "attempt": self.attempt, "job_id": self.job_id, "restore": restore,
                "checkpoint_dir": storage, "savepoints": cc is not None}

    def _refusal(self, slot: int, attempt: int) -> str | None:
        """Why a registering task may not join (None: it may). Called with the lock held."""
        if attempt != self.attempt:
            return f"attempt {attempt + 1} is over; the job runs attempt {self.attempt + 1}"
        if self.fenced:
            return f"attempt {attempt + 1} is being restarted"
        if not 0 <= slot < self.parallelism:
            return f"slot {slot + 1} does not exist (parallelism {self.parallelism})"
        if slot in self.registered:  # two processes must never act as one subtask
            return f"slot {slot + 1} of attempt {attempt + 1} has a task already"
        return None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        slot = None
        attempt = None
        finished = False
        try:
            while True:
                line = await reader.readline()
                if not line:
                    break
                try:
                    msg = json.loads(line)
                except ValueError:
                    continue
                kind = msg.get("type")
                if kind == C.QUERY_CHANNEL:
                    await self._serve_query_channel(int(msg["slot"]), int(msg.get("attempt", -1)), reader, writer)
                    return
                if kind == C.REGISTER:
                    with self._lock:
                        refusal = self._refusal(int(msg["slot"]), int(msg.get("attempt", -1)))
                        if refusal is None:
                            slot, attempt = int(msg["slot"]), self.attempt
                            self._writers[slot] = writer
                            self.registered.add(slot)
                            if "pid" in msg:
                                self.pids[slot] = int(msg["pid"])
                            if "ppid" in msg:
                                self.parent_pids[slot] = int(msg["ppid"])
                    if refusal is not None:
                        writer.write(C.encode({"type": C.REFUSED, "reason": refusal}))
                        await writer.drain()
                        break
                    writer.write(C.encode(self._deployment(slot)))
                    if self.stop_requested:
                        writer.write(C.encode({"type": C.STOP}))
                    continue
                if kind in (C.ACK, C.DECLINE):
                    (self._on_ack if kind == C.ACK else self._on_decline)(msg)
                    continue
                if attempt != self.attempt:
                    continue  # a straggler of an earlier attempt
                if kind == C.METRICS:
                    with self._lock:
                        self.metrics[int(msg["slot"])] = msg["ops"]
                        self.user_metrics[int(msg["slot"])] = msg.get("user") or []
                        self.task_time[int(msg["slot"])] = msg.get("task_time") or {}
                        self.windows[int(msg["slot"])] = (msg.get("started"), msg.get("ended"))
                        self.rates.observe(int(msg["slot"]), time.monotonic(), _counters(msg))
                elif kind == C.ADDRESS:
                    # The tasks' address exchange (instead of Spark's BarrierTaskContext.allGather,
                    # which took ~1 s here: a round trip through the JVM's barrier coordinator).
                    with self._lock:
                        self.addresses[int(msg["slot"])] = msg["address"]
                        complete = len(self.addresses) == self.parallelism
                        peers = [self.addresses[i] for i in range(self.parallelism)] if complete else None
                    if peers is not None:
                        self._broadcast({"type": C.PEERS, "attempt": attempt, "addresses": peers})
                elif kind == C.PRINT:
                    self.on_print(msg["lines"])
                elif kind == C.QUERY_RESULT:
                    self.queries.on_result(msg)
                elif kind == C.QUERYABLE:
                    if msg.get("port"):
                        with self._lock:
                            self.query_ports[int(msg["slot"])] = list(msg["port"])
                    for problem in self.queries.register(msg.get("states") or []):
                        self.on_note(problem)
                elif kind == C.COLLECT:
                    self._send_collect_acks(self.collected.add(msg))
                elif kind == C.COLLECT_COMMIT:
                    self._send_collect_acks(self.collected.commit(msg))
                elif kind == C.RUNNING:
                    with self._lock:
                        self.running.add(int(msg["slot"]))
                        all_running = len(self.running) >= self.parallelism
                        rescaled = self.rescale if all_running and self.rescale is not None \
                            and self.rescale.status == R.RESTARTING else None
                        if rescaled is not None:
                            rescaled.status, rescaled.completed = R.COMPLETED, time.time()
                    if rescaled is not None:
                        self.on_note(f"Rescaled {_changes(rescaled)} from checkpoint {rescaled.checkpoint_id}: every "
                                     f"task runs ({rescaled.completed - rescaled.checkpointed:.1f} s after it)")
                    if all_running:
                        self.collected.attempt_running(attempt or 0)
                elif kind == C.END_OF_DATA:
                    with self._lock:
                        # A fenced attempt's end of input is no news: counted after the executor's
                        # abort_all, it would make the next attempt's first checkpoint its "final" one.
                        if self.fenced:
                            continue
                        self.end_of_data.add(int(msg["slot"]))
                        if len(self.end_of_data) >= self.parallelism and self.coordinator is not None:
                            self.coordinator.request_final()
                elif kind == ITERATION_REPORT:  # a loop head's round report: the next round, or the loop's end
                    for out in self.iteration_rounds.on_report(msg):
                        self._broadcast(out)
                elif kind == C.FAILED:
                    self._fail(TaskFailure(int(msg["slot"]), msg.get("operator"), msg.get("error_type", "Error"),
                                           msg.get("error", ""), map_user_frames(msg.get("traceback", "")),
                                           msg.get("cause", "task"),
                                           attempt or 0, msg.get("checkpoint"),
                                           operator_parallelism=msg.get("parallelism"), subtask=msg.get("subtask")))
                elif kind == C.FINISHED:
                    finished = True
                    self.finished.add(int(msg["slot"]))
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            # Only the connection the slot registered speaks for it: a second one (refused) losing
            # its process is no failure of the slot.
            registered = slot is not None and self._writers.get(slot) is writer
            if registered:
                del self._writers[slot]
            writer.close()
            if registered and not finished and attempt == self.attempt and not self.fenced \
                    and self.status.state == "RUNNING":
                self._fail(TaskFailure(slot, None, "TaskLost",
                                       f"the task process of slot {slot + 1} exited without reporting (killed, or out of memory?)",
                                       "", "lost", attempt or 0))


def _root(failures: list[TaskFailure]) -> TaskFailure | None:
    """The failure that explains the others: user code before the runtime, before a lost peer."""
    for cause in CAUSE_PRIORITY:
        for f in failures:
            if f.cause == cause:
                return f
    return None


def _low_watermark(per_subtask: dict[int, int]) -> dict[str, Any]:
    return {"low": min(per_subtask.values()), "subtasks": {str(k): v for k, v in sorted(per_subtask.items())}}


def _counters(msg: dict) -> dict[tuple, float]:
    """The cumulative counters of a task's metric report, for rates: records in/out per operator,
    busy, back-pressured and idle seconds per task."""
    out: dict[tuple, float] = {}
    for op, values in (msg.get("ops") or {}).items():
        out[("in", op)], out[("out", op)] = values[0], values[1]
    for task, (busy, back_pressured, idle, _state) in (msg.get("task_time") or {}).items():
        out[(BUSY, task)], out[(BACK_PRESSURED, task)], out[(IDLE, task)] = busy, back_pressured, idle
    return out


def task_time_per_second(rates: dict, task: str) -> dict[str, float]:
    """A task's busy, back-pressured and idle milliseconds per second (Flink's names) from one slot's rates."""
    return {METRICS[k]: round(min(1000.0, max(0.0, rates.get((k, task), 0.0) * 1000.0)), 1)
            for k in (BUSY, BACK_PRESSURED, IDLE)}


def _changes(r: R.RescaleRequest) -> str:
    moved = [f"{name} {r.before.get(name, '-')} -> {p}" for name, p in r.after.items() if r.before.get(name) != p]
    return "; ".join(moved) or "nothing"


def _same_request(earlier: SavepointRequest, target: str, stop: bool, drain: bool) -> SavepointRequest:
    """A repeated request id: the same savepoint if the parameters match, else a conflict the client must see."""
    same_target = earlier.path.rsplit("/", 1)[0] == normalize_url(target).rstrip("/")
    if same_target and (earlier.stop, earlier.drain) == (stop, drain):
        return earlier
    raise SavepointRefused(
        f"request_id {earlier.trigger_id!r} was already used for a savepoint with other parameters (into "
        f"{earlier.path}, stop={str(earlier.stop).lower()}, drain={str(earlier.drain).lower()}); "
        f"a new savepoint needs a new request_id")


@contextmanager
def _sigterm_sets(event: threading.Event) -> Iterator[None]:
    """While inside, SIGTERM (the kubelet stopping the pod) sets ``event`` instead of killing the process.
    Only the main thread may install signal handlers; elsewhere (execute_async) nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: event.set())
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
