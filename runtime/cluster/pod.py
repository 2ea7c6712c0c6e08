"""Running in a Kubernetes pod: which addresses to bind and which to advertise, the Spark
configuration of Spark on Kubernetes (client mode: the driver runs in the job's pod), and the
termination message the job leaves behind.

The decisions are pure functions of (configuration, environment); the operator drives them
through configuration keys and the downward API (``POD_IP``, ``POD_NAME``, ``POD_NAMESPACE``).
The only I/O, reading the service account's namespace and writing the termination message,
stays at the edge. Local mode without ``POD_IP`` keeps everything on 127.0.0.1, as before.
"""

from __future__ import annotations

import json
import math
import os
import socket
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from ..config import ConfigError, Configuration, Options
from .spark_log import VERBOSE_ENV

POD_IP = "POD_IP"  # the downward API's status.podIP, set by the operator's pod spec
POD_NAME = "POD_NAME"
POD_NAMESPACE = "POD_NAMESPACE"
EXECUTOR_POD_IP = "SPARK_EXECUTOR_POD_IP"  # Spark sets it in its executor pods
IMAGE_ENV = "STREAMJOB_IMAGE"
SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
# The interface to listen on instead of all of them (Flink's jobmanager.bind-host / taskmanager.bind-host):
# for hosts with several interfaces, and for several pods' worth of jobs on one test host.
BIND_HOST = "STREAMJOB_BIND_HOST"
WILDCARD = "0.0.0.0"
LOOPBACK = "127.0.0.1"
# Spark's own ports on Kubernetes; fixed, so the job's headless Service can name them.
DRIVER_PORT = 7078
BLOCK_MANAGER_PORT = 7079
POD_RESULT_LINGER_MS = 60_000  # rest.result-linger in a pod when not configured: the operator reads it in time
BARRIER_CHECK_INTERVAL_MS = 5000
TERMINATION_MESSAGE_LIMIT = 4096  # bytes; the kubelet truncates longer messages
TRUNCATED = " [truncated]"


@dataclass(frozen=True)
class Addresses:
    bind: str  # the interface servers listen on
    advertise: str  # the address peers reach them at (never loopback outside local mode)


def is_local(master: str) -> bool:
    """Whether a Spark master runs everything in this process (``local``, ``local[N]``). Here, not
    in ``spark.py``, which imports this module."""
    return master.strip().startswith("local")


def host_address() -> str:
    """This host's address as other hosts see it: the source address of the default route
    (a UDP connect sends nothing); the hostname's address when there is no route."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 9))
            return s.getsockname()[0]
    except OSError:
        return socket.gethostbyname(socket.gethostname())


def spark_master(config: Configuration) -> str:
    return (config.get_string(Options.SPARK_MASTER) or "local").strip()


def driver_addresses(config: Configuration, environ: Mapping[str, str],
                     resolve: Callable[[], str] = host_address) -> Addresses:
    """Of the job manager's control server, the REST API and the Spark driver."""
    pod_ip = environ.get(POD_IP, "").strip()
    bind = environ.get(BIND_HOST, "").strip() or WILDCARD
    if pod_ip:
        return Addresses(bind, pod_ip)
    if not is_local(spark_master(config)):
        return Addresses(bind, config.get_string("spark.driver.host") or resolve())
    return Addresses(LOOPBACK, LOOPBACK)


def task_addresses(environ: Mapping[str, str], local: bool, resolve: Callable[[], str] = host_address) -> Addresses:
    """Of a task's data server, in its Spark Python worker (an executor pod, or the driver's pod in local mode)."""
    pod_ip = (environ.get(EXECUTOR_POD_IP) or environ.get(POD_IP) or "").strip()
    bind = environ.get(BIND_HOST, "").strip() or WILDCARD
    if pod_ip:
        return Addresses(bind, pod_ip)
    if not local:
        return Addresses(bind, resolve())
    return Addresses(LOOPBACK, LOOPBACK)


def is_wildcard(host: str) -> bool:
    return host in ("", WILDCARD, "::")


