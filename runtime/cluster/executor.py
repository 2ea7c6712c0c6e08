"""Driver side of ``env.execute()``: deploy the job on Spark, run the job manager, wait.

The main thread watches the job (progress display, Ctrl-C) while a second
thread blocks in Spark's ``collect`` of the barrier stage.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
import sysconfig
import threading
import time
import uuid
from typing import Any

import cloudpickle

from ..api.job_result import JobExecutionResult
from ..checkpoint.coordinator import CheckpointCoordinator, CheckpointSettings, CompletedCheckpoint, keeps_checkpoints
from ..checkpoint import channel_rescale, filesystems, recovery
from ..checkpoint.lease import JobLease, LeaseHeld
from ..checkpoint.metadata import CheckpointFormatError
from ..checkpoint.storage import (METADATA, CheckpointStorage, StateLocation, StorageWriteError, cannot_write,
                                  find_checkpoints, load_checkpoint, normalize_url)
from ..config import ConfigError, Configuration, Options
from ..state.backends import backend_type
from ..graph.job_graph import JobDefinitionError, JobGraph
from ..graph.slots import slot_needs
from ..task.factory import operator_is_keyed, task_modules
from ..progress import ProgressDisplay
from ..startup_trace import mark
from . import failover, pod, process_tree, spark_errors, zygote
from . import rescale, resume
from .interrupts import NAMES, Interrupts, exit_code
from .queryable_state import keyed_operators
from .jobmanager import BindError, JobManager, TaskFailure


REST_TOKEN_ENV = "STREAMJOB_REST_TOKEN"  # the REST API's token when rest.auth.token is not set


class JobExecutionError(RuntimeError):
    """The job failed; the message names the operator and carries the Python traceback."""

    def __init__(self, message: str, operator: str | None = None, python_traceback: str = ""):
        super().__init__(message)
        self.operator = operator
        self.python_traceback = python_traceback


class JobCanceledError(JobExecutionError):
    """The job was canceled (as asked: ``streamjob cancel``, a second Ctrl-C): it did not finish, but
    nothing went wrong either."""


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


class _Attempt:
    """One deployment of the job as a Spark barrier stage, run by a thread of its own."""

    def __init__(self, deployment: Any, job_id: str, attempt: int, name: str, payload: bytes, jm_address: Any):
        self.group = f"{job_id}-{attempt}"
        self.error: BaseException | None = None
        self.deployment = deployment
        # The attempt's end, set by its own thread as its very last act. Never Thread.is_alive():
        # after a join() that a signal interrupted, CPython 3.11 reports a running thread as stopped
        # (bpo-45274), and the job would be declared finished while it still drains.
        self.ended = threading.Event()

        def run() -> None:
            try:
                deployment.run_stage(self.group, name, payload, jm_address, attempt)
            except BaseException as e:  # noqa: BLE001 - reported by the main thread
                self.error = e
            finally:
                self.ended.set()

        self.thread = threading.Thread(target=run, name=f"spark-stage-{attempt}", daemon=True)
        self.thread.start()

    def alive(self) -> bool:
        return not self.ended.is_set()

    def cancel(self) -> None:
        self.deployment.cancel(self.group)

    def join(self, timeout: float) -> None:
        self.ended.wait(timeout)


# How long the stage's thread may take to notice that the JVM it waits on is gone (its py4j socket
# closes with the JVM, so it is at once in practice); then the attempt is given up without it.
_JVM_STAGE_GRACE_S = 5.0
# How long the tasks of an attempt ended for a rescale may take to end themselves before Spark cancels them.
_RESCALE_END_GRACE_S = 2.0
# How long the killed tasks of an attempt whose JVM died may take to disconnect before the next one starts.
_ORPHAN_GRACE_S = 5.0
# New JVMs that fail to start this many times in a row, with no attempt running in between, fail the job
# whatever the restart strategy allows (the default, exponential delay, allows restarts without end): a
# JVM killed while it starts is a passing failure (the OOM killer, a kill), one that never starts is the
# environment or the configuration (Java gone, too little memory, a spark.* setting), which retrying at
# up to a minute's delay would hide for good. With the default delays (1 s x1.5) this gives up ~10-20 s
# after the JVM's death.
_JVM_START_FAILURES_IN_A_ROW = 5


def _jvm_failure(how: str, attempt: int) -> TaskFailure:
    return TaskFailure(-1, None, "SparkJVMExited", f"the Spark JVM exited ({how})", "", "jvm", attempt)


def _kill_tasks(pids: dict[int, int], parents: set[int]) -> list[int]:
    """End the task processes of an attempt whose JVM died. Spark would kill them as it cancels the
    stage; with its JVM gone they live on as orphans (parent pid 1) and keep computing, snapshotting
    and writing in-progress sink files. Each pid has a connected control channel, so it is still the
    process that registered (no reused pid). ``parents``: the tasks' parents as they registered. Those
    that are PySpark daemons go too, also when their tasks died first: a daemon notices its JVM's end
    by its closed stdin and exits by itself, but only after its interpreter's teardown (pandas, pyarrow
    loaded: long on a busy machine), and has no JVM left to fork workers for. Returns the daemons killed."""
    daemons = [ppid for ppid in parents if process_tree.is_daemon(ppid)]
    for pid in [*pids.values(), *daemons]:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    return daemons


def _driver_lost_message(how: str, master: str, coordinator: CheckpointCoordinator | None) -> str:
    latest = coordinator.latest() if coordinator is not None else None
    resume = (f"its checkpoints are kept: resume from {latest.url.rsplit('/', 1)[0]} (latest: checkpoint "
              f"{latest.checkpoint_id})" if latest is not None else "no checkpoint had completed yet")
    return (f"the Spark JVM exited ({how}); it cannot be replaced on master {master}: that JVM is the Spark "
            f"driver, and a new one would be a new Spark application without the job's executors. The job "
            f"fails instead of retrying a dead gateway; {resume}")


def _inspect(candidates: list[Any], damaged: dict[int, str], explicit: str | None,
             ) -> tuple[list[recovery.Found], dict[int, CompletedCheckpoint], list[str]]:
    """The I/O half of choosing what to restore: newest first, up to the first that looks readable, each
    candidate's ``_metadata`` read (URLs) and its files checked for presence and size (the tasks check
    the checksums as they read). ``damaged``: checkpoint id -> what a task found wrong with it;
    ``explicit``: the URL the user named. Returns what was found, the loaded checkpoints, notes."""
    found: list[recovery.Found] = []
    loaded: dict[int, CompletedCheckpoint] = {}
    notes: list[str] = []
    for c in candidates:
        if isinstance(c, str):
            try:
                _, meta = load_checkpoint(c)
            except CheckpointFormatError as e:
                found.append(recovery.Found(_id_in_url(c), c, str(e), explicit=c == explicit, kind=_kind_in_url(c)))
                continue
            c = CompletedCheckpoint(meta.checkpoint_id, c, meta)
        problem = damaged.get(c.checkpoint_id)
        if problem is None:
            try:
                problem = StateLocation(c.root).find_damage(c.metadata.file_refs())
            except Exception as e:  # noqa: BLE001 - storage unreachable: not a reason to give the checkpoint up
                notes.append(f"Could not check {c.metadata.kind} {c.checkpoint_id} ({type(e).__name__}: {e}); "
                             f"restoring it anyway")
        loaded[c.checkpoint_id] = c
        found.append(recovery.Found(c.checkpoint_id, c.url, problem, explicit=c.url == explicit, kind=c.metadata.kind))
        if problem is None:
            break
    return found, loaded, notes


def _id_in_url(url: str) -> int:
    name = url.rstrip("/").rsplit("/", 1)[-1]
    return int(name[4:]) if name.startswith("chk-") and name[4:].isdigit() else -1


def _kind_in_url(url: str) -> str:
    return "savepoint" if url.rstrip("/").rsplit("/", 1)[-1].startswith("savepoint-") else "checkpoint"


def _initial_restore(path: str, allow_older: bool, note: Any) -> tuple[CompletedCheckpoint, str | None, list[str]]:
    """What ``--from-checkpoint`` / ``--from-savepoint`` (``execution.state-recovery.path``) restores:
    the checkpoint or savepoint it names, or a job's checkpoint directory's newest one (``recovery``
    decides when that cannot be read). Returns it, the URL the user named explicitly (None: a job
    directory), and the older checkpoints of that directory not looked at yet, newest first (a later
    restore failure may fall back to them, when allowed)."""
    urls = find_checkpoints(path)
    named = normalize_url(path).rstrip("/")
    if named.endswith("/" + METADATA):
        named = named[: -len(METADATA) - 1]
    explicit = urls[0] if len(urls) == 1 and urls[0].rstrip("/") == named else None
    found, loaded, notes = _inspect(urls, {}, explicit)
    choice = recovery.choose(found, allow_older)
    for text in notes + list(choice.notes):
        note(text)
    if choice.refusal:
        raise CheckpointFormatError(choice.refusal)
    if choice.restore is None:
        raise CheckpointFormatError(f"{path}: no checkpoint to restore")
    older = urls[urls.index(choice.restore.url) + 1:] if explicit is None else []
    return loaded[choice.restore.checkpoint_id], explicit, older


def check_restorable(checkpoint: CompletedCheckpoint, graph: JobGraph, allow_non_restored: bool) -> list[str]:
    """Refuse, before anything is deployed, a restore that cannot map the snapshot's state onto this
    job; returns notes about state that is dropped (``allow_non_restored``)."""
    meta = checkpoint.metadata
    what = f"{meta.kind} {checkpoint.url}"
    nodes = {op.state_key: op for op in graph.operators.values()}
    for key in meta.operators:
        node = nodes.get(key)
        if node is None or not any(meta.operators[key].get("subtasks") or []):
            continue
        old_max = meta.operator_max_parallelism(key)
        if old_max != node.max_parallelism:
            own = node.max_parallelism != graph.max_parallelism or old_max != meta.max_parallelism
            fix = (f".set_max_parallelism({old_max}) on operator {node.name!r}" if own else
                   f"env.set_max_parallelism({old_max}) (or --conf pipeline.max-parallelism={old_max})")
            raise JobDefinitionError(
                f"{what} was taken with max parallelism {old_max}, this job has {node.max_parallelism} (operator "
                f"{node.name!r}): keyed state is sharded into max-parallelism key groups, which cannot change; "
                f"set {fix}")
    if channel_rescale.rescaled(meta.parallelism, meta.operators, meta.channel_state(), graph):
        # In-flight data of an unaligned checkpoint goes to the new subtasks by the new partitioning
        # (checkpoint/channel_rescale.py); refused only where there is no channel to put it on.
        indexed = channel_rescale.index_edges(meta.channel_state())
        if indexed is None:
            raise JobDefinitionError(
                f"{what} is an unaligned checkpoint holding in-flight data (channel state) written by an earlier "
                f"streamjob, which does not name its edges; it can only be restored at parallelism "
                f"{meta.parallelism}, this job has {graph.parallelism}. To rescale, restore it at parallelism "
                f"{meta.parallelism} and take a savepoint (savepoints are always aligned: streamjob savepoint "
                f"--stop --target-dir DIR), or let it take a new checkpoint, then start from that at the new "
                f"parallelism")
        for old in indexed[1].values():
            reason = channel_rescale.refusal(old, graph)
            if reason is not None:
                raise JobDefinitionError(f"{what} is an unaligned checkpoint that cannot be restored into this job "
                                         f"at its parallelism: {reason}")
    by_key = {op.state_key: op for op in graph.operators.values()}
    holding = {k: op for k, op in meta.operators.items() if any(op.get("subtasks") or [])}
    unmatched = [k for k in holding if k not in by_key]
    # Same uid, other shape: keyed state for an operator that is not keyed here (a snapshot of another
    # job whose operators line up by place in the program). The tasks would fail on it one by one.
    misfit = [k for k, op in holding.items() if k in by_key and _holds_keyed(op) and not operator_is_keyed(by_key[k])]
    if (unmatched or misfit) and not allow_non_restored:
        problems = [f"no operator of this job has uid {k!r}" for k in unmatched]
        problems += [f"uid {k!r} holds keyed state, but this job's operator {by_key[k].name!r} with that uid is not "
                     f"keyed" for k in misfit]
        listed = ", ".join(f"uid {k!r} ({op.get('name', '?')}{', keyed' if _holds_keyed(op) else ''})"
                           for k, op in list(holding.items())[:12])
        more = f" and {len(holding) - 12} more" if len(holding) > 12 else ""
        raise JobDefinitionError(
            f"{what} was taken of job {meta.job_name!r} ({meta.job_id}), with state of operators {listed}{more}; "
            f"job {graph.job_name!r} cannot take it: {'; '.join(problems)}. Operators are matched by uid: give each "
            f"stateful operator the same .uid(\"...\") in both jobs (without one, its place in the program is "
            f"used), or start without the state this job cannot take with --allow-non-restored-state "
            f"({Options.ALLOW_NON_RESTORED_STATE}=true)")
    notes = [f"Not restoring state of uid {k!r} ({holding[k].get('name', '?')}): no operator of this job has that uid"
             for k in unmatched]
    for k in misfit:
        notes.append(f"Not restoring state of uid {k!r} ({holding[k].get('name', '?')}): it is keyed state, and "
                     f"this job's operator {by_key[k].name!r} is not keyed")
        # Dropped here, so no task tries to read it.
        meta.operators = {key: op for key, op in meta.operators.items() if key != k}
    return notes


def _holds_keyed(op: dict) -> bool:
    """The snapshot of one operator holds keyed state (heap/columnar key groups or a RocksDB snapshot)."""
    for h in op.get("subtasks") or []:
        index = (h or {}).get("index") or {}
        if index.get("keyed") or index.get("rocksdb"):
            return True
    return False


def _claimable(job_root: str, initial: CompletedCheckpoint, note: Any) -> list[CompletedCheckpoint]:
    """Completed checkpoints of a claimed job directory up to the restored one, oldest first."""
    found = []
    for url in find_checkpoints(job_root):
        try:
            _, meta = load_checkpoint(url)
        except CheckpointFormatError as e:
            note(f"Not claiming {url}: {e}")
            continue
        if meta.checkpoint_id <= initial.checkpoint_id:
            found.append(CompletedCheckpoint(meta.checkpoint_id, url, meta))
    return sorted(found, key=lambda c: c.checkpoint_id)


def execute_job(graph: JobGraph, config: Configuration, show_progress: bool | None = None,
                job_id: str | None = None, client: Any = None, summary: bool | None = None) -> JobExecutionResult:
    """show_progress: the live table (None: on a terminal); summary: the final tables (None: unless
    show_progress is False)."""
    mark("execute")
    job_id = job_id or uuid.uuid4().hex
    deployed: list[JobManager] = []  # once the job manager runs, it leaves the final result itself
    summary = show_progress is not False if summary is None else summary
    try:
        return _execute_job(graph, config, show_progress, job_id, client, deployed, summary)
    except BaseException as e:
        if not deployed:  # the job could not even be deployed: the operator still learns why
            _leave_termination_message(config, {"id": job_id, "name": graph.job_name, "state": "FAILED",
                                                "final_savepoint": None, "error": _error_text(e),
                                                "end_time": time.time()}, _note)
        raise


def _execute_job(graph: JobGraph, config: Configuration, show_progress: bool | None, job_id: str, client: Any,
                 deployed: list[JobManager], summary: bool = True) -> JobExecutionResult:
    from .spark import JVMStartError, StartAborted, start_deployment

    filesystems.configure(config)
    payload = serialize_graph(graph)
    pickle.loads(payload)  # a graph that cannot load here will not load in the tasks either
    modules = task_modules(graph.operators.values())
    zygote.also_preload(modules)  # loaded by the zygote while the JVM launches
    try:
        config.validate()
        backend = backend_type(config)
        if config.checkpointing_enabled():
            config.unaligned_checkpoints()  # refuses unaligned checkpoints without EXACTLY_ONCE
    except ConfigError as e:
        raise JobDefinitionError(str(e)) from None
    settings = CheckpointSettings.from_configuration(config)
    addresses = pod.driver_addresses(config, os.environ)
    rest_config = _rest_config(config, addresses, os.environ)
    if rest_config is not None:
        # The REST API's modules (aiohttp, prometheus_client: ~0.3 s) load while this thread waits for
        # the JVM and the SparkContext, not after them when the job manager starts.
        threading.Thread(target=_import_rest, name="streamjob-import-rest", daemon=True).start()
    if backend == "rocksdb" and settings.enabled and config.get_bool(Options.INCREMENTAL_CHECKPOINTS) \
            and normalize_url(config.get_string(Options.CHECKPOINTING_DIR)).startswith("memory://"):
        raise JobDefinitionError(
            f"incremental RocksDB checkpoints need checkpoint storage on a filesystem or object store: set "
            f"{Options.CHECKPOINTING_DIR} (e.g. file:///tmp/checkpoints or s3://bucket/checkpoints); "
            f"memory:// keeps state in the job manager and cannot share files between checkpoints")
    strategy = failover.from_configuration(config)
    display = ProgressDisplay(graph, live=show_progress, summary=summary)
    recovery_path = config.get_string(Options.RECOVERY_PATH)
    allow_older = config.get_bool(Options.ALLOW_OLDER_CHECKPOINT)
    initial, explicit, older = _initial_restore(recovery_path, allow_older, display.note) if recovery_path \
        else (None, None, [])
    claim = str(config.get(Options.CLAIM_MODE)).strip().upper()
    if claim not in ("CLAIM", "NO_CLAIM"):
        raise JobDefinitionError(f"configuration {Options.CLAIM_MODE}: expected CLAIM or NO_CLAIM, got {claim!r}")
    checkpoint_dir = config.get_string(Options.CHECKPOINTING_DIR)
    adopted: list[CompletedCheckpoint] = []
    if initial is not None:
        for note in check_restorable(initial, graph, config.get_bool(Options.ALLOW_NON_RESTORED_STATE)):
            display.note(note)
        rescaled_note = (f", rescaling from parallelism {initial.metadata.parallelism} to {graph.parallelism}"
                         if initial.metadata.parallelism != graph.parallelism else "")
        other = (f" (taken of job {initial.metadata.job_name!r})"
                 if initial.metadata.job_name and initial.metadata.job_name != graph.job_name else "")
        display.note(f"Restoring from {initial.metadata.kind} {initial.checkpoint_id} at {initial.url}{other}{rescaled_note}")
        if claim == "CLAIM" and initial.metadata.kind == "savepoint":
            display.note("Claim mode applies to retained checkpoints; the savepoint stays the user's (NO_CLAIM)")
        elif claim == "CLAIM":
            # The job takes over the restored job's checkpoint directory (as after a job manager
            # restart): same job id, its retained checkpoints count for retention, and the
            # shared-state registry is rebuilt from their _metadata.
            job_root = initial.url.rsplit("/", 1)[0]
            job_id = initial.metadata.job_id
            checkpoint_dir = job_root.rsplit("/", 1)[0]
            adopted = _claimable(job_root, initial, display.note)
    spark_conf = pod.spark_conf(config, os.environ, graph.parallelism, addresses)
    storage = CheckpointStorage(checkpoint_dir, job_id,
                                config.get_int(Options.INLINE_STATE_THRESHOLD),
                                config.get_int(Options.MEMORY_STORAGE_MAX_STATE))
    lease: JobLease | None = None
    if settings.enabled and not storage.in_memory:
        # One live job per checkpoint directory (see checkpoint/lease.py): refused before anything is written.
        lease = JobLease(storage.fs, storage.root, job_id)
        try:
            lease.acquire(display.note)
        except LeaseHeld as e:
            raise JobDefinitionError(f"checkpoint storage {storage.url}: {e}") from None
        except Exception as e:  # noqa: BLE001 - the store itself: unreachable, no credentials, not a directory
            raise JobDefinitionError(str(cannot_write("checkpoint storage", storage.base_url, e))) from None
    if settings.enabled:
        try:
            storage.initialize()
        except StorageWriteError as e:  # names the storage and its URL: one line, no fsspec frames
            if lease is not None:
                lease.release()
            raise JobDefinitionError(str(e)) from None
    # Without periodic checkpointing the coordinator still exists, to take the savepoints a user asks
    # for (as Flink's does): it triggers nothing on its own, and nothing is written to checkpoint storage.
    coordinator = CheckpointCoordinator(
        settings, storage, job_id=job_id, job_name=graph.job_name, parallelism=graph.parallelism,
        max_parallelism=graph.max_parallelism,
        operators={n.state_key: n.name for n in graph.operators.values()},
        first_id=initial.checkpoint_id + 1 if initial else 1, **_checkpoint_shape(graph))
    coordinator.adopt(adopted)
    display.coordinator = coordinator if settings.enabled else None
    jm = JobManager(job_id, graph.job_name, graph.parallelism, host=addresses.bind, advertise=addresses.advertise,
                    port=config.get_int(Options.JOBMANAGER_RPC_PORT), on_print=display.print_lines,
                    coordinator=coordinator, max_parallelism=graph.max_parallelism,
                    savepoint_dir=config.get_string(Options.SAVEPOINT_DIR) or None,
                    inline_threshold=config.get_int(Options.INLINE_STATE_THRESHOLD),
                    operator_names=_metric_names(graph), rest=rest_config, plan=graph.plan(),
                    query_proxy_ports=_proxy_ports(config) if rest_config is not None else None,
                    savepoint_schemes=tuple(config.get_string(Options.REST_SAVEPOINT_SCHEMES).split(",")),
                    on_note=display.note, default_parallelism=graph.default_parallelism,
                    executors=pod.requested_executors(spark_conf), keyed_operators=keyed_operators(graph),
                    job_config=graph.config)
    unaligned = settings.enabled and config.unaligned_checkpoints()[0]
    running: list[Any] = [graph, None]  # the job graph it runs (a rescale replaces it) and its deployment

    def rescaler(parallelism: int | None, operators: dict[str, int]) -> tuple[JobGraph, JobGraph]:
        current, dep = running
        slots = dep.slot_limit() if dep is not None else None
        return current, rescale.plan(current, parallelism, operators, slots=slots, unaligned=unaligned)

    jm.rescaler = rescaler
    if client is not None:
        client._attach(jm)
    if lease is not None:
        lease.start(lambda why: jm.fence())  # another job owns the directory now: nothing of this one completes
    # Ctrl-C and SIGTERM: counted from the job manager's start on, never raised (in a pod SIGTERM ends the
    # process at once). While Spark starts, one gives the start up; once the job runs, this loop decides.
    interrupts = Interrupts(pod.sigterm_ends_at_once(os.environ))
    interrupts.install()
    try:
        try:
            jm_address = jm.start()
            if lease is not None and jm.rest is not None:
                lease.me.rest = jm.rest.url  # named to a job refused by this one's lease
            mark("job manager started")
        except BindError as e:
            jm.shutdown()
            raise JobDefinitionError(str(e)) from None
        deployed.append(jm)
        if jm.rest is not None:
            display.note(f"Job {graph.job_name!r} ({job_id}): REST API and metrics at {jm.rest.url}")
        started = time.monotonic()
        display.start()
    except BaseException:
        interrupts.restore()
        if lease is not None:
            lease.release()
        raise
    attempt_no = 0
    restore = initial
    damaged: dict[int, str] = {}  # checkpoint id -> what a task found wrong with it
    final_state = "FAILED"
    driver_lost = False  # the job ends because its Spark JVM (the driver) died: like a crash, not a cleanup
    handled = 0  # interrupts acted on
    stop = _StopWatch()
    start_interrupted = False  # a signal gave up Spark's start: nothing ran, and one line says so
    spark_started = False  # until then nothing ran: an end before it is said by its error alone
    try:
        # Spark starts once the job manager serves: in a pod, the REST API is the readiness probe, and
        # Spark on Kubernetes waits for its driver pod to be Ready before it asks for executor pods.
        try:
            deployment = start_deployment(spark_conf, graph.parallelism, graph.job_name, slot_needs(graph),
                                          lambda: interrupts.count > 0)
            deployment.task_modules = modules
        except StartAborted:
            if not interrupts.count:
                raise
            start_interrupted = True
            raise JobInterrupted(_start_interrupted_message(graph.job_name, job_id, interrupts.first, initial),
                                 interrupts.first) from None  # type: ignore[arg-type]
        spark_started = True
        running[1] = deployment
        if deployment.session_note:
            display.note(deployment.session_note)
        interrupts.install()  # again: a SparkContext made in the main thread (restart_jvm) installs PySpark's own
        while True:
            if jm.cancel_requested:  # canceled while restarting: no new attempt is deployed
                jm.status.state = final_state = "CANCELED"
                raise JobCanceledError(f"Job {graph.job_name!r} ({job_id}) was canceled")
            jm.begin_attempt(attempt_no, restore)
            attempt = _Attempt(deployment, job_id, attempt_no, f"streamjob {graph.job_name}", payload, jm_address)
            cancel_at: float | None = None
            jvm_exit: str | None = None  # how the JVM ended, when it did during this attempt
            rescaling = None  # the rescale this attempt is ended for (rescale.py)
            cancel_rescaled_at: float | None = None
            while attempt.alive():
                # A rescale waiting for its checkpoint is acted on within 50 ms of it (the pause it makes).
                attempt.join(0.05 if jm.rescale is not None and jm.rescale.status == rescale.CHECKPOINTING else 0.25)
                display.update(jm.operator_totals(), jm.task_time_metrics())
                if jvm_exit is None:
                    jvm_exit = deployment.jvm_exit()
                    if jvm_exit is not None:
                        jm.report(_jvm_failure(jvm_exit, attempt_no))
                elif time.monotonic() - (cancel_at or time.monotonic()) > _JVM_STAGE_GRACE_S:
                    break
                while handled < interrupts.count:
                    signum = interrupts.signals[handled]
                    handled += 1
                    if not stop.started:  # the first: a graceful stop; one during a drain cancels
                        stop.begin(signum)
                        jm.stop()
                        display.note(_stopping_note(signum, coordinator))
                    elif jm.status.state != "CANCELED":
                        _cancel_by_signal(signum, stop, jm, attempt, display)
                if client is not None and client._cancel_signal is not None and jm.status.state != "CANCELED":
                    # The same, in a job of execute_async: its program's thread counted the signals.
                    _cancel_by_signal(client._cancel_signal, stop, jm, attempt, display)
                if lease is not None and lease.lost is not None:
                    attempt.cancel()
                    raise JobExecutionError(f"Job {graph.job_name!r} ({job_id}) failed: {lease.lost}")
                if stop.due_for_note():
                    display.note(_still_draining_note(stop, jm, coordinator))
                if jm.stop_requested and not stop.started:
                    stop.begin(None, jm.stop_by)  # streamjob stop (POST /v1/stop), or the program's own Ctrl-C
                    # handling (execute_async): the same drain, reported the same way
                if client is not None and client._cancel_requested and not jm.cancel_requested:
                    jm.cancel()  # the program's JobClient.cancel(): fenced as a REST cancel is
                if jm.cancel_requested and jm.status.state != "CANCELED":
                    jm.status.state = "CANCELED"
                    attempt.cancel()
                if jm.rescale_due.is_set() and rescaling is None and cancel_at is None \
                        and jm.status.state == "RUNNING" and not stop.started:
                    # Its checkpoint completed: end the attempt now (fenced first: nothing after that checkpoint
                    # completes or commits) and start the new one from it, below.
                    rescaling = jm.rescale
                    jm.end_for_rescale()  # its tasks end themselves at once, as on a failure
                    jm.status.state = "RESTARTING"
                    cancel_rescaled_at = time.monotonic() + _RESCALE_END_GRACE_S
                if rescaling is not None and cancel_rescaled_at is not None and time.monotonic() > cancel_rescaled_at:
                    attempt.cancel()  # a task busy in a user function for that long: Spark ends it
                    cancel_rescaled_at = None
                if jm.failure_event.is_set() and cancel_at is None:
                    # Failover: never wait for Spark to notice; the job manager owns restarts.
                    jm.status.state = "RESTARTING" if jm.status.state == "RUNNING" else jm.status.state
                    cancel_at = time.monotonic()
                    attempt.cancel()
            error = attempt.error
            if error is not None and jvm_exit is None:
                # The stage ended with an error: was it the JVM (one this process did not launch is only
                # seen this way, by its gateway refusing connections)?
                jvm_exit = deployment.jvm_exit(error)
                if jvm_exit is not None:
                    jm.report(_jvm_failure(jvm_exit, attempt_no))
            failure = jm.root_failure()
            if error is not None and failure is None and jm.status.state != "CANCELED" and rescaling is None:
                jm.failure_event.wait(2.0)  # the failure report may still be on its way
                failure = jm.root_failure()
            if jm.status.state == "CANCELED":
                final_state = "CANCELED"
                if stop.cancel_signal is not None:
                    raise JobInterrupted(f"Job {graph.job_name!r} ({job_id}) was canceled by "
                                         f"{NAMES.get(stop.cancel_signal, 'a signal')} during its graceful stop",
                                         stop.cancel_signal)
                raise JobCanceledError(f"Job {graph.job_name!r} ({job_id}) was canceled")
            if error is None and failure is None:
                jm.wait_finished(timeout=5.0)  # final metrics travel before each task's "finished"
                if stop.started and coordinator is not None and coordinator.settings.enabled \
                        and not coordinator.final_completed:
                    # The stage ended without the final checkpoint: the drained output is not committed.
                    raise JobExecutionError(f"Job {graph.job_name!r} ({job_id}) stopped, but its final checkpoint "
                                            f"did not complete: the output since the last completed checkpoint is "
                                            f"not committed")
                final_state = "FINISHED"
                break
            if rescaling is not None and failure is None and jvm_exit is None:
                # -- ended for a rescale: not a failure; the same checkpoint, at the new parallelism --------
                jm.rescale_due.clear()
                coordinator.abort_all(f"rescaling (rescale {rescaling.id})", time.monotonic())
                try:
                    graph, payload = _rescaled(rescaling.graph, jm, coordinator, display, deployment)
                except Exception as e:  # noqa: BLE001 - the job goes on at its old parallelism
                    jm.rescale_failed(f"{type(e).__name__}: {e}; the job goes on at its old parallelism")
                running[0] = graph
                restore = coordinator.latest() or restore
                attempt_no += 1
                continue
            # -- the attempt failed: restart or give up -------------------------------------------
            # Fenced before anything else: once the restore point is chosen below, no checkpoint of this
            # attempt may complete and no sink of it commit, whatever its task processes still do.
            survivors = jm.fence()
            if jvm_exit is not None:
                driver_lost = True  # until a new JVM runs: the job's end leaves its checkpoints in place
                if deployment.local:
                    daemons = _kill_tasks(survivors, jm.task_parent_pids())
                    jm.wait_disconnected(_ORPHAN_GRACE_S)  # the tasks: their channels close as they end
                    process_tree.wait_ended(daemons, _ORPHAN_GRACE_S)
            # Without a failure the job manager recorded (the task died before it registered), Spark's
            # exception is all there is: which subtask, and what happened to it (spark_errors.py).
            what = failure.summary(graph.parallelism) if failure else spark_errors.describe(error, graph.parallelism)
            if jm.all_finished() and (failure is None or failure.cause == "jvm"):
                # Every task finished (its final checkpoint completed, its sinks committed) before the JVM went.
                final_state, driver_lost = "FINISHED", False
                break
            stopped = jm.stop_with_savepoint_completed()
            if stopped is not None:
                # The job's final snapshot is complete and was announced (sinks may have committed from it):
                # restoring an older checkpoint would repeat that output. The job ends with its savepoint, and
                # a job resumed from it commits whatever its sinks had not yet.
                display.note(f"Attempt {attempt_no + 1} failed after its stop-with-savepoint completed: {what}. "
                             f"The job ends with savepoint {stopped}")
                final_state, driver_lost = "FINISHED", False
                break
            if jvm_exit is not None and not deployment.jvm_restartable:
                raise JobExecutionError(f"Job {graph.job_name!r} ({job_id}) failed: "
                                        + _driver_lost_message(jvm_exit, deployment.master, coordinator))
            for bad in jm.failures_of("restore"):
                if bad.checkpoint is not None and bad.checkpoint not in damaged:
                    damaged[bad.checkpoint] = bad.error
                    display.note(f"Checkpoint {bad.checkpoint} cannot be restored: {bad.error}")
            if coordinator is not None:
                coordinator.abort_all(f"restarting after a failure of attempt {attempt_no + 1}: {what}",
                                      time.monotonic())
            # Before the restart strategy: a damaged checkpoint fails the job whatever the strategy
            # allows (restarting would only find it damaged again).
            restore, notes, refusal = _pick_restore(coordinator, initial, older, damaged, explicit, allow_older)
            for msg in notes:
                display.note(msg)
            if refusal:
                raise JobExecutionError(f"Job {graph.job_name!r} ({job_id}) failed: {refusal}")
            delay = strategy.next_delay_ms(int(time.time() * 1000))
            if delay is None:
                _raise_failure(graph, job_id, failure, error, strategy, attempt_no)
            underway = jm.rescale if jm.rescale is not None and jm.rescale.status in (
                rescale.CHECKPOINTING, rescale.RESTARTING) else None
            if underway is not None and running[0] is underway.graph:
                # The first attempt at the new parallelism failed before every task ran (Spark could not give
                # the slots, a task could not start there): the rescale failed; back to the old parallelism.
                jm.rescale_failed(f"the job failed at the new parallelism before it ran ({what}); back to the old one")
                try:
                    graph, payload = _rescaled(underway.previous, jm, coordinator, display, deployment)
                    running[0] = graph
                except Exception as e:  # noqa: BLE001 - the restart strategy decides what comes of it
                    display.note(f"Could not go back to the old parallelism: {type(e).__name__}: {e}")
            elif underway is not None:
                # A rescale underway when the attempt failed: the restart carries it out (it restores anyway).
                jm.rescale_due.clear()
                try:
                    graph, payload = _rescaled(underway.graph, jm, coordinator, display, deployment)
                    running[0] = graph
                    underway.status, underway.checkpointed = rescale.RESTARTING, time.time()
                    underway.checkpoint_id = restore.checkpoint_id if restore else None
                except Exception as e:  # noqa: BLE001
                    jm.rescale_failed(f"{type(e).__name__}: {e}; the job restarts at its old parallelism")
            where = f"checkpoint {restore.checkpoint_id}" if restore else "the beginning (no checkpoint yet)"
            new_jvm = "; starting a new one" if jvm_exit is not None else ""
            display.note(f"Attempt {attempt_no + 1} failed: {what}{new_jvm}. Restarting from {where} in {delay} ms "
                         f"({strategy.describe()})")
            jm.restarts += 1
            attempt_no += 1
            restart_at = time.monotonic() + delay / 1000.0
            if jvm_exit is not None:
                # A new JVM that dies (or cannot start) while it starts is one more failure of the restart
                # strategy: counted, delayed by it, said as any; the job fails only when the strategy gives
                # up, or when JVMs failed to start _JVM_START_FAILURES_IN_A_ROW times with no attempt run.
                failed_starts = 0
                while True:
                    try:
                        deployment.restart_jvm()
                        break
                    except JVMStartError as e:
                        start_error = e
                    finally:
                        interrupts.install()  # a SparkContext made here installed PySpark's SIGINT handler again
                    failed_starts += 1
                    cause = str(start_error)
                    jm.report(TaskFailure(-1, None, "SparkJVMStartFailed", cause, "", "jvm", attempt_no))
                    lost = f"the Spark JVM exited ({jvm_exit}) and a new one could not start"
                    if failed_starts >= _JVM_START_FAILURES_IN_A_ROW:
                        raise JobExecutionError(
                            f"Job {graph.job_name!r} ({job_id}) failed: {lost} {failed_starts} times in a row, "
                            f"without an attempt running in between (last: {cause}). That is no passing failure "
                            f"but the JVM's environment or configuration (Java, memory, spark.* settings): fix it "
                            f"and resume from the latest checkpoint") from start_error
                    delay = strategy.next_delay_ms(int(time.time() * 1000))
                    if delay is None:
                        raise JobExecutionError(
                            f"Job {graph.job_name!r} ({job_id}) failed (restart strategy {strategy.describe()} gave "
                            f"up after {attempt_no} restarts): {lost}: {cause}") from start_error
                    display.note(f"Attempt {attempt_no + 1} failed: {cause}; starting a new one. Restarting from "
                                 f"{where} in {delay} ms ({strategy.describe()})")
                    jm.restarts += 1
                    attempt_no += 1
                    restart_at = time.monotonic() + delay / 1000.0
                    while time.monotonic() < restart_at and handled == interrupts.count:
                        time.sleep(0.05)
                    if handled < interrupts.count:  # nothing runs to drain: the job ends where it is
                        signum = interrupts.signals[handled]
                        stop.cancel_signal = signum
                        jm.status.state = "CANCELED"
                        final_state = "CANCELED"
                        raise JobInterrupted(f"Job {graph.job_name!r} ({job_id}) was interrupted by "
                                             f"{NAMES.get(signum, 'a signal')} while a new Spark JVM was to start "
                                             f"(no attempt was running)", signum)
                driver_lost = False
            while time.monotonic() < restart_at and not jm.cancel_requested:
                time.sleep(min(0.1, max(0.0, restart_at - time.monotonic())))
        seconds = time.monotonic() - started
        totals = jm.operator_totals()
        jm.finish("FINISHED")
        display.close(totals, "FINISHED", seconds)
        if stop.started:
            display.note(_stopped_note(stop, coordinator))
        named = {graph.operators[int(k)].name: {"records_in": v[0], "records_out": v[1]} for k, v in totals.items()}
        ran = jm.running_seconds()
        return JobExecutionResult(job_id, graph.job_name, int(seconds * 1000), named,
                                  None if ran is None else int(ran * 1000),
                                  checkpoints=_checkpoint_summaries(coordinator), restarts=jm.restarts)
    except BaseException as e:
        # Interrupted before the loop took the signals over (the SparkContext starting): canceled, not failed.
        state = "CANCELED" if jm.status.state == "CANCELED" or start_interrupted or isinstance(e, KeyboardInterrupt) \
            else final_state
        jm.finish(state, None if state == "CANCELED" else _error_text(e))
        if not spark_started:
            # Nothing ran (Spark could not start, too few slots, a signal): no table of zeros, no note on what
            # to resume; the error's one line says it all.
            display.summary_enabled = False
        display.close(jm.operator_totals(), jm.status.state, time.monotonic() - started)
        raise
    finally:
        # Kept whatever the retention: after a cancel by a second Ctrl-C / SIGTERM, the latest checkpoint
        # (the user interrupted a run; its state is what the next run resumes from), and after a graceful
        # stop, its final checkpoint: the sources stopped where they were (event time did not end), so it
        # is the state a later run continues from, the part Flink's stop savepoint plays.
        interrupted = stop.cancel_signal is not None and jm.status.state == "CANCELED"
        stopped = stop.started is not None and jm.status.state == "FINISHED"
        retain = driver_lost or interrupted or stopped
        kept = False
        latest = coordinator.latest() if coordinator is not None else None  # before the cleanup forgets it
        if coordinator is not None and lease is not None and lease.lost is not None:
            pass  # the directory is another job's now: nothing in it is this job's to delete
        elif coordinator is not None:
            jm.wait_disconnected(10.0)
            try:
                coordinator.shutdown(jm.status.state, retain=retain)
                kept = keeps_checkpoints(jm.status.state, coordinator.settings.retention, retain)
            except Exception as e:  # noqa: BLE001 - cleanup must not hide the job's outcome
                display.note(f"Could not clean up checkpoints: {e}")
                kept = True  # whatever it could not delete is still there
        if lease is not None:
            lease.release()
            storage.remove_job_dir_if_empty()  # the lease kept it from being empty
        if jm.status.final:
            text = resume.describe(resume.Ending(
                jm.status.state, coordinator is not None and coordinator.settings.enabled,
                coordinator.settings.retention if coordinator is not None else "", kept,
                latest.checkpoint_id if latest else None, latest.url if latest else None,
                jm.status.final_savepoint, stopped=stopped, interrupted=interrupted,
                damaged=tuple(damaged))) if spark_started else None
            if text:
                display.note(text)
            # Only now is the end public (GET /v1/job's end_time, the termination message): `streamjob cancel`
            # and `stop` print what stays to resume from, and that checkpoint is not deleted after they read it.
            jm.settle(text)
            _leave_termination_message(config, jm.final_result(), display.note)
        jm.rescale_failed(f"the job ended {jm.status.state} before the rescale was done")
        interrupts.restore()  # the linger below ends on SIGTERM or Ctrl-C as before
        _linger(config, jm, display)
        jm.shutdown()
        if client is not None:
            client._done(jm.status.state)


def _start_interrupted_message(job_name: str, job_id: str, signum: int, initial: CompletedCheckpoint | None) -> str:
    what = (f"{initial.metadata.kind} {initial.url} is still the one to resume from" if initial is not None
            else "nothing to resume")
    return f"Job {job_name!r} ({job_id}) interrupted by {NAMES.get(signum, 'a signal')} while it was starting: " \
           f"nothing ran ({what})"


def _cancel_by_signal(signum: int, stop: "_StopWatch", jm: Any, attempt: Any, display: Any) -> None:
    """A second Ctrl-C or SIGTERM during the graceful stop: cancel, keeping the latest checkpoint."""
    stop.cancel_signal = signum
    display.note(f"{NAMES.get(signum, 'signal')} again: canceling (the drain is abandoned; "
                 f"the latest completed checkpoint is kept)")
    # Fenced first: the checkpoint kept (and named) is the latest completed now. Without it, one in
    # flight (the drain's final one, whose tasks finish while Spark tears them down) could still
    # complete, its sinks commit past the one named, and the one named be disposed of as subsumed.
    jm.fence()
    jm.status.state = "CANCELED"
    attempt.cancel()


class JobInterrupted(JobExecutionError):
    """The job was canceled by a second Ctrl-C or SIGTERM; ``exit_code`` is the shell's for that signal."""

    def __init__(self, message: str, signum: int):
        super().__init__(message)
        self.exit_code = exit_code(signum)


