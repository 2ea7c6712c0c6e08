"""The Apache Kafka broker's jars, fetched from Maven Central by ``mvn`` into a local cache.

No tarball download: the project's machines reach Maven Central (through ``mvn``) and nothing else,
and ``org.apache.kafka:kafka_2.13`` with its runtime dependencies is all a KRaft broker needs
(``java -cp 'libs/*' kafka.Kafka server.properties``).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Callable

# The newest 4.x that Maven Central serves here in full (kafka_2.13 and every module it needs).
KAFKA_VERSION = "4.4.0"
# Kafka's own log4j2 binding for the slf4j 1.7 API it logs through; without it the broker logs
# nothing, and a broker that fails to start would leave an empty log file to read.
LOG4J_VERSION = "2.25.5"

HOME_ENV = "STREAMJOB_KAFKA_HOME"
_COMPLETE = ".complete"


class KafkaDistError(RuntimeError):
    """The broker's jars could not be fetched (no ``mvn``, or Maven Central refused)."""


def kafka_home(version: str = KAFKA_VERSION) -> Path:
    """``$STREAMJOB_KAFKA_HOME``, else ``~/.cache/streamjob/kafka-<version>``; the jars go to ``libs/``."""
    env = os.environ.get(HOME_ENV)
    if env:
        return Path(env).expanduser()
    return Path("~/.cache/streamjob").expanduser() / f"kafka-{version}"


def libs_dir(version: str = KAFKA_VERSION) -> Path:
    return kafka_home(version) / "libs"


def is_fetched(version: str = KAFKA_VERSION) -> bool:
    return (libs_dir(version) / _COMPLETE).exists()


def _pom(version: str) -> str:
    return f"""<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>streamjob</groupId>
  <artifactId>kafka-broker-libs</artifactId>
  <version>{version}</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>{version}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId>
      <version>{LOG4J_VERSION}</version>
    </dependency>
  </dependencies>
</project>
"""


def ensure_libs(version: str = KAFKA_VERSION, progress: Callable[[str], None] | None = None) -> Path:
    """The ``libs/`` directory with every jar the broker needs, fetched first if it is not there yet.

    ``progress`` receives mvn's output lines (one per artifact downloaded) as they come. Concurrent
    callers (two test runs, a test run and ``streamjob kafka-dev``) wait on a lock instead of
    fetching twice; a fetch cut short leaves no ``.complete`` marker, so the next call starts over.
    """
    libs = libs_dir(version)
    if (libs / _COMPLETE).exists():
        return libs
    mvn = shutil.which("mvn")
    if mvn is None:
        raise KafkaDistError(
            "cannot fetch the Kafka broker's jars: `mvn` is not installed (Debian: apt-get install maven); "
            f"or put the jars of org.apache.kafka:kafka_2.13:{version} in {libs} and create {libs / _COMPLETE}")
    home = libs.parent
    home.mkdir(parents=True, exist_ok=True)
    with open(home / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (libs / _COMPLETE).exists():
            return libs
        with tempfile.TemporaryDirectory(dir=home, prefix=".fetch-") as tmp:
            (Path(tmp) / "pom.xml").write_text(_pom(version))
            out = Path(tmp) / "libs"
            cmd = [mvn, "-B", "-f", str(Path(tmp) / "pom.xml"),
                   "dependency:copy-dependencies", "-DincludeScope=runtime", f"-DoutputDirectory={out}"]
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                    stdin=subprocess.DEVNULL)
            tail: list[str] = []
            assert proc.stdout is not None
            for line in proc.stdout:
                line = line.rstrip()
                tail = (tail + [line])[-40:]
                if progress is not None and ("Download" in line or "Copying" in line or "ERROR" in line):
                    progress(line)
            if proc.wait() != 0 or not any(out.glob("kafka_2.13-*.jar")):
                raise KafkaDistError(
                    f"mvn could not fetch org.apache.kafka:kafka_2.13:{version} from Maven Central "
                    f"(exit {proc.returncode}):\n" + "\n".join(tail))
            (out / _COMPLETE).write_text(version + "\n")
            if libs.exists():
                shutil.rmtree(libs)
            out.rename(libs)
    return libs
