"""A sink's commits in a background thread, so the task keeps processing while they run.

Committing a checkpoint's output is I/O (a rename per part file; on S3 a copy and a
delete): done on the task thread it stalls the records at every completed checkpoint.
The committables stay in the sink's pending operator state until their commit has
finished, so a checkpoint taken meanwhile holds them and a restore commits them again
(``Sink.commit`` is idempotent): nothing is lost if the process dies mid-commit.
Commits run one at a time, in checkpoint order.
"""

from __future__ import annotations

import queue
import threading
from typing import Callable


class BackgroundCommitter:
    def __init__(self, name: str):
        self._jobs: queue.SimpleQueue[tuple[int, Callable[[], None]] | None] = queue.SimpleQueue()
        self.done_up_to = 0  # the newest checkpoint id whose commit finished (they finish in order)
        self.error: BaseException | None = None  # the first commit that failed; later ones do not run
        self._submitted = 0
        self._finished = 0
        self._idle = threading.Condition()
        self._thread = threading.Thread(target=self._run, name=f"committer-{name}", daemon=True)
        self._thread.start()

    def submit(self, checkpoint_id: int, commit: Callable[[], None]) -> None:
        with self._idle:
            self._submitted += 1
        self._jobs.put((checkpoint_id, commit))

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            checkpoint_id, commit = job
            try:
                if self.error is None:
                    commit()
                    self.done_up_to = checkpoint_id
            except BaseException as e:  # noqa: BLE001 - handed to the task thread, which fails the task
                self.error = e
            with self._idle:
                self._finished += 1
                self._idle.notify_all()

    def wait(self, timeout: float | None = None) -> bool:
        """Until every submitted commit has run (True), or ``timeout`` seconds passed (False)."""
        with self._idle:
            return self._idle.wait_for(lambda: self._finished == self._submitted, timeout)

    def close(self) -> None:
        self._jobs.put(None)
