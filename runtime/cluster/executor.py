"""Driver side of ``env.execute()``: deploy the job on Spark, run the job manager, wait.

The main thread watches the job (progress display, Ctrl-C) while a second
thread blocks in Spark's ``collect`` of the barrier stage.
"""

from __future__ import annotations

import os
import pickle
import sys
import sysconfig
import threading
import time
import uuid
from typing import Any

import cloudpickle

from ..api.environment import JobExecutionResult
from ..config import Configuration
from ..graph.job_graph import JobDefinitionError, JobGraph
from ..progress import ProgressDisplay
from .jobmanager import JobManager


class JobExecutionError(RuntimeError):
    """The job failed; the message names the operator and carries the Python traceback."""

    def __init__(self, message: str, operator: str | None = None, python_traceback: str = ""):
        super().__init__(message)
        self.operator = operator
        self.python_traceback = python_traceback


def _register_job_modules() -> None:
    """Ship modules of the job's own folder by value: workers cannot import them by name."""
    main = sys.modules.get("__main__")
    roots = {os.path.realpath(os.getcwd())}
    main_file = getattr(main, "__file__", None)
    if main_file:
        roots.add(os.path.dirname(os.path.realpath(main_file)))
    installed = {os.path.realpath(p) for p in (sysconfig.get_paths()["purelib"], sysconfig.get_paths()["stdlib"])}
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if not file or name == "__main__" or name.startswith(("streamjob", "pyspark", "_pytest", "pytest")):
            continue
        path = os.path.realpath(file)
        if any(path.startswith(r + os.sep) for r in installed):
            continue
        if any(path.startswith(r + os.sep) for r in roots):
            try:
                cloudpickle.register_pickle_by_value(module)
            except (ValueError, TypeError):
                pass


def serialize_graph(graph: JobGraph) -> bytes:
    _register_job_modules()
    try:
        return cloudpickle.dumps(graph)
    except Exception:
        for op in graph.operators.values():
            try:
                cloudpickle.dumps((op.fn, op.params))
            except Exception as e:
                raise JobDefinitionError(
                    f"operator {op.name!r} cannot be sent to the tasks: its function or parameters do not pickle "
                    f"({type(e).__name__}: {e})"
                ) from e
        raise


def execute_job(graph: JobGraph, config: Configuration, show_progress: bool | None = None) -> JobExecutionResult:
    from .spark import SparkDeployment

    job_id = uuid.uuid4().hex
    payload = serialize_graph(graph)
    pickle.loads(payload)  # a graph that cannot load here will not load in the tasks either
    deployment = SparkDeployment(config.spark_conf(), graph.parallelism, graph.job_name)
    display = ProgressDisplay(graph, live=show_progress, summary=show_progress is not False)
    jm = JobManager(job_id, graph.job_name, graph.parallelism, host=deployment.driver_host(), on_print=display.print_lines)
    jm_address = jm.start()
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = deployment.run_stage(job_id, f"streamjob {graph.job_name}", payload, jm_address)
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            outcome["error"] = e

    started = time.monotonic()
    stage = threading.Thread(target=run, name="spark-stage", daemon=True)
    display.start()
    stage.start()
    interrupts = 0
    cancel_at: float | None = None
    try:
        while stage.is_alive():
            try:
                stage.join(0.25)
                display.update(jm.operator_totals())
                if jm.failure_event.is_set() and cancel_at is None:
                    cancel_at = time.monotonic() + 2.0
                if cancel_at is not None and time.monotonic() >= cancel_at:
                    # Spark aborts a barrier stage when one task fails; this only
                    # covers tasks that hang instead of failing.
                    deployment.cancel(job_id)
                    cancel_at = float("inf")
            except KeyboardInterrupt:
                interrupts += 1
                if interrupts == 1:
                    display.note("Stopping: sources end, in-flight records drain (Ctrl-C again to cancel)")
                    jm.stop()
                else:
                    jm.status.state = "CANCELED"
                    deployment.cancel(job_id)
        seconds = time.monotonic() - started
        error = outcome.get("error")
        failure = jm.root_failure()
        if error is not None and failure is None:
            # The failure report may still be on its way from the task.
            jm.failure_event.wait(2.0)
            failure = jm.root_failure()
        if error is None and failure is None:
            # Final metrics travel before each task's "finished" on its control connection.
            jm.wait_finished(timeout=5.0)
        totals = jm.operator_totals()
        if failure is not None or error is not None:
            state = "CANCELED" if jm.status.state == "CANCELED" else "FAILED"
            jm.status.state = state
            display.close(totals, state, seconds)
            if state == "CANCELED":
                raise JobExecutionError(f"Job {graph.job_name!r} ({job_id}) was canceled")
            if failure is not None:
                raise JobExecutionError(
                    f"Job {graph.job_name!r} ({job_id}) failed: {failure.summary(graph.parallelism)}\n\n{failure.traceback}",
                    operator=failure.operator,
                    python_traceback=failure.traceback,
                )
            if isinstance(error, Exception) and type(error).__name__.endswith("SlotsError"):
                raise error
            raise JobExecutionError(f"Job {graph.job_name!r} ({job_id}) failed on Spark: {_first_line(error)}") from error
        jm.status.state = "FINISHED"
        display.close(totals, "FINISHED", seconds)
        named = {graph.operators[int(k)].name: {"records_in": v[0], "records_out": v[1]} for k, v in totals.items()}
        running = jm.running_seconds()
        return JobExecutionResult(job_id, graph.job_name, int(seconds * 1000), named,
                                  None if running is None else int(running * 1000))
    finally:
        jm.shutdown()


def _first_line(error: BaseException | None) -> str:
    text = str(error or "unknown error").strip()
    for line in text.splitlines():
        if line.strip() and not line.startswith("An error occurred while calling"):
            return line.strip()[:500]
    return text[:500]
