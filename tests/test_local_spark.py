"""The embedded local Spark's class-data-sharing archive: one run writes it, later runs map it."""

from __future__ import annotations

import os
import time

from streamjob.runtime.cluster import spark
from streamjob.runtime.cluster.process_tree import DAEMON_MODULE


def test_one_run_writes_the_archive_and_later_runs_adopt_it(tmp_path, monkeypatch):
    monkeypatch.delenv("STREAMJOB_CLASS_DATA_SHARING", raising=False)
    first = spark.class_data_sharing_options(str(tmp_path))
    assert "-XX:ArchiveClassesAtExit=" in first
    part = first.split("-XX:ArchiveClassesAtExit=")[1].split()[0]
    assert os.path.exists(part)  # the claim: concurrent runs do not write a second archive
    assert spark.class_data_sharing_options(str(tmp_path)) == ""
    with open(part, "wb") as f:  # the JVM wrote it at exit...
        f.write(b"archive")
    assert spark.class_data_sharing_options(str(tmp_path)) == ""  # ...maybe still writing: not yet
    old = time.time() - spark._ARCHIVE_SETTLE_S - 5
    os.utime(part, (old, old))
    adopted = spark.class_data_sharing_options(str(tmp_path))
    assert "-XX:SharedArchiveFile=" in adopted and not os.path.exists(part)
    final = adopted.split("-XX:SharedArchiveFile=")[1].split()[0]
    assert os.path.exists(final) and spark.class_data_sharing_options(str(tmp_path)) == adopted
    os.utime(final, (time.time() - 2 * 86400,) * 2)
    assert spark.class_data_sharing_options(str(tmp_path)) == adopted
    assert time.time() - os.path.getmtime(final) < 60  # in use: not pruned as unused


def test_a_claim_whose_jvm_never_wrote_is_given_up_and_the_switch_turns_it_off(tmp_path, monkeypatch):
    first = spark.class_data_sharing_options(str(tmp_path))
    part = first.split("-XX:ArchiveClassesAtExit=")[1].split()[0]
    day_ago = time.time() - 86400 - 5
    os.utime(part, (day_ago, day_ago))  # a killed run's empty claim
    again = spark.class_data_sharing_options(str(tmp_path))
    assert "-XX:ArchiveClassesAtExit=" in again  # this run claims the writing anew
    assert time.time() - os.path.getmtime(again.split("=")[1].split()[0]) < 60
    monkeypatch.setenv("STREAMJOB_CLASS_DATA_SHARING", "0")
    assert spark.class_data_sharing_options(str(tmp_path)) == ""


def test_a_regenerated_jdk_archive_gives_the_spark_archive_a_new_key(tmp_path, monkeypatch):
    """A dynamic archive is only valid on the static archive it was dumped on: after ``java -Xshare:dump``
    (the JDK package runs it as it installs) the JVM silently ignored ours, and every run started ~1 s
    slower. The JDK's archives are part of the key: a regenerated one means a new archive."""
    monkeypatch.delenv("STREAMJOB_CLASS_DATA_SHARING", raising=False)
    home = tmp_path / "jdk"
    (home / "bin").mkdir(parents=True)
    (home / "lib" / "server").mkdir(parents=True)
    (home / "bin" / "java").write_text("#!/bin/sh\n")
    (home / "release").write_text('JAVA_VERSION="17.0.15"\n')
    base = home / "lib" / "server" / "classes.jsa"
    base.write_bytes(b"static archive")
    monkeypatch.setenv("JAVA_HOME", str(home))
    cache = tmp_path / "cache"
    first = spark.class_data_sharing_options(str(cache))
    assert "-XX:ArchiveClassesAtExit=" in first
    assert spark.class_data_sharing_options(str(cache)) == ""  # the same key: that run is writing it
    base.write_bytes(b"static archive, dumped again")
    month_ago = time.time() - 31 * 86400
    unused, used = cache / "spark-0123456789abcdef.jsa", cache / "spark-fedcba9876543210.jsa"
    for archive in (unused, used):
        archive.write_bytes(b"archive")
        os.utime(archive, (month_ago, month_ago))
    os.utime(used, (time.time() - 5 * 86400,) * 2)
    again = spark.class_data_sharing_options(str(cache))
    assert "-XX:ArchiveClassesAtExit=" in again and again != first
    # claiming the new one, the archives no run used for 30 days went (another JDK's, Spark's, virtualenv's)
    assert not unused.exists() and used.exists()