class _StopWatch:
    """A graceful stop in progress: when it began, by what, and whether the user was told it lingers."""

    NOTE_AFTER_S = 10.0

    def __init__(self) -> None:
        self.started: float | None = None
        self.signal: int | None = None  # None: streamjob stop (the REST API)
        self.cancel_signal: int | None = None
        self.by = ""  # who asked: "Ctrl-C", "SIGTERM", "streamjob stop"
        self._noted = False

    def begin(self, signum: int | None, by: str | None = None) -> None:
        self.started, self.signal = time.monotonic(), signum
        self.by = NAMES.get(signum, "a signal") if signum is not None else by or "streamjob stop"

    def due_for_note(self) -> bool:
        if self.started is None or self._noted or self.cancel_signal is not None:
            return False
        if time.monotonic() - self.started < self.NOTE_AFTER_S:
            return False
        self._noted = True
        return True


def _stopping_note(signum: int, coordinator: CheckpointCoordinator | None) -> str:
    name = NAMES.get(signum, "signal")
    final = "the final checkpoint commits" if coordinator is not None and coordinator.settings.enabled \
        else "sinks flush"
    latest = coordinator.latest() if coordinator is not None else None
    keep = f", keeping checkpoint {latest.checkpoint_id}" if latest is not None else \
        ", keeping the latest completed checkpoint"
    checkpointing = coordinator is not None and coordinator.settings.enabled
    return (f"Stopping ({name}): sources end, in-flight records drain, {final}. "
            f"{name} again cancels{keep if checkpointing else ''}")


