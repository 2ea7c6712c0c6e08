"""The async wait operator (Flink's AsyncWaitOperator) behind ``AsyncDataStream``.

Each record becomes an ``async_invoke`` coroutine on an asyncio loop of the operator's own (one
thread per operator subtask), so up to ``capacity`` requests wait on the network together while the
task goes on taking input, checkpointing and emitting. The loop thread runs the user's coroutines
(with the timeout and retries around them) and ``open`` / ``close`` (so a client bound to the loop,
an ``aiohttp.ClientSession``, can be made in ``open``): a finished call is handed back through a
queue and a doorbell socket the task's selector watches, and everything else (emitting results,
calling ``timeout``, the element queue, snapshots) happens on the task's thread, like the rest of
the task, so a snapshot sees one consistent queue.

Backpressure: with ``capacity`` entries in its queue the operator is not available, and its task
takes no input until a request completes (records of a batch beyond the capacity wait in the
operator's backlog, in order, and are part of snapshots too).

Exactly-once: a snapshot holds every element not yet emitted, in order: records still in flight
(their input), records completed but held back by order (their results), the watermarks between
them and the backlog. Restore puts them back into the queue before any new input: the records in
flight are sent again, completed ones wait for their turn. Results emitted before the barrier are
not in the snapshot, so nothing is emitted twice or lost; the service may see a request twice.
"""

from __future__ import annotations

import asyncio
import inspect
import selectors
import socket
import threading
from collections import deque
from typing import Any

import numpy as np

from ..api.async_io import NO_RETRY_STRATEGY, AsyncFunctionDescriptor
from ..batch import Batch, to_rows
from ..network.events import MAX_WATERMARK, Watermark
from .async_queue import RecordEntry, WatermarkEntry, create_queue
from .base import StreamOperator

STATE = "_async_wait_operator_state_"  # Flink's name for the same list state
_TIMED_OUT = object()
_HAS_TIMEOUT_SCOPE = hasattr(asyncio, "timeout")  # Python 3.11+
_RECORD_CHARS = 200  # how much of a record an error message shows