def test_workers_drop_sparks_source_zips_only_when_the_installed_packages_are_on_the_path(tmp_path):
    from streamjob.runtime.cluster.pyworker import spark_zips_to_drop

    site = tmp_path / "site-packages"
    lib = site / "pyspark" / "python" / "lib"
    lib.mkdir(parents=True)
    (site / "pyspark" / "__init__.py").write_text("")
    zips = [str(lib / "pyspark.zip"), str(lib / "py4j-0.10.9.9-src.zip")]
    assert spark_zips_to_drop([*zips, str(site)]) == zips[:1]  # py4j is not installed beside it
    (site / "py4j").mkdir()
    (site / "py4j" / "__init__.py").write_text("")
    assert spark_zips_to_drop([*zips, str(site)]) == zips
    assert spark_zips_to_drop(zips) == []  # a SPARK_HOME of its own (not pip's): the zips stay
    assert spark_zips_to_drop([str(tmp_path / "other.zip"), str(site)]) == []


def test_the_gateway_is_connected_as_the_installed_pyspark_connects_it():
    # The prestarted JVM is launched and connected by our copy of PySpark's launch_gateway (it starts
    # the JVM before PySpark is imported); the copy must import what PySpark's own does.
    import inspect
    import re

    from pyspark import java_gateway

    source = inspect.getsource(java_gateway.launch_gateway)
    assert tuple(re.findall(r'java_import\(gateway\.jvm, "([^"]+)"\)', source)) == spark.PYSPARK_JAVA_IMPORTS
    assert '"SPARK_CONNECT_MODE"] = "0"' in source and "_PYSPARK_DRIVER_CONN_INFO_PATH" in source
    assert "PythonParameters(port=0, eager_load=False)" in source


def test_workers_are_forked_from_a_daemon_with_the_task_modules_loaded(spark_slots):
    """The session's local Spark (spark_settings' defaults): each task's worker is forked from
    pydaemon, which imported the slot runtime (and pyarrow, numpy with it) before forking, and
    pyarrow's and numpy's thread pools work in the forked worker. Restarts start their tasks in
    ~0.4 s instead of ~2 s that way (docs/concepts/how-a-job-runs.md)."""
    from pyspark import SparkContext

    def _in_a_task(_):
        """Run in a Spark Python worker: who started it, and whether the task's modules were loaded before
        the task's own code ran; then pyarrow and numpy at work (their threads, left behind by the fork,
        start again in the worker)."""
        import sys

        import numpy
        import pyarrow
        import pyarrow.compute

        import gc

        with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
            parent = f.read().replace(b"\0", b" ").decode()
        total = pyarrow.compute.sum(pyarrow.array(numpy.arange(100_000))).as_py()
        yield (parent, "streamjob.runtime.task.slot" in sys.modules, total, gc.get_freeze_count(),
               (os.environ.get("MIMALLOC_PURGE_DELAY"), os.environ.get("MIMALLOC_ARENA_EAGER_COMMIT")))

    sc = SparkContext.getOrCreate()
    assert sc.getConf().get("spark.python.daemon.module") == "streamjob.runtime.cluster.pydaemon" == DAEMON_MODULE
    rows = sc.parallelize(range(spark_slots), spark_slots).mapPartitions(_in_a_task).collect()
    assert len(rows) == spark_slots
    for parent, preloaded, total, frozen, purge_delay in rows:
        assert "-m streamjob.runtime.cluster.pydaemon" in parent
        assert preloaded  # a fresh worker would import the slot runtime in the task itself
        assert total == 100_000 * 99_999 // 2
        assert frozen > 10_000  # the daemon's objects: out of the worker's garbage collections
        # Arrow's allocator returns freed pages at once, and commits its arena as it is used
        assert purge_delay == ("0", "0")


