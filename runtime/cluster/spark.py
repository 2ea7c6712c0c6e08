"""Running a job as one long-lived Spark barrier stage. The only module that imports pyspark.

One barrier task per slot; each runs one subtask of every operator
(``task.slot.SlotRuntime``). Tasks exchange their data addresses once, through
the job manager (Spark's ``allGather`` would cost about a second), then talk over
TCP, and report to the job manager over the control channel.

Facts of PySpark barrier mode this module designs around (see the design page):
Spark kills Python tasks with SIGKILL, so graceful stop goes over the control
channel; a barrier stage needing more slots than exist would wait ~10 minutes,
so the slot check is made fast and its error explained; workers must run the
driver's interpreter.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import sys
import threading
import time
from dataclasses import dataclass
from importlib import resources
from typing import Any

from ..graph.slots import SlotNeeds, uniform
from ..startup_trace import mark
from . import session, spark_launch, spark_log, user_cache
from .process_tree import DAEMON_MODULE, PRELOAD_ENV, kill_tree
from .pod import is_local


class ClusterError(RuntimeError):
    """The job could not be deployed; the message says what is missing."""


class NotEnoughSlotsError(ClusterError):
    pass


class StartAborted(ClusterError):
    """Spark's start was given up (Ctrl-C or SIGTERM while it started): its JVM was killed."""


class JVMStartError(ClusterError):
    """A new JVM and SparkContext (``SparkDeployment.restart_jvm``) did not start. ``how``: how the new
    JVM's process ended ("killed by signal 9", "exit code 1"), None when it never ran or Spark failed in
    a JVM that still ran (then it was killed, not left behind)."""

    def __init__(self, message: str, how: str | None = None):
        super().__init__(message)
        self.how = how


class _Start:
    """One deployment starting in a thread of its own (``start_deployment``): the JVMs launched for it,
    killed if the start is given up. A Ctrl-C raised inside the start's py4j calls would leave them half
    done (PySpark then calls into the JVM again to clean up, and prints py4j's tracebacks); instead the
    main thread only counts the signal, and the start ends because its JVM is gone."""

    def __init__(self) -> None:
        self.aborted = threading.Event()
        self._lock = threading.Lock()
        self._processes: list[Any] = []
        self._prestarted: "PrestartedGateway | None" = None
        self.archive_claim: str | None = None  # the class-data archive this start's JVM would write at exit

    @property
    def launched_any(self) -> bool:
        return bool(self._processes or self._prestarted)

    def adopt(self, process: Any) -> None:
        """A JVM launched for this start; one launched after the start was given up is killed at once."""
        with self._lock:
            self._processes.append(process)
            aborted = self.aborted.is_set()
        if aborted:
            kill_tree(process)
            raise StartAborted("Spark's start was given up")

    def adopt_prestarted(self, prestarted: "PrestartedGateway") -> None:
        with self._lock:
            self._prestarted = prestarted
            aborted = self.aborted.is_set()
        if aborted:
            prestarted.kill()

    def check(self) -> None:
        if self.aborted.is_set():
            raise StartAborted("Spark's start was given up")

    def abort(self) -> None:
        with self._lock:
            self.aborted.set()
            processes, prestarted = list(self._processes), self._prestarted
        if prestarted is not None:
            prestarted.kill()
        for process in processes:
            kill_tree(process)
        claim = self.archive_claim
        if claim and os.path.exists(claim) and not os.path.getsize(claim):
            # Its JVM never wrote it (killed): left claimed, it would keep every later run from writing one.
            try:
                os.remove(claim)
            except OSError:
                pass


_starting = threading.local()  # .start: the _Start of the thread running start_deployment's SparkDeployment


def _current_start() -> _Start | None:
    return getattr(_starting, "start", None)


def check_java() -> None:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and os.path.exists(os.path.join(java_home, "bin", "java")):
        return
    if shutil.which("java"):
        return
    raise ClusterError(
        "Java was not found: streamjob runs jobs on Spark, which needs Java 17 or 21.\n"
        "Install it (Debian/Ubuntu: sudo apt-get install -y openjdk-17-jre-headless; "
        "macOS: brew install openjdk@17) or set JAVA_HOME to a Java installation."
    )


def _local_slots(master: str) -> int | None:
    m = re.fullmatch(r"local(?:\[(\*|\d+)(?:,\s*\d+)?\])?", master.strip())
    if not m:
        return None
    n = m.group(1)
    if n is None:
        return 1
    return os.cpu_count() or 1 if n == "*" else int(n)


def _readable(duration: str) -> str:
    m = re.fullmatch(r"(\d+)ms", duration.strip())
    return f"{int(m.group(1)) / 1000:g} s" if m else duration


# JVM options of the embedded local Spark (spark.driver.extraJavaOptions sets others instead).
# Measured on 2 cores: the C2 JIT compiles Spark's start-up code on the cores the job needs,
# and creating the SparkContext takes ~10 s with it, ~4.5 s with the C1 compiler alone
# (TieredStopAtLevel=1); the JVM does no work per record, so C2's faster code buys nothing.
# The serial collector: no GC worker threads competing with the Python tasks, a smaller heap.
# -Xms32m: the heap starts small and grows as used (its default start is 1/64 of the machine's
# memory, and the young generation fills all of it before the first collection): ~50 MB less RSS.
# -Xmn8m: the young generation stays 8 MB (a third of the heap by default: 17 MB committed on W1).
# The JVM allocates little once the stage runs (heartbeats, the scheduler): 9 MB less RSS; start-up
# measured the same (bench/startup.py --baseline, 0.97x).
LOCAL_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:ReservedCodeCacheSize=64m -Xms32m -Xmn8m"
# A batch job on the embedded Spark whose rows do pass through the JVM (`streamjob state dump`, the
# State Processor API's local session): C2 and the parallel collector. Reading 10M keys of a savepoint
# into Spark's noop sink at 2 tasks: 0.79 s with the options above, 0.44-0.58 s with these (1.4-1.8x;
# bench/state_processor.py).
LOCAL_BATCH_JVM_OPTIONS = "-Xms32m"
# Written by a JVM as it exits; adopted by a later run once no JVM can still be writing it.
_ARCHIVE_SETTLE_S = 30.0