def _describe(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _RECORD_CHARS else text[:_RECORD_CHARS] + "..."


class AsyncCallError(RuntimeError):
    """An async call failed for good (its exception, its timeout, or a result that is not a list);
    the message names the record, the operator failure around it names the operator."""


class Doorbell:
    """A socket pair: the loop thread rings, the task's selector wakes up (``Transport.poll`` calls
    ``on_readable``), so a completed call is emitted without waiting for the loop's idle timeout."""

    closed = False

    def __init__(self) -> None:
        self.sock, self._ring = socket.socketpair()
        self.sock.setblocking(False)
        self._ring.setblocking(False)

    def ring(self) -> None:
        try:
            self._ring.send(b"\0")
        except (BlockingIOError, OSError):  # full: it is ringing already; closed: shutting down
            pass

    def on_readable(self) -> None:
        try:
            while self.sock.recv(4096):
                pass
        except (BlockingIOError, OSError):
            pass

    def wait(self, timeout: float) -> None:
        """Block until rung (or ``timeout``): the operator drains its queue at the end of input."""
        with selectors.DefaultSelector() as sel:
            sel.register(self.sock, selectors.EVENT_READ)
            sel.select(timeout)
        self.on_readable()

    def close(self) -> None:
        self.closed = True
        for s in (self.sock, self._ring):
            s.close()


class AsyncWaitOperator(StreamOperator):
    throttles = True  # Task: no input while the queue is full

    def __init__(self, node: Any, ctx: Any):
        super().__init__(node, ctx)
        d: AsyncFunctionDescriptor = node.fn
        self.fn = d.async_function
        self.timeout_ms = d.timeout_ms
        self.strategy = d.async_retry_strategy
        self.queue = create_queue(d.ordered, d.capacity)
        self.backlog: deque[RecordEntry | WatermarkEntry] = deque()  # accepted, not yet in the queue
        self.completed: deque[tuple[RecordEntry, Any]] = deque()  # from the loop thread: (entry, its finished asyncio task)
        self.doorbell = Doorbell()  # the slot registers it with its selector
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._rung = False  # the loop thread rang and the task has not drained ``completed`` since
        self._after_savepoint = False  # the last snapshot was a savepoint and no input came since
        self._restored = False  # restored elements wait for the task's first step

    # lifecycle -------------------------------------------------------------------
    def setup(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run_loop, name=f"async-io {self.name}", daemon=True)
        self._thread.start()
        self._on_loop(self.fn.open, self.ctx)
        for item in self.operator_state.get_list_state(STATE).get():  # restored: before any new input
            if item[0] == "w":
                self.backlog.append(WatermarkEntry(item[1]))
                self.current_watermark = max(self.current_watermark, item[1])
            else:
                _, value, ts, done, result = item
                entry = RecordEntry(value, ts)
                if done:
                    entry.done, entry.result = True, result
                self.backlog.append(entry)
        # Started at the task's first step, not here: with unaligned checkpoints the task resends its
        # recovered output channel state after open, and restored results must not overtake it.
        self._restored = bool(self.backlog)

    def _run_loop(self) -> None:
        loop = self.loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
        finally:
            pending = asyncio.all_tasks(loop)
            for t in pending:
                t.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.close()

    def _stop_loop(self) -> None:
        loop, thread = self.loop, self._thread
        self._thread = None
        if thread is None:
            return
        if not loop.is_closed():
            loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10.0)

    def _on_loop(self, method: Any, *args: Any) -> None:
        """Run ``open`` / ``close`` on the loop, waiting for it: clients bound to a running loop
        (``aiohttp.ClientSession()``) can be made in ``open`` and closed in ``close``, either of
        which may also be ``async def``."""
        async def run() -> None:
            result = method(*args)
            if inspect.isawaitable(result):
                await result

        asyncio.run_coroutine_threadsafe(run(), self.loop).result()

    def close(self) -> None:
        if self._thread is not None:
            self._guard(lambda: self._on_loop(self.fn.close))
        self._stop_loop()

    def dispose(self) -> None:
        self._stop_loop()
        self.doorbell.close()
        super().dispose()

    # input ---------------------------------------------------------------------------
    def is_available(self) -> bool:
        return not self.backlog and self.queue.has_room()

    def process(self, batch: Batch, input_index: int) -> None:
        self._after_savepoint = False
        rows = to_rows(batch)
        ts = self.ts.tolist() if self.ts is not None else [None] * len(rows)
        self.backlog.extend(RecordEntry(r, t) for r, t in zip(rows, ts))
        self._pump()

    def process_watermark(self, watermark: int) -> None:
        """A watermark takes its place in the queue: it leaves after every record before it."""
        if watermark <= self.current_watermark:
            return
        self.current_watermark = watermark
        self.backlog.append(WatermarkEntry(watermark))
        self._guard(self._pump)

    def _pump(self) -> None:
        """Move the backlog into the queue while it has room, starting the calls; emit what may leave."""
        backlog, queue = self.backlog, self.queue
        while True:
            self._emit_ready()  # first: what leaves makes room
            if not (backlog and queue.has_room()):
                return
            start = []
            while backlog and queue.has_room():
                entry = backlog.popleft()
                queue.add(entry)
                if isinstance(entry, RecordEntry) and not entry.done:
                    start.append(entry)
            if start:  # one hand-over per batch, not one per record (each wakes the loop thread)
                self.loop.call_soon_threadsafe(self._start, start)

    def _start(self, entries: list[RecordEntry]) -> None:  # in the loop thread
        loop = self.loop
        for entry in entries:
            task = loop.create_task(self._call(entry.value))
            task.add_done_callback(lambda t, e=entry: self._on_done(e, t))

    def _on_done(self, entry: RecordEntry, task: Any) -> None:  # in the loop thread
        self.completed.append((entry, task))
        if not self._rung:  # one ring per drain, not one syscall per record
            self._rung = True
            self.doorbell.ring()

    # the calls (loop thread) ---------------------------------------------------------
    async def _call(self, value: Any) -> Any:
        """The result list of ``async_invoke(value)`` with retries, or _TIMED_OUT: the timeout covers
        every attempt, as Flink's."""
        if self.timeout_ms <= 0:
            return await self._attempts(value)
        if not _HAS_TIMEOUT_SCOPE:  # Python 3.10: the calls run as a task of their own, cancelled at the timeout
            task = asyncio.ensure_future(self._attempts(value))
            done, _ = await asyncio.wait({task}, timeout=self.timeout_ms / 1000.0)
            if task in done:
                return task.result()
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            return _TIMED_OUT
        try:
            async with asyncio.timeout(self.timeout_ms / 1000.0) as scope:
                return await self._attempts(value)
        except TimeoutError:
            if scope.expired():
                return _TIMED_OUT
            raise  # the function's own TimeoutError

    async def _attempts(self, value: Any) -> Any:
        strategy = self.strategy
        attempt = 1
        while True:
            try:
                result, error = await self.fn.async_invoke(value), None
            except Exception as e:  # noqa: BLE001 - the retry predicate or the task decides
                result, error = None, e
            if strategy is not NO_RETRY_STRATEGY and strategy.can_retry(attempt) and self._retry(result, error):
                await asyncio.sleep(max(0, strategy.get_backoff_time_millis(attempt)) / 1000.0)
                attempt += 1
                continue
            if error is not None:
                raise error
            return result

    def _retry(self, result: Any, error: BaseException | None) -> bool:
        predicate = self.strategy.get_retry_predicate()
        if error is not None:
            test = predicate.exception_predicate()
            return bool(test is not None and test(error))
        test = predicate.result_predicate()
        return bool(test is not None and result is not None and test(result))

    # completions (task thread) -------------------------------------------------------
    def poll_async(self) -> bool:
        """Take in the calls that finished and emit what may leave; True if any finished."""
        if self._restored:
            self._restored = False
            self._guard(self._pump)
            return True
        if not self.completed:
            return False
        self._guard(self._take_completed)
        return True

    def _take_completed(self) -> None:
        # Cleared before draining: a call appended after the last popleft below sees it cleared and rings.
        self._rung = False
        completed, queue = self.completed, self.queue
        while completed:
            entry, future = completed.popleft()
            queue.complete(entry, self._result(entry.value, future))
        self._pump()

    def _result(self, value: Any, future: Any) -> list:
        try:
            result = future.result()  # a finished asyncio task: reading it from this thread is safe
        except asyncio.CancelledError as e:  # only when the loop shuts down under a failing task
            raise AsyncCallError(f"async_invoke of record {_describe(value)} was cancelled") from e
        except Exception as e:
            raise AsyncCallError(f"async_invoke of record {_describe(value)} raised {type(e).__name__}: {e}") from e
        if result is _TIMED_OUT:
            try:
                result = self.fn.timeout(value)
            except Exception as e:
                raise AsyncCallError(f"async_invoke of record {_describe(value)} did not complete within "
                                     f"{self.timeout_ms} ms, and {type(self.fn).__name__}.timeout raised "
                                     f"{type(e).__name__}: {e}") from e
        if result is None:
            raise AsyncCallError(f"The result of AsyncFunction cannot be none (record {_describe(value)})")
        if not isinstance(result, (list, tuple)):
            raise AsyncCallError(f"The result of AsyncFunction should be of list type, got "
                                 f"{type(result).__name__} (record {_describe(value)})")
        return list(result)

    def _emit_ready(self) -> None:
        out: list = []
        out_ts: list = []
        stamped = False  # the records in ``out`` carry timestamps

        def flush() -> None:
            if out:
                self.output.emit(list(out), np.asarray(out_ts, dtype=np.int64) if stamped else None)
                out.clear()
                out_ts.clear()

        for entry in self.queue.pop_ready():
            if isinstance(entry, WatermarkEntry):
                flush()
                self.output.emit_event(Watermark(entry.timestamp))
                continue
            if not entry.result:
                continue
            if (entry.ts is not None) != stamped and out:
                flush()
            stamped = entry.ts is not None
            out.extend(entry.result)
            if stamped:
                out_ts.extend([entry.ts] * len(entry.result))
        flush()

    def on_finish(self) -> None:
        """No more input: every record in flight completes (or times out) and leaves first, at the
        end of input and at a graceful stop alike ("every record the sources emitted was processed").
        Not after a stop-with-savepoint without drain (the savepoint was this operator's last
        snapshot and no input came after it): as in Flink, what is in flight then belongs to the
        savepoint and is sent again when the job resumes from it (its results would go to the sinks
        after the job's final snapshot)."""
        if self._after_savepoint and self.current_watermark != MAX_WATERMARK:
            return
        while self.backlog or len(self.queue):
            if not self.completed:
                self.doorbell.wait(0.1)
            self._take_completed()

    # state ---------------------------------------------------------------------------
    def snapshot_state(self, checkpoint_id: int, full: bool = False) -> Any:
        self._after_savepoint = full  # savepoints are full snapshots; any input after one clears it
        return super().snapshot_state(checkpoint_id, full)

    def prepare_snapshot(self, checkpoint_id: int) -> None:
        items: list = []
        for entry in list(self.queue) + list(self.backlog):
            if isinstance(entry, WatermarkEntry):
                items.append(("w", entry.timestamp))
            else:  # a call finished in the loop thread but not yet taken in counts as in flight
                items.append(("r", entry.value, entry.ts, entry.done, entry.result if entry.done else None))
        self.operator_state.get_list_state(STATE).update(items)


__all__ = ["AsyncCallError", "AsyncWaitOperator", "Doorbell"]
