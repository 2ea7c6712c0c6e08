"""What Spark's JVM may say on the user's console, and Spark master URLs checked before a JVM starts.

Pure decisions (no pyspark): the log level the ``--log-level`` flag chose (an environment variable, so
the prestarted JVM of ``streamjob run`` and the deployment's agree), which lines of the JVM's stderr are
its start-up banner, and what is wrong with a master URL or its host, in one line.
"""

from __future__ import annotations

import os
import re
import socket

LEVEL_ENV = "STREAMJOB_LOG_LEVEL"  # set by `streamjob run --log-level`
VERBOSE_ENV = "STREAMJOB_VERBOSE"  # set by `streamjob run -v`: the JVM's banner is shown too
LEVELS = ("OFF", "FATAL", "ERROR", "WARN", "INFO", "DEBUG", "TRACE", "ALL")
DEFAULT_LOCAL_LEVEL = "ERROR"  # the embedded local Spark: the console is the job's

# The JVM's start-up lines a user can do nothing about: the JDK's note on the vector module Spark
# adds, log4j's choice of profile, and Spark's shell hint to call sc.setLogLevel (PySpark runs its
# JVM as a "pyspark-shell"), which `--log-level` replaces.
_BANNER = (
    re.compile(r"^WARNING: Using incubator modules: "),
    re.compile(r"^Using Spark's default log4j profile: "),
    re.compile(r'^Setting default log level to "'),
    re.compile(r"^To adjust logging level use sc\.setLogLevel\("),
)


def level(environ: dict | None = None) -> str | None:
    """The level the user chose, None: the default."""
    value = ((os.environ if environ is None else environ).get(LEVEL_ENV) or "").strip().upper()
    return value if value in LEVELS else None


def is_banner(line: str) -> bool:
    return any(p.match(line) for p in _BANNER)


def show_banner(environ: dict | None = None) -> bool:
    env = os.environ if environ is None else environ
    return bool(env.get(VERBOSE_ENV)) or level(env) in ("INFO", "DEBUG", "TRACE", "ALL")


class MasterURLError(ValueError):
    """A master URL that cannot work; the message is one line."""


_SCHEMES = ("local", "spark://", "k8s://", "yarn", "local-cluster[")
_LOCAL = re.compile(r"local(\[(\*|[1-9]\d*)(,\s*\d+)?\])?")


def check_master_syntax(master: str) -> None:
    """Spark's master URL forms, refused here in one line instead of by the JVM with a stack trace."""
    m = master.strip()
    if m.startswith("local-cluster["):
        return
    if m.startswith("local"):
        if not _LOCAL.fullmatch(m):
            raise MasterURLError(f"bad master URL {master!r}: expected local, local[N], local[*] or local[N,F]")
        return
    if m.startswith("spark://"):
        for host, port in _spark_hosts(m):
            if not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise MasterURLError(f"bad master URL {master!r}: expected spark://HOST:PORT[,HOST:PORT...]")
        return
    if m.startswith("k8s://"):
        if len(m) <= len("k8s://"):
            raise MasterURLError(f"bad master URL {master!r}: expected k8s://https://API-SERVER[:PORT]")
        return
    if m == "yarn":
        return
    raise MasterURLError(f"bad master URL {master!r}: expected local[N], spark://HOST:PORT, k8s://https://HOST "
                         f"or yarn")


def _spark_hosts(master: str) -> list[tuple[str, str]]:
    hosts = []
    for part in master[len("spark://"):].split(","):
        host, _, port = part.strip().rpartition(":")
        hosts.append((host.strip("[]"), port))
    return hosts


def probe_standalone_master(master: str, timeout: float = 3.0, environ: dict | None = None) -> None:
    """A spark:// master must resolve and accept connections: Spark's own client retries an unreachable
    master for about a minute, printing stack traces, before it gives up. Refused at once, in one line,
    when no master of the URL can be reached. ``yarn`` needs the cluster's configuration, which
    spark-submit refuses to start without (with a stack trace)."""
    env = os.environ if environ is None else environ
    if master.strip() == "yarn" and not (env.get("HADOOP_CONF_DIR") or env.get("YARN_CONF_DIR")):
        raise MasterURLError("master yarn needs the YARN cluster's configuration: set HADOOP_CONF_DIR or "
                             "YARN_CONF_DIR to its directory (as for spark-submit); for a run on this machine, "
                             "leave --master out (local Spark)")
    if not master.strip().startswith("spark://"):
        return
    problems = []
    for host, port in _spark_hosts(master.strip()):
        try:
            infos = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
        except socket.gaierror:
            problems.append(f"unknown host {host!r}")
            continue
        reason = "no address"
        for family, kind, proto, _, address in infos:
            try:
                with socket.socket(family, kind, proto) as s:
                    s.settimeout(timeout)
                    s.connect(address)
                return  # one master answers: Spark does the rest
            except ConnectionRefusedError:
                reason = f"connection refused at {host}:{port}"
            except socket.timeout:
                reason = f"no answer from {host}:{port} within {timeout:g} s"
            except OSError as e:
                reason = f"{host}:{port}: {e.strerror or e}"
        problems.append(reason)
    raise MasterURLError(f"cannot reach the Spark master {master}: {'; '.join(problems)}")
