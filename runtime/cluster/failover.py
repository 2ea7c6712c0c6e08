"""Restart strategies as decisions: given the failures so far, restart now, later, or give up.

Pure logic (no clock of its own, no I/O), so every strategy is tested without a
cluster. The job manager asks ``next_delay_ms(now_ms)`` after each failure.
"""

from __future__ import annotations

import random
from collections import deque

from ..api import restart as R
from ..config import ConfigError, Configuration, Options


class RestartStrategy:
    name = "none"

    def next_delay_ms(self, now_ms: int) -> int | None:
        """Delay before the next restart, or None when the job must fail."""
        return None

    def describe(self) -> str:
        return self.name


class NoRestart(RestartStrategy):
    name = "none"


class FixedDelay(RestartStrategy):
    name = "fixed-delay"

    def __init__(self, attempts: int, delay_ms: int):
        self.attempts = attempts
        self.delay_ms = delay_ms
        self.restarts = 0

    def next_delay_ms(self, now_ms: int) -> int | None:
        if self.restarts >= self.attempts:
            return None
        self.restarts += 1
        return self.delay_ms

    def describe(self) -> str:
        return f"fixed-delay ({self.attempts} attempts, {self.delay_ms} ms)"


class FailureRate(RestartStrategy):
    name = "failure-rate"

    def __init__(self, max_failures: int, interval_ms: int, delay_ms: int):
        self.max_failures = max_failures
        self.interval_ms = interval_ms
        self.delay_ms = delay_ms
        self.failures: deque[int] = deque()

    def next_delay_ms(self, now_ms: int) -> int | None:
        self.failures.append(now_ms)
        while self.failures and self.failures[0] <= now_ms - self.interval_ms:
            self.failures.popleft()
        if len(self.failures) > self.max_failures:
            return None
        return self.delay_ms

    def describe(self) -> str:
        return f"failure-rate ({self.max_failures} per {self.interval_ms} ms, delay {self.delay_ms} ms)"


class ExponentialDelay(RestartStrategy):
    """Flink's exponential delay: the backoff grows by ``multiplier`` up to ``max_ms``; after
    ``reset_ms`` without failure it starts again from ``initial_ms``."""

    name = "exponential-delay"

    def __init__(self, initial_ms: int, max_ms: int, multiplier: float, reset_ms: int, jitter: float,
                 attempts: int | None = None, rng: random.Random | None = None):
        self.initial_ms = initial_ms
        self.max_ms = max_ms
        self.multiplier = multiplier
        self.reset_ms = reset_ms
        self.jitter = jitter
        self.attempts = attempts
        self.rng = rng or random.Random()
        self.current_ms: float | None = None
        self.last_failure_ms: int | None = None
        self.attempts_since_reset = 0

    def next_delay_ms(self, now_ms: int) -> int | None:
        if self.last_failure_ms is not None and now_ms - self.last_failure_ms >= self.reset_ms:
            self.current_ms = None
            self.attempts_since_reset = 0
        self.last_failure_ms = now_ms
        if self.attempts is not None and self.attempts_since_reset >= self.attempts:
            return None
        self.attempts_since_reset += 1
        if self.current_ms is None:
            self.current_ms = float(self.initial_ms)
        else:
            self.current_ms = min(self.current_ms * self.multiplier, float(self.max_ms))
        spread = self.current_ms * self.jitter
        return max(0, int(self.current_ms + self.rng.uniform(-spread, spread)))

    def describe(self) -> str:
        return f"exponential-delay ({self.initial_ms} ms x{self.multiplier} up to {self.max_ms} ms)"


def from_configuration(config: Configuration) -> RestartStrategy:
    raw = config.get(Options.RESTART_STRATEGY)
    checkpointing = config.checkpointing_enabled()
    if raw is None or str(raw).strip() == "":
        # Flink's defaults: no restarts without checkpointing, exponential delay with it.
        kind = "exponential-delay" if checkpointing else "none"
    else:
        kind = R.NAMES.get(str(raw).strip().lower().replace("_", "-"))
        if kind is None:
            raise ConfigError(
                f"configuration {Options.RESTART_STRATEGY}: unknown restart strategy {raw!r}; "
                "use none, fixed-delay, exponential-delay or failure-rate"
            )
    if kind == "none":
        return NoRestart()
    if kind == "fixed-delay":
        return FixedDelay(config.get_int(R.FIXED_ATTEMPTS, 1), config.get_duration_ms(R.FIXED_DELAY, 1000))
    if kind == "failure-rate":
        return FailureRate(config.get_int(R.RATE_MAX, 1), config.get_duration_ms(R.RATE_INTERVAL, 60_000),
                           config.get_duration_ms(R.RATE_DELAY, 1000))
    attempts = config.get(R.EXP_ATTEMPTS)
    return ExponentialDelay(
        config.get_duration_ms(R.EXP_INITIAL, 1000), config.get_duration_ms(R.EXP_MAX, 60_000),
        config.get_float(R.EXP_MULTIPLIER, 1.5), config.get_duration_ms(R.EXP_RESET, 3_600_000),
        config.get_float(R.EXP_JITTER, 0.1), None if attempts is None else config.get_int(R.EXP_ATTEMPTS),
    )
