"""Job configuration: string keys with Flink's names where Flink has one.

Keys starting with ``spark.`` are handed to Spark unchanged; the others are
the runtime's own. Values given on the command line arrive as strings and are
parsed by the typed getters, which name the key when a value does not parse.
"""

from __future__ import annotations

import difflib
import re
from functools import cache
from typing import Any, Iterable, Mapping


class Options:
    PARALLELISM = "parallelism.default"
    MAX_PARALLELISM = "pipeline.max-parallelism"
    # operator key -> parallelism set from outside the program (Flink's option: what its autoscaler sets);
    # the Kubernetes operator passes its autoscaler's choices so that a new deployment keeps them
    PARALLELISM_OVERRIDES = "pipeline.jobvertex-parallelism-overrides"
    BUFFER_TIMEOUT = "execution.buffer-timeout"
    BATCH_SIZE = "execution.batch-size"
    BUFFERS_PER_CHANNEL = "taskmanager.network.memory.buffers-per-channel"
    METRICS_INTERVAL = "metrics.reporter.interval"
    AUTO_WATERMARK_INTERVAL = "pipeline.auto-watermark-interval"  # ms between periodic watermarks; 0 = none
    RUNTIME_MODE = "execution.runtime-mode"  # STREAMING, BATCH, or AUTOMATIC (BATCH when every source is bounded)
    SPARK_MASTER = "spark.master"
    # checkpointing (Flink 2 key names)
    CHECKPOINTING_INTERVAL = "execution.checkpointing.interval"  # ms; 0 = off
    CHECKPOINTING_MODE = "execution.checkpointing.mode"
    CHECKPOINTING_TIMEOUT = "execution.checkpointing.timeout"
    CHECKPOINTING_MIN_PAUSE = "execution.checkpointing.min-pause"
    CHECKPOINTING_MAX_CONCURRENT = "execution.checkpointing.max-concurrent-checkpoints"
    CHECKPOINTING_TOLERABLE_FAILURES = "execution.checkpointing.tolerable-failed-checkpoints"
    CHECKPOINTING_NUM_RETAINED = "execution.checkpointing.num-retained"
    CHECKPOINTING_RETENTION = "execution.checkpointing.externalized-checkpoint-retention"
    CHECKPOINTING_DIR = "execution.checkpointing.dir"
    CHECKPOINTING_UNALIGNED = "execution.checkpointing.unaligned"  # also read: ....unaligned.enabled (Flink 2)
    CHECKPOINTING_ALIGNED_TIMEOUT = "execution.checkpointing.aligned-checkpoint-timeout"  # 0: unaligned at once
    CHECKPOINTING_UNALIGNED_FORCED = "execution.checkpointing.unaligned.forced"
    MEMORY_STORAGE_MAX_STATE = "execution.checkpointing.memory.max-state-size"  # bytes per task, memory://
    INLINE_STATE_THRESHOLD = "execution.checkpointing.file-state-threshold"  # bytes kept inside _metadata
    STATE_BACKEND = "state.backend.type"
    INCREMENTAL_CHECKPOINTS = "execution.checkpointing.incremental"  # RocksDB: upload only new SST files
    CLAIM_MODE = "execution.state-recovery.claim-mode"  # CLAIM: the job takes over the restored checkpoints
    ROCKSDB_LOCAL_DIR = "state.backend.rocksdb.localdir"  # working directories of the tasks' databases
    IO_TMP_DIRS = "io.tmp.dirs"  # tasks' spill files (a loop's back-edge backlog); empty: the system temp dir
    ITERATION_FEEDBACK_MEMORY = "iteration.feedback-buffer.memory"  # a loop head's queued feedback in memory
    ROCKSDB_BLOCK_CACHE = "state.backend.rocksdb.block.cache-size"
    ROCKSDB_WRITE_BUFFER = "state.backend.rocksdb.writebuffer.size"
    ROCKSDB_THREADS = "state.backend.rocksdb.thread.num"
    STATE_CACHE_SIZE = "python.state.cache-size"  # entries per state kept as Python objects (PyFlink's name)
    STATE_CACHE_MEMORY = "python.state.cache-memory"  # ... and their estimated bytes per state
    RECOVERY_PATH = "execution.state-recovery.path"  # resume from this checkpoint / savepoint
    ALLOW_NON_RESTORED_STATE = "execution.state-recovery.ignore-unclaimed-state"  # skip state of removed operators
    # restore an older checkpoint when the newest completed one cannot be read, accepting that the
    # output the newest one committed is written again (checkpoint/recovery.py)
    ALLOW_OLDER_CHECKPOINT = "execution.state-recovery.allow-older-checkpoint"
    SAVEPOINT_DIR = "execution.checkpointing.savepoint-dir"  # default target directory of savepoints
    REST_ADDRESS = "rest.address"  # HOST:PORT of the job manager's REST API (port 0: a free one)
    REST_TOKEN = "rest.auth.token"  # bearer token the REST API requires (empty: none)
    REST_TOKEN_FILE = "rest.auth.token-file"  # ... read from this file (a mounted Kubernetes Secret)
    REST_RESULT_LINGER = "rest.result-linger"  # how long the final result stays served after the job ended
    # Storage schemes a savepoint's target_dir may use over REST besides the job's own (comma-separated)
    REST_SAVEPOINT_SCHEMES = "rest.savepoint.allowed-schemes"
    JOBMANAGER_RPC_PORT = "jobmanager.rpc.port"  # the control server's port (0: a free one)
    QUERYABLE_STATE_PROXY_PORTS = "queryable-state.proxy.ports"  # the lookup port: 9069, 9069-9075, 0, off
    # Kubernetes (Spark on Kubernetes in client mode: the driver runs in the job's pod)
    K8S_IMAGE = "kubernetes.container.image"  # the executors' image, else env STREAMJOB_IMAGE
    K8S_NAMESPACE = "kubernetes.namespace"  # else env POD_NAMESPACE, else the service account's namespace
    K8S_EXECUTOR_POD_TEMPLATE = "kubernetes.executor.pod-template-file"
    K8S_EXECUTOR_CORES = "kubernetes.executor.cores"  # slots per executor pod
    K8S_SCHEDULING_TIMEOUT = "kubernetes.executor.scheduling-timeout"  # how long to wait for every executor
    K8S_TERMINATION_LOG = "kubernetes.termination-log"  # where the final result goes as the termination message
    S3_ENDPOINT = "s3.endpoint"  # else AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL, else AWS
    S3_ACCESS_KEY = "s3.access-key"  # else the AWS default credential chain
    S3_SECRET_KEY = "s3.secret-key"
    S3_PATH_STYLE = "s3.path.style.access"
    S3_CONNECT_TIMEOUT = "s3.connect-timeout"
    S3_READ_TIMEOUT = "s3.read-timeout"
    S3_MAX_ATTEMPTS = "s3.max-attempts"  # per request, transient errors included
    # restart strategy (Flink's keys; api/restart.py writes them, cluster/failover.py reads them)
    RESTART_STRATEGY = "restart-strategy.type"
    RESTART_FIXED_ATTEMPTS = "restart-strategy.fixed-delay.attempts"
    RESTART_FIXED_DELAY = "restart-strategy.fixed-delay.delay"
    RESTART_EXP_INITIAL = "restart-strategy.exponential-delay.initial-backoff"
    RESTART_EXP_MAX = "restart-strategy.exponential-delay.max-backoff"
    RESTART_EXP_MULTIPLIER = "restart-strategy.exponential-delay.backoff-multiplier"
    RESTART_EXP_RESET = "restart-strategy.exponential-delay.reset-backoff-threshold"
    RESTART_EXP_JITTER = "restart-strategy.exponential-delay.jitter-factor"
    RESTART_EXP_ATTEMPTS = "restart-strategy.exponential-delay.attempts-before-reset-backoff"
    RESTART_RATE_MAX = "restart-strategy.failure-rate.max-failures-per-interval"
    RESTART_RATE_INTERVAL = "restart-strategy.failure-rate.failure-rate-interval"
    RESTART_RATE_DELAY = "restart-strategy.failure-rate.delay"


