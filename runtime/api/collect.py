"""``DataStream.execute_and_collect()``: run the job and iterate over a stream's records in the program.

The stream gets a collect sink (connectors/collect.py); the job runs as with ``execute_async``; the
records come back through the job manager, which runs in this process, and the iterator reads them
from its buffer (cluster/collect.py). The iterator is PyFlink's ``CloseableIterator``: close it (or
leave a ``with`` block, or read to the end) to cancel a job that is still running; one the program
drops, or leaves open when its main returns, is closed then too, so an unbounded job whose results
nobody reads never keeps ``streamjob run`` waiting.
"""

from __future__ import annotations

import base64
import hmac
import pickle
from typing import Any

_POLL = 0.2  # s between looks at the job's state while no record comes
_CANCEL_WAIT = 60.0  # s close() waits for a canceled job to end


class CloseableIterator:
    """The records of ``execute_and_collect()``, in the order the job manager got them."""

    def __init__(self, client: Any, sink: Any, type_info: Any = None):
        self._client = client
        self._type = type_info  # records of a row type come back as Rows of its field names, as PyFlink's
        self._sink_id, self._key = sink.sink_id, sink.key
        self._rows: list = []
        self._next = 0
        self._closed = False
        client._collect_iterator = True

    def __iter__(self) -> "CloseableIterator":
        return self

    def __next__(self) -> Any:
        return self.next()

    def __enter__(self) -> "CloseableIterator":
        return self

    def __exit__(self, exc_type: Any, exc_val: Any, exc_tb: Any) -> None:
        self.close()

    def next(self) -> Any:
        while self._next >= len(self._rows):
            if self._closed:
                raise StopIteration("no more data")
            self._rows, self._next = self._fetch(), 0
        row = self._rows[self._next]
        self._next += 1
        return row

    def _fetch(self) -> list:
        """The next message's records; raises StopIteration at the end of the job's output and the
        job's error if it failed (after every record it collected before)."""
        client = self._client
        while not client._attached.wait(_POLL):
            pass
        jm = client.job_manager
        while True:
            finished = client._finished.is_set()  # before the look: a record that came first is seen
            item = jm.take_collected(self._sink_id, 0.0 if finished else _POLL) if jm is not None else None
            if item is not None:
                return self._open(item)
            if finished:
                self._closed = True
                client._result_read = True
                if client._error is not None:
                    raise client._error
                raise StopIteration("no more data")

    def _open(self, item: tuple) -> list:
        from ..connectors.collect import sign

        data, mac, attempt, slot, seq = item
        payload = base64.b64decode(data)
        expected = sign(self._key, self._sink_id, attempt, slot, seq, payload)
        if not hmac.compare_digest(expected, mac):  # never unpickle what this job's tasks did not send
            raise RuntimeError(f"execute_and_collect: a result message (subtask {slot + 1}, #{seq}) does not "
                               f"carry this job's signature; refused")
        rows = pickle.loads(payload)
        if self._type is not None:
            from .types import to_declared_type

            rows = [to_declared_type(r, self._type) for r in rows]
        return rows

    def close(self) -> None:
        """Cancel the job if it is still running (and wait for it to end); the records not read are dropped."""
        self._rows, self._next = [], 0
        if self._closed:
            return
        self._closed = True
        client = self._client
        client._result_read = True  # the program stopped reading: its job's end is not an error to report
        if not client._finished.is_set():
            client.cancel()
            client._finished.wait(_CANCEL_WAIT)

    def __del__(self) -> None:  # dropped without close(): cancel, do not wait
        try:
            if not self._closed and not self._client._finished.is_set():
                self._closed = True
                self._client._result_read = True
                self._client.cancel()
        except Exception:  # noqa: BLE001 - never raise from a finalizer
            pass


def execute_and_collect(stream: Any, job_execution_name: str | None, limit: int | None) -> Any:
    from ..connectors.collect import CollectSink

    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ValueError(f"execute_and_collect: limit must be a non-negative int, got {limit!r}")
    sink = CollectSink()
    # One subtask, as Flink's collect sink: the records come back in the order it receives them.
    stream.sink_to(sink).name("Collect Sink").set_parallelism(1)
    client = stream._env.execute_async(job_execution_name)
    iterator = CloseableIterator(client, sink, stream._type)
    if limit is None:
        return iterator
    out: list = []
    with iterator:  # leaving it cancels the job if it still runs (an unbounded one always does)
        while len(out) < limit:
            try:
                out.append(next(iterator))
            except StopIteration:
                break
    return out

__all__ = ["CloseableIterator", "execute_and_collect"]