def class_data_sharing_options(cache_dir: str | None = None) -> str:
    """JVM options for a class-data-sharing archive of the embedded Spark's classes.

    Loading and verifying Spark's ~8,000 classes is most of the JVM's start: with a dynamic
    CDS archive (JDK 13+) they are mapped from a file instead, measured here 5.6 s -> 3.4 s to
    a SparkContext and ~50 MB less resident memory. The first run has its JVM write the archive
    as it exits (to a name of its own, so concurrent runs never share a half-written file);
    a later run adopts it. The archive is keyed by the Java binary and Spark's jars; a JVM
    finding one that does not match (or is damaged) ignores it and starts as without.
    ``STREAMJOB_CLASS_DATA_SHARING=0`` turns this off."""
    if os.environ.get("STREAMJOB_CLASS_DATA_SHARING", "1").strip().lower() in ("0", "false", "no", "off"):
        return ""
    try:
        import hashlib
        import importlib.util
        import time

        java = spark_launch.java_binary(dict(os.environ))
        if not java or not os.path.exists(java):
            return ""
        java = os.path.realpath(java)
        # Found without importing PySpark (~0.2 s): the JVM prestart computes this first thing.
        spec = importlib.util.find_spec("pyspark")
        if spec is None or not spec.submodule_search_locations:
            return ""
        jars = os.path.realpath(os.path.join(list(spec.submodule_search_locations)[0], "jars"))
        # The archive records the class path it was dumped with, and a JVM whose class path differs
        # (the same jars in another virtualenv) silently starts without it: the jars' folder is part
        # of the key, so each installation writes and maps its own. The Java version too: an archive
        # is only valid for the exact JVM build that wrote it (a package upgrade keeps the path).
        ident = "|".join([java, str(os.stat(java).st_mtime_ns), _java_release(java), *_base_archives(java),
                          jars, *sorted(os.listdir(jars))])  # jar names carry Spark's version
        key = hashlib.sha256(ident.encode()).hexdigest()[:16]
        cache = cache_dir or user_cache.folder()
        final = os.path.join(cache, f"spark-{key}.jsa")
        quiet = "-Xlog:cds=off -Xlog:cds+dynamic=off"
        if not os.path.exists(final):
            os.makedirs(cache, exist_ok=True)
            parts = [os.path.join(cache, f) for f in os.listdir(cache)
                     if f.startswith(f"spark-{key}.") and f.endswith(".jsa.part")]
            now = time.time()
            for f in parts:  # the claim of a run whose JVM never wrote (killed) is given up after a day
                if os.path.getsize(f) == 0 and now - os.path.getmtime(f) > 86400:
                    os.remove(f)
                    parts.remove(f)
            settled = [f for f in parts if os.path.getsize(f) and now - os.path.getmtime(f) > _ARCHIVE_SETTLE_S]
            if settled:
                os.replace(settled[0], final)
            elif parts:
                return ""  # another run's JVM is writing one
            else:
                user_cache.prune(cache, _unused_archive)
                # Writing costs this one run ~3 s more start-up (and its JVM ~2 s at exit).
                part = os.path.join(cache, f"spark-{key}.{os.getpid()}.jsa.part")
                open(part, "wb").close()  # claims the writing: concurrent runs start without an archive
                return f"-XX:ArchiveClassesAtExit={part} {quiet}"
        user_cache.in_use(final)
        return f"-XX:SharedArchiveFile={final} {quiet}"
    except (OSError, ImportError):
        return ""  # no cache directory we may write: start without the archive


_UNUSED_ARCHIVE_S = 30 * 86400


def _unused_archive(name: str, age: float, size: int) -> bool:
    """Archives no run used for 30 days (another JDK, Spark or virtualenv's, ~70 MB each), and claims
    of other keys whose JVM never wrote, go when a new archive is claimed."""
    return name.startswith("spark-") and (name.endswith(".jsa") and age > _UNUSED_ARCHIVE_S or
                                          name.endswith(".jsa.part") and age > 86400 and not size)


def _base_archives(java: str) -> list[str]:
    """The JDK's own (static) CDS archives, as they are now. A dynamic archive holds the checksum of the
    static one it was dumped on, and a JVM whose static archive was regenerated since (``java
    -Xshare:dump``, run by the JDK package as it installs) silently starts without the dynamic one,
    ~1 s slower: regenerated, it gets a new key and a run writes a new archive."""
    server = os.path.join(os.path.dirname(os.path.dirname(java)), "lib", "server")
    out = []
    for name in ("classes.jsa", "classes_nocoops.jsa"):
        try:
            st = os.stat(os.path.join(server, name))
        except OSError:
            continue
        out.append(f"{name}:{st.st_size}:{st.st_mtime_ns}")
    return out


def _java_release(java: str) -> str:
    """The JVM's build (``JAVA_VERSION`` of its ``release`` file; no JVM is started to ask it)."""
    home = os.path.dirname(os.path.dirname(java))
    try:
        with open(os.path.join(home, "release")) as f:
            for line in f:
                if line.startswith(("JAVA_RUNTIME_VERSION=", "JAVA_VERSION=")):
                    return line.strip()
    except OSError:
        pass
    return ""


@dataclass
class SlotReport:
    """Slots a barrier stage needs and what the cluster offers, for an error that says what is missing."""

    parallelism: int
    master: str
    registered: int  # executors registered with the driver (-1: unknown)
    requested: int  # spark.executor.instances
    cores: int  # spark.executor.cores
    slots_per_executor: int
    offered: int  # Spark's default parallelism: the cores it has now
    waited: str = ""  # spark.scheduler.maxRegisteredResourcesWaitingTime
    namespace: str = ""
    app_id: str = ""
    needs: SlotNeeds | None = None  # where the slots come from (None: every operator at ``parallelism``)

    def message(self) -> str:
        needs = self.needs or uniform(self.parallelism)
        need = f"not enough slots: the job needs {needs.describe()}"
        if not self.master.startswith("k8s://"):
            return (f"{need}, but Spark master {self.master} offers fewer (its default parallelism, the cores of "
                    f"the executors registered now: {self.offered}); add executors or cores (spark.executor.instances, "
                    f"spark.executor.cores, spark.cores.max) or {needs.lower()}")
        waited = f" within {self.waited} (kubernetes.executor.scheduling-timeout)" if self.waited else ""
        offering = "" if self.registered < 0 else f", offering {self.registered * self.slots_per_executor} slots"
        selector = "spark-role=executor" + (f",spark-app-selector={self.app_id}" if self.app_id else "")
        namespace = f" -n {self.namespace}" if self.namespace else ""
        return (f"{need}, but only {'some' if self.registered < 0 else self.registered} of the {self.requested} "
                f"executors requested (spark.executor.instances={self.requested} x spark.executor.cores={self.cores}: "
                f"{self.requested * self.slots_per_executor} slots) registered with the driver{waited}{offering}. "
                f"Missing executor pods are usually Pending or failing: `kubectl get pods{namespace} -l {selector}` "
                f"and `kubectl describe pod <name>` say why (the namespace's resource quota, nodes without enough "
                f"free CPU or memory, an image that cannot be pulled); or {needs.lower()}")