def _still_draining_note(stop: _StopWatch, jm: JobManager, coordinator: CheckpointCoordinator | None) -> str:
    """What a long drain is waiting for, so a stuck one is seen as such."""
    with jm._lock:
        ended = len(jm.end_of_data)
    waiting = (f"{ended} of {jm.parallelism} subtasks have ended their input (the others still process records "
               f"in flight, or are held up in user code)" if ended < jm.parallelism
               else "every subtask ended its input; the final checkpoint is in progress" if coordinator is not None
               else "every subtask ended its input")
    name = NAMES.get(stop.signal, "Ctrl-C") if stop.signal is not None else "Ctrl-C (or streamjob cancel)"
    return f"Still draining after {time.monotonic() - (stop.started or 0):.0f} s: {waiting}. {name} cancels instead"


def _stopped_note(stop: _StopWatch, coordinator: CheckpointCoordinator | None) -> str:
    by = stop.by
    if coordinator is not None and coordinator.settings.enabled:
        latest = coordinator.latest()
        final = f"with final checkpoint {latest.checkpoint_id}" if latest is not None else "with the final checkpoint"
        return f"Stopped by {by}: every record the sources emitted was processed, and the output committed {final}"
    return f"Stopped by {by}: every record the sources emitted was processed and the sinks flushed"