# Restart strategy names as Flink accepts them (its aliases included) -> the strategy.
RESTART_STRATEGIES = {
    "none": "none", "off": "none", "disable": "none", "norestart": "none",
    "fixed-delay": "fixed-delay", "fixeddelay": "fixed-delay",
    "exponential-delay": "exponential-delay", "exponentialdelay": "exponential-delay",
    "failure-rate": "failure-rate", "failurerate": "failure-rate",
}
STATE_BACKENDS = ("hashmap", "rocksdb")

# Options whose value is one of a few words. Read case-insensitively, as Flink reads its enums; anything
# else is refused before the job starts: a typo must never quietly become another behaviour (a mode of
# SOMETIMES used to run at least once). key -> (how a value is normalised, the allowed values).
CHOICES: dict[str, tuple[Any, tuple[str, ...]]] = {
    Options.CHECKPOINTING_MODE: (str.upper, ("EXACTLY_ONCE", "AT_LEAST_ONCE")),
    Options.CHECKPOINTING_RETENTION: (str.upper, ("NO_EXTERNALIZED_CHECKPOINTS", "DELETE_ON_CANCELLATION",
                                                  "RETAIN_ON_CANCELLATION")),
    Options.CLAIM_MODE: (str.upper, ("CLAIM", "NO_CLAIM")),
    Options.RUNTIME_MODE: (str.upper, ("STREAMING", "BATCH", "AUTOMATIC")),
    Options.STATE_BACKEND: (str.lower, STATE_BACKENDS),
    Options.RESTART_STRATEGY: (lambda v: v.lower().replace("_", "-"), tuple(RESTART_STRATEGIES)),
}
# Keys read under another key's name (Flink 2 spellings of the same option).
ALIASES = (Options.CHECKPOINTING_UNALIGNED + ".enabled",)


