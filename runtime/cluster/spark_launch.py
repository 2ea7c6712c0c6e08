"""The embedded Spark's JVM command, without ``spark-submit``'s scripts on the path to it.

``spark-submit`` is a shell script that runs ``find-spark-home`` (a Python interpreter, for a pip
installed PySpark), ``load-spark-env.sh`` and ``spark-class``, which starts a first JVM
(``org.apache.spark.launcher.Main``) only to print the command of the second, the real one. On this
machine that is ~0.3 CPU-s before Spark's own JVM starts, spent while the driver imports the job and
the task daemon preloads its modules on the same two cores.

Here the launcher's command is kept in a file, keyed by everything the launcher reads (its
arguments, the Spark and Java environment variables, the Java binary, Spark's jars and
configuration folder), and started directly the next time. On a miss the launcher runs as
``spark-class`` runs it and its answer is kept. The JVM gets the environment the scripts would have
given it (``SPARK_HOME``, ``SPARK_CONF_DIR``, ``SPARK_SCALA_VERSION``, ``SPARK_ENV_LOADED``, and
``PYTHONHASHSEED=0``, which ``spark-submit`` sets for every Python worker).

Left to ``spark-submit`` as before: a ``spark-env.sh`` in the configuration folder (a shell file
only a shell can read), a launcher that fails (its message is the user's), anything unexpected.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import subprocess
import tempfile

from . import user_cache

LAUNCHER = "org.apache.spark.launcher.Main"
SUBMIT = "org.apache.spark.deploy.SparkSubmit"
# What the launcher and the scripts read from the environment (the launcher's own Java code reads
# SPARK_*, HADOOP_CONF_DIR, YARN_CONF_DIR and JAVA_HOME; the JVM's launcher reads JDK_JAVA_OPTIONS).
_KEY_PREFIXES = ("SPARK_", "HADOOP_", "YARN_", "JAVA_", "_JAVA_", "JDK_")


def scala_version(home: str) -> str | None:
    """The Scala version ``load-spark-env.sh`` exports (the launcher needs it to find the jars)."""
    try:
        with open(os.path.join(home, "bin", "load-spark-env.sh")) as f:
            found = re.search(r"^\s*export SPARK_SCALA_VERSION=([0-9.]+)\s*$", f.read(), re.M)
    except OSError:
        return None
    return found.group(1) if found else None


def jvm_environment(home: str, environ: dict[str, str]) -> dict[str, str] | None:
    """The environment ``spark-submit`` would start the JVM with (None: only its scripts can say)."""
    conf_dir = environ.get("SPARK_CONF_DIR") or os.path.join(home, "conf")
    if os.path.exists(os.path.join(conf_dir, "spark-env.sh")):
        return None
    scala = environ.get("SPARK_SCALA_VERSION") or scala_version(home)
    if scala is None:
        return None
    return {**environ, "SPARK_HOME": home, "SPARK_CONF_DIR": conf_dir, "SPARK_SCALA_VERSION": scala,
            "SPARK_ENV_LOADED": "1", "PYTHONHASHSEED": "0"}


def java_binary(environ: dict[str, str]) -> str | None:
    """The ``java`` ``spark-class`` runs: ``$JAVA_HOME/bin/java``, else the one on the PATH."""
    if environ.get("JAVA_HOME"):
        return os.path.join(environ["JAVA_HOME"], "bin", "java")
    return shutil.which("java", path=environ.get("PATH"))


def cache_key(home: str, java: str, arguments: list[str], environ: dict[str, str]) -> str:
    """What the launcher's answer depends on: a change to any of it runs the launcher again."""
    jars = os.path.join(home, "jars")
    conf_dir = environ["SPARK_CONF_DIR"]
    real = os.path.realpath(java)
    parts = [real, str(os.stat(real).st_mtime_ns), home, *sorted(os.listdir(jars))]
    if os.path.isdir(conf_dir):  # spark-defaults.conf, log4j2.properties, ...: the launcher reads some
        for name in sorted(os.listdir(conf_dir)):
            st = os.stat(os.path.join(conf_dir, name))
            parts.append(f"{name}:{st.st_size}:{st.st_mtime_ns}")
    parts += [f"{k}={v}" for k, v in sorted(environ.items()) if k.startswith(_KEY_PREFIXES)]
    parts += arguments
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:20]