def _import_rest() -> None:
    try:
        from . import rest  # noqa: F401
    except Exception:  # noqa: BLE001 - the job manager's own import reports it
        pass


def _rest_config(config: Configuration, driver: pod.Addresses, environ: Any) -> tuple[str, int, str] | None:
    """(host, port, token) from ``rest.address`` (HOST:PORT; empty or "off": no REST API); not configured,
    it listens where the job manager does (every interface in a pod) on a free port."""
    if not config.contains_key(Options.REST_ADDRESS):
        return driver.bind, 0, _rest_token(config, environ)
    address = str(config.get(Options.REST_ADDRESS) or "").strip()
    if address.lower() in ("", "off", "none"):
        return None
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise JobDefinitionError(f"configuration {Options.REST_ADDRESS}: expected HOST:PORT (port 0: any free one), "
                                 f"got {address!r}")
    host = host.strip("[]") or "127.0.0.1"
    if pod.is_wildcard(host) and environ.get(pod.BIND_HOST):
        host = driver.bind  # "every interface" means every one this process may use
    return host, int(port), _rest_token(config, environ)


def _proxy_ports(config: Configuration) -> list[int] | None:
    """The ports ``queryable-state.proxy.ports`` allows, in order (None: ``off``)."""
    raw = str(config.get(Options.QUERYABLE_STATE_PROXY_PORTS) or "0").strip().lower()
    if raw in ("off", "none"):
        return None
    low, sep, high = raw.partition("-")
    try:
        ports = list(range(int(low), int(high) + 1)) if sep else [int(low)]
    except ValueError:
        ports = []
    if not ports or not all(0 <= p <= 65535 for p in ports):
        raise JobDefinitionError(f"configuration {Options.QUERYABLE_STATE_PROXY_PORTS}: expected a port, a range "
                                 f"such as 9069-9075, 0 (any free one) or off, got {raw!r}")
    return ports


