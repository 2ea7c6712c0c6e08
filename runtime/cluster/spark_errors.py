"""Spark's stage failures in one line naming the cause: which subtask, what happened to it.

A task that dies before the job manager heard from it (before it registered over the control channel:
a worker killed for its memory as it starts, a native crash) is known only through the exception of
Spark's ``collect``: py4j's "An error occurred while calling ...", then ``SparkException: Job aborted
due to stage failure: ResultStage 1 (collect at .../spark.py:888) ...`` and the JVM's frames. Its first
line said nothing a user could act on, and named an engine file. Pure text work, no pyspark.
"""

from __future__ import annotations

import re

# The barrier stage's task of partition N (the job's slot, subtask N + 1), in Spark's two forms.
_BARRIER_TASK = re.compile(r"barrier task ResultTask\(\d+, (\d+)\)")
_LOST_TASK = re.compile(r"Lost task (\d+)\.\d+ in stage [\d.]+ \(TID \d+\)")
_COLLECT_AT = re.compile(r"\s*\((collect|mapPartitions|runJob) at [^)]*\)")
# The last line of a Python traceback PySpark passes on: "SomeError: what".
_PYTHON_ERROR = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit)): ?(.*)$")
_JVM_FRAME = re.compile(r"^\s*at [\w$.<>]+\(.*\)$|^\s*\.\.\. \d+ more$")

_CRASHED = "Python worker exited unexpectedly (crashed)"


def task_of(text: str) -> int | None:
    """The failed task's partition (its slot) in a Spark stage failure, or None."""
    m = _BARRIER_TASK.search(text) or _LOST_TASK.search(text)
    return int(m.group(1)) if m else None


def cause_of(text: str) -> str:
    """What happened to the task, in words a user can act on."""
    if _CRASHED in text:
        return ("its Python process died without reporting (killed: out of memory, a signal, or a crash in "
                "native code)")
    if "Python worker failed to connect back" in text:
        return "its Python worker did not connect back to Spark's executor in time (an overloaded machine?)"
    python = _python_error(text)
    if python:
        return python
    m = re.search(r"ExecutorLostFailure \(([^)]*)\)(?: Reason: ([^\n]*))?", text)
    if m:
        return f"its executor was lost ({m.group(2) or m.group(1)})".strip()
    m = re.search(r"TaskKilled \(([^)]*)\)", text)
    if m:
        return f"it was killed ({m.group(1)})"
    return _task_reason(text) or _spark_reason(text)


def describe(error: BaseException | str | None, parallelism: int) -> str:
    """One line for the failure of an attempt that only Spark reported: "subtask N/P: what happened"."""
    text = str(error or "").strip()
    if not text:
        return "the Spark stage failed without a reason"
    cause = cause_of(text)
    slot = task_of(text)
    return f"subtask {slot + 1}/{parallelism}: {cause}" if slot is not None else cause


def _python_error(text: str) -> str | None:
    """``PythonException: ... Traceback ...\\nValueError: bad``: the last exception line of the Python
    traceback (before the JVM's frames)."""
    if "Traceback (most recent call last)" not in text:
        return None
    tail = text.split("Traceback (most recent call last)", 1)[1]
    found = None
    for line in tail.splitlines():
        if _JVM_FRAME.match(line):
            break
        m = _PYTHON_ERROR.match(line.strip())
        if m:
            found = f"{m.group(1).rsplit('.', 1)[-1]}: {m.group(2)}".rstrip(": ")
    return found[:500] if found else None


def _task_reason(text: str) -> str | None:
    """The barrier stage's form: "... barrier task ResultTask(0, 1) finished unsuccessfully." and, on the
    next line, the task's own exception: its message."""
    lines = text.splitlines()
    for i, line in enumerate(lines[:-1]):
        if "finished unsuccessfully" in line and not _JVM_FRAME.match(lines[i + 1]):
            reason = re.sub(r"^[\w.$]+(Exception|Error): ", "", lines[i + 1].strip()).rstrip(".")
            return reason[:500] or None
    return None


def _spark_reason(text: str) -> str:
    """The first meaningful line of Spark's message, without py4j's call, a leading ": ", the exception's
    class or the engine's file path."""
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("An error occurred while calling") or _JVM_FRAME.match(line):
            continue
        line = line.lstrip(": ").strip()
        line = re.sub(r"^[\w.$]+(Exception|Error): ", "", line)
        line = line.removeprefix("Job aborted due to stage failure: ")
        line = _COLLECT_AT.sub("", line)
        return (line.rstrip(".") or "the Spark stage failed")[:500]
    return "the Spark stage failed"
