"""The image's entrypoint (docker/entrypoint.sh), run for real by /bin/sh: its argument handling
and the command line it execs for each role.

The programs it execs (streamjob, java, python3) are stand-ins here: small scripts first on PATH
that print their argv (and PID), so the test sees exactly what the entrypoint would run. The real
binaries in the real image are covered by tests/test_image.py.
"""

import os
import stat
import subprocess
from pathlib import Path

import pytest

from streamjob.operator import resources

ROOT = Path(__file__).resolve().parent.parent
ENTRYPOINT = ROOT / "docker" / "entrypoint.sh"
FAKE_JARS = "/fake/pyspark/jars"
EXECUTOR_ENV = {
    "SPARK_DRIVER_URL": "spark://CoarseGrainedScheduler@driver-svc:7078",
    "SPARK_EXECUTOR_ID": "3",
    "SPARK_EXECUTOR_CORES": "2",
    "SPARK_APPLICATION_ID": "spark-application-17",
    "SPARK_EXECUTOR_POD_IP": "10.1.2.3",
    "SPARK_EXECUTOR_POD_NAME": "word-count-exec-3",
}
BACKEND = "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend"


def _stub(path: Path, body: str) -> None:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


@pytest.fixture
def fakes(tmp_path):
    """A bin directory of stand-ins: each prints its name, PID and one argument per line."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    printer = 'echo "PROG=$(basename "$0")"; echo "PID=$$"; for a in "$@"; do echo "ARG=$a"; done\n'
    _stub(bin_dir / "streamjob", printer)
    _stub(bin_dir / "java", printer)
    # The entrypoint asks python3 where pyspark's jars are; the stand-in answers a fixed path.
    _stub(bin_dir / "python3", f'echo "{FAKE_JARS}"\n')
    return bin_dir


def run(fakes: Path, *args: str, env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess, int]:
    # A clean environment: no SPARK_* or JAVA_HOME from the machine running the tests.
    full_env = {"PATH": f"{fakes}:/usr/bin:/bin", **(env or {})}
    proc = subprocess.Popen(["/bin/sh", str(ENTRYPOINT), *args], env=full_env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.communicate(timeout=30)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), proc.pid


def execed(result: subprocess.CompletedProcess, pid: int) -> tuple[str, list[str]]:
    """The program the entrypoint ran and its arguments, checking it replaced the shell (exec):
    the stand-in has the PID the shell was started with."""
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("PROG=") and lines[1].startswith("PID="), result.stdout
    assert int(lines[1][4:]) == pid, "the entrypoint must exec, so that the kubelet's SIGTERM reaches the process"
    return lines[0][5:], [line[4:] for line in lines[2:]]


def test_the_operator_and_the_image_agree_on_the_entrypoint_path():
    assert resources.ENTRYPOINT == "/opt/streamjob/entrypoint.sh"
    assert os.access(ENTRYPOINT, os.X_OK), "docker/entrypoint.sh must be executable"


def test_no_arguments_prints_usage_and_exits_2(fakes):
    result, _ = run(fakes)
    assert result.returncode == 2
    assert "usage: entrypoint.sh operator" in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize("role", ["jobmanager", "run", "--help", "Operator"])
def test_an_unknown_role_prints_usage_and_exits_2(fakes, role):
    result, _ = run(fakes, role, "x")
    assert result.returncode == 2
    assert "usage:" in result.stderr
    assert result.stdout == "", "nothing may be started for an unknown role"


def test_driver_without_a_command_prints_usage(fakes):
    result, _ = run(fakes, "driver")
    assert result.returncode == 2
    assert "usage:" in result.stderr


def test_operator_execs_streamjob_operator_with_its_arguments(fakes):
    result, pid = run(fakes, "operator", "--namespace", "default", "an argument with spaces")
    assert execed(result, pid) == ("streamjob", ["operator", "--namespace", "default", "an argument with spaces"])


def test_operator_without_arguments(fakes):
    result, pid = run(fakes, "operator")
    assert execed(result, pid) == ("streamjob", ["operator"])


def test_driver_execs_streamjob_with_the_rest_of_the_command_line(fakes):
    # What operator/resources.py's driver_args hands the entrypoint, abridged.
    result, pid = run(fakes, "driver", "run", "job.py", "--parallelism", "2", "--", "job arg")
    assert execed(result, pid) == ("streamjob", ["run", "job.py", "--parallelism", "2", "--", "job arg"])


@pytest.mark.parametrize("missing", ["SPARK_DRIVER_URL", "SPARK_EXECUTOR_ID", "SPARK_EXECUTOR_CORES",
                                     "SPARK_APPLICATION_ID"])
def test_executor_without_a_spark_variable_names_it_and_exits_2(fakes, missing):
    env = {k: v for k, v in EXECUTOR_ENV.items() if k != missing}
    result, _ = run(fakes, "executor", env=env)
    assert result.returncode == 2
    assert missing in result.stderr
    assert result.stdout == "", "java must not be started"


def test_executor_treats_an_empty_variable_as_missing(fakes):
    result, _ = run(fakes, "executor", env={**EXECUTOR_ENV, "SPARK_EXECUTOR_ID": ""})
    assert result.returncode == 2
    assert "SPARK_EXECUTOR_ID is not set" in result.stderr


def test_executor_execs_the_kubernetes_executor_backend(fakes):
    env = {**EXECUTOR_ENV, "SPARK_EXECUTOR_MEMORY": "2g", "SPARK_RESOURCE_PROFILE_ID": "4",
           # Spark passes the executor's JVM options numbered from 0; their order is kept and one
           # option may hold spaces.
           "SPARK_JAVA_OPT_0": "-Dspark.driver.port=7078",
           "SPARK_JAVA_OPT_1": "-Dspark.executor.extraJavaOptions=-Da=1 -Db=2",
           "SPARK_JAVA_OPT_2": "-XX:+UseG1GC"}
    result, pid = run(fakes, "executor", env=env)
    prog, args = execed(result, pid)
    assert prog == "java"
    assert args == [
        "-Dspark.driver.port=7078", "-Dspark.executor.extraJavaOptions=-Da=1 -Db=2", "-XX:+UseG1GC",
        "-Xms2g", "-Xmx2g",
        "-cp", f"{FAKE_JARS}/*",  # pyspark's jars, as a class path wildcard for java (not for the shell)
        BACKEND,
        "--driver-url", EXECUTOR_ENV["SPARK_DRIVER_URL"], "--executor-id", "3", "--cores", "2",
        "--app-id", "spark-application-17", "--hostname", "10.1.2.3", "--resourceProfileId", "4",
        "--podName", "word-count-exec-3",
    ]


def test_executor_defaults_and_java_opts_stop_at_the_first_gap(fakes):
    # _0 then _2: numbering stops at the missing _1, as Spark numbers them without gaps.
    env = {**EXECUTOR_ENV, "SPARK_JAVA_OPT_0": "-Dfirst=1", "SPARK_JAVA_OPT_2": "-Dafter-gap=1"}
    result, pid = run(fakes, "executor", env=env)
    prog, args = execed(result, pid)
    assert prog == "java"
    assert args[:3] == ["-Dfirst=1", "-Xms1g", "-Xmx1g"]  # 1g when SPARK_EXECUTOR_MEMORY is unset
    assert "-Dafter-gap=1" not in args
    assert args[args.index("--resourceProfileId") + 1] == "0"


def test_executor_uses_spark_classpath_when_set(fakes):
    result, pid = run(fakes, "executor", env={**EXECUTOR_ENV, "SPARK_CLASSPATH": "/opt/extra/*:/opt/jars/*"})
    _, args = execed(result, pid)
    assert args[args.index("-cp") + 1] == "/opt/extra/*:/opt/jars/*"


def test_executor_runs_java_from_java_home(fakes, tmp_path):
    java_home = tmp_path / "jdk"
    (java_home / "bin").mkdir(parents=True)
    _stub(java_home / "bin" / "java", 'echo "PROG=java-from-java-home"; echo "PID=$$"\n')
    result, pid = run(fakes, "executor", env={**EXECUTOR_ENV, "JAVA_HOME": str(java_home)})
    prog, _ = execed(result, pid)
    assert prog == "java-from-java-home"
