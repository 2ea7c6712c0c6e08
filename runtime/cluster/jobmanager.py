"""The job manager: runs in the Spark driver, talks to every task over the control channel.

It owns the job's status, collects metrics and printed lines, records the first
failure (the root cause), and tells tasks to stop gracefully. Its asyncio loop
runs in a thread of its own so the driver's main thread stays free for Spark
and the console.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from . import control as C


@dataclass
class TaskFailure:
    slot: int
    operator: str | None
    error_type: str
    error: str
    traceback: str
    cause: str  # "operator" (user code), "task" (runtime), "peer" (lost another slot)

    def summary(self, parallelism: int) -> str:
        where = f"operator {self.operator!r} (subtask {self.slot + 1}/{parallelism})" if self.operator else f"slot {self.slot + 1}/{parallelism}"
        return f"{where} raised {self.error_type}: {self.error}"


@dataclass
class JobStatus:
    state: str = "CREATED"  # CREATED, RUNNING, FINISHED, FAILED, CANCELED
    started: float = field(default_factory=time.time)
    ended: float | None = None


class JobManager:
    def __init__(self, job_id: str, job_name: str, parallelism: int, host: str = "127.0.0.1",
                 on_print: Callable[[list[str]], None] | None = None):
        self.job_id = job_id
        self.job_name = job_name
        self.parallelism = parallelism
        self.host = host
        self.on_print = on_print or (lambda lines: print("\n".join(lines), flush=True))
        self.status = JobStatus()
        self.metrics: dict[int, dict[str, list[int]]] = {}
        self.windows: dict[int, tuple[float | None, float | None]] = {}  # slot -> (loop start, loop end)
        self.registered: set[int] = set()
        self.finished: set[int] = set()
        self.failures: list[TaskFailure] = []
        self._writers: dict[int, asyncio.StreamWriter] = {}
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run_loop, name="job-manager", daemon=True)
        self._server: asyncio.base_events.Server | None = None
        self.address: tuple[str, int] | None = None
        self.failure_event = threading.Event()

    # -- lifecycle ---------------------------------------------------------------
    def start(self) -> tuple[str, int]:
        ready = threading.Event()

        async def serve() -> None:
            self._server = await asyncio.start_server(self._handle, self.host, 0)
            self.address = self._server.sockets[0].getsockname()[:2]
            ready.set()

        self._thread.start()
        asyncio.run_coroutine_threadsafe(serve(), self._loop).result(timeout=10)
        ready.wait(10)
        self.status.state = "RUNNING"
        return self.address  # type: ignore[return-value]

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    def shutdown(self) -> None:
        async def close() -> None:
            for w in list(self._writers.values()):
                w.close()
            if self._server is not None:
                self._server.close()

        if self._loop.is_running():
            try:
                asyncio.run_coroutine_threadsafe(close(), self._loop).result(timeout=5)
            except Exception:
                pass
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)

    # -- commands ----------------------------------------------------------------
    def stop(self) -> None:
        """Graceful stop: every source ends its input; the job drains and finishes."""
        self._broadcast({"type": C.STOP})

    def _broadcast(self, msg: dict) -> None:
        data = C.encode(msg)

        def send() -> None:
            for w in self._writers.values():
                if not w.is_closing():
                    w.write(data)

        self._loop.call_soon_threadsafe(send)

    # -- observation ---------------------------------------------------------------
    def operator_totals(self) -> dict[str, list[int]]:
        with self._lock:
            totals: dict[str, list[int]] = {}
            for per_slot in self.metrics.values():
                for op, (rin, rout) in per_slot.items():
                    t = totals.setdefault(op, [0, 0])
                    t[0] += rin
                    t[1] += rout
            return totals

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
            for cause in ("operator", "task", "peer"):
                for f in self.failures:
                    if f.cause == cause:
                        return f
        return None

    # -- protocol ----------------------------------------------------------------
    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        slot = None
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
                if kind == C.REGISTER:
                    slot = int(msg["slot"])
                    self._writers[slot] = writer
                    self.registered.add(slot)
                elif kind == C.METRICS:
                    with self._lock:
                        self.metrics[int(msg["slot"])] = msg["ops"]
                        self.windows[int(msg["slot"])] = (msg.get("started"), msg.get("ended"))
                elif kind == C.PRINT:
                    self.on_print(msg["lines"])
                elif kind == C.FAILED:
                    with self._lock:
                        self.failures.append(
                            TaskFailure(int(msg["slot"]), msg.get("operator"), msg.get("error_type", "Error"),
                                        msg.get("error", ""), msg.get("traceback", ""), msg.get("cause", "task"))
                        )
                    self.failure_event.set()
                elif kind == C.FINISHED:
                    self.finished.add(int(msg["slot"]))
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            if slot is not None and self._writers.get(slot) is writer:
                del self._writers[slot]
            writer.close()