DEFAULTS: dict[str, Any] = {
    Options.PARALLELISM: 1,
    Options.MAX_PARALLELISM: 128,
    Options.BUFFER_TIMEOUT: 100,  # ms, as Flink's default
    Options.BATCH_SIZE: 8192,  # records per network batch
    Options.BUFFERS_PER_CHANNEL: 2,  # credits: batches in flight per input channel
    Options.METRICS_INTERVAL: 500,  # ms between task metric reports
    Options.AUTO_WATERMARK_INTERVAL: 200,  # ms, as Flink's default
    Options.RUNTIME_MODE: "STREAMING",
    Options.CHECKPOINTING_INTERVAL: 0,
    Options.CHECKPOINTING_MODE: "EXACTLY_ONCE",
    Options.CHECKPOINTING_TIMEOUT: 600_000,  # 10 min, as Flink
    Options.CHECKPOINTING_MIN_PAUSE: 0,
    Options.CHECKPOINTING_MAX_CONCURRENT: 1,
    Options.CHECKPOINTING_TOLERABLE_FAILURES: 0,
    Options.CHECKPOINTING_NUM_RETAINED: 1,
    Options.CHECKPOINTING_RETENTION: "NO_EXTERNALIZED_CHECKPOINTS",
    Options.CHECKPOINTING_DIR: "memory://streamjob-checkpoints",
    Options.CHECKPOINTING_UNALIGNED: False,
    Options.CHECKPOINTING_ALIGNED_TIMEOUT: 0,
    Options.CHECKPOINTING_UNALIGNED_FORCED: False,
    Options.MEMORY_STORAGE_MAX_STATE: 5 << 20,  # as Flink's job manager storage
    Options.INLINE_STATE_THRESHOLD: 20 << 10,  # as Flink's state.storage.fs.memory-threshold
    Options.STATE_BACKEND: "hashmap",
    Options.INCREMENTAL_CHECKPOINTS: False,
    Options.CLAIM_MODE: "NO_CLAIM",
    Options.ALLOW_NON_RESTORED_STATE: False,
    Options.ALLOW_OLDER_CHECKPOINT: False,
    Options.SAVEPOINT_DIR: "",
    Options.REST_ADDRESS: "127.0.0.1:0",
    Options.REST_TOKEN: "",
    Options.REST_TOKEN_FILE: "",
    Options.REST_SAVEPOINT_SCHEMES: "",
    Options.REST_RESULT_LINGER: "0 s",  # in a pod (POD_IP set) and not configured: 60 s, see cluster/pod.py
    Options.JOBMANAGER_RPC_PORT: 0,
    Options.QUERYABLE_STATE_PROXY_PORTS: "0",
    Options.K8S_IMAGE: "",
    Options.K8S_NAMESPACE: "",
    Options.K8S_EXECUTOR_POD_TEMPLATE: "",
    Options.K8S_EXECUTOR_CORES: 1,
    Options.K8S_SCHEDULING_TIMEOUT: "2 min",
    Options.K8S_TERMINATION_LOG: "/dev/termination-log",  # written only if it exists, unless configured
    Options.S3_ENDPOINT: "",
    Options.S3_ACCESS_KEY: "",
    Options.S3_SECRET_KEY: "",
    Options.S3_PATH_STYLE: False,
    Options.S3_CONNECT_TIMEOUT: "5 s",
    Options.S3_READ_TIMEOUT: "60 s",
    Options.S3_MAX_ATTEMPTS: 3,
    Options.ROCKSDB_LOCAL_DIR: "",  # empty: <system temp dir>/streamjob-rocksdb
    Options.IO_TMP_DIRS: "",
    Options.ITERATION_FEEDBACK_MEMORY: "64 mb",
    Options.ROCKSDB_BLOCK_CACHE: "64 mb",
    Options.ROCKSDB_WRITE_BUFFER: "32 mb",
    Options.ROCKSDB_THREADS: 2,
    Options.STATE_CACHE_SIZE: 2_000_000,
    Options.STATE_CACHE_MEMORY: "256 mb",
}