def parse_launcher_output(out: bytes) -> list[str] | None:
    """The command in what the launcher printed (``spark-class``'s reading: lines up to a NUL line
    are messages, then NUL-separated arguments), or None when there is none."""
    marker = out.find(b"\0\n")
    if marker < 0:
        return None
    command = [a.decode() for a in out[marker + 2:].split(b"\0") if a]
    return command or None


def run_launcher(java: str, home: str, arguments: list[str], environ: dict[str, str]) -> list[str] | None:
    """Spark's launcher's command for ``arguments`` (``SparkSubmit ...``), as ``spark-class`` asks it."""
    options = shlex.split(environ.get("SPARK_LAUNCHER_OPTS", ""))
    try:
        done = subprocess.run([java, "-Xmx128m", *options, "-cp", os.path.join(home, "jars", "*"), LAUNCHER,
                               *arguments], env=environ, stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None  # spark-submit runs it again and shows its message
    return parse_launcher_output(done.stdout)


def gateway_command(home: str, launch: dict[str, str], cache_dir: str | None = None,
                    environ: dict[str, str] | None = None) -> tuple[list[str], dict[str, str]] | None:
    """(command, environment) of Spark's gateway JVM for ``spark-submit --conf K=V ... pyspark-shell``,
    or None where ``spark-submit`` itself must run (``STREAMJOB_SPARK_SUBMIT_SCRIPT=1`` asks for it)."""
    environ = dict(os.environ if environ is None else environ)
    if environ.get("STREAMJOB_SPARK_SUBMIT_SCRIPT", "0").strip().lower() in ("1", "true", "yes", "on"):
        return None
    env = jvm_environment(home, environ)
    java = java_binary(environ)
    if env is None or java is None or not os.path.isdir(os.path.join(home, "jars")):
        return None
    arguments = [SUBMIT]
    for k, v in launch.items():
        arguments += ["--conf", f"{k}={v}"]
    arguments.append("pyspark-shell")
    try:
        key = cache_key(home, java, arguments, env)
    except OSError:
        return None
    cache = cache_dir or user_cache.folder(environ)
    path = os.path.join(cache, f"launch-{key}.cmd")
    try:
        with open(path, "rb") as f:
            command = [a.decode() for a in f.read().split(b"\0") if a]
        if command and os.path.isfile(command[0]):
            user_cache.in_use(path)
            return command, env
    except OSError:
        pass
    command = run_launcher(java, home, arguments, env)
    if command is None or not os.path.isfile(command[0]):
        return None
    if not any("ArchiveClassesAtExit" in a for a in arguments):  # a first run's: names its own archive file
        _keep(cache, path, command)
    return command, env


_UNUSED_S = 7 * 86400  # a kept command no run used for this long goes (another Spark, setting, folder)


def _unused_command(name: str, age: float, size: int) -> bool:
    return name.startswith("launch-") and name.endswith(".cmd") and age > _UNUSED_S


def _keep(cache: str, path: str, command: list[str]) -> None:
    """Write the command whole or not at all (runs may start side by side); commands unused for a week go."""
    try:
        os.makedirs(cache, exist_ok=True)
        user_cache.prune(cache, _unused_command)
        fd, tmp = tempfile.mkstemp(dir=cache, prefix=".launch-", suffix=".part")
        with os.fdopen(fd, "wb") as f:
            f.write(b"\0".join(a.encode() for a in command) + b"\0")
        os.replace(tmp, path)
    except OSError:
        pass  # no cache folder we may write: the launcher runs each time, as spark-submit's does