def _prepare_environment(master: str, conf: dict[str, str]) -> None:
    """Environment the JVM (and through it every Python worker) inherits; set before a JVM is
    launched, whether prestarted or not, so both see the same."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if is_local(master) and conf.get("spark.driver.bindAddress", "127.0.0.1") == "127.0.0.1":  # not in a pod
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def spark_settings(conf: dict[str, str], master: str, cds_options: str,
                   jvm_options: str = LOCAL_JVM_OPTIONS) -> dict[str, str]:
    """Everything the job's SparkContext is created with: our defaults under the user's keys."""
    defaults = {
        # A barrier stage that cannot get its slots fails in seconds, not ~10 minutes.
        "spark.scheduler.barrier.maxConcurrentTasksCheck.interval": "1s",
        "spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures": "2",
        "spark.ui.showConsoleProgress": "false",
        # The job manager owns failover; Spark must not retry tasks itself.
        "spark.task.maxFailures": "1",
        "spark.stage.maxConsecutiveAttempts": "1",
        "spark.python.worker.reuse": "true",
        # Workers forked from a daemon that has the task's modules loaded: a restart after a failure
        # starts its tasks in ~0.6 s instead of ~1.9 s (pydaemon).
        "spark.python.use.daemon": "true",
        "spark.python.daemon.module": DAEMON_MODULE,
    }
    if is_local(master):
        log4j = resources.files("streamjob.runtime.cluster").joinpath("log4j2-local.properties")
        defaults.update(
            {
                "spark.ui.enabled": "false",
                "spark.driver.host": "127.0.0.1",
                "spark.driver.bindAddress": "127.0.0.1",
                # The level is a system property the properties file reads (`streamjob run --log-level`).
                "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{log4j} "
                                                 f"-Dstreamjob.log.level={spark_log.level() or spark_log.DEFAULT_LOCAL_LEVEL} "
                                                 f"{jvm_options} {cds_options}".strip(),
                # The embedded JVM only schedules the one barrier stage and forks the Python
                # workers; records never pass through it. Spark's 1 GB default heap is room it
                # never uses (the JVM still grows into it); 512 MB is ample for the scheduler.
                "spark.driver.memory": "512m",
                # Without the daemon (spark.python.use.daemon=false): PySpark's worker, imported
                # from the installed package's cached bytecode rather than compiled anew from
                # Spark's zip in every worker (see pyworker). The daemon drops the zips itself.
                "spark.python.worker.module": "streamjob.runtime.cluster.pyworker",
            }
        )
    return {**defaults, **conf, "spark.master": master}


def _launch_settings(settings: dict[str, str]) -> dict[str, str]:
    """What the JVM's launch depends on (spark-submit's --conf): the master and the application name
    are set again by the SparkContext itself, so a job whose parallelism (local[N]) or name was not
    known yet when its JVM was prestarted still uses that JVM."""
    if not is_local(settings.get("spark.master", "local")):
        return dict(settings)  # spark-submit may prepare a cluster manager's client: launched as always
    return {k: v for k, v in settings.items() if k not in ("spark.master", "spark.app.name")}


PRESTART_ENV = "STREAMJOB_PRESTART_JVM"


class PrestartedGateway:
    """A Spark JVM launched in the background while the job file is still being imported and built.

    Launching the JVM and loading Spark's classes is ~1.5 s that does not depend on the job, only
    on its Spark configuration, environment and working directory (all inherited by the JVM and
    the Python workers it forks). The deployment takes it only if none of those changed in between
    (a job file may set ``spark.*`` keys or environment variables its tasks read); otherwise the
    JVM is shut down and a new one launched as without."""

    def __init__(self, master: str, conf: dict[str, str], cds_options: str):
        self.cds_options = cds_options
        self.launch = _launch_settings(spark_settings(conf, master, self.cds_options))
        self.environ = dict(os.environ)
        self.cwd = os.getcwd()
        self.gateway: Any = None
        self.error: BaseException | None = None
        self._lock = threading.Lock()
        self._process: Any = None
        self._killed = False
        self._thread = threading.Thread(target=self._run, name="streamjob-jvm-prestart", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self.gateway = _launch_gateway(self.launch, self._launched)
        except BaseException as e:  # noqa: BLE001 - the deployment launches anew and reports its own error
            self.error = e

    def _launched(self, process: Any) -> None:
        with self._lock:
            self._process = process
            killed = self._killed
        if killed:
            kill_tree(process)

    def kill(self) -> None:
        """End its JVM now, launched or still launching (the run is interrupted); waits briefly for the
        launching thread to notice, so its connection-info folder is removed."""
        with self._lock:
            self._killed = True
            process = self._process
        if process is not None:
            kill_tree(process)
        self._thread.join(5.0)
        gateway, self.gateway = self.gateway, None
        if gateway is not None:
            try:
                gateway.shutdown()
            except Exception:  # noqa: BLE001 - its JVM is gone
                pass

    def take(self, launch: dict[str, str]) -> Any:
        """The gateway if it was launched exactly as the deployment would launch one now, else None."""
        start = _current_start()
        if start is not None:
            start.adopt_prestarted(self)  # an interrupted start kills it, even while it is still launching
        self._thread.join()
        if start is not None:
            start.check()
        if self.gateway is not None and launch == self.launch and dict(os.environ) == self.environ \
                and os.getcwd() == self.cwd:
            mark("jvm prestart taken")
            return self.gateway
        mark("jvm prestart discarded")
        self.discard()
        return None

    def discard(self) -> None:
        self._thread.join()
        gateway, self.gateway = self.gateway, None
        if gateway is None:
            return
        try:
            gateway.shutdown()
        except Exception:  # noqa: BLE001 - the JVM exits on the closed pipe below anyway
            pass
        proc = getattr(gateway, "proc", None)
        if proc is not None and proc.stdin is not None:
            proc.stdin.close()  # Spark's gateway server exits at end of input, writing its CDS archive if asked


_prestarted: PrestartedGateway | None = None
_chosen_cds: str | None = None  # archive options chosen by a declined prestart, for the deployment's JVM
_prestart_lock = threading.Lock()


def prestart_gateway(master: str, conf: dict[str, str]) -> None:
    """Start launching the JVM of the embedded local Spark now (``streamjob run``, before the job
    file is loaded). Off with ``STREAMJOB_PRESTART_JVM=0``, for other masters, or when this process
    already has a JVM."""
    global _prestarted
    if os.environ.get(PRESTART_ENV, "1").strip().lower() in ("0", "false", "no", "off") or not is_local(master):
        return
    if session.available(master):
        return  # the run takes the session cluster's JVM (or, were it busy, launches one when it deploys)
    try:
        check_java()
    except ClusterError:
        return  # the deployment reports it
    global _chosen_cds
    context = sys.modules.get("pyspark.core.context")  # not imported yet: no JVM either (PySpark loads in the thread)
    with _prestart_lock:
        if _prestarted is not None or _chosen_cds is not None or (context and context.SparkContext._gateway):
            return
        _prepare_environment(master, conf)
        cds = class_data_sharing_options()
        if "ArchiveClassesAtExit" in cds:
            # This run writes the archive as its JVM exits: a prestarted JVM that is discarded, or a run
            # that fails before deploying, would write one of the few classes loaded by then, which every
            # later run would map. The first run on a machine starts its JVM when the job deploys.
            _chosen_cds = cds
            return
        _prestarted = PrestartedGateway(master, conf, cds)


def abandon_prestart() -> None:
    """Kill the prestarted JVM no deployment took (the run ends before its job deploys: Ctrl-C in the job
    file), rather than leave it to exit after this process, once it has started and read its closed stdin."""
    global _prestarted
    with _prestart_lock:
        prestarted, _prestarted = _prestarted, None
    if prestarted is not None:
        prestarted.kill()


def start_deployment(spark_conf: dict[str, str], parallelism: int, app_name: str, needs: SlotNeeds | None,
                     interrupted: Any, poll_s: float = 0.05) -> "SparkDeployment":
    """``SparkDeployment(...)`` started in a thread of its own, while the calling (main) thread watches
    ``interrupted()`` (Ctrl-C or SIGTERM, counted by the caller's handlers, never raised). Once it is
    true the start is given up: the JVMs launched for it are killed, the start fails on its lost gateway
    in its own thread (its errors are not the user's), and ``StartAborted`` is raised here at once.

    The SparkContext is thereby made outside the main thread, so PySpark installs no SIGINT handler of
    its own (it would cancel every Spark job and raise KeyboardInterrupt in whatever the main thread does)."""
    start = _Start()
    done = threading.Event()
    outcome: dict[str, Any] = {}

    def run() -> None:
        _starting.start = start
        try:
            outcome["deployment"] = SparkDeployment(spark_conf, parallelism, app_name, needs)
        except BaseException as e:  # noqa: BLE001 - raised in the caller's thread, unless the start was given up
            outcome["error"] = e
            if start.aborted.is_set() and start.launched_any:
                try:
                    _forget_context()  # PySpark's handles on the killed JVM: a later start makes a new one
                except Exception:  # noqa: BLE001
                    pass
        finally:
            done.set()

    if interrupted():
        abandon_prestart()
        raise StartAborted("Spark's start was given up before it began")
    thread = threading.Thread(target=run, name="streamjob-spark-start", daemon=True)
    thread.start()
    while not done.wait(poll_s):
        if interrupted():
            import warnings

            # PySpark's SparkContext, failing on the killed JVM, warns that it could not stop it cleanly.
            warnings.filterwarnings("ignore", message="Unable to cleanly shutdown Spark JVM", category=RuntimeWarning)
            start.abort()
            abandon_prestart()
            done.wait(5.0)  # its py4j call fails at once on the closed socket (a JVM not ours: abandoned)
            raise StartAborted("Spark's start was given up")
    if "error" in outcome:
        abandon_prestart()  # a JVM launched for a start that failed before taking it serves nothing now
        raise outcome["error"]
    return outcome["deployment"]


def _take_prestarted(launch: dict[str, str]) -> Any:
    global _prestarted
    with _prestart_lock:
        prestarted, _prestarted = _prestarted, None
    return prestarted.take(launch) if prestarted is not None else None


class _Py4JRootRecords(logging.Filter):
    """py4j logs a call to a JVM that died (``logging.exception("Exception while sending command.")``)
    through the root logger: with no handler configured, Python's last-resort handler printed its whole
    traceback to the user's terminal. The job's own one line says what happened (the JVM exited, and
    what the job does about it); py4j's own loggers (``py4j.*``) are left as they are."""

    def filter(self, record: logging.LogRecord) -> bool:
        return f"{os.sep}py4j{os.sep}" not in record.pathname


_PY4J_ROOT_RECORDS = _Py4JRootRecords()


def _launch_gateway(launch: dict[str, str], launched: Any = None) -> Any:
    """A JVM with Spark's gateway; ``launched(process)`` is told its process as soon as it exists (the
    prestart's, so an interrupted run can kill it). In a start of ``start_deployment``, that start adopts it."""
    logging.getLogger().addFilter(_PY4J_ROOT_RECORDS)  # once: a filter is kept in a list only once
    start = _current_start()
    if start is not None:
        start.check()
    mark("jvm launch")
    process = _start_gateway_process(launch)
    if process is None:  # not the plain pip-installed PySpark: its own launcher, as always
        from pyspark import SparkConf
        from pyspark.java_gateway import launch_gateway

        gateway = launch_gateway(SparkConf(loadDefaults=False).setAll(launch.items()))
        proc = getattr(gateway, "proc", None)
        if proc is not None:
            if launched is not None:
                launched(proc)
            if start is not None:
                start.adopt(proc)
    else:
        if launched is not None:
            launched(process[0])
        if start is not None:
            try:
                start.adopt(process[0])
            except StartAborted:
                shutil.rmtree(process[2], ignore_errors=True)  # its connection-info folder: never read now
                raise
        gateway = _connect_gateway(*process)
    mark("jvm up")
    return gateway


# The classes PySpark's own launch_gateway imports into the gateway's JVM view (PySpark 4.x;
# tests/test_local_spark.py checks the installed PySpark still imports exactly these).
PYSPARK_JAVA_IMPORTS = (
    "org.apache.spark.SparkConf",
    "org.apache.spark.api.java.*",
    "org.apache.spark.api.python.*",
    "org.apache.spark.ml.python.*",
    "org.apache.spark.mllib.api.python.*",
    "org.apache.spark.resource.*",
    "org.apache.spark.sql.Encoders",
    "org.apache.spark.sql.OnSuccessCall",
    "org.apache.spark.sql.functions",
    "org.apache.spark.sql.classic.*",
    "org.apache.spark.sql.api.python.*",
    "org.apache.spark.sql.hive.*",
    "scala.Tuple2",
)


def _start_gateway_process(launch: dict[str, str]) -> tuple[Any, str, str] | None:
    """Start Spark's gateway JVM as PySpark's ``launch_gateway`` does, but before PySpark is imported
    (~0.15 s that now overlaps the JVM's start). (process, connection-info file, its folder), or None
    where PySpark's own launcher should decide (a SPARK_HOME of the user's, extra submit arguments,
    a gateway already given, Windows)."""
    if os.name != "posix" or any(k in os.environ for k in ("PYSPARK_GATEWAY_PORT", "PYSPARK_SUBMIT_ARGS",
                                                            "SPARK_TESTING", "SPARK_HOME")):
        return None
    import importlib.util
    import subprocess
    import tempfile

    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        return None
    home = list(spec.submodule_search_locations)[0]
    submit = os.path.join(home, "bin", "spark-submit")
    if not (os.path.isfile(submit) and os.path.isdir(os.path.join(home, "jars"))):
        return None
    direct = spark_launch.gateway_command(home, launch)  # the JVM's own command: no scripts, no launcher JVM
    if direct is not None:
        command, env = direct
    else:
        command, env = [submit], dict(os.environ)
        for k, v in launch.items():
            command += ["--conf", f"{k}={v}"]
        command.append("pyspark-shell")
    folder = tempfile.mkdtemp()
    info = os.path.join(folder, "connection-info")
    env.update({"SPARK_CONNECT_MODE": "0", "_PYSPARK_DRIVER_CONN_INFO_PATH": info})
    # stdin is a pipe: the gateway server exits when it closes (this process ends, however it ends).
    quiet = not spark_log.show_banner()
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, env=env, stderr=subprocess.PIPE if quiet else None,
                            preexec_fn=_jvm_preexec)
    if quiet:
        threading.Thread(target=_relay_stderr, args=(proc.stderr,), name="spark-jvm-stderr", daemon=True).start()
    return proc, info, folder


def _jvm_preexec() -> None:
    """In the JVM's process before it executes spark-submit; the Python workers it starts inherit it all.

    A process group of its own: a signal sent to the driver's process group (the terminal's Ctrl-C,
    ``kill -TERM -PGID``, ``timeout``, a supervisor stopping a process group) reaches the driver alone,
    which stops the job gracefully; the JVM and the workers must live on to drain it. Were they to get
    the SIGTERM too, the JVM would exit and the workers die (Spark stops its workers with SIGTERM, so
    they cannot ignore it), each a failure and a restart before the stop. They still end with the
    driver: the JVM exits when its stdin (a pipe from the driver) closes, stopping its workers, and a
    task whose job manager is gone ends. SIGINT stays ignored too (a Ctrl-C sent to the JVM's own
    pid), and SIGTTOU (a JVM of ``-v`` writing to a terminal set to ``tostop`` from a group that is not
    the foreground one)."""
    import signal

    os.setpgid(0, 0)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTTOU, signal.SIG_IGN)