# -- Spark configuration ---------------------------------------------------------------------------
def spark_conf(config: Configuration, environ: Mapping[str, str], slots: int, driver: Addresses,
               namespace_file: str = SERVICE_ACCOUNT_NAMESPACE) -> dict[str, str]:
    """What the job hands Spark: derived settings, under the user's ``spark.*`` keys (those always win).
    ``slots``: what the job graph needs (``JobGraph.parallelism``: the largest parallelism of any operator,
    summed over slot sharing groups), not the job's default parallelism. The graph is built (the job file
    ran up to ``execute()``) before the SparkContext starts, so executors are sized for the real need."""
    user = config.spark_conf()
    if user.get("spark.dynamicAllocation.enabled", "false").strip().lower() == "true":
        raise ConfigError("spark.dynamicAllocation.enabled=true: a job runs as one barrier stage with a task per "
                          "slot for its whole life, and Spark refuses dynamic allocation in barrier mode; "
                          "size the executors with parallelism and kubernetes.executor.cores instead")
    derived = driver_spark_conf(environ, driver)
    if environ.get(VERBOSE_ENV):
        # `streamjob run -v` in the tasks too, on executors that do not inherit the driver's environment
        # (librdkafka's every line, a late worker's traceback).
        derived["spark.executorEnv." + VERBOSE_ENV] = "1"
    if spark_master(config).startswith("k8s://"):
        derived.update(kubernetes_spark_conf(config, environ, slots, namespace_file))
    return {**derived, **user}


def driver_spark_conf(environ: Mapping[str, str], driver: Addresses) -> dict[str, str]:
    if driver.bind == LOOPBACK:
        return {}  # local mode: SparkDeployment's loopback defaults
    conf = {"spark.driver.host": driver.advertise, "spark.driver.bindAddress": driver.bind}
    if environ.get(POD_IP, "").strip():
        conf.update({"spark.driver.port": str(DRIVER_PORT), "spark.driver.blockManager.port": str(BLOCK_MANAGER_PORT)})
    return conf


def kubernetes_spark_conf(config: Configuration, environ: Mapping[str, str], slots: int,
                          namespace_file: str = SERVICE_ACCOUNT_NAMESPACE) -> dict[str, str]:
    """Spark on Kubernetes in client mode: the driver is this pod; executor pods are owned by it."""
    image = (config.get_string("spark.kubernetes.container.image") or config.get_string(Options.K8S_IMAGE)
             or environ.get(IMAGE_ENV, "")).strip()
    if not image:
        raise ConfigError(f"Spark on Kubernetes needs the image of the executor pods: set {Options.K8S_IMAGE} "
                          f"(or spark.kubernetes.container.image) or the environment variable {IMAGE_ENV}")
    cores, per_executor = executor_slots(config)
    conf = {"spark.submit.deployMode": "client", "spark.kubernetes.container.image": image,
            "spark.executor.cores": str(cores), "spark.executor.instances": str(math.ceil(slots / per_executor)),
            "spark.dynamicAllocation.enabled": "false",
            # Spark waits this long for its driver pod to be Ready before creating executors, and logs an
            # ERROR when it is not (default 1 s). The job manager serves the readiness probe before Spark
            # starts, so the wait ends at the probe's next period; a pod not Ready by then is worth an ERROR.
            "spark.kubernetes.allocation.driver.readinessTimeout": "30s",
            **scheduling_conf(config)}
    namespace = (config.get_string(Options.K8S_NAMESPACE) or environ.get(POD_NAMESPACE, "")
                 or _read_text(namespace_file)).strip()
    if namespace:
        conf["spark.kubernetes.namespace"] = namespace
    if environ.get(POD_NAME, "").strip():
        # Executor pods get this pod as their owner: deleting the job's pod deletes them too.
        conf["spark.kubernetes.driver.pod.name"] = environ[POD_NAME].strip()
    template = config.get_string(Options.K8S_EXECUTOR_POD_TEMPLATE)
    if template:
        conf["spark.kubernetes.executor.podTemplateFile"] = template
    return conf


def requested_executors(conf: Mapping[str, str]) -> int | None:
    """Executor pods the job asks Spark on Kubernetes for (None on other masters): for /v1/job."""
    if not conf.get("spark.master", "").strip().startswith("k8s://"):
        return None
    try:
        return int(conf.get("spark.executor.instances", ""))
    except ValueError:
        return None