def _rest_token(config: Configuration, environ: Any) -> str:
    """``rest.auth.token``, else the content of ``rest.auth.token-file`` (a mounted Secret), else the
    environment variable STREAMJOB_REST_TOKEN (a Secret as env var); empty: no token needed."""
    token = str(config.get(Options.REST_TOKEN) or "").strip()
    path = str(config.get(Options.REST_TOKEN_FILE) or "").strip()
    if token and path:
        raise JobDefinitionError(f"configuration {Options.REST_TOKEN} and {Options.REST_TOKEN_FILE} are both set; "
                                 f"set one")
    if not path:
        return token or environ.get(REST_TOKEN_ENV, "").strip()
    try:
        with open(path) as f:
            token = f.read().strip()
    except OSError as e:
        raise JobDefinitionError(f"configuration {Options.REST_TOKEN_FILE}: cannot read {path}: "
                                 f"{e.strerror or e}") from None
    if not token:
        raise JobDefinitionError(f"configuration {Options.REST_TOKEN_FILE}: {path} is empty; it must hold the "
                                 f"REST API's bearer token")
    return token


def _leave_termination_message(config: Configuration, result: dict, note: Any) -> None:
    """The final result as the pod's termination message: it outlives the pod (and a lost REST answer)."""
    path = pod.termination_log_path(config)
    if path is None:
        return
    try:
        pod.write_termination_message(path, result)
    except OSError as e:
        note(f"Could not write the termination message to {path} ({Options.K8S_TERMINATION_LOG}): {e}")