def _relay_stderr(stream: Any) -> None:
    """The JVM's stderr, line by line, to ours without its start-up banner (`-v` shows it)."""
    out = getattr(sys.stderr, "buffer", None)
    try:
        for raw in iter(stream.readline, b""):
            if spark_log.is_banner(raw.decode("utf-8", "replace")):
                continue
            try:
                if out is not None:
                    out.write(raw)
                    out.flush()
                else:
                    sys.stderr.write(raw.decode("utf-8", "replace"))
            except (OSError, ValueError):
                pass  # our stderr is gone (closed at exit): the JVM's lines still have to be read
    except (OSError, ValueError):
        pass


def _connect_gateway(proc: Any, info: str, folder: str) -> Any:
    """The py4j gateway to the started JVM, as PySpark's ``launch_gateway`` makes it."""
    import shutil
    import struct
    import time

    import py4j.clientserver  # noqa: F401 - loaded with PySpark while the JVM starts
    import pyspark  # noqa: F401

    try:
        while proc.poll() is None and not os.path.isfile(info):
            time.sleep(0.01)  # PySpark polls every 0.1 s
        if not os.path.isfile(info):
            raise ClusterError(f"Spark's JVM exited (code {proc.returncode}) before it started its gateway")
        with open(info, "rb") as f:
            port = struct.unpack("!i", f.read(4))[0]
            (length,) = struct.unpack("!i", f.read(4))
            secret = f.read(length).decode("utf-8")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    gateway = _gateway_client(port, secret)
    gateway.proc = proc
    return gateway