# What each option does, one line each: docs/reference/configuration.md is generated from Options,
# DEFAULTS, CHOICES and this (python tools/gen_docs.py; tests/test_docs.py checks every option has one).
DESCRIPTIONS: dict[str, str] = {
    Options.PARALLELISM: "The job's default parallelism: what `--parallelism` sets; `env.set_parallelism` in the job "
                         "wins, as in Flink",
    Options.MAX_PARALLELISM: "Number of key groups; a restore with a different max parallelism is refused",
    Options.PARALLELISM_OVERRIDES: "Job vertices' parallelism above the program's own: `count:4,op3:2` (an operator's "
                                   "uid, else `op<n>`, its place in the plan; a key sets its operator's whole chain, "
                                   "as a rescale request does); an operator the job lacks is refused. What the "
                                   "Kubernetes operator passes a redeploy to keep its autoscaler's choices",
    Options.BUFFER_TIMEOUT: "ms a record may wait in a partly filled network batch",
    Options.BATCH_SIZE: "Records per network batch",
    Options.BUFFERS_PER_CHANNEL: "Credits: batches in flight per channel",
    Options.METRICS_INTERVAL: "ms between the tasks' metric reports to the job manager",
    Options.AUTO_WATERMARK_INTERVAL: "ms between periodic watermarks; 0: none",
    Options.RUNTIME_MODE: "`STREAMING`, `BATCH` (bounded sources, no checkpoints), or `AUTOMATIC` (BATCH when every "
                          "source is bounded)",
    Options.SPARK_MASTER: "The Spark master: what `--master` sets (none: the embedded `local[N]` Spark)",
    Options.CHECKPOINTING_INTERVAL: "ms between checkpoints (`enable_checkpointing`); 0: off",
    Options.CHECKPOINTING_MODE: "`EXACTLY_ONCE` aligns barriers; `AT_LEAST_ONCE` skips alignment",
    Options.CHECKPOINTING_TIMEOUT: "A checkpoint not complete by then fails",
    Options.CHECKPOINTING_MIN_PAUSE: "Least time between the end of one checkpoint and the start of the next",
    Options.CHECKPOINTING_MAX_CONCURRENT: "Checkpoints in progress at once",
    Options.CHECKPOINTING_TOLERABLE_FAILURES: "Failed checkpoints in a row before the job restarts from the latest "
                                              "completed one",
    Options.CHECKPOINTING_NUM_RETAINED: "Completed checkpoints kept",
    Options.CHECKPOINTING_RETENTION: "Whether completed checkpoints outlive the job: `NO_EXTERNALIZED_CHECKPOINTS` "
                                     "deletes them whenever the job ends, `DELETE_ON_CANCELLATION` keeps them if it "
                                     "fails, `RETAIN_ON_CANCELLATION` if it fails or is canceled (a graceful stop "
                                     "keeps its final checkpoint whatever this says)",
    Options.CHECKPOINTING_DIR: "Checkpoint storage URL: `memory://`, `file:///path` or `s3://bucket/dir`",
    Options.CHECKPOINTING_UNALIGNED: "Barriers overtake in-flight data, stored as channel state (`EXACTLY_ONCE` "
                                     "only); also read as `execution.checkpointing.unaligned.enabled`",
    Options.CHECKPOINTING_ALIGNED_TIMEOUT: "With unaligned checkpoints on: start aligned, switch to unaligned this late "
                                          "after the trigger (0: unaligned at once)",
    Options.CHECKPOINTING_UNALIGNED_FORCED: "Flink's switch for iterative jobs: recorded, changes nothing here",
    Options.MEMORY_STORAGE_MAX_STATE: "Bytes of state per task a `memory://` checkpoint may hold",
    Options.INLINE_STATE_THRESHOLD: "State files smaller than this (bytes) are kept inside `_metadata`",
    Options.STATE_BACKEND: "`hashmap` (Python dicts) or `rocksdb` (embedded RocksDB: state larger than memory)",
    Options.INCREMENTAL_CHECKPOINTS: "RocksDB: upload only new SST files",
    Options.CLAIM_MODE: "`NO_CLAIM`: a resumed checkpoint starts a new job (its first checkpoint is full, the old "
                        "directory is never touched); `CLAIM`: resume as the same job, in the old job's directory",
    Options.ROCKSDB_LOCAL_DIR: "RocksDB working directories (left-overs of killed tasks are swept)",
    Options.IO_TMP_DIRS: "Where tasks spill to local disk (a loop's feedback backlog; files are unnamed, "
                         "nothing is left behind)",
    Options.ITERATION_FEEDBACK_MEMORY: "A loop head's fed-back batches held in memory per task; more wait "
                                       "on local disk (io.tmp.dirs)",
    Options.ROCKSDB_BLOCK_CACHE: "RocksDB block cache",
    Options.ROCKSDB_WRITE_BUFFER: "RocksDB write buffer",
    Options.ROCKSDB_THREADS: "RocksDB background threads",
    Options.STATE_CACHE_SIZE: "RocksDB: entries per state cached as Python objects (PyFlink's name)",
    Options.STATE_CACHE_MEMORY: "RocksDB: estimated memory of the entries cached per state",
    Options.RECOVERY_PATH: "The checkpoint or savepoint to resume from: what `--from-checkpoint` / `--from-savepoint` "
                           "set",
    Options.ALLOW_NON_RESTORED_STATE: "Skip state of operators this job does not have: what "
                                      "`--allow-non-restored-state` sets",
    Options.ALLOW_OLDER_CHECKPOINT: "`--allow-older-checkpoint`: when the newest completed checkpoint cannot be read, "
                                    "restore an older one, accepting that what the newest one committed is written "
                                    "again (else the job fails)",
    Options.SAVEPOINT_DIR: "Default target directory of savepoints",
    Options.REST_ADDRESS: "HOST:PORT of the REST API, the dashboard and `/metrics` (port 0: a free one; `off`: none; "
                          "in a pod `0.0.0.0:0` unless set)",
    Options.REST_TOKEN: "Bearer token the REST API requires (empty: none)",
    Options.REST_TOKEN_FILE: "File holding that token (a mounted Secret); else env `STREAMJOB_REST_TOKEN`",
    Options.REST_RESULT_LINGER: "How long the final result stays served after the job ended, unless a client read it "
                                "first",
    Options.REST_SAVEPOINT_SCHEMES: "Storage schemes a savepoint's `target_dir` may use over REST besides the job's "
                                    "own (comma-separated)",
    Options.JOBMANAGER_RPC_PORT: "Port of the job manager's control channel, which tasks connect to (0: a free one)",
    Options.QUERYABLE_STATE_PROXY_PORTS: "Port of the queryable state proxy, on the REST API's host: a port, a range "
                                         "`9069-9075` (the first free), 0 (a free one) or `off`; Flink's default "
                                         "is 9069, the StreamJob operator sets that",
    Options.K8S_IMAGE: "`k8s://` masters: the executor pods' image; else env `STREAMJOB_IMAGE`",
    Options.K8S_NAMESPACE: "`k8s://` masters: where executor pods go; else env `POD_NAMESPACE`, else the service "
                           "account's namespace",
    Options.K8S_EXECUTOR_POD_TEMPLATE: "`k8s://` masters: the executor pod template file",
    Options.K8S_EXECUTOR_CORES: "`k8s://` masters: slots per executor pod",
    Options.K8S_SCHEDULING_TIMEOUT: "`k8s://` masters: how long to wait for every executor before failing",
    Options.K8S_TERMINATION_LOG: "Where the final result is written as JSON: the pod's termination message",
    Options.S3_ENDPOINT: "S3 endpoint; else env `AWS_ENDPOINT_URL_S3` / `AWS_ENDPOINT_URL`, else AWS",
    Options.S3_ACCESS_KEY: "S3 access key; else the AWS default credential chain",
    Options.S3_SECRET_KEY: "S3 secret key; else the AWS default credential chain",
    Options.S3_PATH_STYLE: "Path-style requests (MinIO-like stores)",
    Options.S3_CONNECT_TIMEOUT: "Per S3 request: connect timeout",
    Options.S3_READ_TIMEOUT: "Per S3 request: read timeout",
    Options.S3_MAX_ATTEMPTS: "Attempts per S3 request, transient errors included",
    Options.RESTART_STRATEGY: "`none`, `fixed-delay`, `exponential-delay` or `failure-rate` (and Flink's aliases); "
                              "unset: `exponential-delay` with checkpointing on, else `none`, as Flink",
    Options.RESTART_FIXED_ATTEMPTS: "fixed-delay: restarts before the job fails (unset: 1)",
    Options.RESTART_FIXED_DELAY: "fixed-delay: wait between restarts (unset: 1 s)",
    Options.RESTART_EXP_INITIAL: "exponential-delay: the first wait (unset: 1 s)",
    Options.RESTART_EXP_MAX: "exponential-delay: the longest wait (unset: 1 min)",
    Options.RESTART_EXP_MULTIPLIER: "exponential-delay: each wait is the last one times this (unset: 1.5)",
    Options.RESTART_EXP_RESET: "exponential-delay: a failure this long after the last one starts from the first wait again "
                                             "(unset: 1 h)",
    Options.RESTART_EXP_JITTER: "exponential-delay: random spread of each wait, as a fraction (unset: 0.1)",
    Options.RESTART_EXP_ATTEMPTS: "exponential-delay: restarts before the job fails, counted since the last reset (unset: no "
                                                "limit)",
    Options.RESTART_RATE_MAX: "failure-rate: the most failures within the interval; one more fails the job (unset: 1)",
    Options.RESTART_RATE_INTERVAL: "failure-rate: the interval (unset: 1 min)",
    Options.RESTART_RATE_DELAY: "failure-rate: wait between restarts (unset: 1 s)",
}


