"""The runtime ready for Kubernetes pods: addresses, Spark on Kubernetes, the final result, idempotent
savepoint triggers, the REST token from a Secret.

No Kubernetes cluster exists here: what Spark on Kubernetes is given is checked as the pure
functions of (configuration, environment) that derive it, for many cases. What can run here runs
for real: jobs on local Spark with ``POD_IP`` set (in a ``streamjob run`` subprocess, so the
variable never reaches this process's Spark), real sockets and HTTP, a real SIGTERM. ``POD_IP`` is
127.0.0.2: on Linux all of 127.0.0.0/8 reaches this host, so a server answers on both 127.0.0.1 and
127.0.0.2 only if it listens on every interface, and a URL with 127.0.0.2 was advertised, not defaulted.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import jsonschema
import psutil
import pytest

from conftest import run_cli
from jobs import counting
from streamjob.runtime.cluster import pod
from streamjob.runtime.cluster.executor import _rest_config
from streamjob.runtime.cluster.jobmanager import BindError, JobManager
from streamjob.runtime.cluster.pod import Addresses
from streamjob.runtime.cluster.rest import OPENAPI
from streamjob.runtime.cluster.spark import SlotReport
from streamjob.runtime.config import ConfigError, Configuration
from streamjob.runtime.graph.job_graph import JobDefinitionError

HERE = os.path.dirname(os.path.abspath(__file__))
LOOPBACK = Addresses("127.0.0.1", "127.0.0.1")
K8S = "k8s://https://kubernetes.default.svc"
POD = {"POD_IP": "10.4.0.7", "POD_NAME": "wordcount-driver", "POD_NAMESPACE": "jobs"}
TOKEN = "pod-token"


def _can_bind(host: str) -> bool:
    try:
        with socket.create_server((host, 0)):
            return True
    except OSError:
        return False


needs_loopback_range = pytest.mark.skipif(not _can_bind("127.0.0.2"), reason="needs 127.0.0.0/8 on loopback (Linux)")


def free_port() -> int:
    with socket.create_server(("0.0.0.0", 0)) as s:
        return s.getsockname()[1]


def request(url: str, method: str = "GET", body: dict | None = None, token: str | None = TOKEN,
            timeout: float = 10) -> tuple[int, dict]:
    req = urllib.request.Request(url, data=None if body is None else json.dumps(body).encode(), method=method)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    if body is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def conforms(doc: dict, schema: str) -> None:
    jsonschema.validate(doc, {"$ref": f"#/components/schemas/{schema}", "components": OPENAPI["components"]},
                        cls=jsonschema.Draft202012Validator)


def conf(**values) -> Configuration:
    return Configuration({k.replace("__", "."): v for k, v in values.items()})


# -- addresses (pure) ---------------------------------------------------------------------------
def test_local_mode_without_pod_ip_stays_on_loopback():
    for config in (Configuration(), Configuration({"spark.master": "local[4]"})):
        assert pod.driver_addresses(config, {}) == LOOPBACK
        assert pod.spark_conf(config, {}, 4, LOOPBACK) == config.spark_conf()
        assert _rest_config(config, LOOPBACK, {}) == ("127.0.0.1", 0, "")
        assert pod.result_linger_ms(config, {}) == 0
    assert pod.task_addresses({}, local=True) == LOOPBACK


def test_in_a_pod_everything_binds_all_interfaces_and_advertises_the_pod_ip():
    config = Configuration({"spark.master": "local[2]"})
    driver = pod.driver_addresses(config, POD)
    assert driver == Addresses("0.0.0.0", "10.4.0.7")
    assert pod.task_addresses(POD, local=True) == Addresses("0.0.0.0", "10.4.0.7")
    # In an executor pod Spark sets SPARK_EXECUTOR_POD_IP; that is the task's address.
    assert pod.task_addresses({"SPARK_EXECUTOR_POD_IP": "10.4.1.9", "POD_IP": "10.4.0.7"}, local=False) \
        == Addresses("0.0.0.0", "10.4.1.9")
    assert pod.spark_conf(config, POD, 2, driver) == {
        "spark.master": "local[2]", "spark.driver.host": "10.4.0.7", "spark.driver.bindAddress": "0.0.0.0",
        "spark.driver.port": "7078", "spark.driver.blockManager.port": "7079"}
    given = Configuration({"spark.driver.port": "7001", "spark.driver.blockManager.port": "7002"})
    derived = pod.spark_conf(given, POD, 2, driver)
    assert derived["spark.driver.port"] == "7001" and derived["spark.driver.blockManager.port"] == "7002"
    # REST: not configured, it listens where the job manager does; configured, as given.
    assert _rest_config(Configuration(), driver, POD) == ("0.0.0.0", 0, "")
    assert _rest_config(conf(rest__address="0.0.0.0:8081"), driver, POD) == ("0.0.0.0", 8081, "")
    assert pod.result_linger_ms(Configuration(), POD) == 60_000
    assert pod.result_linger_ms(Configuration({"rest.result-linger": "5 s"}), POD) == 5000
    assert pod.result_linger_ms(Configuration({"rest.result-linger": "0"}), POD) == 0


def test_bind_host_narrows_listening_to_one_interface():
    environ = {**POD, "STREAMJOB_BIND_HOST": "10.4.0.7"}
    config = Configuration({"spark.master": "local[2]"})
    driver = pod.driver_addresses(config, environ)
    assert driver == Addresses("10.4.0.7", "10.4.0.7")
    assert pod.task_addresses(environ, local=True) == Addresses("10.4.0.7", "10.4.0.7")
    assert pod.spark_conf(config, environ, 2, driver)["spark.driver.bindAddress"] == "10.4.0.7"
    assert _rest_config(conf(rest__address="0.0.0.0:8081"), driver, environ) == ("10.4.0.7", 8081, "")


def test_remote_master_without_pod_ip_advertises_the_hosts_address_never_loopback():
    config = Configuration({"spark.master": "spark://master:7077"})
    driver = pod.driver_addresses(config, {}, resolve=lambda: "192.0.2.7")
    assert driver == Addresses("0.0.0.0", "192.0.2.7")
    assert pod.spark_conf(config, {}, 2, driver) == {"spark.master": "spark://master:7077",
                                                     "spark.driver.host": "192.0.2.7",
                                                     "spark.driver.bindAddress": "0.0.0.0"}
    named = Configuration({"spark.master": "spark://master:7077", "spark.driver.host": "driver.example"})
    assert pod.driver_addresses(named, {}, resolve=lambda: "192.0.2.7").advertise == "driver.example"
    assert pod.task_addresses({}, local=False, resolve=lambda: "192.0.2.8") == Addresses("0.0.0.0", "192.0.2.8")
    socket.inet_aton(pod.host_address())  # a real IPv4 address of this host


# -- Spark on Kubernetes (pure) ---------------------------------------------------------------------
def k8s(parallelism: int = 4, environ: dict | None = None, namespace_file: str = "/nonexistent", **values) -> dict:
    config = Configuration({"spark.master": K8S, "kubernetes.container.image": "registry/streamjob:1",
                            **{k.replace("__", ".").replace("_", "-"): v for k, v in values.items()}})
    environ = POD if environ is None else environ
    driver = pod.driver_addresses(config, environ, resolve=lambda: "192.0.2.7")
    return pod.spark_conf(config, environ, parallelism, driver, namespace_file=namespace_file)


def test_kubernetes_client_mode_conf():
    derived = k8s(5, kubernetes__executor__pod_template_file="/etc/streamjob/executor.yaml")
    assert derived == {
        "spark.master": K8S, "spark.submit.deployMode": "client",
        "spark.kubernetes.container.image": "registry/streamjob:1", "spark.kubernetes.namespace": "jobs",
        "spark.kubernetes.driver.pod.name": "wordcount-driver",
        "spark.kubernetes.executor.podTemplateFile": "/etc/streamjob/executor.yaml",
        "spark.executor.cores": "1", "spark.executor.instances": "5", "spark.dynamicAllocation.enabled": "false",
        "spark.driver.host": "10.4.0.7", "spark.driver.bindAddress": "0.0.0.0",
        "spark.driver.port": "7078", "spark.driver.blockManager.port": "7079",
        "spark.kubernetes.allocation.driver.readinessTimeout": "30s",
        # 2 min (the default): the driver waits that long for every executor; a barrier stage without
        # enough slots is retried 24 times 5 s apart instead of Spark's 40 x 15 s.
        "spark.scheduler.minRegisteredResourcesRatio": "1.0",
        "spark.scheduler.maxRegisteredResourcesWaitingTime": "120000ms",
        "spark.scheduler.barrier.maxConcurrentTasksCheck.interval": "5000ms",
        "spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures": "24"}


@pytest.mark.parametrize("parallelism, values, cores, instances", [
    (5, {}, "1", "5"),
    (5, {"kubernetes__executor__cores": 2}, "2", "3"),
    (4, {"kubernetes__executor__cores": "2"}, "2", "2"),
    (1, {"kubernetes__executor__cores": 8}, "8", "1"),
    (5, {"kubernetes__executor__cores": 2, "spark__executor__cores": "4"}, "4", "2"),  # spark.* wins
    (6, {"spark__executor__cores": "4", "spark__task__cpus": "2"}, "4", "3"),  # 2 slots per executor
    (6, {"spark__executor__instances": "10"}, "1", "10"),  # the user's count wins
])
def test_executor_count_covers_the_parallelism(parallelism, values, cores, instances):
    derived = k8s(parallelism, **values)
    assert (derived["spark.executor.cores"], derived["spark.executor.instances"]) == (cores, instances)


def test_executors_are_sized_from_the_slots_the_job_graph_needs():
    """spec.parallelism (the job's default) is 2, but a map asks for 5: the driver builds the job graph
    before it starts Spark, and asks for executors for the 5 slots the graph needs."""
    from streamjob.runtime import StreamExecutionEnvironment
    from streamjob.runtime.connectors import DiscardingSink
    from streamjob.runtime.graph.job_graph import build_job_graph

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.from_collection([1]).set_parallelism(1).map(str).set_parallelism(5).sink_to(DiscardingSink())
    graph = build_job_graph(env._transformations, env.get_config(), "sizing")
    assert (graph.default_parallelism, graph.parallelism) == (2, 5)
    for cores, executors in ((1, 5), (2, 3), (8, 1)):
        derived = k8s(graph.parallelism, kubernetes__executor__cores=cores)
        assert derived["spark.executor.instances"] == str(executors)
        assert pod.requested_executors(derived) == executors
    assert pod.requested_executors(k8s(5, spark__executor__instances="7")) == 7  # the user's count wins
    local = Configuration({"spark.master": "local[5]"})
    assert pod.requested_executors(pod.spark_conf(local, {}, 5, LOOPBACK)) is None

    # The map in a slot sharing group of its own: its 5 slots come on top of the 2 of the default group.
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.from_collection([1]).map(str).set_parallelism(5).slot_sharing_group("heavy") \
        .sink_to(DiscardingSink()).slot_sharing_group("default")
    graph = build_job_graph(env._transformations, env.get_config(), "groups")
    assert graph.parallelism == 7
    assert k8s(graph.parallelism, kubernetes__executor__cores=2)["spark.executor.instances"] == "4"


@pytest.mark.parametrize("timeout, interval, failures", [
    ("30 s", "5000ms", "6"), ("3 s", "3000ms", "1"), ("1 h", "5000ms", "720"), (500, "1000ms", "1"),
])
def test_scheduling_timeout_bounds_the_wait_for_executors(timeout, interval, failures):
    derived = k8s(kubernetes__executor__scheduling_timeout=timeout)
    assert derived["spark.scheduler.barrier.maxConcurrentTasksCheck.interval"] == interval
    assert derived["spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures"] == failures
    ms = Configuration({"t": timeout}).get_duration_ms("t")
    assert derived["spark.scheduler.maxRegisteredResourcesWaitingTime"] == f"{ms}ms"


def test_image_and_namespace_sources(tmp_path):
    base = {"spark.master": K8S}
    ns_file = tmp_path / "namespace"
    ns_file.write_text("from-service-account\n")

    def derive(values: dict, environ: dict) -> dict:
        config = Configuration({**base, **values})
        return pod.spark_conf(config, environ, 2, pod.driver_addresses(config, environ), namespace_file=str(ns_file))

    assert derive({}, {**POD, "STREAMJOB_IMAGE": "env/image"})["spark.kubernetes.container.image"] == "env/image"
    assert derive({"kubernetes.container.image": "conf/image"}, {**POD, "STREAMJOB_IMAGE": "env/image"})[
        "spark.kubernetes.container.image"] == "conf/image"
    assert derive({"spark.kubernetes.container.image": "spark/image"}, POD)["spark.kubernetes.container.image"] \
        == "spark/image"
    with pytest.raises(ConfigError, match="kubernetes.container.image.*STREAMJOB_IMAGE"):
        derive({}, POD)
    image = {"kubernetes.container.image": "i"}
    assert derive({**image, "kubernetes.namespace": "conf-ns"}, POD)["spark.kubernetes.namespace"] == "conf-ns"
    assert derive(image, POD)["spark.kubernetes.namespace"] == "jobs"
    assert derive(image, {"POD_IP": "10.0.0.1"})["spark.kubernetes.namespace"] == "from-service-account"
    assert derive({**image, "spark.kubernetes.namespace": "spark-ns"}, POD)["spark.kubernetes.namespace"] == "spark-ns"
    ns_file.unlink()
    outside = derive(image, {})  # a driver outside any pod: no namespace, no owner, the host's address
    assert "spark.kubernetes.namespace" not in outside and "spark.kubernetes.driver.pod.name" not in outside
    assert outside["spark.driver.bindAddress"] == "0.0.0.0" and "spark.driver.port" not in outside
    assert not outside["spark.driver.host"].startswith("127.")


def test_user_spark_keys_win_over_derived_ones():
    derived = k8s(spark__scheduler__barrier__maxConcurrentTasksCheck__maxFailures="3",
                  spark__driver__host="driver.jobs.svc", spark__submit__deployMode="client",
                  spark__scheduler__minRegisteredResourcesRatio="0.5")
    assert derived["spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures"] == "3"
    assert derived["spark.driver.host"] == "driver.jobs.svc"
    assert derived["spark.scheduler.minRegisteredResourcesRatio"] == "0.5"


@pytest.mark.parametrize("values, words", [
    ({"spark__dynamicAllocation__enabled": "true"}, "barrier"),
    ({"kubernetes__executor__cores": 0}, "kubernetes.executor.cores"),
    ({"kubernetes__executor__cores": "two"}, "kubernetes.executor.cores: expected an integer"),
    ({"spark__executor__cores": "1", "spark__task__cpus": "2"}, "spark.executor.cores"),
    ({"kubernetes__executor__scheduling_timeout": "soon"}, "kubernetes.executor.scheduling-timeout"),
    ({"kubernetes__executor__scheduling_timeout": "0 s"}, "kubernetes.executor.scheduling-timeout"),
])
def test_bad_kubernetes_settings_are_clear_errors(values, words):
    with pytest.raises(ConfigError, match=words):
        k8s(**values)


def test_dynamic_allocation_is_refused_on_any_master():
    with pytest.raises(ConfigError, match="spark.dynamicAllocation.enabled=true.*barrier"):
        pod.spark_conf(Configuration({"spark.dynamicAllocation.enabled": "true"}), {}, 2, LOOPBACK)


def test_missing_slots_error_says_what_is_missing():
    text = SlotReport(6, K8S, 2, 3, 2, 2, 4, "120 s", "jobs", "spark-0a1b").message()
    for words in ("needs 6 slots (parallelism 6)", "only 2 of the 3 executors requested",
                  "spark.executor.instances=3 x spark.executor.cores=2: 6 slots", "within 120 s",
                  "kubernetes.executor.scheduling-timeout", "offering 4 slots",
                  "kubectl get pods -n jobs -l spark-role=executor,spark-app-selector=spark-0a1b",
                  "resource quota", "free CPU or memory"):
        assert words in text, (words, text)
    assert "needs 3 slots" in SlotReport(3, "spark://m:7077", 1, 0, 2, 2, 2).message()


# -- the final result (pure) --------------------------------------------------------------------
def test_termination_message_fits_kubernetes_limit_cutting_the_error_first():
    small = {"id": "j", "state": "FINISHED", "final_savepoint": "s3://b/sp/savepoint-1", "error": None,
             "end_time": 1.5}
    assert json.loads(pod.termination_message(small)) == small
    error = "Job failed: operator 'divide' raised ZeroDivisionError\n\n" + 'Traceback "é"\n' * 2000
    text = pod.termination_message({**small, "state": "FAILED", "error": error})
    assert len(text.encode()) <= 4096
    doc = json.loads(text)
    assert doc["error"].startswith("Job failed: operator 'divide' raised ZeroDivisionError")
    assert doc["error"].endswith("[truncated]") and doc["final_savepoint"] == small["final_savepoint"]


def test_termination_log_goes_where_kubelet_mounted_it_or_where_configured(tmp_path):
    assert pod.termination_log_path(Configuration(), exists=lambda p: False) is None
    assert pod.termination_log_path(Configuration(), exists=lambda p: p == "/dev/termination-log") \
        == "/dev/termination-log"
    explicit = str(tmp_path / "message")
    assert pod.termination_log_path(Configuration({"kubernetes.termination-log": explicit}),
                                    exists=lambda p: False) == explicit
    assert pod.termination_log_path(Configuration({"kubernetes.termination-log": ""})) is None


def test_a_job_that_cannot_be_deployed_leaves_its_error_as_termination_message(tmp_path, monkeypatch):
    from streamjob.runtime import StreamExecutionEnvironment
    from streamjob.runtime.connectors import DiscardingSink

    monkeypatch.delenv("STREAMJOB_IMAGE", raising=False)
    message = tmp_path / "termination-log"
    env = StreamExecutionEnvironment.get_execution_environment()
    env.configure({"spark.master": K8S, "kubernetes.termination-log": str(message)})
    env.from_collection([1, 2]).sink_to(DiscardingSink())
    with pytest.raises(ConfigError, match="STREAMJOB_IMAGE"):
        env.execute("no-image")
    result = json.loads(message.read_text())
    assert result["state"] == "FAILED" and "STREAMJOB_IMAGE" in result["error"] and result["name"] == "no-image"


# -- the REST token from a Secret ---------------------------------------------------------------------
def test_rest_token_from_config_file_or_environment(tmp_path):
    secret = tmp_path / "token"
    secret.write_text("from-file\n")
    env = {"STREAMJOB_REST_TOKEN": "from-env"}
    assert _rest_config(conf(rest__auth__token="from-conf"), LOOPBACK, env)[2] == "from-conf"
    assert _rest_config(Configuration({"rest.auth.token-file": str(secret)}), LOOPBACK, env)[2] == "from-file"
    assert _rest_config(Configuration(), LOOPBACK, env)[2] == "from-env"
    assert _rest_config(Configuration(), LOOPBACK, {})[2] == ""
    missing = str(tmp_path / "nope")
    with pytest.raises(JobDefinitionError, match=f"rest.auth.token-file: cannot read {missing}"):
        _rest_config(Configuration({"rest.auth.token-file": missing}), LOOPBACK, env)
    (tmp_path / "empty").write_text(" \n")
    with pytest.raises(JobDefinitionError, match=f"rest.auth.token-file: {tmp_path / 'empty'} is empty"):
        _rest_config(Configuration({"rest.auth.token-file": str(tmp_path / "empty")}), LOOPBACK, env)
    with pytest.raises(JobDefinitionError, match="rest.auth.token and rest.auth.token-file are both set"):
        _rest_config(Configuration({"rest.auth.token": "a", "rest.auth.token-file": str(secret)}), LOOPBACK, env)


# -- real sockets, no Spark ---------------------------------------------------------------------------
@needs_loopback_range
def test_task_data_server_listens_everywhere_and_advertises_the_pod_ip():
    from streamjob.runtime import StreamExecutionEnvironment
    from streamjob.runtime.connectors import DiscardingSink
    from streamjob.runtime.task.slot import SlotRuntime

    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_collection([1, 2, 3]).map(lambda x: x).sink_to(DiscardingSink())
    task = pod.task_addresses({"SPARK_EXECUTOR_POD_IP": "127.0.0.2"}, local=False)
    slot = SlotRuntime(env._build("addresses"), 0, host=task.bind, advertise_host=task.advertise)
    try:
        host, port = slot.address
        assert host == "127.0.0.2" and slot.transport.server.getsockname()[0] == "0.0.0.0"
        for ip in ("127.0.0.1", "127.0.0.2"):
            socket.create_connection((ip, port), timeout=5).close()
    finally:
        slot.transport.close()


@needs_loopback_range
def test_job_manager_control_port_and_rest_url_in_a_pod():
    port = free_port()
    jm = JobManager("job-1", "addresses", 1, host="0.0.0.0", advertise="127.0.0.2", port=port,
                    rest=("0.0.0.0", 0, ""))
    try:
        assert jm.start() == ("127.0.0.2", port)  # what tasks are told
        assert jm.rest.url.startswith("http://127.0.0.2:")
        for ip in ("127.0.0.1", "127.0.0.2"):
            socket.create_connection((ip, port), timeout=5).close()
            assert request(jm.rest.url.replace("127.0.0.2", ip) + "/v1/job")[0] == 200
        taken = JobManager("job-2", "addresses", 1, host="0.0.0.0", port=port)
        with pytest.raises(BindError, match=f"jobmanager.rpc.port={port}"):
            taken.start()
        taken.shutdown()
    finally:
        jm.shutdown()


def _ended_job_manager(state: str = "FAILED", error: str | None = "boom") -> JobManager:
    jm = JobManager("job-3", "linger", 1, rest=("127.0.0.1", 0, ""))
    jm.start()
    jm.finish(state, error)
    jm.settle(None)
    return jm


def test_linger_ends_when_the_result_was_read():
    jm = JobManager("job-3", "linger", 1, rest=("127.0.0.1", 0, ""))
    jm.start()
    try:
        assert request(jm.rest.url + "/v1/job")[1]["state"] == "RUNNING"  # a read before the end does not count
        jm.finish("FAILED", "boom")
        # the final state is recorded, but the end is public only once what stays to resume is known
        assert request(jm.rest.url + "/v1/job?peek=true")[1]["end_time"] is None
        jm.settle("Nothing to resume from: no checkpoint had completed")
        assert not jm.result_was_read()
        # a watcher (the dashboard) peeks: the final word stays for the client that waits for it
        status, peeked = request(jm.rest.url + "/v1/job?peek=true")
        assert status == 200 and peeked["state"] == "FAILED" and not jm.result_was_read()
        seen = []
        reader = threading.Timer(0.5, lambda: seen.append(request(jm.rest.url + "/v1/job")))
        reader.start()
        started = time.monotonic()
        assert jm.linger(30) is True
        assert time.monotonic() - started < 10
        jm.shutdown()  # right away, as the driver does: the answer was out before the linger ended
        reader.join(10)
        status, job = seen[0]
        conforms(job, "Job")
        assert (status, job["state"], job["error"], job["final_savepoint"]) == (200, "FAILED", "boom", None)
        assert job["resume"] == "Nothing to resume from: no checkpoint had completed"
        assert job["end_time"] == jm.final_result()["end_time"] and job["end_time"] is not None
    finally:
        jm.shutdown()


def test_linger_ends_after_its_time_or_on_sigterm():
    jm = _ended_job_manager()
    try:
        started = time.monotonic()
        assert jm.linger(0.6) is False and 0.6 <= time.monotonic() - started < 5
    finally:
        jm.shutdown()
    jm = _ended_job_manager()
    before = signal.getsignal(signal.SIGTERM)
    try:
        threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGTERM)).start()
        started = time.monotonic()
        assert jm.linger(30) is False  # pytest runs tests in the main thread: the handler is installed
        assert time.monotonic() - started < 10
        assert signal.getsignal(signal.SIGTERM) is before
    finally:
        jm.shutdown()


# -- real jobs on local Spark -----------------------------------------------------------------------------
class Run:
    """``streamjob run`` in a subprocess: env vars such as POD_IP stay out of this process."""

    def __init__(self, *args: str, env: dict | None = None):
        self.proc = subprocess.Popen([sys.executable, "-m", "streamjob.runtime.cli", "run", *args],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     env={**os.environ, **(env or {})})
        self.lines: list[str] = []
        threading.Thread(target=lambda: self.lines.extend(self.proc.stderr), daemon=True).start()

    def stderr(self) -> str:
        return "".join(self.lines)

    def wait_for(self, words: str, timeout: float = 90) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if words in line:
                    return line
            assert self.proc.poll() is None, self.stderr()[-3000:]
            time.sleep(0.1)
        raise AssertionError(f"no {words!r} within {timeout} s:\n{self.stderr()[-3000:]}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)


def listening(root: psutil.Process) -> dict[int, str]:
    """port -> listen address of every TCP server of ``root`` and its descendants."""
    found = {}
    for proc in [root, *root.children(recursive=True)]:
        try:
            for c in proc.net_connections("tcp"):
                if c.status == psutil.CONN_LISTEN:
                    found[c.laddr.port] = c.laddr.ip
        except psutil.Error:
            pass
    return found


WILDCARDS = ("0.0.0.0", "::")


@needs_loopback_range
@pytest.mark.spark
def test_sigterm_in_a_pod_ends_the_driver_at_once_and_keeps_its_checkpoints(tmp_path):
    """In a pod SIGTERM means the pod goes away and the operator redeploys from the latest checkpoint at
    once: the driver must not drain and commit (the replacement would write that output again, as the
    e2e lost-driver scenario showed), so it dies by the signal, checkpoints kept. (Locally SIGTERM is a
    graceful stop: tests/test_stop_resume.py.)"""
    checkpoints = tmp_path / "checkpoints"
    job = Run(os.path.join(HERE, "jobs", "counting.py"), str(tmp_path / "out"), str(checkpoints),
              "1000000", "3000", "--no-progress", "--conf", "rest.address=0.0.0.0:0",
              env={"POD_IP": "127.0.0.2"})
    try:
        deadline = time.monotonic() + 120
        while not list(checkpoints.glob("*/chk-*/_metadata")) and time.monotonic() < deadline:
            assert job.proc.poll() is None, job.stderr()[-3000:]
            time.sleep(0.2)
        assert list(checkpoints.glob("*/chk-*/_metadata")), job.stderr()[-3000:]
        job.proc.send_signal(signal.SIGTERM)
        assert job.proc.wait(30) == -signal.SIGTERM, job.stderr()[-3000:]
    finally:
        job.kill()
    assert "Stopping" not in job.stderr() and "drain" not in job.stderr(), job.stderr()[-3000:]
    assert list(checkpoints.glob("*/chk-*/_metadata"))  # the replacement restores from here


@needs_loopback_range
@pytest.mark.spark
def test_pod_job_stop_with_savepoint_outlives_the_job(tmp_path):
    """A job with POD_IP set: every server listens on all interfaces and the pod IP is advertised; a
    retried stop-with-savepoint (one request_id) takes one savepoint, a client polling once a second sees
    it COMPLETED, the process ends as soon as it was read, and the termination message holds the result."""
    rest, rpc, driver, block_manager = (free_port() for _ in range(4))
    (tmp_path / "token").write_text(TOKEN + "\n")
    termination = tmp_path / "termination-log"
    savepoints = tmp_path / "savepoints"
    job = Run(os.path.join(HERE, "jobs", "counting.py"), str(tmp_path / "out"), str(tmp_path / "checkpoints"),
              "1000000", "3000", "--no-progress",
              "--conf", f"rest.address=0.0.0.0:{rest}", "--conf", f"jobmanager.rpc.port={rpc}",
              "--conf", f"spark.driver.port={driver}", "--conf", f"spark.driver.blockManager.port={block_manager}",
              "--conf", f"rest.auth.token-file={tmp_path / 'token'}", "--conf", "rest.result-linger=120 s",
              "--conf", f"kubernetes.termination-log={termination}", env={"POD_IP": "127.0.0.2"})
    try:
        line = job.wait_for("REST API and metrics at")
        url = line.rsplit(" at ", 1)[1].strip()
        assert url == f"http://127.0.0.2:{rest}"  # advertised: the pod IP, not 127.0.0.1
        deadline = time.monotonic() + 90
        while request(f"{url}/v1/checkpoints")[1]["counts"]["completed"] < 1:  # every task runs and is wired
            assert time.monotonic() < deadline, job.stderr()[-3000:]
            time.sleep(0.2)
        assert request(f"http://127.0.0.1:{rest}/v1/job", token=None)[0] == 401  # the token file's token
        status, info = request(f"http://127.0.0.1:{rest}/v1/job")
        assert status == 200 and info["state"] == "RUNNING"
        servers = listening(psutil.Process(job.proc.pid))
        for port in (rest, rpc, driver, block_manager):
            assert servers[port] in WILDCARDS, (port, servers)
            for ip in ("127.0.0.1", "127.0.0.2"):
                socket.create_connection((ip, port), timeout=5).close()
        # The tasks (parallelism 3) reach the job manager and each other at the advertised pod IP; their data
        # servers, closed once wired, listen on every interface (test_task_data_server_listens_everywhere...).
        tasks = [c for p in psutil.Process(job.proc.pid).children(recursive=True) if "python" in p.name()
                 for c in p.net_connections("tcp") if c.status == psutil.CONN_ESTABLISHED and c.raddr]
        assert len([c for c in tasks if tuple(c.raddr) == ("127.0.0.2", rpc)]) == 3, tasks
        assert len([c for c in tasks if c.raddr.ip == "127.0.0.2" and c.raddr.port != rpc]) >= 3 * 2, tasks

        body = {"target_dir": str(savepoints), "stop": True, "request_id": "operator-stop-1"}
        status, first = request(f"{url}/v1/savepoints", "POST", body)
        assert status == 202 and first["id"] == "operator-stop-1", first
        status, again = request(f"{url}/v1/savepoints", "POST", body)  # a retry: same savepoint
        assert status == 200 and (again["id"], again["path"]) == (first["id"], first["path"])
        while True:  # an operator's poll: once a second
            status, sp = request(f"{url}/v1/savepoints/operator-stop-1")
            assert status == 200, sp
            if sp["status"] not in ("QUEUED", "IN_PROGRESS"):
                break
            time.sleep(1.0)
        assert sp["status"] == "COMPLETED" and sp["path"] == first["path"]
        read_at = time.monotonic()
        assert job.proc.wait(90) == 0, job.stderr()[-3000:]
        assert time.monotonic() - read_at < 60  # ended once read, not after the 120 s linger
    finally:
        job.kill()
    result = json.loads(termination.read_text())
    assert result["state"] == "FINISHED" and result["final_savepoint"] == sp["path"] and result["error"] is None
    assert result["id"] and isinstance(result["end_time"], float)
    assert [d for d in os.listdir(savepoints) if d.startswith("savepoint-")] == [sp["path"].rsplit("/", 1)[1]]


@pytest.mark.spark
def test_failed_job_leaves_its_error_in_rest_and_termination_message(tmp_path):
    """GET /v1/job after the end: FAILED, the error, the end time; polled once a second. The token
    comes from STREAMJOB_REST_TOKEN (a Secret as environment variable)."""
    port = free_port()
    termination = tmp_path / "termination-log"
    job = Run(os.path.join(HERE, "jobs", "raises.py"), "-p", "1", "--no-progress",
              "--conf", f"rest.address=127.0.0.1:{port}", "--conf", "rest.result-linger=120 s",
              "--conf", f"kubernetes.termination-log={termination}", env={"STREAMJOB_REST_TOKEN": TOKEN})
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        job_doc: dict = {}
        while job_doc.get("state") not in ("FAILED", "FINISHED", "CANCELED"):
            assert time.monotonic() < deadline and job.proc.poll() is None, job.stderr()[-3000:]
            time.sleep(1.0)
            try:
                assert request(f"{url}/v1/job", token=None)[0] == 401
                status, job_doc = request(f"{url}/v1/job")
            except (urllib.error.URLError, ConnectionError):
                continue  # not serving yet
        read_at = time.monotonic()
        conforms(job_doc, "Job")
        assert job_doc["state"] == "FAILED" and job_doc["final_savepoint"] is None and job_doc["end_time"]
        assert "ZeroDivisionError" in job_doc["error"] and "'divide'" in job_doc["error"]
        assert job.proc.wait(90) == 1
        assert time.monotonic() - read_at < 60
    finally:
        job.kill()
    result = json.loads(termination.read_text())
    assert result["state"] == "FAILED" and "ZeroDivisionError" in result["error"] and result["final_savepoint"] is None


@pytest.mark.spark
def test_savepoint_request_id_is_idempotent(spark_slots, tmp_path, monkeypatch):
    monkeypatch.setenv("STREAMJOB_REST_TOKEN", TOKEN)  # read by the job manager in this process
    env = counting.build(str(tmp_path / "out"), str(tmp_path / "checkpoints"), 200_000, 5_000, interval_ms=200,
                         parallelism=2)
    client = env.execute_async("counting")
    assert client.wait_until_running(60)
    jm = client.job_manager
    deadline = time.monotonic() + 60
    while (jm.rest is None or jm.rest.url is None or not jm.all_running()) and time.monotonic() < deadline:
        time.sleep(0.05)
    url = jm.rest.url
    savepoints = tmp_path / "savepoints"
    try:
        assert request(f"{url}/v1/job", token=None)[0] == 401
        for bad in ("", "a b", "x" * 129, 5, "a/b"):
            status, doc = request(f"{url}/v1/savepoints", "POST", {"target_dir": str(savepoints), "request_id": bad})
            assert status == 400 and "'request_id'" in doc["error"], (bad, doc)
        body = {"target_dir": str(savepoints), "request_id": "sp-1"}
        status, first = request(f"{url}/v1/savepoints", "POST", body)
        assert status == 202 and first["id"] == "sp-1"
        conforms(first, "SavepointTriggered")
        status, again = request(f"{url}/v1/savepoints", "POST", body)
        assert status == 200 and again["path"] == first["path"]
        for other in ({"target_dir": str(tmp_path / "elsewhere")}, {"stop": True}):
            status, doc = request(f"{url}/v1/savepoints", "POST", {**body, **other})
            assert status == 409 and "request_id 'sp-1' was already used" in doc["error"], doc
        while request(f"{url}/v1/savepoints/sp-1")[1]["status"] in ("QUEUED", "IN_PROGRESS"):
            time.sleep(0.1)
        status, done = request(f"{url}/v1/savepoints", "POST", body)  # also after it completed
        assert (status, done["id"], done["status"], done["path"]) == (200, "sp-1", "COMPLETED", first["path"])
        proc = run_cli("savepoint", "--request-id", "sp-1", "--target-dir", str(savepoints),
                       env={"STREAMJOB_ADDRESS": url, "STREAMJOB_TOKEN": TOKEN}, timeout=60)
        assert proc.returncode == 0 and proc.stdout.strip() == first["path"], proc.stderr
        history = request(f"{url}/v1/checkpoints")[1]["history"]
        assert [h["savepoint"] for h in history if h["savepoint"]] == [first["path"]]
        assert [d for d in os.listdir(savepoints) if d.startswith("savepoint-")] == [first["path"].rsplit("/", 1)[1]]
    finally:
        client.cancel()
        with pytest.raises(Exception, match="canceled"):
            client.get_job_execution_result(120)


def test_job_manager_reads_control_messages_larger_than_asyncio_s_default_line_limit():
    """An acknowledgement carries the task's state handles: with many states (a window per table)
    it outgrows 64 KiB, which once dropped the task's connection (the task was then lost)."""
    from streamjob.runtime.cluster import control as C

    jm = JobManager("job-4", "big", 1)
    host, port = jm.start()
    try:
        with socket.create_connection((host, port), timeout=5) as s:
            s.sendall(C.encode({"type": C.REGISTER, "slot": 0, "attempt": 0}))
            big = {"op": [1, 2, "x" * (1 << 20)]}
            s.sendall(C.encode({"type": C.METRICS, "slot": 0, "ops": big}) +
                      C.encode({"type": C.METRICS, "slot": 0, "ops": {"op": [3, 4, None]}}))
            deadline = time.monotonic() + 10
            while jm.metrics.get(0) != {"op": [3, 4, None]} and time.monotonic() < deadline:
                time.sleep(0.02)
            assert jm.metrics.get(0) == {"op": [3, 4, None]}
    finally:
        jm.shutdown()
