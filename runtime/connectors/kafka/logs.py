"""librdkafka's log through Python logging, each kind of line at most once per ``REPEAT_S``.

Left to itself, librdkafka prints to stderr: an unreachable bootstrap address gives a ``FAIL`` line per
reconnect (hundreds in the 10 s a writer waits for an answer) before the job's one line that says
what is wrong. Every confluent-kafka client of the connector is made with ``logger=`` this module's
logger: librdkafka's lines become log records, and a filter lets the same line (the parts that
change between repeats taken out: a client's number, milliseconds) through once per ``REPEAT_S``.
``streamjob run -v`` (``STREAMJOB_VERBOSE``) shows all of them, from INFO up.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import threading
import time
from typing import Any, Callable

NAME = "streamjob.kafka.librdkafka"
REPEAT_S = 10.0
VERBOSE_ENV = "STREAMJOB_VERBOSE"  # runtime/cluster/spark_log.py's; not imported: the tasks load this early

# What changes between two repeats of one line: which client says it, how long the attempt took, how
# many were suppressed by librdkafka itself.
_VARYING = (
    (re.compile(r"#(producer|consumer)-\d+\b"), r"#\1"),
    (re.compile(r"\(after \d+ms in state [A-Z_]+[^)]*\)"), ""),
    (re.compile(r"\d+ms"), "Nms"),
    (re.compile(r"\b\d+ (identical error|request)"), r"N \1"),
)


def repeat_key(text: str) -> str:
    """A line of librdkafka's without the parts that differ from one repeat to the next."""
    for pattern, replacement in _VARYING:
        text = pattern.sub(replacement, text)
    return " ".join(text.split())


class RepeatFilter(logging.Filter):
    """Lets a record through unless one with the same ``repeat_key`` passed within ``every`` seconds;
    the next one that passes says how many were held back."""

    def __init__(self, every: float = REPEAT_S, clock: Callable[[], float] = time.monotonic,
                 verbose: Callable[[], bool] = lambda: bool(os.environ.get(VERBOSE_ENV))):
        super().__init__()
        self.every, self.clock, self.verbose = every, clock, verbose
        self._passed: dict[tuple[int, str], float] = {}
        self._held: dict[tuple[int, str], int] = {}
        self._lock = threading.Lock()  # librdkafka's callbacks come from each client's polling thread

    def filter(self, record: logging.LogRecord) -> bool:
        if self.verbose():
            return True
        text = record.getMessage()
        if record.levelno <= logging.WARNING and text.endswith(": retrying"):
            # A transient answer the client retries by itself (a coordinator still loading after the broker's
            # start: "Failed to acquire transactional PID ...: retrying"); one that never ends fails the call
            # that waits for it, with its reason.
            return False
        key = (record.levelno, repeat_key(text))
        now = self.clock()
        with self._lock:
            last = self._passed.get(key)
            if last is not None and now - last < self.every:
                self._held[key] = self._held.get(key, 0) + 1
                return False
            if len(self._passed) > 10_000:  # lines that vary in ways repeat_key does not know: bounded memory
                self._passed.clear()
            self._passed[key] = now
            held = self._held.pop(key, 0)
        if held:  # (no "%" added: the message may still be formatted with its args)
            record.msg = f"{record.msg} ({held} more like it not shown)"
        return True


_lock = threading.Lock()


def librdkafka_logger() -> logging.Logger:
    """The logger every confluent-kafka client of the connector gets (``logger=``): WARNING and up, each
    line at most once per ``REPEAT_S``, on stderr (the task's, which Spark shows); with ``-v`` all of it
    from INFO up. A program that configures the logger itself (a handler of its own) keeps its choice."""
    log = logging.getLogger(NAME)
    with _lock:
        if not getattr(log, "_streamjob_configured", False):
            log._streamjob_configured = True  # type: ignore[attr-defined]
            log.addFilter(RepeatFilter())
            if not log.handlers:
                handler = logging.StreamHandler(sys.stderr)
                handler.setFormatter(logging.Formatter("Kafka client (librdkafka) %(levelname)s %(message)s"))
                log.addHandler(handler)
                log.propagate = False
        if log.level == logging.NOTSET or getattr(log, "_streamjob_level", False):
            log.setLevel(logging.INFO if os.environ.get(VERBOSE_ENV) else logging.WARNING)
            log._streamjob_level = True  # type: ignore[attr-defined]
    return log


def with_logger(conf: dict[str, Any]) -> dict[str, Any]:
    """A client configuration with librdkafka's log routed through ``librdkafka_logger`` (a ``logger``
    the user set stays)."""
    return conf if "logger" in conf else {**conf, "logger": librdkafka_logger()}