_MEMORY = re.compile(r"(\d+(?:\.\d+)?)\s*(b|bytes|k|kb|kib|m|mb|mib|g|gb|gib|t|tb|tib)?")
_MEMORY_UNITS = {"b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


class ConfigError(ValueError):
    pass


_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|milli|millis|s|sec|secs|second|seconds|min|mins|minute|minutes|h|hour|hours|d|day|days)?")
_UNITS = {"ms": 1, "milli": 1, "millis": 1, "s": 1000, "sec": 1000, "secs": 1000, "second": 1000, "seconds": 1000,
          "min": 60_000, "mins": 60_000, "minute": 60_000, "minutes": 60_000, "h": 3_600_000, "hour": 3_600_000,
          "hours": 3_600_000, "d": 86_400_000, "day": 86_400_000, "days": 86_400_000}


_UNSET = object()  # remove_config: "no value" (None can be a value)


class Configuration:
    def __init__(self, values: Mapping[str, Any] | None = None):
        self._values: dict[str, Any] = dict(values or {})

    @staticmethod
    def from_pairs(pairs: Iterable[str]) -> "Configuration":
        """Parse ``key=value`` strings (``--conf``)."""
        conf = Configuration()
        for pair in pairs:
            key, sep, value = pair.partition("=")
            if not sep or not key.strip():
                raise ConfigError(f"--conf {pair!r}: expected key=value")
            conf.set(key.strip(), value.strip())
        return conf

    @staticmethod
    def from_file(path: str) -> "Configuration":
        """``key=value`` lines (``#`` starts a comment line), as ``--conf`` takes them: a job.conf."""
        conf = Configuration()
        try:
            with open(path, encoding="utf-8") as f:
                lines = f.read().splitlines()
        except OSError as e:
            raise ConfigError(f"--conf-file {path}: {e.strerror or e}") from None
        for number, line in enumerate(lines, 1):
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            key, sep, value = text.partition("=")
            if not sep or not key.strip():
                raise ConfigError(f"{path}, line {number}: expected key=value, got {text!r}")
            conf.set(key.strip(), value.strip())
        return conf

    def set(self, key: str, value: Any) -> "Configuration":
        self._values[key] = value
        return self

    # PyFlink spelling
    def set_string(self, key: str, value: str) -> "Configuration":
        return self.set(key, value)

    def set_integer(self, key: str, value: int) -> "Configuration":
        return self.set(key, int(value))

    def set_boolean(self, key: str, value: bool) -> "Configuration":
        return self.set(key, bool(value))

    def set_float(self, key: str, value: float) -> "Configuration":
        return self.set(key, float(value))

    def get_integer(self, key: str, default_value: int | None = None) -> int | None:
        """PyFlink's: the key's value as an int, ``default_value`` where it has none."""
        return default_value if self.get(key) is None else self.get_int(key)

    def get_boolean(self, key: str, default_value: bool | None = None) -> bool | None:
        """PyFlink's: the key's value as a bool, ``default_value`` where it has none."""
        return default_value if self.get(key) is None else self.get_bool(key)

    def key_set(self) -> set[str]:
        """The keys set in this configuration (PyFlink's)."""
        return set(self._values)

    def add_all_to_dict(self, target_dict: dict) -> None:
        """Copy every key and value into ``target_dict`` (PyFlink's)."""
        target_dict.update(self._values)

    def add_all(self, other: "Configuration", prefix: str | None = None) -> "Configuration":
        """Every key and value of ``other``, each key after ``prefix`` if given (PyFlink's)."""
        values = other._values if isinstance(other, Configuration) else dict(other)
        self._values.update({f"{prefix or ''}{k}": v for k, v in values.items()})
        return self

    def remove_config(self, key: str) -> bool:
        """Remove a key; whether it was set (PyFlink's)."""
        return self._values.pop(key, _UNSET) is not _UNSET

    def contains_key(self, key: str) -> bool:
        return key in self._values

    def get(self, key: str, default: Any = None) -> Any:
        if key in self._values:
            return self._values[key]
        return DEFAULTS.get(key, default)

    def get_string(self, key: str, default_value: str | None = None) -> str | None:
        value = self.get(key, default_value)
        return None if value is None else str(value)

    def get_int(self, key: str, default: int | None = None) -> int:
        value = self.get(key, default)
        try:
            if isinstance(value, bool):
                raise ValueError
            return int(str(value).strip()) if isinstance(value, str) else int(value)
        except (TypeError, ValueError):
            raise ConfigError(f"configuration {key}: expected an integer, got {value!r}") from None

    def get_float(self, key: str, default_value: float | None = None) -> float:
        value = self.get(key, default_value)
        try:
            return float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"configuration {key}: expected a number, got {value!r}") from None

    def get_duration_ms(self, key: str, default: Any = None) -> int:
        """A duration as Flink writes it (``500 ms``, ``1 s``, ``2 min``, ``1 h``) or plain milliseconds."""
        value = self.get(key, default)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return int(value)
        m = _DURATION.fullmatch(str(value).strip().lower())
        if not m:
            raise ConfigError(f"configuration {key}: expected a duration such as 500 ms, 1 s or 2 min, got {value!r}")
        return int(float(m.group(1)) * _UNITS[m.group(2) or "ms"])

    def get_bytes(self, key: str, default: Any = None) -> int:
        """A memory size as Flink writes it (``64 mb``, ``1g``, ``512 kb``) or plain bytes."""
        value = self.get(key, default)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        m = _MEMORY.fullmatch(str(value).strip().lower())
        if not m:
            raise ConfigError(f"configuration {key}: expected a memory size such as 64 mb or 1 gb, got {value!r}")
        return int(float(m.group(1)) * _MEMORY_UNITS[(m.group(2) or "b")[0]])

    def unaligned_checkpoints(self) -> tuple[bool, int]:
        """(unaligned checkpoints on, aligned-checkpoint timeout in ms). Unaligned checkpoints are an
        EXACTLY_ONCE technique (as in Flink): asking for them with AT_LEAST_ONCE is an error."""
        on = self.get_bool(Options.CHECKPOINTING_UNALIGNED) or self.get_bool(
            Options.CHECKPOINTING_UNALIGNED + ".enabled")
        timeout = self.get_duration_ms(Options.CHECKPOINTING_ALIGNED_TIMEOUT)
        if on and str(self.get(Options.CHECKPOINTING_MODE)).upper() != "EXACTLY_ONCE":
            raise ConfigError(f"{Options.CHECKPOINTING_UNALIGNED}=true needs {Options.CHECKPOINTING_MODE}="
                              f"EXACTLY_ONCE (got {self.get(Options.CHECKPOINTING_MODE)}): at least once never aligns, "
                              f"so there is nothing for barriers to overtake")
        return on, timeout

    def checkpointing_enabled(self) -> bool:
        """Checkpoints are taken: an interval is set, and the job runs in STREAMING mode (in BATCH
        mode, as in Flink, a failed job reruns from its bounded input instead)."""
        return self.get_duration_ms(Options.CHECKPOINTING_INTERVAL) > 0 and not self.is_batch()

    def is_batch(self) -> bool:
        """The job runs in BATCH mode (as resolved when its graph was built: AUTOMATIC becomes one or the other)."""
        return str(self.get(Options.RUNTIME_MODE)).strip().upper() == "BATCH"

    def get_parallelism_overrides(self) -> dict[str, int]:
        """``pipeline.jobvertex-parallelism-overrides``: ``key:n,key:n`` (Flink's map syntax) or a mapping."""
        key = Options.PARALLELISM_OVERRIDES
        value = self.get(key)
        if value is None or value == "":
            return {}
        items = value.items() if isinstance(value, Mapping) else (
            item.rpartition(":")[::2] for item in str(value).split(",") if item.strip())
        out: dict[str, int] = {}
        for name, n in items:
            name = str(name).strip()
            try:
                parallelism = int(str(n).strip())
            except ValueError:
                parallelism = 0
            if not name or parallelism < 1:
                raise ConfigError(f"configuration {key}: {name or '(no operator)'}:{n} is no operator:parallelism "
                                  f"pair with a parallelism >= 1; expected e.g. 'counts:4,op3:2'")
            out[name] = parallelism
        return out

    def get_bool(self, key: str, default: bool = False) -> bool:
        value = self.get(key, default)
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("true", "1", "yes", "on"):
            return True
        if text in ("false", "0", "no", "off"):
            return False
        raise ConfigError(f"configuration {key}: expected true or false, got {value!r}")

    def validate(self) -> None:
        """Refuse values an enum-like option does not take, and keys that look like a typo of one of ours
        (an unknown key under one of our prefixes with a close match). Other unknown keys pass: they may be
        a Flink option this runtime does not use, or the job's own parameters."""
        for key, (normalise, allowed) in CHOICES.items():
            if key in self._values and self._values[key] is not None:
                value = self._values[key]
                text = value.value if hasattr(value, "value") else str(value)  # an Enum member
                if normalise(text.strip()) not in allowed:
                    raise ConfigError(f"configuration {key}: unknown value {value!r}; expected one of "
                                      f"{', '.join(allowed)}")
        from .urls import file_host_problem

        for key in (Options.CHECKPOINTING_DIR, Options.SAVEPOINT_DIR):
            problem = file_host_problem(str(self._values.get(key) or ""))
            if problem:
                raise ConfigError(f"configuration {key}: {problem}")
        known = _known_keys()
        prefixes = {k.rsplit(".", 1)[0] for k in known}
        for key in self._values:
            if key in known or key.startswith("spark.") or "." not in key or key.rsplit(".", 1)[0] not in prefixes:
                continue
            close = difflib.get_close_matches(key, known, n=1, cutoff=0.8)
            if close:
                raise ConfigError(f"configuration {key}: unknown option; did you mean {close[0]}?")

    def update(self, other: "Configuration | Mapping[str, Any]") -> "Configuration":
        values = other._values if isinstance(other, Configuration) else other
        self._values.update(values)
        return self

    def copy(self) -> "Configuration":
        return Configuration(self._values)

    def to_dict(self) -> dict[str, Any]:
        return dict(self._values)

    def spark_conf(self) -> dict[str, str]:
        return {k: str(v) for k, v in self._values.items() if k.startswith("spark.")}

    def __repr__(self) -> str:
        return f"Configuration({self._values!r})"


@cache
def _known_keys() -> frozenset[str]:
    return frozenset(v for k, v in vars(Options).items() if k.isupper() and isinstance(v, str)) | set(ALIASES)