def test_the_driver_converts_numpy_values_for_java_without_loading_pandas(spark_slots, tmp_path):
    """PySpark's own converters load pyspark.testing.utils (pandas with it: ~80 MB) at the driver's
    first Java call; ours convert numpy values the same without it."""
    import subprocess
    import sys

    import numpy
    from pyspark import SparkContext

    spark._light_numpy_converters()
    jvm = SparkContext.getOrCreate()._jvm
    assert jvm.java.util.Arrays.toString(numpy.array([1, 2, 3], dtype=numpy.int64)) == "[1, 2, 3]"
    assert jvm.java.lang.String.valueOf(numpy.float64(2.5)) == "2.5"
    job = tmp_path / "job.py"
    job.write_text(
        "import sys\n"
        "from streamjob.runtime import StreamExecutionEnvironment\n"
        "env = StreamExecutionEnvironment.get_execution_environment()\n"
        "env.from_collection(list(range(100))).key_by(lambda x: x % 3).map(lambda x: x + 1).print()\n"
        "env.execute('no-pandas')\n"
        "print('DRIVER LOADED', sorted(m for m in ('pandas', 'pyspark.testing') if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-m", "streamjob.runtime.cli", "run", str(job), "--no-progress"],
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "DRIVER LOADED []" in done.stdout, done.stdout[-2000:]


def test_the_daemon_preloads_what_a_task_imports():
    """pydaemon's list follows spark._task_entry: every module the task body imports is on it."""
    import inspect
    import re

    from streamjob.runtime.cluster import pydaemon

    body = inspect.getsource(spark._task_entry).split("mark(\"task imports\")")[0]
    imported = set(re.findall(r"^\s+import (\w+)", body, re.M))
    imported |= {f"streamjob.runtime.{m.replace('..', '').lstrip('.')}" if m.startswith("..")
                 else f"streamjob.runtime.cluster.{m.lstrip('.')}" if m.startswith(".") else m
                 for m in re.findall(r"^\s+from (\S+) import", body, re.M)}
    assert imported <= set(pydaemon.PRELOADED) | {"pyspark"}, imported - set(pydaemon.PRELOADED)
    assert pydaemon.preload() == []


# -- the JVM's command, without spark-submit's scripts (spark_launch) -------------------------------------
def _pyspark_home() -> str:
    import pyspark

    return os.path.dirname(pyspark.__file__)


def test_the_launchers_command_is_kept_and_used_until_something_it_reads_changes(tmp_path, monkeypatch):
    from streamjob.runtime.cluster import spark_launch

    home = _pyspark_home()
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "STREAMJOB_SPARK"))}
    launch = {"spark.driver.memory": "321m", "spark.driver.extraJavaOptions": "-Da=1 -Db='two words'"}
    calls = []
    real = spark_launch.run_launcher

    def counted(*args):
        calls.append(args)
        return real(*args)

    monkeypatch.setattr(spark_launch, "run_launcher", counted)
    command, env = spark_launch.gateway_command(home, launch, str(tmp_path), environ)
    # The launcher's answer: the JVM with Spark's class path, the driver's memory and options, SparkSubmit.
    assert os.path.basename(command[0]) == "java" and "-Xmx321m" in command and "-Db=two words" in command  # split as a shell would
    assert command[command.index("-cp") + 1].endswith(os.path.join("jars", "*"))
    assert command[-6:] == [spark_launch.SUBMIT, "--conf", "spark.driver.memory=321m", "--conf",
                            "spark.driver.extraJavaOptions=-Da=1 -Db='two words'", "pyspark-shell"][-6:]
    # The environment spark-submit's scripts give the JVM (and through it every Python worker).
    assert env["SPARK_HOME"] == home and env["SPARK_CONF_DIR"] == os.path.join(home, "conf")
    assert env["PYTHONHASHSEED"] == "0" and env["SPARK_ENV_LOADED"] == "1" and env["SPARK_SCALA_VERSION"]
    assert len(calls) == 1 and len(list(tmp_path.glob("launch-*.cmd"))) == 1

    assert spark_launch.gateway_command(home, launch, str(tmp_path), environ) == (command, env)
    assert len(calls) == 1  # kept: no launcher JVM this time

    # Anything the launcher reads asks it again: a setting, a Spark variable.
    spark_launch.gateway_command(home, {**launch, "spark.driver.memory": "300m"}, str(tmp_path), environ)
    spark_launch.gateway_command(home, launch, str(tmp_path), {**environ, "SPARK_SUBMIT_OPTS": "-Dx=1"})
    assert len(calls) == 3 and len(list(tmp_path.glob("launch-*.cmd"))) == 3
    assert not list(tmp_path.glob(".launch-*"))  # written whole, then renamed