def _gateway_client(port: int, secret: str) -> Any:
    """A py4j gateway to a Spark JVM's gateway server at ``port``, as PySpark's ``launch_gateway`` makes it."""
    from py4j.clientserver import ClientServer, JavaParameters, PythonParameters
    from py4j.java_gateway import GatewayParameters, JavaGateway, java_import

    if os.environ.get("PYSPARK_PIN_THREAD", "true").lower() == "true":
        gateway = ClientServer(java_parameters=JavaParameters(port=port, auth_token=secret, auto_convert=True),
                               python_parameters=PythonParameters(port=0, eager_load=False))
    else:
        gateway = JavaGateway(gateway_parameters=GatewayParameters(port=port, auth_token=secret, auto_convert=True))
    for name in PYSPARK_JAVA_IMPORTS:
        java_import(gateway.jvm, name)
    return gateway


def root_cause(error: BaseException) -> str:
    """One line for a user: a Java exception's innermost cause (py4j's own text starts with "An error
    occurred while calling ..." and goes on with the whole Java stack trace)."""
    java = getattr(error, "java_exception", None)
    try:
        while java is not None and java.getCause() is not None:
            java = java.getCause()
        text = java.toString() if java is not None else ""
    except Exception:  # noqa: BLE001 - the gateway itself may be gone
        text = ""
    lines = [line.strip() for line in (text or str(error)).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__


def _end_start(processes: list[Any]) -> str | None:
    """After a failed start: how its JVM ended ("killed by signal 9"), waiting a moment for the process of
    a JVM whose connection was lost (its sockets close before it has exited); one still running after
    that (Spark failed in it) is killed with its children, and None returned."""
    import subprocess

    how = None
    for process in processes:
        try:
            code = process.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            kill_tree(process)
            continue
        how = describe_exit(code)
    return how


def _first_line(error: BaseException) -> str:
    for line in (str(error) or type(error).__name__).splitlines():
        if line.strip():
            return line.strip()[:500]
    return type(error).__name__


def describe_exit(code: int) -> str:
    """A process's end as Popen reports it: "killed by signal 9", "exit code 1"."""
    return f"killed by signal {-code}" if code < 0 else f"exit code {code}"


def _gateway_port(gateway: Any) -> int | None:
    for attr in ("java_parameters", "gateway_parameters"):  # ClientServer, JavaGateway
        params = getattr(gateway, attr, None)
        if params is not None and getattr(params, "port", None):
            return int(params.port)
    return None


def _lost_gateway(error: BaseException) -> bool:
    """Whether an error of a py4j call is the connection to the JVM failing (not an error in the JVM)."""
    from py4j.protocol import Py4JJavaError, Py4JNetworkError

    seen = 0
    e: BaseException | None = error
    while e is not None and seen < 10:
        if isinstance(e, Py4JJavaError):
            return False  # the JVM answered: it is alive
        if isinstance(e, (Py4JNetworkError, ConnectionError, EOFError)):
            return True
        e, seen = e.__cause__ or e.__context__, seen + 1
    return False


def _forget_context() -> None:
    """Reset PySpark's class-level handles on a JVM that is gone. PySpark keeps one gateway per
    process for good (``SparkContext.stop`` leaves it in place for the next context), so a new
    context would otherwise be made on the dead one."""
    from pyspark import SparkContext

    with SparkContext._lock:
        old, gateway = SparkContext._active_spark_context, SparkContext._gateway
        SparkContext._active_spark_context = None
        SparkContext._gateway = None
        SparkContext._jvm = None
    session = sys.modules.get("pyspark.sql.session")
    if session is not None:  # a SparkSession the job made holds the old context
        session.SparkSession._instantiatedSession = None
        session.SparkSession._activeSession = None
    if old is not None:
        accumulators = getattr(old, "_accumulatorServer", None)
        if accumulators is not None:
            try:
                accumulators.shutdown()
            except Exception:  # noqa: BLE001 - a Python socket server; nothing depends on its end
                pass
            old._accumulatorServer = None
        old._jsc = None  # stop() would ask the dead JVM (and warn): nothing is left to stop there
    if gateway is not None:
        try:
            gateway.shutdown()  # its connections and the Python-side callback server; the JVM is gone
        except Exception:  # noqa: BLE001
            pass


class SparkDeployment:
    """The SparkContext a job runs on, created (or reused) for the job's parallelism."""

    def __init__(self, spark_conf: dict[str, str], parallelism: int, app_name: str, needs: SlotNeeds | None = None):
        """``parallelism``: the slots the barrier stage takes; ``needs``: where they come from (the job
        graph's slot sharing groups), for the error when the master has fewer."""
        self.parallelism = parallelism
        self.needs = needs or uniform(parallelism)
        self.task_modules: tuple[str, ...] = ()  # what the job's operators import besides (factory.task_modules)
        self._spark = None
        self._claim: session.Claim | None = None  # the session cluster this deployment runs on
        self.session_note: str | None = None  # for the user: on the session cluster, or why not
        self._app_name = app_name
        conf = dict(spark_conf)
        from pyspark import SparkContext

        # A context already running in this process (a SparkSession the user made, a notebook) is reused.
        active = SparkContext._active_spark_context
        defaulted = "spark.master" not in conf
        if (active is not None and defaulted and getattr(active, "_streamjob_default_local", False)
                and (_local_slots(active.master) or parallelism) < parallelism):
            # The embedded local[N] Spark an earlier job of this program started (no master chosen) has
            # fewer slots than this job needs: it is started again with as many (as PyFlink's local
            # mini cluster runs a later job at a higher parallelism).
            active.stop()
            active = None
        if active is not None and defaulted:
            self._spark = active
            self.master = active.master
        else:
            self.master = conf.pop("spark.master", None) or f"local[{parallelism}]"
        self._conf = conf  # what a new JVM is started with after this one died
        self.local = is_local(self.master)
        self._default_local = defaulted and self.local and (  # ours to grow (above)
            self._spark is None or getattr(self._spark, "_streamjob_default_local", False))
        slots = _local_slots(self.master)
        if slots is not None and slots < parallelism:
            raise NotEnoughSlotsError(
                f"not enough slots: the job needs {self.needs.describe()}, but master {self.master} has {slots}; "
                f"use --master local[{parallelism}] (spark.master; without it local Spark gets the slots the job "
                f"needs) or {self.needs.lower()}"
            )
        if self._spark is None:
            try:  # a master that cannot work is one line now, not a minute of the JVM's retries
                spark_log.check_master_syntax(self.master)
                spark_log.probe_standalone_master(self.master)
            except spark_log.MasterURLError as e:
                raise ClusterError(str(e)) from None
            check_java()
            self._spark = self._create(conf, app_name)
            if self.master.startswith("k8s://"):
                self._check_registered_slots()
        else:
            _prepare_environment(self.master, conf)

    def _create(self, conf: dict[str, str], app_name: str, launched: Any = None) -> Any:
        """A SparkContext, not a SparkSession: the job needs only the context, and the SQL session's
        start-up (catalog, SQL configuration, its imports) cost ~2 s more before the first record."""
        from pyspark import SparkConf, SparkContext

        _prepare_environment(self.master, conf)
        if SparkContext._gateway is None and self.local:
            claim = session.claim(self.master, conf, _gateway_client)
            if isinstance(claim, session.Claim):
                return self._create_on_session(claim, conf, app_name)
            if claim is not None:
                self.session_note = f"{claim}: this run starts a Spark JVM of its own"
        global _chosen_cds
        with _prestart_lock:
            prestarted, chosen, _chosen_cds = _prestarted, _chosen_cds, None
        # Options the prestart chose are used as chosen: choosing again would find this run's own claim
        # on writing the archive and take it for another run's.
        cds = prestarted.cds_options if prestarted is not None else chosen if chosen is not None \
            else class_data_sharing_options() if self.local else ""
        start = _current_start()
        if start is not None and "ArchiveClassesAtExit=" in cds:
            start.archive_claim = cds.split("ArchiveClassesAtExit=", 1)[1].split()[0]
        settings = spark_settings(conf, self.master, cds)
        gateway = None
        if SparkContext._gateway is None:
            gateway = _take_prestarted(_launch_settings(settings))
            if gateway is None:
                try:
                    gateway = _launch_gateway(_launch_settings(settings), launched)
                except StartAborted:
                    raise
                except Exception as e:  # py4j / JVM launch problems
                    raise ClusterError(f"could not start Spark with master {self.master}: {e}") from e
        spark_conf = SparkConf().setAppName(app_name)
        for k, v in settings.items():
            spark_conf.set(k, v)
        _light_numpy_converters()
        mark("spark context start")
        try:
            if SparkContext._active_spark_context is None:
                sc = SparkContext(conf=spark_conf, gateway=gateway)
            else:
                sc = SparkContext.getOrCreate(spark_conf)
        except Exception as e:  # py4j / JVM launch problems
            raise ClusterError(f"could not start Spark with master {self.master}: {root_cause(e)}") from e
        mark("spark context")
        level = spark_log.level()
        if self.local or level:
            sc.setLogLevel(level or spark_log.DEFAULT_LOCAL_LEVEL)
        if self._default_local:
            sc._streamjob_default_local = True
        return sc

    def _create_on_session(self, claim: session.Claim, conf: dict[str, str], app_name: str) -> Any:
        """A SparkContext in the session cluster's JVM (``session``), the run's tasks given its working
        directory and environment; stopped as this process exits (``end_session``)."""
        from pyspark import SparkConf, SparkContext

        import atexit

        mark("session cluster taken")
        self._claim = claim
        self.session_note = f"On the session cluster (its JVM: pid {claim.session.jvm})"
        atexit.register(self.end_session)
        spark_conf = SparkConf().setAppName(app_name)
        for k, v in {**spark_settings(conf, self.master, ""), **claim.task_settings()}.items():
            spark_conf.set(k, v)
        _light_numpy_converters()
        mark("spark context start")
        try:
            try:
                sc = SparkContext(conf=spark_conf, gateway=claim.gateway)
            except Exception as e:  # noqa: BLE001
                if "Only one SparkContext" not in str(e) or not session.stop_left_behind(claim.gateway):
                    raise
                # A killed run's context, which the keeper had not stopped yet: stopped, and this one made.
                mark("session context left behind stopped")
                sc = SparkContext(conf=spark_conf, gateway=claim.gateway)
        except Exception as e:  # noqa: BLE001 - its JVM went away as it started
            # PySpark's handles reset without _forget_context, whose gateway.shutdown() would end the
            # session's gateway server for every later run.
            self.end_session()
            raise ClusterError(f"could not start Spark with master {self.master} on the session cluster: "
                               f"{root_cause(e)}") from e
        mark("spark context")
        level = spark_log.level()
        sc.setLogLevel(level or spark_log.DEFAULT_LOCAL_LEVEL)
        if self._default_local:
            sc._streamjob_default_local = True
        return sc

    def end_session(self) -> None:
        """As this process exits (``atexit``): the SparkContext on the session cluster stopped, whichever of
        the program's jobs made it (later jobs of a program reuse it, or start it again with more slots, as
        on a JVM of its own: all while this process holds the session), and the session left to the next
        run. Nothing when the job ran on a JVM of its own."""
        claim, self._claim = self._claim, None
        if claim is None:
            return
        from pyspark import SparkContext

        current = SparkContext._gateway is claim.gateway
        claim.release(SparkContext._active_spark_context if current else None)
        if current:
            with SparkContext._lock:  # the next context claims the session anew, or launches a JVM
                SparkContext._gateway = None
                SparkContext._jvm = None
            try:
                claim.gateway.close()  # its connections only: shutdown() would end the session's gateway server
            except Exception:  # noqa: BLE001
                pass

    @property
    def spark_context(self) -> Any:
        return self._spark

    # -- the JVM's life ---------------------------------------------------------------------------
    # The JVM is a process like any task: an out-of-memory kill or a crash of it must be noticed
    # and recovered. It is watched as a process (the gateway's Popen), never with a py4j call:
    # a call into a JVM that stopped answering would block the caller.
    def _gateway_process(self) -> Any:
        gateway = getattr(self._spark, "_gateway", None)
        return getattr(gateway, "proc", None)

    def jvm_exit(self, stage_error: BaseException | None = None) -> str | None:
        """How this deployment's JVM ended ("killed by signal 9"), None while it runs. With the error
        the stage ended with: a lost connection to the JVM waits a moment for its process to end (its
        sockets close before it has exited), and a JVM this process did not launch (a gateway handed
        over by spark-submit, PYSPARK_GATEWAY_PORT), otherwise not watched, has its port tried."""
        lost = stage_error is not None and _lost_gateway(stage_error)
        proc = self._gateway_process()
        if proc is not None:
            import subprocess

            try:
                code = proc.wait(timeout=2.0) if lost else proc.poll()
            except subprocess.TimeoutExpired:
                code = None
            return None if code is None else getattr(proc, "how", None) or describe_exit(code)
        port = _gateway_port(getattr(self._spark, "_gateway", None)) if lost else None
        if port is None:
            return None
        import socket

        try:
            socket.create_connection(("127.0.0.1", port), timeout=2.0).close()
            return None
        except ConnectionRefusedError:
            return "its gateway refuses connections"
        except OSError:
            return None

    @property
    def jvm_restartable(self) -> bool:
        """A new JVM can take over: local Spark, whose JVM this process launched (its tasks are its
        children). On a cluster master the JVM is the Spark driver itself; a new one would be a new
        application without the job's executors."""
        return self.local and self._gateway_process() is not None

    def restart_jvm(self) -> None:
        """Start a new JVM and SparkContext after the old JVM died (``jvm_restartable`` only). Raises
        ``JVMStartError`` when they do not start (the new JVM died while it started, Java is gone, ...);
        nothing of that start is left running, and a later call starts anew."""
        import warnings

        mark("jvm restart")
        claim, self._claim = self._claim, None
        if claim is not None:
            claim.release()  # the session's JVM died: the run goes on with a JVM of its own
        _forget_context()
        processes: list[Any] = []
        try:
            with warnings.catch_warnings():
                # PySpark's SparkContext, failing on a JVM that died under it, warns it could not stop it cleanly.
                warnings.filterwarnings("ignore", message="Unable to cleanly shutdown Spark JVM",
                                        category=RuntimeWarning)
                self._spark = self._create(dict(self._conf), self._app_name, launched=processes.append)
        except Exception as e:  # noqa: BLE001 - whatever it was, this start is over
            how = _end_start(processes)
            try:
                _forget_context()  # PySpark's handles on the JVM of the failed start
            except Exception:  # noqa: BLE001
                pass
            if how is not None:
                raise JVMStartError(f"the new Spark JVM exited while it started ({how})", how) from e
            raise JVMStartError(f"a new Spark JVM could not start: {_first_line(e)}") from e

    def slot_report(self) -> SlotReport:
        """What the cluster offers the barrier stage now (for the error when it is not enough)."""
        sc = self.spark_context
        conf = sc.getConf()
        try:
            registered = max(0, len(sc._jsc.sc().statusTracker().getExecutorInfos()) - 1)  # the driver is listed too
        except Exception:  # noqa: BLE001 - only the message loses a detail
            registered = -1
        cores = int(conf.get("spark.executor.cores", "1"))
        return SlotReport(self.parallelism, self.master, registered, int(conf.get("spark.executor.instances", "0")),
                          cores, max(1, cores // int(conf.get("spark.task.cpus", "1"))), sc.defaultParallelism,
                          _readable(conf.get("spark.scheduler.maxRegisteredResourcesWaitingTime", "")),
                          conf.get("spark.kubernetes.namespace", ""), sc.applicationId, self.needs)

    def _check_registered_slots(self) -> None:
        """Spark on Kubernetes waited (up to kubernetes.executor.scheduling-timeout) for every executor to
        register before the session started; if slots are still missing, say which now instead of letting
        the barrier stage wait as long again."""
        if float(self.spark_context.getConf().get("spark.scheduler.minRegisteredResourcesRatio", "0")) < 1.0:
            return  # the user chose to start with fewer executors
        report = self.slot_report()
        if 0 <= report.registered * report.slots_per_executor < self.parallelism:
            self._spark.stop()  # releases the executor pods that did come
            raise NotEnoughSlotsError(report.message())

    # -- rescaling in place (rescale.py) ------------------------------------------------------------
    def slot_limit(self) -> int | None:
        """The most slots a rescaled job can have here: local[N]'s N, a standalone cluster's cores; None on
        Kubernetes, where ``resize`` asks for executor pods."""
        if self.local:
            return _local_slots(self.master)
        if self.master.startswith("k8s://"):
            return None
        return self.spark_context.defaultParallelism

    def _slots_per_executor(self) -> int:
        conf = self.spark_context.getConf()
        return max(1, int(conf.get("spark.executor.cores", "1")) // int(conf.get("spark.task.cpus", "1")))

    def executors(self) -> int | None:
        """Executor pods the job needs (Spark on Kubernetes), None elsewhere."""
        if not self.master.startswith("k8s://"):
            return None
        return -(-self.parallelism // self._slots_per_executor())

    def resize(self, parallelism: int, needs: SlotNeeds, timeout: float = 120.0) -> None:
        """The next stages run ``parallelism`` tasks. On Kubernetes: ask Spark for as many executor pods as
        they need and wait (up to ``timeout``) until they registered, or let the ones beyond go (no stage
        runs now: every executor is idle). Raises NotEnoughSlotsError, changing nothing, when they do not come."""
        before = (self.parallelism, self.needs)
        self.parallelism, self.needs = parallelism, needs
        if not self.master.startswith("k8s://"):
            return
        try:
            sc = self.spark_context
            wanted = self.executors() or 0
            jsc = sc._jsc.sc()
            jsc.requestTotalExecutors(wanted, 0, sc._jvm.PythonUtils.toScalaMap(sc._jvm.java.util.HashMap()))
            conv = sc._jvm.scala.jdk.javaapi.CollectionConverters
            ids = [str(i) for i in conv.asJava(jsc.getExecutorIds())]
            if len(ids) > wanted:
                extra = sorted(ids, key=lambda i: int(i) if i.isdigit() else 0)[wanted:]
                jsc.killExecutors(conv.asScala(extra).toList())
                return
            deadline = time.monotonic() + timeout
            while True:
                report = self.slot_report()
                if report.registered * report.slots_per_executor >= parallelism:
                    return
                if time.monotonic() > deadline:
                    raise NotEnoughSlotsError(report.message())
                time.sleep(0.5)
        except BaseException:
            self.parallelism, self.needs = before
            raise

    def run_stage(self, job_id: str, description: str, graph_payload: bytes, jm_address: tuple[str, int],
                  attempt: int = 0) -> list[str]:
        """Run the barrier stage of the job manager's attempt ``attempt`` until every task returns (or
        the stage fails). The attempt travels with the stage's closure: Spark's own attemptNumber() is
        0 for every stage we submit, and a task of an earlier attempt must never join a later one."""
        sc = self.spark_context
        p = self.parallelism
        sc.setJobGroup(job_id, description, interruptOnCancel=True)
        local = self.local
        if self.task_modules:
            # For the task daemon, which loads them before it forks (pydaemon). Spark starts a daemon per
            # environment: only ever added to, so that a later job of the program keeps the running one.
            named = {m for m in sc.environment.get(PRELOAD_ENV, "").split(",") if m}
            sc.environment[PRELOAD_ENV] = ",".join(sorted(named | set(self.task_modules)))

        def run_partition(_: Any) -> Any:
            return _task_entry(graph_payload, jm_address, local, attempt)

        rdd = sc.parallelize(range(p), p).barrier().mapPartitions(run_partition)
        mark("stage submit")
        try:
            return rdd.collect()
        except Exception as e:
            text = str(e)
            if "BarrierJobSlotsNumberCheckFailed" in text or "SPARK-24819" in text:
                raise NotEnoughSlotsError(self.slot_report().message()) from None
            raise

    def cancel(self, job_id: str) -> None:
        try:
            self.spark_context.cancelJobGroup(job_id)
        except Exception:
            pass


def _light_numpy_converters() -> None:
    """PySpark's py4j converters of numpy values ask ``pyspark.testing.utils`` whether numpy is
    installed, at a Java call's first argument: that module loads pandas, pyarrow and PySpark's test
    helpers (~80 MB of the driver's memory, ~0.4 s). They are replaced by the same converters
    asking ``sys.modules``: a numpy value can only exist once numpy has been imported."""
    from py4j import protocol
    from pyspark.sql import types

    class NumpyScalarConverter(types.NumpyScalarConverter):
        def can_convert(self, obj: Any) -> bool:
            np = sys.modules.get("numpy")
            return np is not None and isinstance(obj, np.generic)

    class NumpyArrayConverter(types.NumpyArrayConverter):
        def can_convert(self, obj: Any) -> bool:
            np = sys.modules.get("numpy")
            return np is not None and isinstance(obj, np.ndarray) and obj.ndim == 1

    light = {types.NumpyScalarConverter: NumpyScalarConverter, types.NumpyArrayConverter: NumpyArrayConverter}
    protocol.INPUT_CONVERTER[:] = [light[type(c)]() if type(c) in light else c for c in protocol.INPUT_CONVERTER]


# How long a task waits for the others' addresses: a barrier stage starts its tasks together,
# and a task that fails to start reports it, so the job manager cancels the attempt long before.
_PEERS_TIMEOUT = 600.0


def _task_entry(graph_payload: bytes, jm_address: tuple[str, int], local: bool, attempt: int = 0) -> Any:
    """Body of one barrier task, in a Spark Python worker."""
    mark("task entry")
    import cloudpickle
    from pyspark import BarrierTaskContext

    from ..task.factory import task_modules
    from ..task.slot import SlotRuntime
    from .control import AttemptRefused, ControlClient
    from .pod import task_addresses

    mark("task imports")
    ctx = BarrierTaskContext.get()
    subtask = ctx.partitionId()
    if os.environ.get("STREAMJOB_TEST_FAULT"):  # tests only: a task that dies before it registers
        from ..task.faults import maybe_kill_early

        maybe_kill_early("task-start", subtask)
    control = ControlClient(tuple(jm_address), subtask, attempt)
    deployment: dict = {}
    try:
        # The job manager answers with what to restore, or refuses a task of an attempt that is over.
        deployment = control.wait_for("deploy")
        mark("task deployed")
        graph = cloudpickle.loads(graph_payload)
        # What its operators import (pandas: ~0.25 s) now, before the sources run, not with records in flight
        # (the daemon has loaded them already: pydaemon).
        for name in task_modules(graph.operators.values()):
            __import__(name)
        addresses = task_addresses(os.environ, local)
        slot = SlotRuntime(graph, subtask, host=addresses.bind, advertise_host=addresses.advertise, attempt=attempt,
                           control=control, deployment=deployment)
        mark("task slot ready")
    except AttemptRefused:
        # A straggler of an attempt the job manager gave up (a worker Spark started before it cancelled
        # the stage): it ends without a snapshot, an address or a report; nothing waits for its result.
        control.close()
        return
    except BaseException as e:
        import traceback

        from ..task.slot import RestoreError

        restore = isinstance(e, RestoreError)
        control.send({"type": "failed", "slot": subtask, "attempt": attempt, "operator": None,
                      "error_type": type(e).__name__,
                      "error": str(e) if restore else f"could not set up the task: {e}",
                      "traceback": traceback.format_exc(), "cause": "restore" if restore else "task",
                      "checkpoint": (deployment.get("restore") or {}).get("id")})
        control.close()
        raise
    # Every task learns the others' data addresses through the job manager (one control-channel
    # round trip; BarrierTaskContext.allGather costs ~1 s of start-up).
    control.send({"type": "address", "slot": subtask, "attempt": attempt, "address": list(slot.address)})
    peers = control.wait_for("peers", timeout=_PEERS_TIMEOUT)
    slot.connect([tuple(a) for a in peers["addresses"]])
    mark("task running")
    slot.run()
    yield json.dumps({"slot": subtask, "operators": slot.operator_metrics()})