def executor_slots(config: Configuration) -> tuple[int, int]:
    """(cores, slots) of one executor: spark.executor.cores if given, else kubernetes.executor.cores."""
    key = "spark.executor.cores" if config.contains_key("spark.executor.cores") else Options.K8S_EXECUTOR_CORES
    cores = config.get_int(key)
    task_cpus = config.get_int("spark.task.cpus", 1) if config.contains_key("spark.task.cpus") else 1
    if cores < 1 or task_cpus < 1 or cores < task_cpus:
        raise ConfigError(f"configuration {key}: an executor needs at least one core per task "
                          f"(spark.task.cpus={task_cpus}), got {cores}")
    return cores, cores // task_cpus


def scheduling_conf(config: Configuration) -> dict[str, str]:
    """Fail within about ``kubernetes.executor.scheduling-timeout`` when executors do not come: the driver
    waits that long for all of them at start, and a barrier stage without enough slots is retried for
    that long (Spark's default: ~10 min, 40 checks 15 s apart)."""
    timeout = config.get_duration_ms(Options.K8S_SCHEDULING_TIMEOUT)
    if timeout <= 0:
        raise ConfigError(f"configuration {Options.K8S_SCHEDULING_TIMEOUT}: expected a positive duration, got "
                          f"{config.get(Options.K8S_SCHEDULING_TIMEOUT)!r}")
    interval = max(1000, min(BARRIER_CHECK_INTERVAL_MS, timeout))
    return {"spark.scheduler.minRegisteredResourcesRatio": "1.0",
            "spark.scheduler.maxRegisteredResourcesWaitingTime": f"{timeout}ms",
            "spark.scheduler.barrier.maxConcurrentTasksCheck.interval": f"{interval}ms",
            "spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures": str(max(1, math.ceil(timeout / interval)))}


def _read_text(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


# -- the job's final word -------------------------------------------------------------------------
def sigterm_ends_at_once(environ: Mapping[str, str]) -> bool:
    """In a pod, SIGTERM means the pod is going away (deleted, evicted, its node drained), and the
    operator starts a replacement from the latest checkpoint as soon as it sees that. A drain here
    would commit output the replacement then writes again, so the driver dies at once, as a lost
    driver does (Flink's job manager likewise does not stop its job on SIGTERM). Locally SIGTERM is a
    graceful stop, as Ctrl-C."""
    return bool(environ.get(POD_IP, "").strip())


def result_linger_ms(config: Configuration, environ: Mapping[str, str]) -> int:
    """How long the REST API keeps serving the final result: as configured; in a pod 60 s unless configured
    (the operator must not lose a stop-with-savepoint's path), locally 0 (``streamjob run`` exits promptly)."""
    if not config.contains_key(Options.REST_RESULT_LINGER) and environ.get(POD_IP, "").strip():
        return POD_RESULT_LINGER_MS
    return config.get_duration_ms(Options.REST_RESULT_LINGER)


def termination_log_path(config: Configuration, exists: Callable[[str], bool] = os.path.exists) -> str | None:
    """Where the termination message goes: the configured file (created if need be; empty: nowhere), else
    /dev/termination-log only if the kubelet mounted it (never create files in /dev on a laptop)."""
    path = (config.get_string(Options.K8S_TERMINATION_LOG) or "").strip()
    if config.contains_key(Options.K8S_TERMINATION_LOG):
        return path or None
    return path if path and exists(path) else None


def termination_message(result: dict[str, Any], limit: int = TERMINATION_MESSAGE_LIMIT) -> str:
    """The final result as JSON within ``limit`` bytes (Kubernetes' limit); the error's tail is cut first."""
    def dump(error: Any) -> str:
        return json.dumps({**result, "error": error}, separators=(",", ":"))

    error = result.get("error") or ""
    if not error or len(dump(error).encode()) <= limit:
        return dump(result.get("error"))
    lo, hi = 0, len(error)  # the longest head that fits: escaping makes bytes per character vary
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if len(dump(error[:mid] + TRUNCATED).encode()) <= limit else (lo, mid - 1)
    return dump(error[:lo] + TRUNCATED)


def write_termination_message(path: str, result: dict[str, Any]) -> None:
    with open(path, "w") as f:
        f.write(termination_message(result))