def test_spark_submit_runs_where_only_its_scripts_can_say_what_to_start(tmp_path):
    from streamjob.runtime.cluster import spark_launch

    home = _pyspark_home()
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "STREAMJOB_SPARK"))}
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "spark-env.sh").write_text("export SPARK_DAEMON_MEMORY=1g\n")  # a shell file: sourced by bash only
    assert spark_launch.gateway_command(home, {}, str(tmp_path), {**environ, "SPARK_CONF_DIR": str(conf)}) is None
    assert spark_launch.gateway_command(home, {}, str(tmp_path),
                                        {**environ, "STREAMJOB_SPARK_SUBMIT_SCRIPT": "1"}) is None
    # A launcher that refuses (a bad option here) leaves spark-submit to run and show its message.
    assert spark_launch.gateway_command(home, {}, str(tmp_path),
                                        {**environ, "SPARK_LAUNCHER_OPTS": "-XX:NoSuchOption"}) is None
    assert not list(tmp_path.glob("launch-*.cmd"))
    # A kept command whose Java is gone (a JDK removed) is asked for again.
    command, _ = spark_launch.gateway_command(home, {}, str(tmp_path), environ)
    [kept] = tmp_path.glob("launch-*.cmd")
    kept.write_bytes(b"/no/such/java\0-version\0")
    assert spark_launch.gateway_command(home, {}, str(tmp_path), environ)[0] == command


def test_kept_commands_unused_for_a_week_go_and_a_first_runs_is_not_kept(tmp_path):
    """A kept command in use is touched daily; one no run used for a week goes when another is kept. The
    command of a run whose JVM writes the class-data archive (a file named by that run) is never kept."""
    from streamjob.runtime.cluster import spark_launch

    home = _pyspark_home()
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "STREAMJOB_SPARK"))}
    spark_launch.gateway_command(home, {"spark.driver.memory": "301m"}, str(tmp_path), environ)
    [used] = tmp_path.glob("launch-*.cmd")
    stale = tmp_path / "launch-0123456789abcdef0123.cmd"
    stale.write_bytes(b"/no/java\0")
    week_ago = time.time() - 8 * 86400
    os.utime(used, (week_ago, week_ago))
    os.utime(stale, (week_ago, week_ago))
    spark_launch.gateway_command(home, {"spark.driver.memory": "301m"}, str(tmp_path), environ)  # used again
    assert time.time() - used.stat().st_mtime < 60
    spark_launch.gateway_command(home, {"spark.driver.memory": "302m"}, str(tmp_path), environ)  # a new one
    assert not stale.exists() and used.exists() and len(list(tmp_path.glob("launch-*.cmd"))) == 2
    first = {"spark.driver.extraJavaOptions": f"-XX:ArchiveClassesAtExit={tmp_path}/spark-x.123.jsa.part"}
    command, _ = spark_launch.gateway_command(home, first, str(tmp_path), environ)
    assert any("ArchiveClassesAtExit" in a for a in command) and len(list(tmp_path.glob("launch-*.cmd"))) == 2


def test_the_launchers_output_is_read_as_spark_class_reads_it():
    from streamjob.runtime.cluster.spark_launch import parse_launcher_output

    assert parse_launcher_output(b"a warning\n\0\n/usr/bin/java\0-cp\0x y\0Main\0") == ["/usr/bin/java", "-cp",
                                                                                       "x y", "Main"]
    assert parse_launcher_output(b"\0\n/usr/bin/java\0") == ["/usr/bin/java"]
    assert parse_launcher_output(b"Error: no command\n") is None


def test_task_workers_get_the_environment_spark_submit_gave_them(spark_slots):
    """The session's JVM was started by its own command (spark_launch); its Python workers see what
    spark-submit's scripts exported: the hash seed every worker shares, Spark's home."""
    from pyspark import SparkContext

    def _env(_):
        yield os.environ.get("PYTHONHASHSEED"), os.environ.get("SPARK_HOME"), os.environ.get("SPARK_ENV_LOADED")

    rows = SparkContext.getOrCreate().parallelize(range(2), 2).mapPartitions(_env).collect()
    assert rows == [("0", _pyspark_home(), "1")] * 2
