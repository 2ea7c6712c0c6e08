"""Fault injection for tests: SIGKILL this task at a named point of its work, once.

Set the job configuration ``streamjob.test.fault`` to ``<point>:<marker path>``. The first task
that reaches ``<point>`` creates the marker file (atomically: ``O_EXCL``) and kills itself with
SIGKILL, as Spark kills a task: no ``finally``, no goodbye. A marker path containing ``{subtask}``
makes it once per subtask instead. Later attempts find the marker and carry on, so the restored
job gets past the point. Points:

The marker file holds the JSON ``detail`` of the point (for the sink points: the committables).

- ``sink-before-commit``: a checkpoint is complete (its ``_metadata`` is durable) and a two-phase
  commit sink is about to commit that checkpoint's transactions (Flink's hard case);
- ``sink-before-final-commit``: the same, for the final checkpoint taken after the end of input
  (or a stop-with-savepoint): the restored attempt must take one more final checkpoint to commit;
- ``sink-after-commit``: it has just committed them, before anything else happened (a restore then
  commits the same transactions again: commits must be idempotent). Not for a sink that commits in
  the background (FileSink): its commits end in another thread.
- ``feedback-logging``: a loop's head has just logged a fed-back batch for a snapshot whose barrier
  has not come back around the loop yet (task/iteration.py); the detail: records logged per checkpoint.

Nothing happens when the key is unset; jobs never set it.

The environment variable ``STREAMJOB_TEST_FAULT`` (same form) names points before the task knows its
job's configuration (``maybe_kill_early``):

- ``task-start``: the task process has just started, before it registered with the job manager (a
  worker that dies there, as one killed for its memory, is known to the job only through Spark).
"""

from __future__ import annotations

import json
import os
import signal
from typing import Any

FAULT = "streamjob.test.fault"
FAULT_ENV = "STREAMJOB_TEST_FAULT"


def maybe_kill(ctx: Any, point: str, detail: Any = None) -> None:
    """``detail`` (JSON, e.g. the committables at stake) goes into the marker file for the test to read."""
    spec = ctx.get_job_parameter(FAULT)
    if not spec:
        return
    _kill_once(str(spec), point, ctx.get_index_of_this_subtask(), detail)


def maybe_kill_early(point: str, subtask: int) -> None:
    """A point before the job's configuration is known: the fault comes from the environment."""
    spec = os.environ.get(FAULT_ENV)
    if spec:
        _kill_once(spec, point, subtask, None)


def _kill_once(spec: str, point: str, subtask: int, detail: Any) -> None:
    where, _, marker = spec.partition(":")
    if where != point or not marker:
        return
    marker = marker.replace("{subtask}", str(subtask))
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return
    with os.fdopen(fd, "w") as f:
        json.dump(detail, f, default=str)
    os.kill(os.getpid(), signal.SIGKILL)
