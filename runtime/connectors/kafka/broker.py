"""A real single-node Apache Kafka broker (KRaft, combined broker + controller) on 127.0.0.1.

For tests (the ``kafka_broker`` fixtures) and for users (``streamjob kafka-dev``). It runs the
broker's own jars (``dist.ensure_libs``) with ``java -cp 'libs/*' kafka.Kafka``: no emulator, no
container. Everything lives in one data dir: ``server.properties``, ``log4j2.properties``,
``broker.log`` (the JVM's stdout and stderr) and ``kraft/`` (the log dir, formatted once with a fresh
cluster id; a restart keeps it, so topics, offsets and transactions survive a restart or a kill).

The broker never outlives the Python process that started it: a tiny watchdog process holds the
read end of a pipe whose write end only this process has; when the process dies (even by SIGKILL)
the pipe closes and the watchdog kills the broker's process group. ``stop()`` tells the watchdog
to stand down first.
"""

from __future__ import annotations

import base64
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Callable

from .dist import KAFKA_VERSION, ensure_libs

# Small heap and a quick JIT: a test broker holds a few MB of records, and its start is what a test
# waits for. -XX:TieredStopAtLevel=1 would start faster still but halves throughput (bench/).
JVM_OPTS = ["-Xmx512m", "-Xms64m", "-XX:+UseSerialGC", "-Xss512k", "-Djava.awt.headless=true",
            "-XX:-UsePerfData"]

_LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = STDOUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = STDOUT
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.cleaner.name = kafka.log.LogCleaner
logger.cleaner.level = WARN
"""

# If the parent's write end closes without "stop" having been written, the parent died: kill the
# broker's whole process group (it runs in a session of its own, so its pgid is its pid).
_WATCHDOG = ("import os, signal, sys\n"
             "if not sys.stdin.buffer.read():\n"
             "    try:\n"
             "        os.killpg(int(sys.argv[1]), signal.SIGKILL)\n"
             "    except ProcessLookupError:\n"
             "        pass\n")


class KafkaBrokerError(RuntimeError):
    """The broker did not start (the message names its log file)."""


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def new_cluster_id() -> str:
    """A Kafka Uuid in its base64url form. Kafka refuses ids that start with '-' (they read as a flag)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def server_properties(data_dir: Path, host: str, port: int, controller_port: int,
                      overrides: dict[str, str] | None = None) -> dict[str, str]:
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@{host}:{controller_port}",
        "listeners": f"PLAINTEXT://{host}:{port},CONTROLLER://{host}:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://{host}:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(data_dir / "kraft"),
        # One node: every internal topic has exactly one replica, or it is never created.
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "4",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "4",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        # A consumer group's first join completes at once instead of after 3 s.
        "group.initial.rebalance.delay.ms": "0",
        "num.partitions": "1",
        # Few threads: the machine this runs on has 2 cores shared with Spark.
        "num.network.threads": "2",
        "num.io.threads": "2",
        "background.threads": "2",
        "num.recovery.threads.per.data.dir": "1",
        "log.cleaner.threads": "1",
        "log.cleaner.dedupe.buffer.size": str(8 * 1024 * 1024),
        # After a kill, the controller (this same process) keeps the dead incarnation registered until
        # its session expires, and the new one cannot register before: 9 s by default.
        "broker.heartbeat.interval.ms": "500",
        "broker.session.timeout.ms": "3000",
        # A restart after a kill recovers the last segment; small segments keep that quick.
        "log.segment.bytes": str(64 * 1024 * 1024),
    }
    props.update(overrides or {})
    return props


