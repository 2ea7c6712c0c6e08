"""Restart strategies, named as in PyFlink: ``env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 1000))``.

Each strategy is written into the job configuration under Flink's
``restart-strategy.*`` keys; the job manager reads them back
(``cluster.failover``), so configuration files and ``--conf`` work alike.
With checkpointing on and no strategy set, the default is Flink's:
exponential delay, unlimited attempts.
"""

from __future__ import annotations

from typing import Any

from ..config import RESTART_STRATEGIES, Options
from .checkpointing import to_millis

TYPE = Options.RESTART_STRATEGY
FIXED_ATTEMPTS = Options.RESTART_FIXED_ATTEMPTS
FIXED_DELAY = Options.RESTART_FIXED_DELAY
EXP_INITIAL = Options.RESTART_EXP_INITIAL
EXP_MAX = Options.RESTART_EXP_MAX
EXP_MULTIPLIER = Options.RESTART_EXP_MULTIPLIER
EXP_RESET = Options.RESTART_EXP_RESET
EXP_JITTER = Options.RESTART_EXP_JITTER
EXP_ATTEMPTS = Options.RESTART_EXP_ATTEMPTS
RATE_MAX = Options.RESTART_RATE_MAX
RATE_INTERVAL = Options.RESTART_RATE_INTERVAL
RATE_DELAY = Options.RESTART_RATE_DELAY

NAMES = RESTART_STRATEGIES


class RestartStrategyConfiguration:
    def settings(self) -> dict[str, Any]:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.settings()})"


class NoRestartStrategyConfiguration(RestartStrategyConfiguration):
    def settings(self) -> dict[str, Any]:
        return {TYPE: "none"}


class FixedDelayRestartStrategyConfiguration(RestartStrategyConfiguration):
    def __init__(self, restart_attempts: int, delay_between_attempts: Any):
        if not isinstance(restart_attempts, int) or restart_attempts < 0:
            raise ValueError(f"fixed_delay_restart: restart_attempts must be an int >= 0, got {restart_attempts!r}")
        self.restart_attempts = restart_attempts
        self.delay_ms = to_millis(delay_between_attempts, "fixed_delay_restart delay")

    def settings(self) -> dict[str, Any]:
        return {TYPE: "fixed-delay", FIXED_ATTEMPTS: self.restart_attempts, FIXED_DELAY: self.delay_ms}


class FailureRateRestartStrategyConfiguration(RestartStrategyConfiguration):
    def __init__(self, failure_rate: int, failure_interval: Any, delay_interval: Any):
        if not isinstance(failure_rate, int) or failure_rate < 1:
            raise ValueError(f"failure_rate_restart: failure_rate must be a positive int, got {failure_rate!r}")
        self.failure_rate = failure_rate
        self.interval_ms = to_millis(failure_interval, "failure_rate_restart failure_interval")
        self.delay_ms = to_millis(delay_interval, "failure_rate_restart delay_interval")

    def settings(self) -> dict[str, Any]:
        return {TYPE: "failure-rate", RATE_MAX: self.failure_rate, RATE_INTERVAL: self.interval_ms,
                RATE_DELAY: self.delay_ms}


class ExponentialDelayRestartStrategyConfiguration(RestartStrategyConfiguration):
    def __init__(self, initial_backoff: Any = 1000, max_backoff: Any = 60_000, backoff_multiplier: float = 1.5,
                 reset_backoff_threshold: Any = 3_600_000, jitter_factor: float = 0.1):
        self.initial_ms = to_millis(initial_backoff, "exponential_delay_restart initial_backoff")
        self.max_ms = to_millis(max_backoff, "exponential_delay_restart max_backoff")
        if backoff_multiplier < 1:
            raise ValueError(f"exponential_delay_restart: backoff_multiplier must be >= 1, got {backoff_multiplier!r}")
        if not 0 <= jitter_factor <= 1:
            raise ValueError(f"exponential_delay_restart: jitter_factor must be in [0, 1], got {jitter_factor!r}")
        self.multiplier = float(backoff_multiplier)
        self.reset_ms = to_millis(reset_backoff_threshold, "exponential_delay_restart reset_backoff_threshold")
        self.jitter = float(jitter_factor)

    def settings(self) -> dict[str, Any]:
        return {TYPE: "exponential-delay", EXP_INITIAL: self.initial_ms, EXP_MAX: self.max_ms,
                EXP_MULTIPLIER: self.multiplier, EXP_RESET: self.reset_ms, EXP_JITTER: self.jitter}


class FallbackRestartStrategyConfiguration(RestartStrategyConfiguration):
    """Use whatever the configuration (or the default) says."""

    def settings(self) -> dict[str, Any]:
        return {}


class RestartStrategies:
    @staticmethod
    def no_restart() -> NoRestartStrategyConfiguration:
        return NoRestartStrategyConfiguration()

    @staticmethod
    def fixed_delay_restart(restart_attempts: int, delay_between_attempts: Any) -> FixedDelayRestartStrategyConfiguration:
        return FixedDelayRestartStrategyConfiguration(restart_attempts, delay_between_attempts)

    @staticmethod
    def failure_rate_restart(failure_rate: int, failure_interval: Any, delay_interval: Any) -> FailureRateRestartStrategyConfiguration:
        return FailureRateRestartStrategyConfiguration(failure_rate, failure_interval, delay_interval)

    @staticmethod
    def exponential_delay_restart(initial_backoff: Any = 1000, max_backoff: Any = 60_000, backoff_multiplier: float = 1.5,
                                  reset_backoff_threshold: Any = 3_600_000, jitter_factor: float = 0.1
                                  ) -> ExponentialDelayRestartStrategyConfiguration:
        return ExponentialDelayRestartStrategyConfiguration(initial_backoff, max_backoff, backoff_multiplier,
                                                            reset_backoff_threshold, jitter_factor)

    @staticmethod
    def fall_back_restart() -> FallbackRestartStrategyConfiguration:
        return FallbackRestartStrategyConfiguration()


__all__ = [
    "ExponentialDelayRestartStrategyConfiguration",
    "FailureRateRestartStrategyConfiguration",
    "FallbackRestartStrategyConfiguration",
    "FixedDelayRestartStrategyConfiguration",
    "NoRestartStrategyConfiguration",
    "RestartStrategies",
    "RestartStrategyConfiguration",
]