def _note(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _error_text(error: BaseException) -> str:
    return str(error).strip() or type(error).__name__


# How long a job keeps its final result for a client that said it waits for it (`streamjob stop`, `cancel`).
WAITING_READER_LINGER_S = 60.0


def _linger(config: Configuration, jm: JobManager, display: Any) -> None:
    seconds = pod.result_linger_ms(config, os.environ) / 1000.0
    if jm.reader_waiting:
        seconds = max(seconds, WAITING_READER_LINGER_S)
    if jm.rest is None or seconds <= 0 or jm.result_was_read():
        return
    if not jm.reader_waiting:  # else the client that asked reads it at once
        display.note(f"Job {jm.status.state}; its result stays at {jm.rest.url}/v1/job for up to {seconds:g} s, "
                     f"until read ({Options.REST_RESULT_LINGER})")
    jm.linger(seconds)


def _checkpoint_shape(graph: JobGraph) -> dict[str, Any]:
    """What the checkpoint coordinator needs to know of the graph's parallelism: each task vertex's, and
    the operators that differ from the job's slots (their metadata entries carry their own)."""
    return {"tasks": {t.id: t.parallelism for t in graph.tasks},
            "operator_parallelism": {n.state_key: (n.parallelism, n.max_parallelism) for n in graph.operators.values()
                                     if n.parallelism != graph.parallelism or n.max_parallelism != graph.max_parallelism}}


def _rescaled(graph: JobGraph, jm: JobManager, coordinator: CheckpointCoordinator | None, display: Any,
              deployment: Any) -> tuple[JobGraph, bytes]:
    """Make ``graph`` (a rescale's) the one the next attempt runs: its slots from Spark first (executor pods
    on Kubernetes), then the job manager, the checkpoint coordinator and the progress display. Raises
    before changing anything when Spark cannot give the slots or the graph does not serialize."""
    payload = serialize_graph(graph)
    deployment.resize(graph.parallelism, slot_needs(graph))
    if coordinator is not None:
        shape = _checkpoint_shape(graph)
        coordinator.reshape(graph.parallelism, shape["tasks"], shape["operator_parallelism"])
    jm.reshape(graph.parallelism, graph.default_parallelism or graph.parallelism, graph.plan(), _metric_names(graph),
               keyed_operators(graph), deployment.executors())
    display.graph = graph
    return graph, payload


def _metric_names(graph: JobGraph) -> dict[str, str]:
    """Operator id -> the ``operator`` label: its name, made unique with its uid or id if two share it."""
    names: dict[str, str] = {}
    seen: dict[str, int] = {}
    for op in graph.operators.values():
        seen[op.name] = seen.get(op.name, 0) + 1
    for op_id, op in graph.operators.items():
        names[str(op_id)] = op.name if seen[op.name] == 1 else f"{op.name} [{op.state_key}]"
    return names


def _pick_restore(coordinator: CheckpointCoordinator | None, initial: CompletedCheckpoint | None, older: list[str],
                  damaged: dict[int, str], explicit: str | None, allow_older: bool,
                  ) -> tuple[CompletedCheckpoint | None, list[str], str | None]:
    """What a failover restores: (checkpoint or None for the beginning, notes, refusal). The candidates,
    newest first: the completed checkpoints of this run, what it resumed from, the older checkpoints of
    the directory it resumed from; ``recovery.choose`` decides."""
    candidates: list[Any] = list(reversed(coordinator.completed)) if coordinator is not None else []
    ids = {c.checkpoint_id for c in candidates}
    if initial is not None and initial.checkpoint_id not in ids:
        candidates.append(initial)
        ids.add(initial.checkpoint_id)
    candidates += [u for u in older if _id_in_url(u) not in ids]
    found, loaded, notes = _inspect(candidates, damaged, explicit)
    choice = recovery.choose(found, allow_older)
    if choice.refusal is None and coordinator is not None:
        for f in found:
            if f.problem is not None:  # skipped: never again a candidate, nor counted for retention
                coordinator.drop_corrupt(f.checkpoint_id)
    restore = loaded[choice.restore.checkpoint_id] if choice.restore is not None else None
    return restore, notes + list(choice.notes), choice.refusal


def _checkpoint_summaries(coordinator: CheckpointCoordinator | None) -> list[dict]:
    return [] if coordinator is None else [s.summary() for s in coordinator.history]


def _raise_failure(graph: JobGraph, job_id: str, failure: Any, error: BaseException | None, strategy: Any,
                   attempts: int, extra: str = "") -> None:
    why = f" ({extra})" if extra else (f" (restart strategy {strategy.describe()} gave up after {attempts} restarts)"
                                       if attempts else "")
    if failure is not None:
        raise JobExecutionError(
            f"Job {graph.job_name!r} ({job_id}) failed{why}: {failure.summary(graph.parallelism)}\n\n{failure.traceback}",
            operator=failure.operator, python_traceback=failure.traceback)
    if isinstance(error, Exception) and type(error).__name__.endswith("SlotsError"):
        raise error
    raise JobExecutionError(f"Job {graph.job_name!r} ({job_id}) failed on Spark{why}: "
                            f"{spark_errors.describe(error, graph.parallelism)}") from error


def _first_line(error: BaseException | None) -> str:
    text = str(error or "unknown error").strip()
    for line in text.splitlines():
        if line.strip(": \t") and not line.startswith("An error occurred while calling"):
            return line.strip().lstrip(": ")[:500]  # py4j's ": org.apache..." after its call line
    return text[:500]