class KafkaBroker:
    """One Apache Kafka broker process. ``port=0`` picks a free port at the first ``start()``;
    restarts keep it (clients reconnect to the same bootstrap address).

    ``data_dir=None`` uses a temporary directory, removed by ``close()`` (and the context manager);
    a given ``data_dir`` is kept, and a broker started on an already formatted one keeps its topics.
    """

    def __init__(self, data_dir: str | os.PathLike | None = None, port: int = 0, host: str = "127.0.0.1",
                 overrides: dict[str, str] | None = None, version: str = KAFKA_VERSION,
                 start_timeout: float = 90.0, progress: Callable[[str], None] | None = None):
        self._own_dir = data_dir is None
        self.data_dir = Path(data_dir) if data_dir is not None else Path(tempfile.mkdtemp(prefix="kafka-"))
        self.host = host
        self.port = port
        self.controller_port = 0
        self.overrides = dict(overrides or {})
        self.version = version
        self.start_timeout = start_timeout
        self.progress = progress
        self._proc: subprocess.Popen | None = None
        self._watchdog: subprocess.Popen | None = None
        self._watch_w: int | None = None
        self._log = None

    # -- addresses and files -------------------------------------------------

    @property
    def bootstrap(self) -> str:
        if not self.port:
            raise KafkaBrokerError("the broker has no port before start()")
        return f"{self.host}:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "broker.log"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    # -- lifecycle ------------------------------------------------------------

    def start(self) -> "KafkaBroker":
        if self.is_running():
            return self
        libs = ensure_libs(self.version, self.progress)
        java = shutil.which("java") or (os.path.join(os.environ["JAVA_HOME"], "bin", "java")
                                        if os.environ.get("JAVA_HOME") else None)
        if java is None:
            raise KafkaBrokerError("the Kafka broker needs Java 17+: no `java` on PATH and no JAVA_HOME")
        if not self.port:
            self.port = _free_port(self.host)
        if not self.controller_port:
            self.controller_port = _free_port(self.host)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        props_file = self.data_dir / "server.properties"
        props = server_properties(self.data_dir, self.host, self.port, self.controller_port, self.overrides)
        props_file.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        log4j = self.data_dir / "log4j2.properties"
        log4j.write_text(_LOG4J2)
        classpath = str(libs / "*")
        base_cmd = [java, *JVM_OPTS, f"-Dlog4j2.configurationFile={log4j}", "-cp", classpath]
        if not (self.data_dir / "kraft" / "meta.properties").exists():
            self._format(base_cmd, props_file)
        self._launch(base_cmd + ["kafka.Kafka", str(props_file)])
        self._wait_ready()
        return self

    def _format(self, base_cmd: list[str], props_file: Path) -> None:
        cmd = base_cmd + ["kafka.tools.StorageTool", "format", "-t", new_cluster_id(), "-c", str(props_file),
                          "--ignore-formatted"]
        proc = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120)
        if proc.returncode != 0:
            with open(self.log_file, "a") as f:
                f.write(proc.stdout + proc.stderr)
            raise KafkaBrokerError(f"formatting the Kafka data dir {self.data_dir / 'kraft'} failed "
                                   f"(exit {proc.returncode}); see {self.log_file}:\n{_tail(self.log_file)}")

    def _launch(self, cmd: list[str]) -> None:
        self._log = open(self.log_file, "ab")
        self._proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                      start_new_session=True, cwd=self.data_dir)
        read_end, self._watch_w = os.pipe()
        try:
            self._watchdog = subprocess.Popen([sys.executable, "-S", "-c", _WATCHDOG, str(self._proc.pid)],
                                              stdin=read_end, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                              start_new_session=True)
        finally:
            os.close(read_end)

    def _wait_ready(self) -> None:
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + self.start_timeout
        # librdkafka logs every refused connection while the JVM starts: silence it (log_level 0).
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0, "socket.timeout.ms": 2000})
        while True:
            if self._proc is not None and self._proc.poll() is not None:
                code = self._proc.returncode
                self._release()
                raise KafkaBrokerError(f"the Kafka broker exited with code {code} while starting; "
                                       f"see {self.log_file}:\n{_tail(self.log_file)}")
            try:
                md = admin.list_topics(timeout=1.0)
                if md.brokers:
                    return
            except Exception:  # KafkaException while the listener is not up yet
                pass
            if time.monotonic() > deadline:
                self.kill()
                raise KafkaBrokerError(f"the Kafka broker on {self.bootstrap} did not answer a metadata request "
                                       f"within {self.start_timeout:.0f}s; see {self.log_file}:\n"
                                       f"{_tail(self.log_file)}")
            time.sleep(0.2)

    def stop(self, timeout: float = 30.0) -> None:
        """Controlled shutdown (SIGTERM); SIGKILL if it takes longer than ``timeout``. Keeps the data."""
        if self._proc is None:
            return
        if self._proc.poll() is None:
            try:
                os.killpg(self._proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self._proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._signal_group(signal.SIGKILL)
                self._proc.wait()
        self._release()

    def kill(self) -> None:
        """SIGKILL, as a crashed machine would: no controlled shutdown, unflushed data is recovered
        from the log at the next start."""
        if self._proc is None:
            return
        if self._proc.poll() is None:
            self._signal_group(signal.SIGKILL)
            self._proc.wait()
        self._release()

    def restart(self, hard: bool = False) -> "KafkaBroker":
        """Same data dir, same port; ``hard=True`` kills instead of stopping cleanly."""
        self.kill() if hard else self.stop()
        return self.start()

    def close(self) -> None:
        """Stop, and remove the data dir if it was a temporary one."""
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> "KafkaBroker":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    def _signal_group(self, sig: int) -> None:
        try:
            os.killpg(self._proc.pid, sig)
        except ProcessLookupError:
            pass

    def _release(self) -> None:
        """The broker is gone: stand the watchdog down and close our ends."""
        if self._watch_w is not None:
            try:
                os.write(self._watch_w, b"stop\n")
            except OSError:
                pass
            os.close(self._watch_w)
            self._watch_w = None
        if self._watchdog is not None:
            try:
                self._watchdog.wait(5)
            except subprocess.TimeoutExpired:
                self._watchdog.kill()
            self._watchdog = None
        if self._log is not None:
            self._log.close()
            self._log = None
        self._proc = None


def _tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    # The lines that say why come with ERROR or an exception; show those first if the tail has none.
    tail = text[-lines:]
    errors = [line for line in text if " ERROR " in line or "Exception" in line][-10:]
    extra = [line for line in errors if line not in tail]
    return "\n".join(extra + tail)
